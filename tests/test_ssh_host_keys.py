"""Host keys as ssh(1) checks them, on a real OpenSSH sshd that presents a host certificate. Ground truth is the real
``ssh`` with the same config: a host whose key is signed by a CA trusted with ``@cert-authority`` in known_hosts is
accepted (no key of its own recorded); a CA that did not sign it is refused as an unknown key of that type (ssh: "No
ED25519 host key is known"), not as a changed one; an unknown key and a changed key are refused with a ``host_key``
error that says which of the two it is, for which host, and in which known_hosts file it looked.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_tools.hosts import SshHost, SshSettings
from agent_tools.hosts.base import run_on
from agent_tools.jobs.manager import JobRunner

from .sshd import RealSshd, require_real_sshd


def _keygen(*args: str) -> None:
    subprocess.run(["ssh-keygen", "-q", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def cert_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealSshd]:
    """A real sshd whose ed25519 host key carries a certificate signed by ``<dir>/ca`` for ``127.0.0.1``."""
    require_real_sshd()
    server = RealSshd()
    try:
        server.start()
        ca = server.dir / "host_ca"
        _keygen("-t", "ed25519", "-N", "", "-C", "test-host-ca", "-f", str(ca))
        _keygen("-s", str(ca), "-I", "test-host", "-h", "-n", "127.0.0.1", "-V", "-5m:+1d",
                str(server.host_key_path.with_name(server.host_key_path.name + ".pub")))
        server.extra_config = f"HostCertificate {server.host_key_path}-cert.pub\n"
        server.restart()
        yield server
    finally:
        server.cleanup()


def _config(server: RealSshd, tmp_path: Path, known_hosts_text: str, strict: str = "yes") -> Path:
    kh = tmp_path / "known_hosts"
    kh.write_text(known_hosts_text)
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""\
Host certhost
    HostName 127.0.0.1
    Port {server.port}
    User {server.user}
    IdentityFile {server.client_key_path}
    IdentitiesOnly yes
    IdentityAgent none
    UserKnownHostsFile {kh}
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking {strict}
    UpdateHostKeys no
    BatchMode yes
""")
    return cfg


def _ca_line(server: RealSshd, ca_name: str = "host_ca") -> str:
    kind, b64 = (server.dir / f"{ca_name}.pub").read_text().split()[:2]
    return f"@cert-authority [127.0.0.1]:{server.port} {kind} {b64}\n"


