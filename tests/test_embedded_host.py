"""The in-process SSH host behaves like a real Linux host, seen from plain asyncssh client code."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import asyncssh
import pytest

from agent_tools.testing import EmbeddedHost, wait_until


def _proc_state(pid: int) -> str | None:
    """The state letter from ``/proc/PID/stat`` (``Z`` = zombie), ``None`` once the pid is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _try_open_fifo_writer(path: Path) -> int | None:
    """Open a FIFO for writing without blocking: succeeds only while some process has it open for reading."""
    try:
        return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        assert exc.errno == errno.ENXIO, exc
        return None


async def _open_fifo_writer(path: Path, what: str) -> int:
    fd = await wait_until(lambda: _try_open_fifo_writer(path), what)
    assert fd is not None
    return fd


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[EmbeddedHost]:
    shims = tmp_path / "shims"
    shims.mkdir()
    hello = shims / "hello"
    hello.write_text('#!/bin/sh\necho "hello from shim $1"\n')
    hello.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": f"{shims}:{os.environ['PATH']}", "HOME": str(home)}
    async with EmbeddedHost(root=tmp_path / "state", env=env) as eh:
        yield eh


def _connect(eh: EmbeddedHost, alias: str | None = None):  # type: ignore[no-untyped-def]
    """``asyncssh.connect`` by alias through the host's client config (awaitable and async-with)."""
    return asyncssh.connect(alias or eh.alias, config=[str(eh.config_path)])


async def test_exec_round_trip_and_exit_status(host: EmbeddedHost) -> None:
    async with _connect(host) as conn:
        ok = await conn.run("echo out; echo err >&2; id -un")
        assert ok.exit_status == 0
        assert ok.stdout == f"out\n{host.username}\n"
        assert ok.stderr == "err\n"
        failed = await conn.run("exit 3")
        assert failed.exit_status == 3
        killed = await conn.run("kill -TERM $$")
        assert killed.exit_signal is not None and killed.exit_signal[0] == "TERM"
        assert killed.returncode == -15
        cwd = await conn.run("pwd; echo $HOME $USER")
        home = str(Path(host.home))
        assert cwd.stdout == f"{home}\n{home} {host.username}\n"


async def test_stdin_eof_reaches_cat(host: EmbeddedHost) -> None:
    async with _connect(host) as conn:
        result = await conn.run("cat; echo done", input="line 1\nline 2\n")
        assert result.stdout == "line 1\nline 2\ndone\n"
        proc = await conn.create_process("wc -c")
        proc.stdin.write("12345")
        proc.stdin.write_eof()
        assert (await proc.stdout.read()).strip() == "5"
        await proc.wait()
        assert proc.exit_status == 0


async def test_env_path_shim_is_used(host: EmbeddedHost) -> None:
    async with _connect(host) as conn:
        result = await conn.run("hello world; command -v hello")
        assert result.stdout.splitlines()[0] == "hello from shim world"
        assert result.stdout.splitlines()[1].endswith("/shims/hello")


async def test_background_output_holds_channel_like_openssh(host: EmbeddedHost, tmp_path: Path) -> None:
    fifo = tmp_path / "hold"
    os.mkfifo(fifo)
    async with _connect(host) as conn:
        # the background cat inherits stdout, so the channel stays open after sh exits
        proc = await conn.create_process(f"cat {fifo} & echo $$")
        sh_pid = int(await proc.stdout.readline())
        await wait_until(lambda: _proc_state(sh_pid) is None, "sh exited and was reaped")
        with anyio.move_on_after(0.1):  # negative check: nothing may close the channel now
            await proc.wait_closed()
        assert not proc.channel.is_closing()
        fd = await _open_fifo_writer(fifo, "the background cat reads the FIFO")
        os.write(fd, b"bye\n")
        os.close(fd)  # EOF ends cat, which closes the inherited stdout, which ends the channel
        assert await proc.stdout.read() == "bye\n"
        with anyio.fail_after(5):
            await proc.wait()
        assert proc.exit_status == 0


async def test_sftp_write_and_posix_rename(host: EmbeddedHost) -> None:
    home = Path(host.home)
    async with _connect(host) as conn, conn.start_sftp_client() as sftp:
        tmp = str(home / ".config.yaml.tmp")
        async with sftp.open(tmp, "wb") as f:
            await f.write(b"key: value\n")
        await sftp.posix_rename(tmp, str(home / "config.yaml"))  # SFTPOpUnsupported without the extension
        async with sftp.open("relative.txt", "wb") as f:  # relative to HOME, like OpenSSH's sftp-server
            await f.write(b"rel\n")
        assert await sftp.realpath(".") == str(home)
    assert (home / "config.yaml").read_bytes() == b"key: value\n"
    assert not (home / ".config.yaml.tmp").exists()
    assert (home / "relative.txt").read_bytes() == b"rel\n"


