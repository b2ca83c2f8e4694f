"""opencode sessions: the bash tool calls, from ``opencode export`` JSON or from opencode's own storage.

Where a session is (see /work/shared/TRANSCRIPTS.md; checked against opencode's sources and public readers):

* ``opencode export [sessionID]`` prints JSON ``{info, messages: [{info, parts}], todos}`` — the stable way in;
* newer releases keep every session in one SQLite file, ``$XDG_DATA_HOME/opencode/opencode.db``
  (``~/.local/share/opencode/opencode.db``), tables ``session`` (``id``, ``title``, ``directory``, ...),
  ``message`` (``id``, ``session_id``, ``time_created``, ``data``) and ``part`` (``id``, ``message_id``,
  ``session_id``, ``time_created``, ``data``), each ``data`` the object's JSON without its ids;
* older releases keep JSON files under ``.../opencode/storage/``: ``session/<projectID>/<sessionID>.json``,
  ``message/<sessionID>/<messageID>.json`` and ``part/<messageID>/<partID>.json`` (read in ``time.created`` /
  ``time.start`` order, not by file name).

A tool part is ``{type: "tool", tool: "bash", callID, state}``; ``state.status`` is ``completed`` (``input
{command, timeout? ms}``, ``output``, ``metadata {exit, output, truncated?, outputPath?}``, ``time {start, end}``
in epoch ms), ``error`` (``error`` text: the tool failed or permission was refused; nothing ran to a result),
``pending`` or ``running`` (no result). An ``error`` state is read by its text (opencode's own messages,
session/processor.ts and permission/): "Tool execution aborted" with ``metadata.interrupted: true`` is a call
that was **running** when the session was aborted (the user stopped it; it ran: imported as interrupted at
``time.end``; without that flag it may still have been pending: not imported); "The user rejected permission
to use this specific tool call" (RejectedError / CorrectedError) is the user's refusal and "The user has
specified a rule which prevents you from using this specific tool call" (DeniedError) a permission rule's: both
ran nothing. What a completed output holds besides the command's own text, read by position only (the command's
own output may quote any of it):

* a timeout is not an error state: opencode appends (at the very end of the output, after a blank line) a
  ``<shell_metadata>`` block (older builds ``<bash_metadata>``) saying "shell tool terminated command after
  exceeding timeout N ms" (older "bash tool ..."), and the oldest builds end the output with ``(Command timed
  out after N ms)``; a user abort reads "User aborted the command" in the same block (oldest: ``(Command was
  aborted)``). Only that trailing block counts; ``metadata.exit`` is then null;
* ``metadata.exit`` null without such a note means no exit status was recorded (Node's ``exitCode`` is null
  for a process ended by a signal): not 0. Such a call is not imported (its reason says so);
* an empty output reads ``(no output)``; a cut one starts with ``...output truncated...`` and "Full output saved
  to: FILE" and keeps the end (``metadata.truncated``, ``metadata.outputPath``; older builds keep the start and
  end with "(Output was truncated due to length limit)"): the markers are removed, and the whole output is read
  from that file when it is here (its name under ``tool-output/`` of the data directory the database or storage
  is in, or of this machine's for an export; no other path a part names is read); otherwise
  :attr:`~.model.ShellCall.output_cut` says which part the transcript holds.

A call runs in its bash ``workdir`` (relative to the session's directory), else in the session's ``directory``.
A ``task`` tool part starts a subagent session (``state.metadata.sessionId``; the database's ``session.parent_id``,
the storage's ``parentID``) whose bash calls are its own: they are not part of the import, and
:attr:`ShellCalls.seen` names each such session (with its bash calls when the source holds it); the listing of a
database's sessions marks each subagent's parent.

Unknown fields, part types and tools are skipped.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

from .model import ShellCall, ShellCalls

__all__ = ["OpencodeSession", "SessionChoiceError", "find_sessions", "parse_opencode", "parse_opencode_messages"]

# opencode appends "\n\n<shell_metadata>\n...\n</shell_metadata>" at the end (older: bash_metadata; oldest: "\n\n(...)")
_META_RE = re.compile(r"(?:\n\n)?<(shell|bash)_metadata>\n?((?:(?!</?(?:shell|bash)_metadata>).)*)</\1_metadata>\s*\Z",
                      re.DOTALL)
_TIMEOUT_NOTE_RE = re.compile(r"terminated command after exceeding timeout (\d+) ?ms", re.IGNORECASE)
_OLD_TIMEOUT_RE = re.compile(r"(?:\n\n)?\(Command timed out after (\d+) ?ms\)\s*\Z")
_OLD_ABORT_RE = re.compile(r"(?:\n\n)?\(Command was aborted\)\s*\Z")
_OLD_TRUNCATED_RE = re.compile(r"(?:\n\n)?\(Output was truncated due to length limit\)\s*\Z")
_TRUNCATED_RE = re.compile(r"^\.\.\.output truncated\.\.\.\s*\n(?:\s*Full output saved to: ([^\n]*)\n)?\s*")
_NO_OUTPUT = "(no output)"
#: error texts of calls that ran nothing: (what, pattern), matched at the start of the error
_REFUSALS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("refused by the user", re.compile(r"^(?:Error: )?The user rejected permission", re.IGNORECASE)),
    ("denied by a permission rule", re.compile(r"^(?:Error: )?The user has specified a rule which prevents you",
                                               re.IGNORECASE)),
    ("refused", re.compile(r"^(?:Error: )?(?:The user has specifically restricted access|.*permission (?:was )?"
                           r"denied|.*not allowed to (?:be )?execute)", re.IGNORECASE)),
)
_ABORTED = "Tool execution aborted"
_SQLITE_MAGIC = b"SQLite format 3\x00"


class OpencodeSession:
    """One session found in opencode's storage: ``id``, ``title``, ``directory``, ``updated`` (epoch ms) and
    ``parent`` (the session whose ``task`` tool started it as a subagent, or None)."""

    def __init__(self, id: str, title: str = "", directory: str = "", updated: float | None = None,
                 parent: str | None = None) -> None:
        self.id, self.title, self.directory, self.updated, self.parent = id, title, directory, updated, parent

    def __repr__(self) -> str:
        return f"OpencodeSession({self.id!r}, {self.title!r})"


class SessionChoiceError(ValueError):
    """The database or storage holds no session of that id, or several sessions and none was named (the message
    lists them): it *is* opencode's storage."""


