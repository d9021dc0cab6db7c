"""tests.helpers.require: a missing prerequisite skips locally and fails under CI=true."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CASE = '''
from tests.helpers import require

def test_claim():
    require(False, "the oracle is absent")
'''


@pytest.mark.parametrize("ci,outcome", [("true", "1 failed"), ("", "1 skipped")])
def test_missing_prerequisite_fails_only_under_ci(tmp_path, ci, outcome):
    (tmp_path / "test_case.py").write_text(CASE)
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                           str(tmp_path / "test_case.py")], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert outcome in proc.stdout, proc.stdout
    assert "the oracle is absent" in proc.stdout
