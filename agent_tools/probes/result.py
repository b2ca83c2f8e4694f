"""A probe check's result (shared by every probe kind)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..outcomes import ProbeReport

__all__ = ["ProbeResult"]


@dataclass
class ProbeResult:
    """One probe check.

    :param state: ``passed``, ``not_yet`` or ``failed`` (terminal: the thing probed will not become ready).
    :param evidence: what was seen, short (unit state, HTTP status, matched line).
    :param updates: spec fields to carry into the next check (log cursor / file offset, a unit's invocation).
    :param details: what the check read (a unit's properties), for the readiness verdict and its evidence.
    """

    kind: str
    target: str
    state: Literal["passed", "not_yet", "failed"]
    evidence: str
    updates: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def report(self) -> ProbeReport:
        """The agent-facing view of this result."""
        return ProbeReport(kind=self.kind, target=self.target, state=self.state, evidence=self.evidence)
