"""The local job journal: every job this controller started, in SQLite, so a new process finds it again.

The host's job directory is the source of truth for a job's state (exit file, pid file); the journal keeps
what only the controller knows: which host, the budget and deadline, probes, what output the agent has
already been shown, and idempotency keys. Path: ``$AGENT_TOOLS_STATE_DIR/journal.sqlite3``, else
``$XDG_STATE_HOME/agent-tools/journal.sqlite3`` (``~/.local/state/...``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from ..clock import wall_time
from ..errors import JobNotFound, JournalError

__all__ = ["JobRecord", "Journal", "default_state_dir"]

log = structlog.get_logger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    command TEXT NOT NULL,
    cwd TEXT,
    base TEXT NOT NULL,
    created_at REAL NOT NULL,
    budget_s REAL,
    deadline_s REAL,
    state TEXT NOT NULL,
    exit_status INTEGER,
    signal TEXT,
    readiness TEXT NOT NULL DEFAULT 'none',
    stdout_seen INTEGER NOT NULL DEFAULT 0,
    stderr_seen INTEGER NOT NULL DEFAULT 0,
    probes TEXT NOT NULL DEFAULT '[]',
    idempotency_key TEXT,
    cancel_reason TEXT,
    finished_at REAL,
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS jobs_host ON jobs(host, created_at);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idem ON jobs(host, idempotency_key) WHERE idempotency_key IS NOT NULL;
"""

_COLUMNS = ("job_id", "host", "command", "cwd", "base", "created_at", "budget_s", "deadline_s", "state",
            "exit_status", "signal", "readiness", "stdout_seen", "stderr_seen", "probes",
            "idempotency_key", "cancel_reason", "finished_at", "meta")


def default_state_dir() -> Path:
    """``$AGENT_TOOLS_STATE_DIR``, else ``$XDG_STATE_HOME/agent-tools``, else ``~/.local/state/agent-tools``."""
    env = os.environ.get("AGENT_TOOLS_STATE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "agent-tools"


@dataclass
class JobRecord:
    """One journal row. Times are unix seconds (float); sizes and offsets are bytes (int)."""

    job_id: str
    host: str
    command: str
    base: str
    created_at: float
    cwd: str | None = None
    budget_s: float | None = None
    deadline_s: float | None = None
    state: str = "running"
    exit_status: int | None = None
    signal: str | None = None
    readiness: str = "none"
    stdout_seen: int = 0
    stderr_seen: int = 0
    probes: list[dict[str, Any]] = field(default_factory=list)
    idempotency_key: str | None = None
    cancel_reason: str | None = None
    finished_at: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        """True once the job's process state can no longer change (exited, killed, lost)."""
        return self.state in ("exited", "killed", "lost")


class Journal:
    """SQLite journal of jobs (WAL mode; safe for several processes on one machine).

    :param path: the database file (default ``default_state_dir() / "journal.sqlite3"``); its directory is
        created 0700.
    :raises JournalError: the file cannot be opened or is not a usable database.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_state_dir() / "journal.sqlite3"
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._db = sqlite3.connect(str(self.path), timeout=10.0, check_same_thread=False,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise JournalError(f"cannot open the job journal {self.path}: {exc}. Move the file aside (jobs "
                               "are rediscovered from the hosts' job directories by list_jobs(host=...)) "
                               "or set AGENT_TOOLS_STATE_DIR") from exc

    def close(self) -> None:
        self._db.close()

    def _exec(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                return list(self._db.execute(sql, args).fetchall())
        except sqlite3.Error as exc:
            raise JournalError(f"job journal {self.path}: {exc}") from exc

    @staticmethod
    def _row(row: tuple[Any, ...]) -> JobRecord:
        d = dict(zip(_COLUMNS, row, strict=True))
        d["probes"] = json.loads(d["probes"] or "[]")
        d["meta"] = json.loads(d["meta"] or "{}")
        return JobRecord(**d)

    def add(self, rec: JobRecord) -> None:
        """Insert a new job.

        :raises JournalError: the id (or host + idempotency key) is already there, or the write failed.
        """
        vals = [getattr(rec, c) for c in _COLUMNS]
        vals[_COLUMNS.index("probes")] = json.dumps(rec.probes)
        vals[_COLUMNS.index("meta")] = json.dumps(rec.meta)
        self._exec(f"INSERT INTO jobs ({','.join(_COLUMNS)}) VALUES ({','.join('?' * len(_COLUMNS))})",
                   tuple(vals))

    def get(self, job_id: str) -> JobRecord:
        """:raises JobNotFound: no such job in this journal."""
        rows = self._exec(f"SELECT {','.join(_COLUMNS)} FROM jobs WHERE job_id=?", (job_id,))
        if not rows:
            raise JobNotFound(job_id, f"no job {job_id} in the journal {self.path}; list_jobs(host=...) "
                                      "rediscovers jobs from a host's job directories")
        return self._row(rows[0])

    def find_idempotent(self, host: str, key: str) -> JobRecord | None:
        rows = self._exec(f"SELECT {','.join(_COLUMNS)} FROM jobs WHERE host=? AND idempotency_key=?",
                          (host, key))
        return self._row(rows[0]) if rows else None

    def update(self, job_id: str, **fields: Any) -> None:
        """Update columns of one job (``probes``/``meta`` given as Python objects)."""
        if not fields:
            return
        for k in ("probes", "meta"):
            if k in fields:
                fields[k] = json.dumps(fields[k])
        bad = set(fields) - set(_COLUMNS)
        if bad:
            raise ValueError(f"unknown journal columns: {sorted(bad)}")
        sets = ",".join(f"{k}=?" for k in fields)
        self._exec(f"UPDATE jobs SET {sets} WHERE job_id=?", (*fields.values(), job_id))

    def list(self, host: str | None = None, limit: int = 200) -> list[JobRecord]:
        """Jobs newest first, optionally for one host."""
        if host is None:
            rows = self._exec(f"SELECT {','.join(_COLUMNS)} FROM jobs ORDER BY created_at DESC LIMIT ?",
                              (limit,))
        else:
            rows = self._exec(f"SELECT {','.join(_COLUMNS)} FROM jobs WHERE host=? ORDER BY created_at DESC "
                              "LIMIT ?", (host, limit))
        return [self._row(r) for r in rows]

    def ensure(self, rec: JobRecord) -> None:
        """Insert ``rec`` unless a job with its id exists (used when rediscovering jobs from a host)."""
        rows = self._exec("SELECT 1 FROM jobs WHERE job_id=?", (rec.job_id,))
        if not rows:
            self.add(rec)


def now() -> float:
    """Wall-clock unix time in seconds (float): job times must survive process restarts.

    Reads :func:`agent_tools.clock.wall_time`, so a replay on a virtual clock moves it too.
    """
    return wall_time()
