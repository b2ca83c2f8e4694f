"""Claude Code session transcripts (``~/.claude/projects/<slug>/<sessionId>.jsonl``): the Bash calls.

Facts used (no official spec; checked against public parsers and readings of Claude Code's sources, see
/work/shared/TRANSCRIPTS.md): one JSON object per line, each ``user``/``assistant`` line carrying the
``version`` of Claude Code that wrote it; ``assistant`` lines carry ``tool_use`` blocks ``{id, name: "Bash",
input: {command, timeout? (ms), run_in_background?}}``; a later ``user`` line carries the ``tool_result``
block ``{tool_use_id, content, is_error?}`` and often a ``toolUseResult`` sidecar ``{stdout, stderr,
interrupted, backgroundTaskId?, returnCodeInterpretation?, ...}`` (or a plain string such as ``"Error: ..."``
or ``"User rejected tool use"``). There is no exit-code field. The tool's own framing is read by position and
structure only — never by searching the command's output, which may quote any of these texts:

* a command that ran and failed: ``is_error: true`` and the content's **first line** is ``Exit code N``
  (Claude Code's ``ShellError`` text: ``Exit code N``, then ``[Request interrupted by user for tool use]`` when
  the user stopped it, then stderr and stdout); the exit status is N;
* **1.0.x** (``version`` below 2) reported a failure as ``is_error: true`` with the raw output and no ``Exit
  code`` line (the sidecar reads ``"Error: <output>"``): such a call ran and failed and is imported as
  finished with a non-zero status whose number is unknown (``nonzero``, ``exit_status`` None): the transcript
  says only that it was non-zero, and the output is the command's own text (a number it prints may be a child's
  status, or quoted), so no number is read from it, not even from a first line ``Exit code N`` (the command's
  own). Refusals look the same there (sidecar ``"Error: <text>"``), so one counts only when the whole content
  is the tool's one-line text (a permission rule's naming this very command): output that merely starts like
  one (``Path "/srv/data" does not exist`` and a stack trace) is the failed command's. From 2.0 on, an
  ``is_error`` result without the ``Exit code`` line never came from the command: the tool refused or rejected
  the call and nothing ran;
* an ``is_error`` result is a **refusal** (nothing ran; :data:`REFUSAL_PATTERNS`, each anchored at the start of
  the content) when it starts with the user's "The user doesn't want to proceed with this tool use..." /
  "...take this action right now", ``<tool_use_error>`` (the tool rejected the call, e.g. a ``Path "..." does
  not exist`` check), "Permission to use Bash ... has been denied" (a rule, don't-ask mode), "Permission for
  this action was denied by the Claude Code auto mode classifier" / "Permission for this action has been
  denied. Reason:", "<model> is temporarily unavailable, so auto mode cannot determine the safety of Bash"
  (the classifier could not be asked: blocked), "Auto mode could not evaluate this action", "Claude
  requested permissions to use Bash, but you haven't granted it yet", a multi-operation approval request, a
  PreToolUse hook's block, ``cd to '...' was blocked`` or ``Path "..." does not exist`` (utils/messages.ts;
  commandSemantics and the path checks of the Bash tool);
* the user's rejection text with the sidecar ``"User rejected tool use"`` is written both when the user
  declined a permission prompt and when the user stopped a command that was **running** (public session
  evidence: a Bash that had run 2 min 14 s recorded this way): from 2.0 on the transcript cannot tell the two
  apart, so such a call is not imported and its reason says exactly that;
* a command stopped by the user while it ran: the sidecar's ``interrupted: true`` (content
  ``[Request interrupted by user for tool use]``): imported as interrupted;
* a non-zero exit Claude Code does not count as an error (grep, rg, find, diff, test, ``[`` — the base command
  of the last pipeline segment — exiting 1): ``is_error`` false, and the sidecar's
  ``returnCodeInterpretation`` names it ("No matches found", "Files differ", "Condition is false", "Some
  directories were inaccessible"); Claude Code sets that field only for exit status 1 (commandSemantics.ts),
  so such a call is imported with exit status 1;
* a result with ``is_error`` false exited 0 (a leading ``Exit code N`` is then the command's own output);
* empty output reads ``(Bash completed with no output)`` (or ``Tool ran without output or errors``);
* a timeout: an ``is_error`` result whose first or last line (after the ``Exit code`` line) is ``Command timed
  out after 2m 0s`` (older ``2m 0.0s``), from 2.0 on with ``Exit code 143`` (the tool kills the command with
  SIGTERM), and only when the call lasted about the time the line names (the lines' timestamps): a command that
  printed that line itself and failed after 3 s (or, in 1.0.x, whose raw output ends with it) was not met by a
  30 s timeout, and the line stays its output;
* an output over the tool's limit (2.0.52 on): the content is ``<persisted-output>`` with a header ("Output too
  large (1.5 MB)"), ``Full output saved to: FILE`` and a preview, and the sidecar names ``persistedOutputPath``:
  the whole output is read from that file when it is here (its name under ``<sessionId>/tool-results/`` beside
  the transcript; no other path the transcript names is read), else from the sidecar's stdout/stderr when they hold
  more than the preview; otherwise the preview is the output and :attr:`~.model.ShellCall.output_cut` says
  what is missing;
* a background command: the sidecar's ``backgroundTaskId`` (the content then reads ``Command running in
  background with ID: <id>`` or "... was moved to the background (ID: <id>)"); without that id the notice
  counts only as the first line of a successful result of a call that asked for ``run_in_background``, or (no
  sidecar object at all) as the "moved to the background" answer. Its end shows in a later ``BashOutput {bash_id}`` /
  ``TaskOutput {task_id}`` result (``<status>completed</status>``, ``<exit_code>N</exit_code>``,
  ``<stdout>``/``<output>``), or a ``<task-notification>`` user message (``<tool-use-id>``, ``<task-id>``,
  ``<status>``, "... (exit code N)"); a ``KillShell {shell_id}`` / ``TaskStop {task_id}`` that succeeded stopped
  it on request (:attr:`~agent_tools.importers.model.ShellCall.killed_at`: replayed as ``job_cancel`` then, not
  as the command exiting by itself), and what later entries show of it (``killed``) is that kill;
* a resumed session repeats earlier lines: a ``tool_use`` id seen again, and a second result for a call that
  has one, are the same call (the first is kept).

Durations come from the lines' ``timestamp``; a call ran in the ``cwd`` of the line that made it. Unknown line
types and fields are skipped.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from .model import ShellCall, ShellCalls, parse_iso

__all__ = ["REFUSAL_PATTERNS", "parse_claude_code", "refusal_of"]

_EXIT_RE = re.compile(r"^Exit code (-?\d+)[ \t]*(?:\n|$)")
_INTERRUPT_LINE = "[Request interrupted by user for tool use]"
_TIMEOUT_LINE_RE = re.compile(r"^Command timed out after (?:(\d+)m\s*)?([\d.]+)s\.?$", re.IGNORECASE)
_NO_OUTPUT = ("(Bash completed with no output)", "Tool ran without output or errors")
# the tool's own answer for a background command (read from the content only when there is no sidecar object)
_BG_RUNNING_RE = re.compile(r"^Command running in background with ID:\s*([\w-]+)[^\n]*\n?")
_BG_MOVED_RE = re.compile(r"^Command [^\n]*moved to the background \(ID:\s*([\w-]+)\)[^\n]*\n?")
_TAG_RE = r"<{0}>\n?(.*?)\n?</{0}>"
#: the user's rejection text (utils/messages.ts REJECT_MESSAGE / CANCEL_MESSAGE), at the start of the content
_USER_REJECTED_RE = re.compile(r"^The user doesn't want to (?:proceed with this tool use|take this action)")
#: ``returnCodeInterpretation`` values, set by Claude Code only for exit status 1 (commandSemantics.ts)
_EXIT_1_INTERPRETATIONS = ("No matches found", "Files differ", "Condition is false",
                           "Some directories were inaccessible")

#: texts of ``is_error`` results for commands that never ran, each anchored at the start of the content
REFUSAL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("refused by the user", _USER_REJECTED_RE),
    ("interrupted before it ran", re.compile(r"^\[Request interrupted by user", re.I)),
    ("rejected by the tool", re.compile(r"^<tool_use_error>", re.I)),
    ("rejected by the tool (no such path)", re.compile(r"^Path \"[^\"\n]*\" does not exist")),
    ("denied by a permission rule", re.compile(r"^Permission to use \w+ (?:with command .* )?has been denied",
                                               re.I | re.S)),
    ("denied by the auto mode classifier", re.compile(
        r"^Permission for this action (?:was denied by the Claude Code auto mode classifier|has been denied\. "
        r"Reason:)|^Auto mode could not evaluate this action", re.I)),
    ("blocked: the auto mode classifier was unavailable", re.compile(
        r"^\S+ is temporarily unavailable(?: \([^)\n]*\))?, so auto mode cannot determine the safety of", re.I)),
    ("denied (subagent permission)", re.compile(r"^Permission for this tool use was denied", re.I)),
    ("not permitted (no permission granted)", re.compile(r"^Claude requested permissions to use \w+, but you "
                                                         r"haven't granted it", re.I)),
    ("needed approval", re.compile(r"^This \w+ command contains multiple operations\. The following parts require "
                                   r"approval|^Classifier '.*' requires approval", re.I)),
    # a PreToolUse hook runs before the tool: its text in place of the tool's result means the tool did not run
    # (any wording: "PreToolUse:Bash hook error: ...", "PreToolUse:Bash [cmd] ...: Blocked: ...", "Hook
    # PreToolUse:Bash blocked ...", "Blocked by hook"; a hook that lets the call go gives the command's result)
    ("blocked by a hook", re.compile(r"^(?:Hook )?PreToolUse:\w+\b|^(?:Operation )?blocked by (?:a |the )?"
                                     r"(?:PreToolUse )?hook\b", re.I)),
    ("blocked (directory outside the project)", re.compile(r"^cd to '.*' was blocked", re.I)),
)


#: line types of a Codex rollout (``{timestamp, type, payload}``), for saying that a file is one
_CODEX_LINES = ("session_meta", "turn_context", "response_item", "event_msg", "compacted")


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


def _major(version: Any) -> int | None:
    """The major version of a line's ``version`` (``"2.1.259"`` → 2), or None."""
    m = re.match(r"\s*(\d+)\.", version) if isinstance(version, str) else None
    return int(m.group(1)) if m else None


