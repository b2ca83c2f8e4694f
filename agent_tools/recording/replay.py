"""Replaying a cassette: :class:`ReplayHost` serves recorded host interactions, :class:`ReplayToolkit` checks
the tool calls against the recorded ones.

Matching. Each ``start(command)`` is matched against the recorded exec interactions not used yet, in recorded
order; the first that the matcher accepts is served (default :func:`default_matcher`: same host, and the same
command text once redacted, with job/backup/approval ids paired up by :class:`~.ids.IdMap` and the text of
agent_tools' own job scripts left out; :func:`strict_matcher` compares that text too). ``open_tcp``
matches host, target and port. Outputs are served with recorded ids replaced by the new ids.

Timing. A :class:`ReplaySession` has a time origin (:meth:`ReplaySession.start`). A request that arrives
earlier than it was recorded waits (on the loop clock) until its recorded offset, and each chunk, end of
stream, exit or refusal comes at its recorded offset from the start of its interaction; a read that the
recording never saw answered waits forever (the caller's budget or deadline ends it, as it did when
recording). On a :class:`~.vclock.VirtualClockLoop` none of this waits in real time, so budgets, detach
points and probe sequences come out as recorded.

Failures are loud: an unmatched request, a stdin write or TCP send that differs from the recording, a tool
call or result that differs, and (from :meth:`ReplaySession.assert_all_used`) recorded interactions left
unused all raise :class:`~agent_tools.errors.ReplayError` with a diff; the first one is also kept
(:attr:`ReplaySession.failures`) because the layers above turn errors into ``error`` outcomes.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import shlex
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from anyio.abc import ByteStream
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.errors import PydanticSchemaGenerationError

from .. import errors as _errors
from ..errors import AgentToolsError, HostError, ReplayError
from ..hosts.base import ExecResult, Host, HostProcess
from ..hosts.registry import HostRegistry
from ..outcomes import ErrorOutcome, result_view
from ..redact import MARK, redact, redact_obj
from ..tools.toolkit import Toolkit, ToolSpec
from .cassette import Cassette, ToolCall, blob_words, event_data, mask_secrets, redact_command
from .ids import IdMap, normalise_ids
from .record import _IN_TOOL_CALL, TYPED_CALLS_HEADER, _arguments_dict, result_json, wrap_typed_calls

__all__ = ["ExecRequest", "Matcher", "ReplayHost", "ReplayHostRegistry", "ReplaySession", "ReplayToolkit",
           "abstract_scripts", "default_matcher", "strict_matcher"]

T = TypeVar("T")

#: result keys whose values depend on timing overheads, not on what happened (left out of comparisons)
VOLATILE_KEYS = frozenset({"elapsed_s", "duration_s", "created_at", "expires_s", "finished_at"})


@dataclass(frozen=True)
class ExecRequest:
    """An exec request: the host's name and the command text (redacted, as recorded)."""

    host: str
    command: str


#: ``matcher(recorded, request, ids)`` → id bindings (recorded id → new id) when they match, else None
Matcher = Callable[[ExecRequest, ExecRequest, IdMap], "dict[str, str] | None"]


_SCRIPT = "@{agent_tools script}"


@functools.lru_cache(maxsize=4096)
def abstract_scripts(command: str) -> str:
    """``command`` with agent_tools' own job scripts (long shell words speaking the ``@@AT`` wire format, see
    :mod:`agent_tools.jobs.scripts`) replaced by ``@{agent_tools script}``; their arguments stay."""
    for _ref, word in blob_words(command):
        if "@@AT" in word:
            command = command.replace(shlex.quote(word), _SCRIPT)
    return command


def default_matcher(recorded: ExecRequest, request: ExecRequest, ids: IdMap) -> dict[str, str] | None:
    """Same host, and the same command once per-run ids are paired (see :class:`~.ids.IdMap`), with the text
    of agent_tools' own job scripts left out (:func:`abstract_scripts`): the scripts are agent_tools' transport,
    and a changed script that keeps the wire format still replays (one that changes it fails on the replayed
    output). The job's arguments — the user's command, job id, cwd, byte budgets — are compared exactly."""
    if recorded.host != request.host:
        return None
    return ids.pair(abstract_scripts(recorded.command), abstract_scripts(request.command))


