"""The host aliases an OpenSSH client config names (for ``list_hosts`` and "did you mean" hints).

asyncssh reads the config files to connect, but offers no list of the aliases they define; this module reads
just that much of ssh_config(5): ``Host`` patterns (and the ``HostName`` of each block), following
``Include`` (relative paths are taken from ``~/.ssh``; glob patterns allowed). Keywords are case-insensitive
and may be written ``Key=value``. A pattern with ``*``, ``?`` or a leading ``!`` matches many hosts and names
none, so it is not an alias; ``Match`` blocks name none either.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

__all__ = ["ConfigHost", "config_hosts", "config_match", "config_matches"]

log = structlog.get_logger(__name__)

_MAX_INCLUDE_DEPTH = 16  # ssh(1) gives up at 16 nested Includes too (READCONF_MAX_DEPTH)


@dataclass(frozen=True)
class ConfigHost:
    """One alias of a ``Host`` line: its ``HostName`` and ``User`` (None when the block sets none; a ``Host *``
    block's are not looked at) and the file it is in."""

    alias: str
    hostname: str | None
    path: str
    user: str | None = None


_LINE_RE = re.compile(r"^\s*([A-Za-z]+)\s*(?:=|\s)\s*(.*)$")


def _words(line: str) -> tuple[str, list[str]] | None:
    """``(keyword in lower case, arguments)`` of a config line, None for blank lines and comments."""
    if not line.strip() or line.lstrip().startswith("#"):
        return None
    m = _LINE_RE.match(line)
    if m is None:
        return None
    try:
        args = shlex.split(m.group(2), comments=True)
    except ValueError:  # an unbalanced quote: ssh(1) refuses the line; here it names nothing
        return None
    return m.group(1).lower(), args


def _read(path: Path, depth: int, out: list[tuple[list[str], str | None, str, str | None]]) -> None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        log.debug("sshconfig.unreadable", path=str(path), error=str(exc))
        return
    current: list[str] | None = None  # patterns of the Host block we are in (None: top or a Match block)
    hostname: str | None = None
    user: str | None = None

    def close() -> None:
        if current is not None:
            out.append((current, hostname, str(path), user))

    for raw in text.splitlines():
        parsed = _words(raw)
        if parsed is None:
            continue
        key, args = parsed
        if key == "host":
            close()
            current, hostname, user = args, None, None
        elif key == "match":
            close()
            current, hostname, user = None, None, None
        elif key == "hostname" and args and current is not None and hostname is None:
            hostname = args[0]
        elif key == "user" and args and current is not None and user is None:
            user = args[0]  # (ssh_config(5): the first value obtained is used)
        elif key == "include" and depth < _MAX_INCLUDE_DEPTH:
            for pattern in args:
                expanded = os.path.expanduser(pattern)
                if not os.path.isabs(expanded):
                    expanded = str(Path("~/.ssh").expanduser() / expanded)
                for name in sorted(glob.glob(expanded)):
                    _read(Path(name), depth + 1, out)
    close()


def _blocks(paths: Sequence[str | os.PathLike[str]]) -> list[tuple[list[str], str | None, str, str | None]]:
    out: list[tuple[list[str], str | None, str, str | None]] = []
    for p in paths:
        _read(Path(p), 0, out)
    return out


def config_hosts(paths: Sequence[str | os.PathLike[str]]) -> list[ConfigHost]:
    """Aliases named by the ``Host`` lines of ``paths`` (and their Includes), in file order, without repeats.

    :param paths: OpenSSH client config files (a missing or unreadable file names no alias).
    """
    seen: dict[str, ConfigHost] = {}
    for patterns, hostname, path, user in _blocks(paths):
        for pattern in patterns:
            if any(c in pattern for c in "*?!") or pattern in seen:
                continue
            seen[pattern] = ConfigHost(pattern, hostname, path, user)
    return list(seen.values())


def config_matches(alias: str, paths: Sequence[str | os.PathLike[str]]) -> bool:
    """True when some ``Host`` line of ``paths`` other than a bare ``*`` applies to ``alias`` (ssh_config(5)
    pattern rules: ``*``/``?`` globs, a ``!pattern`` that matches excludes the line)."""
    return config_match(alias, paths) is not None


def config_match(alias: str, paths: Sequence[str | os.PathLike[str]]) -> tuple[str, str] | None:
    """``(the Host line's patterns, its file)`` of the first ``Host`` line of ``paths`` other than a bare ``*``
    that applies to ``alias`` (see :func:`config_matches`), or None."""
    for patterns, _, path, _ in _blocks(paths):
        if patterns == ["*"]:
            continue
        negated = any(p.startswith("!") and fnmatch.fnmatchcase(alias, p[1:]) for p in patterns)
        if not negated and any(not p.startswith("!") and fnmatch.fnmatchcase(alias, p) for p in patterns):
            return " ".join(patterns), path
    return None
