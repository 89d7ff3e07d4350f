"""``SparkCluster``: runs topologies on a Spark cluster, the driver playing Nimbus.

Storm's daemons map onto Spark's as follows: Nimbus → the driver (this process: assignment,
heartbeats, figures, errors, activate/deactivate/kill); a supervisor's worker slots → the
executors' task slots (one worker = one task of the topology's barrier job); ZooKeeper → the
driver's memory, for now (a topology does not outlive its driver).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import site
import sys
import sysconfig
import uuid
import zipfile
from typing import Any

from squall.api.config import Config, squall_home
from squall.api.storm_topology import StormTopology
from squall.cluster.nimbus import Nimbus
from squall.cluster.spark.java import ensure_java
from squall.cluster.spark.slots import registered_slots
from squall.cluster.spark.master import SparkTopologyMaster
from squall.runtime.assignment import Assignment
from squall.runtime.cluster_state import TopologyState
from squall.utils.processes import process_dir

DEFAULT_MASTER = "local[*]"
_LOCAL_MASTER = re.compile(r"local(\[.*\])?$|local-cluster\[.*\]$")

# Spark settings Squall needs, under the user's: a barrier stage that cannot get its slots
# fails in seconds (Spark's default retries for 10 minutes).
_SESSION_DEFAULTS = {
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "20",
    # a topology's stage runs until it is killed: a progress bar would never move
    "spark.ui.showConsoleProgress": "false",
}
# ... and, when the cluster is this machine, everything listens on the loopback interface
# (the driver's web UI too: see start_session).
_LOCAL_DEFAULTS = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


class SparkSetupError(RuntimeError):
    """Spark cannot run Squall's topologies as configured; the message says what to change."""


def start_session(master: str, spark_conf: dict[str, str], driver_log: str | None = None) -> Any:
    """A new SparkSession for Squall: Java found (:func:`ensure_java`), Squall's settings
    under ``spark_conf``. Before the driver's JVM starts it sets, for the whole process:

    * ``PYSPARK_PYTHON``, which PySpark reads (not ``spark.pyspark.python``) when the context
      starts outside ``spark-submit``: to ``spark.pyspark.python`` when that is set (in
      ``spark_conf`` or ``spark-defaults.conf``; it wins over the variable, as in
      ``spark-submit``), else, unless already set, to this interpreter (which has Squall's
      dependencies; right on hosts that share its path);
    * ``SPARK_LOCAL_IP``, unless already set, where Spark's web UIs would otherwise listen on
      every interface: 127.0.0.1 for masters on this machine, else the driver's
      ``spark.driver.bindAddress`` or ``spark.driver.host``. With neither of those, the
      driver's UI is off unless ``spark.ui.enabled`` asks for it.

    The driver JVM's own output (its start-up notices, Spark's log) goes to the file
    ``driver_log`` when given, else to this process's.

    Raises :class:`SparkSetupError` for dynamic allocation, or if a SparkContext already runs
    in this process."""
    ensure_java()
    conf = dict(_SESSION_DEFAULTS)
    if _LOCAL_MASTER.match(master):
        conf.update(_LOCAL_DEFAULTS)
    conf.update(spark_conf)
    prepare_driver(conf)
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    active = SparkContext._active_spark_context
    if active is not None:  # getOrCreate would hand it back, whatever its master and settings
        raise SparkSetupError(f"a SparkContext ({active.master}) already runs in this process: pass its "
                              "session as SparkCluster(spark=...), or stop it first")
    name = conf.pop("spark.app.name", "squall")
    with SparkContext._lock:
        if SparkContext._gateway is None:
            # The driver's JVM in a session of its own (PySpark would start it in this process's
            # group): a signal to the group (timeout, a supervisor's SIGTERM) reaches Squall,
            # which stops the topology in order, then the JVM. The JVM still ends with this
            # process: it exits when its stdin, a pipe from here, closes.
            settings = SparkConf(loadDefaults=False).setMaster(master).setAppName(name)
            settings.setAll((key, str(value)) for key, value in conf.items())
            popen: dict[str, Any] = {"start_new_session": True}
            if driver_log is not None:
                output = open(driver_log, "ab")  # the JVM writes to it for the life of this process
                popen.update(stdout=output, stderr=output)
            SparkContext._gateway = launch_gateway(settings, popen_kwargs=popen)
            SparkContext._jvm = SparkContext._gateway.jvm
    builder = SparkSession.builder.master(master).appName(name)
    for key, value in conf.items():
        builder = builder.config(key, str(value))
    return builder.getOrCreate()


