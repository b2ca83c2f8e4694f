"""SSH configs no one here wrote, on the real OpenSSH sshd on loopback: agent_tools must do what ssh(1) does.

Each test runs the real ``ssh`` (or ``ssh -G``) with the same config as ground truth: ProxyJump through a hop that
has its own ProxyJump (and a list whose later hop's ProxyJump ssh ignores), ``Match exec`` with ``%`` tokens,
``ConnectTimeout`` / ``ServerAliveInterval`` / ``ServerAliveCountMax`` taken from the config, and a ``-F`` file
that was deleted.
"""

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
from agent_tools.jobs.manager import JobRunner

from .sshd import RealSshd


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
"""


def _ssh(config: Path, alias: str, *remote: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ssh", "-F", str(config), alias, *remote], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env=env)


def _ssh_G(config: Path, alias: str, env: dict[str, str] | None = None) -> dict[str, str]:
    out = subprocess.run(["ssh", "-G", "-F", str(config), alias], capture_output=True, text=True, check=True,
                         env=env).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def _host(config: Path, alias: str) -> SshHost:
    return SshHost(SshSettings(alias, config_paths=[str(config)], warm_sessions=0))


def _logins(server: RealSshd, since: int) -> int:
    """Publickey logins sshd logged since byte ``since`` of its log (one per connection: target and each hop)."""
    return server.log_text()[since:].count("Accepted publickey for ")


# ---------------------------------------------------------------------------------------------- ProxyJump


@pytest.fixture
def jump_cfg(real_sshd: RealSshd, tmp_path: Path) -> Path:
    path = tmp_path / "ssh_config"
    path.write_text(f"""\
Host first
    HostName 127.0.0.1
Host mid
    HostName 127.0.0.1
    ProxyJump first
# mid has a ProxyJump of its own: ssh reaches mid through first, then the target through mid
Host nested
    HostName 127.0.0.1
    ProxyJump mid
# a list: ssh runs `ssh -J first -W %h:%p mid`, so mid's own ProxyJump is overridden (not followed)
Host listed
    HostName 127.0.0.1
    ProxyJump first,mid
Host loop-a
    HostName 127.0.0.1
    ProxyJump loop-b
Host loop-b
    HostName 127.0.0.1
    ProxyJump loop-a
{_common(real_sshd)}""")
    return path


@pytest.mark.parametrize(("alias", "connections"), [("nested", 3), ("listed", 3), ("mid", 2)])
async def test_proxyjump_hops_with_their_own_proxyjump_as_ssh(real_sshd: RealSshd, jump_cfg: Path, alias: str,
                                                             connections: int) -> None:
    mark = len(real_sshd.log_text())
    truth = _ssh(jump_cfg, alias, "echo", "via-ssh")
    assert truth.returncode == 0, truth.stderr
    assert _logins(real_sshd, mark) == connections  # what ssh itself did: one login per hop and the target

    mark = len(real_sshd.log_text())
    host = _host(jump_cfg, alias)
    try:
        res = await run_on(host, "echo via-agent-tools")
    finally:
        await host.aclose()
    assert res.stdout == b"via-agent-tools\n"
    assert _logins(real_sshd, mark) == connections


async def test_a_proxyjump_loop_is_a_config_error(jump_cfg: Path, runner: JobRunner) -> None:
    out = await runner.run(_host(jump_cfg, "loop-a"), "true", budget_s=30)
    assert out.outcome == "error", out
    assert (out.kind, out.retryable) == ("ssh_config", False), out  # type: ignore[union-attr]
    assert "ProxyJump" in out.message  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------- Match exec


async def test_match_exec_expands_tokens_as_ssh(real_sshd: RealSshd, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = "%h %n %p %r %u %L %l %d %i %C %k"
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""\
Host exec-alias
    HostName 127.0.0.1
    User {real_sshd.user}
Match exec "printf '%%s\\n' {tokens} >> $TOKENS_OUT"
    Compression no
# the port is set only when ssh's expansion of the tokens is true of this host
Match host 127.0.0.1 exec "test %n = exec-alias && test %r = {real_sshd.user} && test '%h' = 127.0.0.1"
    Port {real_sshd.port}
{_common(real_sshd).replace(f"    Port {real_sshd.port}", "")}""")
    by_ssh, by_us = tmp_path / "by-ssh", tmp_path / "by-agent-tools"
    env = {**os.environ, "TOKENS_OUT": str(by_ssh)}
    assert _ssh_G(cfg, "exec-alias", env)["port"] == str(real_sshd.port)
    truth = _ssh(cfg, "exec-alias", "echo", "ok", env={**env, "TOKENS_OUT": os.devnull})
    assert truth.returncode == 0, truth.stderr

    monkeypatch.setenv("TOKENS_OUT", str(by_us))
    host = _host(cfg, "exec-alias")
    try:
        assert (await run_on(host, "echo ok")).stdout == b"ok\n"
    finally:
        await host.aclose()
    words = by_ssh.read_text().split()
    assert words[:4] == ["127.0.0.1", "exec-alias", "22", real_sshd.user]  # the config means what it says
    assert by_us.read_text().split()[:len(tokens.split())] == words[:len(tokens.split())]


