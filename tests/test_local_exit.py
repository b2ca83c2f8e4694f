"""Issue 15, item 8: processes that used LocalHost exit cleanly — no ``Loop <...> that handles pid N is closed``
nor ``RuntimeError: Event loop is closed`` on stderr — for the CLI paths and for a script whose detached jobs
it never follows. Each runs as its own process (the messages come at interpreter exit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agent_tools

REPO = Path(agent_tools.__file__).resolve().parent.parent
DIRTY = ("that handles pid", "Event loop is closed", "Exception ignored", "Traceback", "ResourceWarning",
         "unclosed transport")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    # -W default: ResourceWarnings (an unclosed transport) are shown too
    return {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"),
            "XDG_STATE_HOME": str(tmp_path / "xdg"), "PYTHONWARNINGS": "default"}


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_tools.cli", *args], env=env, capture_output=True,
                          text=True, timeout=60)


def _clean(res: subprocess.CompletedProcess[str], what: str) -> None:
    found = [d for d in DIRTY if d in res.stderr]
    assert not found, f"{what}: stderr has {found}:\n{res.stderr}"


def test_cli_paths_exit_with_a_clean_stderr(env: dict[str, str]) -> None:
    first = _cli(env, "run", "--budget", "0.5", "--json", "local", "--", "sleep 30; echo never")
    _clean(first, "run (detached)")
    job = json.loads(first.stdout)
    assert job["outcome"] == "detached", first.stdout
    second = _cli(env, "run", "--budget", "0.5", "--json", "local", "--", "sleep 1; echo done")
    _clean(second, "run (detached)")
    done = json.loads(second.stdout)["job_id"]
    for args in (["run", "--json", "local", "--", "echo hi"], ["status", job["job_id"], "--json"],
                 ["status", done, "--wait", "10", "--json"], ["output", done], ["jobs"],
                 ["cancel", job["job_id"], "--grace", "1"], ["status", job["job_id"]]):
        res = _cli(env, *args)
        assert res.returncode == 0, (args, res.stdout, res.stderr)
        _clean(res, " ".join(args))
    assert "done" in _cli(env, "output", done).stdout


def test_a_script_that_never_follows_its_detached_jobs_exits_cleanly(env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import gc
        import time

        import anyio
        from agent_tools import Toolkit

        async def main() -> None:
            async with Toolkit() as tk:
                for n in range(3):
                    out = await tk.run_command(host="local", command=f"sleep 20; echo {n}", budget_s=0.3)
                    print(out.outcome)

        anyio.run(main)
        time.sleep(0.5)  # the script goes on after its event loop closed
        gc.collect()
    """))
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.split() == ["detached"] * 3, res
    _clean(res, "script")
    jobs = json.loads(_cli(env, "jobs", "--json").stdout)["jobs"]
    assert [j["state"] for j in jobs] == ["running"] * 3  # detached, never followed: still running, not killed
    for j in jobs:
        _cli(env, "cancel", j["job_id"], "--grace", "1")


def test_a_process_that_exits_a_moment_after_close_is_still_reaped(env: dict[str, str], tmp_path: Path) -> None:
    # the job launcher exits on EOF; on a loaded machine that takes a moment, and the loop must not close first
    script = tmp_path / "host.py"
    script.write_text(textwrap.dedent("""
        import gc
        import time

        import anyio
        from agent_tools import LocalHost

        async def main() -> None:
            host = LocalHost()
            for _ in range(3):
                proc = await host.start("cat > /dev/null; sleep 0.2")
                await proc.close_stdin()
                await proc.close()
            print("closed")

        anyio.run(main)
        time.sleep(0.5)  # the script goes on after its event loop closed: the processes end meanwhile
        gc.collect()
    """))
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout == "closed\n", res
    _clean(res, "LocalHost script")


def test_cancel_text_shows_the_unchecked_and_survivors_fields_its_message_refers_to(env: dict[str, str]) -> None:
    job = json.loads(_cli(env, "run", "--budget", "0.5", "--json", "local", "--", "sleep 30").stdout)
    res = _cli(env, "cancel", job["job_id"], "--grace", "1")
    assert res.returncode == 0, res.stderr
    if "see unchecked" not in res.stdout:
        pytest.skip("the job ran in a cgroup: the survivor check saw everything (nothing unchecked to show)")
    text = " ".join(res.stdout.split())
    assert "unchecked: processes of the job that left both its session and its environment" in text, res.stdout
