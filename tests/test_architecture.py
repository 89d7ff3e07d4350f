"""The architecture check: import-linter's contracts in pyproject.toml (no import cycles, counting
type-only imports; the executors never import the worker that wires them) and
importlinter-layers.ini (the layers api, runtime, cluster, ops; connectors, multilang and
streamparse on the API only)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_contracts_are_kept():
    lint_imports = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    configs = [os.path.join(ROOT, "pyproject.toml"), os.path.join(ROOT, "importlinter-layers.ini")]
    result = subprocess.run([lint_imports, "--no-cache", *configs], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
