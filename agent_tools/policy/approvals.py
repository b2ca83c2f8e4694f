"""Single-use approvals for commands a policy answered with ``ask``.

An approval is bound to everything that changes what runs: the host alias, the exact command text, the working
directory, the environment given with it and, for a call that writes data it carries (``write_file``'s content,
``edit_file``'s replacement), that data, its ``payload`` (``command_sha256`` holds :func:`call_sha256` of them; a
person is shown its first 12 hex digits, :func:`call_digest`, next to the host, the command, the cwd, the env and
what the payload writes), the rule that asked and an expiry.
Its life: ``request`` (pending) -> ``approve`` (approved) -> ``consume`` (used, once). ``reject`` ends it.
Anything else is refused with :class:`ApprovalRefused`, whose ``code`` says why (``unknown``, ``expired``,
``used``, ``rejected``, ``not_approved``, ``mismatch``, ``no_approval``).

Every change of state is one conditional ``UPDATE`` (``... WHERE status IN (...) AND expires_at > now``) whose
row count decides: two processes presenting the same approval at the same moment (two ``agent-tools run
--approve ID``, two MCP servers on one state directory) get one ``used`` and one refusal, never two runs, and
an approval once used or rejected can never be approved again.

Storage is SQLite: in memory by default, or a file (``path=``, WAL mode, shared by processes) so approvals
survive a restart; the file is created 0600. Only the *redacted* command, cwd and env are stored
(:func:`agent_tools.redact.redact`), for display; the binding is the digest, so no secret from a call is written
here. A redacted form may hide text a person approving must see (shell code in a secret's place, a word of uncertain
shape): ``hidden_code`` counts those spans, and such a request is approved only by a person given the whole command
(checked against ``text_sha256``, the SHA-256 of the command text). Times come from an injectable ``clock``
(seconds, default :func:`time.time`), so tests never sleep.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field

from ..private import private_file
from ..redact import may_hold_code, redact, redact_obj, review_gaps

__all__ = ["DEFAULT_APPROVAL_TTL_S", "Approval", "ApprovalRefused", "ApprovalStore", "call_digest", "call_sha256",
           "command_digest", "command_sha256"]

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
    used_at REAL,
    command_sha256 TEXT,
    cwd TEXT,
    env TEXT,
    binding TEXT,
    payload TEXT,
    hidden_code INTEGER,
    text_sha256 TEXT,
    reason TEXT
);
"""
#: what ``command_sha256`` of a row is the digest of: ``call`` (:func:`call_sha256`), or NULL for rows written before
#: approvals were bound to cwd and env (the command's own SHA-256; usable only for a call without cwd and env)
_BINDING = "call"
_INDEX = "CREATE INDEX IF NOT EXISTS approvals_host_digest ON approvals (host, command_sha256)"


def command_sha256(command: str) -> str:
    """The full SHA-256 (hex) of ``command``'s UTF-8 bytes (what approvals of older versions were bound to)."""
    return hashlib.sha256(command.encode("utf-8", "surrogateescape")).hexdigest()


def command_digest(command: str) -> str:
    """The first 12 hex digits of :func:`command_sha256`."""
    return command_sha256(command)[:12]


