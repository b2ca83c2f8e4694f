"""qa13c #2: a ``log`` probe read any file with no policy check (a private key shown as evidence, a regex oracle on
/etc/shadow), opened a FIFO standing for /dev/watchdog, ignored its deadline and left ``tail`` on the host. Now a
probe's file read is decided as ``cat PATH`` (refused where the policy asks or denies), only a regular file is
opened, a round of checks ends at the deadline. Real parts: the nspawn systemd host at-h1 through the official MCP
client (in process), the shipped default policy; the deadline with a host that never answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp import Client

import agent_tools
from agent_tools.adapters.mcp_server import build_mcp_server
from agent_tools.hosts.base import ExecResult
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.policy import PolicySet
from agent_tools.testing import FunctionHost
from agent_tools.tools.toolkit import Toolkit

from .hosts.nspawn import HostPool

REPO = Path(agent_tools.__file__).resolve().parent.parent
POLICY = REPO / "policies" / "default.yaml"
HOST = "at-h1"
FIFO = "/tmp/qa13c-fifo"


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    data = json.loads(result.content[0].text)
    assert isinstance(data, dict)
    return data


def host_sh(pool: HostPool, cmd: str) -> str:
    return pool.run(HOST, cmd, check=True).stdout


async def test_a_log_probe_reads_only_what_the_policy_lets_it_and_never_opens_a_fifo(systemd_hosts: HostPool,
                                                                                    tmp_path: Path) -> None:
    key_line = host_sh(systemd_hosts, "sed -n 3p /etc/ssh/ssh_host_ed25519_key").strip()
    assert len(key_line) > 20
    # a FIFO with a writer waiting, as /dev/watchdog would be armed by an open: the writer leaves a mark once opened
    host_sh(systemd_hosts, f"rm -f {FIFO} {FIFO}-opened; mkfifo {FIFO}; setsid sh -c 'echo WD > {FIFO} && "
                           f"touch {FIFO}-opened' </dev/null >/dev/null 2>&1 & echo $! > {FIFO}-writer.pid")
    invocation = host_sh(systemd_hosts, "systemctl show -p InvocationID --value ssh.service")
    tk = Toolkit(HostRegistry(ssh_config=[str(systemd_hosts.ssh_config)]), journal=Journal(tmp_path / "j.sqlite3"),
                 policy=PolicySet.load([POLICY]))
    try:
        async with tk, Client(build_mcp_server(tk), mode="legacy") as client:
            with anyio.fail_after(120):
                for path, pattern, verb in (("/etc/ssh/ssh_host_ed25519_key", "^AAAE", "asks first"),
                                            ("/etc/shadow", "^root:\\$y\\$", "asks first"),
                                            ("/root/.ssh/deploy_key", ".", "asks first"),
                                            ("/dev/watchdog", "WD", "denies")):
                    out = structured(await client.call_tool("wait_for", {
                        "host": HOST, "probes": [{"kind": "log", "path": path, "pattern": pattern}], "deadline_s": 5}))
                    assert out["outcome"] == "error" and out["kind"] == "policy", (path, out)
                    assert f"the policy {verb}" in out["message"] and "read_file" in out["message"], out
                    assert key_line not in json.dumps(out), out
                restart = structured(await client.call_tool("restart_service", {
                    "host": HOST, "unit": "ssh.service",
                    "probes": [{"kind": "log", "path": "/etc/shadow", "pattern": "^root:"}]}))
                assert restart["outcome"] == "error" and restart["kind"] == "policy", restart
                t0 = anyio.current_time()
                fifo = structured(await client.call_tool("wait_for", {
                    "host": HOST, "probes": [{"kind": "log", "path": FIFO, "pattern": "WD"}], "deadline_s": 4}))
                took = anyio.current_time() - t0
                assert fifo["outcome"] == "failed" and "not a regular file" in fifo["probes"][0]["evidence"], fifo
                assert took < 4, took
                # an ordinary log file is still read
                host_sh(systemd_hosts, "echo 'qa13c ready' >> /tmp/qa13c.log")
                ok = structured(await client.call_tool("wait_for", {
                    "host": HOST, "probes": [{"kind": "log", "path": "/tmp/qa13c.log", "pattern": "qa13c ready"}],
                    "deadline_s": 10}))
                assert ok["outcome"] == "ready", ok
        await anyio.sleep(1)
        assert host_sh(systemd_hosts, f"ls {FIFO}-opened 2>/dev/null || echo none").strip() == "none"
        assert host_sh(systemd_hosts, "pgrep -x tail || echo none").strip() == "none"
        assert host_sh(systemd_hosts, "systemctl show -p InvocationID --value ssh.service") == invocation
    finally:
        host_sh(systemd_hosts, f"kill $(cat {FIFO}-writer.pid) 2>/dev/null; rm -f {FIFO} {FIFO}-opened "
                               f"{FIFO}-writer.pid /tmp/qa13c.log")


async def test_wait_for_ends_at_its_deadline_when_a_check_never_answers(tmp_path: Path) -> None:
    async def handler(command: str, stdin: bytes) -> ExecResult:
        if "@@file" in command:
            await anyio.sleep_forever()  # a read that blocks (a FIFO, a hung file system)
        return ExecResult(0, stdout=b"")

    tk = Toolkit(HostRegistry({"fake": FunctionHost(handler, name="fake")}), journal=Journal(tmp_path / "j.sqlite3"))
    async with tk:
        t0 = anyio.current_time()
        with anyio.fail_after(30):
            out = await tk.dispatch("wait_for", {"host": "fake", "deadline_s": 2,
                                                 "probes": [{"kind": "log", "path": "/var/log/x", "pattern": "y"}]})
        took = anyio.current_time() - t0
    assert out["outcome"] == "deadline_exceeded", out
    assert "no answer within deadline_s=2" in out["probes"][0]["evidence"], out
    assert took < 4, took