def strict_matcher(recorded: ExecRequest, request: ExecRequest, ids: IdMap) -> dict[str, str] | None:
    """Same host and the same full command text (scripts included), ids paired."""
    if recorded.host != request.host:
        return None
    return ids.pair(recorded.command, request.command)


def _quick_key(matcher: Matcher) -> Callable[[str], str] | None:
    """A key that must be equal for ``matcher`` to match (a cheap pre-check), when known."""
    if matcher is default_matcher:
        return lambda c: normalise_ids(abstract_scripts(c))
    if matcher is strict_matcher:
        return normalise_ids
    return None


@dataclass
class _Interaction:
    id: int
    kind: str
    host: str
    t: float
    line: int
    command: str = ""
    target: str = ""
    port: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    used: bool = False
    norm: str = ""  # the command with ids normalised (a cheap pre-check for the default matcher)

    def describe(self, width: int = 160) -> str:
        what = (f"command {normalise_ids(abstract_scripts(self.command))}" if self.kind == "exec"
                else f"tcp to {self.target}:{self.port}")
        if len(what) > width:
            what = what[: width - 20] + " … " + what[-15:]
        return f"#{self.id} (line {self.line}, t={self.t:.3f} s) on {self.host}: {what}"


def _rebuild_error(ev: Mapping[str, Any], host: str) -> BaseException:
    """The exception a recorded ``error``/``exec_error``/``tcp_error`` event stands for."""
    name = str(ev.get("error", "OSError"))
    message = str(ev.get("message", ""))
    cls = getattr(_errors, name, None)
    if isinstance(cls, type) and issubclass(cls, HostError):
        return cls(host, message)
    if isinstance(cls, type) and issubclass(cls, AgentToolsError) and cls not in (_errors.JobError,
                                                                                  _errors.JobNotFound,
                                                                                  _errors.PolicyFileError):
        return cls(message)
    builtin = {"ConnectionRefusedError": ConnectionRefusedError, "ConnectionResetError": ConnectionResetError,
               "BrokenPipeError": BrokenPipeError, "TimeoutError": TimeoutError}.get(name)
    if builtin is not None:
        return builtin(message)
    if name == "BrokenResourceError":
        return anyio.BrokenResourceError(message)
    return OSError(f"{name}: {message}")


def _token_diff(recorded: str, request: str) -> str:
    a = re.split(r"(?<=\s)|(?<=;)", normalise_ids(recorded))
    b = re.split(r"(?<=\s)|(?<=;)", normalise_ids(request))
    lines = list(difflib.unified_diff([x.rstrip() for x in a if x.strip()], [x.rstrip() for x in b if x.strip()],
                                      "recorded", "request", n=2, lineterm=""))
    if len(lines) > 40:
        lines = [*lines[:40], f"… ({len(lines) - 40} more diff lines)"]
    return "\n".join("    " + ln for ln in lines)


_MASK_RE = re.compile(r"\[REDACTED\]\*+")
#: how a secret reads in a replayed stream: the cassette's length-preserving mask (see .cassette.mask_secrets)
_STREAM_MASK = r"(?:\[REDACTED\]\**|\*+)"


#: secrets closer than this in a stream are masked as one run, the text between them too (.cassette.mask_secrets)
_MERGED_GAP = 8


@functools.lru_cache(maxsize=1024)
def _masked_form(recorded: str) -> re.Pattern[str]:
    """A pattern of ``recorded`` (a string of a recorded result) with each ``[REDACTED]`` standing for the mask a
    replayed stream has in its place; markers fewer than 8 characters apart may be one mask there, the text
    between them included."""
    parts = recorded.split(MARK)
    out = [re.escape(parts[0])]
    for i, part in enumerate(parts[1:], start=1):
        if i < len(parts) - 1 and len(part) < _MERGED_GAP:  # another marker follows closely: maybe one mask
            out.append(f"{_STREAM_MASK}(?:{re.escape(part)})??")
        else:
            out.append(_STREAM_MASK + re.escape(part))
    return re.compile("".join(out), re.DOTALL)


