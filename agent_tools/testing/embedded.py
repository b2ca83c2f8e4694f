"""An in-process SSH host on loopback that behaves like a real Linux host for our tools.

``EmbeddedHost`` is an asyncssh server on ``127.0.0.1`` (free port) used by the demo, the fast tests and the benchmarks.
It needs no root and no network beyond loopback, and it runs commands *for real*:

* ``exec`` requests run ``/bin/sh -c COMMAND`` as the current user, in a new session (``setsid``, as
  sshd does for a session without a pty), with stdin/stdout/stderr bridged to the channel. EOF on the
  channel closes the command's stdin; the channel closes after the command has exited *and* its
  stdout/stderr reached EOF (so ``cmd &`` with inherited output holds the channel open, as with OpenSSH);
  the exit status or exit signal is reported. If the client closes the channel first, the pipes are
  closed (later writes get SIGPIPE) but the command is **not** killed - OpenSSH without a pty does the
  same. A ``shell`` request without a pty runs a plain ``/bin/sh`` reading the channel; pty requests are
  refused (``allow_pty=False``), other subsystems than SFTP are refused.
* The command environment is ``os.environ`` + ``USER``/``LOGNAME``/``HOME``/``SHELL``/``SSH_*`` + ``env``.
  Client-sent variables are accepted only when they match ``accept_env`` (default ``LANG``, ``LC_*``,
  Debian's ``AcceptEnv``). The working directory is ``HOME``.
* Channel signals are delivered to the command's process group unless the server runs as root: OpenSSH
  refuses channel signals for root logins, and the tools must not rely on them.
* SFTP is served on the real filesystem (relative paths resolve against ``HOME``) with the
  ``posix-rename@openssh.com`` extension, so "write temp file + posix_rename" works.
* Local port forwarding (``direct-tcpip``) is allowed to ``127.0.0.1``/``localhost``/``::1`` only.
* Only ``username`` (the current OS user) with the generated client key may log in.
* At most ``max_sessions`` (10) session channels per connection, like OpenSSH's ``MaxSessions``.

It writes a ``known_hosts`` file and an OpenSSH client config (:func:`~agent_tools.testing.ssh_config_block`
blocks) with three aliases, usable by
``ssh -F`` and ``asyncssh.connect(alias, config=[config_path])`` (and ``alias_config_path``, a config with the
first one only):

* ``ALIAS``         - this host, strict host key checking;
* ``ALIAS-badkey``  - this host, but a known_hosts file holding another key (host key mismatch);
* ``ALIAS-dead``    - a loopback port that is bound but never listens (connection refused at once).

Example::

    async with EmbeddedHost(root=tmp_path, env={"PATH": f"{shims}:{os.environ['PATH']}"}) as eh:
        async with asyncssh.connect(eh.alias, config=[str(eh.config_path)]) as conn:
            result = await conn.run("hello")
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import posixpath
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self, cast

import anyio
import anyio.lowlevel
import structlog

from .._asyncssh import SSHChannel, asyncssh
from .ssh_files import known_hosts_line, ssh_config_block

log = structlog.get_logger(__name__)

LOOPBACK_DESTINATIONS = frozenset({"127.0.0.1", "localhost", "::1"})
_CHUNK_BYTES = 64 * 1024


class EmbeddedHost:
    """In-process SSH server on loopback (see the module docstring for the behaviour).

    Args:
        root: directory for the keys, ``known_hosts`` and client config; a fresh temp dir (removed on
            close) when ``None``. Keys already present in ``root`` are reused, so a restarted demo keeps
            its host key.
        env: variables added to the command environment (e.g. ``PATH`` with shim dirs first, ``HOME``).
        alias: the ``Host`` name written to the client config.
        port: TCP port on 127.0.0.1; 0 picks a free one.
        shell: the shell that runs commands (``SHELL -c COMMAND``).
        accept_env: glob patterns of client-sent variables to accept (like sshd's ``AcceptEnv``).
        max_sessions: session channels (exec, shell, SFTP) open at once per connection; one more is refused
            with ``OPEN_CONNECT_FAILED`` "no more sessions", as OpenSSH's ``MaxSessions`` (default 10) does.
            Forwarded TCP channels do not count. 0 = no limit.

    Raises:
        OSError: from ``start()``/``__aenter__`` when the port cannot be bound or ``root`` is not writable.
    """

    def __init__(
        self,
        *,
        root: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        alias: str = "embedded",
        port: int = 0,
        shell: str = "/bin/sh",
        accept_env: Sequence[str] = ("LANG", "LC_*"),
        max_sessions: int = 10,
    ) -> None:
        self._own_root = root is None
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="agent-tools-embedded-"))
        self.env: dict[str, str] = dict(env or {})
        self.alias = alias
        self.badkey_alias = f"{alias}-badkey"
        self.dead_alias = f"{alias}-dead"
        self.shell = shell
        self.accept_env = tuple(accept_env)
        self.max_sessions = max_sessions
        entry = pwd.getpwuid(os.getuid())
        self.username: str = entry.pw_name
        self.home: str = self.env.get("HOME", entry.pw_dir)
        self.host_key_path = self.root / "embedded_host_key"
        self.client_key_path = self.root / "embedded_client_key"
        self.known_hosts_path = self.root / "known_hosts"
        self.badkey_known_hosts_path = self.root / "known_hosts_badkey"
        self.config_path = self.root / "ssh_config"
        #: a client config naming ALIAS only (for tools that list a config's hosts: no -badkey/-dead aliases)
        self.alias_config_path = self.root / "ssh_config.alias"
        self.port = port
        self.dead_port = 0
        self._requested_port = port
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._dead_sock: socket.socket | None = None
        self._client_public_data = b""
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._running: dict[int, subprocess.Popen[bytes]] = {}
        self._left_running: set[int] = set()
        self._reapers: set[asyncio.Task[None]] = set()
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Make keys, start listening, and write ``known_hosts`` and the client config."""
        if self._acceptor is not None:
            return
        self._closed = False
        self.root.mkdir(parents=True, exist_ok=True)
        host_key = _load_or_generate(self.host_key_path)
        client_key = _load_or_generate(self.client_key_path)
        self._client_public_data = client_key.public_data
        self._acceptor = await asyncssh.listen(
            "127.0.0.1",
            self._requested_port,
            server_factory=lambda: _Server(self),
            server_host_keys=[host_key],
            # no process_factory/sftp_factory here: _Server.session_requested builds the sessions, so it
            # can refuse the (max_sessions + 1)th one like sshd's MaxSessions
            allow_pty=False,
            line_editor=False,
            agent_forwarding=False,
            x11_forwarding=False,
            encoding=None,
        )
        self.port = self._acceptor.get_port()
        if self._dead_sock is None:
            # Bound but never listening: connects get RST (ECONNREFUSED) and nobody else takes the port.
            self._dead_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._dead_sock.bind(("127.0.0.1", 0))
            self.dead_port = self._dead_sock.getsockname()[1]
        self._write_client_files(host_key)
        log.info("embedded_host.started", alias=self.alias, port=self.port, root=str(self.root))

    async def aclose(self) -> None:
        """Stop listening and close every connection. Commands still running are left running."""
        acceptor, self._acceptor = self._acceptor, None
        if acceptor is not None:
            acceptor.close()
            await acceptor.wait_closed()
        conns = list(self._connections)
        for conn in conns:
            conn.close()
        with anyio.move_on_after(5):
            for conn in conns:
                await conn.wait_closed()
        await anyio.lowlevel.checkpoint()  # let session handlers see their channels close
        self._closed = True
        for task in list(self._reapers):
            task.cancel()
        if self._dead_sock is not None:
            self._dead_sock.close()
            self._dead_sock = None
        still = sorted(pid for pid, proc in self._running.items() if proc.poll() is None)
        if still:
            log.info("embedded_host.left_running", pids=still)
            _ORPHANS.update(self._running.values())  # keep the Popen objects alive: no kill, no warning
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
        log.info("embedded_host.closed", alias=self.alias, port=self.port)

    def close_all_connections(self) -> int:
        """Abort every SSH connection at once (simulates a dropped connection); the listener stays up.

        The TCP connections are closed without an SSH disconnect message, so clients see the connection
        lost. Running commands are not killed. Returns how many connections were aborted.
        """
        conns = list(self._connections)
        for conn in conns:
            conn.abort()
        log.info("embedded_host.connections_dropped", count=len(conns))
        return len(conns)

    @property
    def left_running(self) -> frozenset[int]:
        """Pids of commands whose channel closed while they kept running (until they exit)."""
        return frozenset(self._left_running)

    # ------------------------------------------------------------------ files

    def _write_client_files(self, host_key: asyncssh.SSHKey) -> None:
        host_pub = host_key.export_public_key().decode()
        other_pub = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
        self.known_hosts_path.write_text(known_hosts_line(host_pub, port=self.port))
        self.badkey_known_hosts_path.write_text(known_hosts_line(other_pub, port=self.port))
        blocks = [
            self._config_block(self.alias, self.port, self.known_hosts_path),
            self._config_block(self.badkey_alias, self.port, self.badkey_known_hosts_path),
            self._config_block(self.dead_alias, self.dead_port, self.known_hosts_path),
        ]
        self.config_path.write_text("\n".join(blocks))
        self.alias_config_path.write_text(blocks[0])

    def _config_block(self, alias: str, port: int, known_hosts: Path) -> str:
        return ssh_config_block(alias, port=port, user=self.username, identity_file=self.client_key_path,
                                known_hosts=known_hosts)

    # ------------------------------------------------------------------ sessions

    def _make_sftp_server(self, chan: SSHChannel[bytes]) -> asyncssh.SFTPServer:
        return _HomeSFTPServer(cast("asyncssh.SSHServerChannel[bytes]", chan), os.fsencode(self.home))

    def _session_env(self, process: asyncssh.SSHServerProcess[bytes]) -> dict[str, str]:
        env = dict(os.environ)
        peer = process.get_extra_info("peername") or ("127.0.0.1", 0)
        env.update(
            USER=self.username,
            LOGNAME=self.username,
            HOME=self.home,
            SHELL=self.shell,
            SSH_CLIENT=f"{peer[0]} {peer[1]} {self.port}",
            SSH_CONNECTION=f"{peer[0]} {peer[1]} 127.0.0.1 {self.port}",
        )
        for name, value in process.env.items():
            if any(fnmatch.fnmatchcase(str(name), pat) for pat in self.accept_env):
                env[str(name)] = str(value)
        env.update(self.env)
        return env

    async def _handle_process(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        if process.subsystem is not None:
            process.stderr.write(f"subsystem {process.subsystem!r} is not supported\n".encode())
            process.exit(1)
            return
        command = process.command
        argv = [self.shell] if command is None else [self.shell, "-c", command]
        try:
            # A fork/exec returns at once (asyncio's own subprocess support spawns the same way); we avoid
            # asyncio.create_subprocess_exec because closing its transport kills a still-running command.
            popen = subprocess.Popen(  # noqa: ASYNC220
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.home,
                env=self._session_env(process),
                start_new_session=True,  # sshd calls setsid() for a session without a pty
                close_fds=True,
            )
        except OSError as exc:
            log.warning("embedded_host.spawn_failed", command=command, error=str(exc))
            process.stderr.write(f"{self.shell}: {exc}\n".encode())
            process.exit(127)
            return
        self._running[popen.pid] = popen
        log.info("embedded_host.exec", pid=popen.pid, command=command)
        finished = False
        try:
            finished = await self._bridge(process, popen)
        finally:
            if not finished:
                self._keep_running(popen)

    async def _bridge(self, process: asyncssh.SSHServerProcess[bytes], popen: subprocess.Popen[bytes]) -> bool:
        """Pump stdin/stdout/stderr until the command is done; return False if the channel went first."""
        assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
        loop = asyncio.get_running_loop()
        out_reader, out_transport = await _read_pipe(loop, popen.stdout)
        err_reader, err_transport = await _read_pipe(loop, popen.stderr)
        in_transport, in_protocol = await loop.connect_write_pipe(_WritePipe, popen.stdin)
        channel_gone = False  # set when the peer closed the channel or a write to it failed
        returncode: int | None = None

        async def pump_in() -> None:
            try:
                while True:
                    try:
                        data = await process.stdin.read(_CHUNK_BYTES)
                    except asyncssh.SignalReceived as sig:
                        self._deliver_signal(popen, sig.signal)
                        continue
                    except (asyncssh.BreakReceived, asyncssh.TerminalSizeChanged):
                        continue
                    except (asyncssh.Error, OSError):
                        break
                    if not data:
                        break
                    if in_protocol.lost:
                        continue  # the command closed its stdin: discard, as sshd does
                    in_transport.write(data)
                    await in_protocol.drain()
            finally:
                in_transport.close()  # flushes, then closes: the command reads EOF

        async def pump_out(reader: asyncio.StreamReader, writer: asyncssh.SSHWriter[bytes]) -> None:
            nonlocal channel_gone
            while data := await reader.read(_CHUNK_BYTES):
                try:
                    writer.write(data)
                    await writer.drain()
                except (asyncssh.Error, OSError):
                    channel_gone = True
                    outer.cancel_scope.cancel()
                    return

        async def watch_channel() -> None:
            nonlocal channel_gone
            await process.channel.wait_closed()
            channel_gone = True
            outer.cancel_scope.cancel()

        exited = anyio.Event()

        async def reap() -> None:  # like sshd on SIGCHLD: reap at once, report once the output is done
            nonlocal returncode
            returncode = await _wait_exit(popen)
            exited.set()

        try:
            async with anyio.create_task_group() as outer:
                outer.start_soon(watch_channel)
                outer.start_soon(pump_in)
                outer.start_soon(reap)
                async with anyio.create_task_group() as outputs:
                    outputs.start_soon(pump_out, out_reader, process.stdout)
                    outputs.start_soon(pump_out, err_reader, process.stderr)
                await exited.wait()
                outer.cancel_scope.cancel()
        finally:
            out_transport.close()  # after a channel loss, later writes of the command get SIGPIPE
            err_transport.close()
            in_transport.close()
        if returncode is None:  # the channel went away first; the command keeps running
            log.info("embedded_host.channel_closed_first", pid=popen.pid)
            return False
        self._running.pop(popen.pid, None)
        log.info("embedded_host.exit", pid=popen.pid, returncode=returncode, channel_gone=channel_gone)
        if channel_gone or process.channel.is_closing():
            return True
        if returncode < 0:
            try:
                name = signal.Signals(-returncode).name.removeprefix("SIG")
            except ValueError:
                name = str(-returncode)
            process.exit_with_signal(name)
        else:
            process.exit(returncode)
        return True

    def _deliver_signal(self, popen: subprocess.Popen[bytes], name: str) -> None:
        if os.geteuid() == 0:
            log.info("embedded_host.signal_refused", pid=popen.pid, signal=name, why="root login, as OpenSSH")
            return
        try:
            signum = signal.Signals[f"SIG{name}"]
        except KeyError:
            log.info("embedded_host.signal_unknown", pid=popen.pid, signal=name)
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signum)

    def _keep_running(self, popen: subprocess.Popen[bytes]) -> None:
        if popen.poll() is not None:
            self._running.pop(popen.pid, None)
            return
        self._left_running.add(popen.pid)
        log.info("embedded_host.left_running", pid=popen.pid)
        if self._closed:
            _ORPHANS.add(popen)
            return

        async def reap() -> None:
            try:
                returncode = await _wait_exit(popen)
                log.info("embedded_host.left_running_exit", pid=popen.pid, returncode=returncode)
            except Exception:
                log.exception("embedded_host.reap_failed", pid=popen.pid)
                raise
            finally:
                if popen.returncode is not None:
                    self._running.pop(popen.pid, None)
                    self._left_running.discard(popen.pid)

        task = asyncio.get_running_loop().create_task(reap())
        self._reapers.add(task)
        task.add_done_callback(self._reapers.discard)


_ORPHANS: set[subprocess.Popen[bytes]] = set()


class _Server(asyncssh.SSHServer):
    """Per-connection callbacks: auth for one user and one key, loopback-only forwarding."""

    def __init__(self, host: EmbeddedHost) -> None:
        self._host = host
        self._conn: asyncssh.SSHServerConnection | None = None
        self.open_sessions = 0

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._host._connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._host._connections.discard(self._conn)

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        ok = username == self._host.username and key.public_data == self._host._client_public_data
        if not ok:
            log.info("embedded_host.auth_refused", username=username)
        return ok

    def session_requested(self) -> asyncssh.SSHServerSession[bytes]:
        limit = self._host.max_sessions
        if limit and self.open_sessions >= limit:
            log.info("embedded_host.session_refused", open_sessions=self.open_sessions, max_sessions=limit)
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "no more sessions")
        self.open_sessions += 1
        return _Session(self._host, self)

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> bool:
        if dest_host.lower() not in LOOPBACK_DESTINATIONS:
            log.info("embedded_host.forward_refused", dest_host=dest_host, dest_port=dest_port)
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, "the embedded host forwards to loopback only"
            )
        return True


