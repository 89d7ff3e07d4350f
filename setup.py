"""Builds Squall's data path as C extensions, with Cython, from the same ``.py`` files.

The modules are listed in ``squall/compiled.py`` (which says why and how the choice is made at
import). Everything else about the package is in ``pyproject.toml``. Without a working C
compiler, or with ``SQUALL_NO_EXTENSIONS=1``, the build prints one warning and installs pure
Python, which is complete.

Cython compiles each module with the ``.pxd`` declarations beside it, if any: they make its
classes C structs with typed fields, the one place types narrow anything (``annotation_typing``
is off: an annotation documents, it never narrows what a function accepts), so the compiled and
the pure data path behave alike.
"""

import json
import os
import runpy
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
compiled = runpy.run_path(os.path.join(HERE, "squall", "compiled.py"))


def _warn(message: str) -> None:
    print(f"WARNING: squall: {message}; the data path will run as pure Python (slower, complete)",
          file=sys.stderr)


class BuildDataPath(build_ext):
    """``build_ext`` that cythonizes first, and falls back to pure Python without a C compiler."""

    def build_extensions(self) -> None:
        if compiled["extensions_disabled"]():
            _warn(f"{compiled['NO_EXTENSIONS_ENV']} is set, no extensions built")
            return
        if not self._compiler_works():
            _warn("no working C compiler, no extensions built")
            return
        from Cython.Build import cythonize

        generated = cythonize(
            self.extensions, quiet=True, nthreads=os.cpu_count() or 1,
            compiler_directives={"language_level": "3", "annotation_typing": False, "binding": True},
        )
        # the C sources go into the Extensions setuptools has already prepared (it keeps its own
        # attributes on them)
        c_sources = {ext.name: ext.sources for ext in generated}
        for ext in self.extensions:
            ext.sources = c_sources[ext.name]
        self.parallel = self.parallel or os.cpu_count()
        super().build_extensions()
        self._record_sources()

    def _compiler_works(self) -> bool:
        with tempfile.TemporaryDirectory() as tmp:
            probe = os.path.join(tmp, "probe.c")
            with open(probe, "w") as f:
                f.write("int squall_probe(void) { return 0; }\n")
            try:
                self.compiler.compile([probe], output_dir=tmp)
            except Exception:  # distutils raises CompileError, or OSError when cc is missing
                return False
        return True

    def _record_sources(self) -> None:
        # What squall/compiled.py compares with the .py files at import, to skip a stale extension.
        digests = {name: compiled["source_digest"](compiled["source_path"](name, os.path.join(HERE, "squall")))
                   for name in compiled["DATA_PATH_MODULES"]}
        # into the wheel's tree, and next to the sources when the extensions go there too
        # (build_ext --inplace, pip install -e)
        roots = [self.build_lib] + ([HERE] if self.inplace or getattr(self, "editable_mode", False) else [])
        for root in roots:
            os.makedirs(os.path.join(root, "squall"), exist_ok=True)
            with open(os.path.join(root, "squall", compiled["SOURCES_FILE"]), "w", encoding="utf-8") as f:
                json.dump(digests, f, indent=1, sort_keys=True)


setup(
    ext_modules=[Extension(name, [compiled["source_path"](name, "squall")]) for name in compiled["DATA_PATH_MODULES"]],
    cmdclass={"build_ext": BuildDataPath},
)
