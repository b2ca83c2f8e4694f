"""Issue 15, qa15c findings 7, 13 and 14 through the official MCP client (what the model sees) and the Python API:
``job_output(tail_lines=N)`` of a long last line gives the output's end, a reused ``idempotency_key`` with
another command is refused (that command did not run), and the server and CLI start with a clean stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client, types

from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit

REPO = Path(__file__).resolve().parent.parent


def _structured(result: types.CallToolResult) -> dict[str, Any]:
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    data = json.loads(result.content[0].text)
    assert result.structured_content == data
    assert isinstance(data, dict)
    return data


async def test_tail_lines_and_a_reused_idempotency_key_through_the_mcp_client(tmp_path: Path) -> None:
    """Finding 7: `tail_lines=1` of an output whose last line is 100 KB gave that line's *start* (8 KB of "b"),
    the error at its end 98 KB further on. Finding 13: `echo two` under the key of `echo one` answered `echo one`'s
    result without a word. Finding 14: the server's stderr held ten lines of DSA CryptographyDeprecationWarning."""
    env = {"AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"), "XDG_STATE_HOME": str(tmp_path / "xdg"),
           "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    params = StdioServerParameters(command=sys.executable, args=["-m", "agent_tools.cli", "mcp"], env=env,
                                   cwd=str(tmp_path))
    errlog_path = tmp_path / "server-stderr.log"
    with errlog_path.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(60):
                await session.initialize()
            long_last_line = "echo first; head -c 100000 /dev/zero | tr '\\0' 'b'; echo ' ERROR-AT-END'"
            run = _structured(await session.call_tool("run_command", {"host": "local", "command": long_last_line}))
            assert run["outcome"] == "finished", run
            tail = _structured(await session.call_tool("job_output", {"job_id": run["job_id"], "tail_lines": 1}))
            assert tail["text"].endswith("bbb ERROR-AT-END\n"), tail
            assert tail["eof"] is True and tail["next_offset"] == tail["total_bytes"] == 100020, tail
            assert tail["offset"] + len(tail["text"].encode()) == 100020, tail  # the page ends at the end
            assert tail["cut_before"] == tail["offset"] - 6, tail  # "first\n" is not asked for: the rest was cut
            assert "cut at its start" in tail["shortened"], tail
            two = _structured(await session.call_tool("job_output", {"job_id": run["job_id"], "tail_lines": 2}))
            assert two["text"].endswith("ERROR-AT-END\n") and two["cut_before"] == two["offset"], two

            one = _structured(await session.call_tool("run_command", {
                "host": "local", "command": "echo one", "idempotency_key": "k1"}))
            again = _structured(await session.call_tool("run_command", {
                "host": "local", "command": "echo one", "idempotency_key": "k1"}))
            assert one["outcome"] == again["outcome"] == "finished" and again["job_id"] == one["job_id"], again
            other = await session.call_tool("run_command", {
                "host": "local", "command": "echo two", "idempotency_key": "k1"})
            said = _structured(other)
            assert said["outcome"] == "error" and said["kind"] == "bad_arguments", said
            assert "'echo two' was not run" in said["message"] and one["job_id"] in said["message"], said
            assert "k1" not in said["message"]  # the key may be a secret: never repeated
    stderr = errlog_path.read_text()
    assert "DSA" not in stderr and "Warning" not in stderr, stderr


async def test_tail_lines_of_a_line_longer_than_limit_ends_at_the_end_in_the_python_api(tmp_path: Path) -> None:
    """The Python API (no result-size bound): a 3 MB line then `END`: tail_lines=2 gave the long line's start (16 KB
    of "a"); now the last `limit` bytes, ending with END, and cut_before says what of the two lines is left out."""
    tk = Toolkit(HostRegistry({}), journal=Journal(tmp_path / "j.sqlite3"))
    try:
        run = await tk.dispatch("run_command", {"host": "local", "command": "echo first; head -c 3000000 /dev/zero | "
                                                "tr '\\0' a; printf 'é%.0s' $(seq 1 600); echo; echo END"})
        assert run["outcome"] == "finished", run
        page = await tk.dispatch("job_output", {"job_id": run["job_id"], "tail_lines": 2, "limit": 1000})
        total = 6 + 3000000 + 1200 + 1 + 4
        assert page["next_offset"] == page["total_bytes"] == total and page["eof"], page
        assert page["text"] == "é" * 497 + "\nEND\n", page["text"][:40]
        assert page["offset"] == total - 999  # 1000 bytes back is inside an é: the page starts after it
        assert page["cut_before"] == page["offset"] - 6, page  # both lines but what is shown
        short = await tk.dispatch("job_output", {"job_id": run["job_id"], "tail_lines": 1})
        assert short["text"] == "END\n" and short["cut_before"] == 0, short  # the whole line fits: nothing cut
    finally:
        await tk.aclose()


def test_the_cli_starts_with_a_clean_stderr(tmp_path: Path) -> None:
    """Finding 14: every `agent-tools` call printed cryptography's DSA deprecation warning (asyncssh's import)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env.update({"PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(tmp_path / "state")})
    for args in (["jobs"], ["run", "local", "--", "true"]):
        res = subprocess.run([sys.executable, "-m", "agent_tools.cli", *args], capture_output=True, text=True,
                             env=env, timeout=120)
        assert res.returncode == 0, res.stderr
        assert res.stderr == "", res.stderr