def _same_but_masks(replayed: str, recorded: str) -> bool:
    """Whether ``replayed`` is ``recorded`` where each ``[REDACTED]`` of the recording reads as the stream's mask
    (a secret of the recorded output is stored masked, length-preserving: the replay builds its result from the
    mask, the live run showed the marker)."""
    return replayed == recorded or (MARK in recorded and _masked_form(recorded).fullmatch(replayed) is not None)


def _equal(got: Any, want: Any) -> bool:
    """``got == want`` for JSON results, volatile timing keys aside, a recorded ``[REDACTED]`` matching the
    stream's mask."""
    if isinstance(got, dict) and isinstance(want, dict):
        keys = got.keys() - VOLATILE_KEYS
        return keys == want.keys() - VOLATILE_KEYS and all(_equal(got[k], want[k]) for k in keys)
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(_equal(a, b) for a, b in zip(got, want, strict=True))
    if isinstance(got, str) and isinstance(want, str):
        return _same_but_masks(got, want) or _comparable(got) == _comparable(want)
    return bool(got == want)


def _comparable(obj: Any) -> Any:
    if isinstance(obj, str):  # a length-preserving mask (recorded stream) reads as the plain marker
        return _MASK_RE.sub("[REDACTED]", obj)
    if isinstance(obj, dict):
        return {k: _comparable(v) for k, v in obj.items() if k not in VOLATILE_KEYS}
    if isinstance(obj, list):
        return [_comparable(v) for v in obj]
    return obj