def _ms(value: Any) -> float | None:
    return float(value) / 1000 if isinstance(value, int | float) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _call_from_part(part: dict[str, Any], index: int, directory: str | None = None,
                    data_dir: Path | None = None) -> ShellCall | None:
    """The ShellCall of a bash tool part (None: not a bash call, or no command). ``directory``: the session's,
    where a call without ``workdir`` ran; ``data_dir``: opencode's data directory, where ``tool-output/`` keeps
    the whole outputs of cut ones."""
    if part.get("type") != "tool" or part.get("tool") != "bash":
        return None
    state = _dict(part.get("state"))
    inp = _dict(state.get("input"))
    times = _dict(state.get("time"))
    workdir = inp.get("workdir") if isinstance(inp.get("workdir"), str) and inp["workdir"].strip() else None
    if workdir is not None and not workdir.startswith("/") and directory:
        workdir = os.path.normpath(os.path.join(directory, workdir))
    call = ShellCall(index=index, call_id=str(part.get("callID") or part.get("id") or ""),
                     command=str(inp.get("command", "")), started_at=_ms(times.get("start")),
                     ended_at=_ms(times.get("end")), timeout_s=_ms(inp.get("timeout")) or 120.0,
                     cwd=workdir or directory or None)
    if not call.command:
        return None
    status = state.get("status")
    if status == "completed":
        _completed(call, state, data_dir)
    elif status == "error":
        _error(call, state)
    else:
        call.skip(f"no result in the transcript (state {status!r} when the session was saved)")
    return call


