"""The local job journal: every job this controller started, in SQLite, so a new process finds it again.

The host's job directory is the source of truth for a job's state (exit file, pid file); the journal keeps
what only the controller knows: which host, the budget and deadline, probes, what output the agent has
already been shown, idempotency keys, and in ``meta`` (JSON, so older journals open unchanged) facts such as
how the host was reached (``meta["connection"]``, :mod:`agent_tools.hosts.reach`). Text is stored redacted
(:func:`agent_tools.redact.redact`: the host alias as given (``user:PASSWORD@host``), the command, the cancel reason,
every string in ``meta``), whoever writes it
(a launch, a job rediscovered from a host's job directory, an error message), the working directory too, and an
idempotency key is kept as its SHA-256: the raw command stays only in the job's directory on the host. The file is
created 0600 in a 0700 directory (:mod:`agent_tools.private`).
Path: ``$AGENT_TOOLS_STATE_DIR/journal.sqlite3``, else ``$XDG_STATE_HOME/agent-tools/journal.sqlite3``
(``~/.local/state/...``).

Job states in the journal: ``running``; ``exited``, ``killed``, ``lost`` (terminal, from the host's job
directory); ``not_started`` (terminal: the launch provably never reached the host, nothing ran: not lost work);
``unconfirmed`` (the launch request went out unanswered: the next look at the host settles it as running,
exited, ... or ``not_started``). Journals written before ``not_started`` existed marked such rows ``lost`` with
``meta.never_started``; they are read as ``unconfirmed`` (that mark was also set on launches that did start).

The ``looks`` table keeps, per job, the state and readiness the agent was last shown (``"STATE/READINESS"``, by
any tool result that names the job), so ``list_jobs`` can say what changed since (:meth:`Journal.looks`). It is a
table of its own, not a ``meta`` key, so that writing it never races a ``meta`` update made meanwhile (a background
readiness check). A journal from before it gets the table when it opens.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import structlog

from ..clock import wall_time
from ..errors import JobNotFound, JournalError
from ..private import private_dir, private_file
from ..redact import redact, redact_obj

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
CREATE TABLE IF NOT EXISTS looks (
    job_id TEXT PRIMARY KEY,
    seen TEXT NOT NULL
);
"""

#: rows of journals from before the ``not_started``/``unconfirmed`` states: "lost, never started" was also said
#: of launches that did start, so they are rechecked on the host (data only; no schema change)
_OLD_NEVER_STARTED = "state='lost' AND meta LIKE '%\"never_started\": true%'"

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


