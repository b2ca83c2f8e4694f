"""The ``Host`` seam: how bytes reach a machine.

Every layer above talks to a :class:`Host`; tests swap in a real sshd, the in-process asyncssh server,
a :class:`~agent_tools.testing.FunctionHost` or a replayed cassette without monkeypatching anything
(the same idea as httpx's ``BaseTransport``).

A host runs a *command string* through a POSIX shell and exposes its stdin/stdout/stderr as byte streams.
Implementations translate their backend's exceptions into :mod:`agent_tools.errors` at this seam.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import anyio
from anyio.abc import ByteStream

from ..errors import HostError

__all__ = ["ConnectProgress", "ExecResult", "Host", "HostProcess", "run_on"]


@dataclass(frozen=True)
class ExecResult:
    """The result of a command run to completion.

    :param exit_status: the exit status, or None when the process died by a signal or the connection
        dropped before the status arrived (never treat None as success).
    :param signal: the signal name (``TERM``) when the process died by one, else None.
    :param stdout: raw stdout bytes.
    :param stderr: raw stderr bytes.
    """

    exit_status: int | None
    signal: str | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    extra: dict[str, str] = field(default_factory=dict)


class HostProcess(Protocol):
    """A running command on a host (one SSH session channel, or one local subprocess)."""

    async def read_stdout(self, max_bytes: int = 65536) -> bytes:
        """Return the next chunk of stdout (at most ``max_bytes``), or ``b""`` at end of stream.

        :raises ConnectionLost: the transport dropped.
        """
        ...

    async def read_stderr(self, max_bytes: int = 65536) -> bytes:
        """Return the next chunk of stderr, or ``b""`` at end of stream."""
        ...

    async def write_stdin(self, data: bytes) -> None:
        """Write ``data`` to the command's stdin."""
        ...

    async def close_stdin(self) -> None:
        """Send end-of-file on stdin."""
        ...

    async def wait(self) -> ExecResult:
        """Wait for the command to exit; returns exit status / signal (stdout/stderr are not collected
        here: read them with :meth:`read_stdout`/:meth:`read_stderr`).

        :raises ConnectionLost: the transport dropped before the exit status arrived.
        """
        ...

    async def close(self) -> None:
        """Stop talking to the command without signalling it: close the channel / pipes.

        A command that ignores its stdin and writes to files keeps running (OpenSSH sends no signal to a
        non-PTY session on channel close).
        """
        ...


@dataclass(frozen=True)
class ConnectProgress:
    """How far the connect attempts under way have come (:meth:`~agent_tools.hosts.ssh.SshHost.connect_progress`).

    :param waited_s: seconds since the oldest attempt under way started (loop clock): how long the host has
        been asked.
    :param tcp_s: seconds into an attempt at which its TCP connection to the target was made (the host
        answered: asyncssh's ``SSHClient.connection_made`` runs then, before the version exchange, key exchange
        and login), or None while no attempt under way made one (resolving the config, ProxyJump hops, SYNs
        unanswered).
    :param unanswered: the host is known not to answer (its last connection died unanswered, or an earlier
        attempt timed out).
    :param last_connect_s: how long the last successful connect took, or None if none did yet.
    """

    waited_s: float
    tcp_s: float | None
    unanswered: bool
    last_connect_s: float | None


@runtime_checkable
class Host(Protocol):
    """A machine commands run on.

    ``name`` is the alias the caller used (``local``, ``gpu-node-1``); it is what jobs are filed under.
    """

    name: str

    async def start(self, command: str, *, env: Mapping[str, str] | None = None) -> HostProcess:
        """Start ``command`` (a shell command string run by ``/bin/sh -c`` semantics on the host).

        :param command: the command line.
        :param env: extra environment variables (may be ignored by hosts that cannot set them; the job
            launcher exports its own, so correctness never depends on this).
        :raises HostUnreachable, AuthenticationFailed, HostKeyError: connecting failed.
        :raises ChannelOpenFailed: the host refused a new session.
        """
        ...

    async def open_tcp(self, host: str, port: int) -> ByteStream:
        """Open a TCP connection *from the host* to ``host:port`` (SSH ``direct-tcpip`` for remote hosts).

        Used by HTTP and port probes: services usually bind 127.0.0.1 on the machine they run on.

        :raises ConnectionRefusedError: nothing listens there (a probe's "not yet").
        :raises OSError: other connection failures.
        """
        ...

    async def aclose(self) -> None:
        """Close connections held by this host object; running jobs on the host are not affected."""
        ...


async def run_on(
    host: Host,
    command: str,
    *,
    stdin: bytes | None = None,
    max_output_bytes: int = 64 * 1024 * 1024,
) -> ExecResult:
    """Run ``command`` on ``host`` to completion and collect its output.

    No deadline is applied here: wrap the call in :func:`anyio.fail_after` (the scope covers connect,
    channel open and exec together, which asyncssh's own ``timeout=`` does not).

    :param stdin: bytes written to the command's stdin before EOF (None: EOF at once).
    :param max_output_bytes: stop keeping bytes of a stream past this size (the rest is read and dropped).
    :raises HostError: see :meth:`Host.start`; :class:`ConnectionLost` if the transport drops.
    """
    proc = await host.start(command)
    out = bytearray()
    err = bytearray()

    async def pump(read: Callable[[], Awaitable[bytes]], buf: bytearray) -> None:
        while True:
            chunk = await read()
            if not chunk:
                return
            if len(buf) < max_output_bytes:
                buf.extend(chunk[: max_output_bytes - len(buf)])

    write_error: HostError | None = None
    try:
        if stdin:
            try:
                await proc.write_stdin(stdin)
            except HostError as exc:
                # a command that ends without reading all of its input (it failed first: "permission denied")
                # closes the channel under the write; its exit status and output still say what happened
                write_error = exc
        if write_error is None:
            await proc.close_stdin()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(pump, proc.read_stdout, out)
                tg.start_soon(pump, proc.read_stderr, err)
            result = await proc.wait()
        except HostError:
            if write_error is not None:
                raise write_error from None  # the transport dropped: the write's error says so first
            raise
    finally:
        with anyio.CancelScope(shield=True):
            await proc.close()
    return ExecResult(result.exit_status, result.signal, bytes(out), bytes(err))
