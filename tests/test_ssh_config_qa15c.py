"""Issue 15, qa15c findings 12 and 8: OpenSSH configs nobody here wrote, on the real sshd on loopback with ``ssh``
and ``ssh -G`` as ground truth — ProxyCommand and ProxyJump compete (whichever is obtained first wins), and a job
on an alias a wildcard ``Host`` line names is not called renamed when its config file changes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_tools.hosts import SshHost, SshSettings
from agent_tools.hosts.base import run_on
from agent_tools.hosts.ssh_config import resolve

from .sshd import RealSshd

REPO = Path(__file__).resolve().parent.parent


def _common(server: RealSshd) -> str:
    return f"""\
Host *
    Port {server.port}
    User {server.user}
    IdentityFile {server.client_key_path}
    IdentitiesOnly yes
    IdentityAgent none
    UserKnownHostsFile {server.known_hosts_path}
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    UpdateHostKeys no
    BatchMode yes
    ConnectTimeout 5
"""


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A loopback port that is bound but does not listen: a connect is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


def _ssh_G(config: Path, alias: str) -> dict[str, str]:
    out = subprocess.run(["ssh", "-G", "-F", str(config), alias], capture_output=True, text=True, check=True,
                         stdin=subprocess.DEVNULL).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def _ssh(config: Path, alias: str, *remote: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ssh", "-F", str(config), alias, *remote], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def _logins(server: RealSshd, since: int) -> int:
    return server.log_text()[since:].count("Accepted publickey for ")


@pytest.fixture
def proxy_cfg(real_sshd: RealSshd, dead_port: int, tmp_path: Path) -> Path:
    path = tmp_path / "ssh_config"
    path.write_text(f"""\
# every v-* host through a bastion, except those that say otherwise first (the common idiom)
Host v-pcnone
    ProxyCommand none
Host v-pcw
    ProxyCommand ssh -F {path} -W %h:%p hopok
Host v-pjfirst
    ProxyJump hopok
Host v-pjnone
    ProxyJump none
Host v-*
    HostName 127.0.0.1
    ProxyJump hopdead
    ProxyCommand ssh -F {path} -W %h:%p hopdead
Host hopok
    HostName 127.0.0.1
Host hopdead
    HostName 127.0.0.1
    Port {dead_port}
{_common(real_sshd)}""")
    return path


@pytest.mark.parametrize(("alias", "proxycommand", "jumps", "connections"), [
    ("v-pcnone", None, [], 1),            # ProxyCommand none first: no ProxyJump from Host v-*
    ("v-pcw", "ssh", [], 2),              # a ProxyCommand first: the wildcard's ProxyJump is void
    ("v-pjfirst", None, ["hopok"], 2),    # a ProxyJump first: the wildcard's ProxyCommand is void
])
async def test_proxycommand_and_proxyjump_whichever_is_obtained_first_wins_as_ssh(
        real_sshd: RealSshd, proxy_cfg: Path, alias: str, proxycommand: str | None, jumps: list[str],
        connections: int) -> None:
    """Finding 12: ssh_config(5) ProxyJump: "whichever is specified first will prevent later instances of the
    other option from taking effect". agent_tools kept both and went through the wildcard's (dead) ProxyJump."""
    truth = _ssh_G(proxy_cfg, alias)
    resolved = resolve(alias, [proxy_cfg])
    assert [h.host for h in resolved.jumps] == ([truth["proxyjump"]] if "proxyjump" in truth else []) == jumps
    pc = resolved.config.get("ProxyCommand")
    assert (pc.split()[0] if isinstance(pc, str) else None) == (truth["proxycommand"].split()[0]
                                                                if "proxycommand" in truth else None) == proxycommand
    mark = len(real_sshd.log_text())
    ssh = _ssh(proxy_cfg, alias, "echo", "via-ssh")
    assert ssh.returncode == 0 and ssh.stdout == "via-ssh\n", ssh.stderr
    assert _logins(real_sshd, mark) == connections
    mark = len(real_sshd.log_text())
    host = SshHost(SshSettings(alias, config_paths=[str(proxy_cfg)], warm_sessions=0))
    try:
        res = await run_on(host, "echo via-agent-tools")
    finally:
        await host.aclose()
    assert res.stdout == b"via-agent-tools\n"
    assert _logins(real_sshd, mark) == connections  # the same route: the target (and hopok when ssh went by it)


