"""Codex CLI rollouts (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<ts>-<uuid>.jsonl``): the shell calls.

Facts used (no official spec; checked against Codex's sources and public readers, see
/work/shared/TRANSCRIPTS.md). One JSON object per line, ``{timestamp, type, payload}`` with ``type`` in
``session_meta``, ``turn_context``, ``response_item``, ``event_msg``, ``compacted`` (others are skipped).

Calls are ``response_item`` payloads:

* ``function_call`` ``{name, arguments, call_id}``, ``arguments`` a JSON *string* (parsed again):
  ``shell`` ``{command: argv, workdir?, timeout_ms?}`` (older releases), ``shell_command`` ``{command: str,
  workdir?, timeout_ms?}``, ``exec_command`` ``{cmd, workdir?, yield_time_ms?}`` (unified exec: a command still
  running after ``yield_time_ms`` keeps running as a session the model polls with ``write_stdin {session_id,
  chars}``);
* ``local_shell_call`` ``{call_id, status, action: {type: "exec", command: argv, timeout_ms?}}``.

An argv ``["bash", "-lc", CMD]`` (any ``sh``/``bash``/``zsh`` with ``-c``/``-lc``) is the command line CMD.

Results, matched by ``call_id``:

* ``event_msg`` ``exec_command_end`` ``{call_id, stdout, stderr, aggregated_output, exit_code, duration
  {secs, nanos}, status}`` — preferred when present (the whole output and the real exit status; for a unified
  exec session it comes when the process ends);
* ``response_item`` ``function_call_output`` ``{call_id, output}``, whose ``output`` changed between releases:
  a JSON string ``{"output": ..., "metadata": {"exit_code", "duration_seconds"}}``; free text ``Exit code: N /
  Wall time: S seconds / [Total output lines: N /] Output: ...``; for ``exec_command`` ``Chunk ID / Wall time /
  Process exited with code N`` (or ``Process running with session ID N``) ``/ Original token count / Output:
  ...``; or an object / list of ``{type: "input_text", text}``.

A timeout is exit status 124 with "command timed out after N milliseconds" before the output. A refusal
(the user declined the approval: "exec command rejected by user"; the reviewer: "This action was rejected
due to unacceptable risk"; ``exec_command_end`` status ``declined``) never ran and is not imported.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

from .model import ShellCall, parse_iso

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


def unwrap_argv(argv: list[Any]) -> str:
    """The command line of an argv: ``["bash", "-lc", "ls -l"]`` → ``ls -l``, else ``shlex.join(argv)``."""
    words = [str(a) for a in argv]
    if len(words) == 3 and _SHELL_NAMES.search(words[0]) and words[1] in ("-c", "-lc", "-l -c", "-ic"):
        return words[2]
    return shlex.join(words)


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
    m = _EXIT_LINE_RE.match(text)
    if m:  # "Exit code: 1\n..." without the Output: header
        return text[m.end():].lstrip("\n"), int(m.group(1)), None, None
    r = _RUNNING_RE.search(text)
    return text, None, None, (r.group(1) if r else None)


class _Rollout:
    def __init__(self) -> None:
        self.calls: dict[str, ShellCall] = {}
        self.order: list[str] = []
        self.ended: set[str] = set()  # call ids settled by exec_command_end
        self.sessions: dict[str, ShellCall] = {}  # unified exec session id -> call
        self.polls: dict[str, ShellCall] = {}  # write_stdin call id -> the call it polls
        self.kinds: dict[str, str] = {}  # call id -> tool (shell, shell_command, exec_command, local_shell_call)

    def new_call(self, kind: str, call_id: str, command: str, ts: float | None, timeout_ms: Any) -> None:
        if not command or call_id in self.calls:
            return
        self.kinds[call_id] = kind
        call = ShellCall(index=len(self.order) + 1, call_id=call_id, command=command, started_at=ts,
                         timeout_s=float(timeout_ms) / 1000 if isinstance(timeout_ms, int | float)
                         and not isinstance(timeout_ms, bool) else None)
        call.skip("no result in the transcript (the session ended before the call returned)")
        self.calls[call_id] = call
        self.order.append(call_id)

    def response_item(self, p: dict[str, Any], ts: float | None) -> None:
        kind = p.get("type")
        call_id = str(p.get("call_id") or p.get("id") or "")
        if kind == "function_call":
            name, args = p.get("name"), _args(p)
            if name == "shell" and isinstance(args.get("command"), list):
                self.new_call("shell", call_id, unwrap_argv(args["command"]), ts, args.get("timeout_ms"))
            elif name == "shell_command" and isinstance(args.get("command"), str):
                self.new_call("shell_command", call_id, args["command"], ts, args.get("timeout_ms"))
            elif name == "exec_command" and isinstance(args.get("cmd"), str):
                self.new_call("exec_command", call_id, args["cmd"], ts, None)
            elif name == "write_stdin":
                target = self.sessions.get(str(args.get("session_id")))
                if target is not None:
                    self.polls[call_id] = target
        elif kind == "local_shell_call":
            action = p.get("action") if isinstance(p.get("action"), dict) else {}
            assert isinstance(action, dict)
            if isinstance(action.get("command"), list):
                self.new_call("local_shell_call", call_id, unwrap_argv(action["command"]), ts, action.get("timeout_ms"))
        elif kind in ("function_call_output", "local_shell_call_output", "custom_tool_call_output"):
            if call_id in self.polls:
                self._poll(self.polls[call_id], p.get("output"), ts)
            elif call_id in self.calls and call_id not in self.ended:
                self._output(self.calls[call_id], p.get("output"), ts)

    def _output(self, call: ShellCall, output: Any, ts: float | None) -> None:
        text, code, duration, running = _parse_output(output)
        call.ran, call.skip_reason = True, None
        if _REFUSED_RE.match(text.strip()):
            call.output = text
            call.skip(f"refused: {text.strip()[:160]!r}")
            return
        call.ended_at = (call.started_at + duration if call.started_at is not None and duration is not None
                         else ts)
        if running is not None:
            call.background = True
            self.sessions[running] = call
            call.output, call.exit_status = text, None
            return
        self._settle(call, text, code)

    def _settle(self, call: ShellCall, text: str, code: int | None) -> None:
        t = _TIMEOUT_RE.match(text)
        if t:
            text = text[t.end():]
            call.timeout_s = int(t.group(1)) / 1000
        # the shell tools kill a command at its timeout_ms (exit 124, the note before the output); a unified
        # exec session is never killed at its yield time, so there only the note counts
        if t or (code == TIMEOUT_EXIT and self.kinds.get(call.call_id) != "exec_command"):
            call.timed_out, call.exit_status = True, None
        elif code is None:
            call.skip("no exit status in the transcript's result")
        else:
            call.exit_status = code
        call.output = text

    def _poll(self, call: ShellCall, output: Any, ts: float | None) -> None:
        text, code, _duration, running = _parse_output(output)
        call.final_output = (call.final_output if call.final_output is not None else call.output) + text
        if running is None and code is not None and call.finished_at is None:
            call.finished_at, call.final_exit_status = ts, code

    def exec_end(self, p: dict[str, Any], ts: float | None) -> None:
        call = self.calls.get(str(p.get("call_id") or ""))
        if call is None:
            return
        status = str(p.get("status") or "")
        out = p.get("aggregated_output")
        if not isinstance(out, str):
            out = str(p.get("stdout") or "") + str(p.get("stderr") or "")
        code = p.get("exit_code")
        code = code if isinstance(code, int) and not isinstance(code, bool) else None
        self.ended.add(call.call_id)
        call.ran, call.skip_reason = True, None
        if status == "declined" or _REFUSED_RE.match(out.strip()):
            call.output = out
            call.skip(f"refused: {(out.strip() or 'declined')[:160]!r}")
            return
        d = p.get("duration") if isinstance(p.get("duration"), dict) else None
        duration = (float(d.get("secs", 0)) + float(d.get("nanos", 0)) / 1e9) if d else None
        end = (call.started_at + duration) if call.started_at is not None and duration is not None else ts
        if call.background:  # a unified exec session that outlived its first answer: now it ended
            call.finished_at, call.final_exit_status, call.final_output = end, code, out
            return
        call.ended_at = end
        self._settle(call, out, code)


def parse_codex(path: str | os.PathLike[str]) -> list[ShellCall]:
    """The shell calls of a Codex rollout file, in call order, including the ones not imported (``ran`` False,
    with a ``skip_reason``).

    :raises OSError: the file cannot be read. Malformed lines, unknown line types and unknown tools are skipped.
    """
    rollout = _Rollout()
    for raw in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if not isinstance(line, dict) or not isinstance(line.get("payload"), dict):
            continue
        ts = parse_iso(line.get("timestamp"))
        payload = line["payload"]
        if line.get("type") == "response_item":
            rollout.response_item(payload, ts)
        elif line.get("type") == "event_msg" and payload.get("type") == "exec_command_end":
            rollout.exec_end(payload, ts)
    return [rollout.calls[c] for c in rollout.order]
