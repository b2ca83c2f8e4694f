"""Checks that the real-sshd harness (tests/sshd.py) is what the other tests assume it is."""

from __future__ import annotations

import asyncio
import subprocess
import time

import asyncssh
import pytest

from .sshd import RealSshd, require_real_sshd

pytestmark = pytest.mark.sshd


def _ssh(server: RealSshd, alias: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        server.ssh_argv(command, alias=alias), capture_output=True, text=True, timeout=20, check=False
    )


def test_openssh_client_logs_in_as_unprivileged_user(real_sshd: RealSshd) -> None:
    res = _ssh(real_sshd, "testsshd", "id -un; id -u")
    assert res.returncode == 0, res.stderr
    name, uid = res.stdout.split()
    assert name == "attest" == real_sshd.user
    assert int(uid) != 0


def test_badkey_alias_fails_host_key_verification(real_sshd: RealSshd) -> None:
    res = _ssh(real_sshd, "testsshd-badkey", "true")
    assert res.returncode == 255
    assert "Host key verification failed" in res.stderr


def test_dead_alias_fails_fast(real_sshd: RealSshd) -> None:
    started = time.monotonic()
    res = _ssh(real_sshd, "testsshd-dead", "true")
    elapsed_s = time.monotonic() - started
    assert res.returncode == 255
    assert "Connection refused" in res.stderr
    assert elapsed_s < 3.0


async def test_asyncssh_reads_the_client_config(real_sshd: RealSshd) -> None:
    async with asyncssh.connect("testsshd", config=[str(real_sshd.config_path)]) as conn:
        result = await conn.run("id -un", check=True)
    assert result.stdout == "attest\n"
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        await asyncssh.connect("testsshd-badkey", config=[str(real_sshd.config_path)])
    with pytest.raises(OSError):
        await asyncssh.connect("testsshd-dead", config=[str(real_sshd.config_path)])


async def test_max_sessions_refuses_the_eleventh_channel(real_sshd: RealSshd) -> None:
    async with asyncssh.connect("testsshd", config=[str(real_sshd.config_path)]) as conn:
        results = await asyncio.gather(*(conn.create_process("cat") for _ in range(12)), return_exceptions=True)
        opened = [r for r in results if isinstance(r, asyncssh.SSHClientProcess)]
        refused = [r for r in results if isinstance(r, asyncssh.ChannelOpenError)]
        assert len(opened) == 10, results
        assert len(refused) == 2, results
        assert all(r.code == asyncssh.OPEN_CONNECT_FAILED for r in refused), [r.code for r in refused]
        # the connection is still usable once sessions are released
        for proc in opened:
            proc.stdin.write_eof()
        await asyncio.gather(*(proc.wait() for proc in opened))
        assert (await conn.run("echo again", check=True)).stdout == "again\n"
    assert "no more sessions" in real_sshd.log_text()


async def test_restart_keeps_port_and_host_key_and_drop_connections() -> None:
    require_real_sshd()
    with RealSshd(client_alive_interval_s=30) as server:
        port = server.port
        config = [str(server.config_path)]
        async with asyncssh.connect("testsshd", config=config) as survivor:
            server.restart()  # like `systemctl restart ssh`: established sessions survive
            assert server.port == port
            assert (await survivor.run("echo alive", check=True)).stdout == "alive\n"
            async with asyncssh.connect("testsshd", config=config) as fresh:
                assert (await fresh.run("echo fresh", check=True)).stdout == "fresh\n"
            assert server.drop_connections() >= 1
            with pytest.raises((asyncssh.Error, OSError)):
                async with asyncio.timeout(10):
                    await survivor.wait_closed()
                    await survivor.run("true")
        assert "Received signal 15; terminating." in server.log_text()