def test_proxyjump_none_first_stops_only_later_proxyjumps_as_ssh(proxy_cfg: Path) -> None:
    """``ProxyJump none`` obtained first voids the wildcard's ProxyJump but not its later ProxyCommand (ssh -G)."""
    truth = _ssh_G(proxy_cfg, "v-pjnone")
    resolved = resolve("v-pjnone", [proxy_cfg])
    assert "proxyjump" not in truth and resolved.jumps == []
    assert truth["proxycommand"].endswith("hopdead") and str(resolved.config.get("ProxyCommand")).endswith("hopdead")


async def test_a_dead_proxyjump_hop_is_named_in_the_error(proxy_cfg: Path) -> None:
    """The error of a hop that cannot be reached says it was the ProxyJump hop (its address is not the host's)."""
    host = SshHost(SshSettings("v-other", config_paths=[str(proxy_cfg)], warm_sessions=0))
    try:
        with pytest.raises(Exception) as info:
            await run_on(host, "true")
    finally:
        await host.aclose()
    assert "at ProxyJump hop hopdead, 127.0.0.1:" in str(info.value), info.value
    assert getattr(info.value, "kind", None) == "unreachable"


def test_status_of_a_job_on_an_alias_a_wildcard_names_says_the_config_changed_not_renamed(
        real_sshd: RealSshd, dead_port: int, tmp_path: Path) -> None:
    """Finding 8: a job on `lo-b`, reached through `Host lo-*` lines only; the file changes (lo-b's port with it):
    status said "no Host line in it ... names lo-b now: renamed, or its Include removed?" (only literal aliases
    were looked up), while `Host lo-*` still names it (ssh -G: the same host name, another port)."""
    import json

    cfg = tmp_path / "ssh_config"

    def write(first: str) -> None:
        cfg.write_text(f"""\
Host {first}
    Port {real_sshd.port}
Host lo-*
    HostName 127.0.0.1
    User {real_sshd.user}
    IdentityFile {real_sshd.client_key_path}
    IdentitiesOnly yes
    IdentityAgent none
    UserKnownHostsFile {real_sshd.known_hosts_path}
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    BatchMode yes
    ConnectTimeout 5
Host *
    Port {dead_port}
""")

    write("lo-* !lo-skip")
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(home), "AGENT_TOOLS_STATE_DIR": str(tmp_path / "st"),
           "AGENT_TOOLS_SSH_CONFIG": ""}

    def cli(*args: str) -> dict[str, object]:
        res = subprocess.run([sys.executable, "-m", "agent_tools.cli", args[0], "--json", *args[1:]], env=env,
                             capture_output=True, text=True, timeout=90)
        return json.loads(res.stdout)  # type: ignore[no-any-return]

    started = cli("run", "-F", str(cfg), "--budget", "0.5", "lo-b", "--", "sleep 30")
    assert started["outcome"] == "detached", started
    try:
        write("lo-* !lo-skip !lo-b")  # only lo-b's port changes
        assert (_ssh_G(cfg, "lo-b")["hostname"], _ssh_G(cfg, "lo-b")["port"]) == ("127.0.0.1", str(dead_port))
        status = cli("status", str(started["job_id"]))
        assert status["outcome"] == "error", status
        msg = str(status["message"])
        assert "renamed" not in msg and "no Host line" not in msg, msg
        assert (f"changed since the launch; the line Host lo-* ({cfg}) applies to lo-b now, and it is reached as "
                "the file says") in msg, msg
    finally:
        write("lo-* !lo-skip")
        assert cli("cancel", str(started["job_id"]), "--grace", "1")["state"] == "killed"
