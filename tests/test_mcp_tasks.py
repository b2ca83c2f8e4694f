"""Issue 17, item 4: long calls as MCP tasks (2025-11-25, experimental), mapped onto the job: a task-augmented
``run_command`` follows its job to the end (``tasks/get``, ``tasks/list``, ``tasks/result``), and ``tasks/cancel``
stops the job it started. Against ``agent-tools mcp`` as a separate process over stdio.

The client here writes JSON-RPC itself: the official client of the installed SDK (mcp 2.3) validates a handshake-era
``tools/call`` result as a ``CallToolResult`` only, so it cannot receive a ``CreateTaskResult`` (python-sdk PR
#3161, open; see :mod:`agent_tools.adapters.mcp_tasks`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

import agent_tools

REPO = Path(agent_tools.__file__).resolve().parent.parent


class _JsonRpcClient:
    """A line-delimited JSON-RPC client of an MCP server on stdio (MCP 2025-11-25), requests one at a time."""

    def __init__(self, proc: anyio.abc.Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self._proc = proc
        self._in = proc.stdin
        self._out = BufferedByteReceiveStream(proc.stdout)
        self._next = 0
        self.notifications: list[dict[str, Any]] = []

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._in.send((json.dumps({"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})})
                             + "\n").encode())

    async def call(self, method: str, params: dict[str, Any] | None = None, timeout_s: float = 60) -> dict[str, Any]:
        """The response (``result`` or ``error``) to one request; notifications meanwhile are kept."""
        self._next += 1
        rid = self._next
        await self._in.send((json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
                             + "\n").encode())
        with anyio.fail_after(timeout_s):
            while True:
                msg = json.loads(await self._out.receive_until(b"\n", 10_000_000))
                if msg.get("id") == rid and "method" not in msg:
                    return dict(msg)
                if "method" in msg and "id" not in msg:
                    self.notifications.append(msg)


async def _session(tmp_path: Path) -> tuple[anyio.abc.Process, _JsonRpcClient]:
    env = {"AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"), "XDG_STATE_HOME": str(tmp_path / "xdg"),
           "PYTHONPATH": str(REPO), "PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    proc = await anyio.open_process([sys.executable, "-m", "agent_tools.cli", "-v", "mcp"], env=env, cwd=tmp_path,
                                    stderr=(tmp_path / "server-stderr.log").open("w"), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE)
    client = _JsonRpcClient(proc)
    init = await client.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "tasks-test", "version": "1"}})
    caps = init["result"]["capabilities"]
    assert caps["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}, caps
    await client.notify("notifications/initialized")
    return proc, client


async def test_a_task_augmented_run_command_follows_its_job_and_cancel_stops_the_job(tmp_path: Path) -> None:
    proc, c = await _session(tmp_path)
    try:
        tools = {t["name"]: t for t in (await c.call("tools/list"))["result"]["tools"]}
        assert tools["run_command"]["execution"] == {"taskSupport": "optional"}
        assert "execution" not in tools["read_file"]  # a short call is no task

        created = await c.call("tools/call", {"name": "run_command", "task": {"ttl": 600_000},
                                              "arguments": {"host": "local", "budget_s": 0.5,
                                                            "command": "sleep 3; echo done; exit 3"}})
        task = created["result"]["task"]
        assert task["status"] == "working" and task["ttl"] == 600_000 and task["pollInterval"] > 0, created
        tid = task["taskId"]
        await anyio.sleep(1.5)  # the call detached (0.5 s budget); the task follows the job
        got = (await c.call("tasks/get", {"taskId": tid}))["result"]
        assert got["status"] == "working" and "job j_" in got["statusMessage"], got
        assert "running" in got["statusMessage"], got
        listed = (await c.call("tasks/list"))["result"]["tasks"]
        assert [t["taskId"] for t in listed] == [tid], listed
        result = (await c.call("tasks/result", {"taskId": tid}))["result"]  # waits until the job ended
        data = result["structuredContent"]
        assert data["state"] == "exited" and data["exit_status"] == 3, result
        assert data["new_stdout"] in ("done\n", {"text": "done\n"}), result
        assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": tid}
        assert not result.get("isError") and "resultType" not in result, result
        assert (await c.call("tasks/get", {"taskId": tid}))["result"]["status"] == "completed"
        again = await c.call("tasks/cancel", {"taskId": tid})
        assert again["error"]["code"] == -32602, again  # it is terminal already

        long = (await c.call("tools/call", {"name": "run_command", "task": {},
                                            "arguments": {"host": "local", "budget_s": 0.5, "command": "sleep 600"}}))
        lid = long["result"]["task"]["taskId"]
        for _ in range(40):  # until the call detached and the task follows the job
            got = (await c.call("tasks/get", {"taskId": lid}))["result"]
            if "job j_" in got.get("statusMessage", ""):
                break
            await anyio.sleep(0.25)
        job = got["statusMessage"].split()[1].rstrip(":")
        cancelled = (await c.call("tasks/cancel", {"taskId": lid}))["result"]
        assert cancelled["status"] == "cancelled" and "killed" in cancelled["statusMessage"], cancelled
        status = await c.call("tools/call", {"name": "job_status", "arguments": {"job_id": job}})
        assert status["result"]["structuredContent"]["state"] == "killed", status  # the job, not only the wait
        stopped = (await c.call("tasks/result", {"taskId": lid}))["result"]
        assert stopped["structuredContent"]["state"] == "killed", stopped  # the job_cancel's result

        asks = await c.call("tools/call", {"name": "run_command", "task": {}, "arguments": {
            "host": "local", "budget_s": 1, "stdin": "tty", "command": 'read -s -p "Password: " p; echo "got ${#p}"'}})
        aid = asks["result"]["task"]["taskId"]
        for _ in range(40):  # the job waits on a password: the task needs input (a person's, out of band)
            got = (await c.call("tasks/get", {"taskId": aid}))["result"]
            if got["status"] == "input_required":
                break
            await anyio.sleep(0.25)
        assert got["status"] == "input_required" and "Password:" in got["statusMessage"], got
        job = got["statusMessage"].split()[1].rstrip(":")
        typed = await c.call("tools/call", {"name": "job_input", "arguments": {"job_id": job, "text": "abc"}})
        assert typed["result"]["structuredContent"]["input"] == "written", typed
        done = (await c.call("tasks/result", {"taskId": aid}))["result"]
        assert done["structuredContent"]["state"] == "exited" and done["structuredContent"]["exit_status"] == 0, done
        assert (await c.call("tasks/get", {"taskId": aid}))["result"]["status"] == "completed"

        plain = await c.call("tools/call", {"name": "list_hosts", "task": {}, "arguments": {}})
        assert "task" not in plain["result"] and "structuredContent" in plain["result"], plain  # no task for it
        unknown = await c.call("tasks/get", {"taskId": "nope"})
        assert unknown["error"]["code"] == -32602, unknown
    finally:
        await proc.aclose() if proc.returncode is not None else None
        if proc.returncode is None:
            proc.terminate()
            with anyio.move_on_after(10):
                await proc.wait()
