"""Codex CLI rollouts (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<ts>-<uuid>.jsonl``): the shell calls.

Facts used (no official spec; checked against Codex's sources and public readers, see
/work/shared/TRANSCRIPTS.md). One JSON object per line, ``{timestamp, type, payload}`` with ``type`` in
``session_meta``, ``turn_context``, ``response_item``, ``event_msg``, ``compacted`` (others are skipped).
Rollouts written before that envelope (mid-2025, e.g. the 2025-09-13 rollout in tenequm/pond's adapter
fixtures) hold the response items themselves, one per line (``{"type": "function_call", ...}``), after a first
line ``{id, timestamp, instructions?, git?}`` — the only timestamp of such a file.

Calls are ``response_item`` payloads:

* ``function_call`` ``{name, arguments, call_id}``, ``arguments`` a JSON *string* (parsed again):
  ``shell`` ``{command: argv, workdir?, timeout_ms?}`` (older releases), ``shell_command`` ``{command: str,
  workdir?, timeout_ms?}``, ``exec_command`` ``{cmd, workdir?, yield_time_ms?}`` (unified exec: a command still
  running after ``yield_time_ms`` keeps running as a session the model polls with ``write_stdin {session_id,
  chars}``);
* ``local_shell_call`` ``{call_id, status, action: {type: "exec", command: argv, timeout_ms?}}``;
* **code mode** (0.147 on; the 0.152.0 rollout of tenequm/pond's fixtures): the model writes a script,
  ``custom_tool_call {name: "exec", input: "const r = await tools.exec_command({cmd: ...}); ..."}``, answered by
  ``custom_tool_call_output`` ("Script completed / Wall time / Output:" and JSON chunks). A script may run
  several commands or none (``tools.apply_patch``); each command it ran is an ``event_msg`` ``item_completed``
  whose ``item`` is ``{type: "CommandExecution", id, process_id, command: argv, status, aggregated_output,
  exit_code, duration {secs, nanos}}`` (with ``started_at_ms``/``completed_at_ms`` beside it): each such item is
  one shell call. A script that mentions a shell tool but ran no item is counted in :attr:`ShellCalls.seen`.

**``codex exec --json``** prints an event stream instead (codex-rs ``exec/src/exec_events.rs``): lines
``{type: "thread.started" | "turn.started" | "turn.completed" | "turn.failed" | "item.started" |
"item.updated" | "item.completed" | "error", ...}``; a shell call is an ``item.started`` / ``item.completed``
whose ``item`` is ``{id, type: "command_execution", command: str, aggregated_output, exit_code: int | null,
status: "in_progress" | "completed" | "failed" | "declined"}``. The stream has no timestamps and no timeouts:
a call's duration is unknown, a ``declined`` one never ran, one that only started has no result, and exit
status 124 is imported as the status it shows, marked as possibly the old tool's timeout
(:attr:`~.model.ShellCall.maybe_timed_out`: the note is not in ``aggregated_output`` and no time tells). Such a file
is read by :func:`parse_codex` too.

An argv ``["bash", "-lc", CMD]`` (any ``sh``/``bash``/``zsh`` with ``-c``/``-lc``) is the command line CMD.
A call runs in its ``workdir`` (relative to the turn's ``cwd``, as codex-rs resolves it), else in the ``cwd`` of
the last ``turn_context`` / ``session_meta``: that is the call's :attr:`~.model.ShellCall.cwd`.

A shell call that is an ``apply_patch`` edit — argv ``["apply_patch", PATCH]`` (or ``applypatch``), or a
``-c``/``-lc`` script whose only statement is ``apply_patch <<'EOF' ... EOF``, optionally after ``cd PATH &&``
(codex-rs apply-patch ``maybe_parse_apply_patch``, answered by ``patch_apply_end``) — is intercepted: Codex
applies the patch itself and nothing runs in a shell. It is not a shell call (counted in
:attr:`ShellCalls.seen`): a re-recording would run ``apply_patch`` on a host.

Results, matched by ``call_id``:

* ``event_msg`` ``exec_command_end`` ``{call_id, stdout, stderr, aggregated_output, exit_code, duration
  {secs, nanos}, status}`` — preferred when present (the whole output and the real exit status; for a unified
  exec session it comes when the process ends);
* ``response_item`` ``function_call_output`` ``{call_id, output}``, whose ``output`` changed between releases:
  a JSON string ``{"output": ..., "metadata": {"exit_code", "duration_seconds"}}``; free text ``Exit code: N /
  Wall time: S seconds / [Total output lines: N /] Output: ...``; for ``exec_command`` ``Chunk ID / Wall time /
  Process exited with code N`` (or ``Process running with session ID N``) ``/ Original token count / Output:
  ...``; ``failed in sandbox TYPE with execution error: sandbox denied exec error, exit code: N, stdout: ...,
  stderr: ...`` (codex-rs ``SandboxErr::Denied``: the command ran in the sandbox and exited N); or an object /
  list of ``{type: "input_text", text}``; or ``"aborted"``: the turn was interrupted
  while the call was in flight (codex-rs' interrupt test: the history gets an ``"aborted"`` output for the
  running tool call) — imported as stopped by the user at that time (a call still waiting for approval would
  read the same: the rollout does not keep the approval request in every release). An ``event_msg``
  ``turn_aborted {reason}`` stops every call still without a result the same way, at its time (the session
  goes on; nothing of the call may follow it).

A unified exec session's process ends by itself (a poll's "Process exited with code N", its
``exec_command_end``), unless the agent stopped it: a ``write_stdin`` whose ``chars`` hold Ctrl-C (``\u0003``)
or Ctrl-D (``\u0004``), sent before the end was seen, is that stop (replayed as ``job_cancel`` at the time of
the ``write_stdin``; :attr:`~.model.ShellCall.killed_at`), not an exit status of the command's own.

A timeout: the shell tools (``shell``, ``shell_command``, ``local_shell_call``) kill a command at its
``timeout_ms`` (default 10 000 ms, ``DEFAULT_EXEC_COMMAND_TIMEOUT_MS``) with exit status 124, and the model's
output starts "command timed out after N milliseconds" (``build_content_with_timeout``; N is how long it ran, in
older releases the note alone with the timeout). That note is the tool's only there — in the model-facing
``function_call_output``, with exit status 124 or none — never in ``exec_command_end``'s ``aggregated_output``,
the command's own bytes (a command may print the same line and exit 1). Exit status 124 alone is also what
``timeout(1)`` returns, so it counts as the tool's timeout only with that note; without a model-facing output
(only ``exec_command_end``), when the call lasted (about) its ``timeout_ms``. A unified exec session is never
killed at its yield time, so there 124 is always the command's own. A
refusal (the user declined the approval: "exec command rejected by user"; the reviewer: "This action was
rejected due to unacceptable risk"; ``exec_command_end`` / ``CommandExecution`` status ``declined``) never ran
and is not imported.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

from .model import ShellCall, ShellCalls, parse_iso

__all__ = ["parse_codex", "unwrap_argv"]

_SHELL_NAMES = re.compile(r"(?:^|/)(?:ba|z|da|k)?sh$")
_TIMEOUT_RE = re.compile(r"^command timed out after (\d+) milliseconds\n?", re.IGNORECASE)
_EXIT_LINE_RE = re.compile(r"^(?:Exit code:|Process exited with code)\s*(-?\d+)\s*$", re.MULTILINE)
_RUNNING_RE = re.compile(r"^Process running with session ID (\d+)\s*$", re.MULTILINE)
_REFUSED_RE = re.compile(r"^(?:exec command rejected by user|This action was rejected due to unacceptable risk)",
                         re.IGNORECASE)
_HEADER_RE = re.compile(r"^(?:Chunk ID|Wall time|Total output lines|Original token count|Exit code|Process exited "
                        r"with code|Process running with session ID)\b")
TIMEOUT_EXIT = 124
_NO_RESULT = "no result in the transcript (the session ended before the call returned)"
#: the shell tools' timeout when a call names none (codex-rs exec.rs ``DEFAULT_EXEC_COMMAND_TIMEOUT_MS``)
DEFAULT_TIMEOUT_S = 10.0
#: a call whose run lasted at least this share of its timeout_ms was ended by that timeout
_TIMEOUT_SHARE = 0.95
#: response item types (also the lines of rollouts written before the {timestamp, type, payload} envelope)
_ITEM_TYPES = frozenset({"message", "reasoning", "function_call", "function_call_output", "local_shell_call",
                         "local_shell_call_output", "custom_tool_call", "custom_tool_call_output", "web_search_call"})
_SHELL_TOOL_RE = re.compile(r"\b(?:exec_command|shell_command|shell|local_shell)\b")
#: the tools that kill a command at their timeout (exit 124 and the note); a unified exec session is never killed
_TIMEOUT_KINDS = frozenset({"shell", "shell_command", "local_shell_call"})
#: codex-rs apply-patch ``APPLY_PATCH_COMMANDS``: a shell call running one of them is a file edit Codex makes itself
_APPLY_PATCH_COMMANDS = ("apply_patch", "applypatch")
#: the heredoc form codex-rs intercepts (apply-patch invocation.rs ``extract_apply_patch_from_bash``): the script's
#: only statement is ``apply_patch <<'EOF' ... EOF``, optionally after ``cd PATH &&`` (one plain or quoted word)
_APPLY_PATCH_HEREDOC_RE = re.compile(
    r"\A\s*(?:cd\s+(?:'[^'\n]*'|\"[^\"\n]*\"|[^\s;&|'\"]+)\s*&&\s*)?(?:apply_patch|applypatch)\s*<<-?\s*"
    r"(['\"]?)(\w+)\1[ \t]*\n.*?\n\2[ \t]*\n?\s*\Z", re.DOTALL)
#: characters a ``write_stdin`` sends to stop a unified exec session's process: Ctrl-C (interrupt), Ctrl-D (end of
#: input)
_STOP_CHARS = {"\x03": "Ctrl-C", "\x04": "Ctrl-D"}


def unwrap_argv(argv: list[Any]) -> str:
    """The command line of an argv: ``["bash", "-lc", "ls -l"]`` → ``ls -l``, else ``shlex.join(argv)``."""
    words = [str(a) for a in argv]
    if len(words) == 3 and _SHELL_NAMES.search(words[0]) and words[1] in ("-c", "-lc", "-l -c", "-ic"):
        return words[2]
    return shlex.join(words)


def is_apply_patch(argv: list[Any] | None = None, script: str | None = None) -> bool:
    """Whether a shell call is an ``apply_patch`` file edit, which Codex intercepts and applies itself (codex-rs
    apply-patch ``maybe_parse_apply_patch``): argv ``["apply_patch", PATCH]`` (or ``applypatch``), or a shell's
    ``-c``/``-lc`` script (``script``, or the last word of such an argv) whose only statement is ``apply_patch
    <<'EOF' ... EOF``, optionally after ``cd PATH &&``. Nothing runs in a shell for such a call."""
    if argv is not None:
        words = [str(a) for a in argv]
        if len(words) == 2 and words[0] in _APPLY_PATCH_COMMANDS:
            return True
        if len(words) == 3 and _SHELL_NAMES.search(words[0]) and words[1] in ("-c", "-lc"):
            script = words[2]
    return script is not None and bool(_APPLY_PATCH_HEREDOC_RE.match(script))


def _args(payload: dict[str, Any]) -> dict[str, Any]:
    raw = payload.get("arguments")
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


#: codex-rs ``SandboxErr::Denied`` ("sandbox denied exec error, exit code: {}, stdout: {}, stderr: {}", core/src/
#: error.rs) in the tool's "failed in sandbox {type:?} with execution error: {err}" (the command ran, in the
#: sandbox, and exited with that status: e.g. curl without network)
_SANDBOX_DENIED_RE = re.compile(r"^failed in sandbox \w+ with execution error: sandbox denied exec error, "
                                r"exit code: (-?\d+), stdout: (.*)$", re.DOTALL)


def _text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        for key in ("content", "output", "text"):
            if isinstance(output.get(key), str | list):
                return _text(output[key])
        return ""
    if isinstance(output, list):
        return "".join(str(i.get("text", "")) for i in output if isinstance(i, dict))
    return ""


def _parse_output(output: Any) -> tuple[str, int | None, float | None, str | None]:
    """``(text, exit_status, duration_s, running_session)`` of a ``function_call_output`` output."""
    text = _text(output)
    duration: float | None = None
    code: int | None = None
    try:
        structured = json.loads(text) if text.lstrip().startswith("{") else None
    except json.JSONDecodeError:
        structured = None
    if isinstance(structured, dict) and "output" in structured:
        meta = structured.get("metadata") if isinstance(structured.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        c = meta.get("exit_code")
        code = c if isinstance(c, int) and not isinstance(c, bool) else None
        d = meta.get("duration_seconds")
        duration = float(d) if isinstance(d, int | float) else None
        return str(structured.get("output") or ""), code, duration, None
    lines = text.split("\n")
    n = 0
    while n < len(lines) and _HEADER_RE.match(lines[n]):
        n += 1
    if n < len(lines) and lines[n].rstrip() == "Output:":
        head, body = "\n".join(lines[:n]), "\n".join(lines[n + 1:])
        m = _EXIT_LINE_RE.search(head)
        code = int(m.group(1)) if m else None
        w = re.search(r"^Wall time:\s*([\d.]+)\s*seconds", head, re.MULTILINE)
        duration = float(w.group(1)) if w else None
        r = _RUNNING_RE.search(head)
        return body, code, duration, (r.group(1) if r else None)
    m = _SANDBOX_DENIED_RE.match(text)
    if m:  # the command ran in the sandbox and exited non-zero; codex-rs SandboxErr::Denied's text
        out, _, err = m.group(2).partition(", stderr: ")
        return out + ("\n" if out and err and not out.endswith("\n") else "") + err, int(m.group(1)), None, None
    m = _EXIT_LINE_RE.match(text)
    if m:  # "Exit code: 1\n..." without the Output: header
        return text[m.end():].lstrip("\n"), int(m.group(1)), None, None
    r = _RUNNING_RE.search(text)
    return text, None, None, (r.group(1) if r else None)


def _duration(d: Any) -> float | None:
    """Seconds of a ``{secs, nanos}`` duration, or None."""
    if not isinstance(d, dict):
        return None
    try:
        return float(d.get("secs", 0)) + float(d.get("nanos", 0)) / 1e9
    except (TypeError, ValueError):
        return None


def _code(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Rollout:
    def __init__(self, seen: ShellCalls) -> None:
        self.seen = seen
        self.calls: dict[str, ShellCall] = {}
        self.order: list[str] = []
        self.ended: set[str] = set()  # call ids settled by exec_command_end
        self.end_codes: dict[str, int | None] = {}  # call id -> exit status its exec_command_end gave
        self.model_outputs: dict[str, Any] = {}  # call id -> its function_call_output's output (model-facing)
        self.aborted: set[str] = set()  # call ids in flight when their turn was aborted (turn_aborted)
        self.asked: dict[str, float | None] = {}  # call id -> the timeout (s) the call asked for
        self.sessions: dict[str, ShellCall] = {}  # unified exec session id -> call
        self.polls: dict[str, ShellCall] = {}  # write_stdin call id -> the call it polls
        self.stops: dict[str, tuple[float | None, str]] = {}  # write_stdin call id -> (when, Ctrl-C/Ctrl-D) it sent
        self.stop_asked: dict[str, tuple[float | None, str]] = {}  # call id -> the first stop sent to its session
        self.kinds: dict[str, str] = {}  # call id -> tool (shell, shell_command, exec_command, local_shell_call)
        self.processes: set[str] = set()  # process ids of calls settled by exec_command_end
        self.scripts: dict[str, int] = {}  # open code-mode script call id -> commands it ran so far
        self.script_shells: dict[str, bool] = {}  # script call id -> its source names a shell tool
        self.unread_scripts = 0  # scripts that name a shell tool but ran no command the rollout shows
        self.cwd: str | None = None  # the session's / turn's working directory (session_meta, turn_context)

    def context(self, p: dict[str, Any]) -> None:
        """``session_meta`` / ``turn_context``: the working directory later calls run in unless they name one."""
        if isinstance(p.get("cwd"), str) and p["cwd"]:
            self.cwd = p["cwd"]

    def _cwd(self, workdir: Any) -> str | None:
        """Where a call ran: its ``workdir`` (relative to the turn's ``cwd``, as codex-rs resolves it), else the
        turn's ``cwd``."""
        if isinstance(workdir, str) and workdir.strip():
            if workdir.startswith("/") or self.cwd is None:
                return workdir
            return os.path.normpath(os.path.join(self.cwd, workdir))
        return self.cwd

    def new_call(self, kind: str, call_id: str, command: str, ts: float | None, timeout_ms: Any,
                 workdir: Any = None) -> ShellCall | None:
        if not command or call_id in self.calls:
            return None
        self.kinds[call_id] = kind
        call = ShellCall(index=len(self.order) + 1, call_id=call_id, command=command, started_at=ts,
                         timeout_s=float(timeout_ms) / 1000 if isinstance(timeout_ms, int | float)
                         and not isinstance(timeout_ms, bool) else None, cwd=self._cwd(workdir))
        self.asked[call_id] = call.timeout_s
        call.skip(_NO_RESULT)
        self.calls[call_id] = call
        self.order.append(call_id)
        return call

    def shell_call(self, kind: str, call_id: str, argv: list[Any] | None, script: str | None, ts: float | None,
                   timeout_ms: Any, workdir: Any = None) -> None:
        """A call of a shell tool (``argv`` or a ``script`` string): a shell call, unless it is an ``apply_patch``
        file edit, which Codex makes itself (counted in :attr:`ShellCalls.seen`, not imported)."""
        if is_apply_patch(argv, script):
            self.seen.note("apply_patch file edit(s) made through a shell tool (Codex applies the patch itself and "
                           "nothing runs in a shell: not imported)")
            return
        self.new_call(kind, call_id, unwrap_argv(argv) if argv is not None else str(script or ""), ts, timeout_ms,
                      workdir)

    def response_item(self, p: dict[str, Any], ts: float | None) -> None:
        kind = p.get("type")
        call_id = str(p.get("call_id") or p.get("id") or "")
        if kind == "function_call":
            name, args = p.get("name"), _args(p)
            if name == "shell" and isinstance(args.get("command"), list):
                self.shell_call("shell", call_id, args["command"], None, ts, args.get("timeout_ms"),
                                args.get("workdir"))
            elif name == "shell_command" and isinstance(args.get("command"), str):
                self.shell_call("shell_command", call_id, None, args["command"], ts, args.get("timeout_ms"),
                                args.get("workdir"))
            elif name == "exec_command" and isinstance(args.get("cmd"), str):
                self.shell_call("exec_command", call_id, None, args["cmd"], ts, None, args.get("workdir"))
            elif name == "write_stdin":
                target = self.sessions.get(str(args.get("session_id")))
                if target is not None:
                    self.polls[call_id] = target
                    chars = str(args.get("chars") or "")
                    stop = next((n for c, n in _STOP_CHARS.items() if c in chars), None)
                    if stop is not None:
                        self.stops[call_id] = (ts, stop)
                        self.stop_asked.setdefault(target.call_id, (ts, stop))
            elif isinstance(name, str) and name in ("shell", "shell_command", "exec_command", "local_shell"):
                self.seen.note(f"{name} function_call(s) with arguments of an unknown shape")
        elif kind == "local_shell_call":
            action = p.get("action") if isinstance(p.get("action"), dict) else {}
            assert isinstance(action, dict)
            if isinstance(action.get("command"), list):
                self.shell_call("local_shell_call", call_id, action["command"], None, ts, action.get("timeout_ms"),
                                action.get("working_directory"))
            else:
                self.seen.note("local_shell_call item(s) of an unknown shape")
        elif kind == "custom_tool_call":
            name = str(p.get("name") or "")
            if name == "exec":  # code mode: the commands it runs arrive as CommandExecution items
                self.scripts[call_id] = 0
                self.script_shells[call_id] = bool(_SHELL_TOOL_RE.search(str(p.get("input") or "")))
            elif _SHELL_TOOL_RE.fullmatch(name):
                self.seen.note(f"custom_tool_call {name!r} item(s) of an unknown shape")
        elif kind == "custom_tool_call_output" and call_id in self.scripts:
            if self.scripts.pop(call_id) == 0 and self.script_shells.pop(call_id, False):
                self.unread_scripts += 1
        elif kind in ("function_call_output", "local_shell_call_output", "custom_tool_call_output"):
            if call_id in self.polls:
                self._poll(self.polls[call_id], p.get("output"), ts, self.stops.get(call_id))
            elif call_id in self.calls and call_id in self.ended:
                self._model_note(self.calls[call_id], p.get("output"))
            elif call_id in self.calls:
                self._output(self.calls[call_id], p.get("output"), ts)

    def turn_aborted(self, p: dict[str, Any], ts: float | None) -> None:
        """``event_msg`` ``turn_aborted`` (the user interrupted the turn, or a new turn replaced it): every call
        still in flight was stopped then (it ran until then; as for an ``"aborted"`` output, the rollout cannot
        tell a call still waiting for approval from one that ran)."""
        reason = str(p.get("reason") or "").strip() or "no reason given"
        for call_id in self.order:
            call = self.calls[call_id]
            if call.ran or call.skip_reason != _NO_RESULT or (
                    call.started_at is not None and ts is not None and call.started_at > ts):
                continue  # it has a result, or came after
            self.aborted.add(call_id)
            call.ran, call.skip_reason, call.ended_at = True, None, ts
            call.interrupted, call.output, call.exit_status = True, "", None
            call.stopped_how = f"stopped when its turn was aborted ({reason})"

    def _output(self, call: ShellCall, output: Any, ts: float | None) -> None:
        self.model_outputs.setdefault(call.call_id, output)
        text, code, duration, running = _parse_output(output)
        if call.call_id in self.aborted:  # stopped with its turn; what came after is what it had printed
            if text.strip() != "aborted" and code is None and running is None:
                call.output = text
            return
        call.ran, call.skip_reason = True, None
        if _REFUSED_RE.match(text.strip()):
            call.output = text
            call.skip(f"refused: {text.strip()[:160]!r}")
            return
        call.ended_at = (call.started_at + duration if call.started_at is not None and duration is not None
                         else ts)
        if text.strip() == "aborted" and code is None and running is None:
            # the turn was interrupted while the call was in flight: it ran, and was stopped then
            call.interrupted, call.output, call.exit_status = True, "", None
            return
        if running is not None:
            call.background = True
            self.sessions[running] = call
            call.output, call.exit_status = text, None
            return
        self._settle(call, text, code, duration, model_text=True)

    def _note(self, call: ShellCall, text: str, code: int | None) -> re.Match[str] | None:
        """The tool's timeout note at the start of ``text``, the model-facing output of ``call``'s tool: only the
        tools that kill at a timeout write it, with exit status 124 (or, in older releases, the note alone)."""
        if self.kinds.get(call.call_id) not in _TIMEOUT_KINDS or code not in (TIMEOUT_EXIT, None):
            return None
        return _TIMEOUT_RE.match(text)

    def _limit(self, call: ShellCall, note: re.Match[str] | None) -> float:
        """The tool's timeout for ``call``: the one it asked for; else the note's (the limit in older releases,
        how long it ran in newer ones: about the limit either way), else the tools' default."""
        asked = self.asked.get(call.call_id)
        if asked is not None:
            return asked
        if note is not None:
            return float(max(1, round(int(note.group(1)) / 1000)))
        return DEFAULT_TIMEOUT_S

    def _settle(self, call: ShellCall, text: str, code: int | None, duration: float | None, *,
                model_text: bool) -> None:
        """Settle ``call`` from its result: ``text`` is the model-facing output (``model_text``: the tool's own
        timeout note may lead it) or the command's raw output (``aggregated_output``: any such line is the
        command's own)."""
        t = self._note(call, text, code) if model_text else None
        if t:
            text = text[t.end():]
        # the shell tools kill a command at its timeout_ms (exit 124, the note before the output); exit 124 alone is
        # also timeout(1)'s own status: without the model-facing output, only a run that lasted the tool's timeout
        # was ended by it (that output, when it comes, decides: _model_note). A unified exec session is never
        # killed at its yield time.
        limit = self._limit(call, t)
        if duration is None:
            duration = call.duration_s
        by_tool = not model_text and code == TIMEOUT_EXIT and self.kinds.get(call.call_id) in _TIMEOUT_KINDS and (
            duration is None or duration >= _TIMEOUT_SHARE * limit)
        if t or by_tool:
            call.timed_out, call.exit_status, call.timeout_s = True, None, limit
        elif code is None:
            call.skip("no exit status in the transcript's result (neither the output nor an exec_command_end "
                      "event gives one)")
        else:
            call.timed_out, call.exit_status, call.timeout_s = False, code, self.asked.get(call.call_id)
            # exec --json: no times, no note: 124 may be the tool's timeout or the command's own
            call.maybe_timed_out = code == TIMEOUT_EXIT and duration is None and self.kinds.get(
                call.call_id) == "exec_json"
        call.output = text

    def _model_note(self, call: ShellCall, output: Any) -> None:
        """The model-facing output of a call its ``exec_command_end`` settled: for exit status 124 it says whether
        the tool's timeout ended the command (its note) or the command's own (``timeout 10 ...``: no note)."""
        if not call.ran or call.background or self.end_codes.get(call.call_id) != TIMEOUT_EXIT \
                or self.kinds.get(call.call_id) not in _TIMEOUT_KINDS:
            return
        text, code, _duration, _running = _parse_output(output)
        note = self._note(call, text, code)
        if note is not None:
            call.timed_out, call.exit_status, call.timeout_s = True, None, self._limit(call, note)
        else:
            call.timed_out, call.exit_status, call.timeout_s = False, TIMEOUT_EXIT, self.asked.get(call.call_id)

    def _poll(self, call: ShellCall, output: Any, ts: float | None, stop: tuple[float | None, str] | None) -> None:
        text, code, _duration, running = _parse_output(output)
        call.final_output = (call.final_output if call.final_output is not None else call.output) + text
        if running is None and code is not None:
            self._session_end(call, ts, code)

    def _session_end(self, call: ShellCall, end: float | None, code: int | None, *, exact: bool = False) -> None:
        """A unified exec session's process ended (at ``end``, with ``code``): by itself, or because the agent
        stopped it (a ``write_stdin`` of Ctrl-C / Ctrl-D before then: replayed as ``job_cancel`` at that time).
        ``exact``: from its ``exec_command_end`` (its own duration and status), which replaces what a poll saw."""
        if call.killed_at is not None or (call.finished_at is not None and not exact):
            return
        stop = self.stop_asked.get(call.call_id)
        if stop is not None and stop[0] is not None:
            call.killed_at, call.killed_by = stop[0], f"write_stdin {stop[1]}"
        else:
            call.finished_at, call.final_exit_status = end, code

    def exec_end(self, p: dict[str, Any], ts: float | None) -> None:
        call = self.calls.get(str(p.get("call_id") or ""))
        if call is None:
            return
        if p.get("process_id") is not None:
            self.processes.add(str(p["process_id"]))
        status = str(p.get("status") or "")
        out = p.get("aggregated_output")
        if not isinstance(out, str):
            out = str(p.get("stdout") or "") + str(p.get("stderr") or "")
        code = _code(p.get("exit_code"))
        self.ended.add(call.call_id)
        self.end_codes[call.call_id] = code
        if call.call_id in self.aborted:  # stopped with its turn: its end is that stop's doing
            call.output = out
            return
        call.ran, call.skip_reason = True, None
        if status == "declined" or _REFUSED_RE.match(out.strip()):
            call.output = out
            call.skip(f"refused: {(out.strip() or 'declined')[:160]!r}")
            return
        duration = _duration(p.get("duration"))
        end = (call.started_at + duration) if call.started_at is not None and duration is not None else ts
        if call.background:  # a unified exec session that outlived its first answer: now it ended
            call.final_output = out
            self._session_end(call, end, code, exact=True)
            return
        call.ended_at = end
        self._settle(call, out, code, duration, model_text=False)
        if call.call_id in self.model_outputs:  # its model-facing output came first: that decides an exit 124
            self._model_note(call, self.model_outputs[call.call_id])

    def exec_json_item(self, event: str, item: dict[str, Any]) -> None:
        """``codex exec --json``: an ``item.*`` event of a ``command_execution`` item (see the module docstring)."""
        if item.get("type") != "command_execution":
            return
        item_id, raw = str(item.get("id") or ""), item.get("command")
        if isinstance(raw, list):
            command = unwrap_argv(raw)
        else:
            try:
                command = unwrap_argv(shlex.split(str(raw or "")))
            except ValueError:
                command = str(raw or "")
        call = self.calls.get(item_id) or self.new_call("exec_json", item_id, command, None, None, None)
        status = str(item.get("status") or "")
        if call is None or event != "item.completed" or status == "in_progress":
            return
        out = str(item.get("aggregated_output") or "")
        call.ran, call.skip_reason = True, None
        if status == "declined":
            call.output = out
            call.skip(f"refused: the command was declined ({(out.strip() or 'status declined')[:140]!r})")
            return
        code = _code(item.get("exit_code"))
        if code is None:
            call.output = out
            call.skip(f"no exit status in the transcript (status {status or 'missing'}, exit_code null)")
            return
        self._settle(call, out, code, None, model_text=False)

    def item_completed(self, p: dict[str, Any], ts: float | None) -> None:
        """Code mode: a ``CommandExecution`` item is one command a script ran (see the module docstring)."""
        item = p.get("item") if isinstance(p.get("item"), dict) else None
        if item is None or item.get("type") != "CommandExecution":
            return
        process = str(item.get("process_id") or "")
        if process and process in self.processes:
            return  # the same process as a call settled by exec_command_end
        argv, item_id = item.get("command"), str(item.get("id") or f"item{len(self.order) + 1}")
        command = unwrap_argv(argv) if isinstance(argv, list) else str(argv or "")
        duration = _duration(item.get("duration"))
        end_ms = p.get("completed_at_ms")
        end = float(end_ms) / 1000 if isinstance(end_ms, int | float) and not isinstance(end_ms, bool) else ts
        start_ms = p.get("started_at_ms")
        start = (end - duration if end is not None and duration is not None else
                 float(start_ms) / 1000 if isinstance(start_ms, int | float) and not isinstance(start_ms, bool) else ts)
        call = self.new_call("code_mode", item_id, command, start, None)
        if call is None:
            if command:
                self.seen.note("CommandExecution item(s) repeated (read once)")
            else:
                self.seen.note("CommandExecution item(s) without a command")
            return
        for script in self.scripts:
            self.scripts[script] += 1
        if process:
            self.processes.add(process)
        out = item.get("aggregated_output")
        if not isinstance(out, str):
            out = str(item.get("stdout") or "") + str(item.get("stderr") or "")
        call.ran, call.skip_reason, call.ended_at = True, None, end
        if str(item.get("status") or "") == "declined":
            call.output = out
            call.skip(f"refused: {(out.strip() or 'declined')[:160]!r}")
            return
        self._settle(call, out, _code(item.get("exit_code")), duration, model_text=False)


def parse_codex(path: str | os.PathLike[str]) -> ShellCalls:
    """The shell calls of a Codex rollout file (or a ``codex exec --json`` event stream), in call order,
    including the ones not imported (``ran`` False, with a ``skip_reason``).

    :raises OSError: the file cannot be read. Malformed lines, unknown line types and unknown tools are skipped;
        what was seen of them that might have held shell calls is counted in :attr:`ShellCalls.seen`.
    """
    seen = ShellCalls()
    rollout = _Rollout(seen)
    for raw in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        if not raw.strip():
            continue
        seen.lines += 1
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            seen.note("line(s) that are not JSON")
            continue
        if not isinstance(line, dict):
            continue
        ts = parse_iso(line.get("timestamp"))
        payload = line.get("payload")
        if str(line.get("type") or "").startswith("item.") and isinstance(line.get("item"), dict):
            rollout.exec_json_item(str(line["type"]), line["item"])  # codex exec --json
            continue
        if not isinstance(payload, dict):
            if line.get("type") in _ITEM_TYPES:  # a rollout from before the {timestamp, type, payload} envelope:
                rollout.response_item(line, ts)  # its items carry no time (durations come from their outputs)
            elif isinstance(line.get("message"), dict) and line.get("type") in ("user", "assistant"):
                seen.note("line(s) of a Claude Code session (import it with: agent-tools import claude-code FILE)")
            continue
        if line.get("type") == "response_item":
            rollout.response_item(payload, ts)
        elif line.get("type") == "event_msg" and payload.get("type") == "exec_command_end":
            rollout.exec_end(payload, ts)
        elif line.get("type") == "event_msg" and payload.get("type") == "item_completed":
            rollout.item_completed(payload, ts)
        elif line.get("type") == "event_msg" and payload.get("type") == "turn_aborted":
            rollout.turn_aborted(payload, ts)
        elif line.get("type") in ("session_meta", "turn_context"):
            rollout.context(payload)
    unread = rollout.unread_scripts + sum(1 for c, n in rollout.scripts.items() if n == 0
                                           and rollout.script_shells.get(c))
    if unread:
        seen.note("code-mode custom_tool_call 'exec' script(s) naming a shell tool whose commands the rollout does "
                  "not show (no CommandExecution item)", unread)
    seen.extend(rollout.calls[c] for c in rollout.order)
    return seen
