"""Issue 5: the Toolkit as an MCP server — real ``agent-tools mcp`` subprocesses driven by the official SDK client
(stdio and streamable HTTP), and the approval/elicitation flow in process (both protocol eras)."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel, ConfigDict

import agent_tools
from agent_tools.adapters import tool_schemas
from agent_tools.adapters.mcp_server import build_mcp_server
from agent_tools.outcomes import NeedsApproval
from agent_tools.policy.approvals import ApprovalStore
from agent_tools.testing import free_port, wait_until
from agent_tools.tools.toolkit import Toolkit, ToolSpec

REPO = Path(agent_tools.__file__).resolve().parent.parent
CORE_TOOLS = {"run_command", "job_status", "job_output", "job_cancel", "list_jobs"}


def server_env(tmp_path: Path) -> dict[str, str]:
    # PYTHONPATH: the server runs exactly the code under test, whatever the installed entry point points at
    return {"AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"), "XDG_STATE_HOME": str(tmp_path / "xdg"),
            "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def agent_tools_cmd(*args: str) -> list[str]:
    """``agent-tools -v mcp ARGS`` (the console script's own entry point, run by this interpreter)."""
    return [sys.executable, "-m", "agent_tools.cli", "-v", "mcp", *args]


def structured(result: types.CallToolResult) -> dict[str, Any]:
    """The result's JSON: text content and structuredContent must agree."""
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    data = json.loads(result.content[0].text)
    assert result.structured_content == data
    assert isinstance(data, dict)
    return data


async def test_stdio_server_end_to_end(tmp_path: Path, state_dir: Path) -> None:
    cmd = agent_tools_cmd()
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=server_env(tmp_path), cwd=str(tmp_path))
    errlog_path = tmp_path / "server-stderr.log"
    with errlog_path.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(30):
                await session.initialize()

            # every registered tool, with exactly the schema and description of the one source
            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert CORE_TOOLS <= set(listed)
            expected = {d["name"]: d for d in tool_schemas(Toolkit(), "mcp")}
            assert set(listed) == set(expected)
            for name, tool in listed.items():
                assert tool.input_schema == expected[name]["inputSchema"]
                assert tool.description == expected[name]["description"]
            assert set(listed["run_command"].input_schema["required"]) == {"host", "command"}

            # a command that outlives its budget detaches; a second one is followed, cancelled, and survives
            first = structured(await session.call_tool(
                "run_command", {"host": "local", "command": "sleep 3; echo done", "budget_s": 1}))
            assert first["outcome"] == "detached", first
            second = structured(await session.call_tool(
                "run_command", {"host": "local", "command": "sleep 4; echo late", "budget_s": 0.5}))
            assert second["outcome"] == "detached", second

            seen: list[tuple[float, float | None, str | None]] = []
            cancelled_progress: list[float] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                seen.append((progress, total, message))

            async def on_cancelled_progress(progress: float, total: float | None, message: str | None) -> None:
                cancelled_progress.append(progress)

            status: dict[str, Any] = {}

            async def follow_first() -> None:
                status.update(structured(await session.call_tool(
                    "job_status", {"job_id": first["job_id"], "wait_s": 10}, progress_callback=on_progress)))

            async def wait_then_cancel_second() -> None:
                with anyio.move_on_after(2.2) as scope:
                    await session.call_tool("job_status", {"job_id": second["job_id"], "wait_s": 30},
                                            progress_callback=on_cancelled_progress)
                assert scope.cancelled_caught, "the 30 s wait was expected to be cancelled by the client"

            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(follow_first)
                    tg.start_soon(wait_then_cancel_second)
            assert (status["state"], status["exit_status"]) == ("exited", 0), status
            assert status["new_stdout"]["text"] == "done\n"
            # progress notifications arrived while waiting: elapsed seconds, rising, out of wait_s
            assert seen, "no progress notification during a ~2 s wait"
            assert [p for p, _, _ in seen] == sorted(p for p, _, _ in seen)
            assert all(total == 10 for _, total, _ in seen)
            assert "not the job" in (seen[0][2] or "")
            assert cancelled_progress, "no progress before the cancel"

            # the cancel stopped the wait, never the job: it still ends on its own with its output
            with anyio.fail_after(15):
                late = structured(await session.call_tool("job_status", {"job_id": second["job_id"], "wait_s": 10}))
            assert (late["state"], late["exit_status"], late["new_stdout"]["text"]) == ("exited", 0, "late\n"), late

            # bad arguments: a structured error the model can fix, flagged isError
            bad = await session.call_tool("job_status", {"job_idx": "j_1"})
            assert bad.is_error
            err = structured(bad)
            assert (err["outcome"], err["kind"], err["retryable"]) == ("error", "bad_arguments", False)
            assert "job_id" in err["message"] and "job_idx" in err["message"]
            unknown = await session.call_tool("no_such_tool", {})
            assert unknown.is_error and structured(unknown)["kind"] == "bad_arguments"

    log_text = errlog_path.read_text()
    assert "mcp.call_cancelled" in log_text, log_text[-2000:]