class Journal:
    """SQLite journal of jobs (WAL mode; safe for several processes on one machine).

    A damaged file (not an SQLite database, or failing ``PRAGMA quick_check``) is found when the journal opens.
    With ``on_damage="move_aside"`` (the default) it is renamed to ``<name>.corrupt-<UTC time>`` (with its
    ``-wal``/``-shm`` files), a warning is logged, a fresh journal is started and :attr:`recovered_from` holds
    the moved file: the jobs themselves live on in the hosts' job directories and ``list_jobs(host=...)``
    rediscovers them. With ``on_damage="raise"`` a :class:`JournalError` naming the file is raised instead.

    :param path: the database file (default ``default_state_dir() / "journal.sqlite3"``); its directory is
        created 0700.
    :param on_damage: ``move_aside`` or ``raise`` (see above).
    :raises JournalError: the file cannot be opened (permissions, locked, ...) or is damaged and
        ``on_damage="raise"``.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 on_damage: Literal["move_aside", "raise"] = "move_aside") -> None:
        self.path = Path(path) if path is not None else default_state_dir() / "journal.sqlite3"
        self._lock = threading.Lock()
        #: where a damaged journal found at open was moved to (None: it was fine)
        self.recovered_from: Path | None = None
        try:
            self._db = self._open()
        except _Damaged as exc:
            if on_damage != "move_aside":
                raise JournalError(_damage_message(self.path, exc.__cause__ or exc)) from exc
            self.recovered_from = self._move_aside(exc)
            self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        """Open the database, create the schema, and check its integrity (cheap for a journal's size)."""
        db: sqlite3.Connection | None = None
        try:
            private_dir(self.path.parent)
            private_file(self.path)
            db = sqlite3.connect(str(self.path), timeout=10.0, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            if db.execute(f"SELECT 1 FROM jobs WHERE {_OLD_NEVER_STARTED} LIMIT 1").fetchone():
                db.execute(f"UPDATE jobs SET state='unconfirmed' WHERE {_OLD_NEVER_STARTED}")
            _hash_old_keys(db)
            check = db.execute("PRAGMA quick_check(1)").fetchone()
            if not check or check[0] != "ok":
                raise _Damaged(f"integrity check failed: {check[0] if check else 'no answer'}")
            return db
        except sqlite3.Error as exc:
            if db is not None:
                db.close()
            if _is_damage(exc):
                raise _Damaged(str(exc)) from exc
            raise JournalError(f"cannot open the job journal {self.path}: {exc}. Fix its permissions or free the "
                               "lock, or set AGENT_TOOLS_STATE_DIR to use another journal (jobs are rediscovered "
                               "from the hosts' job directories by list_jobs(host=...))") from exc
        except _Damaged:
            if db is not None:
                db.close()
            raise
        except OSError as exc:
            raise JournalError(f"cannot open the job journal {self.path}: {exc}; set AGENT_TOOLS_STATE_DIR to a "
                               "writable directory") from exc

    def _move_aside(self, damage: _Damaged) -> Path | None:
        """Rename the damaged file (and its WAL/SHM files) aside, under a lock so that two processes finding the
        same damage do not move each other's fresh journal. Returns the new name (None if another process
        already did it)."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(wall_time()))
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while aside.exists():
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
            n += 1
        try:
            with open(self.path.with_name(self.path.name + ".recover-lock"), "a") as lock_fh:
                fcntl.flock(lock_fh, fcntl.LOCK_EX)
                try:
                    self._open().close()  # fixed meanwhile (another process moved it aside)?
                    return None
                except _Damaged:
                    pass
                for suffix in ("-wal", "-shm", ""):
                    src = self.path.with_name(self.path.name + suffix)
                    if src.exists():
                        src.rename(aside.with_name(aside.name + suffix))
        except OSError as exc:
            raise JournalError(f"{_damage_message(self.path, damage)} (moving it aside failed: {exc})") from exc
        log.warning("journal.damaged_moved_aside", path=str(self.path), moved_to=str(aside), error=str(damage),
                    hint="a fresh journal was started; list_jobs(host=...) rediscovers jobs from the hosts")
        return aside

    def close(self) -> None:
        self._db.close()

    def _exec(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                return list(self._db.execute(sql, args).fetchall())
        except sqlite3.Error as exc:
            if _is_damage(exc):
                raise JournalError(_damage_message(self.path, exc)) from exc
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
        for name in _REDACTED:
            vals[_COLUMNS.index(name)] = _redacted(name, vals[_COLUMNS.index(name)])
        vals[_COLUMNS.index("probes")] = json.dumps(rec.probes)
        vals[_COLUMNS.index("meta")] = json.dumps(vals[_COLUMNS.index("meta")])
        self._exec(f"INSERT INTO jobs ({','.join(_COLUMNS)}) VALUES ({','.join('?' * len(_COLUMNS))})",
                   tuple(vals))

    def add_idempotent(self, rec: JobRecord) -> JobRecord:
        """Insert ``rec`` unless another job already holds its (host, idempotency key); returns the job that
        holds the key (``rec`` itself when it was inserted). The unique index decides, so two processes
        racing past their lookups still start one job.

        :raises JournalError: the write failed for another reason.
        """
        try:
            self.add(rec)
            return rec
        except JournalError as exc:
            if not isinstance(exc.__cause__, sqlite3.IntegrityError) or rec.idempotency_key is None:
                raise
            prior = self.find_idempotent(rec.host, rec.idempotency_key)
            if prior is None:
                raise
            return prior

    def states(self, host: str) -> dict[str, str]:
        """Every job of ``host`` in the journal: job id -> state, newest first."""
        rows = self._exec("SELECT job_id, state FROM jobs WHERE host=? ORDER BY created_at DESC", (host,))
        return {str(r[0]): str(r[1]) for r in rows}

    def with_leftovers(self, host: str) -> set[str]:
        """Ids of ``host``'s jobs whose ended command left processes running, as last seen (``meta.leftovers``), or
        whose monitor was still looking for them (``meta.leftovers_pending``)."""
        rows = self._exec("SELECT job_id FROM jobs WHERE host=? AND (meta LIKE '%\"leftovers\": [[%' OR "
                          "meta LIKE '%\"leftovers_pending\": true%')", (host,))
        return {str(r[0]) for r in rows}

    def get(self, job_id: str) -> JobRecord:
        """:raises JobNotFound: no such job in this journal."""
        rows = self._exec(f"SELECT {','.join(_COLUMNS)} FROM jobs WHERE job_id=?", (job_id,))
        if not rows:
            raise JobNotFound(job_id, f"no job {job_id} in the journal {self.path}; list_jobs(host=...) "
                                      "rediscovers jobs from a host's job directories")
        return self._row(rows[0])

    def find_idempotent(self, host: str, key: str) -> JobRecord | None:
        """The job holding idempotency ``key`` on ``host`` (keys are stored as their SHA-256), or None."""
        rows = self._exec(f"SELECT {','.join(_COLUMNS)} FROM jobs WHERE host=? AND idempotency_key=?",
                          (host, key_digest(key)))
        return self._row(rows[0]) if rows else None

    def update(self, job_id: str, **fields: Any) -> None:
        """Update columns of one job (``probes``/``meta`` given as Python objects)."""
        if not fields:
            return
        for k in _REDACTED:
            if k in fields:
                fields[k] = _redacted(k, fields[k])
        for k in ("probes", "meta"):
            if k in fields:
                fields[k] = json.dumps(fields[k])
        bad = set(fields) - set(_COLUMNS)
        if bad:
            raise ValueError(f"unknown journal columns: {sorted(bad)}")
        sets = ",".join(f"{k}=?" for k in fields)
        self._exec(f"UPDATE jobs SET {sets} WHERE job_id=?", (*fields.values(), job_id))

    def list(self, host: str | None = None, limit: int = 200, *, offset: int = 0,
             states: Collection[str] | None = None, not_states: Collection[str] = ()) -> list[JobRecord]:
        """Jobs newest first: ``limit`` of them after skipping ``offset``, optionally only one host's, only those in
        ``states``, none in ``not_states``."""
        where, params = self._filter(host, states, not_states)
        rows = self._exec(f"SELECT {','.join(_COLUMNS)} FROM jobs{where} ORDER BY created_at DESC, rowid DESC "
                          "LIMIT ? OFFSET ?", (*params, limit, offset))
        return [self._row(r) for r in rows]

    def count(self, host: str | None = None, *, states: Collection[str] | None = None,
              not_states: Collection[str] = ()) -> int:
        """How many jobs :meth:`list` pages through with the same filters."""
        where, params = self._filter(host, states, not_states)
        return int(self._exec(f"SELECT COUNT(*) FROM jobs{where}", params)[0][0])

    @staticmethod
    def _filter(host: str | None, states: Collection[str] | None,
                not_states: Collection[str]) -> tuple[str, tuple[Any, ...]]:
        terms: list[str] = []
        params: list[Any] = []
        if host is not None:
            terms.append("host=?")
            params.append(host)
        if states is not None:
            terms.append(f"state IN ({','.join('?' * len(states))})" if states else "0")
            params.extend(states)
        if not_states:
            terms.append(f"state NOT IN ({','.join('?' * len(not_states))})")
            params.extend(not_states)
        return (" WHERE " + " AND ".join(terms) if terms else ""), tuple(params)

    def looks(self, job_ids: Collection[str]) -> dict[str, str]:
        """What the agent was last shown of each job (``"STATE/READINESS"``; see the module docstring); a job it
        was never shown is absent."""
        ids = list(job_ids)
        if not ids:
            return {}
        rows = self._exec(f"SELECT job_id, seen FROM looks WHERE job_id IN ({','.join('?' * len(ids))})",
                          tuple(ids))
        return {str(r[0]): str(r[1]) for r in rows}

    def set_look(self, job_id: str, state: str, readiness: str) -> None:
        """Record that the agent was shown job ``job_id`` in ``state`` with ``readiness``."""
        self._exec("INSERT INTO looks (job_id, seen) VALUES (?, ?) "
                   "ON CONFLICT(job_id) DO UPDATE SET seen=excluded.seen", (job_id, f"{state}/{readiness}"))

    def ensure(self, rec: JobRecord) -> bool:
        """Insert ``rec`` unless a job with its id exists (used when rediscovering jobs from a host); returns
        whether it was inserted."""
        rows = self._exec("SELECT 1 FROM jobs WHERE job_id=?", (rec.job_id,))
        if not rows:
            self.add(rec)
        return not rows


#: columns whose text is redacted before it is written (the storage seam for secrets; see the module docstring);
#: an idempotency key is stored as its SHA-256 (it is only ever compared)
_REDACTED = ("host", "command", "cwd", "cancel_reason", "meta", "idempotency_key")
_KEY_PREFIX = "sha256:"


def key_digest(key: str) -> str:
    """How an idempotency key is stored and looked up: ``sha256:`` and the hex SHA-256 of the key (a key already
    in that form is returned as it is)."""
    if key.startswith(_KEY_PREFIX) and len(key) == len(_KEY_PREFIX) + 64:
        return key
    return _KEY_PREFIX + hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()


def _redacted(column: str, value: Any) -> Any:
    if value is None:
        return None
    if column == "idempotency_key":
        return key_digest(str(value))
    return redact_obj(value) if column == "meta" else redact(str(value))


def _hash_old_keys(db: sqlite3.Connection) -> None:
    """Journals of older versions kept idempotency keys as given: store their digests instead."""
    rows = db.execute("SELECT job_id, idempotency_key FROM jobs WHERE idempotency_key IS NOT NULL "
                      "AND idempotency_key NOT LIKE 'sha256:%'").fetchall()
    if not rows:
        return
    db.execute("PRAGMA secure_delete=ON")  # the raw keys leave no copy in free pages
    for job_id, key in rows:
        db.execute("UPDATE jobs SET idempotency_key=? WHERE job_id=?", (key_digest(key), job_id))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


class _Damaged(Exception):
    """The journal file is not a usable SQLite database (internal; becomes a move-aside or a JournalError)."""


#: SQLite result codes meaning "this file is damaged" (SQLITE_CORRUPT, SQLITE_NOTADB; sqlite.org/rescode.html)
_DAMAGE_CODES = (11, 26)


def _is_damage(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python >= 3.11
    return code is not None and code & 0xFF in _DAMAGE_CODES


def _damage_message(path: Path, exc: BaseException) -> str:
    return (f"the job journal {path} is damaged ({exc}). Move it aside (e.g. mv {path} {path}.corrupt) or restart "
            "the controller, which moves a damaged journal aside and starts a fresh one; the jobs themselves are "
            "safe in the hosts' job directories and list_jobs(host=...) rediscovers them")


def now() -> float:
    """Wall-clock unix time in seconds (float): job times must survive process restarts.

    Reads :func:`agent_tools.clock.wall_time`, so a replay on a virtual clock moves it too.
    """
    return wall_time()