def prepare_driver(conf: dict[str, str]) -> None:
    """Set ``PYSPARK_PYTHON`` and ``SPARK_LOCAL_IP`` in this process's environment, and turn the
    driver's UI off in ``conf`` when it would listen on every interface, as
    :func:`start_session` describes; ``conf`` is what the session gets (above
    ``spark-defaults.conf``). Raises :class:`SparkSetupError` for dynamic allocation."""
    effective = {**spark_defaults(), **conf}
    if str(effective.get("spark.dynamicAllocation.enabled", "false")).lower() == "true":
        raise SparkSetupError(_DYNAMIC_ALLOCATION)
    if effective.get("spark.pyspark.python"):
        os.environ["PYSPARK_PYTHON"] = effective["spark.pyspark.python"]
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if "SPARK_LOCAL_IP" not in os.environ:
        driver_address = effective.get("spark.driver.bindAddress") or effective.get("spark.driver.host")
        if driver_address:
            os.environ["SPARK_LOCAL_IP"] = driver_address
        elif "spark.ui.enabled" not in effective:
            conf["spark.ui.enabled"] = "false"


def spark_defaults() -> dict[str, str]:
    """The settings of the ``spark-defaults.conf`` that the driver's JVM will read
    (``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``, SPARK_HOME defaulting to the pyspark
    package), in Java properties' ``key value`` / ``key=value`` form; {} without one."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if conf_dir is None:
        home = os.environ.get("SPARK_HOME")
        if home is None:
            spec = importlib.util.find_spec("pyspark")
            if spec is None or spec.origin is None:
                return {}
            home = os.path.dirname(spec.origin)
        conf_dir = os.path.join(home, "conf")
    try:
        with open(os.path.join(conf_dir, "spark-defaults.conf")) as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    settings = {}
    for line in lines:
        match = _PROPERTY.match(line)
        if match and not line.lstrip().startswith(("#", "!")):
            settings[match["key"]] = match["value"].strip()
    return settings


_PROPERTY = re.compile(r"\s*(?P<key>[^\s=:]+)\s*[=:\s]\s*(?P<value>.*)$")


_DYNAMIC_ALLOCATION = (
    "spark.dynamicAllocation.enabled is true, but a topology's workers run as one barrier stage, which "
    "Spark cannot run with dynamic allocation: set spark.dynamicAllocation.enabled=false"
)


def _local_modules() -> dict[str, str]:
    """Top-level modules and packages this process imported from outside the Python
    installation (the user's own code, next to the topology file or in the working
    directory): name → file or package directory."""
    installed = {os.path.realpath(p) for p in (*site.getsitepackages(), site.getusersitepackages(),
                                                *sysconfig.get_paths().values()) if p}
    found = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if "." in name or name == "__main__" or not path or not path.endswith(".py"):
            continue
        path = os.path.realpath(path)
        if any(path.startswith(root + os.sep) for root in installed):
            continue
        found[name] = os.path.dirname(path) if os.path.basename(path) == "__init__.py" else path
    return found


def _zip_modules(modules: dict[str, str], path: str) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, source in sorted(modules.items()):
            if os.path.isfile(source):
                archive.write(source, f"{name}.py")
                continue
            for folder, dirs, files in os.walk(source):
                dirs[:] = [d for d in dirs if d != "__pycache__"]
                for file in files:
                    if file.endswith(".py"):
                        full = os.path.join(folder, file)
                        archive.write(full, os.path.join(name, os.path.relpath(full, source)))


class SparkCluster(Nimbus):
    """Runs topologies on Spark, with the same interface as
    :class:`~squall.cluster.local_cluster.LocalCluster`.

    ``SparkCluster()`` starts an embedded Spark (``local[*]``); ``master`` names another
    (``local[N]``, ``local-cluster[N,cores,memMB]``, ``spark://host:port``, ``yarn``, ...)
    and ``spark_conf`` adds Spark settings. Or pass an existing ``SparkSession`` as
    ``spark`` (then neither of the others): it is left running at :meth:`shutdown`.
    ``driver_log``: a file for the output of the driver's JVM (default: this process's).

    Each topology is one Spark job whose barrier stage has one task per worker
    (``topology.workers``), so the cluster needs that many free task slots; workers listen
    on ephemeral ports of their executor's host (``supervisor.slots.ports`` does not apply).
    The submitting process must stay up: it is the topology's master. Squall and the
    modules this process imported from outside the Python installation are shipped to the
    executors (``addPyFile``); the executors' Python needs Squall's dependencies (pyzmq,
    msgpack, cloudpickle): see the README for packing a virtualenv with ``spark.archives``.

    Raises :class:`SparkSetupError` for dynamic allocation, and
    :class:`~squall.cluster.spark.java.JavaNotFoundError` when no Java 17/21 is found.
    """

    def __init__(self, master: str | None = None, spark: Any = None,
                 spark_conf: dict[str, Any] | None = None, driver_log: str | None = None) -> None:
        if spark is not None and (master is not None or spark_conf):
            raise ValueError("SparkCluster: pass either an existing SparkSession (spark) or master/spark_conf")
        super().__init__()
        self._owns_session = spark is None
        self.spark = (spark if spark is not None
                      else start_session(master or DEFAULT_MASTER, spark_conf or {}, driver_log))
        self._sc = self.spark.sparkContext
        if self._sc.getConf().get("spark.dynamicAllocation.enabled", "false").lower() == "true":
            if self._owns_session:  # enabled in spark-defaults.conf
                self.spark.stop()
            raise SparkSetupError(_DYNAMIC_ALLOCATION)
        # under SQUALL_HOME, not /tmp: a driver killed leaves it, the next one removes it
        self._ship_dir = str(process_dir(squall_home() / "spark" / "pyfiles"))
        self._stopped = False

    @property
    def master(self) -> str:
        """The Spark master URL, as Spark reports it (``local[*]``, ``spark://...``)."""
        return self._sc.master

    def _configure(self, conf: dict[str, Any]) -> dict[str, Any]:
        return {**conf, Config.SUPERVISOR_SLOTS_PORTS: []}  # executors are shared: ephemeral ports

    def _make_runner(self, name: str, topology: StormTopology, conf: dict[str, Any], assignment: Assignment,
                     state: TopologyState) -> SparkTopologyMaster:
        self._ship_code()
        # the slots of the other topologies (a rebalanced one gives its own back first)
        held = {n: len(r.runner.slots) for n, r in self._topologies.items()
                if n != name and isinstance(r.runner, SparkTopologyMaster) and r.runner.failure is None}
        return SparkTopologyMaster(name, topology, conf, assignment, state, self._sc, held)

    def autoscale_slots(self, name: str) -> int | None:
        """The cluster's task slots less those this driver's other topologies hold."""
        held = sum(len(r.runner.slots) for n, r in self._topologies.items()
                   if n != name and isinstance(r.runner, SparkTopologyMaster) and r.runner.failure is None)
        return registered_slots(self._sc) - held

    def _ship_code(self) -> None:
        """Send Squall and the user's modules to the executors. A new archive each time, of a
        name never used before (Spark refuses a second file of the same name, and a session may
        outlive this cluster): a later topology may import more modules."""
        import squall

        modules = {**_local_modules(), "squall": os.path.dirname(squall.__file__)}
        path = os.path.join(self._ship_dir, f"squall-code-{uuid.uuid4().hex}.zip")
        _zip_modules(modules, path)
        self._sc.addPyFile(path)

    def shutdown(self) -> None:
        """Kill every topology at once (no wait); stop the SparkSession if this cluster started
        it. Calling it again does nothing."""
        if self._stopped:
            return
        self._stopped = True
        try:
            super().shutdown()
        finally:
            if self._owns_session:
                self._stop_session()
                # (a session that lives on keeps refreshing its executors' copies from them)
                shutil.rmtree(self._ship_dir, ignore_errors=True)

    def _stop_session(self) -> None:
        master, app_id = self._sc.master, self._sc.applicationId
        self.spark.stop()
        if master.startswith("local-cluster["):
            # its executors' work directory is in SPARK_HOME (the pyspark package) whatever the
            # settings: do not leave one behind per run
            import pyspark

            shutil.rmtree(os.path.join(os.path.dirname(pyspark.__file__), "work", app_id), ignore_errors=True)