class _Session(asyncssh.SSHServerProcess[bytes]):
    """A session channel (exec, shell or the SFTP subsystem) counted against ``max_sessions``."""

    def __init__(self, host: EmbeddedHost, server: _Server) -> None:
        super().__init__(host._handle_process, host._make_sftp_server, asyncssh.sftp.MIN_SFTP_VERSION, False)
        self._server = server

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.open_sessions -= 1
        super().connection_lost(exc)


class _HomeSFTPServer(asyncssh.SFTPServer):
    """SFTP on the real filesystem; relative paths resolve against HOME, as with OpenSSH's sftp-server."""

    def __init__(self, chan: asyncssh.SSHServerChannel[bytes], home: bytes) -> None:
        super().__init__(chan)
        self._home = home

    def map_path(self, path: bytes) -> bytes:
        return path if path.startswith(b"/") else posixpath.join(self._home, path)


class _WritePipe(asyncio.BaseProtocol):
    """Write side of the command's stdin pipe, with flow control and loss tracking."""

    def __init__(self) -> None:
        self.lost = False
        self._resume: asyncio.Event = asyncio.Event()
        self._resume.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._resume.set()

    def pause_writing(self) -> None:
        self._resume.clear()

    def resume_writing(self) -> None:
        self._resume.set()

    async def drain(self) -> None:
        await self._resume.wait()