def _quote(text: str) -> str:
    return repr(" ".join(re.sub(r"</?tool_use_error>", "", text).split())[:160])


def refusal_of(text: str) -> str | None:
    """``"<what>: <the text>"`` when ``text`` (an ``is_error`` result) starts as a refusal, else None."""
    stripped = text.strip()
    for what, pattern in REFUSAL_PATTERNS:
        if pattern.match(stripped):
            return f"{what}: {_quote(stripped)}"
    return None


def _whole_message(text: str, call: ShellCall) -> bool:
    """For 1.0.x, where a failed command's result is its raw output: whether ``text`` can only be the tool's own
    refusal, not output that starts like one. The tool's refusals are one line, and a permission rule's names the
    call's own command; a command that printed more lines (``Path "/srv/data" does not exist`` and a stack
    trace) ran and failed."""
    stripped = text.strip()
    if "\n" in stripped:
        return False
    m = re.match(r"Permission to use \w+ with command (.*) has been denied\.?$", stripped, re.S)
    return m is None or m.group(1).strip() == call.command.strip()


#: ``<persisted-output>`` (Claude Code >= 2.0.52: an output over the limit is saved to a file; the result holds a
#: header, the file's path and a preview)
_PERSISTED_RE = re.compile(r"^\s*<persisted-output>\n?(.*?)\n?</persisted-output>\s*$", re.DOTALL)
_SAVED_TO_RE = re.compile(r"^Full output saved to:\s*(.+?)\s*$", re.MULTILINE)
_PREVIEW_RE = re.compile(r"^Preview \(([^)\n]*)\):\n(.*?)(?:\n\.\.\.)?\s*\Z", re.MULTILINE | re.DOTALL)