def _error(call: ShellCall, state: dict[str, Any]) -> None:
    error = " ".join(str(state.get("error", "")).split())
    meta = _dict(state.get("metadata"))
    if error.startswith(_ABORTED) and meta.get("interrupted") is True:  # it was running: it ran, then stopped
        call.interrupted = True
        out = str(meta.get("output") or "")
        call.output = "" if out.strip() == _NO_OUTPUT else out
        return
    call.output = error
    if error.startswith(_ABORTED):
        call.skip(f"aborted before it returned, and the part does not say it was running (no metadata.interrupted): "
                  f"it may never have started: {error[:160]!r}")
        return
    what = next((w for w, pattern in _REFUSALS if pattern.match(error)), "the tool failed before a result")
    call.skip(f"{what}: {error[:160]!r}")


def _default_data_dir() -> Path:
    """opencode's data directory on this machine (``$XDG_DATA_HOME/opencode``, default ``~/.local/share``)."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "opencode"


def _saved_output(meta: dict[str, Any], marker_path: str | None, data_dir: Path | None) -> tuple[str | None, str]:
    """``(the whole output, or None when it is not here; where it was saved)`` of a cut output: the file that
    ``metadata.outputPath`` (or the marker's "Full output saved to") names, looked up by its name under the data
    directory's ``tool-output/`` (``data_dir``, else this machine's opencode data directory). No other path is
    read: a part could name any file of this machine, and what is read goes into the cassette."""
    saved = meta.get("outputPath") if isinstance(meta.get("outputPath"), str) and meta["outputPath"] else marker_path
    if not saved:
        return None, "a file the part does not name"
    name = Path(saved).name
    if name in ("", ".", ".."):
        return None, saved
    try:
        return ((data_dir or _default_data_dir()) / "tool-output" / name).read_text(encoding="utf-8",
                                                                                   errors="replace"), saved
    except OSError:
        return None, saved


def _completed(call: ShellCall, state: dict[str, Any], data_dir: Path | None = None) -> None:
    out = str(state.get("output", ""))
    meta = _META_RE.search(out)  # only the block that ends the output is opencode's
    if meta:
        note = meta.group(2)
        t = _TIMEOUT_NOTE_RE.search(note)
        if t:
            call.timed_out = True
            call.timeout_s = int(t.group(1)) / 1000
        if re.search(r"User aborted the command", note, re.IGNORECASE):
            call.interrupted = True
        out = out[:meta.start()]
    old = _OLD_TIMEOUT_RE.search(out)
    if old:
        call.timed_out = True
        call.timeout_s = int(old.group(1)) / 1000
        out = out[:old.start()] + out[old.end():]
    aborted = _OLD_ABORT_RE.search(out)
    if aborted:
        call.interrupted = True
        out = out[:aborted.start()] + out[aborted.end():]
    metadata = _dict(state.get("metadata"))
    cut = _TRUNCATED_RE.match(out)  # opencode kept the end of the output (the rest in a file)
    old_cut = _OLD_TRUNCATED_RE.search(out)  # older builds kept its start
    if cut or old_cut or metadata.get("truncated") is True:
        whole, saved = _saved_output(metadata, cut.group(1) if cut and cut.group(1) else None, data_dir)
        out = _OLD_TRUNCATED_RE.sub("", _TRUNCATED_RE.sub("", out))
        if whole is not None:
            out = whole
        else:
            part = "the end" if cut else "the start" if old_cut else "part"
            call.output_cut = (f"the transcript holds only {part} of its output (opencode cut it: metadata.truncated)"
                               + (f"; the whole output was saved to {saved}, which is not here" if cut or
                                  metadata.get("outputPath") else ""))
    if out.strip() == _NO_OUTPUT:
        out = ""
    call.output = out
    code = metadata.get("exit")
    if call.left_running:
        call.exit_status = None
    elif isinstance(code, int) and not isinstance(code, bool):
        call.exit_status = code
    else:
        call.skip(f"no exit status in the transcript (metadata.exit is {json.dumps(code)}): it may have been "
                  "ended by a signal; 0 would be a guess")


def _subagent_of(part: dict[str, Any]) -> str | None:
    """The session a ``task`` tool part started (its subagent: ``state.metadata.sessionId``), or None."""
    if part.get("type") != "tool" or part.get("tool") != "task":
        return None
    sid = _dict(_dict(part.get("state")).get("metadata")).get("sessionId")
    return sid if isinstance(sid, str) and sid else None


def _note_subagents(calls: ShellCalls, children: dict[str, int | None]) -> None:
    """Say which subagent sessions the session started (``children``: id -> its bash calls, None when the
    source does not hold that session), and how to import them."""
    known = {c: n for c, n in children.items() if n is not None}
    if known:
        calls.note(f"bash call(s) of this session's subagent session(s) {', '.join(sorted(known))} (not part of "
                   "this import: import each with --session ID)", sum(known.values()))
    unknown = sorted(c for c, n in children.items() if n is None)
    if unknown:
        calls.note(f"subagent session(s) started by its task tool ({', '.join(unknown)}), not in this file (their "
                   "bash calls are not part of this import: `opencode export ID` prints each)", len(unknown))


def parse_opencode_messages(messages: list[dict[str, Any]], *, directory: str | None = None,
                            data_dir: Path | None = None,
                            children: dict[str, int | None] | None = None) -> ShellCalls:
    """The bash calls of ``[{info, parts}]`` messages (the shape of an export), in order, including the ones
    not imported (``ran`` False with a ``skip_reason``). A part whose ``callID`` was seen already is the same call
    (the first is kept). ``directory``: the session's directory (where a call without ``workdir`` ran);
    ``data_dir``: opencode's data directory (``tool-output/`` there holds the whole of cut outputs). The
    subagent sessions its ``task`` parts started, and ``children`` (subagent session id -> its bash calls, from
    the storage), are counted in :attr:`ShellCalls.seen` (their calls are not part of it)."""
    calls = ShellCalls(unit="message part(s)")
    found: dict[str, int | None] = dict(children or {})
    if not messages:
        calls.note("message(s): the session is empty", 0)
    ids: set[str] = set()
    for msg in messages:
        parts = msg.get("parts", []) if isinstance(msg, dict) else []
        for part in parts if isinstance(parts, list) else []:
            if not isinstance(part, dict):
                continue
            calls.lines += 1
            child = _subagent_of(part)
            if child is not None:
                found.setdefault(child, None)
            call = _call_from_part(part, len(calls) + 1, directory, data_dir)
            if call is None:
                continue
            if call.call_id and call.call_id in ids:
                calls.note("bash part(s) repeated (read once)")
                continue
            ids.add(call.call_id)
            calls.append(call)
    _note_subagents(calls, found)
    return calls


# ---------------------------------------------------------------------------------------------- storage
def _sqlite_sessions(db: sqlite3.Connection) -> list[OpencodeSession]:
    cols = {r[1] for r in db.execute("PRAGMA table_info(session)")}
    if not cols:
        return []
    want = [c for c in ("id", "title", "directory", "time_updated", "parent_id") if c in cols]
    order = " ORDER BY time_updated DESC" if "time_updated" in cols else ""
    out = []
    for row in db.execute(f"SELECT {', '.join(want)} FROM session{order}"):
        d = dict(zip(want, row, strict=True))
        out.append(OpencodeSession(str(d["id"]), str(d.get("title") or ""), str(d.get("directory") or ""),
                                   d.get("time_updated"), str(d["parent_id"]) if d.get("parent_id") else None))
    return out


def _bash_parts(datas: list[Any]) -> int:
    """How many of these part ``data`` values are bash tool calls."""
    return sum(1 for d in datas if (part := _loads(d)).get("type") == "tool" and part.get("tool") == "bash")


def _from_sqlite(path: Path, session: str | None) -> ShellCalls:
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise ValueError(f"cannot open the opencode database {path}: {exc}") from exc
    try:
        sessions = _sqlite_sessions(db)
        sid = _choose(sessions, session, path)
        messages: dict[str, dict[str, Any]] = {}
        for mid, data in db.execute("SELECT id, data FROM message WHERE session_id=? ORDER BY time_created, id",
                                    (sid,)):
            messages[str(mid)] = {"info": dict(_loads(data), id=str(mid)), "parts": []}
        for pid, mid, data in db.execute("SELECT id, message_id, data FROM part WHERE session_id=? "
                                         "ORDER BY time_created, id", (sid,)):
            if str(mid) in messages:
                messages[str(mid)]["parts"].append(dict(_loads(data), id=str(pid), messageID=str(mid),
                                                        sessionID=sid))
        ids = {s.id for s in sessions}
        children = {s.id for s in sessions if s.parent == sid} | {
            c for m in messages.values() for part in m["parts"] if (c := _subagent_of(part)) is not None}
        counts: dict[str, int | None] = {
            c: (_bash_parts([d for (d,) in db.execute("SELECT data FROM part WHERE session_id=?", (c,))])
                if c in ids else None) for c in children}
        directory = next((s.directory for s in sessions if s.id == sid), "") or None
        return parse_opencode_messages(list(messages.values()), directory=directory, data_dir=path.parent,
                                       children=counts)
    except sqlite3.Error as exc:
        raise ValueError(f"{path} is not an opencode database (tables session, message, part): {exc}") from exc
    finally:
        db.close()


def _loads(data: Any) -> dict[str, Any]:
    try:
        value = json.loads(data) if isinstance(data, str | bytes) else data
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return _loads(path.read_text(encoding="utf-8"))
    except OSError:
        return {}


def _storage_sessions(storage: Path) -> list[OpencodeSession]:
    out = []
    for f in sorted((storage / "session").glob("*/*.json")):
        info = _read_json(f)
        if str(info.get("id", f.stem)).startswith("ses"):
            parent = info.get("parentID")
            out.append(OpencodeSession(str(info.get("id", f.stem)), str(info.get("title") or ""),
                                       str(info.get("directory") or ""), _dict(info.get("time")).get("updated"),
                                       parent if isinstance(parent, str) and parent else None))
    out.sort(key=lambda s: -(s.updated or 0))
    return out


def _by_start(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``parts`` (in file-name order) ordered by their ``time.start`` (a tool part's ``state.time.start``), as the
    export and the database give them; a part without one keeps its place after the part before it."""
    keyed: list[tuple[float, int, dict[str, Any]]] = []
    last = float("-inf")
    for i, part in enumerate(parts):
        start = _dict(_dict(part.get("state")).get("time")).get("start", _dict(part.get("time")).get("start"))
        if isinstance(start, int | float) and not isinstance(start, bool):
            last = float(start)
        keyed.append((last, i, part))
    return [p for _t, _i, p in sorted(keyed, key=lambda k: (k[0], k[1]))]


