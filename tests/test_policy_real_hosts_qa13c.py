"""qa13c #1 and #5 on a real systemd host: under the shipped default policy, reads of host keys and password hashes
through recursive or indirect readers are asked about and print nothing, and the deny rules that a glob, a wrapper
or a number written another way turned into ``ask`` are denied again (nothing runs; the host does not reboot).
Real parts: the nspawn host at-h1 (its own sshd, systemd and keys), the Toolkit's dispatch seam."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import agent_tools
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.policy import PolicySet
from agent_tools.tools.toolkit import Toolkit

from .hosts.nspawn import HostPool

REPO = Path(agent_tools.__file__).resolve().parent.parent
HOST = "at-h1"


@pytest.fixture
async def tk(systemd_hosts: HostPool, tmp_path: Path) -> AsyncIterator[Toolkit]:
    toolkit = Toolkit(HostRegistry(ssh_config=[str(systemd_hosts.ssh_config)]),
                      journal=Journal(tmp_path / "journal.sqlite3"),
                      policy=PolicySet.load([REPO / "policies" / "default.yaml"]))
    try:
        yield toolkit
    finally:
        await toolkit.aclose()


async def test_recursive_reads_of_keys_and_hashes_ask_and_denied_reboots_stay_denied(
        tk: Toolkit, systemd_hosts: HostPool) -> None:
    key_line = systemd_hosts.run(HOST, "sed -n 3p /etc/ssh/ssh_host_ed25519_key", check=True).stdout.strip()
    asked = ["grep -r . /etc/ssh", "grep -r agent /etc", "grep -rI . /root/.ssh", "diff -rN /tmp /etc/ssh",
             "find /etc -exec grep -H . {} +", "find /etc -name shadow -exec cat {} \\;",
             "find /etc/ssh -name 'ssh_host_ed*' -exec cat {} +", "grep -rh root: /etc | tr '$' '%'",
             "cd /etc/ssh && grep -r . .", "cat /proc/1/environ"]
    for command in asked:
        out = await tk.dispatch("run_command", {"host": HOST, "command": command})
        assert out["outcome"] == "needs_approval" and out["rule_id"] == "secret-files", (command, out)
        assert key_line not in json.dumps(out)
    boots = systemd_hosts.run(HOST, "journalctl --list-boots --no-pager | wc -l", check=True).stdout
    for command in ("/usr/sbin/re[b]oot", "/???/????/reb??t", "systemctl rebo?t", "systemctl [r]eboot",
                    "/usr/bin/[s]ystemctl reboot", "timeout 5 /usr/sbin/[hr]e*", "kill -15 0001", 'kill -9 " 1"',
                    "kill -9 $((0+1))", "cp /dev/zero /dev/{sda,null}"):
        out = await tk.dispatch("run_command", {"host": HOST, "command": command})
        assert out["outcome"] == "denied", (command, out)
    assert systemd_hosts.run(HOST, "journalctl --list-boots --no-pager | wc -l", check=True).stdout == boots
    # an ordinary recursive read still runs
    ran = await tk.dispatch("run_command", {"host": HOST, "command": "grep -rl ExecStart /usr/lib/systemd/system"})
    assert ran["outcome"] == "finished" and "ssh.service" in ran["stdout"]["text"], ran