async def test_match_exec_runs_only_after_the_criteria_before_it_matched(real_sshd: RealSshd,
                                                                       tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""\
Host skip-alias
    HostName 127.0.0.1
Match host 10.9.9.9 exec "touch {ran}"
    Port 1
{_common(real_sshd)}""")
    assert _ssh_G(cfg, "skip-alias")["port"] == str(real_sshd.port)
    assert not ran.exists()  # ssh did not run it
    host = _host(cfg, "skip-alias")
    try:
        assert (await run_on(host, "echo ok")).stdout == b"ok\n"
    finally:
        await host.aclose()
    assert not ran.exists()


# ---------------------------------------------------------------------------------------------- timeouts


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts TCP connections and never says anything (no SSH banner)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


async def test_connect_timeout_from_the_config(real_sshd: RealSshd, tmp_path: Path, silent_port: int,
                                               runner: JobRunner) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""\
Host silent
    HostName 127.0.0.1
    Port {silent_port}
    ConnectTimeout 1
{_common(real_sshd)}""")
    truth = _ssh(cfg, "silent", "true")
    assert truth.returncode == 255 and "timed out" in truth.stderr, truth.stderr  # ssh gave up after 1 s
    host = _host(cfg, "silent")
    out = await runner.run(host, "true", budget_s=30)
    assert out.outcome == "error" and out.kind == "unreachable", out  # type: ignore[union-attr]
    assert "within 1 s" in out.message, out  # type: ignore[union-attr]
    assert host.connect_timeout_s == 1.0


async def test_server_alive_settings_from_the_config(real_sshd: RealSshd, tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""\
Host alive
    HostName 127.0.0.1
    ServerAliveInterval 7
    ServerAliveCountMax 5
{_common(real_sshd)}""")
    g = _ssh_G(cfg, "alive")
    host = _host(cfg, "alive")
    try:
        assert (await run_on(host, "true")).exit_status == 0
        conn = await host.connection()
        assert (conn._keepalive_interval, conn._keepalive_count_max) == (  # type: ignore[attr-defined]
            float(g["serveraliveinterval"]), int(g["serveralivecountmax"])) == (7.0, 5)
    finally:
        await host.aclose()
    explicit = SshHost(SshSettings("alive", config_paths=[str(cfg)], warm_sessions=0, keepalive_interval_s=2))
    try:
        await run_on(explicit, "true")
        conn = await explicit.connection()
        assert (conn._keepalive_interval, conn._keepalive_count_max) == (2.0, 5)  # type: ignore[attr-defined]
    finally:
        await explicit.aclose()


# ---------------------------------------------------------------------------------------------- -F files


async def test_a_deleted_config_file_is_an_error_naming_it(real_sshd: RealSshd, tmp_path: Path,
                                                           runner: JobRunner) -> None:
    cfg = tmp_path / "gone_config"
    cfg.write_text(real_sshd.config_path.read_text())
    host = _host(cfg, real_sshd.alias)
    cfg.unlink()
    truth = _ssh(cfg, real_sshd.alias, "true")
    assert truth.returncode == 255 and str(cfg) in truth.stderr
    out = await runner.run(host, "true", budget_s=10)
    assert out.outcome == "error", out
    assert (out.kind, out.retryable) == ("ssh_config", False), out  # type: ignore[union-attr]
    assert str(cfg) in out.message and "No such file" in out.message, out  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------- RequestTTY


@pytest.mark.parametrize("mode", ["no", "yes", "force"])
async def test_request_tty_as_ssh_without_a_terminal(real_sshd: RealSshd, tmp_path: Path, mode: str) -> None:
    # ssh_config(5): yes asks for a TTY only when stdin is one (never here); force always does
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host tty-alias\n    HostName 127.0.0.1\n    RequestTTY {mode}\n{_common(real_sshd)}")
    script = "tty; echo err >&2; printf 'a\\nb\\n'"
    truth = _ssh(cfg, "tty-alias", script)
    host = _host(cfg, "tty-alias")
    try:
        res = await run_on(host, script)
    finally:
        await host.aclose()
    ours = res.stdout.decode()
    assert ours.startswith("/dev/pts/") == truth.stdout.startswith("/dev/pts/") == (mode == "force"), truth
    # the same bytes as ssh: on a pty stderr joins stdout, and no \r is added to line ends
    assert ours.split("\n", 1)[1] == truth.stdout.split("\n", 1)[1], (ours, truth.stdout)
    own = ("Pseudo-terminal will not be allocated", "Connection to ")  # what ssh itself says
    assert res.stderr.decode().splitlines() == [ln for ln in truth.stderr.splitlines() if not ln.startswith(own)]


# ---------------------------------------------------------------------------------------------- CanonicalizeHostname


async def test_canonicalize_hostname_reparses_with_match_canonical_as_ssh(real_sshd: RealSshd,
                                                                         tmp_path: Path) -> None:
    # ssh_config(5): with CanonicalizeHostname the files are parsed a final time and Match canonical holds then,
    # even when the name is left alone (here an address); the port is set only in that pass
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""\
CanonicalizeHostname yes
CanonicalDomains example.invalid
Host canon-alias
    HostName 127.0.0.1
Match canonical host 127.0.0.1
    Port {real_sshd.port}
{_common(real_sshd).replace(f"    Port {real_sshd.port}", "")}""")
    assert _ssh_G(cfg, "canon-alias")["port"] == str(real_sshd.port)
    assert _ssh(cfg, "canon-alias", "true").returncode == 0
    host = _host(cfg, "canon-alias")
    try:
        assert (await run_on(host, "echo ok")).stdout == b"ok\n"
    finally:
        await host.aclose()


