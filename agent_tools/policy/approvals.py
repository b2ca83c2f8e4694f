"""Single-use approvals for commands a policy answered with ``ask``.

An approval is bound to one host alias, the exact command text, the rule that asked and an expiry. Its life:
``request`` (pending) -> ``approve`` (approved) -> ``consume`` (used, once). ``reject`` ends it. Anything
else is refused with :class:`ApprovalRefused`, whose ``code`` says why (``unknown``, ``expired``, ``used``,
``rejected``, ``not_approved``, ``mismatch``, ``no_approval``).

Storage is SQLite: in memory by default, or a file (``path=``) so approvals survive a restart. Times come from
an injectable ``clock`` (seconds, default :func:`time.time`), so tests never sleep.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DEFAULT_APPROVAL_TTL_S", "Approval", "ApprovalRefused", "ApprovalStore"]

log = structlog.get_logger(__name__)

DEFAULT_APPROVAL_TTL_S = 900.0
"""Seconds an approval request stays usable when ``ttl_s`` is not given."""

ApprovalStatus = Literal["pending", "approved", "used", "rejected"]
RefusalCode = Literal["unknown", "expired", "used", "rejected", "not_approved", "mismatch", "no_approval"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    command TEXT NOT NULL,
    rule_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    status TEXT NOT NULL,
    decided_by TEXT,
    decided_at REAL,
    used_at REAL
);
CREATE INDEX IF NOT EXISTS approvals_host_command ON approvals (host, command);
"""


