"""Issue 17, item 4 over MCP: a job the session started sends a notification when it ends or its readiness changes,
a waiting job_status reports the job's newest lines as progress, and list_jobs says what changed since the last
look. The official MCP client over stdio, against ``agent-tools mcp`` as a separate process."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

import agent_tools

from .terminal import files_holding

REPO = Path(agent_tools.__file__).resolve().parent.parent


def _params(tmp_path: Path, *args: str) -> StdioServerParameters:
    env = {"AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"), "XDG_STATE_HOME": str(tmp_path / "xdg"),
           "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    return StdioServerParameters(command=sys.executable, args=["-m", "agent_tools.cli", "-vv", "mcp", *args], env=env,
                                 cwd=str(tmp_path))


def _data(result: types.CallToolResult) -> dict[str, Any]:
    return dict(result.structured_content or {})


def _text(view: Any) -> str:
    return "" if view is None else view if isinstance(view, str) else str(view.get("text", ""))


async def test_a_detached_job_tells_the_session_when_it_ends_and_list_jobs_says_what_changed(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    got = anyio.Event()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if isinstance(params.data, dict) and params.logger == "agent_tools.jobs":
            assert params.level == "notice"
            events.append(params.data)
            got.set()

    with (tmp_path / "server-stderr.log").open("w") as errlog:
        async with stdio_client(_params(tmp_path), errlog=errlog) as (read, write), \
                ClientSession(read, write, logging_callback=on_log) as session:
            with anyio.fail_after(30):
                init = await session.initialize()
            assert init.capabilities.logging is not None  # notifications/message is declared
            started = _data(await session.call_tool("run_command", {"host": "local", "budget_s": 0.5,
                                                                    "command": "sleep 2; echo done; exit 4"}))
            job = started["job_id"]
            assert started["outcome"] == "detached", started
            finished = _data(await session.call_tool("run_command", {"host": "local", "command": "true"}))
            assert finished["outcome"] == "finished"  # not a job to be told about
            listed = _data(await session.call_tool("list_jobs", {}))
            assert all("changed" not in j for j in listed["jobs"]), listed  # both as the agent last saw them
            with anyio.fail_after(60):
                await got.wait()
            assert len(events) == 1, events
            event = events[0]
            assert event["event"] == "job_ended" and event["was"] == {"state": "running", "readiness": "none"}, event
            info = event["job"]
            assert info["job_id"] == job and info["state"] == "exited" and info["exit_status"] == 4, info
            # the list says what changed since the agent last looked (the notification is not the agent's look) ...
            listed = _data(await session.call_tool("list_jobs", {}))
            entry = next(j for j in listed["jobs"] if j["job_id"] == job)
            assert entry["changed"] == "exited (was running)", listed
            # ... and once listed, nothing has changed since
            again = _data(await session.call_tool("list_jobs", {}))
            assert all("changed" not in j for j in again["jobs"]), again
            # the agent has not seen the output yet: it is still new for its own job_status
            status = _data(await session.call_tool("job_status", {"job_id": job}))
            assert _text(status["new_stdout"]) == "done\n", status


async def test_a_readiness_change_and_the_end_are_told_and_a_wait_reports_the_newest_lines(tmp_path: Path) -> None:
    """A policy rule gives the job a log probe: pending -> ready while it runs is told (job_readiness), then its end
    (job_ended); a job_status that waits sends the lines the job prints meanwhile as progress messages."""
    log_file = tmp_path / "serve.log"
    script = tmp_path / "serve.py"
    script.write_text("import sys, time\n"
                      "for i in range(10):\n"
                      "    print(f'loading step {i}', flush=True)\n"
                      "    time.sleep(0.5)\n"
                      f"open({str(log_file)!r}, 'a').write('serving\\n')\n"
                      "time.sleep(10)\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nhosts: ['*']\ndefaults:\n  decision: allow\nrules:\n  - id: serve\n"
                      "    match: [python3, '*/serve.py']\n    decision: allow\n    probes:\n"
                      f"      - {{kind: log, path: '{log_file}', pattern: serving}}\n")
    log_file.write_text("")
    events: list[dict[str, Any]] = []
    ended = anyio.Event()
    progress: list[str] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if isinstance(params.data, dict) and params.logger == "agent_tools.jobs":
            events.append(params.data)
            if params.data.get("event") == "job_ended":
                ended.set()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    with (tmp_path / "server-stderr.log").open("w") as errlog:
        async with stdio_client(_params(tmp_path, "--policy", str(policy)), errlog=errlog) as (read, write), \
                ClientSession(read, write, logging_callback=on_log) as session:
            with anyio.fail_after(30):
                await session.initialize()
            started = _data(await session.call_tool("run_command", {"host": "local", "budget_s": 0.5,
                                                                    "command": f"python3 {script}"}))
            assert started["outcome"] == "detached", started
            job = started["job_id"]
            seen = _text(started.get("stdout"))
            status = _data(await session.call_tool("job_status", {"job_id": job, "wait_s": 2.5},
                                                   progress_callback=on_progress))
            seen += _text(status.get("new_stdout"))
            # the progress messages carried lines the job printed while the call waited, and the result still
            # shows them: they were not taken from the agent
            shown = [line for m in progress for line in m.splitlines()[1:]]
            assert any(line.startswith("loading step ") for line in shown), progress
            assert all(line in seen for line in shown), (shown, seen)
            with anyio.fail_after(60):
                await ended.wait()
            kinds = [(e["event"], e["job"]["state"], e["job"].get("readiness")) for e in events]
            assert kinds == [("job_readiness", "running", "ready"), ("job_ended", "exited", "ready")], events
            assert events[0]["was"] == {"state": "running", "readiness": "pending"}, events


# ---------------------------------------------------------------- item 3 over MCP: a one-time page for a password
SECRET = "Xk9-elicited-" + os.urandom(4).hex()


def _http(url: str, body: bytes | None = None, host: str | None = None) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/x-www-form-urlencoded", **({"Host": host} if host else {})}
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # loopback only
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


async def test_a_password_prompt_is_given_through_a_one_time_url_elicitation_page(tmp_path: Path) -> None:
    """MCP URL-mode elicitation (2025-11-25): the operator's page writes the password to the job; the model never sees
    it, nor does any log, result or file of the run."""
    offered: list[types.ElicitRequestURLParams] = []
    completed = anyio.Event()

    async def on_elicit(context: Any, p: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(p, types.ElicitRequestURLParams), p  # never a form for a password
        offered.append(p)
        return types.ElicitResult(action="accept")

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ElicitCompleteNotification):
            completed.set()

    results: list[dict[str, Any]] = []
    log_path = tmp_path / "server-stderr.log"
    with log_path.open("w") as errlog:
        async with stdio_client(_params(tmp_path), errlog=errlog) as (read, write), \
                ClientSession(read, write, elicitation_callback=on_elicit, message_handler=on_message) as session:
            with anyio.fail_after(30):
                await session.initialize()
            asks = _data(await session.call_tool("run_command", {
                "host": "local", "stdin": "tty", "budget_s": 1,
                "command": 'read -s -p "Password: " p; echo; printf %s "$p" | sha256sum'}))
            results.append(asks)
            assert asks["outcome"] == "needs_input" and asks["secret"] is True, asks
            assert len(offered) == 1 and "one-time page" in asks["next"], asks
            url = offered[0].url
            assert url.startswith("http://127.0.0.1:") and url not in str(asks)  # the model is not given the page
            code, _ = await anyio.to_thread.run_sync(lambda: _http(url, host="evil.example"))
            assert code == 421  # another Host (DNS rebinding) is refused
            code, form = await anyio.to_thread.run_sync(lambda: _http(url))
            assert code == 200 and "type=password" in form, form
            code, sent = await anyio.to_thread.run_sync(lambda: _http(url, f"secret={SECRET}".encode()))
            assert code == 200 and "Sent to job" in sent and SECRET not in sent, sent
            with anyio.fail_after(30):
                await completed.wait()
            again = await anyio.to_thread.run_sync(lambda: _http(url, b"secret=other"))
            assert again[0] == 404, again  # used once
            done = _data(await session.call_tool("job_status", {"job_id": asks["job_id"], "wait_s": 10}))
            results.append(done)
            assert done["state"] == "exited" and done["exit_status"] == 0, done
            page = _data(await session.call_tool("job_output", {"job_id": asks["job_id"]}))
            assert hashlib.sha256(SECRET.encode()).hexdigest() in page["text"], page
    assert SECRET not in json.dumps(results) and SECRET not in log_path.read_text()
    assert files_holding(tmp_path, SECRET.encode()) == []  # the journal, the job's directory, anything written
