"""Bytes that are not UTF-8 (a lone surrogate once decoded) get a clear error and lose nothing: from the CLI (run
with and without a policy, policy explain), the Python toolkit on the real sshd, and raw MCP JSON-RPC on stdio,
which must answer the request and go on serving (issue 13, second round)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import agent_tools
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit

from .conftest import ssh_host_for
from .sshd import RealSshd

REPO = Path(agent_tools.__file__).resolve().parent.parent
POLICY = REPO / "policies" / "default.yaml"
BAD = "touch /tmp/at13-utf8 \udcff"  # what `$'... \xff'` becomes in sys.argv


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    argv = [sys.executable, "-m", "agent_tools.cli", *args]
    return subprocess.run([a.encode("utf-8", "surrogateescape") for a in argv], capture_output=True, timeout=60,
                          env={**os.environ, "AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"),
                               "PYTHONPATH": str(REPO)}, stdin=subprocess.DEVNULL, check=False)


def test_the_cli_says_what_is_wrong(tmp_path: Path) -> None:
    for args in (["run", "local", "--", BAD], ["run", "local", "--policy", str(POLICY), "--", BAD]):
        res = cli(tmp_path, *args)
        out = res.stdout.decode() + res.stderr.decode()
        assert res.returncode == 1 and "Traceback" not in out and "not valid UTF-8" in out, out
        assert "\\udcff" in out  # shown as an escape
    as_json = json.loads(cli(tmp_path, "run", "local", "--json", "--", BAD).stdout)
    assert as_json["kind"] == "bad_arguments" and as_json["command"] == BAD.replace("\udcff", "\\udcff")
    explain = cli(tmp_path, "policy", "explain", "h", "--policy", str(POLICY), "--", BAD)
    assert explain.returncode == 0 and b"touch /tmp/at13-utf8 \\udcff" in explain.stdout, explain
    assert not Path("/tmp/at13-utf8").exists()


async def test_the_toolkit_refuses_it_on_a_real_host_and_stores_nothing(real_sshd: RealSshd, tmp_path: Path) -> None:
    tk = Toolkit(HostRegistry({"sshd": ssh_host_for(real_sshd)}), journal=Journal(tmp_path / "j.sqlite3"))
    async with tk:
        for args in ({"command": BAD}, {"command": "true", "cwd": "/tmp/\udcff"}, {"command": "true",
                                                                                    "env": {"X": "\udcff"}}):
            out = await tk.dispatch("run_command", {"host": "sshd", **args})
            assert out["outcome"] == "error" and out["kind"] == "bad_arguments", out
            json.dumps(out, ensure_ascii=False).encode("utf-8")  # every result can be sent
        ok = await tk.dispatch("run_command", {"host": "sshd", "command": "printf 'ok \\377\\n'"})
        assert ok["outcome"] == "finished" and ok["stdout"]["text"] == "ok \ufffd\n"
        assert [j.command for j in tk.journal.list()] == ["printf 'ok \\377\\n'"]


def test_raw_mcp_gets_an_answer_and_the_server_goes_on(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "agent_tools.cli", "mcp", "--policy", str(POLICY)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"),
                                 "PYTHONPATH": str(REPO)})
    assert proc.stdin is not None and proc.stdout is not None

    def send(line: bytes) -> None:
        proc.stdin.write(line + b"\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]

    def reply() -> dict[str, object]:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "no reply within 30 s"
        return json.loads(proc.stdout.readline())  # type: ignore[union-attr,no-any-return]

    try:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}).encode())
        reply()
        send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        send(b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_command","arguments":'
             b'{"host":"local","command":"touch /tmp/at13-utf8 \\udcff"}}}')
        bad = reply()
        assert bad["id"] == 2 and bad["error"]["code"] == -32602  # type: ignore[index]
        assert "not valid Unicode" in bad["error"]["message"]  # type: ignore[index]
        send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "run_command", "arguments": {"host": "local", "command": "echo still serving"}}}).encode())
        good = reply()
        assert good["id"] == 3 and "still serving" in json.dumps(good)
    finally:
        proc.kill()
        proc.wait()
    assert not Path("/tmp/at13-utf8").exists()