def _persisted(text: str, side: dict[str, Any], base: Path) -> tuple[str, str | None] | None:
    """For a result whose output Claude Code saved to a file (``<persisted-output>`` in the content, or the
    sidecar's ``persistedOutputPath``): ``(output, what is missing or None)``. The whole output is the saved file
    when it is here (its name under ``<sessionId>/tool-results/`` beside the transcript, where Claude Code saves
    it; no other path is read), else the sidecar's stdout/stderr when they hold more than the preview; otherwise
    the preview, with a note of what is missing. None when the output was not saved to a file."""
    m = _PERSISTED_RE.match(text)
    saved = side.get("persistedOutputPath") if isinstance(side.get("persistedOutputPath"), str) else None
    if m is None and not saved:
        return None
    body = m.group(1) if m else ""
    where = _SAVED_TO_RE.search(body)
    saved = saved or (where.group(1) if where else None)
    # only the session's own tool-results/ is read (by the file's name): a path the transcript names could be any
    # file of this machine, and what is read goes into the cassette
    if saved and Path(saved).name not in ("", ".", ".."):
        try:
            return (base.with_suffix("") / "tool-results" / Path(saved).name).read_text(encoding="utf-8",
                                                                                       errors="replace"), None
        except OSError:
            pass
    preview = _PREVIEW_RE.search(body)
    shown = preview.group(2) if preview else ""
    side_text = str(side.get("stdout") or "") + str(side.get("stderr") or "")
    if len(side_text) > len(shown):
        return side_text, None
    header = _SAVED_TO_RE.sub("", body.split("\n", 1)[0]).strip() if body.strip() else ""
    header = re.sub(r"\s*Full output saved to:.*$", "", header) or "the output was saved to a file"
    what = f"only its preview ({preview.group(1)})" if preview else "no part of it"
    return shown, (f"the transcript holds {what}: {header.rstrip('.')}; the whole output was saved to "
                   f"{saved or 'a file the transcript does not name'}, which is not here")