def _ssh(cfg: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ssh", "-F", str(cfg), *options, "certhost", "echo", "ok"], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def _host(cfg: Path) -> SshHost:
    return SshHost(SshSettings("certhost", config_paths=[str(cfg)], warm_sessions=0))


async def test_a_host_certificate_from_a_trusted_ca_is_accepted(cert_sshd: RealSshd, tmp_path: Path) -> None:
    cfg = _config(cert_sshd, tmp_path, _ca_line(cert_sshd))
    truth = _ssh(cfg)
    assert (truth.returncode, truth.stdout) == (0, "ok\n"), truth.stderr
    host = _host(cfg)
    try:
        assert (await run_on(host, "echo ok")).stdout == b"ok\n"
    finally:
        await host.aclose()


async def test_a_host_certificate_from_another_ca_is_refused(cert_sshd: RealSshd, tmp_path: Path,
                                                             runner: JobRunner) -> None:
    _keygen("-t", "ed25519", "-N", "", "-C", "other-ca", "-f", str(tmp_path / "other_ca"))
    kind, b64 = (tmp_path / "other_ca.pub").read_text().split()[:2]
    cfg = _config(cert_sshd, tmp_path, f"@cert-authority [127.0.0.1]:{cert_sshd.port} {kind} {b64}\n")
    truth = _ssh(cfg)
    assert truth.returncode == 255 and "No ED25519 host key is known" in truth.stderr, truth.stderr
    out = await runner.run(_host(cfg), "true", budget_s=10)
    assert out.outcome == "error" and (out.kind, out.retryable) == ("host_key", False), out  # type: ignore[union-attr]
    msg = out.message  # type: ignore[union-attr]
    # as ssh: no key of that type is known (the CA did not sign it), not a changed key (a MITM warning)
    assert "no ssh-ed25519 host key is known" in msg and "CA did not sign" in msg, msg
    assert "changed" not in msg and "another machine" not in msg, msg
    # accept-new: ssh falls back to the plain key and adds it; asyncssh would not use such a key next to the CA
    # entry, so agent_tools adds none and still refuses, saying why (stricter than ssh)
    host = SshHost(SshSettings("certhost", config_paths=[str(cfg)], warm_sessions=0, known_hosts_mode="accept-new"))
    out = await runner.run(host, "true", budget_s=10)
    assert out.outcome == "error" and "accept-new adds no key" in out.message, out  # type: ignore[union-attr]
    assert (tmp_path / "known_hosts").read_text().count("\n") == 1


async def test_an_unknown_key_is_refused_saying_so(cert_sshd: RealSshd, tmp_path: Path, runner: JobRunner) -> None:
    cfg = _config(cert_sshd, tmp_path, "")
    truth = _ssh(cfg)
    assert truth.returncode == 255 and "No ED25519 host key is known" in truth.stderr, truth.stderr
    out = await runner.run(_host(cfg), "true", budget_s=10)
    assert out.outcome == "error" and (out.kind, out.retryable) == ("host_key", False), out  # type: ignore[union-attr]
    msg = out.message  # type: ignore[union-attr]
    assert "no ssh-ed25519 host key is known" in msg and f"[127.0.0.1]:{cert_sshd.port}" in msg, msg
    assert str(tmp_path / "known_hosts") in msg and "SHA256:" in msg, msg  # where it looked, what it was offered
    assert (tmp_path / "known_hosts").read_text() == ""


async def test_a_changed_key_is_refused_saying_so(cert_sshd: RealSshd, tmp_path: Path, runner: JobRunner) -> None:
    cfg = _config(cert_sshd, tmp_path, cert_sshd.badkey_known_hosts_path.read_text())
    truth = _ssh(cfg)
    assert truth.returncode == 255 and "REMOTE HOST IDENTIFICATION HAS CHANGED" in truth.stderr, truth.stderr
    out = await runner.run(_host(cfg), "true", budget_s=10)
    assert out.outcome == "error" and (out.kind, out.retryable) == ("host_key", False), out  # type: ignore[union-attr]
    msg = out.message  # type: ignore[union-attr]
    assert "changed" in msg and str(tmp_path / "known_hosts") in msg, msg


async def test_accept_new_writes_to_the_configs_known_hosts_file(cert_sshd: RealSshd, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # a write to ~/.ssh/known_hosts would land here
    cfg = _config(cert_sshd, tmp_path, "")
    by_ssh = tmp_path / "by_ssh_known_hosts"
    truth = _ssh(cfg, "-o", "StrictHostKeyChecking=accept-new", "-o", f"UserKnownHostsFile={by_ssh}")
    assert truth.returncode == 0, truth.stderr
    host = SshHost(SshSettings("certhost", config_paths=[str(cfg)], warm_sessions=0, known_hosts_mode="accept-new"))
    try:
        assert (await run_on(host, "echo ok")).stdout == b"ok\n"
    finally:
        await host.aclose()
    ours = (tmp_path / "known_hosts").read_text().split()
    assert ours[:2] == by_ssh.read_text().split()[:2] == [f"[127.0.0.1]:{cert_sshd.port}", "ssh-ed25519"]
    assert not (tmp_path / "home" / ".ssh" / "known_hosts").exists()


async def test_strict_host_key_checking_accept_new_from_the_config(cert_sshd: RealSshd, tmp_path: Path) -> None:
    cfg = _config(cert_sshd, tmp_path, "", strict="accept-new")
    by_ssh = tmp_path / "by_ssh_known_hosts"
    assert _ssh(cfg, "-o", f"UserKnownHostsFile={by_ssh}").returncode == 0  # ssh adds the key and connects
    host = _host(cfg)
    try:
        assert (await run_on(host, "echo ok")).stdout == b"ok\n"
    finally:
        await host.aclose()
    assert (tmp_path / "known_hosts").read_text().split()[:2] == by_ssh.read_text().split()[:2]


async def test_strict_host_key_checking_no_never_accepts_a_changed_key(cert_sshd: RealSshd, tmp_path: Path,
                                                                      runner: JobRunner) -> None:
    # ssh with "no" connects to a host whose key changed (with a warning); agent_tools refuses it: only an
    # unknown key is ever added
    cfg = _config(cert_sshd, tmp_path, cert_sshd.badkey_known_hosts_path.read_text(), strict="no")
    assert _ssh(cfg).returncode == 0
    out = await runner.run(_host(cfg), "true", budget_s=10)
    assert out.outcome == "error" and out.kind == "host_key" and "changed" in out.message, out  # type: ignore[union-attr]