@asynccontextmanager
async def http_server(tmp_path: Path, *args: str, env_extra: dict[str, str] | None = None) -> AsyncIterator[str]:
    """``agent-tools mcp --transport http ARGS`` on a free loopback port; yields the endpoint URL."""
    port = free_port()
    errlog = (tmp_path / "http-stderr.log").open("w")
    env = {**server_env(tmp_path), "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), **(env_extra or {})}
    proc = await anyio.open_process(agent_tools_cmd("--transport", "http", "--port", str(port), *args),
                                    stdin=None, stdout=errlog, stderr=errlog, env=env, cwd=str(tmp_path))
    try:
        async def listening() -> bool:
            assert proc.returncode is None, (tmp_path / "http-stderr.log").read_text()
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                return False
            await stream.aclose()
            return True

        await wait_until(listening, f"agent-tools mcp to listen on port {port}", timeout_s=30, interval_s=0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        with anyio.move_on_after(10):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        errlog.close()


def bearer_client(token: str) -> httpx2.AsyncClient:
    """An HTTP client for the MCP SDK's streamable HTTP transport that sends ``Authorization: Bearer TOKEN``."""
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=300.0))


async def test_streamable_http_server(tmp_path: Path) -> None:
    async with http_server(tmp_path) as url, \
            bearer_client((tmp_path / "state" / "mcp-http.token").read_text().strip()) as client, \
            streamable_http_client(url, http_client=client) as (read, write), ClientSession(read, write) as session:
        with anyio.fail_after(20):
            await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            assert CORE_TOOLS <= names
            out = structured(await session.call_tool(
                "run_command", {"host": "local", "command": "sleep 2.5; echo over-http", "budget_s": 0.5}))
            assert out["outcome"] == "detached", out
            seen: list[float] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                seen.append(progress)

            st = structured(await session.call_tool("job_status", {"job_id": out["job_id"], "wait_s": 10},
                                                    progress_callback=on_progress))
        assert (st["state"], st["exit_status"], st["new_stdout"]["text"]) == ("exited", 0, "over-http\n"), st
        assert seen, "no progress notification over streamable HTTP"


# ---------------------------------------------------------------------------------------------- approvals
class GuardedArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str
    approval_id: str | None = None


class Ran(BaseModel):
    outcome: str = "finished"
    command: str
    approval_id: str