def _storage_messages(storage: Path, sid: str) -> list[dict[str, Any]]:
    found: list[tuple[float, str, dict[str, Any]]] = []
    for mf in sorted((storage / "message" / sid).glob("*.json")):
        info = _read_json(mf)
        mid = str(info.get("id", mf.stem))
        parts = _by_start([_read_json(pf) for pf in sorted((storage / "part" / mid).glob("*.json"))])
        created = _dict(info.get("time")).get("created")
        found.append((float(created) if isinstance(created, int | float) else 0.0, mid, {"info": info, "parts": parts}))
    return [m for _t, _id, m in sorted(found, key=lambda f: (f[0], f[1]))]


def _from_storage(storage: Path, session: str | None) -> ShellCalls:
    sessions = _storage_sessions(storage)
    sid = _choose(sessions, session, storage)
    messages = _storage_messages(storage, sid)
    ids = {s.id for s in sessions}
    children = {s.id for s in sessions if s.parent == sid} | {
        c for m in messages for part in m["parts"] if (c := _subagent_of(part)) is not None}
    counts: dict[str, int | None] = {
        c: (sum(1 for m in _storage_messages(storage, c) for part in m["parts"]
                if part.get("type") == "tool" and part.get("tool") == "bash") if c in ids else None)
        for c in children}
    directory = next((s.directory for s in sessions if s.id == sid), "") or None
    return parse_opencode_messages(messages, directory=directory, data_dir=storage.parent, children=counts)


