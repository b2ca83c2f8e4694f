"""Per-run random ids in requests and outputs, and the mapping between a recording's ids and a replay's.

agent_tools makes ids on the controller side and sends them to hosts inside commands: job ids
``j_`` + 16 of ``[a-z0-9]`` (:func:`agent_tools.jobs.manager.new_job_id`), backup ids ``b_`` + 16 hex digits
(``write_file``), approval ids ``a_`` + 22 URL-safe characters (policy approvals) and the idempotency keys of
writes to a job's stdin ``k_`` + 16 of ``[a-z0-9]`` (``job_input``). A replay makes new ones,
so a recorded request matches a new one when the texts are equal *with the ids paired up consistently*: the
first time a recorded id meets a new id they are bound for the rest of the replay, and a recorded id bound to
another new id (or a new id bound to another recorded id) is a mismatch. Outputs are served with the
recorded ids replaced by their new partners, so the job runner reads its own ids back. Every id of one kind
has the same length, so the replacement never changes byte counts (the job wire format counts bytes).
"""

from __future__ import annotations

import re

__all__ = ["ID_PATTERN", "IdMap", "normalise_ids"]

#: job, backup and approval ids, and stdin write keys (see the module docstring)
ID_PATTERN = re.compile(
    r"(?<![A-Za-z0-9_])([jk]_[a-z0-9]{16}(?![A-Za-z0-9])|b_[0-9a-f]{16}(?![A-Za-z0-9])"
    r"|a_[A-Za-z0-9_-]{22}(?![A-Za-z0-9_-]))")
_ID_PATTERN_B = re.compile(ID_PATTERN.pattern.encode())


def normalise_ids(text: str) -> str:
    """``text`` with every id replaced by ``<j>``, ``<k>``, ``<b>`` or ``<a>`` (for messages and loose comparisons)."""
    return ID_PATTERN.sub(lambda m: f"<{m.group(0)[0]}>", text)


class IdMap:
    """The pairing of recorded ids with the ids of the current run."""

    def __init__(self) -> None:
        self.rec_to_new: dict[str, str] = {}
        self.new_to_rec: dict[str, str] = {}

    def pair(self, recorded: str, new: str) -> dict[str, str] | None:
        """Bindings that make ``recorded`` equal ``new`` (recorded id → new id), or None when they cannot match.

        Nothing is bound here; call :meth:`bind` with the result once the match is accepted.
        """
        rec_parts = ID_PATTERN.split(recorded)
        new_parts = ID_PATTERN.split(new)
        if len(rec_parts) != len(new_parts):
            return None
        bindings: dict[str, str] = {}
        reverse: dict[str, str] = {}
        for i, (r, n) in enumerate(zip(rec_parts, new_parts, strict=True)):
            if i % 2 == 0:
                if r != n:
                    return None
                continue
            if r[:2] != n[:2]:
                return None
            want = self.rec_to_new.get(r) or bindings.get(r)
            back = self.new_to_rec.get(n) or reverse.get(n)
            if want is not None and want != n:
                return None
            if back is not None and back != r:
                return None
            bindings[r] = n
            reverse[n] = r
        return bindings

    def bind(self, bindings: dict[str, str]) -> None:
        """Record accepted bindings (recorded id → new id)."""
        for r, n in bindings.items():
            self.rec_to_new[r] = n
            self.new_to_rec[n] = r

    def to_new(self, data: bytes) -> bytes:
        """Recorded bytes with every bound recorded id replaced by its new id (same length)."""
        if not self.rec_to_new:
            return data
        return _ID_PATTERN_B.sub(lambda m: self.rec_to_new.get(m.group(0).decode(), m.group(0).decode()).encode(),
                                 data)

    def to_new_text(self, text: str) -> str:
        """Recorded text with every bound recorded id replaced by its new id."""
        if not self.rec_to_new:
            return text
        return ID_PATTERN.sub(lambda m: self.rec_to_new.get(m.group(0), m.group(0)), text)

    def to_recorded(self, text: str) -> str:
        """New text with every bound new id replaced by the recorded id it stands for."""
        if not self.new_to_rec:
            return text
        return ID_PATTERN.sub(lambda m: self.new_to_rec.get(m.group(0), m.group(0)), text)
