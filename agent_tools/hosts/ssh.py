"""``SshHost``: a remote machine over one pooled asyncssh connection.

Facts this module respects (checked at the sources):

* OpenSSH's sshd allows ``MaxSessions`` (default 10) session channels per connection (sshd_config(5)); one
  connection is shared by every call to the host and a semaphore keeps open channels below that limit
  (default 8, leaving room for a person's own ssh multiplexing).
* asyncssh sends no keepalives unless ``keepalive_interval`` is set; it is on here (10 s × 3 by default), so a
  dead peer is noticed within ~30 s even while idle.
* asyncssh's ``run(timeout=)`` does not cover connecting or opening the channel; callers wrap whole operations
  in one anyio deadline scope. Connecting has its own deadline (``connect_timeout_s``).
* asyncssh reports ``exit_status=None`` when the channel closed without an exit status (connection dropped):
  that is :class:`~agent_tools.errors.ConnectionLost`, never success.
* asyncssh reads OpenSSH client config files (``HostName``, ``Port``, ``User``, ``IdentityFile``,
  ``UserKnownHostsFile``, ``ConnectTimeout``, ...) and always checks host keys against known_hosts; an
  unknown key is refused unless this host's ``known_hosts_mode`` is ``accept-new``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
import asyncssh
import structlog
from anyio.abc import ByteStream

from ..errors import (
    AuthenticationFailed,
    ChannelOpenFailed,
    ConnectionLost,
    HostError,
    HostKeyError,
    HostUnreachable,
)
from .base import ExecResult, HostProcess

__all__ = ["SshHost", "SshSettings"]

log = structlog.get_logger(__name__)

KnownHostsMode = Literal["strict", "accept-new"]

#: a channel open that fails this fast because the pooled connection is closed met a stale connection
_STALE_S = 1.0
#: longest a cancelled caller waits for a session open already under way (see ``_open_process``)
_OPEN_GRACE_S = 3.0
#: retries of a session open the server refused (with backoff 0.1, 0.2, ... 1.6 s)
_REFUSAL_RETRIES = 6
#: how long a closed process's channel is left for the server to close first (see ``_SshProcess.close``)
_LINGER_S = 2.0
#: longest a closed channel keeps its slot while waiting for the server's close (see ``_SshProcess.close``)
_CLOSE_WAIT_S = 10.0
#: longest a warm session may take to say it is ready for input
_WARM_READY_S = 15.0
#: the line a warm session's command prints when it is ready for its request (see ``SshHost.take_warm``)
WARM_READY = b"@@AT ready"


class SshSettings:
    """Connection settings for one SSH host.

    :param alias: the name to connect to; looked up in the OpenSSH client config (``Host`` blocks).
    :param config_paths: OpenSSH client config files to read (default: ``~/.ssh/config`` when it exists,
        plus ``$AGENT_TOOLS_SSH_CONFIG`` when set).
    :param hostname: override of ``HostName``.
    :param port: override of ``Port``.
    :param username: override of ``User``.
    :param client_keys: private key files to offer (default: config ``IdentityFile`` / asyncssh defaults).
    :param known_hosts: a known_hosts file path (default: config ``UserKnownHostsFile`` / ``~/.ssh/known_hosts``).
    :param known_hosts_mode: ``strict`` (an unknown or changed key is refused) or ``accept-new`` (an unknown
        key is added to the known_hosts file; a changed key is still refused).
    :param connect_timeout_s: seconds allowed for TCP connect + SSH handshake + auth (float).
    :param keepalive_interval_s: seconds between keepalive requests (0 disables; not recommended).
    :param keepalive_count_max: unanswered keepalives before the connection counts as dead.
    :param max_channels: session channels open at once on the pooled connection (keep below the server's
        ``MaxSessions``, default 10).
    :param warm_sessions: sessions kept started ahead of time per kind of script (see
        :meth:`SshHost.take_warm`); each holds one of the ``max_channels`` and one idle ``sh`` on the host.
        0 turns them off (one-shot processes such as the CLI).
    """

    def __init__(
        self,
        alias: str,
        *,
        config_paths: Sequence[str | os.PathLike[str]] | None = None,
        hostname: str | None = None,
        port: int | None = None,
        username: str | None = None,
        client_keys: Sequence[str] | None = None,
        known_hosts: str | None = None,
        known_hosts_mode: KnownHostsMode = "strict",
        connect_timeout_s: float = 10.0,
        keepalive_interval_s: float = 10.0,
        keepalive_count_max: int = 3,
        max_channels: int = 8,
        warm_sessions: int = 1,
    ) -> None:
        if max_channels < 1:
            raise ValueError("max_channels must be >= 1")
        if not 0 <= warm_sessions < max_channels:
            raise ValueError("warm_sessions must be >= 0 and below max_channels")
        self.alias = alias
        self.config_paths = [str(p) for p in config_paths] if config_paths is not None else default_config_paths()
        self.hostname = hostname
        self.port = port
        self.username = username
        self.client_keys = list(client_keys) if client_keys is not None else None
        self.known_hosts = known_hosts
        self.known_hosts_mode: KnownHostsMode = known_hosts_mode
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_interval_s = keepalive_interval_s
        self.keepalive_count_max = keepalive_count_max
        self.max_channels = max_channels
        self.warm_sessions = warm_sessions

    def connect_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "config": self.config_paths,
            "keepalive_interval": self.keepalive_interval_s,
            "keepalive_count_max": self.keepalive_count_max,
            "connect_timeout": self.connect_timeout_s,
        }
        if self.port is not None:
            kw["port"] = self.port
        if self.username is not None:
            kw["username"] = self.username
        if self.client_keys is not None:
            kw["client_keys"] = self.client_keys
        if self.known_hosts is not None:
            kw["known_hosts"] = self.known_hosts
        return kw


def default_config_paths() -> list[str]:
    """OpenSSH client config files read by default: ``$AGENT_TOOLS_SSH_CONFIG`` (``:``-separated) first,
    then ``~/.ssh/config`` when it exists."""
    paths: list[str] = []
    env = os.environ.get("AGENT_TOOLS_SSH_CONFIG")
    if env:
        paths.extend(p for p in env.split(os.pathsep) if p)
    user_cfg = Path("~/.ssh/config").expanduser()
    if user_cfg.exists():
        paths.append(str(user_cfg))
    return paths


def _translate(alias: str, exc: BaseException, during: str) -> HostError:
    """Map an asyncssh/OS exception to the project's tree (the only place that knows asyncssh types)."""
    if isinstance(exc, HostError):
        return exc
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return HostKeyError(alias, f"{alias}: host key not verifiable ({exc.reason}); check known_hosts "
                                   "(a changed key is refused; an unknown one needs accept-new or ssh-keyscan)")
    if isinstance(exc, asyncssh.PermissionDenied):
        return AuthenticationFailed(alias, f"{alias}: authentication failed ({exc.reason})")
    if isinstance(exc, asyncssh.ChannelOpenError):
        return ChannelOpenFailed(alias, f"{alias}: the host refused a new session channel ({exc.reason})")
    if isinstance(exc, asyncssh.ConnectionLost | asyncssh.DisconnectError | BrokenPipeError |
                  ConnectionResetError):
        return ConnectionLost(alias, f"{alias}: connection lost during {during} ({exc})")
    if isinstance(exc, TimeoutError):
        return HostUnreachable(alias, f"{alias}: no SSH connection within the connect deadline ({during})")
    if isinstance(exc, OSError):
        return HostUnreachable(alias, f"{alias}: cannot connect ({exc.strerror or exc})")
    if isinstance(exc, asyncssh.Error):
        return HostError(alias, f"{alias}: SSH error during {during}: {exc.reason}")
    return HostError(alias, f"{alias}: {type(exc).__name__} during {during}: {exc}")