def _choose(sessions: list[OpencodeSession], session: str | None, where: Path) -> str:
    if session is not None:
        if any(s.id == session for s in sessions):
            return session
        raise SessionChoiceError(f"no session {session!r} in {where}" + _listing(sessions))
    if len(sessions) == 1:
        return sessions[0].id
    if not sessions:
        raise SessionChoiceError(f"no opencode session in {where}")
    raise SessionChoiceError(f"{where} holds {len(sessions)} sessions: name one with --session"
                             + _listing(sessions))


def _listing(sessions: list[OpencodeSession]) -> str:
    shown = [f"\n  {s.id}  {s.title[:60]}" + (f"  ({s.directory})" if s.directory else "")
             + (f"  [subagent of {s.parent}]" if s.parent else "") for s in sessions[:20]]
    more = f"\n  ... and {len(sessions) - 20} more" if len(sessions) > 20 else ""
    return ("; sessions, newest first:" + "".join(shown) + more) if sessions else ""


def _storage_root(path: Path) -> Path | None:
    """The ``storage`` directory for ``path`` (itself, its ``storage`` child, or the one a session file is in)."""
    for cand in (path, path / "storage", path / "opencode" / "storage"):
        if (cand / "message").is_dir() and (cand / "part").is_dir():
            return cand
    return None