class ReplaySession:
    """Replay state shared by every :class:`ReplayHost` of one cassette: unused interactions, id pairs, the
    time origin, failures, and the position in the recorded tool calls.

    :param cassette: the recording.
    :param matcher: see :data:`Matcher` (default :func:`default_matcher`).
    :param extra_patterns: the redaction patterns used when recording (requests are redacted the same way).
    :param fallback: where unmatched requests go instead of failing (``new_episodes`` recording), or None.
    """

    def __init__(self, cassette: Cassette, *, matcher: Matcher = default_matcher,
                 extra_patterns: Iterable[str] = (), fallback: HostRegistry | None = None) -> None:
        self.cassette = cassette
        self.matcher = matcher
        self.extra_patterns = tuple(extra_patterns)
        self.fallback = fallback
        self.ids = IdMap()
        self.failures: list[ReplayError] = []
        self.tool_calls: list[ToolCall] = cassette.tool_calls()
        self.tool_position = 0
        self.fallback_requests = 0
        self._origin: float | None = None
        self._requests = 0
        by_id: dict[int, _Interaction] = {}
        for ev in cassette.events:
            kind = ev.get("ev")
            if kind in ("exec", "tcp"):
                inter = _Interaction(int(ev["id"]), str(kind), str(ev["host"]), float(ev["t"]), int(ev.get("_line", 0)),
                                     command=str(ev.get("command", "")), target=str(ev.get("target", "")),
                                     port=int(ev.get("port", 0)))
                by_id[inter.id] = inter
            elif "id" in ev and int(ev["id"]) in by_id:
                by_id[int(ev["id"])].events.append(ev)
        self.interactions = list(by_id.values())
        self._key = _quick_key(matcher)
        for inter in self.interactions:
            if self._key is not None and inter.kind == "exec":
                inter.norm = self._key(inter.command)

    # ------------------------------------------------------------------ time
    def start(self) -> None:
        """Fix the replay's time zero (default: at the first request)."""
        if self._origin is None:
            self._origin = anyio.current_time()

    @property
    def origin(self) -> float:
        self.start()
        assert self._origin is not None
        return self._origin

    async def wait_until(self, t: float) -> None:
        """Sleep (loop clock) until ``t`` seconds after the origin, if that is still ahead."""
        delay = self.origin + t - anyio.current_time()
        if delay > 0:
            await anyio.sleep(delay)

    # ------------------------------------------------------------------ failures
    def fail(self, message: str) -> ReplayError:
        """Record a failure and return it (for ``raise``)."""
        err = ReplayError(f"cassette {self.cassette.name!r}: {message}")
        self.failures.append(err)
        return err

    def check(self) -> None:
        """:raises ReplayError: the first failure seen so far, if any."""
        if self.failures:
            raise self.failures[0]

    def assert_all_used(self) -> None:
        """:raises ReplayError: an earlier failure, or recorded interactions / tool calls never replayed."""
        self.check()
        unused = [i for i in self.interactions if not i.used]
        problems = []
        if unused:
            lines = [f"  {i.describe()}" for i in unused[:10]]
            if len(unused) > 10:
                lines.append(f"  … and {len(unused) - 10} more")
            problems.append(f"{len(unused)} recorded interaction(s) were never requested:\n" + "\n".join(lines))
        if self.tool_calls and self.tool_position < len(self.tool_calls):
            rest = self.tool_calls[self.tool_position:]
            problems.append(f"{len(rest)} recorded tool call(s) were never made, from #{rest[0].call} "
                            f"{rest[0].name}({json.dumps(rest[0].arguments)[:200]})")
        if problems:
            raise ReplayError(f"cassette {self.cassette.name!r}: " + "\n".join(problems))

    # ------------------------------------------------------------------ matching
    def match_exec(self, host: str, command: str) -> _Interaction | None:
        """The first unused recorded exec interaction matching; None when a fallback should serve it.

        :raises ReplayError: nothing matches (and no fallback).
        """
        self.start()
        self._requests += 1
        request = ExecRequest(host, redact_command(command, self.extra_patterns))
        quick = self._key(request.command) if self._key is not None else None
        for inter in self.interactions:
            if inter.used or inter.kind != "exec" or (quick is not None and inter.norm != quick):
                continue
            bindings = self.matcher(ExecRequest(inter.host, inter.command), request, self.ids)
            if bindings is not None:
                self.ids.bind(bindings)
                inter.used = True
                return inter
        if self.fallback is not None:
            return None
        raise self.fail(self._unmatched_message(request))

    def _unmatched_message(self, request: ExecRequest) -> str:
        at = anyio.current_time() - self.origin
        msg = (f"unmatched exec request #{self._requests} on {request.host} at t={at:.3f} s (no unused recorded "
               f"interaction matches):\n    {normalise_ids(abstract_scripts(request.command))[:300]}")
        candidates = [i for i in self.interactions if not i.used and i.kind == "exec"]
        if not candidates:
            return msg + "\nevery recorded exec interaction was already used"
        shown: Callable[[str], str] = abstract_scripts if self.matcher is default_matcher else str
        req = normalise_ids(shown(request.command))
        best = max(candidates[:200], key=lambda i: (i.host == request.host,
                                                    difflib.SequenceMatcher(None, normalise_ids(shown(i.command)),
                                                                            req, autojunk=False).quick_ratio()))
        return (msg + f"\nclosest unused recorded interaction: {best.describe(120)}\n"
                + _token_diff(shown(best.command), shown(request.command))
                + f"\nnext unused in recorded order: {candidates[0].describe(120)}")

    def match_tcp(self, host: str, target: str, port: int) -> _Interaction | None:
        """The first unused recorded TCP interaction to ``target:port`` from ``host``.

        :raises ReplayError: none left (and no fallback).
        """
        self.start()
        self._requests += 1
        for inter in self.interactions:
            if not inter.used and inter.kind == "tcp" and (inter.host, inter.target, inter.port) == (host, target,
                                                                                                    port):
                inter.used = True
                return inter
        if self.fallback is not None:
            return None
        at = anyio.current_time() - self.origin
        left = [i for i in self.interactions if not i.used]
        raise self.fail(f"unmatched tcp request #{self._requests} from {host} to {target}:{port} at t={at:.3f} s; "
                        + (f"next unused recorded interaction: {left[0].describe(120)}" if left
                           else "every recorded interaction was already used"))

    # ------------------------------------------------------------------ tools
    def check_tool(self, name: str, arguments: dict[str, Any], result: dict[str, Any],
                   normal: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> dict[str, Any] | None:
        """Compare a tool call and its result with the next recorded one (no-op for cassettes without tools).

        :param normal: the tool's result as the model reads it (a typed call's full model and ``dispatch``'s
            compact view compare the same; cassettes from before typed results were recorded compact).
        :returns: the recorded result (JSON, recorded ids) when there is one and it matched, else None.
        :raises ReplayError: a different tool or arguments, or a result that differs (volatile timing fields
            such as ``elapsed_s`` aside; a recorded ``[REDACTED]`` matches the mask its stream is stored with).
        """
        if not self.tool_calls:
            return None
        k = self.tool_position
        self.tool_position += 1
        if k >= len(self.tool_calls):
            raise self.fail(f"tool call {name}({json.dumps(arguments)[:200]}) was not recorded (the recording "
                            f"has {len(self.tool_calls)} tool calls)")
        rec = self.tool_calls[k]
        args = redact_obj(json.loads(self.ids.to_recorded(json.dumps(arguments))), self.extra_patterns)
        if rec.name != redact(name, self.extra_patterns) or rec.arguments != args:
            raise self.fail(f"tool call #{rec.call}: recorded {rec.name}({json.dumps(rec.arguments)[:300]}), "
                            f"replay called {name}({json.dumps(args)[:300]})")
        if rec.result is None:
            return None
        got = redact_obj(json.loads(self.ids.to_recorded(json.dumps(result))), self.extra_patterns)
        want = rec.result
        if not _equal(got, want) and normal is not None:
            got, want = normal(got), normal(want)
        if not _equal(got, want):
            got, want = _comparable(got), _comparable(want)
            a = json.dumps(want, indent=1, sort_keys=True, ensure_ascii=False).splitlines()
            b = json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False).splitlines()
            diff = "\n".join("    " + ln for ln in difflib.unified_diff(a, b, "recorded", "replay", n=1,
                                                                         lineterm=""))
            raise self.fail(f"tool call #{rec.call} {name}: the result differs from the recording "
                            f"(a changed cassette, or changed code):\n{diff}")
        return rec.result

    def as_recorded(self, result: Any, recorded: Any) -> Any:
        """``result`` (JSON) with each string that is its recorded counterpart but for the stream's secret masks
        (:func:`_same_but_masks`) replaced by that recorded string (its ids mapped to this run's): what the
        recording showed, not the mask the replay built it from."""
        if isinstance(result, dict) and isinstance(recorded, dict):
            return {k: self.as_recorded(v, recorded[k]) if k in recorded else v for k, v in result.items()}
        if isinstance(result, list) and isinstance(recorded, list) and len(result) == len(recorded):
            return [self.as_recorded(a, b) for a, b in zip(result, recorded, strict=True)]
        if isinstance(result, str) and isinstance(recorded, str) and MARK in recorded and result != recorded:
            if _same_but_masks(self.ids.to_recorded(result), recorded):
                return self.ids.to_new_text(recorded)
        return result

    # ------------------------------------------------------------------ hosts
    def host(self, name: str) -> ReplayHost:
        """A :class:`ReplayHost` named ``name`` serving this session."""
        return ReplayHost(self, name)

    def registry(self) -> ReplayHostRegistry:
        """A :class:`HostRegistry` with a :class:`ReplayHost` for any alias asked for."""
        return ReplayHostRegistry(self)


