"""OpenSSH client configs that ssh(1) accepts reach the same machine as the same user through agent_tools.

Ground truth is ssh(1) itself on the real systemd test hosts (``ssh -F CFG ALIAS``, ``ssh -G``): a missing
IdentityFile among several, a missing CertificateFile, ``Match final``, ProxyJump through a hop whose config has
a missing key, ProxyJump through a hop that is itself reached through another hop (an address only the first hop
can reach), and a key file that cannot be used (a clear, non-retryable ``ssh_config`` error naming it).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent_tools.hosts import SshHost, SshSettings
from agent_tools.hosts.base import run_on
from agent_tools.hosts.ssh_config import resolve
from agent_tools.jobs.manager import JobRunner
from tests.hosts.nspawn import HostPool

WHO = "echo $(hostname) $(id -un) ${SSH_CLIENT%% *}"


@pytest.fixture
def cfg(systemd_hosts: HostPool, tmp_path: Path) -> Path:
    pool = systemd_hosts
    key, h1, h2 = pool.identity_file, pool.address(1), pool.address(2)
    path = tmp_path / "ssh_config"
    path.write_text(f"""\
IdentitiesOnly yes
IdentityAgent none
UserKnownHostsFile {pool.known_hosts}
GlobalKnownHostsFile /dev/null
StrictHostKeyChecking yes
BatchMode yes
ConnectTimeout 10

Host missing-first
    HostName {h1}
    User root
    IdentityFile {tmp_path}/no-such-key
    IdentityFile {key}
Host cert-missing
    HostName {h1}
    User root
    IdentityFile {key}
    CertificateFile {tmp_path}/no-such-key-cert.pub
# ssh_config(5): the final pass keeps what the first set; this block sees the HostName resolved below
Match final host {h2}
    User agent
Host final-agent
    HostName {h2}
    IdentityFile {key}
Host final-root
    HostName {h2}
    User root
    IdentityFile {key}
Host via-hop
    HostName {h2}
    User root
    IdentityFile {key}
    ProxyJump missing-first
# a hop reached through a hop of its own: h1's sshd on h1's own loopback (only h1 can reach that address), then h2
Host nested-mid
    HostName 127.0.0.1
    HostKeyAlias {h1}
    User root
    IdentityFile {key}
    ProxyJump missing-first
Host via-nested
    HostName {h2}
    User root
    IdentityFile {key}
    ProxyJump nested-mid
Host key-is-a-directory
    HostName {h1}
    User root
    IdentityFile {tmp_path}
""")
    return path


def _ssh(config: Path, alias: str) -> str:
    res = subprocess.run(["ssh", "-F", str(config), alias, WHO], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


async def _agent_tools(config: Path, alias: str) -> str:
    host = SshHost(SshSettings(alias, config_paths=[str(config)], warm_sessions=0))
    try:
        res = await run_on(host, WHO)
    finally:
        await host.aclose()
    assert res.exit_status == 0, res
    return res.stdout.decode().strip()


@pytest.mark.parametrize("alias", ["missing-first", "cert-missing", "final-agent", "final-root", "via-hop",
                                   "via-nested"])
async def test_same_machine_same_user_as_ssh(cfg: Path, alias: str, systemd_hosts: HostPool) -> None:
    truth = _ssh(cfg, alias)
    assert await _agent_tools(cfg, alias) == truth
    expected = {"missing-first": ("at-h1", "root"), "cert-missing": ("at-h1", "root"),
                "final-agent": ("at-h2", "agent"), "final-root": ("at-h2", "root"), "via-hop": ("at-h2", "root"),
                "via-nested": ("at-h2", "root")}[alias]
    assert tuple(truth.split()[:2]) == expected  # the config means what the test says it means
    if alias in ("via-hop", "via-nested"):  # reached through the hop: at-h2 sees the connection come from at-h1
        assert truth.split()[2] == systemd_hosts.address(1)


def test_resolution_matches_ssh_G(cfg: Path) -> None:
    for alias in ("missing-first", "final-agent", "final-root", "via-hop"):
        g = subprocess.run(["ssh", "-G", "-F", str(cfg), alias], capture_output=True, text=True, check=True).stdout
        opts = [line.split(" ", 1) for line in g.splitlines() if " " in line]
        want = {k: v for k, v in opts if k in ("hostname", "user", "port", "proxyjump")}
        got = resolve(alias, [cfg])
        assert (got.hostname, got.user, str(got.port)) == (want["hostname"], want["user"], want["port"]), alias
        assert [h.host for h in got.jumps] == ([want["proxyjump"]] if "proxyjump" in want else [])
    missing = resolve("missing-first", [cfg])
    assert missing.missing_files == [str(cfg.parent / "no-such-key")] and missing.identity_files is not None


async def test_an_unusable_key_file_is_a_config_error_naming_it(cfg: Path, runner: JobRunner) -> None:
    host = SshHost(SshSettings("key-is-a-directory", config_paths=[str(cfg)], warm_sessions=0))
    try:
        out = await runner.run(host, "true", budget_s=10)
    finally:
        await host.aclose()
    assert out.outcome == "error", out
    assert (out.kind, out.retryable) == ("ssh_config", False), out  # type: ignore[union-attr]
    assert str(cfg.parent) in out.message  # type: ignore[union-attr]