def _timeout_line(text: str) -> tuple[str, float] | None:
    """``(text without it, seconds)`` when the first or last line of ``text`` is the tool's timeout notice."""
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    for i in ((0, len(lines) - 1) if lines else ()):
        m = _TIMEOUT_LINE_RE.match(lines[i].strip())
        if m:
            rest = lines[:i] + lines[i + 1:]
            return "\n".join(rest), int(m.group(1) or 0) * 60 + float(m.group(2))
    return None


class _Session:
    """Parsing state: calls by tool_use id, background ids, follow-up tool_use ids."""

    def __init__(self, path: Path) -> None:
        self.path = path  # the transcript (files Claude Code saved beside it are looked up from here)
        self.calls: dict[str, ShellCall] = {}
        self.order: list[str] = []
        self.answered: set[str] = set()  # tool_use ids whose result was read (a repeated result is the same)
        self.background_asked: set[str] = set()  # tool_use ids of run_in_background calls
        self.by_background_id: dict[str, ShellCall] = {}
        self.followups: dict[str, tuple[str, str]] = {}  # follow-up tool_use id -> (kind, background id)
        self.chunks: dict[int, list[str]] = {}  # background call index -> output chunks seen by follow-ups
        self.repeated = 0  # tool_use blocks seen again (resumed sessions)

    def tool_use(self, block: dict[str, Any], ts: float | None, cwd: str | None = None) -> None:
        name = block.get("name")
        inp = block.get("input") if isinstance(block.get("input"), dict) else {}
        assert isinstance(inp, dict)
        tid = str(block.get("id", f"call{len(self.order) + 1}"))
        if tid in self.calls or tid in self.followups:
            self.repeated += 1
            return
        if name == "Bash":
            command = str(inp.get("command", ""))
            if not command:
                return
            timeout_ms = inp.get("timeout")
            call = ShellCall(index=len(self.order) + 1, call_id=tid, command=command,
                             started_at=ts, timeout_s=float(timeout_ms) / 1000
                             if isinstance(timeout_ms, int | float) and not isinstance(timeout_ms, bool) else 120.0,
                             cwd=cwd)
            call.skip("no result in the transcript (the session ended before the call returned)")
            self.calls[tid] = call
            self.order.append(tid)
            if inp.get("run_in_background") is True:
                self.background_asked.add(tid)
        elif name in ("BashOutput", "TaskOutput"):
            self.followups[tid] = ("output", str(inp.get("bash_id") or inp.get("task_id") or ""))
        elif name in ("KillShell", "KillBash", "TaskStop"):
            self.followups[tid] = (f"kill:{name}",
                                   str(inp.get("shell_id") or inp.get("bash_id") or inp.get("task_id") or ""))

    def tool_result(self, block: dict[str, Any], sidecar: Any, ts: float | None, version: int | None) -> None:
        tid = str(block.get("tool_use_id"))
        call = self.calls.get(tid)
        if call is not None:
            if tid not in self.answered:
                self.answered.add(tid)
                self._result(call, block, sidecar, ts, version)
            return
        follow = self.followups.get(tid)
        if follow is not None:
            self._followup(follow, block, sidecar, ts)

    def _result(self, call: ShellCall, block: dict[str, Any], sidecar: Any, ts: float | None,
                version: int | None) -> None:
        text = _content_text(block.get("content"))
        call.ran, call.skip_reason, call.ended_at = True, None, ts
        is_error = bool(block.get("is_error"))
        side = sidecar if isinstance(sidecar, dict) else {}
        stopped = side.get("interrupted") is True
        exit_status: int | None = None
        if is_error:
            # ShellError's "Exit code N" first line exists from 2.0 on; in 1.0.x the content is the command's own
            # output, which may print such a line itself
            m = _EXIT_RE.match(text) if version is not None and version >= 2 else None
            if m:  # ShellError: the command ran; its exit status comes first
                exit_status = int(m.group(1))
                text = text[m.end():]
                if text.startswith(_INTERRUPT_LINE):
                    stopped, text = True, text[len(_INTERRUPT_LINE):].lstrip("\n")
            elif stopped:
                text = text[len(_INTERRUPT_LINE):].lstrip("\n") if text.startswith(_INTERRUPT_LINE) else text
            elif not self._not_run(call, text, sidecar, version):
                # 1.0.x: a failed command, raw output, no "Exit code N" line: non-zero, not said which
                call.nonzero = True
            if not call.ran:
                return
            t = _timeout_line(text)
            if t is not None and self._tool_timeout(call, t[1], exit_status, version, ts):
                text, call.timeout_s = t
                call.timed_out, exit_status = True, None  # killed by the tool, not an exit of the command
                call.nonzero = False
        else:
            exit_status = 0
            interpretation = side.get("returnCodeInterpretation")
            if isinstance(interpretation, str) and interpretation.strip():
                n = re.search(r"exit(?:ed with)? code (-?\d+)", interpretation)
                exit_status = int(n.group(1)) if n else 1  # set for exit 1 only (see the module docstring)
        bg_id = str(side.get("backgroundTaskId") or "")
        if not bg_id and not call.timed_out and not is_error:
            # without the sidecar's id: the notice counts as the content's first line only for a call that asked
            # to run in the background, or (no sidecar object at all) as the "moved to the background" answer
            bg = _BG_RUNNING_RE.match(text) if call.call_id in self.background_asked else (
                _BG_MOVED_RE.match(text) if not side else None)
            if bg:
                bg_id, text = bg.group(1), text[bg.end():]
        if bg_id and not call.timed_out:
            call.background = True
            self.by_background_id[bg_id] = call
            exit_status = None
        elif stopped:
            call.interrupted = True
            exit_status = None
        persisted = _persisted(text, side, self.path)
        if persisted is not None:  # the output was saved to a file: read it, or say what is missing
            text, call.output_cut = persisted
        elif "stdout" in side or "stderr" in side:  # the command's own output, without the tool's framing
            out = str(side.get("stdout") or "")
            err = str(side.get("stderr") or "")
            text = out + ("\n" if out and err and not out.endswith("\n") else "") + err
            if call.timed_out:
                t2 = _timeout_line(text)
                text = t2[0] if t2 is not None else text
        elif call.background:
            text = ""
        if text.strip() in _NO_OUTPUT:
            text = ""
        call.output = text
        call.exit_status = exit_status

    @staticmethod
    def _tool_timeout(call: ShellCall, limit_s: float, exit_status: int | None, version: int | None,
                      ts: float | None) -> bool:
        """Whether a ``Command timed out after N`` line of a failed result is the tool's notice, not the command's
        own output: from 2.0 on the tool writes it with ``Exit code 143`` (it kills the command with SIGTERM), and
        in every version the call lasted (about) the N it names when the transcript's times say (a command that
        failed after 3 s did not meet a 30 s timeout)."""
        if version is not None and version >= 2 and exit_status != 143:
            return False
        if call.started_at is None or ts is None or ts < call.started_at:
            return True  # no usable times: the line's place and the status are all there is
        return ts - call.started_at >= 0.9 * limit_s - 1.0

    def _not_run(self, call: ShellCall, text: str, sidecar: Any, version: int | None) -> bool:
        """For an ``is_error`` result without an ``Exit code`` line: mark ``call`` not imported and say why when
        the command did not run (or the transcript cannot tell); False for a 1.0.x failure."""
        rejected = sidecar == "User rejected tool use" or bool(_USER_REJECTED_RE.match(text.strip()))
        if rejected and version is not None and version >= 2:
            call.output = text
            call.skip("refused by the user, or interrupted by the user while it ran: Claude Code records both as the "
                      "user's rejection ('User rejected tool use'), so the transcript cannot tell which: "
                      f"{_quote(text)}")
            return True
        refused = refusal_of(text)
        if refused is not None and ((version is not None and version >= 2) or _whole_message(text, call)):
            call.output = text
            call.skip(refused)
            return True
        if version is not None and version >= 2:
            call.output = text
            call.skip("the tool answered with an error and no exit status (Claude Code 2.x starts the result of "
                      f"every command that ran and failed with `Exit code N`), so the command did not run: "
                      f"{_quote(text)}")
            return True
        return False

    def _followup(self, follow: tuple[str, str], block: dict[str, Any], sidecar: Any, ts: float | None) -> None:
        kind, bg_id = follow
        call = self.by_background_id.get(bg_id)
        if call is None:
            return
        text = _content_text(block.get("content"))
        side = sidecar if isinstance(sidecar, dict) else {}
        if kind.startswith("kill:"):
            if not block.get("is_error") and call.finished_at is None and call.killed_at is None:
                call.killed_at, call.killed_by = ts, kind[5:]  # stopped on request: replayed as job_cancel then
            return
        if call.killed_at is not None:
            return  # what a look after the kill shows ("killed") is the kill's doing
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
            if call is None or not call.background or call.finished_at is not None or call.killed_at is not None \
                    or status not in ("completed", "failed", "killed"):
                continue
            m = re.search(r"exit code (-?\d+)", _tag(body, "summary") or "")
            call.finished_at = ts
            call.final_exit_status = int(m.group(1)) if m else (143 if status == "killed" else
                                                                (1 if status == "failed" else 0))


