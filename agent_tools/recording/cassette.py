"""Cassettes: a recorded session as versioned JSON lines (the format is described in ``docs/cassettes.md``).

The first line is a header ``{"cassette": 1, "name": ..., "created": ISO-8601 UTC, "wall_start": unix s,
"agent_tools": version, ...}``; every further line is one event ``{"t": seconds since the start, "ev": kind,
"id": interaction, ...}`` in the order it happened. Byte payloads are ``"text"`` (UTF-8) or ``"b64"``.
Long shell words in commands (the job launcher's scripts, repeated on every call) are stored once, readable,
as ``{"ev": "blob", "ref": ..., "text": WORD}``; the command holds ``@{ref}`` where ``shlex.quote(WORD)`` was,
and loading puts it back.

Secrets are redacted before anything is written (:func:`agent_tools.redact.redact`): commands, tool
arguments and results, error messages, and byte streams. Streams are redacted *length-preserving* over each
whole stream (so a secret split between two chunks is still found): the secret becomes ``[REDACTED]``
padded with ``*`` (or only ``*`` when shorter), because the job wire format and HTTP count bytes.
"""

from __future__ import annotations

import base64
import difflib
import functools
import hashlib
import json
import os
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import ReplayError
from ..redact import redact, redact_obj

__all__ = [
    "CASSETTE_VERSION",
    "DATA_EVENTS",
    "Cassette",
    "ToolCall",
    "blob_words",
    "data_fields",
    "event_data",
    "mask_secrets",
    "redact_command",
]

#: the format version this code writes and reads (see docs/cassettes.md, "Version policy")
CASSETTE_VERSION = 1

#: events carrying bytes (``text`` or ``b64``)
DATA_EVENTS = frozenset({"stdout", "stderr", "stdin", "send", "recv"})

_BLOB_MIN_CHARS = 256
_REF_RE = re.compile(r"@\{(sh[0-9a-f]{12})\}")
_MASK = b"[REDACTED]"


def data_fields(data: bytes) -> dict[str, str]:
    """``{"text": ...}`` when ``data`` is valid UTF-8, else ``{"b64": ...}``."""
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(data).decode("ascii")}


def event_data(event: dict[str, Any]) -> bytes:
    """The bytes of a data event (``text`` or ``b64``)."""
    if "b64" in event:
        return base64.b64decode(event["b64"])
    return str(event.get("text", "")).encode("utf-8")


@functools.lru_cache(maxsize=4096)
def _redact_cached(text: str, patterns: tuple[str | re.Pattern[str], ...]) -> str:
    return redact(text, patterns)