class _Served:
    """Timing of one replayed interaction: offsets are relative to its recorded start."""

    def __init__(self, session: ReplaySession, inter: _Interaction) -> None:
        self.session = session
        self.inter = inter
        self.t0 = anyio.current_time()

    async def at(self, t: float) -> None:
        delay = self.t0 + (t - self.inter.t) - anyio.current_time()
        if delay > 0:
            await anyio.sleep(delay)


class _Stream:
    """Recorded chunks of one direction, then how it ended (``eof``/``error``/never)."""

    def __init__(self, served: _Served, chunks: list[dict[str, Any]], end: dict[str, Any] | None) -> None:
        self._served = served
        self._chunks: deque[tuple[float, bytes, bool]] = deque((float(c["t"]), event_data(c), False) for c in chunks)
        self._end = end

    async def read(self, max_bytes: int) -> bytes | None:
        """Next chunk (at most ``max_bytes``), or None at the recorded end; waits forever past the recording."""
        ids = self._served.session.ids
        if self._chunks:
            t, data, mapped = self._chunks.popleft()
            await self._served.at(t)
            if not mapped:
                data = ids.to_new(data)
            if len(data) > max_bytes:
                self._chunks.appendleft((t, data[max_bytes:], True))
                data = data[:max_bytes]
            return data
        if self._end is None:
            await anyio.sleep_forever()
        assert self._end is not None
        await self._served.at(float(self._end["t"]))
        if self._end["ev"] == "error":
            raise _rebuild_error(self._end, self._served.inter.host)
        return None