def call_sha256(host: str, command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None,
                payload: str | None = None) -> str:
    """The SHA-256 (hex) an approval is bound to: of the host alias, the exact command, the working directory,
    the environment of the call and, when given, the SHA-256 of its payload (canonical JSON; ``cwd`` ``""``/None and
    ``env`` ``{}``/None are the same call; a call without a payload has the digest it had before payloads existed).

    :param host: host alias. :param command: the command line. :param cwd: working directory on the host, or None.
    :param env: extra environment variables, or None.
    :param payload: the data the call writes besides its command (``write_file``'s content; ``edit_file``'s old and
        new text as canonical JSON), or None.
    """
    call: dict[str, object] = {"host": host, "command": command, "cwd": cwd or None, "env": dict(env or {})}
    if payload is not None:
        call["payload"] = hashlib.sha256(payload.encode("utf-8", "surrogateescape")).hexdigest()
    canonical = json.dumps(call, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def call_digest(host: str, command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None,
                payload: str | None = None) -> str:
    """The short digest a person compares when approving a call: the first 12 hex digits (48 bits) of
    :func:`call_sha256`. The approval itself is bound to the full SHA-256."""
    return call_sha256(host, command, cwd=cwd, env=env, payload=payload)[:12]


class Approval(BaseModel):
    """One approval request. Times are clock seconds (``time.time()`` unless a clock was injected)."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="`a_` followed by 22 random URL-safe characters (128 bits).")
    host: str
    command: str = Field(description="the command, secrets redacted (for display only)")
    cwd: str | None = Field(None, description="the working directory asked for, secrets redacted (None: login dir)")
    env: dict[str, str] | None = Field(None, description="the environment asked for, secrets redacted")
    command_sha256: str = Field(description="call_sha256 of the exact host, command, cwd and env: what the approval "
                                            "is bound to")
    binding: str | None = Field(_BINDING, description="`call`; None for an approval of an older version (bound to "
                                                      "the command text alone)")
    payload: str | None = Field(None, description="what the call writes besides its command, as a person reads it "
                                                  "(write_file's content, edit_file's replacement as a diff), secrets "
                                                  "redacted; its exact text is bound by command_sha256")
    hidden_code: int | None = Field(None, description="spans the stored (redacted) command, cwd and env hide that an "
                                                      "approval prompt must show (code or words in a secret's place: "
                                                      ":func:`agent_tools.redact.review_gaps`); None: not known (an "
                                                      "older request)")
    text_sha256: str | None = Field(None, description="command_sha256 of the command text alone: a person who was "
                                                      "given the command checks it against this")
    reason: str | None = Field(None, description="why the policy asked, secrets redacted (None: not given)")
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

    :param path: SQLite file to keep approvals in, or None for memory only. A file written by an older version
        (raw commands, no digest column) is migrated on open: digests computed, commands redacted.
    :param clock: returns the current time in seconds; injected by tests.
    :param ttl_s: default lifetime of a request, seconds.
    :raises sqlite3.Error: the file cannot be opened.
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
            ":memory:" if path is None else str(path), isolation_level=None, check_same_thread=False, timeout=30.0
        )
        self._db.row_factory = sqlite3.Row
        if path is not None:
            private_file(Path(path))
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA secure_delete=ON")  # a migrated raw command leaves no copy in free pages
        self._db.executescript(_SCHEMA)
        self._migrate()
        self._db.execute(_INDEX)

    def _migrate(self) -> None:
        """Bring a store of an older version up to date: add ``command_sha256`` (from the raw command it kept)
        and replace each stored command by its redacted form."""
        columns = {row["name"] for row in self._db.execute("PRAGMA table_info(approvals)")}
        for column, kind in (("command_sha256", "TEXT"), ("cwd", "TEXT"), ("env", "TEXT"), ("binding", "TEXT"),
                             ("payload", "TEXT"), ("hidden_code", "INTEGER"), ("text_sha256", "TEXT"),
                             ("reason", "TEXT")):
            if column not in columns:
                self._db.execute(f"ALTER TABLE approvals ADD COLUMN {column} {kind}")
        rows = self._db.execute("SELECT id, host, command FROM approvals WHERE command_sha256 IS NULL").fetchall()
        for row in rows:  # the raw command is still there: bind it as a call without cwd and env
            self._db.execute("UPDATE approvals SET command_sha256 = ?, command = ?, binding = ? WHERE id = ?",
                             (call_sha256(row["host"], row["command"]), redact(row["command"]), _BINDING, row["id"]))
        if rows:
            log.info("approvals.migrated", count=len(rows))

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def request(self, host: str, command: str, rule_id: str, *, cwd: str | None = None,
                env: Mapping[str, str] | None = None, ttl_s: float | None = None, payload: str | None = None,
                shown_payload: str | None = None, reason: str | None = None) -> Approval:
        """Create a pending approval for ``command`` on ``host`` in ``cwd`` with ``env`` (and ``payload``: see
        :func:`call_sha256`), asked by ``rule_id`` (``reason``: why the policy asks, kept redacted to show with the
        request); expires after ``ttl_s`` seconds.

        :param shown_payload: the payload as a person reads it (a diff for an edit; default: ``payload``); stored
            redacted, for display.
        """
        now = self._clock()
        shown = shown_payload if shown_payload is not None else payload
        hidden = review_gaps(command) + (review_gaps(cwd) if cwd else 0) + sum(
            1 for k, v in (env or {}).items() if redact_obj({k: v})[k] != v and may_hold_code(v))
        approval = Approval(
            id="a_" + secrets.token_urlsafe(16), host=host, command=redact(command),
            cwd=redact(cwd) if cwd else None, env=redact_obj(dict(env)) if env else None,
            command_sha256=call_sha256(host, command, cwd=cwd, env=env, payload=payload), rule_id=rule_id,
            created_at=now, expires_at=now + (self._ttl_s if ttl_s is None else ttl_s), status="pending",
            payload=redact(shown) if shown is not None else None, hidden_code=hidden,
            text_sha256=command_sha256(command), reason=redact(reason) if reason else None,
        )  # fmt: skip
        self._db.execute(
            "INSERT INTO approvals (id, host, command, cwd, env, command_sha256, binding, rule_id, created_at,"
            " expires_at, status, payload, hidden_code, text_sha256, reason)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (approval.id, host, approval.command, approval.cwd, json.dumps(approval.env) if approval.env else None,
             approval.command_sha256, _BINDING, rule_id, approval.created_at, approval.expires_at, approval.status,
             approval.payload, hidden, approval.text_sha256, approval.reason),
        )
        log.info("approval.requested", approval_id=approval.id, host=host, rule_id=rule_id)
        return approval

    def get(self, approval_id: str) -> Approval | None:
        """The approval with this id, or None."""
        row = self._db.execute("SELECT * FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        return None if row is None else _approval(row)

    def pending(self) -> list[Approval]:
        """Pending approvals that have not expired, oldest first."""
        rows = self._db.execute(
            "SELECT * FROM approvals WHERE status = 'pending' AND expires_at > ? ORDER BY created_at",
            (self._clock(),),
        ).fetchall()
        return [_approval(row) for row in rows]

    def approve(self, approval_id: str, *, by: str | None = None, digest: str | None = None) -> Approval:
        """Approve a pending request (approving an approved, unused one again changes nothing but who/when).

        :param digest: the digest the person was shown (:func:`call_digest` of the call, or the full
            :func:`call_sha256`); when given it must be a prefix of the request's own (at least 12 hex digits), so
            a person approves exactly the call they read: host, command, cwd and env.
        :raises ApprovalRefused: unknown id, expired, already used, rejected, or ``mismatch`` (``digest``).
        """
        if digest is not None:
            approval = self._usable(approval_id)
            if len(digest) < 12 or not approval.command_sha256.startswith(digest.lower()):
                raise ApprovalRefused("mismatch", f"approval {approval_id} is for another call (digest "
                                                  f"{approval.command_sha256[:12]}, not {digest}): it asks to run "
                                                  f"{approval.command!r} on {approval.host}"
                                                  + (f" in {approval.cwd}" if approval.cwd else "")
                                                  + (f" with env {sorted(approval.env)}" if approval.env else ""),
                                      approval_id)
        return self._decide(approval_id, "approved", by)

    def reject(self, approval_id: str, *, by: str | None = None) -> Approval:
        """Reject a pending or approved (unused) request. :raises ApprovalRefused: as :meth:`approve`."""
        return self._decide(approval_id, "rejected", by)

    def _decide(self, approval_id: str, status: ApprovalStatus, by: str | None) -> Approval:
        approval = self._usable(approval_id)
        now = self._clock()
        cursor = self._db.execute(
            "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?"
            " WHERE id = ? AND status IN ('pending', 'approved') AND expires_at > ?",
            (status, by, now, approval_id, now),
        )
        if cursor.rowcount != 1:  # used or rejected meanwhile by another process: say why
            self._usable(approval_id)
            raise ApprovalRefused("used", f"approval {approval_id} changed while it was being decided", approval_id)
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
        self, host: str, command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None,
        approval_id: str | None = None, rule_id: str | None = None, payload: str | None = None,
    ) -> Approval:
        """Use an approval for exactly ``command`` on ``host`` in ``cwd`` with ``env`` and ``payload`` (compared by
        :func:`call_sha256`), once: of several callers presenting the same approval at once, exactly one gets it.

        :param approval_id: the approval to use; None: the newest approved, unexpired, unused one for this call.
        :param rule_id: if given, the approval must have been asked by this rule.
        :raises ApprovalRefused: ``no_approval`` (nothing for this call), ``mismatch`` (the id is for another host,
            command, cwd, env or rule), ``not_approved`` (still pending), ``expired``, ``used``, ``rejected``,
            ``unknown``.
        """
        digest = call_sha256(host, command, cwd=cwd, env=env, payload=payload)
        legacy = command_sha256(command) if not cwd and not env and payload is None else None
        if approval_id is None:
            rows = self._db.execute(
                "SELECT id FROM approvals WHERE host = ? AND (command_sha256 = ? AND binding IS NOT NULL"
                " OR command_sha256 = ? AND binding IS NULL) ORDER BY created_at DESC",
                (host, digest, legacy or ""),
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
        expected = digest if approval.binding is not None else legacy
        if approval.host != host or approval.command_sha256 != expected:
            raise ApprovalRefused("mismatch", f"approval {approval_id} is for another call (host, command, cwd, "
                                              "env or what it writes)", approval_id)
        if rule_id is not None and approval.rule_id != rule_id:
            raise ApprovalRefused(
                "mismatch", f"approval {approval_id} was asked by rule {approval.rule_id!r}, not {rule_id!r}",
                approval_id,
            )  # fmt: skip
        if approval.status != "approved":
            raise ApprovalRefused("not_approved", f"approval {approval_id} is still pending", approval_id)
        now = self._clock()
        cursor = self._db.execute(
            "UPDATE approvals SET status = 'used', used_at = ? WHERE id = ? AND status = 'approved' AND expires_at > ?",
            (now, approval_id, now),
        )
        if cursor.rowcount != 1:  # lost a race with another consumer of the same database
            raise ApprovalRefused("used", f"approval {approval_id} was already used", approval_id)
        log.info("approval.used", approval_id=approval_id, host=host)
        return approval.model_copy(update={"status": "used", "used_at": now})


def _approval(row: sqlite3.Row) -> Approval:
    data = dict(row)
    data["env"] = json.loads(data["env"]) if data.get("env") else None
    return Approval(**data)

