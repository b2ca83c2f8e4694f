"""The examples run as documented (the hicache deploy example on the embedded node)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_hicache_deploy_example_verifies(tmp_path: Path) -> None:
    env = dict(os.environ, AGENT_TOOLS_STATE_DIR=str(tmp_path))
    res = subprocess.run([sys.executable, str(ROOT / "examples" / "hicache_deploy.py"), "--load-s", "2"],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert res.stdout.splitlines()[-1].startswith("RESULT: verified")
    assert "> restart_service(" in res.stdout and "> job_status(" in res.stdout
