"""Approvals are bound to the whole call (host, command, cwd, env) on every path a person approves through: the
CLI's ``run --approve ID`` approves nothing for another call, ``agent-tools approvals`` shows an agent's request
(cwd and env included) and approves exactly it, and the agent's own retry then runs it where it asked. Real
processes: the agent is the Python toolkit of the user's state directory, the operator the ``agent-tools`` CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pexpect

import agent_tools
from agent_tools.policy.approvals import ApprovalStore, call_digest
from agent_tools.tools.factory import build_toolkit

REPO = Path(agent_tools.__file__).resolve().parent.parent
POLICY = REPO / "policies" / "default.yaml"


def cli_env(state: Path) -> dict[str, str]:
    return {**os.environ, "AGENT_TOOLS_STATE_DIR": str(state), "PYTHONPATH": str(REPO), "TERM": "xterm-256color",
            "COLUMNS": "200", "PAGER": "cat"}


def cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_tools.cli", *args], capture_output=True, text=True,
                          env=cli_env(state), stdin=subprocess.DEVNULL, timeout=60, check=False)


async def agent_call(state: Path, **args: Any) -> dict[str, Any]:
    async with build_toolkit(policy=[POLICY], state_dir=state, warm=False) as tk:
        return await tk.dispatch("run_command", {"host": "local", **args})


def test_run_approve_of_another_call_approves_nothing(tmp_path: Path) -> None:
    state, work = tmp_path / "state", tmp_path / "work"
    work.mkdir()
    asked = anyio.run(lambda: agent_call(state, command="touch agent-ran", cwd=str(work), env={"LC_ALL": "C"}))
    assert asked["outcome"] == "needs_approval" and asked["cwd"] == str(work) and asked["env"] == {"LC_ALL": "C"}
    aid = asked["approval_id"]
    assert asked["command_digest"] == call_digest("local", "touch agent-ran", cwd=str(work), env={"LC_ALL": "C"})
    for other in (["--", "ls /tmp"], ["--", "touch agent-ran"], ["--cwd", str(tmp_path), "--", "touch agent-ran"]):
        res = cli(state, "run", "local", "--policy", str(POLICY), "--approve", aid, "--json", *other)
        out = json.loads(res.stdout)
        assert res.returncode == 1 and out["outcome"] == "error", out
        assert f"cannot approve {aid}" in out["message"] and "Nothing was approved or run" in out["message"]
    store = ApprovalStore(state / "approvals.sqlite3")
    assert store.get(aid).status == "pending"  # type: ignore[union-attr]
    store.close()
    retry = anyio.run(lambda: agent_call(state, command="touch agent-ran", cwd=str(work), env={"LC_ALL": "C"},
                                         approval_id=aid))
    assert retry["outcome"] == "needs_approval" and "not usable" in retry["reason"]
    assert not (work / "agent-ran").exists() and not (tmp_path / "agent-ran").exists()


def test_an_operator_approves_the_agents_request_out_of_band_and_it_runs_where_it_asked(tmp_path: Path) -> None:
    state, work = tmp_path / "state", tmp_path / "work"
    work.mkdir()
    env = {"LC_ALL": "C", "QA_TOKEN": "tok-" + "q" * 20}
    asked = anyio.run(lambda: agent_call(state, command="touch agent-ran", cwd=str(work), env=env))
    aid, digest = asked["approval_id"], asked["command_digest"]
    listed = cli(state, "approvals", "list")
    assert aid in listed.stdout and digest in listed.stdout and str(work) in listed.stdout
    assert "q" * 20 not in listed.stdout + cli(state, "approvals", "list", "--json").stdout
    no_tty = cli(state, "approvals", "approve", aid)
    assert no_tty.returncode == 2 and "--digest" in no_tty.stderr
    wrong = cli(state, "approvals", "approve", aid, "--digest", call_digest("local", "touch agent-ran"))
    assert wrong.returncode == 1 and "another call" in wrong.stderr
    child = pexpect.spawn(sys.executable, ["-m", "agent_tools.cli", "approvals", "approve", aid],
                          env=cli_env(state), encoding="utf-8", dimensions=(40, 200), timeout=60)
    child.expect(r"\[y/N\]: ")
    screen = child.before or ""
    child.sendline("y")
    child.expect(pexpect.EOF)
    assert "approved" in (child.before or "")
    for shown in (f"cwd      \x1b[1m{work}", "LC_ALL=C", "QA_TOKEN=[REDACTED]", "touch agent-ran", digest):
        assert shown in screen, (shown, screen)
    assert "q" * 20 not in screen
    ran = anyio.run(lambda: agent_call(state, command="touch agent-ran", cwd=str(work), env=env, approval_id=aid))
    assert ran["outcome"] == "finished" and (work / "agent-ran").exists() and not (tmp_path / "agent-ran").exists()
    again = cli(state, "approvals", "approve", aid, "--digest", digest)
    assert again.returncode == 1 and "already used" in again.stderr


def test_state_files_are_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    anyio.run(lambda: agent_call(state, command="touch x"))
    assert oct(state.stat().st_mode & 0o777) == "0o700"
    files = [p for p in state.iterdir() if p.name.startswith(("journal.sqlite3", "approvals.sqlite3"))]
    assert {p.name for p in files} >= {"journal.sqlite3", "approvals.sqlite3"}
    assert {oct(p.stat().st_mode & 0o777) for p in files} == {"0o600"}


def test_a_used_approval_points_at_a_new_request_not_at_approvals_approve(tmp_path: Path) -> None:
    state, marker = tmp_path / "state", tmp_path / "ran"
    base = ["run", "local", "--policy", str(POLICY), "--json"]
    asked = json.loads(cli(state, *base, "--", f"touch {marker}").stdout)
    aid = asked["approval_id"]
    ran = json.loads(cli(state, *base, "--approve", aid, "--", f"touch {marker}").stdout)
    assert ran["outcome"] == "finished" and marker.exists(), ran
    again = json.loads(cli(state, *base, "--approve", aid, "--", f"touch {marker}").stdout)
    assert "already used" in again["message"] and "again without --approve" in again["message"], again
    assert "approvals approve" not in again["message"]  # that cannot approve a used id either
