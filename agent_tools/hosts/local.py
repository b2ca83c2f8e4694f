"""``LocalHost``: this machine, through anyio subprocesses.

Every process is reaped before its ``close()`` returns: asyncio's subprocess transport must be closed and the
child's exit seen while the event loop still runs, or the interpreter prints ``Loop <...> that handles pid N
is closed`` and ``RuntimeError: Event loop is closed`` at exit (the child watcher and the transport's
``__del__`` call into the closed loop) — in a CLI ``cancel``, or a script whose detached jobs it never followed.
"""

from __future__ import annotations

import os
import signal as _signal
import subprocess
from collections.abc import Mapping

import anyio
import structlog
from anyio.abc import ByteStream, Process

from .base import ExecResult, HostProcess

log = structlog.get_logger(__name__)

__all__ = ["LocalHost"]

#: longest ``close()`` waits for the process to exit once its pipes are closed (the job launcher exits at
#: once on EOF, a status script when it has printed its report); one still running then is killed (seconds)
CLOSE_GRACE_S = 5.0


class _LocalProcess(HostProcess):
    def __init__(self, proc: Process) -> None:
        self._proc = proc

    async def _read(self, stream: anyio.abc.ByteReceiveStream | None, max_bytes: int) -> bytes:
        if stream is None:
            return b""
        try:
            return await stream.receive(max_bytes)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return b""

    async def read_stdout(self, max_bytes: int = 65536) -> bytes:
        return await self._read(self._proc.stdout, max_bytes)

    async def read_stderr(self, max_bytes: int = 65536) -> bytes:
        return await self._read(self._proc.stderr, max_bytes)

    async def write_stdin(self, data: bytes) -> None:
        if self._proc.stdin is None:
            return
        try:
            await self._proc.stdin.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError) as exc:
            # the command closed its stdin or ended without reading it all (a script that failed first): not a
            # lost connection; its exit status says what happened (as over SSH, where the data is dropped)
            log.debug("local.stdin_not_read", error=repr(exc))

    async def close_stdin(self) -> None:
        if self._proc.stdin is not None:
            try:
                await self._proc.stdin.aclose()
            except (anyio.BrokenResourceError, BrokenPipeError):
                pass

    async def wait(self) -> ExecResult:
        rc = await self._proc.wait()
        if rc < 0:
            try:
                name = _signal.Signals(-rc).name.removeprefix("SIG")
            except ValueError:
                name = str(-rc)
            return ExecResult(None, name)
        return ExecResult(rc)

    async def close(self) -> None:
        """Close our ends of the pipes and reap the process (see the module docstring).

        The process is not signalled (as with an SSH channel close: a writer gets SIGPIPE) unless it is still
        running :data:`CLOSE_GRACE_S` seconds later; then it alone is killed — a job's monitor and command run
        in a session of their own and are never touched. Runs to the end even when the caller is cancelled.
        """
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(CLOSE_GRACE_S):
                try:
                    await self._proc.aclose()  # closes the pipe transports, then waits for the exit
                except (anyio.BrokenResourceError, BrokenPipeError, OSError):
                    pass
            if self._proc.returncode is None:  # the grace ran out: anyio's aclose killed it; reap it
                with anyio.move_on_after(CLOSE_GRACE_S):
                    await self._proc.wait()


class LocalHost:
    """This machine. Each command runs as ``/bin/sh -c COMMAND`` in its own session (``setsid``), so a
    signal to the caller's process group never reaches it and its whole process group can be killed.

    :param name: the alias jobs are filed under (default ``local``).
    """

    def __init__(self, name: str = "local") -> None:
        self.name = name

    async def start(self, command: str, *, env: Mapping[str, str] | None = None) -> HostProcess:
        full_env = None
        if env:
            full_env = dict(os.environ)
            full_env.update(env)
        proc = await anyio.open_process(
            ["/bin/sh", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            start_new_session=True,
        )
        return _LocalProcess(proc)

    async def open_tcp(self, host: str, port: int) -> ByteStream:
        """A TCP connection from this machine. :raises ConnectionRefusedError: every address refused (anyio
        says ``All connection attempts failed`` and chains the errors); :raises OSError: other failures."""
        try:
            return await anyio.connect_tcp(host, port)
        except OSError as exc:
            causes = exc.__cause__.exceptions if isinstance(exc.__cause__, ExceptionGroup) else [exc.__cause__]
            if not isinstance(exc, ConnectionRefusedError) and causes and all(
                    isinstance(c, ConnectionRefusedError) for c in causes):
                raise ConnectionRefusedError(f"connection to {host}:{port} refused") from exc
            raise

    async def aclose(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"LocalHost(name={self.name!r})"