async def test_canonicalize_without_fallback_is_an_unknown_host_as_ssh(real_sshd: RealSshd, tmp_path: Path,
                                                                      runner: JobRunner) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("CanonicalizeHostname yes\nCanonicalDomains example.invalid\nCanonicalizeFallbackLocal no\n"
                   f"{_common(real_sshd)}")
    truth = _ssh(cfg, "nosuchhost-canon", "true")
    assert truth.returncode == 255 and "Could not resolve host" in truth.stderr, truth.stderr
    out = await runner.run(_host(cfg, "nosuchhost-canon"), "true", budget_s=30)
    assert out.outcome == "error", out
    assert (out.kind, out.retryable) == ("unknown_host", False), out  # type: ignore[union-attr]
    assert "example.invalid" in out.message  # type: ignore[union-attr]


def test_the_cli_names_a_deleted_config_file(tmp_path: Path) -> None:
    gone = tmp_path / "deleted_config"
    env = {**os.environ, "AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "400",
           "PYTHONPATH": str(Path(__file__).parents[1])}
    res = subprocess.run([sys.executable, "-m", "agent_tools.cli", "run", "-F", str(gone), "somehost", "--", "true"],
                         capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert res.returncode == 1
    said = " ".join((res.stdout + res.stderr).split())  # the console wraps long lines
    assert str(gone) in said and "No such file or directory" in said, said


# ---------------------------------------------------------------------------------------------- UserKnownHostsFile


async def test_user_known_hosts_file_tokens_and_variables_as_ssh(real_sshd: RealSshd, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    kh = tmp_path / f"known_hosts_kh-alias_{real_sshd.port}"
    kh.write_text(real_sshd.known_hosts_path.read_text())
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host kh-alias\n    HostName 127.0.0.1\n    UserKnownHostsFile ${KH_DIR}/known_hosts_%n_%p\n"
                   + _common(real_sshd))
    monkeypatch.setenv("KH_DIR", str(tmp_path))
    assert _ssh_G(cfg, "kh-alias")["userknownhostsfile"] == str(kh)
    assert _ssh(cfg, "kh-alias", "true").returncode == 0
    host = _host(cfg, "kh-alias")
    try:
        assert (await run_on(host, "echo ok")).stdout == b"ok\n"
    finally:
        await host.aclose()


# qa15 finding 10: ssh expands ~ and %d in file options from the password database, not $HOME; a known_hosts
# file that is missing (or `none`) holds no key, it does not turn the check off
def _passwd_home() -> Path:
    import pwd

    return Path(pwd.getpwuid(os.getuid()).pw_dir)


@pytest.mark.parametrize("form", ["~", "%d"])
async def test_tilde_and_percent_d_name_the_password_database_home_as_ssh(
        real_sshd: RealSshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner: JobRunner, form: str) -> None:
    from agent_tools.hosts.ssh_config import resolve

    name = f"agent_tools_test_kh_{real_sshd.port}_{os.getpid()}"
    assert not (_passwd_home() / ".ssh" / name).exists()
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / name).write_text(real_sshd.known_hosts_path.read_text())  # the host's key, but under $HOME
    (home / ".ssh" / (name + "_id")).write_bytes(real_sshd.client_key_path.read_bytes())
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host tl\n    HostName 127.0.0.1\n    UserKnownHostsFile {form}/.ssh/{name}\n"
                   f"    IdentityFile {form}/.ssh/{name}_id\n" + _common(real_sshd))
    monkeypatch.setenv("HOME", str(home))
    expected = str(_passwd_home() / ".ssh" / name)
    assert _ssh_G(cfg, "tl")["userknownhostsfile"] == expected
    truth = _ssh(cfg, "tl", "true")
    assert truth.returncode == 255 and "Host key verification failed" in truth.stderr, truth.stderr
    resolved = resolve("tl", [cfg])
    assert resolved.config.get("UserKnownHostsFile") == [expected]
    assert resolved.missing_files == [expected + "_id"] and resolved.identity_files == [str(real_sshd.client_key_path)]
    out = await runner.run(_host(cfg, "tl"), "echo connected", budget_s=10)  # was: finished, "connected"
    assert out.outcome == "error" and out.kind == "host_key", out  # type: ignore[union-attr]
    assert expected in out.message, out.message  # type: ignore[union-attr]


