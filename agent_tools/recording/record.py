"""Recording at the two seams: hosts (:class:`RecordingHost`) and tools (:class:`RecordingToolkit`).

A :class:`Recorder` collects events with their time offsets (loop time, :func:`anyio.current_time`, from
:meth:`Recorder.start`); :meth:`Recorder.cassette` returns them redacted as a :class:`Cassette`.

* :class:`RecordingHost` wraps any :class:`~agent_tools.hosts.base.Host`: every ``start`` (command, env keys),
  stdin write, output chunk, end of stream, exit, ``open_tcp`` (connected / refused / error, bytes both ways)
  and error (translated kind and message) becomes an event of one interaction id.
* :class:`RecordingToolkit` is a :class:`~agent_tools.tools.toolkit.Toolkit` that records each tool call and
  its JSON result (what the agent saw), whether it came through ``dispatch(name, arguments)`` or a typed method
  (``tk.run_command(host=..., command=...)``, ``tk.restart_service(...)``): both write the same ``tool`` /
  ``tool_result`` events (a typed call's arguments are the ones it was given, by name). A call made while
  another tool call runs (``restart_service`` calling ``run_command``) is part of that call, not a new one.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

import anyio
from anyio.abc import ByteStream
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from ..clock import wall_time
from ..errors import AgentToolsError, HostError
from ..hosts.base import ExecResult, Host, HostProcess
from ..hosts.registry import HostRegistry
from ..outcomes import result_view
from ..tools.toolkit import Toolkit, ToolSpec
from .cassette import Cassette, data_fields

__all__ = ["TYPED_CALLS_HEADER", "Recorder", "RecordingHost", "RecordingHostRegistry", "RecordingToolkit",
           "error_fields", "wrap_typed_calls"]

#: header key saying typed-method tool calls were recorded as ``tool`` events too (cassettes recorded before
#: have only ``dispatch`` calls there, and a replay does not check typed calls against them)
TYPED_CALLS_HEADER = "typed_calls"

T = TypeVar("T")

#: set while a tool call is being recorded or checked: tool calls made inside it belong to it
_IN_TOOL_CALL: ContextVar[bool] = ContextVar("agent_tools_in_tool_call", default=False)


def error_fields(exc: BaseException) -> dict[str, Any]:
    """How an exception is written: ``error`` (class name), ``kind`` (agent_tools' kind) and ``message``."""
    fields: dict[str, Any] = {"error": type(exc).__name__}
    if isinstance(exc, AgentToolsError):
        fields["kind"] = exc.kind
        fields["message"] = exc.message
    else:
        fields["message"] = str(exc)
    return fields


class Recorder:
    """Collects cassette events with time offsets measured on the loop clock.

    :param name: the cassette's name (header ``name``).
    :param extra_patterns: more redaction regexes (see :func:`agent_tools.redact.redact`).
    :param header: extra header fields (JSON-ready), e.g. ``{"source": {...}}``.
    :param first_id: the first interaction id to hand out (appending to an existing cassette).
    """

    def __init__(self, name: str = "session", *, extra_patterns: Iterable[str] = (),
                 header: Mapping[str, Any] | None = None, first_id: int = 1, first_call: int = 1) -> None:
        self.name = name
        self.extra_patterns = tuple(extra_patterns)
        self.header = dict(header or {})
        self.events: list[dict[str, Any]] = []
        self._origin: float | None = None
        self._wall_start: float | None = None
        self._next_id = first_id
        self._next_call = first_call

    def start(self, origin: float | None = None, wall_start: float | None = None) -> None:
        """Fix time zero (default: now) unless already fixed. Called by the first event otherwise."""
        if self._origin is None:
            self._origin = anyio.current_time() if origin is None else origin
            self._wall_start = wall_time() if wall_start is None else wall_start

    def t(self) -> float:
        """Seconds since :meth:`start` (loop time), rounded to microseconds."""
        self.start()
        assert self._origin is not None
        return round(anyio.current_time() - self._origin, 6)

    def new_id(self) -> int:
        n = self._next_id
        self._next_id += 1
        return n

    def new_call(self) -> int:
        n = self._next_call
        self._next_call += 1
        return n

    def add(self, ev: str, id_: int | None = None, **fields: Any) -> None:
        """Append one event ``{"t", "ev", "id"?, **fields}``."""
        event: dict[str, Any] = {"t": self.t(), "ev": ev}
        if id_ is not None:
            event["id"] = id_
        event.update(fields)
        self.events.append(event)

    def cassette(self) -> Cassette:
        """The recorded events as a redacted :class:`Cassette`."""
        self.start()
        assert self._wall_start is not None
        cassette = Cassette.new(self.name, wall_start=self._wall_start, **self.header)
        cassette.events = list(self.events)
        return cassette.redacted(self.extra_patterns)


class _RecordingProcess:
    def __init__(self, inner: HostProcess, rec: Recorder, id_: int) -> None:
        self._inner = inner
        self._rec = rec
        self._id = id_
        self._eof: set[str] = set()
        self._closed = False

    async def _read(self, stream: str, max_bytes: int) -> bytes:
        fn = self._inner.read_stdout if stream == "stdout" else self._inner.read_stderr
        try:
            data = await fn(max_bytes)
        except (AgentToolsError, OSError) as exc:
            self._rec.add("error", self._id, op=f"read_{stream}", **error_fields(exc))
            raise
        if data:
            self._rec.add(stream, self._id, **data_fields(data))
        elif stream not in self._eof:
            self._eof.add(stream)
            self._rec.add("eof", self._id, stream=stream)
        return data

    async def read_stdout(self, max_bytes: int = 65536) -> bytes:
        return await self._read("stdout", max_bytes)

    async def read_stderr(self, max_bytes: int = 65536) -> bytes:
        return await self._read("stderr", max_bytes)

    async def write_stdin(self, data: bytes) -> None:
        self._rec.add("stdin", self._id, **data_fields(data))
        try:
            await self._inner.write_stdin(data)
        except (AgentToolsError, OSError) as exc:
            self._rec.add("error", self._id, op="write_stdin", **error_fields(exc))
            raise

    async def close_stdin(self) -> None:
        self._rec.add("stdin_eof", self._id)
        await self._inner.close_stdin()

    async def wait(self) -> ExecResult:
        try:
            res = await self._inner.wait()
        except (AgentToolsError, OSError) as exc:
            self._rec.add("error", self._id, op="wait", **error_fields(exc))
            raise
        self._rec.add("exit", self._id, status=res.exit_status, signal=res.signal)
        return res

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._rec.add("close", self._id)
        await self._inner.close()


class _RecordingTcpStream(ByteStream):
    def __init__(self, inner: ByteStream, rec: Recorder, id_: int) -> None:
        self._inner = inner
        self._rec = rec
        self._id = id_
        self._closed = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        try:
            data = await self._inner.receive(max_bytes)
        except anyio.EndOfStream:
            self._rec.add("recv_eof", self._id)
            raise
        except (AgentToolsError, OSError, anyio.BrokenResourceError) as exc:
            self._rec.add("error", self._id, op="receive", **error_fields(exc))
            raise
        self._rec.add("recv", self._id, **data_fields(data))
        return data

    async def send(self, item: bytes) -> None:
        self._rec.add("send", self._id, **data_fields(item))
        try:
            await self._inner.send(item)
        except (AgentToolsError, OSError, anyio.BrokenResourceError) as exc:
            self._rec.add("error", self._id, op="send", **error_fields(exc))
            raise

    async def send_eof(self) -> None:
        self._rec.add("send_eof", self._id)
        await self._inner.send_eof()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._rec.add("close", self._id)
        await self._inner.aclose()


class RecordingHost:
    """A :class:`~agent_tools.hosts.base.Host` that records everything passing through ``inner``.

    :param inner: the real host (local, SSH, embedded, ...). Its ``name`` is used.
    :param recorder: where events go.
    """

    def __init__(self, inner: Host, recorder: Recorder) -> None:
        self.inner = inner
        self.recorder = recorder
        self.name = inner.name

    def __repr__(self) -> str:
        return f"RecordingHost({self.inner!r})"

    async def start(self, command: str, *, env: Mapping[str, str] | None = None) -> HostProcess:
        rec = self.recorder
        id_ = rec.new_id()
        rec.add("exec", id_, host=self.name, command=command, env=sorted(env or {}))
        try:
            proc = await self.inner.start(command, env=env)
        except anyio.get_cancelled_exc_class():
            rec.add("cancelled", id_)
            raise
        except (AgentToolsError, OSError) as exc:
            rec.add("exec_error", id_, **error_fields(exc))
            raise
        return _RecordingProcess(proc, rec, id_)

    async def open_tcp(self, host: str, port: int) -> ByteStream:
        rec = self.recorder
        id_ = rec.new_id()
        rec.add("tcp", id_, host=self.name, target=host, port=port)
        try:
            stream = await self.inner.open_tcp(host, port)
        except anyio.get_cancelled_exc_class():
            rec.add("cancelled", id_)
            raise
        except ConnectionRefusedError as exc:
            rec.add("tcp_refused", id_, message=str(exc))
            raise
        except (HostError, OSError) as exc:
            rec.add("tcp_error", id_, **error_fields(exc))
            raise
        rec.add("connected", id_)
        return _RecordingTcpStream(stream, rec, id_)

    async def aclose(self) -> None:
        await self.inner.aclose()


class RecordingHostRegistry(HostRegistry):
    """A :class:`HostRegistry` handing out :class:`RecordingHost` wrappers of ``inner``'s hosts.

    ``inner`` may be bound later (:meth:`bind`), e.g. once a test's host factory has started. Closing this
    registry does not close ``inner`` (it belongs to whoever made it).
    """

    def __init__(self, inner: HostRegistry | None, recorder: Recorder) -> None:
        super().__init__()
        self.inner = inner
        self.recorder = recorder

    def bind(self, inner: HostRegistry) -> None:
        self.inner = inner
        self._hosts.clear()

    def get(self, alias: str) -> Host:
        host = self._hosts.get(alias)
        if host is not None:
            return host
        if self.inner is None:
            raise RuntimeError("RecordingHostRegistry: no inner registry bound yet")
        host = RecordingHost(self.inner.get(alias), self.recorder)
        self._hosts[alias] = host
        return host

    def for_job(self, alias: str, remembered: dict[str, Any] | None) -> tuple[Host, str | None]:
        """Jobs are followed on this registry's own hosts (recorded or replayed), whatever config they used."""
        return self.get(alias), None

    async def aclose(self) -> None:
        return None


def _arguments_dict(arguments: str | dict[str, Any] | None) -> dict[str, Any]:
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            loaded = json.loads(arguments)
        except json.JSONDecodeError:
            return {"_raw": arguments}
        return loaded if isinstance(loaded, dict) else {"_raw": arguments}
    return dict(arguments)


def wrap_typed_calls(tk: Toolkit, spec: ToolSpec, call: Callable[[str, dict[str, Any], Callable[[], Awaitable[T]]],
                                                               Awaitable[T]]) -> None:
    """Route the typed method of tool ``spec`` on ``tk`` (``tk.run_command(...)``, ``tk.restart_service(...)``)
    through ``call(name, arguments, proceed)``, as :meth:`Toolkit.dispatch` calls are routed by the recording and
    replaying toolkits. ``arguments`` are the ones given, by name (JSON-ready); ``proceed()`` makes the call.
    A call made while another tool call is routed (a tool using another tool) goes straight through."""
    original = getattr(tk, spec.name)
    try:
        signature: inspect.Signature | None = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None

    @functools.wraps(original)
    async def typed(*args: Any, **kwargs: Any) -> Any:
        if _IN_TOOL_CALL.get():
            return await original(*args, **kwargs)
        given = signature.bind_partial(*args, **kwargs).arguments if signature is not None else kwargs
        return await call(spec.name, to_jsonable_python(dict(given), fallback=repr),
                          lambda: original(*args, **kwargs))

    setattr(tk, spec.name, typed)


def result_json(result: BaseModel | dict[str, Any]) -> dict[str, Any]:
    """A tool result as JSON, as the model reads it: a dispatch dict as it is, a typed call's model as the same
    compact view (:func:`agent_tools.outcomes.result_view`), so that both are recorded and checked alike."""
    return result if isinstance(result, dict) else result_view(result)


class RecordingToolkit(Toolkit):
    """A :class:`Toolkit` that records each tool call (tool name, arguments, JSON result), made through
    :meth:`dispatch` or a typed method (see the module docstring).

    :param recorder: where events go; every other argument is :class:`Toolkit`'s.
    """

    def __init__(self, hosts: HostRegistry | None = None, *, recorder: Recorder, **kwargs: Any) -> None:
        self.recorder = recorder
        super().__init__(hosts, **kwargs)
        recorder.header.setdefault(TYPED_CALLS_HEADER, True)

    def register(self, spec: ToolSpec, handler: Callable[..., Awaitable[BaseModel]]) -> None:
        super().register(spec, handler)
        wrap_typed_calls(self, spec, self._record)

    async def _record(self, name: str, arguments: dict[str, Any], proceed: Callable[[], Awaitable[T]]) -> T:
        call = self.recorder.new_call()
        self.recorder.add("tool", call=call, name=name, arguments=arguments)
        token = _IN_TOOL_CALL.set(True)
        try:
            result = await proceed()
        finally:
            _IN_TOOL_CALL.reset(token)
        self.recorder.add("tool_result", call=call, name=name, result=result_json(result))  # type: ignore[arg-type]
        return result

    async def dispatch(self, name: str, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
        if _IN_TOOL_CALL.get():
            return await super().dispatch(name, arguments)
        return await self._record(name, _arguments_dict(arguments), lambda: super(RecordingToolkit, self).dispatch(
            name, arguments))
