"""Host keys on the real sshd: strict by default, accept-new adds an unknown key, a changed key is refused."""

from __future__ import annotations

from pathlib import Path

from agent_tools.hosts import SshHost, SshSettings
from agent_tools.hosts.base import run_on
from agent_tools.jobs.manager import JobRunner

from .sshd import RealSshd


def _host(server: RealSshd, known_hosts: Path, mode: str) -> SshHost:
    return SshHost(SshSettings("kh", hostname="127.0.0.1", port=server.port, username=server.user,
                               client_keys=[str(server.client_key_path)], known_hosts=str(known_hosts),
                               known_hosts_mode=mode, config_paths=[]))  # type: ignore[arg-type]


async def test_unknown_key_refused_when_strict(real_sshd: RealSshd, tmp_path: Path, runner: JobRunner) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    out = await runner.run(_host(real_sshd, kh, "strict"), "true", budget_s=5)
    assert out.outcome == "error" and out.kind == "host_key", out  # type: ignore[union-attr]
    assert kh.read_text() == ""


async def test_accept_new_adds_unknown_key_once(real_sshd: RealSshd, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    host = _host(real_sshd, kh, "accept-new")
    try:
        res = await run_on(host, "echo ok")
        assert res.stdout == b"ok\n"
    finally:
        await host.aclose()
    line = kh.read_text().strip()
    assert line.startswith(f"[127.0.0.1]:{real_sshd.port} ssh-ed25519 ")
    # the accepted key now verifies strictly
    strict = _host(real_sshd, kh, "strict")
    try:
        assert (await run_on(strict, "echo again")).stdout == b"again\n"
    finally:
        await strict.aclose()


async def test_accept_new_never_accepts_a_changed_key(real_sshd: RealSshd, tmp_path: Path, runner: JobRunner) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(real_sshd.badkey_known_hosts_path.read_text())  # an entry for the host with another key
    before = kh.read_text()
    out = await runner.run(_host(real_sshd, kh, "accept-new"), "true", budget_s=5)
    assert out.outcome == "error" and out.kind == "host_key", out  # type: ignore[union-attr]
    assert kh.read_text() == before