async def _read_pipe(
    loop: asyncio.AbstractEventLoop, pipe: IO[bytes]
) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    reader = asyncio.StreamReader(limit=_CHUNK_BYTES)
    factory: Callable[[], asyncio.StreamReaderProtocol] = lambda: asyncio.StreamReaderProtocol(reader)  # noqa: E731
    transport, _ = await loop.connect_read_pipe(factory, pipe)
    return reader, transport


async def _wait_exit(popen: subprocess.Popen[bytes]) -> int:
    """Wait for the command to exit without blocking the loop (pidfd on Linux >= 5.3, else polling)."""
    if popen.poll() is None:
        try:
            pidfd = os.pidfd_open(popen.pid)
        except (AttributeError, OSError):
            pidfd = -1
        if pidfd >= 0:
            try:
                await anyio.wait_readable(pidfd)
            finally:
                os.close(pidfd)
    while True:
        returncode = popen.poll()
        if returncode is not None:
            return returncode
        await anyio.sleep(0.02)  # fallback poll interval (no pidfd, or a spurious wake-up)


def _load_or_generate(path: Path) -> asyncssh.SSHKey:
    if path.exists():
        return asyncssh.read_private_key(str(path))
    key = asyncssh.generate_private_key("ssh-ed25519", comment=f"agent-tools-embedded-{path.name}")
    key.write_private_key(str(path))
    path.chmod(0o600)
    key.write_public_key(str(path) + ".pub")
    return key
