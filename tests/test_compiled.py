"""The compiled data path: built from the same sources, switched off by SQUALL_NO_EXTENSIONS, never stale.

What is checked: under CI every data-path module runs compiled (so a broken build cannot
silently test pure Python only); ``SQUALL_NO_EXTENSIONS=1`` loads every one from source and
``squall --version`` and ``squall plan`` say which runs; an extension built from other source
than the ``.py`` next to it is skipped; and the build falls back to pure Python, with one
warning, without a C compiler.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import squall_cli
from squall import compiled

REPO = Path(__file__).resolve().parents[1]
EXTENSION = importlib.machinery.EXTENSION_SUFFIXES[0]


def _built() -> bool:
    return bool(compiled.compiled_modules())


@pytest.fixture
def need_extensions():
    if compiled.extensions_disabled():
        pytest.skip(f"{compiled.NO_EXTENSIONS_ENV} is set: this run is the pure-Python one")
    if os.environ.get("CI") != "true":  # CI builds them fresh; a checkout may have edited one since
        if not _built():
            pytest.skip("no extensions built here (pip install -e . with a C compiler builds them)")
        if compiled.stale_modules():
            pytest.skip(f"{', '.join(compiled.stale_modules())} changed since built (pip install -e . rebuilds)")


def test_every_data_path_module_runs_compiled(need_extensions):
    for name in compiled.DATA_PATH_MODULES:
        module = importlib.import_module(name)
        assert isinstance(module.__loader__, importlib.machinery.ExtensionFileLoader), \
            f"{name} runs from {module.__file__}"
    assert compiled.describe() == f"data path: compiled (Cython, {len(compiled.DATA_PATH_MODULES)} modules)"


def test_version_and_plan_say_compiled(need_extensions):
    assert "; data path: compiled (Cython" in squall_cli("--version").stdout
    plan = squall_cli("plan", "examples/wordcount.py")
    assert plan.returncode == 0, plan.stderr
    assert any(line.startswith("data path: compiled (Cython") for line in plan.stdout.splitlines())


def test_no_extensions_loads_every_module_from_source():
    names = ", ".join(repr(name) for name in compiled.DATA_PATH_MODULES)
    probe = ("import importlib, squall.compiled as c\n"
             f"print([importlib.import_module(n).__file__ for n in ({names})])\n"
             "print(c.describe())\n")
    env = {**os.environ, compiled.NO_EXTENSIONS_ENV: "1"}
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    files, line = proc.stdout.splitlines()
    assert all(path.endswith(".py") for path in eval(files)), files
    assert line == "data path: pure Python (SQUALL_NO_EXTENSIONS is set)"
    assert "; data path: pure Python (SQUALL_NO_EXTENSIONS is set)" in squall_cli("--version", env=env).stdout
    plan = squall_cli("plan", "examples/wordcount.py", env=env)
    assert "data path: pure Python (SQUALL_NO_EXTENSIONS is set)" in plan.stdout.splitlines()


def test_pure_python_runs_where_cython_is_not_installed():
    # Cython builds the extensions; a machine that only runs Squall (a packed virtualenv shipped
    # to Spark's executors) may lack it: every data-path module still imports and works
    names = ", ".join(repr(name) for name in compiled.DATA_PATH_MODULES)
    probe = ("import importlib, sys\n"
             "sys.modules['cython'] = None  # import cython raises ImportError\n"
             f"mods = [importlib.import_module(n) for n in ({names})]\n"
             "from squall.utils.u64_map import U64Map\n"
             "from squall.utils.rand import rand64\n"
             "m = U64Map(); m.xor(3, 5); m.xor(3, 1)\n"
             "print(m.items(), 0 <= rand64() < 2**64)\n")
    env = {**os.environ, compiled.NO_EXTENSIONS_ENV: "1"}
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[(3,", "4)]", "True"]


@pytest.mark.parametrize("value, disabled", [("", False), ("0", False), ("no", False), ("1", True), ("yes", True)])
def test_no_extensions_values(monkeypatch, value, disabled):
    monkeypatch.setenv(compiled.NO_EXTENSIONS_ENV, value)
    assert compiled.extensions_disabled() is disabled


def test_an_extension_built_from_other_source_is_stale(tmp_path):
    package = tmp_path / "squall"
    (package / "utils").mkdir(parents=True)
    (package / "api").mkdir()
    tuple_py, queue_py = package / "api" / "tuple.py", package / "utils" / "batch_queue.py"
    tuple_py.write_text("X = 1\n")
    queue_py.write_text("Y = 1\n")
    for source in (tuple_py, queue_py):
        source.with_suffix(EXTENSION).write_bytes(b"")  # only its presence is read
    built = {"squall.api.tuple": compiled.source_digest(str(tuple_py)),
             "squall.utils.batch_queue": compiled.source_digest(str(queue_py))}
    (package / compiled.SOURCES_FILE).write_text(json.dumps(built))
    assert compiled.stale_modules(str(package)) == []
    tuple_py.with_suffix(".pxd").write_text("cdef class Tuple: pass\n")  # declarations added after the build
    assert compiled.stale_modules(str(package)) == ["squall.api.tuple"]
    (package / compiled.SOURCES_FILE).write_text(json.dumps({**built, "squall.api.tuple": compiled.source_digest(
        str(tuple_py))}))
    assert compiled.stale_modules(str(package)) == []
    queue_py.write_text("Y = 2\n")  # edited after the build
    assert compiled.stale_modules(str(package)) == ["squall.utils.batch_queue"]
    (package / compiled.SOURCES_FILE).unlink()  # built by something that did not record its sources
    assert compiled.stale_modules(str(package)) == ["squall.api.tuple", "squall.utils.batch_queue"]


def test_the_data_path_runs_compiled_whole_or_not_at_all(tmp_path, monkeypatch):
    # the compiled modules share their classes at the C level: one stale or missing extension
    # sends every module to its source
    monkeypatch.delenv(compiled.NO_EXTENSIONS_ENV, raising=False)
    monkeypatch.setattr(compiled, "DATA_PATH_MODULES", ("squall.api.tuple", "squall.utils.batch_queue"))
    package = tmp_path / "squall"
    (package / "utils").mkdir(parents=True)
    (package / "api").mkdir()
    tuple_py, queue_py = package / "api" / "tuple.py", package / "utils" / "batch_queue.py"
    for source in (tuple_py, queue_py):
        source.write_text("X = 1\n")
    assert compiled.pure_python_reason(str(package)) == "no extensions built: pip install needs a C compiler"
    tuple_py.with_suffix(EXTENSION).write_bytes(b"")
    assert compiled.pure_python_reason(str(package)) == "squall.utils.batch_queue not built"
    queue_py.with_suffix(EXTENSION).write_bytes(b"")
    (package / compiled.SOURCES_FILE).write_text(json.dumps(
        {name: compiled.source_digest(str(path)) for name, path in (("squall.api.tuple", tuple_py),
                                                                     ("squall.utils.batch_queue", queue_py))}))
    assert compiled.pure_python_reason(str(package)) is None
    queue_py.with_suffix(".pxd").write_text("cdef class Q: pass\n")
    assert compiled.pure_python_reason(str(package)) == "squall.utils.batch_queue changed since built"
    monkeypatch.setenv(compiled.NO_EXTENSIONS_ENV, "1")
    assert compiled.pure_python_reason(str(package)) == "SQUALL_NO_EXTENSIONS is set"


@pytest.mark.parametrize("env, warning", [
    ({"CC": "/nonexistent/cc"}, "no working C compiler, no extensions built"),
    ({compiled.NO_EXTENSIONS_ENV: "1"}, "SQUALL_NO_EXTENSIONS is set, no extensions built"),
], ids=["no C compiler", "SQUALL_NO_EXTENSIONS"])
def test_build_falls_back_to_pure_python_with_one_warning(tmp_path, env, warning):
    # the pure-Python test run sets the switch itself: each case builds with only its own cause
    without_switch = {k: v for k, v in os.environ.items() if k != compiled.NO_EXTENSIONS_ENV}
    proc = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
         "--build-temp", str(tmp_path / "temp")],
        cwd=REPO, env={**without_switch, **env}, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("WARNING: squall:")]
    assert warnings == [f"WARNING: squall: {warning}; the data path will run as pure Python (slower, complete)"]
    assert not list((tmp_path / "lib").rglob("*.so"))