class _Expected:
    """Bytes the recording says the client wrote (stdin, or a TCP send), compared as they come."""

    def __init__(self, served: _Served, what: str, chunks: list[dict[str, Any]]) -> None:
        self._served = served
        self._what = what
        self._want = b"".join(event_data(c) for c in chunks)
        self._got = bytearray()

    def _normalised(self) -> bytes:
        s = self._served.session
        text = s.ids.to_recorded(bytes(self._got).decode("utf-8", "surrogateescape"))
        return mask_secrets(text.encode("utf-8", "surrogateescape"), s.extra_patterns)

    def write(self, data: bytes) -> None:
        self._got.extend(data)
        got = self._normalised()
        if not self._want.startswith(got):
            raise self._mismatch(got)

    def finish(self) -> None:
        got = self._normalised()
        if got != self._want:
            raise self._mismatch(got)

    def _mismatch(self, got: bytes) -> ReplayError:
        a = self._want.decode("utf-8", "replace").splitlines()
        b = got.decode("utf-8", "replace").splitlines()
        diff = "\n".join("    " + ln for ln in list(difflib.unified_diff(a, b, "recorded", "replay", n=1,
                                                                          lineterm=""))[:40])
        return self._served.session.fail(f"{self._what} of {self._served.inter.describe(120)} differs from the "
                                         f"recording:\n{diff}")


def _split(inter: _Interaction, kinds: set[str], end_kinds: set[str], op: str | None,
           stream: str | None = None) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    chunks = [e for e in inter.events if e["ev"] in kinds]
    end = None
    for e in inter.events:
        if (e["ev"] in end_kinds and (stream is None or e.get("stream") == stream)) or (
                e["ev"] == "error" and e.get("op") == op):
            end = e
            break
    return chunks, end


class _ReplayProcess:
    def __init__(self, session: ReplaySession, inter: _Interaction) -> None:
        self._served = _Served(session, inter)
        self._streams = {
            s: _Stream(self._served, *_split(inter, {s}, {"eof"}, f"read_{s}", s)) for s in ("stdout", "stderr")}
        self._stdin = _Expected(self._served, "stdin", [e for e in inter.events if e["ev"] == "stdin"])
        self._exit = next((e for e in inter.events if e["ev"] == "exit" or (e["ev"] == "error"
                                                                               and e.get("op") == "wait")), None)
        self._write_error = next((e for e in inter.events if e["ev"] == "error" and e.get("op") == "write_stdin"),
                                 None)

    async def read_stdout(self, max_bytes: int = 65536) -> bytes:
        return await self._streams["stdout"].read(max_bytes) or b""

    async def read_stderr(self, max_bytes: int = 65536) -> bytes:
        return await self._streams["stderr"].read(max_bytes) or b""

    async def write_stdin(self, data: bytes) -> None:
        if self._write_error is not None:
            await self._served.at(float(self._write_error["t"]))
            raise _rebuild_error(self._write_error, self._served.inter.host)
        self._stdin.write(data)

    async def close_stdin(self) -> None:
        self._stdin.finish()

    async def wait(self) -> ExecResult:
        if self._exit is None:
            await anyio.sleep_forever()
        assert self._exit is not None
        await self._served.at(float(self._exit["t"]))
        if self._exit["ev"] == "error":
            raise _rebuild_error(self._exit, self._served.inter.host)
        return ExecResult(self._exit.get("status"), self._exit.get("signal"))

    async def close(self) -> None:
        return None


