"""The shell calls of an agent transcript, as the importers read them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

__all__ = ["ShellCall", "parse_iso"]


@dataclass
class ShellCall:
    """One shell tool call of a transcript and what the old tool reported.

    :param index: 1-based position among the transcript's shell calls.
    :param call_id: the runtime's id of the call (``tool_use`` id, opencode ``callID``).
    :param command: the command line the agent gave.
    :param output: what the tool showed (stdout and stderr, usually merged), with the runtime's own markers
        (exit code line, timeout notice, "no output" placeholder) removed.
    :param exit_status: the exit status, or None when unknown (killed by the tool's timeout, not reported).
    :param started_at: unix seconds when the call was made (the ``tool_use`` line / part start), or None.
    :param ended_at: unix seconds when the result came back, or None.
    :param timeout_s: the tool's timeout for this call in seconds, when the transcript says.
    :param timed_out: the old tool killed the command at its timeout.
    :param ran: False for calls that never ran (permission refusals, no result in the transcript).
    """

    index: int
    call_id: str
    command: str
    output: str = ""
    exit_status: int | None = None
    started_at: float | None = None
    ended_at: float | None = None
    timeout_s: float | None = None
    timed_out: bool = False
    ran: bool = True

    @property
    def duration_s(self) -> float | None:
        """Seconds between the call and its result (includes the runtime's own overhead), or None."""
        if self.started_at is None or self.ended_at is None:
            return None
        return max(0.0, self.ended_at - self.started_at)


def parse_iso(value: object) -> float | None:
    """Unix seconds of an ISO-8601 timestamp (``Z`` allowed), or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(re.sub(r"Z$", "+00:00", value)).timestamp()
    except ValueError:
        return None
