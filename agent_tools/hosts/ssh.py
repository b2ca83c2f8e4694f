"""``SshHost``: a remote machine over one pooled asyncssh connection.

Facts this module respects (checked at the sources):

* OpenSSH's sshd allows ``MaxSessions`` (default 10) session channels per connection (sshd_config(5)) and
  refuses one more with SSH_MSG_CHANNEL_OPEN_FAILURE (OpenSSH 9.2 sends reason 2, "open failed"; others send
  1, "administratively prohibited"). One connection is shared by every call to the host; a channel limiter
  keeps open channels at or below a limit that starts at ``max_channels`` (default 8) and is lowered to the
  most channels the server has accepted at once when it refuses one: refused calls queue for a channel and
  retry within their own time, never failing for a refusal alone.
* asyncssh sends no keepalives unless ``keepalive_interval`` is set; it is on here (the config's
  ``ServerAliveInterval`` × ``ServerAliveCountMax``, as ssh(1) uses them; 10 s × 3 when it sets neither), so a
  dead peer is noticed within ~40 s even while idle. While a call waits for the host, the interval drops to a
  third of ``liveness_timeout_s`` with 2 unanswered requests allowed (asyncssh ``set_keepalive``), so a host
  that stops answering (partition, packet drops) is noticed within ``liveness_timeout_s`` and its connection is
  closed; every call waiting on it fails with :class:`~agent_tools.errors.ConnectionLost` and the next call
  reconnects. A keepalive is answered by sshd itself, so a slow command on a live host is never mistaken for it.
* The pooled socket has ``SO_LINGER`` 0 (socket(7)): when a connection is given up, the kernel discards what it
  had not sent yet instead of delivering it whenever the network comes back, so a command whose request was
  still unsent when the connection was abandoned can never start later.
* asyncssh opens a session channel, then (``SSHClientSession.connection_made``, on the open confirmation) sends
  the ``exec`` request. A caller that gives up before the confirmation marks the open abandoned: the channel is
  closed when the confirmation comes and no ``exec`` is ever sent, so "not started" is then a fact. A caller
  that gives up after the ``exec`` went out learns it (:class:`~agent_tools.errors.ExecUnconfirmed`).
* asyncssh's ``run(timeout=)`` does not cover connecting or opening the channel; callers wrap whole operations
  in one anyio deadline scope (connecting is cancelled with it). Connecting has its own deadline
  (``connect_timeout_s``, else the config's ``ConnectTimeout`` as ssh(1) reads it, else 10 s).
* asyncssh reports ``exit_status=None`` when the channel closed without an exit status (connection dropped):
  that is :class:`~agent_tools.errors.ConnectionLost`, never success.
* OpenSSH client config files (``HostName``, ``Port``, ``User``, ``IdentityFile``, ``UserKnownHostsFile``,
  ``ProxyJump``, ``Match``, ...) are parsed by asyncssh and applied as ssh(1) applies them
  (:mod:`agent_tools.hosts.ssh_config`: ``Match final``, ``Match exec`` % tokens, missing key files skipped,
  ProxyJump hops resolved alike, a hop's own ProxyJump followed as ssh's ``ssh -W`` does); host keys are
  always checked against known_hosts (host certificates against ``@cert-authority`` lines, as ssh does); an
  unknown key is refused unless this host's ``known_hosts_mode`` (else the config's ``StrictHostKeyChecking``)
  is ``accept-new``, and a refusal says whether the key was unknown, changed or revoked, where it looked and
  what the host offered (:mod:`.host_keys`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fnmatch
import functools
import os
import socket
import struct
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import anyio
import structlog
from anyio.abc import ByteStream

from .._asyncssh import asyncssh
from ..errors import (
    AuthenticationFailed,
    ChannelOpenFailed,
    ConnectionLost,
    ExecUnconfirmed,
    HostError,
    HostKeyError,
    HostUnreachable,
    SshConfigError,
    UnknownHost,
)
from . import host_keys
from .background import Background
from .base import ConnectProgress, ExecResult, HostProcess
from .ssh_config import CanonicalizeError, JumpHop, ResolvedHost, expand_tilde
from .ssh_config import resolve as resolve_config

__all__ = ["SshHost", "SshSettings", "Timing"]

log = structlog.get_logger(__name__)

KnownHostsMode = Literal["strict", "accept-new"]

#: getaddrinfo(3) errors that mean "no such name" (EAI_NODATA where the platform has it)
_NO_SUCH_NAME = frozenset(e for e in (getattr(socket, "EAI_NONAME", None), getattr(socket, "EAI_NODATA", None))
                          if e is not None)
#: a channel open that fails this fast because the pooled connection is closed met a stale connection
_STALE_S = 1.0
#: longest a caller that gave up waits for the host's answer to an exec request already sent (``_open_process``)
_OPEN_GRACE_S = 3.0
#: channel open failure reasons that mean "no more sessions" (RFC 4254 5.1): OpenSSH 9.2 sends 2 (connect
#: failed, "open failed"), other servers 1 (administratively prohibited)
_REFUSAL_CODES = frozenset({asyncssh.OPEN_CONNECT_FAILED, asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED})
#: longest pause between retries of a refused session open within the learned limit (0.05 s, doubling)
_REFUSAL_BACKOFF_MAX_S = 0.5
#: a host that keeps refusing sessions while this client has no other channel open to it refuses sessions
#: altogether (MaxSessions 0, a broken PAM stack): after this many seconds that is reported, not retried
_REFUSED_ALONE_S = 5.0
#: connect attempts under way at once at most (see ``SshHost.connection``)
_MAX_ATTEMPTS = 4
#: how long a closed process's channel is left for the server to close first (see ``_SshProcess.close``)
_LINGER_S = 2.0
#: longest a closed channel keeps its slot while waiting for the server's close (see ``_SshProcess.close``)
_CLOSE_WAIT_S = 10.0
#: longest a warm session may take to say it is ready for input
_WARM_READY_S = 15.0
#: terminal modes sent with a pty request (only made when the config says ``RequestTTY force``): ssh(1) without a
#: terminal on stdin sends the modes of an all-zero termios (ttymodes.c, ``get_saved_tio()`` never filled), so the
#: remote pty neither echoes nor turns ``\n`` into ``\r\n``; the flags that change the bytes are sent off alike
_SSH_NO_TTY_MODES = {mode: 0 for mode in (asyncssh.PTY_ECHO, asyncssh.PTY_ICANON, asyncssh.PTY_ISIG,
                                          asyncssh.PTY_IEXTEN, asyncssh.PTY_OPOST, asyncssh.PTY_ONLCR,
                                          asyncssh.PTY_ICRNL, asyncssh.PTY_IXON)}
#: the line a warm session's command prints when it is ready for its request (see ``SshHost.take_warm``)
WARM_READY = b"@@AT ready"


_DEFAULT_CONNECT_S = 10.0
_DEFAULT_KEEPALIVE_S = 10.0
_DEFAULT_KEEPALIVE_COUNT = 3
#: ProxyJump hops whose own ProxyJump leads to further hops, at most (ssh itself would recurse without end)
_MAX_JUMP_DEPTH = 8


@dataclass(frozen=True)
class Timing:
    """The connect deadline (s) and keepalives (interval s, unanswered count) a connection uses."""

    connect_timeout_s: float
    keepalive_interval_s: float
    keepalive_count_max: int


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
        key is added to the known_hosts file; a changed key is still refused). None (default): the config's
        ``StrictHostKeyChecking`` (ssh_config(5)): ``accept-new`` is accept-new, and so is ``no``/``off`` (an
        unknown key is added as ssh adds it, but a changed key is refused, where ssh would connect anyway);
        ``yes`` and ``ask`` (ssh cannot ask without a terminal) and no setting are strict.
    :param connect_timeout_s: seconds allowed for TCP connect + SSH handshake + auth (float); a caller's own
        deadline scope cuts it shorter. None (default): the config's ``ConnectTimeout``, else 10.
    :param keepalive_interval_s: seconds between keepalive requests while no call waits for the host (0
        disables them; not recommended). None (default): the config's ``ServerAliveInterval``, else 10.
    :param keepalive_count_max: unanswered keepalives (at that interval) before the connection counts as dead.
        None (default): the config's ``ServerAliveCountMax``, else 3.
    :param liveness_timeout_s: while a call waits for the host's answer, seconds of complete silence (not even
        a keepalive answered) after which the connection counts as dead: it is closed, the waiting calls fail
        with ``ConnectionLost`` and the next call reconnects (float; keepalives go every third of it while
        calls wait). 0 turns this off (then only ``keepalive_interval_s`` × ``keepalive_count_max`` bounds it).
    :param max_channels: session channels open at once on the pooled connection at most (keep it at or below
        the server's ``MaxSessions``, default 10; when the server refuses one, the client lowers its limit to
        the most it accepted at once and queues the rest).
    :param warm_sessions: sessions kept started ahead of time per kind of script (see
        :meth:`SshHost.take_warm`); each holds one of the ``max_channels`` and one idle ``sh`` on the host.
        0 turns them off (one-shot processes such as the CLI).
    :raises ValueError: ``max_channels`` < 1, ``warm_sessions`` not in ``[0, max_channels)``, or
        ``liveness_timeout_s`` < 0.
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
        known_hosts_mode: KnownHostsMode | None = None,
        connect_timeout_s: float | None = None,
        keepalive_interval_s: float | None = None,
        keepalive_count_max: int | None = None,
        liveness_timeout_s: float = 3.0,
        max_channels: int = 8,
        warm_sessions: int = 1,
    ) -> None:
        if max_channels < 1:
            raise ValueError("max_channels must be >= 1")
        if not 0 <= warm_sessions < max_channels:
            raise ValueError("warm_sessions must be >= 0 and below max_channels")
        if liveness_timeout_s < 0:
            raise ValueError("liveness_timeout_s must be >= 0 seconds")
        self.alias = alias
        self.config_paths = [str(p) for p in config_paths] if config_paths is not None else default_config_paths()
        self.hostname = hostname
        self.port = port
        self.username = username
        self.client_keys = list(client_keys) if client_keys is not None else None
        self.known_hosts = known_hosts
        self.known_hosts_mode: KnownHostsMode | None = known_hosts_mode
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_interval_s = keepalive_interval_s
        self.keepalive_count_max = keepalive_count_max
        self.liveness_timeout_s = liveness_timeout_s
        self.max_channels = max_channels
        self.warm_sessions = warm_sessions

    def timing(self, config: Any = None) -> Timing:
        """The connect deadline and keepalives in force: these settings where given, else the resolved
        ``config``'s ``ConnectTimeout`` / ``ServerAliveInterval`` / ``ServerAliveCountMax`` (ssh_config(5);
        ``ServerAliveInterval 0`` turns keepalives off, as for ssh), else 10 s, 10 s and 3.

        :param config: the resolved config (:attr:`ResolvedHost.config`), or None (not resolved yet).
        """
        get = config.get if config is not None else (lambda _k, d=None: d)
        timeout, interval, count = get("ConnectTimeout"), get("ServerAliveInterval"), get("ServerAliveCountMax")
        return Timing(
            connect_timeout_s=float(self.connect_timeout_s if self.connect_timeout_s is not None else
                                    timeout if isinstance(timeout, int) and timeout > 0 else _DEFAULT_CONNECT_S),
            keepalive_interval_s=float(self.keepalive_interval_s if self.keepalive_interval_s is not None else
                                       interval if isinstance(interval, int) and interval >= 0 else
                                       _DEFAULT_KEEPALIVE_S),
            keepalive_count_max=int(self.keepalive_count_max if self.keepalive_count_max is not None else
                                    count if isinstance(count, int) and count > 0 else _DEFAULT_KEEPALIVE_COUNT))

    def key_mode(self, config: Any = None) -> KnownHostsMode:
        """The known_hosts mode in force: :attr:`known_hosts_mode` when given, else the resolved ``config``'s
        ``StrictHostKeyChecking`` (see the ``known_hosts_mode`` parameter), else ``strict``."""
        if self.known_hosts_mode is not None:
            return self.known_hosts_mode
        value = str(config.get("StrictHostKeyChecking") or "") if config is not None else ""
        return "accept-new" if value.lower() in ("accept-new", "no", "off") else "strict"

    def connect_kwargs(self, timing: Timing | None = None) -> dict[str, Any]:
        """asyncssh keyword arguments set by these settings and ``timing`` (default: :meth:`timing` without a
        config); the config files are applied by :mod:`agent_tools.hosts.ssh_config`, not here."""
        t = timing or self.timing()
        kw: dict[str, Any] = {
            "keepalive_interval": t.keepalive_interval_s,
            "keepalive_count_max": t.keepalive_count_max,
            "connect_timeout": t.connect_timeout_s,
        }
        if self.port is not None:
            kw["port"] = self.port
        if self.username is not None:
            kw["username"] = self.username
        if self.known_hosts is not None:
            kw["known_hosts"] = self.known_hosts
        return kw


def default_config_paths() -> list[str]:
    """OpenSSH client config files read by default: ``$AGENT_TOOLS_SSH_CONFIG`` (``:``-separated) first,
    then ``~/.ssh/config`` when it exists (``~``: the password database's home, as ssh(1) reads it)."""
    paths: list[str] = []
    env = os.environ.get("AGENT_TOOLS_SSH_CONFIG")
    if env:
        paths.extend(p for p in env.split(os.pathsep) if p)
    user_cfg = Path(expand_tilde("~/.ssh/config"))  # ssh reads the password database's home, not $HOME
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
    if isinstance(exc, socket.gaierror) and exc.errno in _NO_SUCH_NAME:
        # getaddrinfo(3): the name does not exist (not a temporary DNS failure, EAI_AGAIN): retrying won't help
        return UnknownHost(alias, f"{alias}: unknown host: the name does not resolve ({exc.strerror or exc})")
    if isinstance(exc, OSError) and exc.filename:  # a local file (a key, a known_hosts file): not the network
        return SshConfigError(alias, f"{alias}: cannot use {exc.filename} ({exc.strerror or exc}), named by the SSH "
                                     "config or settings: fix the file or the config")
    if isinstance(exc, OSError):
        return HostUnreachable(alias, f"{alias}: cannot connect ({exc.strerror or exc})")
    if isinstance(exc, asyncssh.Error):
        return HostError(alias, f"{alias}: SSH error during {during}: {exc.reason}")
    return HostError(alias, f"{alias}: {type(exc).__name__} during {during}: {exc}")


class _ChannelSlots:
    """The session channel slots of one host: at most ``limit`` channels open at once; callers queue in order.

    ``limit`` starts at ``SshSettings.max_channels``. When the server refuses a channel it is lowered (never
    below 1) to ``peak``, the most channels the server had confirmed open at once on the current connection: a
    limit the server has shown it allows (counted at the open confirmation, which the server sends before it
    refuses a later open on the same connection). It is reset for each new connection (sshd may have been
    restarted with another ``MaxSessions``).
    """

    def __init__(self, limit: int) -> None:
        self.configured = limit
        self.limit = limit
        self.in_use = 0
        self.opened = 0  # channels of the current connection that the server confirmed open
        self.peak = 0
        self.generation = 0  # which connection ``opened`` and ``peak`` are about
        self._waiters: deque[anyio.Event] = deque()

    @property
    def free(self) -> int:
        """Slots free now (<= 0 when calls must queue)."""
        return self.limit - self.in_use

    @property
    def queued(self) -> int:
        """Calls waiting for a slot."""
        return len(self._waiters)

    async def acquire(self, *, first: bool = False) -> None:
        """Take a slot, waiting in line for one (``first``: at the head of the line, for a call that had one)."""
        if self.in_use < self.limit and not self._waiters:
            self.in_use += 1
            return
        ev = anyio.Event()
        if first:
            self._waiters.appendleft(ev)
        else:
            self._waiters.append(ev)
        try:
            await ev.wait()  # release() counts the slot for us before it sets the event
        except BaseException:
            if ev.is_set():
                self.release()  # handed over just as the caller gave up: pass it on
            else:
                self._waiters.remove(ev)
            raise

    def release(self, opened: int | None = None) -> None:
        """Give a slot back (``opened``: the generation in which its channel was confirmed open, if it was)."""
        self.in_use -= 1
        if opened is not None and opened == self.generation:
            self.opened -= 1
        self._hand_over()

    def _hand_over(self) -> None:
        while self._waiters and self.in_use < self.limit:
            self.in_use += 1
            self._waiters.popleft().set()

    def confirmed(self) -> int:
        """The server confirmed a channel open; returns the generation to release it with."""
        self.opened += 1
        self.peak = max(self.peak, self.opened)
        return self.generation

    def refused(self) -> int:
        """The server refused a channel: lower the limit to what it accepted at once; returns the limit."""
        self.limit = max(1, min(self.limit, self.peak))
        return self.limit

    def reset(self) -> None:
        """A new connection: start again from the configured limit."""
        self.limit, self.peak, self.opened = self.configured, 0, 0
        self.generation += 1
        self._hand_over()


class _SshProcess(HostProcess):
    def __init__(self, host: SshHost, proc: asyncssh.SSHClientProcess[bytes], slots: _ChannelSlots,
                 generation: int | None) -> None:
        self._host = host
        self._proc = proc
        self._slots = slots
        self._generation = generation  # of the channel slots, when the channel was confirmed open
        self._released = False

    async def _read(self, reader: asyncssh.SSHReader[bytes], max_bytes: int) -> bytes:
        try:
            with self._host._awaiting():
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
            with self._host._awaiting():
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
            with self._host._awaiting():
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
            self._host._background.spawn(self._close_and_release())
        except RuntimeError:  # no running loop (interpreter shutdown): close now
            self._proc.close()
            self._slots.release(self._generation)

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
            self._slots.release(self._generation)


@dataclasses.dataclass
class _AttemptInfo:
    t0: float
    tcp_at: float | None = None


class SshHost:
    """A remote host over one pooled SSH connection, opened lazily and reopened after a drop.

    :param settings: an :class:`SshSettings` (or just pass ``alias`` and keyword settings).
    :param name: the alias jobs are filed under (default: ``settings.alias``).
    """

    def __init__(self, settings: SshSettings | str, *, name: str | None = None, **kwargs: Any) -> None:
        self.settings = settings if isinstance(settings, SshSettings) else SshSettings(settings, **kwargs)
        self.name = name or self.settings.alias
        self._conn: asyncssh.SSHClientConnection | None = None
        self._attempts: set[asyncio.Task[asyncssh.SSHClientConnection]] = set()  # connect attempts under way
        self._attempt_t0 = 0.0  # when the newest one started (loop clock)
        self._attempt_info: dict[asyncio.Task[asyncssh.SSHClientConnection], _AttemptInfo] = {}
        self._last_connect_s: float | None = None  # how long the last successful connect took
        self._unanswered = False  # the host's last connection died unanswered, or the last attempt timed out
        self._slots = _ChannelSlots(self.settings.max_channels)
        self._waits = 0  # calls waiting for the host's answer now (and ones that just gave up: see _awaiting)
        # warm sessions per key: (token, process, the connection it runs on); and their refills under way
        self._warm: dict[str, list[tuple[str, _SshProcess, asyncssh.SSHClientConnection]]] = {}
        self._warming: dict[str, set[asyncio.Task[None]]] = {}
        self._wanted: dict[str, Callable[[], tuple[str, str]]] = {}  # keys asked for, with their factories
        self._timing = self.settings.timing()  # what the last resolved config says (see SshSettings.timing)
        # connect attempts, warm sessions starting, channels closing, ends of liveness waits: ended by aclose
        self._background = Background(f"SshHost({self.name})")

    def __repr__(self) -> str:
        return f"SshHost(name={self.name!r})"

    def _drop_if_closed(self) -> None:
        conn = self._conn
        if conn is not None and conn.is_closed():
            self._conn = None

    def connected(self) -> bool:
        """True while the pooled connection is open (not yet found dead)."""
        conn = self._conn
        return conn is not None and not conn.is_closed()

    def answering(self) -> bool:
        """True while the pooled connection is open and watched for liveness (``liveness_timeout_s`` > 0): a
        call waiting on it fails within that time if the host stops answering, so a call still waiting on an
        open connection is waiting for a slow host, not a gone one."""
        return self.connected() and self.settings.liveness_timeout_s > 0

    def connect_progress(self) -> ConnectProgress | None:
        """How far the connect attempts under way have come, or None when none is under way (connected,
        or the last attempt ended). Callers whose time ran out before a session use it to tell "the host does
        not answer" from "the time was too short to connect" (:class:`~agent_tools.errors.ConnectUnfinished`)."""
        live = [i for t, i in self._attempt_info.items() if not t.done()]
        if not live:
            return None
        now = asyncio.get_running_loop().time()
        made = [i for i in live if i.tcp_at is not None]
        tcp_s = min(i.tcp_at - i.t0 for i in made if i.tcp_at is not None) if made else None
        # the oldest attempt tells how long the host has been asked without answering (a newer one may have
        # been started next to it a moment ago: see connection())
        return ConnectProgress(waited_s=now - min(i.t0 for i in live), tcp_s=tcp_s, unanswered=self._unanswered,
                               last_connect_s=self._last_connect_s)

    def channels_busy(self) -> bool:
        """True while every session channel slot of the (open) pooled connection is taken, i.e. new calls are
        queueing behind other calls rather than waiting for the network."""
        return (self._slots.free <= 0 or self._slots.queued > 0) and self.connected()

    @property
    def channel_limit(self) -> int:
        """Session channels this client opens at once on the current connection (``max_channels``, or lower
        once the server refused one: the most it accepted at once)."""
        return self._slots.limit

    @property
    def host_key_fingerprint(self) -> str | None:
        """``SHA256:...`` of the host key the pooled connection authenticated (the machine's identity: the same
        across reboots, different on another machine), or None while not connected."""
        conn = self._conn
        key = conn.get_server_host_key() if conn is not None and not conn.is_closed() else None
        return key.get_fingerprint("sha256") if key is not None else None

    @property
    def connect_timeout_s(self) -> float:
        """Seconds a connect may take (settings, else the config's ``ConnectTimeout`` as last resolved, else 10)."""
        return self._timing.connect_timeout_s

    async def identify(self) -> str | None:
        """Connect if needed and return :attr:`host_key_fingerprint`.

        :raises HostUnreachable, AuthenticationFailed, HostKeyError, SshConfigError: as connecting failed.
        """
        await self.connection()
        return self.host_key_fingerprint

    # ------------------------------------------------------------------ liveness
    @contextlib.contextmanager
    def _awaiting(self) -> Iterator[None]:
        """Mark a wait for the host's answer. While any call waits, keepalives go at liveness pace (see the
        module docstring). A caller that gives up mid-wait (its time ran out without an answer) keeps that pace
        for ``liveness_timeout_s`` more, so a connection that stopped answering is found dead and closed even
        when no other call waits on it, and the next call reconnects instead of waiting on it."""
        self._waits += 1
        if self._waits == 1:
            self._pace(busy=True)
        gave_up = False
        try:
            yield
        except asyncio.CancelledError:
            gave_up = True
            raise
        finally:
            if gave_up and self.settings.liveness_timeout_s > 0:
                try:
                    self._background.call_later(self.settings.liveness_timeout_s, self._wait_done)
                except RuntimeError:
                    self._wait_done()
            else:
                self._wait_done()

    def _wait_done(self) -> None:
        self._waits -= 1
        if self._waits == 0:
            self._pace(busy=False)

    def _pace(self, *, busy: bool) -> None:
        conn, s = self._conn, self.settings
        if conn is None or conn.is_closed() or s.liveness_timeout_s <= 0:
            return
        if busy:  # asyncssh: dead once count_max + 1 intervals pass without an answer to a keepalive
            conn.set_keepalive(s.liveness_timeout_s / 3, 2)
        else:
            conn.set_keepalive(self._timing.keepalive_interval_s, self._timing.keepalive_count_max)

    # ------------------------------------------------------------------ connecting
    async def connection(self) -> asyncssh.SSHClientConnection:
        """Return the pooled connection, connecting if needed.

        Connect attempts run in the background, shared by every caller, each for up to ``connect_timeout_s``; a
        caller waits for one within its own deadline scope, and for at most ``liveness_timeout_s`` while the host
        is known not to answer (its last connection died unanswered, or the last attempt timed out). An attempt
        outlives a caller that gave up, so a slow but healthy connect still ends up pooled for the next call; a
        new one is started next to an attempt older than ``liveness_timeout_s`` (its SYNs may be in TCP's
        backoff while the network came back), at most ``_MAX_ATTEMPTS`` at once.

        :raises HostUnreachable, AuthenticationFailed, HostKeyError: as the connect failed.
        """
        self._drop_if_closed()
        if self._conn is not None:
            return self._conn
        s = self.settings
        live = [t for t in self._attempts if not t.done()]
        if not live or (s.liveness_timeout_s > 0 and len(live) < _MAX_ATTEMPTS
                        and anyio.current_time() - self._attempt_t0 > s.liveness_timeout_s):
            resolved = await self._resolve(self._target(), user=s.username, port=s.port)  # its ConnectTimeout
            self._timing = s.timing(resolved.config)
            live = [t for t in self._attempts if not t.done()]
            now = anyio.current_time()
            if not live or (s.liveness_timeout_s > 0 and len(live) < _MAX_ATTEMPTS
                            and now - self._attempt_t0 > s.liveness_timeout_s):
                info = _AttemptInfo(asyncio.get_running_loop().time())
                task = self._background.spawn(self._attempt(resolved, info))
                self._attempts.add(task)
                self._attempt_info[task] = info
                task.add_done_callback(self._attempts.discard)
                task.add_done_callback(lambda t: self._attempt_info.pop(t, None))
                self._attempt_t0 = now
                live.append(task)
        task = live[-1]
        wait_s = self._timing.connect_timeout_s
        if self._unanswered and s.liveness_timeout_s > 0:
            wait_s = min(wait_s, s.liveness_timeout_s)
        with anyio.move_on_after(wait_s):
            await asyncio.wait({task})  # cancelling the waiter leaves the attempt running
        if not task.done():
            self._unanswered = True
            raise HostUnreachable(self.name, f"{self.name}: no SSH connection within {wait_s:g} s (the host does "
                                             "not answer)")
        return task.result()

    def _target(self) -> str:
        return self.settings.hostname or self.settings.alias

    async def _attempt(self, resolved: ResolvedHost, info: _AttemptInfo) -> asyncssh.SSHClientConnection:
        """One connect attempt; pools its connection (or hands back one pooled meanwhile, closing its own).
        ``info`` records how far it came (:meth:`connect_progress`)."""
        try:
            conn = await self._connect(resolved, info)
        except HostUnreachable:
            self._unanswered = True
            raise
        self._last_connect_s = asyncio.get_running_loop().time() - info.t0
        if self._conn is not None and not self._conn.is_closed():
            conn.close()  # another attempt won
            return self._conn
        _set_linger(conn, discard=True)
        self._conn, self._unanswered = conn, False
        self._slots.reset()
        if self._waits:
            self._pace(busy=True)
        return conn

    def _connection_lost(self, exc: Exception | None) -> None:
        """asyncssh's ``SSHClient.connection_lost``: a connection found dead by keepalive did not answer."""
        if isinstance(exc, asyncssh.ConnectionLost) and "keepalive" in str(exc):
            self._unanswered = True
            log.warning("ssh.connection_unanswered", host=self.name, error=str(exc))

    async def _connect(self, resolved: ResolvedHost,
                       info: _AttemptInfo | None = None) -> asyncssh.SSHClientConnection:
        """One connection as ssh(1) would make it: the config resolved by :mod:`.ssh_config` (``Match final``,
        missing key files skipped), its ``ProxyJump`` hops connected first (each resolved the same way)."""
        s = self.settings
        target = self._target()
        timing = s.timing(resolved.config)
        log.debug("ssh.connect", host=self.name, target=target, connect_timeout_s=timing.connect_timeout_s)
        try:
            with anyio.fail_after(timing.connect_timeout_s):
                try:
                    return await self._open(target, resolved, timing, info)
                except asyncssh.HostKeyNotVerifiable as exc:
                    await self._refused_key(resolved, timing, exc)  # raises unless accept-new added the key
                    return await self._open(target, resolved, timing, info)
                except (asyncssh.ConnectionLost, ConnectionResetError, BrokenPipeError):
                    await self._host_key_types_mismatch(resolved, timing)  # raises when that was the cause
                    raise
        except TimeoutError as exc:
            raise HostUnreachable(self.name, f"{self.name}: no SSH connection within "
                                             f"{timing.connect_timeout_s:g} s (connect deadline)") from exc
        except asyncssh.PermissionDenied as exc:
            if resolved.missing_files:
                raise AuthenticationFailed(self.name, f"{self.name}: authentication failed ({exc.reason}); the SSH "
                                                      "config names key files that do not exist (skipped, as ssh "
                                                      f"does): {', '.join(resolved.missing_files)}") from exc
            raise _translate(self.name, exc, "connect") from exc
        except (asyncssh.Error, OSError) as exc:
            raise _translate(self.name, exc, "connect") from exc

    async def _resolve(self, target: str, *, user: str | None = None, port: int | None = None) -> ResolvedHost:
        """The config for ``target`` as ssh(1) reads it (a worker thread: files, ``Match exec``)."""
        s = self.settings
        try:
            resolved = await anyio.to_thread.run_sync(
                functools.partial(resolve_config, target, s.config_paths, user=user, port=port))
        except CanonicalizeError as exc:
            raise UnknownHost(self.name, f"{self.name}: unknown host: {exc}") from exc
        except (OSError, ValueError) as exc:
            where = f" ({exc.filename})" if isinstance(exc, OSError) and exc.filename else ""
            raise SshConfigError(self.name, f"{self.name}: the SSH config cannot be read{where}: "
                                            f"{getattr(exc, 'strerror', None) or exc}") from exc
        if resolved.missing_files:
            log.info("ssh.identity_files_missing", host=self.name, target=target, skipped=resolved.missing_files)
        return resolved

    async def _open(self, target: str, resolved: ResolvedHost, timing: Timing,
                    info: _AttemptInfo | None = None) -> asyncssh.SSHClientConnection:
        """Connect to ``target`` with ``resolved``, through its ProxyJump hops (opened here, first hop first; each
        hop closes with the connection tunnelled through it, as in asyncssh's own ProxyJump path)."""
        s = self.settings
        tunnel = await self._hops(resolved.jumps, timing, depth=0)
        try:
            files = host_keys.known_hosts_files(s.known_hosts, resolved.config, resolved.hostname,
                                                int(s.port or resolved.port or 22))
            kw = dict(s.connect_kwargs(timing), **resolved.connect_kwargs(),
                      client_factory=lambda: _Client(self, info), known_hosts=files.trusted())
            if s.client_keys is not None:  # explicit keys in the settings win over the config's
                kw["client_keys"] = s.client_keys
            conn = await asyncssh.connect(target, **kw, tunnel=tunnel or ())
        except BaseException:
            if tunnel is not None:
                tunnel.close()
            raise
        conn.set_tunnel(tunnel)
        return conn

    async def _hops(self, jumps: Sequence[JumpHop], timing: Timing, *,
                    depth: int) -> asyncssh.SSHClientConnection | None:
        """Connect the ``ProxyJump`` hops ``jumps`` in order, each through the one before; return the last (None
        when there are none).

        ssh(1) reaches a target through ``ProxyJump a,b`` by running ``ssh -J a -W %h:%p b``, which reaches ``b``
        by running ``ssh -W b:port a`` (ssh.c, the ``jump_host`` ProxyCommand): the first hop is reached as its own
        config says, through *its* ``ProxyJump`` if it has one, while the ``-J`` given to the others overrides
        theirs. The same is done here, to ``_MAX_JUMP_DEPTH`` levels (a config whose hops lead to each other is
        a :class:`SshConfigError`, not an endless recursion).
        """
        if jumps and depth >= _MAX_JUMP_DEPTH:
            raise SshConfigError(self.name, f"{self.name}: the SSH config's ProxyJump hops lead to more hops "
                                            f"{_MAX_JUMP_DEPTH} levels deep (a loop?): {jumps[0].host}")
        tunnel: asyncssh.SSHClientConnection | None = None
        try:
            for i, hop in enumerate(jumps):
                via = await self._resolve(hop.host, user=hop.user, port=hop.port)
                if i == 0 and via.jumps:
                    tunnel = await self._hops(via.jumps, timing, depth=depth + 1)
                hop_timing = self.settings.timing(via.config)
                files = host_keys.known_hosts_files(None, via.config, via.hostname, via.port)
                conn = await asyncssh.connect(hop.host, **via.connect_kwargs(), tunnel=tunnel or (),
                                              known_hosts=files.trusted(),
                                              connect_timeout=hop_timing.connect_timeout_s,
                                              keepalive_interval=hop_timing.keepalive_interval_s,
                                              keepalive_count_max=hop_timing.keepalive_count_max)
                conn.set_tunnel(tunnel)
                tunnel = conn
        except BaseException:
            if tunnel is not None:
                tunnel.close()
            raise
        return tunnel

    async def _host_key_types_mismatch(self, resolved: ResolvedHost, timing: Timing) -> None:
        """After the server dropped the handshake: when the config's ``HostKeyAlgorithms`` allows no type of key
        the host offers, say so as ssh(1) does ("Unable to negotiate ...: no matching host key type found.
        Their offer: ssh-ed25519"; sshd closes the connection on it, which asyncssh reports as a lost
        connection). The host's key type is read with a second handshake that allows every type.

        :raises SshConfigError: no matching host key type. Returns when that was not the cause (or it cannot
            tell).
        """
        wanted = resolved.config.get("HostKeyAlgorithms")
        if isinstance(wanted, list | tuple):
            wanted = ",".join(str(w) for w in wanted)
        if not isinstance(wanted, str) or not wanted.strip() or wanted.strip()[0] in "+^":
            return  # the defaults (every type asyncssh knows) stay allowed
        port = int(self.settings.port or resolved.port or 22)
        offered: asyncssh.SSHKey | None = None
        with contextlib.suppress(asyncssh.Error, OSError, HostError):
            tunnel = await self._hops(resolved.jumps, timing, depth=0)
            try:
                offered = await asyncssh.get_server_host_key(resolved.hostname, port, tunnel=tunnel or ())
            finally:
                if tunnel is not None:
                    tunnel.close()
        if offered is None:
            return
        alg = str(offered.get_algorithm())
        patterns = [w.strip() for w in wanted.strip().lstrip("-").split(",") if w.strip()]
        matched = any(fnmatch.fnmatchcase(alg, p) for p in patterns)
        if matched != wanted.strip().startswith("-"):  # a plain list must name it; a "-" list must not
            return
        raise SshConfigError(self.name, f"{self.name}: no matching host key type found: the host offers {alg} and "
                                        f"the SSH config's HostKeyAlgorithms {wanted.strip()} allows none of its "
                                        "types (as ssh: 'Unable to negotiate'); add its type there or remove the "
                                        "option")

    async def _refused_key(self, resolved: ResolvedHost, timing: Timing,
                           exc: asyncssh.HostKeyNotVerifiable) -> bool:
        """The host's key was not verified: for ``accept-new`` and a host no known_hosts entry names, add the key
        it offers and return True (connect again); else raise a :class:`HostKeyError` that says whether the key
        is unknown, changed or revoked, where it looked and what the host offered (:mod:`.host_keys`).

        :raises HostKeyError: the key stays refused.
        """
        s = self.settings
        port = int(s.port or resolved.port or 22)
        files = host_keys.known_hosts_files(s.known_hosts, resolved.config, resolved.hostname, port)
        offered: asyncssh.SSHKey | None = None
        with contextlib.suppress(asyncssh.Error, OSError, HostError):
            tunnel = await self._hops(resolved.jumps, timing, depth=0)
            try:
                offered = await asyncssh.get_server_host_key(resolved.hostname, port, tunnel=tunnel or ())
            finally:
                if tunnel is not None:
                    tunnel.close()
        state, holding = await anyio.to_thread.run_sync(host_keys.lookup, files, offered)
        # accept-new adds a key only for a host no entry names: asyncssh checks a certificate against the
        # @cert-authority entries without falling back to a plain key as ssh does, so one added next to them
        # would not be used
        if s.key_mode(resolved.config) == "accept-new" and state == "unknown" and not holding and offered is not None:
            path = await anyio.to_thread.run_sync(host_keys.remember, files, offered)
            log.warning("ssh.host_key_accepted_new", host=self.name, known_hosts=path,
                        fingerprint=offered.get_fingerprint("sha256"))
            return True
        raise HostKeyError(self.name, host_keys.describe_refusal(self.name, files, state, holding, offered,
                                                                 str(exc.reason)))

    # ------------------------------------------------------------------ sessions
    async def start(self, command: str, *, env: Mapping[str, str] | None = None) -> HostProcess:
        """Start ``command`` on a new session channel of the pooled connection (see :meth:`Host.start`).

        Steps: (1) take a channel slot, queueing behind other calls while the host's limit is reached (an idle
        warm session gives its slot up); (2) connect if needed; (3) open the session and send the exec request.
        A refused open (the server's ``MaxSessions``) lowers the limit to what the server accepted and queues
        again, or backs off briefly (0.05 s doubling to 0.5 s) when this call is within that limit; both
        repeat for as long as the caller's deadline scope allows. A caller cancelled before the server
        confirmed the session leaves nothing behind: no exec request is ever sent for it.

        :raises HostUnreachable, AuthenticationFailed, HostKeyError: connecting failed.
        :raises ConnectionLost: the connection dropped (or was found dead) before the exec request was sent:
            nothing was started.
        :raises ExecUnconfirmed: the exec request was sent, but the connection dropped or the host did not
            answer it (within ``_OPEN_GRACE_S`` after the caller gave up): the command may be running.
        :raises ChannelOpenFailed: the host refused the exec request, or refused every session for
            ``_REFUSED_ALONE_S`` while this client had no other channel open to it: nothing was started.
        """
        env_ = dict(env or {})
        held = requeued = False
        guard: _OpenGuard | None = None
        stale_retry, backoff = True, 0.05
        alone_since: float | None = None
        try:
            while True:
                if not held:
                    if self._slots.free <= 0:
                        self._retire_warm()  # an idle warm session gives its channel to a call that needs one now
                    await self._slots.acquire(first=requeued)
                    held = True
                conn = await self.connection()
                t0 = anyio.current_time()
                guard = _OpenGuard(self._slots.confirmed)
                try:
                    with self._awaiting():
                        proc = await _open_process(conn, command, env_, guard, self._background)
                    return _SshProcess(self, proc, self._slots, guard.generation)
                except _Unconfirmed as exc:
                    self._drop_if_closed()
                    raise ExecUnconfirmed(self.name, f"{self.name}: the command was sent but the host did not "
                                                     f"confirm it ({exc}); it may be running") from exc
                except (asyncssh.Error, OSError) as exc:
                    # a failed channel open: no exec request went out (see _open_process), so trying again can
                    # never run the command twice
                    opening = isinstance(exc, asyncssh.ChannelOpenError) and exc.code in _REFUSAL_CODES
                    if not conn.is_closed():
                        if not opening:
                            raise _translate(self.name, exc, "channel open") from exc
                        before = self._slots.limit
                        limit = self._slots.refused()
                        if limit < before:
                            log.info("ssh.channel_limit_lowered", host=self.name, limit=limit, was=before)
                        if self._slots.in_use > limit:
                            # over what the server accepts: give the slot back and queue behind open channels
                            self._slots.release()
                            guard = None
                            held, requeued, alone_since = False, True, None
                            continue
                        # within it: the server still counts a session that is ending; back off briefly
                        if self._slots.in_use <= 1:
                            alone_since = alone_since if alone_since is not None else anyio.current_time()
                            if anyio.current_time() - alone_since > _REFUSED_ALONE_S:
                                raise ChannelOpenFailed(self.name, f"{self.name}: the host refuses every new "
                                                                   f"session ({getattr(exc, 'reason', exc)})") from exc
                        else:
                            alone_since = None
                        log.debug("ssh.session_refused", host=self.name, in_use=self._slots.in_use, limit=limit)
                        await anyio.sleep(backoff)
                        backoff = min(backoff * 2, _REFUSAL_BACKOFF_MAX_S)
                        continue
                    # The pooled connection died under this call: that is a lost connection, not a refusal.
                    self._drop_if_closed()
                    if stale_retry and opening and anyio.current_time() - t0 < _STALE_S:
                        # It closed before the channel was even open (the server had already dropped it: sshd
                        # restarted, idle timeout): one retry on a fresh connection.
                        stale_retry = False
                        log.info("ssh.stale_connection", host=self.name, error=str(exc))
                        continue
                    raise ConnectionLost(self.name, f"{self.name}: the SSH connection was lost while opening a "
                                                    f"session ({exc}); nothing was started") from exc
        except BaseException:
            if held:
                self._slots.release(guard.generation if guard is not None else None)
            raise

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
        (never taking the last free channel slot, nor one a call is queueing for)."""
        pool = self._warm.setdefault(key, [])
        warming = self._warming.setdefault(key, set())
        while (len(pool) + len(warming) < self.settings.warm_sessions and self._slots.free > 1
               and not self._slots.queued):
            try:
                task = self._background.spawn(self._warm_one(key, factory))
            except RuntimeError:  # no running loop
                return
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
            with anyio.fail_after(_WARM_READY_S), self._awaiting():
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
            with self._awaiting():
                reader, writer = await conn.open_connection(host, port, encoding=None)
        except asyncssh.ChannelOpenError as exc:
            if exc.code == asyncssh.OPEN_CONNECT_FAILED and not conn.is_closed():
                raise ConnectionRefusedError(f"{host}:{port} on {self.name}: {exc.reason}") from exc
            if conn.is_closed():
                self._drop_if_closed()
                raise ConnectionLost(self.name, f"{self.name}: connection lost during tcp open ({exc})") from exc
            raise OSError(f"{host}:{port} on {self.name}: {exc.reason}") from exc
        except (asyncssh.Error, OSError) as exc:
            raise _translate(self.name, exc, "tcp open") from exc
        return _SshTcpStream(self, reader, writer)

    async def aclose(self) -> None:
        """Close the host: its background work (connect attempts, warm sessions being started, channels
        closing, liveness waits) is cancelled and awaited, ready warm sessions get EOF on their stdin, and the
        pooled connection is closed (up to 2 s for the goodbye to go out). No task the host started outlives
        this call. The host can be used again: the next call connects anew."""
        await self._background.aclose()  # first: no attempt may pool a connection after this
        for pool in self._warm.values():
            while pool:
                _retire(pool.pop()[1])
        conn, self._conn = self._conn, None
        if conn is not None:
            _set_linger(conn, discard=False)  # a goodbye: let the disconnect message go out
            conn.close()
            with anyio.move_on_after(2):
                await conn.wait_closed()
        await self._background.aclose()  # the warm sessions' closes, and what the closed connection ended


class _Client(asyncssh.SSHClient):
    """Tells its host when the TCP connection is made (the attempt's ``info``) and when asyncssh closes the
    connection, and why."""

    def __init__(self, host: SshHost, info: _AttemptInfo | None = None) -> None:
        self._host = host
        self._info = info

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        # asyncssh calls this from its protocol's connection_made: TCP is up, before the SSH version exchange
        if self._info is not None and self._info.tcp_at is None:
            self._info.tcp_at = asyncio.get_running_loop().time()

    def connection_lost(self, exc: Exception | None) -> None:
        self._host._connection_lost(exc)


def _set_linger(conn: asyncssh.SSHClientConnection, *, discard: bool) -> None:
    """``SO_LINGER`` on the connection's socket (socket(7)): with ``discard``, closing it drops unsent bytes and
    resets the connection, so nothing sent into a connection that was given up arrives later. No-op for a
    connection tunnelled through another (ProxyJump, ProxyCommand): that has no socket of its own here."""
    sock = conn.get_extra_info("socket")
    if sock is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1 if discard else 0, 0))


def _retire(proc: _SshProcess) -> None:
    """Let an unused warm session end: EOF on its stdin (its command exits, tidying up), then close."""
    if not proc.is_closed():
        proc._eof()
    with contextlib.suppress(RuntimeError):  # no running loop: the connection goes with it
        proc._host._background.spawn(proc.close())


class _Unconfirmed(Exception):
    """Internal: the exec request was sent and not answered (becomes :class:`ExecUnconfirmed`)."""


class _Abandoned(Exception):
    """Internal: the caller gave up before the session opened; it is closed without an exec request."""


class _OpenGuard:
    """How far one session open got: ``exec_sent`` once the server confirmed the session and the exec request
    went out (``on_open`` is called then); ``abandoned`` once the caller gave up before that (then none is ever
    sent)."""

    __slots__ = ("abandoned", "exec_sent", "generation", "on_open")

    def __init__(self, on_open: Callable[[], int]) -> None:
        self.exec_sent = False
        self.abandoned = False
        self.on_open = on_open
        self.generation: int | None = None  # set by on_open (see _ChannelSlots.confirmed)


class _GuardedProcess(asyncssh.SSHClientProcess[bytes]):
    """asyncssh's client process, told by the channel when the session opened (``connection_made``, which
    ``SSHClientChannel.create`` calls on the open confirmation and right before it sends the env and exec
    requests, with no await in between)."""

    def __init__(self, guard: _OpenGuard) -> None:
        super().__init__()
        self._guard = guard

    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:  # type: ignore[override]
        super().connection_made(chan)
        if self._guard.abandoned:
            chan.close()
            raise _Abandoned("the caller gave up before the session opened")  # no exec request is sent
        self._guard.exec_sent = True
        self._guard.generation = self._guard.on_open()


async def _open_process(conn: asyncssh.SSHClientConnection, command: str, env: dict[str, str],
                        guard: _OpenGuard, background: Background) -> asyncssh.SSHClientProcess[bytes]:
    """Open a session channel and exec ``command`` on it, so that the caller always knows whether the exec
    request went out.

    A caller cancelled before the server confirmed the session (its budget ran out, the connection stopped
    answering) returns at once; the open is marked abandoned, so if the confirmation still comes the channel is
    closed without an exec request: nothing runs. A caller cancelled after the exec request went out waits,
    shielded and for at most ``_OPEN_GRACE_S`` (a dead connection ends it sooner), for the answer: a process
    that started is handed back (the caller's cancellation is delivered at its next await, and it closes the
    process as usual); otherwise :class:`_Unconfirmed` is raised and a process that starts even later is closed.

    :raises _Unconfirmed: the exec request went out and was not answered (connection lost, no answer in time).
    :raises asyncssh.ChannelOpenError, asyncssh.Error, OSError: the session did not start (nothing runs).
    """
    env_: dict[bytes | str, bytes | str] = {k: v for k, v in env.items()}
    # owned by the host (a failure nobody awaits any more, after a cancelled caller, is retrieved there)
    task = background.spawn(conn.create_session(lambda: _GuardedProcess(guard), command, env=env_,
                                                encoding=None, term_modes=_SSH_NO_TTY_MODES))
    try:
        _, proc = await asyncio.shield(task)
        return cast(asyncssh.SSHClientProcess[bytes], proc)
    except asyncio.CancelledError:
        if not guard.exec_sent:
            guard.abandoned = True
            raise
        with anyio.CancelScope(shield=True), anyio.move_on_after(_OPEN_GRACE_S):
            await asyncio.wait({task})
        if task.done() and not task.cancelled():
            exc = task.exception()
            if exc is None:
                return cast(asyncssh.SSHClientProcess[bytes], task.result()[1])
            if _exec_refused(conn, exc):
                raise
            raise _Unconfirmed(str(exc) or type(exc).__name__) from exc
        task.add_done_callback(_close_orphan)
        raise _Unconfirmed(f"no answer to the exec request within {_OPEN_GRACE_S:g} s") from None
    except (asyncssh.Error, OSError) as exc:
        if guard.exec_sent and not _exec_refused(conn, exc):
            raise _Unconfirmed(str(exc) or type(exc).__name__) from exc
        raise


def _exec_refused(conn: asyncssh.SSHClientConnection, exc: BaseException) -> bool:
    """The server answered the exec request with a failure (nothing runs). asyncssh reports a request that a
    closing connection never answered the same way, so that counts only while the connection is open."""
    return (isinstance(exc, asyncssh.ChannelOpenError) and exc.code == asyncssh.OPEN_REQUEST_SESSION_FAILED
            and not conn.is_closed())


def _close_orphan(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is None:
        task.result()[1].close()


class _SshTcpStream(ByteStream):
    """anyio ByteStream over an asyncssh direct-tcpip channel (its waits count for the host's liveness)."""

    def __init__(self, host: SshHost, reader: asyncssh.SSHReader[bytes], writer: asyncssh.SSHWriter[bytes]) -> None:
        self._host = host
        self._reader = reader
        self._writer = writer

    async def receive(self, max_bytes: int = 65536) -> bytes:
        with self._host._awaiting():
            data = await self._reader.read(max_bytes)
        if not data:
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes) -> None:
        self._writer.write(item)
        with self._host._awaiting():
            await self._writer.drain()

    async def send_eof(self) -> None:
        self._writer.write_eof()

    async def aclose(self) -> None:
        self._writer.close()
