"""Claude Code session transcripts (``~/.claude/projects/<slug>/<sessionId>.jsonl``): the Bash calls.

Facts used (no official spec; checked against public parsers, see /work/shared/TRANSCRIPTS.md): one JSON
object per line; ``assistant`` lines carry ``tool_use`` blocks ``{id, name: "Bash", input: {command,
timeout? (ms), run_in_background?}}``; a later ``user`` line carries the ``tool_result`` block
``{tool_use_id, content, is_error?}`` and often a ``toolUseResult`` sidecar ``{stdout, stderr, interrupted,
backgroundTaskId?, ...}`` (or a plain string ``"Error: ..."`` on errors). There is no exit-code field:

* later versions start a failed command's content with ``Exit code N``; exit 0 is implied;
* **1.0.x** reports a failed command as ``is_error: true`` with the raw output as content and no ``Exit code``
  line (the sidecar reads ``"Error: <output>"``): such a call ran and failed, and is imported with exit
  status 1 (the transcript says only that it was non-zero);
* a **refusal** is also an ``is_error`` result, for a command that never ran: the user's "The user doesn't
  want to proceed with this tool use...", ``[Request interrupted by user for tool use]``, a
  ``<tool_use_error>...</tool_use_error>`` (the tool rejected the call), or a permission text ("Permission to
  use Bash with command ... has been denied.", "Claude requested permissions to use Bash, but you haven't
  granted it yet.", "This Bash command contains multiple operations. The following parts require
  approval: ...", "PreToolUse:Bash hook error: ..."). Those calls are not imported;
  :attr:`ShellCall.skip_reason` quotes the text. (``[Request interrupted by user for tool use]`` with the
  sidecar's ``interrupted: true`` is a command the user stopped while it ran: imported as interrupted);
* empty output reads ``(Bash completed with no output)`` (or ``Tool ran without output or errors``);
* a timeout reads ``Command timed out after 2m 0s`` (older ``2m 0.0s``), usually with ``Exit code 143``;
* a background command answers ``Command running in background with ID: <id>`` (or "... was moved to the
  background (ID: <id>)"); its end shows in a later ``BashOutput {bash_id}`` / ``TaskOutput {task_id}``
  result (``<status>completed</status>``, ``<exit_code>N</exit_code>``, ``<stdout>``/``<output>``), a
  ``KillShell {shell_id}`` / ``TaskStop {task_id}``, or a ``<task-notification>`` user message
  (``<tool-use-id>``, ``<task-id>``, ``<status>``, "... (exit code N)").

Durations come from the lines' ``timestamp``. Unknown line types and fields are skipped.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from .model import ShellCall, parse_iso

__all__ = ["REFUSAL_PATTERNS", "parse_claude_code"]

_EXIT_RE = re.compile(r"^Exit code (-?\d+)\s*\n?")
_TIMEOUT_RE = re.compile(r"\n?Command timed out after (?:(\d+)m\s*)?([\d.]+)s\.?\s*", re.IGNORECASE)
_NO_OUTPUT = ("(Bash completed with no output)", "Tool ran without output or errors")
# the tool's own answer for a background command (its first line; a command's output may quote these words)
_BG_RE = re.compile(r"^\s*(?:Command running in background with ID:\s*([\w-]+)|Command [^\n]*moved to the "
                    r"background \(ID:\s*([\w-]+)\))[^\n]*")
_TAG_RE = r"<{0}>\n?(.*?)\n?</{0}>"

#: texts of ``is_error`` results for commands that never ran (permission refusals and tool errors)
REFUSAL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("refused by the user", re.compile(r"The user doesn't want to (?:proceed|take this action)", re.I)),
    ("interrupted before it ran", re.compile(r"^\[Request interrupted by user", re.I)),
    ("rejected by the tool", re.compile(r"<tool_use_error>", re.I)),
    ("denied by a permission rule", re.compile(r"Permission to use \w+ (?:with command .* )?has been denied",
                                               re.I | re.S)),
    ("not permitted (no permission granted)", re.compile(r"requested permissions to use \w+, but you haven't "
                                                         r"granted it", re.I)),
    ("needed approval", re.compile(r"^This \w+ command contains multiple operations\. The following parts require "
                                   r"approval|^Classifier '.*' requires approval", re.I)),
    ("blocked by a hook", re.compile(r"^PreToolUse:\w+ hook (?:error|returned blocking error)", re.I)),
    ("blocked (directory outside the project)", re.compile(r"^cd to '.*' was blocked", re.I)),
)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _tag(text: str, name: str) -> str | None:
    m = re.search(_TAG_RE.format(re.escape(name)), text, re.DOTALL)
    return m.group(1) if m else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return None


def refusal_of(text: str) -> str | None:
    """``"<what>: <the text>"`` when ``text`` (an ``is_error`` result) is a refusal, else None."""
    stripped = text.strip()
    for what, pattern in REFUSAL_PATTERNS:
        if pattern.search(stripped):
            quoted = re.sub(r"</?tool_use_error>", "", stripped)
            return f"{what}: {' '.join(quoted.split())[:160]!r}"
    return None


class _Session:
    """Parsing state: calls by tool_use id, background ids, follow-up tool_use ids."""

    def __init__(self) -> None:
        self.calls: dict[str, ShellCall] = {}
        self.order: list[str] = []
        self.by_background_id: dict[str, ShellCall] = {}
        self.followups: dict[str, tuple[str, str]] = {}  # follow-up tool_use id -> (kind, background id)
        self.chunks: dict[int, list[str]] = {}  # background call index -> output chunks seen by follow-ups

    def tool_use(self, block: dict[str, Any], ts: float | None) -> None:
        name = block.get("name")
        inp = block.get("input") if isinstance(block.get("input"), dict) else {}
        assert isinstance(inp, dict)
        tid = str(block.get("id", f"call{len(self.order) + 1}"))
        if name == "Bash":
            timeout_ms = inp.get("timeout")
            call = ShellCall(index=len(self.order) + 1, call_id=tid, command=str(inp.get("command", "")),
                             started_at=ts, timeout_s=float(timeout_ms) / 1000
                             if isinstance(timeout_ms, int | float) and not isinstance(timeout_ms, bool) else 120.0)
            call.skip("no result in the transcript (the session ended before the call returned)")
            self.calls[tid] = call
            self.order.append(tid)
        elif name in ("BashOutput", "TaskOutput"):
            self.followups[tid] = ("output", str(inp.get("bash_id") or inp.get("task_id") or ""))
        elif name in ("KillShell", "KillBash", "TaskStop"):
            self.followups[tid] = ("kill", str(inp.get("shell_id") or inp.get("bash_id") or inp.get("task_id") or ""))

    def tool_result(self, block: dict[str, Any], sidecar: Any, ts: float | None) -> None:
        tid = str(block.get("tool_use_id"))
        call = self.calls.get(tid)
        if call is not None:
            self._result(call, block, sidecar, ts)
            return
        follow = self.followups.get(tid)
        if follow is not None:
            self._followup(follow, block, sidecar, ts)

    def _result(self, call: ShellCall, block: dict[str, Any], sidecar: Any, ts: float | None) -> None:
        text = _content_text(block.get("content"))
        call.ran, call.skip_reason, call.ended_at = True, None, ts
        is_error = bool(block.get("is_error"))
        side = sidecar if isinstance(sidecar, dict) else {}
        if is_error:
            refused = refusal_of(text)
            if refused is not None and not side.get("interrupted"):  # interrupted while running: it ran
                call.output = text
                call.skip(refused)
                return
        m = _EXIT_RE.match(text)
        exit_status = int(m.group(1)) if m else None
        if m:
            text = text[m.end():]
        t = _TIMEOUT_RE.search(text)
        bg = _BG_RE.match(text)
        bg_id = str(side.get("backgroundTaskId") or (bg and (bg.group(1) or bg.group(2))) or "")
        if t:
            call.timed_out = True
            call.timeout_s = int(t.group(1) or 0) * 60 + float(t.group(2))
            text = text[:t.start()] + text[t.end():]
            exit_status = None  # killed by the tool, not an exit of the command
        elif bg_id:
            call.background = True
            self.by_background_id[bg_id] = call
            exit_status = None
            text = text[bg.end():].lstrip("\n") if bg else text
        elif side.get("interrupted"):
            call.interrupted = True
            exit_status = None
            text = re.sub(r"\n?\[Request interrupted by user[^\]]*\]\s*$", "", text)
        elif is_error and exit_status is None:
            exit_status = 1  # 1.0.x: a failed command, raw output, no "Exit code N" line: non-zero, not said which
        elif exit_status is None:
            exit_status = 0
        if "stdout" in side or "stderr" in side:
            out = str(side.get("stdout") or "")
            err = str(side.get("stderr") or "")
            text = out + ("\n" if out and err and not out.endswith("\n") else "") + err
            t2 = _TIMEOUT_RE.search(text)
            if t2:
                text = text[:t2.start()] + text[t2.end():]
            if call.background:
                b2 = _BG_RE.match(text)
                text = text[b2.end():].lstrip("\n") if b2 else text
        if text.strip() in _NO_OUTPUT:
            text = ""
        call.output = text
        call.exit_status = exit_status

    def _followup(self, follow: tuple[str, str], block: dict[str, Any], sidecar: Any, ts: float | None) -> None:
        kind, bg_id = follow
        call = self.by_background_id.get(bg_id)
        if call is None:
            return
        text = _content_text(block.get("content"))
        side = sidecar if isinstance(sidecar, dict) else {}
        if kind == "kill":
            if not block.get("is_error") and call.finished_at is None:
                call.finished_at, call.final_exit_status = ts, 143  # killed (TERM) on request
            return
        chunk = side.get("stdout") if isinstance(side.get("stdout"), str) else (
            _tag(text, "stdout") or _tag(text, "output") or "")
        err = side.get("stderr") if isinstance(side.get("stderr"), str) else (_tag(text, "stderr") or "")
        self.chunks.setdefault(call.index, []).append(str(chunk) + str(err))
        status = str(side.get("status") or _tag(text, "status") or "").strip()
        code = _int(side.get("exitCode")) if "exitCode" in side else _int(_tag(text, "exit_code"))
        if status in ("completed", "failed", "killed") and call.finished_at is None:
            call.finished_at = ts
            call.final_exit_status = code if code is not None else (143 if status == "killed" else
                                                                   (1 if status == "failed" else 0))
        call.final_output = call.output + "".join(self.chunks[call.index])

    def notification(self, text: str, ts: float | None) -> None:
        for body in re.findall(_TAG_RE.format("task-notification"), text, re.DOTALL):
            call = self.calls.get((_tag(body, "tool-use-id") or "").strip()) or self.by_background_id.get(
                (_tag(body, "task-id") or "").strip())
            status = (_tag(body, "status") or "").strip()
            if call is None or not call.background or call.finished_at is not None or status not in (
                    "completed", "failed", "killed"):
                continue
            m = re.search(r"exit code (-?\d+)", _tag(body, "summary") or "")
            call.finished_at = ts
            call.final_exit_status = int(m.group(1)) if m else (143 if status == "killed" else
                                                                (1 if status == "failed" else 0))


def parse_claude_code(path: str | os.PathLike[str]) -> list[ShellCall]:
    """The Bash calls of a Claude Code session file, in call order, including those not imported (``ran``
    False, with :attr:`~ShellCall.skip_reason`).

    :raises OSError: the file cannot be read. Malformed lines and unknown line types are skipped.
    """
    session = _Session()
    for raw in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if not isinstance(line, dict) or not isinstance(line.get("message"), dict):
            continue
        content = line["message"].get("content")
        ts = parse_iso(line.get("timestamp"))
        if line.get("type") == "user" and isinstance(content, str):
            session.notification(content, ts)
            continue
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if line.get("type") == "assistant" and block.get("type") == "tool_use":
                session.tool_use(block, ts)
            elif line.get("type") == "user" and block.get("type") == "tool_result":
                session.tool_result(block, line.get("toolUseResult"), ts)
            elif line.get("type") == "user" and block.get("type") == "text":
                session.notification(str(block.get("text", "")), ts)
    return [session.calls[c] for c in session.order if session.calls[c].command]
