"""The shell calls of an agent transcript, as the importers read them."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

__all__ = ["ShellCall", "ShellCalls", "parse_iso"]


@dataclass
class ShellCall:
    """One shell tool call of a transcript and what the old tool reported.

    :param index: 1-based position among the transcript's shell calls.
    :param call_id: the runtime's id of the call (``tool_use`` id, opencode ``callID``, Codex ``call_id``).
    :param command: the command line the agent gave.
    :param output: what the tool showed (stdout and stderr, usually merged), with the runtime's own markers
        (exit code line, timeout notice, "no output" placeholder) removed.
    :param exit_status: the exit status, or None when unknown (killed by the tool's timeout, left running, or
        :attr:`nonzero` without the number).
    :param nonzero: the command ended with a non-zero exit status the transcript does not give (Claude Code
        1.0.x reported a failure as an error result with the raw output and no number); :attr:`exit_status` is
        then None.
    :param maybe_timed_out: the exit status is 124 and the transcript cannot tell whether the old tool's timeout
        or the command itself (``timeout(1)``) ended it (``codex exec --json`` carries neither times nor the
        tool's timeout note); :attr:`exit_status` is 124.
    :param started_at: unix seconds when the call was made (the ``tool_use`` line / part start), or None.
    :param ended_at: unix seconds when the result came back, or None.
    :param timeout_s: the tool's timeout for this call in seconds, when the transcript says.
    :param timed_out: the old tool killed the command at its timeout.
    :param interrupted: the user stopped the call before the command ended (opencode "User aborted the
        command", Claude Code ``interrupted``).
    :param background: the old tool left the command running in the background and answered at once
        (Claude Code ``run_in_background`` / "moved to the background", a Codex ``exec_command`` that
        returned "Process running with session ID N").
    :param finished_at: for a call the old tool left running (:attr:`left_running`): unix seconds when a later
        entry of the transcript (Claude Code ``BashOutput``/``TaskOutput``/``<task-notification>``, Codex
        ``write_stdin`` polls or ``exec_command_end``) showed the command had ended, else None.
    :param killed_at: for a call the old tool left running: unix seconds when a later entry stopped it on
        request (Claude Code ``KillShell``/``TaskStop``), else None; :param killed_by: that entry's name.
        For a Codex unified exec session, a ``write_stdin`` of Ctrl-C or Ctrl-D before its process ended counts
        the same way (``killed_by`` ``"write_stdin Ctrl-C"``).
    :param final_exit_status: the exit status that later entry showed (None: not shown).
    :param final_output: the whole output that later entry showed, when it showed more than :attr:`output`.
    :param stopped_how: for an :attr:`interrupted` call, how the transcript says it was stopped, when it says
        more than "by the user" (e.g. ``"stopped when its turn was aborted (interrupted)"``).
    :param cwd: the directory the command ran in, when the transcript says (Codex ``workdir`` or the turn's
        ``cwd``, opencode ``workdir`` or the session's directory, the ``cwd`` of Claude Code's line), else None.
    :param output_cut: when the transcript holds only part of the output, what is missing, for people (e.g.
        ``"only the first 2.0 KB of 1.5 MB: the rest was saved to FILE, which is not here"``), else None.
    :param ran: False for calls that are not imported; :attr:`skip_reason` says why.
    :param skip_reason: why the call is not imported (a permission refusal and its text, no result in the
        transcript, a tool error before the command ran, no exit status), or None.
    """

    index: int
    call_id: str
    command: str
    output: str = ""
    exit_status: int | None = None
    nonzero: bool = False
    maybe_timed_out: bool = False
    started_at: float | None = None
    ended_at: float | None = None
    timeout_s: float | None = None
    timed_out: bool = False
    interrupted: bool = False
    background: bool = False
    finished_at: float | None = None
    killed_at: float | None = None
    killed_by: str | None = None
    final_exit_status: int | None = None
    final_output: str | None = None
    stopped_how: str | None = None
    cwd: str | None = None
    output_cut: str | None = None
    ran: bool = True
    skip_reason: str | None = None

    @property
    def duration_s(self) -> float | None:
        """Seconds between the call and its result (includes the runtime's own overhead), or None."""
        if self.started_at is None or self.ended_at is None:
            return None
        return max(0.0, self.ended_at - self.started_at)

    @property
    def left_running(self) -> bool:
        """The old tool stopped waiting before the command ended (timed out, interrupted, backgrounded)."""
        return self.timed_out or self.interrupted or self.background

    def skip(self, reason: str) -> None:
        """Mark the call as not imported, for ``reason`` (shown to people, one line)."""
        self.ran = False
        self.skip_reason = " ".join(reason.split())[:300]

    def how_it_ended(self) -> str:
        """What the old tool reported, for people: ``exit N``, ``killed by the old tool's 15 s timeout``, ..."""
        if self.timed_out:
            return f"killed by the old tool's {self.timeout_s:g} s timeout" if self.timeout_s else \
                "killed by the old tool's timeout"
        if self.interrupted:
            return self.stopped_how or "stopped by the user before it ended"
        if self.background:
            return "left running in the background by the old tool"
        return self.exit_text()

    def exit_text(self) -> str:
        """``exit N``, or ``exit non-zero (the transcript does not say which)`` for :attr:`nonzero`, with a note
        for :attr:`maybe_timed_out`."""
        if self.exit_status is None and self.nonzero:
            return "exit non-zero (the transcript does not say which)"
        if self.maybe_timed_out:
            return (f"exit {self.exit_status} (the old tool's timeout or the command's own: the transcript does "
                    "not say)")
        return f"exit {self.exit_status}"

    def after(self) -> str:
        """A suffix for :meth:`exit_text`: `` after 1.5 s``, or ``, duration unknown ...`` when the transcript
        gives no times for the call."""
        d = self.duration_s
        return f" after {d:.1f} s" if d is not None else ", duration unknown (the transcript gives no times)"


def parse_iso(value: object) -> float | None:
    """Unix seconds of an ISO-8601 timestamp (``Z`` allowed), or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(re.sub(r"Z$", "+00:00", value)).timestamp()
    except ValueError:
        return None


class ShellCalls(list[ShellCall]):
    """The shell calls an importer read (a list of :class:`ShellCall`), and what else it saw in the transcript.

    :attr lines: non-empty lines (or records) read; :attr unit: what they are, for people (``line(s)``,
        ``message part(s)``).
    :attr seen: notable things the importer saw but could not read as shell calls, by what they are, with their
        counts (e.g. ``{"custom_tool_call 'exec' item(s) of an unknown shape": 4}``), so that a transcript whose
        calls cannot be read says what it holds instead of "no shell calls".
    """

    def __init__(self, calls: list[ShellCall] | None = None, *, unit: str = "line(s)") -> None:
        super().__init__(calls or [])
        self.lines = 0
        self.unit = unit
        self.seen: Counter[str] = Counter()

    def note(self, what: str, n: int = 1) -> None:
        """Count ``n`` more of ``what`` (a plural-ready noun phrase, shown to people)."""
        self.seen[what] += n

    def describe(self) -> str:
        """What the transcript holds besides the calls, for people (empty when nothing was noted)."""
        return "; ".join(f"{n} {what}" for what, n in self.seen.items())
