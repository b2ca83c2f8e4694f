"""qa12 #11 and #19: what `agent-tools jobs` shows a person: a restart's readiness and a job's leftovers next to
its state, and an error as text (JSON only with --json). Real parts: the CLI process and its journal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agent_tools.jobs.journal import JobRecord, Journal, now

REPO = Path(__file__).resolve().parents[1]


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(state), "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "agent_tools.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False, stdin=subprocess.DEVNULL)


def test_jobs_shows_readiness_and_leftovers(tmp_path: Path) -> None:
    """A restart whose command exited 0 but whose unit failed reads "exited, readiness failed", not "exited 0"
    alone; a job that left processes running says so."""
    state = tmp_path / "state"
    state.mkdir()
    journal = Journal(state / "journal.sqlite3")
    try:
        journal.add(JobRecord(job_id="j_qa12restartfaild", host="gpu-node-1",
                              command="systemctl daemon-reload && systemctl restart --no-block qa.service",
                              base="$HOME", created_at=now(), state="exited", exit_status=0, readiness="failed",
                              probes=[{"kind": "systemd_unit", "unit": "qa.service"}]))
        journal.add(JobRecord(job_id="j_qa12leftoverjob1", host="gpu-node-1", command="sleep 100 & echo ok",
                              base="$HOME", created_at=now(), state="exited", exit_status=0,
                              meta={"leftovers": [[4242, "sleep 100"]]}))
    finally:
        journal.close()
    res = _cli(state, "jobs")
    assert res.returncode == 0, res.stderr
    row = next(line for line in res.stdout.splitlines() if "j_qa12restartfaild" in line)
    assert "exited, readiness failed" in row, res.stdout
    row = next(line for line in res.stdout.splitlines() if "j_qa12leftoverjob1" in line)
    assert "1 left running" in row, res.stdout
    assert "as last recorded" in res.stdout and "job_cancel" not in res.stdout, res.stdout  # CLI words only


def test_jobs_error_is_text_without_json(tmp_path: Path) -> None:
    """`agent-tools jobs HOST` that fails prints the error as text (it printed the error's JSON without --json)."""
    res = _cli(tmp_path / "state", "jobs", "no-such-host-qa12")
    assert res.returncode == 1
    assert not res.stdout.lstrip().startswith("{"), res.stdout
    assert "error" in res.stdout and "no-such-host-qa12" in res.stdout, res.stdout
    js = _cli(tmp_path / "state", "jobs", "no-such-host-qa12", "--json")
    assert js.stdout.lstrip().startswith("{") and js.returncode == 1, js.stdout