class _ReplayTcpStream(ByteStream):
    def __init__(self, served: _Served) -> None:
        self._served = served
        inter = served.inter
        self._recv = _Stream(served, *_split(inter, {"recv"}, {"recv_eof"}, "receive"))
        self._sent = _Expected(served, "tcp send", [e for e in inter.events if e["ev"] == "send"])

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = await self._recv.read(max_bytes)
        if data is None:
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes) -> None:
        self._sent.write(item)

    async def send_eof(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


class ReplayHost:
    """A :class:`~agent_tools.hosts.base.Host` that serves recorded interactions (see the module docstring).

    :param cassette: a :class:`Cassette` (a private :class:`ReplaySession` is made) or a shared session.
    :param name: the host name to serve; default the cassette's only host.
    :param matcher: see :data:`Matcher` (only used when ``cassette`` is a :class:`Cassette`).
    :raises ReplayError: ``name`` is None and the cassette has no single host.
    """

    def __init__(self, cassette: Cassette | ReplaySession, name: str | None = None, *,
                 matcher: Matcher = default_matcher) -> None:
        self.session = cassette if isinstance(cassette, ReplaySession) else ReplaySession(cassette, matcher=matcher)
        if name is None:
            hosts = self.session.cassette.hosts
            if len(hosts) != 1:
                raise ReplayError(f"cassette {self.session.cassette.name!r} has hosts {hosts}: name one")
            name = hosts[0]
        self.name = name

    def __repr__(self) -> str:
        return f"ReplayHost({self.session.cassette.name!r}, {self.name!r})"

    def _fallback(self) -> Host:
        assert self.session.fallback is not None
        self.session.fallback_requests += 1
        return self.session.fallback.get(self.name)

    async def start(self, command: str, *, env: Mapping[str, str] | None = None) -> HostProcess:
        inter = self.session.match_exec(self.name, command)
        if inter is None:
            return await self._fallback().start(command, env=env)
        await self.session.wait_until(inter.t)
        served = _Served(self.session, inter)
        for ev in inter.events:
            if ev["ev"] == "cancelled":
                await anyio.sleep_forever()
            if ev["ev"] == "exec_error":
                await served.at(float(ev["t"]))
                raise _rebuild_error(ev, self.name)
        return _ReplayProcess(self.session, inter)

    async def open_tcp(self, host: str, port: int) -> ByteStream:
        inter = self.session.match_tcp(self.name, host, port)
        if inter is None:
            return await self._fallback().open_tcp(host, port)
        await self.session.wait_until(inter.t)
        served = _Served(self.session, inter)
        for ev in inter.events:
            if ev["ev"] == "cancelled":
                await anyio.sleep_forever()
            if ev["ev"] in ("tcp_refused", "tcp_error"):
                await served.at(float(ev["t"]))
                if ev["ev"] == "tcp_refused":
                    raise ConnectionRefusedError(str(ev.get("message", "connection refused")))
                raise _rebuild_error(ev, self.name)
            if ev["ev"] == "connected":
                await served.at(float(ev["t"]))
                break
        return _ReplayTcpStream(served)

    async def aclose(self) -> None:
        return None

    def assert_all_used(self) -> None:
        """See :meth:`ReplaySession.assert_all_used`."""
        self.session.assert_all_used()


class ReplayHostRegistry(HostRegistry):
    """A :class:`HostRegistry` answering every alias with a :class:`ReplayHost` of one session."""

    def __init__(self, session: ReplaySession) -> None:
        super().__init__()
        self.session = session

    def get(self, alias: str) -> Host:
        host = self._hosts.get(alias)
        if host is None:
            host = self._hosts[alias] = ReplayHost(self.session, alias)
        return host

    def for_job(self, alias: str, remembered: dict[str, Any] | None) -> tuple[Host, str | None]:
        """Jobs are followed on this registry's own hosts (recorded or replayed), whatever config they used."""
        return self.get(alias), None

    async def aclose(self) -> None:
        return None


@functools.lru_cache(maxsize=64)
def _result_adapter(result_type: Any) -> TypeAdapter[Any] | None:
    """A validator of a tool's results (its declared result type, or an ``error`` outcome), or None."""
    if result_type is None:
        return None
    try:
        return TypeAdapter(result_type | ErrorOutcome)
    except (TypeError, PydanticSchemaGenerationError):
        return None


def _whole(model: BaseModel, compact: dict[str, Any]) -> dict[str, Any]:
    """A compact result (:func:`~agent_tools.outcomes.result_view`) as ``type(model)``'s whole JSON dump, when it
    validates as one; else ``compact``."""
    try:
        return type(model).model_validate(compact).model_dump(mode="json")
    except ValidationError:
        return compact


class ReplayToolkit(Toolkit):
    """A :class:`Toolkit` whose tool calls — :meth:`dispatch` and the typed methods (``tk.run_command(...)``)
    alike — are checked against the recorded ones, and which raises the replay's first failure at the call that
    met it (the :class:`~agent_tools.errors.ReplayError` with its diff), where the layers below turned it into
    an ``error`` outcome.

    Typed calls are compared with the recording only when the cassette recorded them (header
    ``typed_calls``: cassettes recorded before hold only ``dispatch`` calls); they always raise a host-level
    failure.

    :param session: the replay session (its hosts should be this toolkit's hosts).
    :param check_tools: compare tool calls and results (default True); host-level failures always raise.
    """

    def __init__(self, hosts: HostRegistry | None = None, *, session: ReplaySession, check_tools: bool = True,
                 **kwargs: Any) -> None:
        self.session = session
        self.check_tools = check_tools
        super().__init__(hosts if hosts is not None else session.registry(), **kwargs)

    def register(self, spec: ToolSpec, handler: Callable[..., Awaitable[BaseModel]]) -> None:
        super().register(spec, handler)
        wrap_typed_calls(self, spec, self._typed)

    async def _checked(self, name: str, arguments: dict[str, Any], proceed: Callable[[], Awaitable[T]],
                       check: bool) -> T:
        token = _IN_TOOL_CALL.set(True)
        try:
            result = await proceed()
        except Exception as exc:
            if self.session.failures:
                raise self.session.failures[0] from exc
            raise
        finally:
            _IN_TOOL_CALL.reset(token)
        self.session.check()
        if check and self.check_tools:
            recorded = self.session.check_tool(name, arguments, result_json(result),  # type: ignore[arg-type]
                                               functools.partial(self._normal, name))
            if recorded is not None:  # the secrets of the recorded output: as the recording showed them
                return self._as_recorded(result, self._normal(name, recorded))
        return result

    def _normal(self, name: str, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` (a result of tool ``name`` as JSON: a compact view or a whole model) as the compact view the
        model reads, when it is a result of that tool; else unchanged."""
        adapter = _result_adapter(self.result_type(name))
        if adapter is None:
            return data
        try:
            return result_view(adapter.validate_python(data))
        except ValidationError:
            return data

    def _as_recorded(self, result: T, recorded: dict[str, Any]) -> T:
        if isinstance(result, dict):
            return self.session.as_recorded(result, recorded)  # type: ignore[no-any-return]
        if isinstance(result, BaseModel):
            whole = result.model_dump(mode="json")
            fixed = self.session.as_recorded(whole, _whole(result, recorded))
            return result if fixed == whole else type(result).model_validate(fixed)
        return result

    async def _typed(self, name: str, arguments: dict[str, Any], proceed: Callable[[], Awaitable[T]]) -> T:
        return await self._checked(name, arguments, proceed,
                                   bool(self.session.cassette.header.get(TYPED_CALLS_HEADER)))

    async def dispatch(self, name: str, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
        if _IN_TOOL_CALL.get():
            return await super().dispatch(name, arguments)
        return await self._checked(name, _arguments_dict(arguments),
                                   lambda: super(ReplayToolkit, self).dispatch(name, arguments), True)