class Approval(BaseModel):
    """One approval request. Times are clock seconds (``time.time()`` unless a clock was injected)."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="`a_` followed by 22 random URL-safe characters (128 bits).")
    host: str
    command: str
    rule_id: str
    created_at: float
    expires_at: float
    status: ApprovalStatus
    decided_by: str | None = None
    decided_at: float | None = None
    used_at: float | None = None


class ApprovalRefused(ValueError):
    """An approval cannot be approved, rejected or used; ``code`` says why, ``approval_id`` which one."""

    def __init__(self, code: RefusalCode, message: str, approval_id: str | None = None) -> None:
        self.code: RefusalCode = code
        self.approval_id = approval_id
        super().__init__(message)


class ApprovalStore:
    """Issues and checks approvals.

    :param path: SQLite file to keep approvals in, or None for memory only.
    :param clock: returns the current time in seconds; injected by tests.
    :param ttl_s: default lifetime of a request, seconds.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        clock: Callable[[], float] = time.time,
        ttl_s: float = DEFAULT_APPROVAL_TTL_S,
    ) -> None:
        self._clock = clock
        self._ttl_s = ttl_s
        self._db = sqlite3.connect(
            ":memory:" if path is None else str(path), isolation_level=None, check_same_thread=False
        )
        self._db.row_factory = sqlite3.Row
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def request(self, host: str, command: str, rule_id: str, *, ttl_s: float | None = None) -> Approval:
        """Create a pending approval for ``command`` on ``host``, asked by ``rule_id``; expires after ``ttl_s``."""
        now = self._clock()
        approval = Approval(
            id="a_" + secrets.token_urlsafe(16), host=host, command=command, rule_id=rule_id, created_at=now,
            expires_at=now + (self._ttl_s if ttl_s is None else ttl_s), status="pending",
        )  # fmt: skip
        self._db.execute(
            "INSERT INTO approvals (id, host, command, rule_id, created_at, expires_at, status)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (approval.id, host, command, rule_id, approval.created_at, approval.expires_at, approval.status),
        )
        log.info("approval.requested", approval_id=approval.id, host=host, rule_id=rule_id)
        return approval

    def get(self, approval_id: str) -> Approval | None:
        """The approval with this id, or None."""
        row = self._db.execute("SELECT * FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        return None if row is None else Approval(**dict(row))

    def pending(self) -> list[Approval]:
        """Pending approvals that have not expired, oldest first."""
        rows = self._db.execute(
            "SELECT * FROM approvals WHERE status = 'pending' AND expires_at > ? ORDER BY created_at",
            (self._clock(),),
        ).fetchall()
        return [Approval(**dict(row)) for row in rows]

    def approve(self, approval_id: str, *, by: str | None = None) -> Approval:
        """Approve a pending request.

        :raises ApprovalRefused: unknown id, expired, already used, or rejected.
        """
        return self._decide(approval_id, "approved", by)

    def reject(self, approval_id: str, *, by: str | None = None) -> Approval:
        """Reject a pending or approved (unused) request. :raises ApprovalRefused: as :meth:`approve`."""
        return self._decide(approval_id, "rejected", by)

    def _decide(self, approval_id: str, status: ApprovalStatus, by: str | None) -> Approval:
        approval = self._usable(approval_id)
        now = self._clock()
        self._db.execute(
            "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ? WHERE id = ?",
            (status, by, now, approval_id),
        )
        log.info(f"approval.{status}", approval_id=approval_id, by=by)
        return approval.model_copy(update={"status": status, "decided_by": by, "decided_at": now})

    def _usable(self, approval_id: str) -> Approval:
        approval = self.get(approval_id)
        if approval is None:
            raise ApprovalRefused("unknown", f"no approval {approval_id!r}", approval_id)
        if approval.status == "used":
            raise ApprovalRefused("used", f"approval {approval_id} was already used", approval_id)
        if approval.status == "rejected":
            raise ApprovalRefused("rejected", f"approval {approval_id} was rejected", approval_id)
        if self._clock() >= approval.expires_at:
            raise ApprovalRefused("expired", f"approval {approval_id} expired", approval_id)
        return approval

    def consume(
        self, host: str, command: str, *, approval_id: str | None = None, rule_id: str | None = None
    ) -> Approval:
        """Use an approval for exactly ``command`` on ``host``, once.

        :param approval_id: the approval to use; None: the newest approved, unexpired, unused one for this
            host and command.
        :param rule_id: if given, the approval must have been asked by this rule.
        :raises ApprovalRefused: ``no_approval`` (nothing for this host+command), ``mismatch`` (the id is for
            another host, command or rule), ``not_approved`` (still pending), ``expired``, ``used``,
            ``rejected``, ``unknown``.
        """
        if approval_id is None:
            rows = self._db.execute(
                "SELECT id FROM approvals WHERE host = ? AND command = ? ORDER BY created_at DESC",
                (host, command),
            ).fetchall()
            if not rows:
                raise ApprovalRefused("no_approval", f"no approval for this command on {host}")
            candidates = [self.get(row["id"]) for row in rows]
            usable = [
                a for a in candidates
                if a is not None and a.status == "approved" and self._clock() < a.expires_at
                and (rule_id is None or a.rule_id == rule_id)
            ]  # fmt: skip
            if usable:
                approval_id = usable[0].id
            else:
                approval_id = rows[0]["id"]  # report why the newest one cannot be used
        approval = self._usable(approval_id)
        if approval.host != host or approval.command != command:
            raise ApprovalRefused("mismatch", f"approval {approval_id} is for another command or host", approval_id)
        if rule_id is not None and approval.rule_id != rule_id:
            raise ApprovalRefused(
                "mismatch", f"approval {approval_id} was asked by rule {approval.rule_id!r}, not {rule_id!r}",
                approval_id,
            )  # fmt: skip
        if approval.status != "approved":
            raise ApprovalRefused("not_approved", f"approval {approval_id} is still pending", approval_id)
        now = self._clock()
        cursor = self._db.execute(
            "UPDATE approvals SET status = 'used', used_at = ? WHERE id = ? AND status = 'approved'",
            (now, approval_id),
        )
        if cursor.rowcount != 1:  # lost a race with another consumer of the same database
            raise ApprovalRefused("used", f"approval {approval_id} was already used", approval_id)
        log.info("approval.used", approval_id=approval_id, host=host)
        return approval.model_copy(update={"status": "used", "used_at": now})