_PENDING: set[asyncio.Task[None]] = set()  # background slot releases (strong references until done)


class _SshProcess(HostProcess):
    def __init__(self, host: SshHost, proc: asyncssh.SSHClientProcess[bytes],
                 release: anyio.Semaphore) -> None:
        self._host = host
        self._proc = proc
        self._release = release
        self._released = False

    async def _read(self, reader: asyncssh.SSHReader[bytes], max_bytes: int) -> bytes:
        try:
            return await reader.read(max_bytes)
        except (asyncssh.Error, OSError) as exc:
            self._host._drop_if_closed()
            raise _translate(self._host.name, exc, "read") from exc

    async def read_stdout(self, max_bytes: int = 65536) -> bytes:
        return await self._read(self._proc.stdout, max_bytes)

    async def read_stderr(self, max_bytes: int = 65536) -> bytes:
        return await self._read(self._proc.stderr, max_bytes)

    async def write_stdin(self, data: bytes) -> None:
        try:
            self._proc.stdin.write(data)
            await self._proc.stdin.drain()
        except (asyncssh.Error, OSError) as exc:
            raise _translate(self._host.name, exc, "write") from exc

    async def close_stdin(self) -> None:
        self._eof()

    def _eof(self) -> None:
        try:
            self._proc.stdin.write_eof()
        except (asyncssh.Error, OSError):
            pass

    async def wait(self) -> ExecResult:
        try:
            await self._proc.wait_closed()
        except (asyncssh.Error, OSError) as exc:
            raise _translate(self._host.name, exc, "wait") from exc
        status = self._proc.exit_status
        sig = self._proc.exit_signal
        if sig is not None:
            return ExecResult(None, sig[0])
        if status is None or status < 0:
            self._host._drop_if_closed()
            raise ConnectionLost(self._host.name, f"{self._host.name}: the session closed without an exit "
                                                  "status (connection dropped?); the outcome is unknown")
        return ExecResult(status)

    def is_closed(self) -> bool:
        """True once the channel is closing or closed (the command ended or the connection dropped)."""
        return self._released or self._proc.is_closing()

    async def close(self) -> None:
        if self._released:
            return
        self._released = True
        self._host._session_closed()
        # OpenSSH answers a client's early channel close at once but keeps counting the session against
        # MaxSessions until the remote command has exited. So the channel slot is kept until the server closed
        # the channel, and the server is given a moment to close it first (the command is normally ending: its
        # stdin got EOF or its report was read); only then is the channel closed from here. Done in the
        # background so close() never blocks; bounded so a command that never exits cannot keep the slot.
        try:
            task = asyncio.get_running_loop().create_task(self._close_and_release())
        except RuntimeError:  # no running loop (interpreter shutdown): close now
            self._proc.close()
            self._release.release()
            return
        _PENDING.add(task)
        task.add_done_callback(_PENDING.discard)

    async def _close_and_release(self) -> None:
        try:
            try:
                await asyncio.wait_for(asyncio.shield(self._proc.wait_closed()), _LINGER_S)
            except TimeoutError:
                self._proc.close()
                await asyncio.wait_for(self._proc.wait_closed(), _CLOSE_WAIT_S)
        except (TimeoutError, asyncssh.Error, OSError):
            self._proc.close()
        finally:
            self._release.release()


