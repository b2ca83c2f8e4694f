"""Issue 15 (qa15 finding 14): an error of `agent-tools jobs HOST` reads as every command's error does, and a file
that cannot be read is said without the host shell's own wording."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit

from .conftest import ssh_host_for
from .sshd import RealSshd

REPO = Path(__file__).resolve().parent.parent


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"),
           "HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "agent_tools.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_jobs_of_a_host_that_errs_prints_an_error_line_not_json(tmp_path: Path) -> None:
    res = _cli(tmp_path, "jobs", "no-such-host-qa15")
    assert res.returncode == 1
    said = res.stdout + res.stderr
    assert said.lstrip().startswith("error"), said  # was: a raw JSON object
    assert "no-such-host-qa15" in said and not said.lstrip().startswith("{"), said
    as_json = _cli(tmp_path, "jobs", "no-such-host-qa15", "--json")
    assert as_json.returncode == 1 and as_json.stdout.lstrip().startswith("{")  # --json still gets the object


async def test_read_file_of_a_missing_path_says_so_without_the_shells_words(real_sshd: RealSshd,
                                                                            tmp_path: Path) -> None:
    sshd = ssh_host_for(real_sshd)
    tk = Toolkit(HostRegistry({real_sshd.alias: sshd}), journal=Journal(tmp_path / "j.sqlite3"))
    try:
        for host in ("local", real_sshd.alias):
            out = await tk.dispatch("read_file", {"host": host, "path": "/nonexistent-qa15"})
            assert out["outcome"] == "error" and out["kind"] == "not_found", out
            assert out["message"] == f"cannot read /nonexistent-qa15 on {host}: no such file or directory", out
    finally:
        await tk.aclose()
