"""``FunctionHost``: a host whose commands are answered by a Python function (for tests and examples).

Like httpx's ``MockTransport``: pass a handler instead of patching anything. The handler receives the command
string and the stdin bytes written so far, and returns an :class:`~agent_tools.hosts.ExecResult`; ``calls``
records every command started.

Example::

    def handler(command: str, stdin: bytes) -> ExecResult:
        return ExecResult(0, stdout=b"ok\n") if command == "echo ok" else ExecResult(127, stderr=b"not found\n")

    host = FunctionHost(handler, name="gpu-node-1")
    tk = Toolkit(HostRegistry({"gpu-node-1": host}), journal=Journal(tmp_path / "journal.sqlite3"))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from anyio.abc import ByteStream

from ..hosts.base import ExecResult, HostProcess

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
    """A fake :class:`~agent_tools.hosts.Host`: ``handler(command, stdin) -> ExecResult`` answers every command.

    :param handler: called once per command, at the first read or wait, with the command string (as the tools
        built it, ``env`` not applied) and the stdin bytes written before that; sync or async. Its
        :class:`~agent_tools.hosts.ExecResult` gives the exit status (or signal) and the whole stdout/stderr
        as bytes. An exception it raises reaches the caller of that read or wait unchanged.
    :param name: the host alias (default ``fake``).
    :ivar calls: every command string started, in order.

    ``open_tcp`` raises :class:`ConnectionRefusedError` (no network); ``aclose`` does nothing.
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