class SshHost:
    """A remote host over one pooled SSH connection, opened lazily and reopened after a drop.

    :param settings: an :class:`SshSettings` (or just pass ``alias`` and keyword settings).
    :param name: the alias jobs are filed under (default: ``settings.alias``).
    """

    def __init__(self, settings: SshSettings | str, *, name: str | None = None, **kwargs: Any) -> None:
        self.settings = settings if isinstance(settings, SshSettings) else SshSettings(settings, **kwargs)
        self.name = name or self.settings.alias
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = anyio.Lock()
        self._channels = anyio.Semaphore(self.settings.max_channels)
        # warm sessions per key: (token, process, the connection it runs on); and their refills under way
        self._warm: dict[str, list[tuple[str, _SshProcess, asyncssh.SSHClientConnection]]] = {}
        self._warming: dict[str, set[asyncio.Task[None]]] = {}
        self._wanted: dict[str, Callable[[], tuple[str, str]]] = {}  # keys asked for, with their factories

    def __repr__(self) -> str:
        return f"SshHost(name={self.name!r})"

    def _drop_if_closed(self) -> None:
        conn = self._conn
        if conn is not None and conn.is_closed():
            self._conn = None

    def channels_busy(self) -> bool:
        """True while every session channel slot of the (open) pooled connection is taken, i.e. new calls are
        queueing behind other calls rather than waiting for the network."""
        conn = self._conn
        return self._channels.value == 0 and conn is not None and not conn.is_closed()

    def drop_connection(self) -> None:
        """Forget the pooled connection (closing it); the next call reconnects."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def connection(self) -> asyncssh.SSHClientConnection:
        """Return the pooled connection, connecting if needed (within ``connect_timeout_s``).

        :raises HostUnreachable, AuthenticationFailed, HostKeyError: as the connect failed.
        """
        self._drop_if_closed()
        if self._conn is not None:
            return self._conn
        async with self._lock:
            self._drop_if_closed()
            if self._conn is not None:
                return self._conn
            self._conn = await self._connect()
            return self._conn

    async def _connect(self) -> asyncssh.SSHClientConnection:
        s = self.settings
        target = s.hostname or s.alias
        log.debug("ssh.connect", host=self.name, target=target)
        try:
            with anyio.fail_after(s.connect_timeout_s):
                try:
                    return await asyncssh.connect(target, **s.connect_kwargs())
                except asyncssh.HostKeyNotVerifiable:
                    if s.known_hosts_mode != "accept-new":
                        raise
                    if not await self._accept_new_key(target):
                        raise
                    return await asyncssh.connect(target, **s.connect_kwargs())
        except TimeoutError as exc:
            raise HostUnreachable(self.name, f"{self.name}: no SSH connection within "
                                             f"{s.connect_timeout_s:g} s (connect deadline)") from exc
        except (asyncssh.Error, OSError) as exc:
            raise _translate(self.name, exc, "connect") from exc

    async def _accept_new_key(self, target: str) -> bool:
        """accept-new: add the server's key when the known_hosts file has no entry for the host at all."""
        s = self.settings
        opts = asyncssh.SSHClientConnectionOptions(config=s.config_paths, host=target)
        host = str(s.hostname or opts.host or target)
        port = int(s.port or opts.port or 22)
        path = await anyio.to_thread.run_sync(_expand, s.known_hosts or "~/.ssh/known_hosts")
        text = await anyio.to_thread.run_sync(_read_or_empty, path)
        if text:
            trusted, *_ = asyncssh.import_known_hosts(text).match(host, "", port)
            if trusted:
                return False  # the host is known and its key changed: never accept silently
        key = await asyncssh.get_server_host_key(host, port)
        if key is None:
            return False
        pattern = host if port == 22 else f"[{host}]:{port}"
        line = f"{pattern} {key.export_public_key().decode().strip()}\n"
        await anyio.to_thread.run_sync(_append, path, line)
        log.warning("ssh.host_key_accepted_new", host=self.name, known_hosts=str(path))
        return True

    async def start(self, command: str, *, env: Mapping[str, str] | None = None) -> HostProcess:
        if self._channels.value == 0:
            self._retire_warm()  # an idle warm session gives its channel to a call that needs one now
        await self._channels.acquire()
        try:
            stale_retry, refusals = True, 0
            while True:
                conn = await self.connection()
                t0 = anyio.current_time()
                try:
                    proc = await _open_process(conn, command, dict(env or {}))
                    break
                except (asyncssh.Error, OSError) as exc:
                    # OPEN_CONNECT_FAILED on a channel open: the session was refused or the connection closed
                    # before it opened; either way no exec request went out, so retrying cannot run it twice.
                    opening = (isinstance(exc, asyncssh.ChannelOpenError)
                               and exc.code == asyncssh.OPEN_CONNECT_FAILED)
                    if not conn.is_closed():
                        if opening and refusals < _REFUSAL_RETRIES:
                            # refused by the server (OpenSSH "no more sessions": it may still count sessions
                            # whose command is exiting): back off briefly, within the caller's deadline
                            refusals += 1
                            log.debug("ssh.session_refused", host=self.name, attempt=refusals)
                            await anyio.sleep(0.05 * 2 ** min(refusals, 5))
                            continue
                        raise _translate(self.name, exc, "channel open") from exc
                    # The pooled connection died under this call: that is a lost connection, not a refusal.
                    self._drop_if_closed()
                    if stale_retry and opening and anyio.current_time() - t0 < _STALE_S:
                        # It closed before the channel was even open (the server had already dropped it: sshd
                        # restarted, idle timeout): one retry on a fresh connection.
                        stale_retry = False
                        log.info("ssh.stale_connection", host=self.name, error=str(exc))
                        continue
                    raise ConnectionLost(self.name, f"{self.name}: the SSH connection was lost while opening a "
                                                    f"session ({exc}); the host may be unreachable") from exc
        except BaseException:
            self._channels.release()
            raise
        return _SshProcess(self, proc, self._channels)

    # ------------------------------------------------------------------ warm sessions
    async def take_warm(self, key: str, factory: Callable[[], tuple[str, str]], *,
                        wait_s: float = 0.0) -> tuple[str, HostProcess] | None:
        """A session started ahead of time with a command from ``factory``, its command waiting for input on
        stdin (it printed a line ending in ``@@AT ready``; that line and any before it are consumed here); or
        None when none is ready.

        Once a key was asked for, sessions for it start in the background whenever a call on this host closes
        its session (so they do not compete with the call for the host's CPU), up to
        ``settings.warm_sessions`` ready or starting per ``key``, and only on an open connection (never a
        connect of their own). So one-shot users (the CLI) pay nothing.

        The caller owns the returned process like one from :meth:`start` (writes its input, reads, closes).
        Sessions of a dropped connection are never returned. Warm sessions hold channel slots; a call of
        :meth:`start` that finds every slot taken retires an idle one (EOF on its stdin, then close).

        :param key: what kind of session (callers with different factories use different keys).
        :param factory: returns ``(token, command)``: the token is handed back with the session (the job
            launcher reserves a job id with it).
        :param wait_s: when none is ready but one is starting, wait up to this many seconds (float) for it:
            it is further along than a new session would be.
        """
        if self.settings.warm_sessions <= 0:
            return None
        self._wanted[key] = factory
        got = self._pop_warm(key)
        starting = self._warming.get(key)
        if got is None and starting and wait_s > 0:
            with anyio.move_on_after(wait_s):
                await asyncio.wait(set(starting), return_when=asyncio.FIRST_COMPLETED)
            got = self._pop_warm(key)
        return got

    def _pop_warm(self, key: str) -> tuple[str, HostProcess] | None:
        pool = self._warm.setdefault(key, [])
        while pool:
            token, proc, conn = pool.pop(0)
            if conn is self._conn and not conn.is_closed() and not proc.is_closed():
                return token, proc
            _retire(proc)
        return None

    def _session_closed(self) -> None:
        """A call closed its session: start the warm sessions wanted (after the call, so that starting them does
        not compete with it for the host's CPU)."""
        for key, factory in self._wanted.items():
            self._refill(key, factory)

    def _refill(self, key: str, factory: Callable[[], tuple[str, str]]) -> None:
        """Start warm sessions in the background until ``warm_sessions`` are ready or starting for ``key``
        (never taking the last free channel slot)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        pool = self._warm.setdefault(key, [])
        warming = self._warming.setdefault(key, set())
        while len(pool) + len(warming) < self.settings.warm_sessions and self._channels.value > 1:
            task = loop.create_task(self._warm_one(key, factory))
            warming.add(task)
            task.add_done_callback(warming.discard)

    async def wait_warm(self) -> None:
        """Wait until the warm sessions being started now are ready (or failed). For benchmarks and tests."""
        for tasks in list(self._warming.values()):
            if tasks:
                await asyncio.wait(set(tasks))

    def warm_count(self, key: str) -> int:
        """Warm sessions ready for ``key`` (on the current connection)."""
        return sum(1 for _, p, c in self._warm.get(key, []) if c is self._conn and not p.is_closed())

    async def _warm_one(self, key: str, factory: Callable[[], tuple[str, str]]) -> None:
        conn = self._conn
        if conn is None or conn.is_closed():
            return  # never connect for a warm session: after a drop, the next call reconnects (with its deadline)
        token, command = factory()
        try:
            proc = await self.start(command)
        except Exception as exc:  # a background task: any failure only means no warm session
            log.debug("ssh.warm_failed", host=self.name, error=repr(exc))
            return
        assert isinstance(proc, _SshProcess)
        try:
            with anyio.fail_after(_WARM_READY_S):
                ready = b""
                while not ready.rstrip(b"\r\n").endswith(WARM_READY):  # skips a login shell's chatter
                    ready = await proc._proc.stdout.readuntil(b"\n")
        except (asyncssh.Error, OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
            log.debug("ssh.warm_not_ready", host=self.name, error=repr(exc))
            _retire(proc)
            return
        except BaseException:
            _retire(proc)
            raise
        if conn is not self._conn or self.settings.warm_sessions <= 0:
            _retire(proc)
            return
        log.debug("ssh.warm_ready", host=self.name, key=key, line=ready[:80])
        self._warm.setdefault(key, []).append((token, proc, conn))

    def _retire_warm(self) -> bool:
        for pool in self._warm.values():
            if pool:
                _retire(pool.pop()[1])
                return True
        return False

    async def open_tcp(self, host: str, port: int) -> ByteStream:
        conn = await self.connection()
        try:
            reader, writer = await conn.open_connection(host, port, encoding=None)
        except asyncssh.ChannelOpenError as exc:
            if exc.code == asyncssh.OPEN_CONNECT_FAILED:
                raise ConnectionRefusedError(f"{host}:{port} on {self.name}: {exc.reason}") from exc
            raise OSError(f"{host}:{port} on {self.name}: {exc.reason}") from exc
        except (asyncssh.Error, OSError) as exc:
            raise _translate(self.name, exc, "tcp open") from exc
        return _SshTcpStream(reader, writer)

    async def aclose(self) -> None:
        for tasks in self._warming.values():
            for task in tasks:
                task.cancel()
        for pool in self._warm.values():
            while pool:
                _retire(pool.pop()[1])
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with anyio.move_on_after(2):
                await conn.wait_closed()


def _retire(proc: _SshProcess) -> None:
    """Let an unused warm session end: EOF on its stdin (its command exits, tidying up), then close."""
    if not proc.is_closed():
        proc._eof()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no running loop: the connection goes with it
        return
    task = loop.create_task(proc.close())
    _PENDING.add(task)
    task.add_done_callback(_PENDING.discard)


async def _open_process(conn: asyncssh.SSHClientConnection, command: str,
                        env: dict[str, str]) -> asyncssh.SSHClientProcess[bytes]:
    """Open a session channel and exec ``command`` on it, atomically as far as the caller can tell.

    A caller cancelled half-way (its budget ran out while the server was opening the session) would otherwise
    leave the channel open on the server with no owner: it keeps counting against ``MaxSessions`` and the
    command may run without anyone knowing. So a cancelled caller waits, shielded and for at most
    ``_OPEN_GRACE_S``, for the open to finish: a process that opened is handed back (the caller's cancellation
    is delivered at its next await, and it closes the process as usual); one that opens even later is closed.
    """
    task = asyncio.ensure_future(conn.create_process(command, encoding=None, env=env))
    task.add_done_callback(_retrieve)  # a failure nobody awaits any more (cancelled caller, closing loop) is no error
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_OPEN_GRACE_S):
            await asyncio.wait({task})
        if task.done() and not task.cancelled() and task.exception() is None:
            return task.result()
        task.add_done_callback(_close_orphan)
        raise


def _retrieve(task: asyncio.Future[asyncssh.SSHClientProcess[bytes]]) -> None:
    if not task.cancelled():
        task.exception()


def _close_orphan(task: asyncio.Future[asyncssh.SSHClientProcess[bytes]]) -> None:
    if not task.cancelled() and task.exception() is None:
        task.result().close()


def _expand(p: str) -> Path:
    return Path(p).expanduser()


def _read_or_empty(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _append(path: Path, line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fh.write(line)


class _SshTcpStream(ByteStream):
    """anyio ByteStream over an asyncssh direct-tcpip channel."""

    def __init__(self, reader: asyncssh.SSHReader[bytes], writer: asyncssh.SSHWriter[bytes]) -> None:
        self._reader = reader
        self._writer = writer

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = await self._reader.read(max_bytes)
        if not data:
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes) -> None:
        self._writer.write(item)
        await self._writer.drain()

    async def send_eof(self) -> None:
        self._writer.write_eof()

    async def aclose(self) -> None:
        self._writer.close()