def find_sessions(path: str | os.PathLike[str]) -> list[OpencodeSession]:
    """The sessions in an opencode database file or storage directory (newest first).

    :raises ValueError: ``path`` is neither.
    """
    p = Path(path)
    db = _database(p)
    if db is not None:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return _sqlite_sessions(conn)
        finally:
            conn.close()
    storage = _storage_root(p)
    if storage is None:
        raise ValueError(f"{p} is not an opencode database or storage directory")
    return _storage_sessions(storage)


def _database(p: Path) -> Path | None:
    if p.is_dir():
        for cand in (p / "opencode.db", p / "opencode" / "opencode.db"):
            if cand.is_file():
                return cand
        return None
    try:
        with p.open("rb") as fh:
            return p if fh.read(16) == _SQLITE_MAGIC else None
    except OSError:
        return None


def parse_opencode(path: str | os.PathLike[str], *, session: str | None = None) -> ShellCalls:
    """The bash calls of an opencode session, in order, including the ones not imported (``ran`` False, with
    a ``skip_reason``).

    :param path: the JSON printed by ``opencode export``; opencode's SQLite database (``opencode.db``) or the
        data directory holding it; the ``storage`` directory of older releases (or its parent); or a session
        file ``storage/session/<projectID>/<sessionID>.json``.
    :param session: the session id (``ses_...``) when the database or storage holds several.
    :raises OSError: unreadable file. :raises ValueError: not an opencode export, database or storage.
    :raises SessionChoiceError: (a ValueError) no such session; several sessions and ``session`` not given (the
        message lists them, each subagent session with its parent).
    """
    p = Path(path)
    db = _database(p)
    if db is not None:
        return _from_sqlite(db, session)
    if p.is_dir():
        storage = _storage_root(p)
        if storage is None:
            raise ValueError(f"{p}: no opencode.db and no storage/ with message/ and part/ directories")
        return _from_storage(storage, session)
    text = p.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at line {exc.lineno})") from exc
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        directory = _dict(data.get("info")).get("directory")
        return parse_opencode_messages(data["messages"], directory=directory if isinstance(directory, str)
                                       and directory else None)
    if isinstance(data, dict) and str(data.get("id", "")).startswith("ses") and len(p.parents) >= 3:
        storage = p.parents[2]  # storage/session/<projectID>/<sessionID>.json
        if (storage / "message").is_dir():
            return _from_storage(storage, session or str(data["id"]))
    raise ValueError("no 'messages' list (not the JSON of `opencode export`) and not a session file of "
                     "opencode's storage")