async def test_direct_tcpip_to_loopback_only(host: EmbeddedHost) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = await reader.readline()
        writer.write(b"HTTP/1.0 200 OK\r\n\r\n" + line)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with _connect(host) as conn:
            reader, writer = await conn.open_connection("127.0.0.1", port)
            writer.write(b"GET /health\n")
            assert await reader.read() == b"HTTP/1.0 200 OK\r\n\r\nGET /health\n"
            writer.close()
            with pytest.raises(asyncssh.ChannelOpenError) as refused:
                await conn.open_connection("192.0.2.1", 80)
            assert refused.value.code == asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED
    finally:
        server.close()
        await server.wait_closed()


async def test_host_key_mismatch_wrong_key_and_dead_port_are_refused(host: EmbeddedHost) -> None:
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        await _connect(host, host.badkey_alias)
    with pytest.raises(OSError) as dead:
        await _connect(host, host.dead_alias)
    assert dead.value.errno == errno.ECONNREFUSED
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect(host.alias, config=[str(host.config_path)], client_keys=[stranger], agent_path=None)
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect(host.alias, config=[str(host.config_path)], username="someone-else")


async def test_command_keeps_running_after_client_closes_channel(host: EmbeddedHost, tmp_path: Path) -> None:
    release, marker = tmp_path / "release", tmp_path / "marker"
    os.mkfifo(release)
    async with _connect(host) as conn:
        proc = await conn.create_process(f"echo $$; cat {release} > {marker}")
        pid = int(await proc.stdout.readline())
        proc.close()
        await proc.wait_closed()
    await wait_until(lambda: pid in host.left_running, "server saw the channel close while the command ran")
    assert _proc_state(pid) not in (None, "Z")
    fd = await _open_fifo_writer(release, "the command still reads the release FIFO")
    os.write(fd, b"released\n")
    os.close(fd)
    await wait_until(lambda: marker.exists() and marker.read_text() == "released\n", "marker written")
    await wait_until(lambda: pid not in host.left_running, "left-running command reaped")


async def test_close_all_connections_drops_clients(host: EmbeddedHost) -> None:
    conn = await _connect(host)
    try:
        assert (await conn.run("true")).exit_status == 0
        assert host.close_all_connections() == 1
        with anyio.fail_after(5):
            await conn.wait_closed()
        with pytest.raises((asyncssh.Error, OSError)):
            await conn.run("true")
    finally:
        conn.close()
    async with _connect(host) as again:  # the listener stays up
        assert (await again.run("echo back")).stdout == "back\n"


@pytest.mark.skipif(shutil.which("ssh") is None, reason="OpenSSH client not installed")
async def test_openssh_client_accepts_the_config(host: EmbeddedHost) -> None:
    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ssh", "-F", str(host.config_path), host.alias, "echo via-openssh; exit 4"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )

    res = await anyio.to_thread.run_sync(run)
    assert (res.returncode, res.stdout) == (4, "via-openssh\n"), res.stderr


async def test_max_sessions_like_openssh(host: EmbeddedHost) -> None:
    async with _connect(host) as conn:
        results = await asyncio.gather(*(conn.create_process("cat") for _ in range(12)), return_exceptions=True)
        opened = [r for r in results if isinstance(r, asyncssh.SSHClientProcess)]
        refused = [r for r in results if isinstance(r, asyncssh.ChannelOpenError)]
        assert (len(opened), len(refused)) == (10, 2), results
        assert all(r.code == asyncssh.OPEN_CONNECT_FAILED for r in refused)
        for proc in opened:
            proc.stdin.write_eof()
        await asyncio.gather(*(proc.wait() for proc in opened))
        # closed sessions free their slots
        results = await asyncio.gather(*(conn.run("true") for _ in range(10)))
        assert all(r.exit_status == 0 for r in results)


async def test_large_stdin_and_stdout_stream_with_flow_control(host: EmbeddedHost) -> None:
    size = 8 * 1024 * 1024
    async with _connect(host) as conn:
        out = await conn.run(f"head -c {size} /dev/zero", encoding=None)
        assert out.exit_status == 0 and len(out.stdout) == size
        counted = await conn.run("wc -c", input=b"x" * size, encoding=None)
        assert int(counted.stdout) == size
