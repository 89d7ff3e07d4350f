"""The architecture check: import-linter's contracts in pyproject.toml (no import cycles; the
data path never imports the daemons, the DSL or the command line)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_contracts_are_kept():
    lint_imports = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    result = subprocess.run([lint_imports, "--config", os.path.join(ROOT, "pyproject.toml")], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
