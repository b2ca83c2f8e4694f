"""``FunctionHost``: a host whose commands are answered by a Python function (for tests and examples).

Like httpx's ``MockTransport``: pass a handler instead of patching anything. The handler receives the command
string (and stdin bytes) and returns an :class:`ExecResult`; ``calls`` records every command started.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from anyio.abc import ByteStream

from .base import ExecResult, HostProcess

__all__ = ["FunctionHost"]

Handler = Callable[[str, bytes], ExecResult | Awaitable[ExecResult]]


class _FnProcess(HostProcess):
    def __init__(self, handler: Handler, command: str) -> None:
        self._handler = handler
        self._command = command
        self._stdin = bytearray()
        self._result: ExecResult | None = None
        self._out = 0
        self._err = 0

    async def _run(self) -> ExecResult:
        if self._result is None:
            res = self._handler(self._command, bytes(self._stdin))
            self._result = res if isinstance(res, ExecResult) else await res
        return self._result

    async def read_stdout(self, max_bytes: int = 65536) -> bytes:
        res = await self._run()
        chunk = res.stdout[self._out:self._out + max_bytes]
        self._out += len(chunk)
        return chunk

    async def read_stderr(self, max_bytes: int = 65536) -> bytes:
        res = await self._run()
        chunk = res.stderr[self._err:self._err + max_bytes]
        self._err += len(chunk)
        return chunk

    async def write_stdin(self, data: bytes) -> None:
        self._stdin.extend(data)

    async def close_stdin(self) -> None:
        return None

    async def wait(self) -> ExecResult:
        res = await self._run()
        return ExecResult(res.exit_status, res.signal)

    async def close(self) -> None:
        return None


class FunctionHost:
    """A fake host: ``handler(command, stdin) -> ExecResult`` (sync or async) answers every command.

    :param name: the alias (default ``fake``).
    :ivar calls: every command string started, in order.
    """

    def __init__(self, handler: Handler, name: str = "fake") -> None:
        self.name = name
        self._handler = handler
        self.calls: list[str] = []

    async def start(self, command: str, *, env: Mapping[str, str] | None = None) -> HostProcess:
        self.calls.append(command)
        return _FnProcess(self._handler, command)

    async def open_tcp(self, host: str, port: int) -> ByteStream:
        raise ConnectionRefusedError(f"{host}:{port}: FunctionHost has no network")

    async def aclose(self) -> None:
        return None
