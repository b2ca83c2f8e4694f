"""qa13 round 3: what a person approving is shown is what runs, and who may approve.

The MCP elicitation never hides code in a ``[REDACTED]`` span and shows control and bidi characters as escapes; a
stored request whose redacted form hides code is approved only with the whole command given; the CLI prompt asks
about a literal password holding shell characters (shown, not hidden); with ``--out-of-band-approvals`` an MCP
client cannot approve its own request; and the loser of a race for one approval is told it was used (and which
job it started), not handed a new approval id. Real parts: the official MCP SDK client (in process and over stdio
against ``agent-tools mcp``), the ``agent-tools`` CLI on a pseudo-terminal, commands run on this machine (``touch``
in a temporary directory)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pexpect
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext

from agent_tools.adapters.mcp_server import build_mcp_server
from agent_tools.hosts.local import LocalHost
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.policy import PolicySet
from agent_tools.policy.approvals import ApprovalStore
from agent_tools.tools.factory import build_toolkit
from agent_tools.tools.toolkit import Toolkit

from .test_approvals_cli import POLICY, REPO, cli, cli_env  # the CLI as a person runs it, in its own state dir


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    data = json.loads(result.content[0].text)
    assert isinstance(data, dict)
    return data


def local_toolkit(tmp_path: Path, store: ApprovalStore | None = None) -> Toolkit:
    return Toolkit(HostRegistry({"local": LocalHost()}), journal=Journal(tmp_path / "journal.sqlite3"),
                   policy=PolicySet.load([POLICY]), approvals=store)


async def test_the_elicitation_never_hides_code_and_shows_control_characters_as_escapes(tmp_path: Path) -> None:
    mark = tmp_path / "pwned"
    shown: list[str] = []

    async def operator(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        shown.append(params.message)
        return types.ElicitResult(action="decline")

    hidden_code = [f'mysql --password "a$(touch {mark})" -e "select 1"', f'API_TOKEN="q$(touch {mark})" ./deploy.sh',
                   f"docker login -p \"x`touch {mark}`\" registry", f'sshpass -p "x$(touch {mark})" ssh h true']
    spoof = f"touch {mark} # \x1b]0;TITLE\x07 \x1b[2K\rrm -rf ~ \u202e [bold]b[/] \x9b2J \u200b"
    async with local_toolkit(tmp_path) as tk:
        async with Client(build_mcp_server(tk), mode="legacy", elicitation_callback=operator) as client:
            with anyio.fail_after(60):
                for command in [*hidden_code, spoof, "mysql -pS3cretPass9 -e 'select 1'"]:
                    out = structured(await client.call_tool("run_command", {"host": "local", "command": command}))
                    assert out["outcome"] == "denied", out  # declined: nothing ran
    assert not mark.exists()
    for command, message in zip(hidden_code, shown, strict=False):
        code = f"$(touch {mark})" if "$(" in command else f"`touch {mark}`"
        block = message.split("Digest ")[0]  # the command as shown (the policy's reason follows)
        assert f"    {command}\n" in block and code in block, (command, message)
        assert "[REDACTED]" not in block and "span(s)" not in block, (command, message)
    spoofed = shown[len(hidden_code)]
    assert not any(c in spoofed for c in "\x1b\x07\r\u202e\x9b\u200b"), repr(spoofed)
    for escape in ("\\x1b]0;TITLE\\x07", "\\x1b[2K\\rrm -rf ~", "\\u202e", "\\x9b2J", "\\u200b"):
        assert escape in spoofed, (escape, spoofed)
    assert "shown as escapes" in spoofed
    literal = shown[-1]  # a literal value of a certain shape is still hidden, and counted
    assert "mysql -p[REDACTED] -e" in literal and "S3cretPass9" not in literal and "1 span(s)" in literal


async def agent_call(state: Path, **args: Any) -> dict[str, Any]:
    async with build_toolkit(policy=[POLICY], state_dir=state, warm=False) as tk:
        return await tk.dispatch("run_command", {"host": "local", **args})


def test_a_stored_request_that_hides_code_is_approved_only_with_the_whole_command(tmp_path: Path) -> None:
    state, mark = tmp_path / "state", tmp_path / "ran"
    command = f'API_TOKEN="q$(touch {mark})" true'
    asked = anyio.run(lambda: agent_call(state, command=command))
    aid, digest = asked["approval_id"], asked["command_digest"]
    refused = cli(state, "approvals", "approve", aid, "--digest", digest)
    assert refused.returncode == 2 and "--command-file" in refused.stderr and "shell code" in refused.stderr, refused
    assert 'API_TOKEN="[REDACTED]" true' in refused.stdout  # what is stored, and why it cannot be approved
    assert "an agent asked to run this: touch" in refused.stdout  # and why the policy asked
    other = tmp_path / "other.txt"
    other.write_text('API_TOKEN="q" true')
    wrong = cli(state, "approvals", "approve", aid, "--digest", digest, "--command-file", str(other))
    assert wrong.returncode == 1 and "not the one" in wrong.stderr
    store = ApprovalStore(state / "approvals.sqlite3")
    assert store.get(aid).status == "pending"  # type: ignore[union-attr]
    store.close()
    given = tmp_path / "command.txt"
    given.write_text(command)
    ok = cli(state, "approvals", "approve", aid, "--digest", digest, "--command-file", str(given))
    assert ok.returncode == 0 and "approved" in ok.stdout and f"q$(touch {mark})" in ok.stdout, ok
    assert not mark.exists()
    ran = anyio.run(lambda: agent_call(state, command=command, approval_id=aid))
    assert ran["outcome"] == "finished" and mark.exists(), ran
    # a request hiding only a value of a certain shape is approved from what is stored, as before
    plain = anyio.run(lambda: agent_call(state, command="HF_TOKEN=hf_" + "a" * 34 + f" touch {mark}-2"))
    assert plain["outcome"] == "needs_approval", plain
    assert cli(state, "approvals", "approve", plain["approval_id"], "--digest", plain["command_digest"]).returncode == 0


def test_the_cli_prompt_asks_about_a_literal_password_with_shell_characters(tmp_path: Path) -> None:
    state = tmp_path / "state"
    command = "mysql --password 'pa$$w0rd(1)' -e 'select 1'"
    child = pexpect.spawn(sys.executable, ["-m", "agent_tools.cli", "run", "local", "--policy", str(POLICY), "--",
                                           command], env=cli_env(state), encoding="utf-8", dimensions=(40, 200),
                          timeout=60)
    child.expect(r"\[y/N\]: ")
    screen = child.before or ""
    child.sendline("n")
    child.expect(pexpect.EOF)
    assert "pa$$w0rd(1)" in screen and "holds shell syntax" not in screen, screen
    assert "not asking" not in screen + (child.before or "")


async def test_out_of_band_approvals_cannot_come_from_the_client(tmp_path: Path) -> None:
    state, mark = tmp_path / "state", tmp_path / "ran"
    asked: list[str] = []

    async def operator(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)  # a client approving its own request
        return types.ElicitResult(action="accept", content={"approve": True})

    env = {"AGENT_TOOLS_STATE_DIR": str(state), "PYTHONPATH": str(REPO), "PATH": os.environ["PATH"]}
    params = StdioServerParameters(command=sys.executable, env=env, args=[
        "-m", "agent_tools.cli", "mcp", "--policy", str(POLICY), "--state-dir", str(state), "--out-of-band-approvals"])
    call = {"host": "local", "command": f"touch {mark}"}
    async with Client(params, mode="legacy", elicitation_callback=operator) as client:
        with anyio.fail_after(60):
            out = structured(await client.call_tool("run_command", call))
    assert out["outcome"] == "needs_approval" and not asked and not mark.exists(), out
    assert f"agent-tools approvals approve {out['approval_id']}" in out["next"] and "client" not in out["next"]
    # the same with a 2026-07-28 client answering a request_state it was never given
    yes: types.InputResponses = {"approval": types.ElicitResult(action="accept", content={"approve": True})}
    store = ApprovalStore(state / "approvals.sqlite3")
    async with local_toolkit(tmp_path, store) as tk:
        async with Client(build_mcp_server(tk, out_of_band_approvals=True), mode="2026-07-28",
                          elicitation_callback=operator) as client:
            with anyio.fail_after(60):
                first = await client.session.call_tool("run_command", call, allow_input_required=True)
                assert isinstance(first, types.CallToolResult), first  # no input request is issued
                aid = structured(first)["approval_id"]
                forged = await client.session.call_tool("run_command", call, input_responses=yes,
                                                        request_state=f"agent-tools/approval:{aid}/n/{'0' * 64}")
    assert forged.is_error and "approvals approve" in structured(forged)["message"] and not asked
    assert not mark.exists() and store.get(aid).status == "pending"  # type: ignore[union-attr]
    store.close()
    # the operator approves out of band; the agent's retry runs it
    approved = cli(state, "approvals", "approve", out["approval_id"], "--digest", out["command_digest"])
    assert approved.returncode == 0, approved
    async with Client(params, mode="legacy", elicitation_callback=operator) as client:
        with anyio.fail_after(60):
            ran = structured(await client.call_tool("run_command", {**call, "approval_id": out["approval_id"]}))
    assert ran["outcome"] == "finished" and mark.exists(), ran


async def test_the_loser_of_a_race_for_one_approval_is_told_it_was_used(tmp_path: Path) -> None:
    log_file = tmp_path / "runs.log"
    command = f"echo ran >> {log_file}; sleep 0.5"
    store = ApprovalStore(tmp_path / "approvals.sqlite3")
    async with local_toolkit(tmp_path, store) as tk:
        async with Client(build_mcp_server(tk), mode="legacy") as client:
            with anyio.fail_after(60):
                asked = structured(await client.call_tool("run_command", {"host": "local", "command": command}))
                aid = asked["approval_id"]
                store.approve(aid, by="operator")
                results: list[dict[str, Any]] = []

                async def use() -> None:
                    result = await client.call_tool("run_command", {"host": "local", "command": command,
                                                                    "approval_id": aid})
                    results.append(structured(result))

                async with anyio.create_task_group() as tg:
                    for _ in range(3):
                        tg.start_soon(use)
                later = structured(await client.call_tool("run_command", {"host": "local", "command": command,
                                                                          "approval_id": aid}))
    assert log_file.read_text() == "ran\n"
    winners = [r for r in results if r["outcome"] == "finished"]
    losers = [r for r in results if r["outcome"] != "finished"]
    assert len(winners) == 1 and len(losers) == 2, results
    for lost in [*losers, later]:
        assert lost["outcome"] == "error" and lost["kind"] == "approval" and "already used" in lost["message"], lost
        assert "approval_id" not in lost  # no new approval to ask for
    assert later["job_id"] == winners[0]["job_id"] and winners[0]["job_id"] in later["message"], later
    assert store.pending() == []
    store.close()