def guarded_toolkit(store: ApprovalStore) -> Toolkit:
    """A real Toolkit with one more tool registered the ordinary way: it asks first, then runs once approved."""
    tk = Toolkit()

    async def guarded(command: str, approval_id: str | None = None) -> BaseModel:
        if approval_id is None:
            appr = store.request("local", command, "test-ask")
            return NeedsApproval(host="local", command=command, approval_id=appr.id, rule_id="test-ask",
                                 reason="tests ask first", expires_s=900.0,
                                 next=f"call again with approval_id='{appr.id}' once approved")
        store.consume("local", command, approval_id=approval_id)
        return Ran(command=command, approval_id=approval_id)

    tk.register(ToolSpec("guarded", "runs a command once the operator approved it", GuardedArgs), guarded)
    return tk


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])  # elicitation/create request | InputRequiredResult
async def test_needs_approval_is_asked_through_elicitation(state_dir: Path, mode: str) -> None:
    store = ApprovalStore()
    asked: list[str] = []

    async def operator(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with guarded_toolkit(store) as tk:
        async with Client(build_mcp_server(tk, approvals=store), mode=mode, elicitation_callback=operator) as client:
            with anyio.fail_after(10):
                result = await client.call_tool("guarded", {"command": "systemctl restart x"})
    data = structured(result)
    assert not result.is_error
    assert data["outcome"] == "finished" and data["command"] == "systemctl restart x", data
    assert len(asked) == 1 and "systemctl restart x" in asked[0] and "test-ask" in asked[0]
    approval = store.get(data["approval_id"])
    assert approval is not None and approval.status == "used" and approval.decided_by == "mcp-elicitation"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_declined_approval_is_denied_and_recorded(state_dir: Path, mode: str) -> None:
    store = ApprovalStore()

    async def operator(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async with guarded_toolkit(store) as tk:
        async with Client(build_mcp_server(tk, approvals=store), mode=mode, elicitation_callback=operator) as client:
            with anyio.fail_after(10):
                result = await client.call_tool("guarded", {"command": "rm -rf /srv/cache"})
    data = structured(result)
    assert result.is_error and data["outcome"] == "denied" and "declined" in data["reason"], data
    assert [a.status for a in store.pending()] == []  # the request was rejected, not left pending


async def test_without_elicitation_the_outcome_is_the_result(state_dir: Path) -> None:
    store = ApprovalStore()
    async with guarded_toolkit(store) as tk:
        async with Client(build_mcp_server(tk, approvals=store), mode="legacy") as client:
            with anyio.fail_after(10):
                result = await client.call_tool("guarded", {"command": "reboot"})
    data = structured(result)
    assert not result.is_error and data["outcome"] == "needs_approval", data
    assert data["approval_id"] in data["next"]


async def test_an_approval_answer_only_applies_to_the_call_it_was_asked_for(state_dir: Path) -> None:
    """2026-07-28 round trip driven by hand: the retry must carry the same call, or nothing runs."""
    store = ApprovalStore()

    async def operator(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        raise AssertionError("driven by hand")

    yes: types.InputResponses = {"approval": types.ElicitResult(action="accept", content={"approve": True})}
    async with guarded_toolkit(store) as tk:
        async with Client(build_mcp_server(tk, approvals=store), mode="2026-07-28",
                          elicitation_callback=operator) as client:
            with anyio.fail_after(10):
                asked = await client.session.call_tool("guarded", {"command": "ls /srv"}, allow_input_required=True)
                assert isinstance(asked, types.InputRequiredResult) and asked.input_requests
                assert asked.request_state is not None
                swapped = await client.session.call_tool("guarded", {"command": "rm -rf /srv"}, input_responses=yes,
                                                         request_state=asked.request_state)
                same = await client.session.call_tool("guarded", {"command": "ls /srv"}, input_responses=yes,
                                                      request_state=asked.request_state)
    assert swapped.is_error and "changed" in structured(swapped)["message"]
    assert same.is_error and "used already" in structured(same)["message"]  # a state is spent by its first use
    assert [a.command for a in store.pending()] == ["ls /srv"]  # nothing was approved


async def test_a_client_cannot_approve_its_own_request(state_dir: Path) -> None:
    """A client that declared no elicitation gets needs_approval; sending back a request_state it made up (the old
    plain digest of the call, or the new shape with a guessed nonce and MAC), or one issued by another server, with
    an "accept" answer approves nothing and runs nothing. A state the server issued works once."""
    import hashlib

    store = ApprovalStore()
    yes: types.InputResponses = {"approval": types.ElicitResult(action="accept", content={"approve": True})}
    args = {"command": "touch /tmp/forged"}
    canonical = json.dumps(["guarded", args], sort_keys=True, separators=(",", ":"))

    async def operator(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        raise AssertionError("driven by hand")

    async with guarded_toolkit(store) as tk:
        async with Client(build_mcp_server(tk, approvals=store), mode="2026-07-28") as client:  # no elicitation
            with anyio.fail_after(10):
                first = structured(await client.call_tool("guarded", args))
                assert first["outcome"] == "needs_approval"
                aid = first["approval_id"]
                forged = [f"agent-tools/approval:{aid}/{hashlib.sha256(canonical.encode()).hexdigest()[:32]}",
                          f"agent-tools/approval:{aid}/nonce/{'0' * 64}"]
                refusals = [await client.session.call_tool("guarded", args, input_responses=yes, request_state=state)
                            for state in forged]
        async with Client(build_mcp_server(tk, approvals=store), mode="2026-07-28",
                          elicitation_callback=operator) as other:
            with anyio.fail_after(10):
                asked = await other.session.call_tool("guarded", {"command": "ls /x"}, allow_input_required=True)
                assert isinstance(asked, types.InputRequiredResult) and asked.request_state
        async with Client(build_mcp_server(tk, approvals=store), mode="2026-07-28",
                          elicitation_callback=operator) as third:
            with anyio.fail_after(10):
                foreign = await third.session.call_tool("guarded", {"command": "ls /x"}, input_responses=yes,
                                                        request_state=asked.request_state)
    for refused in [*refusals, foreign]:
        data = structured(refused)  # type: ignore[arg-type]
        assert refused.is_error and data["outcome"] == "error" and "nothing was approved or run" in data["message"]
    assert {a.command: a.status for a in store.pending()} == {"touch /tmp/forged": "pending", "ls /x": "pending"}


async def test_the_elicitation_shows_cwd_env_and_the_command_with_only_certain_secrets_hidden(
        state_dir: Path, tmp_path: Path) -> None:
    """What the person approving reads through MCP: host, the call's cwd and env, the digest it is bound to, and
    the command with shell words kept (`cookie: keep.me` is not hidden) while a password value is, with a warning
    that counts it. Declined: nothing ran in the cwd; accepted: it ran there."""
    from agent_tools.hosts.local import LocalHost
    from agent_tools.hosts.registry import HostRegistry
    from agent_tools.jobs.journal import Journal
    from agent_tools.policy import PolicySet
    from agent_tools.policy.approvals import call_digest

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "important.db").write_text("x")
    env = {"LC_ALL": "C", "API_TOKEN": "tok-" + "w" * 20}
    command = "rm -rf -- * cookie: keep.me --password=pw-QA13xyz"
    answers = iter(["decline", "accept"])
    shown: list[str] = []

    async def operator(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        shown.append(params.message)
        action = next(answers)
        return types.ElicitResult(action=action, content={"approve": True} if action == "accept" else None)

    tk = Toolkit(HostRegistry({"local": LocalHost()}), journal=Journal(tmp_path / "j.sqlite3"),
                 policy=PolicySet.load([REPO / "policies" / "default.yaml"]))
    async with tk:
        async with Client(build_mcp_server(tk), mode="legacy", elicitation_callback=operator) as client:
            with anyio.fail_after(30):
                declined = structured(await client.call_tool("run_command", {"host": "local", "command": command,
                                                                            "cwd": str(victim), "env": env}))
                assert declined["outcome"] == "denied" and (victim / "important.db").exists()
                ran = structured(await client.call_tool("run_command", {"host": "local", "command": command,
                                                                       "cwd": str(victim), "env": env}))
    assert ran["outcome"] == "finished" and not (victim / "important.db").exists(), ran
    message = shown[0]
    assert f"in {victim}" in message and "LC_ALL=C" in message and "API_TOKEN=[REDACTED]" in message
    assert "rm -rf -- * cookie: keep.me --password=[REDACTED]" in message and "pw-QA13xyz" not in message
    assert "1 span(s)" in message
    assert call_digest("local", command, cwd=str(victim), env=env) in message


async def test_stdio_server_with_policy_denies_without_running(tmp_path: Path) -> None:
    """`agent-tools mcp --policy policies/default.yaml`: a denied command is an error result; nothing runs."""
    marker = tmp_path / "must-not-exist"
    cmd = agent_tools_cmd("--policy", str(REPO / "policies" / "default.yaml"))
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=server_env(tmp_path), cwd=str(tmp_path))
    with (tmp_path / "server-stderr.log").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(30):
                await session.initialize()
            result = await session.call_tool(
                "run_command", {"host": "local", "command": f"touch {marker}; rm -rf / --no-preserve-root"})
            data = structured(result)
            assert result.is_error and data["outcome"] == "denied" and data["rule_id"], data
            assert not marker.exists()
            ok = structured(await session.call_tool("run_command", {"host": "local", "command": "echo allowed"}))
            assert ok["outcome"] == "finished" and ok["stdout"]["text"] == "allowed\n", ok


# ------------------------------------------------------------------------------------------------ issue 15
# outputSchema (MCP 2025-06-18): every tool declares one, generated from its result models; the official client
# validates each non-error result against it (ClientSession.validate_tool_result raises otherwise), and the
# tests below check every result, errors included, with jsonschema as well.
def _validator(schema: dict[str, Any]) -> Any:
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


async def test_every_tool_declares_an_output_schema_and_every_result_conforms(state_dir: Path, tmp_path: Path) -> None:
    from agent_tools.adapters.schemas import output_schema

    target = tmp_path / "notes.txt"
    target.write_text("one\n")
    async with Toolkit() as tk, Client(build_mcp_server(tk), mode="legacy") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {s.name for s in tk.specs}
        validators = {}
        for name, tool in listed.items():
            assert tool.output_schema is not None, f"{name} declares no outputSchema"
            assert tool.output_schema == output_schema(tk.result_type(name))  # from the result models
            assert tool.output_schema["type"] == "object"
            validators[name] = _validator(tool.output_schema)

        async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            with anyio.fail_after(30):
                result = await client.call_tool(name, arguments)  # the client validated non-error results
            assert result.structured_content is not None
            errors = [e.message for e in validators[name].iter_errors(result.structured_content)]
            assert not errors, (name, arguments, errors, result.structured_content)
            return result.structured_content

        seen = set()
        for name, arguments in [
            ("run_command", {"host": "local", "command": "echo hello"}),
            ("run_command", {"host": "local", "command": "exit 3"}),
            ("run_command", {"host": "local", "command": "sleep 30", "budget_s": 0.3}),
            ("run_command", {"host": "local", "command": "cat", "budget_s": 0.3, "stdin": "pipe"}),
            ("run_command", {"host": "no such host!", "command": "true"}),
            ("run_command", {"host": "local"}),  # bad arguments
            ("list_jobs", {}),
            ("read_file", {"host": "local", "path": str(target)}),
            ("write_file", {"host": "local", "path": str(target), "content": "two\n"}),
            ("edit_file", {"host": "local", "path": str(target), "old": "two", "new": "three"}),
            ("edit_file", {"host": "local", "path": str(target), "old": "nowhere", "new": "x"}),
            ("list_hosts", {}),
            ("host_memory", {"host": "local"}),
            ("gpu_memory", {"host": "local"}),
            ("wait_for", {"host": "local", "probes": [{"kind": "port", "port": 1}], "deadline_s": 0.5}),
            ("http_get", {"host": "local", "url": "http://127.0.0.1:1/"}),
            ("service_status", {"host": "local", "unit": "no-such-unit-here"}),
            ("restart_service", {"host": "local", "unit": "bad unit name"}),
            ("job_status", {"job_id": "j_nonexistent00000000"}),
        ]:
            data = await call(name, arguments)
            seen.add(name)
            if name == "run_command" and data.get("outcome") == "detached":
                job = data["job_id"]
                if arguments.get("stdin") == "pipe":
                    typed = await call("job_input", {"job_id": job, "text": "typed"})
                    assert typed["input"] == "written" and typed["new_stdout"]["text"] == "typed\n", typed
                    seen.add("job_input")
                assert (await call("job_status", {"job_id": job, "wait_s": 0.2}))["state"] == "running"
                assert (await call("job_output", {"job_id": job}))["job_id"] == job
                assert (await call("job_cancel", {"job_id": job, "grace_s": 1}))["state"] == "killed"
                seen |= {"job_status", "job_output", "job_cancel"}
            if name == "write_file":
                restored = await call("restore_file", {"host": "local", "path": str(target),
                                                       "backup_id": data["backup_id"]})
                assert restored["backup_id"] == data["backup_id"] and target.read_text() == "one\n"
                seen.add("restore_file")
        assert seen == set(listed)  # every tool was called and checked


def test_output_schemas_are_not_vacuous() -> None:
    from agent_tools.adapters.schemas import output_schema
    from agent_tools.outcomes import ErrorOutcome, Finished
    from agent_tools.output import OutputView

    v = _validator(output_schema(Toolkit().result_type("run_command")))
    ok = Finished(host="h", command="c", exit_status=0, duration_s=0.1, stdout=OutputView(), stderr=OutputView(),
                  job_id="j_1").model_dump(mode="json")
    assert v.is_valid(ok) and v.is_valid({**ok, "shortened": "shortened"})
    assert not v.is_valid({k: x for k, x in ok.items() if k != "job_id"})  # a required field missing
    assert not v.is_valid({**ok, "outcome": "exploded"})  # no such outcome
    err = ErrorOutcome(kind="unreachable", message="m", retryable=True).model_dump(mode="json")
    assert v.is_valid(err) and not v.is_valid({**err, "surprise": 1})  # extra="forbid" models: no unknown keys


async def test_bounded_results_still_conform_to_the_output_schema(state_dir: Path) -> None:
    async with Toolkit() as tk, Client(build_mcp_server(tk, max_result_chars=600), mode="legacy") as client:
        schema = {t.name: t.output_schema for t in (await client.list_tools()).tools}["run_command"]
        assert schema is not None
        for lines in (200, 5000):
            with anyio.fail_after(30):  # the client validates structuredContent against the schema itself
                result = await client.call_tool("run_command", {"host": "local", "command": f"seq {lines}"})
            text = result.content[0].text if isinstance(result.content[0], types.TextContent) else ""
            assert len(text) <= 600 and "shortened" in text
            data = result.structured_content
            assert data is not None and _validator(schema).is_valid(data)
            assert data["outcome"] == "finished" and data["exit_status"] == 0
            if "only its top-level fields are kept" in text:  # output views are optional: it still conforms, so
                assert "stdout" not in data and data == json.loads(text)  # the model gets the bounded copy only


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(src.read_text())


@pytest.mark.sshd
async def test_the_readme_client_arguments_work_without_any_environment(real_sshd: Any, tmp_path: Path) -> None:
    """MCP Inspector 2.x starts stdio servers without the user's environment: the README's Claude Code snippet
    passes -F and --state-dir as arguments instead, and they are enough (``~`` expanded by the server)."""
    import re

    readme = (REPO / "README.md").read_text()
    entries = [json.loads(m.group(1))["mcpServers"]["agent-tools"]
               for m in re.finditer(r'`(\{"mcpServers": .*?\})`', readme)]
    entry = next(e for e in entries if e.get("type") == "stdio")  # the Claude Code stdio snippet
    args = list(entry["args"])
    assert entry["command"] == "agent-tools" and args[:1] == ["mcp"] and "-F" in args and "--state-dir" in args
    home = tmp_path / "home"
    _copy(real_sshd.config_path, Path(args[args.index("-F") + 1].replace("~", str(home), 1)))  # the alias is there
    args[args.index("--state-dir") + 1] = "~/mcp-state"  # a non-default state dir, to see it used
    # only what the SDK passes by default (HOME, PATH, USER, ...): no AGENT_TOOLS_* variables
    params = StdioServerParameters(command=sys.executable, args=["-m", "agent_tools.cli", *args],
                                   env={"HOME": str(home), "PYTHONPATH": str(REPO)}, cwd=str(tmp_path))
    with (tmp_path / "server-stderr.log").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(30):
                await session.initialize()
                result = await session.call_tool("run_command", {"host": real_sshd.alias, "command": "echo hi"})
    data = structured(result)
    assert (data["outcome"], data["exit_status"], data["stdout"]["text"]) == ("finished", 0, "hi\n"), data
    assert (home / "mcp-state" / "journal.sqlite3").exists()
    assert not (home / ".local" / "state" / "agent-tools" / "journal.sqlite3").exists()


async def test_cli_no_structured_content_sends_the_text_alone(tmp_path: Path) -> None:
    """``agent-tools mcp --no-structured-content`` (for a client that would pass both copies to the model), seen
    by the official client over stdio: no outputSchema listed, results carry only the text JSON."""
    cmd = agent_tools_cmd("--no-structured-content")
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=server_env(tmp_path), cwd=str(tmp_path))
    with (tmp_path / "server-stderr.log").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(30):
                await session.initialize()
            tools = (await session.list_tools()).tools
            assert tools and all(t.output_schema is None for t in tools)
            result = await session.call_tool("run_command", {"host": "local", "command": "echo one-copy"})
    assert result.structured_content is None and not result.is_error
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    data = json.loads(result.content[0].text)
    assert data["outcome"] == "finished" and data["stdout"]["text"] == "one-copy\n"