@pytest.mark.parametrize("value", ["none", "/nonexistent/agent_tools_known_hosts"])
async def test_a_known_hosts_file_that_is_none_or_missing_trusts_no_key_as_ssh(
        real_sshd: RealSshd, tmp_path: Path, runner: JobRunner, value: str) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host nokh\n    HostName 127.0.0.1\n    UserKnownHostsFile {value}\n" + _common(real_sshd))
    truth = _ssh(cfg, "nokh", "true")
    assert truth.returncode == 255 and "Host key verification failed" in truth.stderr, truth.stderr
    out = await runner.run(_host(cfg, "nokh"), "echo connected", budget_s=10)  # none: was finished (no check)
    assert out.outcome == "error" and out.kind == "host_key", out  # type: ignore[union-attr]
    assert "is known for" in out.message, out.message  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------- HostKeyAlgorithms
async def test_host_key_algorithms_the_host_does_not_offer_is_no_matching_host_key_type(
        real_sshd: RealSshd, tmp_path: Path, runner: JobRunner) -> None:
    config = tmp_path / "ssh_config"  # the test sshd has an ed25519 host key only
    config.write_text(_common(real_sshd) + "Host rsa-only\n    HostName 127.0.0.1\n    HostKeyAlgorithms ssh-rsa\n"
                      "Host ed-ok\n    HostName 127.0.0.1\n    HostKeyAlgorithms ssh-ed25519,ssh-rsa\n")
    truth = _ssh(config, "rsa-only", "true")
    assert truth.returncode == 255 and "no matching host key type found" in truth.stderr, truth.stderr
    out = await runner.run(_host(config, "rsa-only"), "true", budget_s=10)
    assert out.outcome == "error" and out.kind == "ssh_config", out  # type: ignore[union-attr]
    msg = out.message  # type: ignore[union-attr]
    assert "no matching host key type found" in msg and "ssh-ed25519" in msg and "reset" not in msg, msg
    assert _ssh(config, "ed-ok", "true").returncode == 0
    ok = await runner.run(_host(config, "ed-ok"), "true", budget_s=10)
    assert ok.outcome == "finished", ok


# ---------------------------------------------------------------------------------------------- config changed
def test_status_after_the_alias_left_the_launch_config_says_the_config_changed(
        real_sshd: RealSshd, tmp_path: Path) -> None:
    import json

    import agent_tools

    inc = tmp_path / "gpu.conf"
    inc.write_text("Host gpu\n    HostName 127.0.0.1\n")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Include {inc}\n" + _common(real_sshd))
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(agent_tools.__file__).resolve().parent.parent), "HOME": str(home),
           "AGENT_TOOLS_STATE_DIR": str(tmp_path / "st"), "AGENT_TOOLS_SSH_CONFIG": ""}

    def cli(*args: str) -> dict[str, object]:
        res = subprocess.run([sys.executable, "-m", "agent_tools.cli", args[0], "--json", *args[1:]], env=env,
                             capture_output=True, text=True, timeout=90)
        return json.loads(res.stdout)  # type: ignore[no-any-return]

    started = cli("run", "-F", str(cfg), "--budget", "0.5", "gpu", "--", "sleep 30")
    assert started["outcome"] == "detached", started
    try:
        cfg.write_text(_common(real_sshd))  # its Include removed: ssh -G now gives hostname gpu
        assert _ssh_G(cfg, "gpu")["hostname"] == "gpu"
        status = cli("status", str(started["job_id"]))
        assert status["outcome"] == "error", status
        msg = str(status["message"])
        assert "changed since the launch; no Host line in it (or in what it includes) names gpu now" in msg, msg
        assert "renamed, or its Include removed" in msg, msg
    finally:
        cfg.write_text(f"Include {inc}\n" + _common(real_sshd))
        assert cli("cancel", str(started["job_id"]), "--grace", "1")["state"] == "killed"
