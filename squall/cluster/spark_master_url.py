"""Spark master URLs: checked before Spark starts, and the task slots of the masters that run
on this machine.

Spark checks a master URL only once its JVM is up: ``spark-submit`` refuses a scheme it does
not know ("Master must either be yarn or start with spark, k8s, or local"), and the
SparkContext a URL of a known scheme it cannot parse ("Could not parse Master URL",
"Invalid master URL"); from PySpark either comes as a Java stack trace after seconds. These are
Spark 4's rules, checked here in Python so that ``squall submit --master`` fails at once, on
one line. Spark 4 dropped Mesos support: ``mesos://`` is refused too.
"""

from __future__ import annotations

import os
import re
import urllib.parse

# Spark's SparkMasterRegex, anchored as Scala's pattern match anchors it
_LOCAL = re.compile(r"local(\[(?P<threads>[0-9]+|\*)(\s*,\s*[0-9]+)?\])?")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*([0-9]+)\s*,\s*([0-9]+)\s*,\s*([0-9]+)\s*]")

EXPECTED = ("local, local[N], local[*], local[N,MAX_FAILURES], local-cluster[WORKERS,CORES,MEMORY_MB], "
            "spark://HOST:PORT[,HOST:PORT...], yarn or k8s://[https://]HOST[:PORT]")


def check_spark_master(url: str) -> str:
    """``url`` if Spark 4 can run on it; else ``ValueError``, its message one line saying what
    is wrong and which URLs Spark takes."""
    if url == "yarn":
        return url
    local = _LOCAL.fullmatch(url)
    if local is not None:
        if local["threads"] is not None and local["threads"] != "*" and int(local["threads"]) == 0:
            raise ValueError(f"{url!r}: a local master needs at least 1 thread")
        return url
    cluster = _LOCAL_CLUSTER.fullmatch(url)
    if cluster is not None:
        if 0 in (int(n) for n in cluster.groups()):
            raise ValueError(f"{url!r}: local-cluster[WORKERS,CORES,MEMORY_MB] needs numbers >= 1")
        return url
    if url.startswith("spark://"):
        for master in url.removeprefix("spark://").split(","):
            _check_standalone(url, master)
        return url
    if url.startswith("k8s://"):
        _check_kubernetes(url)
        return url
    if url.startswith("mesos://"):
        raise ValueError(f"{url!r}: Spark 4 dropped Mesos support; expected {EXPECTED}")
    raise ValueError(f"{url!r} is not a Spark master URL; expected {EXPECTED}")


def is_embedded(url: str) -> bool:
    """Whether ``url`` runs Spark in the driver's own JVM (``local``, ``local[N]``...): the driver is
    the only executor, all of its task slots there from the start."""
    return _LOCAL.fullmatch(url) is not None


def local_task_slots(url: str, task_cpus: int = 1) -> int | None:
    """The task slots a master Spark runs on this machine gives (``local``: 1, ``local[N]``: N,
    ``local[*]``: the cores, ``local-cluster[W,C,M]``: W x C, each task taking ``task_cpus`` of
    them: ``spark.task.cpus``), known before Spark starts; None for a cluster's master. ``url``
    is one :func:`check_spark_master` took."""
    local = _LOCAL.fullmatch(url)
    if local is not None:
        threads = local["threads"]
        cores = 1 if threads is None else (os.cpu_count() or 1) if threads == "*" else int(threads)
        return cores // task_cpus
    cluster = _LOCAL_CLUSTER.fullmatch(url)
    if cluster is not None:
        return int(cluster[1]) * (int(cluster[2]) // task_cpus)
    return None


def _check_standalone(url: str, master: str) -> None:
    """One ``HOST:PORT`` of a ``spark://`` URL, as Spark's ``Utils.extractHostPortFromSparkUrl``
    takes it: a host and a port, nothing else."""
    try:
        parts = urllib.parse.urlsplit("spark://" + master)
        valid = (bool(parts.hostname) and parts.port is not None
                 and not (parts.path or parts.query or parts.fragment or parts.username))
    except ValueError:  # a port that is not a number or out of range, a broken IPv6 address
        valid = False
    if not valid:
        raise ValueError(f"{url!r}: expected spark://HOST:PORT[,HOST:PORT...] (a standalone master's host "
                         f"and port, usually 7077), got {master!r}")


def _check_kubernetes(url: str) -> None:
    """A ``k8s://`` URL as Spark's ``checkAndGetK8sMasterUrl`` takes it: the API server, its
    scheme http or https (https if none)."""
    server = url.removeprefix("k8s://")
    scheme, sep, rest = server.partition("://")
    if not server or (sep and (scheme not in ("http", "https") or not rest)):
        raise ValueError(f"{url!r}: expected k8s://[https://]HOST[:PORT], the Kubernetes API server")