def redact_command(command: str, extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> str:
    """:func:`redact` of a command line, memoised (replays ask for the same long launcher commands often)."""
    return _redact_cached(command, tuple(extra_patterns))


def blob_words(command: str) -> list[tuple[str, str]]:
    """``(ref, word)`` for each shell word of ``command`` longer than 256 characters that appears in it exactly as
    :func:`shlex.quote` writes it (how agent_tools passes its scripts); none for a command containing ``@{``."""
    if "@{" in command or len(command) < _BLOB_MIN_CHARS:
        return []
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    out = []
    for word in words:
        if len(word) >= _BLOB_MIN_CHARS and shlex.quote(word) in command:
            out.append(("sh" + hashlib.sha256(word.encode()).hexdigest()[:12], word))
    return out


def _mask(n: int) -> bytes:
    return _MASK + b"*" * (n - len(_MASK)) if n >= len(_MASK) else b"*" * n


def mask_secrets(data: bytes, extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> bytes:
    """``data`` with every secret :func:`redact` finds masked in place, keeping the byte length.

    Changed regions separated by fewer than 8 unchanged characters are masked as one, so no stray
    characters of a secret survive between masks.
    """
    text = data.decode("utf-8", "surrogateescape")
    red = redact(text, extra_patterns)
    if red == text:
        return data
    ops = difflib.SequenceMatcher(None, text, red, autojunk=False).get_opcodes()
    out = bytearray()
    pending = 0  # bytes of a masked region being built
    for k, (tag, i1, i2, _j1, _j2) in enumerate(ops):
        seg = text[i1:i2].encode("utf-8", "surrogateescape")
        inner_gap = tag == "equal" and 0 < k < len(ops) - 1 and i2 - i1 < 8
        if tag == "equal" and not inner_gap:
            if pending:
                out += _mask(pending)
                pending = 0
            out += seg
        else:
            pending += len(seg)
    if pending:
        out += _mask(pending)
    return bytes(out)


@dataclass(frozen=True)
class ToolCall:
    """One recorded tool call: ``name(arguments) -> result`` (JSON-ready dicts)."""

    call: int
    name: str
    arguments: dict[str, Any]
    result: dict[str, Any] | None


@dataclass
class Cassette:
    """A recorded session: ``header`` (dict) and ``events`` (dicts, in order; blobs expanded).

    :raises ReplayError: from :meth:`load`/:meth:`loads` for a malformed file or an unsupported version.
    """

    header: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def new(cls, name: str, *, wall_start: float, **extra: Any) -> Cassette:
        """An empty cassette with a version-1 header."""
        from .. import __version__

        created = datetime.fromtimestamp(wall_start, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        header = {"cassette": CASSETTE_VERSION, "name": name, "created": created, "wall_start": round(wall_start, 6),
                  "agent_tools": __version__, **extra}
        return cls(header)

    @property
    def name(self) -> str:
        return str(self.header.get("name", ""))

    @property
    def wall_start(self) -> float:
        """The wall time (unix seconds) at which the recording started."""
        return float(self.header.get("wall_start", 0.0))

    @property
    def hosts(self) -> list[str]:
        """Host names with at least one exec or TCP interaction, in order of first use."""
        seen: dict[str, None] = {}
        for ev in self.events:
            if ev.get("ev") in ("exec", "tcp"):
                seen.setdefault(str(ev["host"]), None)
        return list(seen)

    def tool_calls(self) -> list[ToolCall]:
        """The recorded tool calls with their results, in call order."""
        calls: dict[int, ToolCall] = {}
        for ev in self.events:
            if ev.get("ev") == "tool":
                calls[int(ev["call"])] = ToolCall(int(ev["call"]), str(ev["name"]), dict(ev.get("arguments", {})),
                                                  None)
            elif ev.get("ev") == "tool_result" and int(ev["call"]) in calls:
                c = calls[int(ev["call"])]
                calls[c.call] = ToolCall(c.call, c.name, c.arguments, dict(ev.get("result", {})))
        return [calls[k] for k in sorted(calls)]

    # ------------------------------------------------------------------ redaction
    def redacted(self, extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> Cassette:
        """A copy with secrets redacted (see the module docstring)."""
        patterns = tuple(extra_patterns)
        streams: dict[tuple[Any, str], list[dict[str, Any]]] = {}
        out: list[dict[str, Any]] = []
        for ev in self.events:
            ev = dict(ev)
            kind = ev.get("ev")
            if kind == "exec":
                ev["command"] = redact_command(str(ev["command"]), patterns)
            elif kind in ("tool", "tool_result"):
                if isinstance(ev.get("name"), str):
                    ev["name"] = redact(ev["name"], patterns)  # an unknown tool's name is the caller's text
                for key in ("arguments", "result"):
                    if key in ev:
                        ev[key] = redact_obj(ev[key], patterns)
            elif "message" in ev:
                ev["message"] = redact(str(ev["message"]), patterns)
            if kind in DATA_EVENTS:
                streams.setdefault((ev.get("id"), str(kind)), []).append(ev)
            out.append(ev)
        for chunks in streams.values():
            datas = [event_data(c) for c in chunks]
            masked = mask_secrets(b"".join(datas), patterns)
            pos = 0
            for c, d in zip(chunks, datas, strict=True):
                part = masked[pos:pos + len(d)]
                pos += len(d)
                c.pop("text", None)
                c.pop("b64", None)
                c.update(data_fields(part))
        return Cassette(dict(self.header, redacted=True), out)

    # ------------------------------------------------------------------ text form
    def dumps(self) -> str:
        """The JSON-lines text (header, then events; long shell words of commands stored once as blobs). A line
        holding a lone surrogate (bytes that were not UTF-8, or a transcript's ``\\udcff``) is written with
        ``\\u`` escapes, which UTF-8 cannot hold as they are."""
        lines = [_json_line(self.header)]
        defined: set[str] = set()
        for ev in self.events:
            ev = {k: v for k, v in ev.items() if k != "_line"}
            if ev.get("ev") == "exec":
                command = str(ev["command"])
                for ref, word in blob_words(command):
                    if ref not in defined:
                        defined.add(ref)
                        lines.append(_json_line({"t": ev["t"], "ev": "blob", "ref": ref, "text": word}))
                    command = command.replace(shlex.quote(word), "@{" + ref + "}")
                ev["command"] = command
            lines.append(_json_line(ev))
        return "\n".join(lines) + "\n"

    @classmethod
    def loads(cls, text: str, source: str = "<cassette>") -> Cassette:
        """Parse the JSON-lines text. :raises ReplayError: malformed, or a version this code cannot read."""
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if not lines:
            raise ReplayError(f"{source}: empty cassette")
        try:
            header = json.loads(lines[0])
        except json.JSONDecodeError as exc:
            raise ReplayError(f"{source}:1: not a cassette header ({exc.msg})") from exc
        version = header.get("cassette") if isinstance(header, dict) else None
        if not isinstance(version, int):
            raise ReplayError(f"{source}:1: not a cassette header (no integer 'cassette' version)")
        if version > CASSETTE_VERSION:
            raise ReplayError(f"{source}: cassette format version {version} is newer than this agent_tools reads "
                              f"({CASSETTE_VERSION}); upgrade agent_tools or re-record")
        if version < 1:
            raise ReplayError(f"{source}: cassette format version {version} is not supported; re-record")
        blobs: dict[str, str] = {}
        events: list[dict[str, Any]] = []
        for n, line in enumerate(lines[1:], start=2):
            try:
                ev = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ReplayError(f"{source}:{n}: not JSON ({exc.msg})") from exc
            if not isinstance(ev, dict) or "ev" not in ev:
                raise ReplayError(f"{source}:{n}: an event needs an 'ev' field")
            if ev["ev"] == "blob":
                blobs[str(ev["ref"])] = str(ev["text"])
                continue
            if ev["ev"] == "exec":
                ev["command"] = _REF_RE.sub(
                    lambda m: shlex.quote(blobs[m.group(1)]) if m.group(1) in blobs else m.group(0), str(ev["command"]))
            ev["_line"] = n
            events.append(ev)
        return cls(header, events)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Cassette:
        """Read a cassette file. :raises ReplayError: missing, malformed or unsupported."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise ReplayError(f"no cassette at {p}: record it first (pytest --agent-tools-record=once)") from exc
        return cls.loads(text, str(p))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the cassette (atomically: temp file + rename). The caller redacts first (:meth:`redacted`)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(self.dumps(), encoding="utf-8")
        os.replace(tmp, p)


def _json_line(obj: Any) -> str:
    """``obj`` as one JSON line: UTF-8 text as it is, ``\\u`` escapes only for a line UTF-8 cannot hold."""
    text = json.dumps(obj, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj, ensure_ascii=True)
    return text