def _subagent_bash_calls(path: Path) -> tuple[int, int] | None:
    """``(files, Bash tool_use blocks)`` of the session's subagent transcripts (``<sessionId>/subagents/
    agent-*.jsonl`` beside the session file: /work/shared/TRANSCRIPTS.md), or None when it has none."""
    folder = path.with_suffix("") / "subagents"
    files = sorted(folder.glob("agent-*.jsonl")) if folder.is_dir() else []
    if not files:
        return None
    calls = 0
    for f in files:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for raw in text.splitlines():
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                continue
            content = line.get("message", {}).get("content") if isinstance(line, dict) and isinstance(
                line.get("message"), dict) else None
            if line.get("type") == "assistant" and isinstance(content, list):
                calls += sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_use"
                             and b.get("name") == "Bash")
    return len(files), calls


def parse_claude_code(path: str | os.PathLike[str]) -> ShellCalls:
    """The Bash calls of a Claude Code session file, in call order, including those not imported (``ran``
    False, with :attr:`~ShellCall.skip_reason`).

    Each result is read with the rules of the Claude Code version that wrote its line (``version``; a line
    without one gets the 1.0.x rules).

    :raises OSError: the file cannot be read. Malformed lines and unknown line types are skipped (and counted in
        :attr:`ShellCalls.seen`).
    """
    session = _Session(Path(path))
    seen = ShellCalls()
    for raw in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        if not raw.strip():
            continue
        seen.lines += 1
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            seen.note("line(s) that are not JSON")
            continue
        if not isinstance(line, dict) or not isinstance(line.get("message"), dict):
            codex = isinstance(line, dict) and (
                (isinstance(line.get("payload"), dict) and line.get("type") in _CODEX_LINES)
                or str(line.get("type") or "").startswith(("thread.", "turn.", "item.")))
            if codex:
                seen.note("line(s) of a Codex rollout or codex exec --json stream (import it with: agent-tools "
                          "import codex FILE)")
            continue
        content = line["message"].get("content")
        ts = parse_iso(line.get("timestamp"))
        version = _major(line.get("version"))
        if line.get("type") == "user" and isinstance(content, str):
            session.notification(content, ts)
            continue
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if line.get("type") == "assistant" and block.get("type") == "tool_use":
                session.tool_use(block, ts, line["cwd"] if isinstance(line.get("cwd"), str) and line["cwd"] else None)
            elif line.get("type") == "user" and block.get("type") == "tool_result":
                session.tool_result(block, line.get("toolUseResult"), ts, version)
            elif line.get("type") == "user" and block.get("type") == "text":
                session.notification(str(block.get("text", "")), ts)
    seen.extend(session.calls[c] for c in session.order)
    subagents = _subagent_bash_calls(Path(path))
    if subagents:
        files, n = subagents
        seen.note(f"Bash call(s) of this session's subagents, in {files} transcript(s) under "
                  f"{Path(path).with_suffix('').name}/subagents/ (not part of this import: import each "
                  "agent-*.jsonl by itself)", n)
    if session.repeated:
        seen.note("tool_use block(s) repeated (a resumed session carries earlier lines; read once)",
                  session.repeated)
    return seen
