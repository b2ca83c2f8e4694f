"""Files only this user may read: the state directory and the SQLite files in it (journal, approvals).

SQLite creates a database's ``-wal`` and ``-shm`` files with the database file's own permissions, so creating the
database 0600 before SQLite opens it keeps all three private. A state directory that already exists with access for
group or others is tightened to 0700 when it belongs to this user and is not a shared (sticky) directory such as
``/tmp``; otherwise a warning names it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import structlog

__all__ = ["private_dir", "private_file"]

log = structlog.get_logger(__name__)


def private_dir(path: Path) -> None:
    """Create ``path`` (and parents) 0700, or tighten an existing one of ours (see the module docstring)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        st = path.stat()
        if not st.st_mode & 0o077:
            return
        if st.st_uid == os.geteuid() and not st.st_mode & stat.S_ISVTX and path.resolve() != Path.home().resolve():
            os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)
            log.info("state_dir.tightened", path=str(path), mode=oct(stat.S_IMODE(st.st_mode) & 0o700))
        else:
            log.warning("state_dir.readable_by_others", path=str(path), mode=oct(stat.S_IMODE(st.st_mode)),
                        hint="its files are 0600; use a directory of your own (AGENT_TOOLS_STATE_DIR)")
    except OSError as exc:
        log.debug("state_dir.stat_failed", path=str(path), error=str(exc))


def private_file(path: Path) -> None:
    """Create ``path`` 0600 if it does not exist, and take group/other access away from it and its SQLite
    companions (``-wal``, ``-shm``) if they have it."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        for companion in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if companion.exists() and companion.stat().st_mode & 0o077:
                os.chmod(companion, 0o600)
    except OSError as exc:  # sqlite3 reports a real problem with the file itself
        log.debug("state_file.chmod_failed", path=str(path), error=str(exc))
