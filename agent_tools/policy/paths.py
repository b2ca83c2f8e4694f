"""Lexical path arithmetic for policy decisions (the host is never consulted: symlinks are not resolved).

``~`` stands for the login directory of the host the command runs on; a directory computed at run time (``cd $D``)
is ``None``. A directory named by static text that only the host can resolve is :data:`ANY_DIR`: ``~NAME`` (user
NAME's login directory: on Debian ``~sys`` is ``/dev`` and ``~bin`` is ``/bin``), ``~-`` (``$OLDPWD``), ``~+N`` /
``~-N`` (the directory stack) and ``/proc/PID/cwd`` (PID 1's is ``/``); :func:`indirect_names` gives the names
such a path may stand for, so a rule on ``/dev/*`` or ``/etc`` sees ``~sys/sda`` and ``~daemon/../../etc``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["ANY_DIR", "climbed", "indirect_names", "join_dir", "normalise_path"]

ANY_DIR = "/*"
"""A directory the policy cannot know (any one, ``/`` included), written as the pattern of its names: a name below
it is the pattern ``/*/NAME`` (rules match such patterns against theirs: ``/*/sda`` may be ``/dev/sda``)."""

#: ``~NAME``, ``~-``, ``~+N``, ``~-N``, ``~N`` (bash(1) Tilde Expansion), then ``/`` or the end
_TILDE_ANY_RE = re.compile(r"^~(?:[A-Za-z0-9_][A-Za-z0-9_.-]*\$?|-[0-9]*|\+[0-9]+)(?=/|$)")
#: ``~+``: ``$PWD``, the directory the command runs in
_TILDE_PWD_RE = re.compile(r"^~\+(?=/|$)")
#: ``/proc/PID/cwd`` (also of a task): that process's working directory; ``self`` is the program itself
_PROC_CWD_RE = re.compile(r"^/proc/(self|thread-self|[0-9]+)(?:/task/[0-9]+)?/cwd(?=/|$)")
#: ``/proc/PID/root`` (also of a task): that process's root directory, ``/`` as far as a name below it goes
_PROC_ROOT_RE = re.compile(r"^/proc/(?:self|thread-self|[0-9]+)(?:/task/[0-9]+)?/root(?=/|$)")
#: ``/proc/PID/fd/N`` and ``map_files``: whatever file another process holds open (a device among them)
_PROC_FD_RE = re.compile(r"^/proc/[0-9]+(?:/task/[0-9]+)?/(?:fd|map_files)/[^/]+(?=/|$)")


def normalise_path(arg: str) -> str:
    """Lexically normalise an absolute or ``~`` path: ``//`` -> ``/``, ``/./etc/`` -> ``/etc``, ``/a/..`` -> ``/``.

    Other strings are returned unchanged. Symlinks are not resolved (the host is not consulted).
    """
    if arg.startswith("/"):
        root, rest = "/", arg
    elif arg == "~" or arg.startswith("~/"):
        root, rest = "~", arg[1:]
    else:
        return arg
    parts: list[str] = []
    for part in rest.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            elif root == "~":
                return arg  # above the login directory: not ~ itself (see climbed)
            continue
        parts.append(part)
    if not parts:
        return root
    return root.rstrip("/") + "/" + "/".join(parts)


def climbed(base: str | None, path: str) -> str | None:
    """Where ``path`` leads from ``base`` when its ``..`` climb above a directory whose depth is not known (``~``,
    the login directory, or an unknown one: None): the rest from ``/``, which it is once the climb is as deep as
    that directory (``..`` at ``/`` stays at ``/``), or None when it does not climb that far.

    >>> climbed("~", "../../dev/sda"), climbed("~/a", "../../../dev"), climbed(None, "../../x"), climbed("~", "a/..")
    ('/dev/sda', '/dev', '/x', None)
    """
    if path.startswith("/"):
        return None
    if path == "~" or path.startswith("~/"):
        base, path = "~", path[2:]
    if base is not None and not base.startswith("~"):
        return None
    parts = [] if base is None else [p for p in base[1:].split("/") if p]
    above = False
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            else:
                above = True
            continue
        parts.append(part)
    return "/" + "/".join(parts) if above else None


def join_dir(base: str | None, path: str) -> str | None:
    """``path`` resolved against the directory ``base`` (``~``-relative or absolute), lexically.

    Returns None when the result cannot be known: ``base`` is None, or ``..`` climbs out of ``~`` (the login
    directory's parent is not known).

    >>> join_dir("/", "dev/sda"), join_dir("~", "a/../b"), join_dir("~", ".."), join_dir(None, "x")
    ('/dev/sda', '~/b', None, None)
    """
    if path.startswith("/") or path == "~" or path.startswith("~/"):
        return normalise_path(path)
    if base is None:
        return None
    parts = [] if base in ("/", "~") else [p for p in base.split("/")[1:] if p]
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                if base.startswith("~"):
                    return None
                continue
            parts.pop()
            continue
        parts.append(part)
    root = "~" if base.startswith("~") else ""
    return (root + "/" + "/".join(parts)) if parts else (root or "/")


def _below_any(rest: str) -> list[str]:
    """The names ``rest`` (relative) may stand for below :data:`ANY_DIR`: ``/REST`` (the directory is ``/``) and
    the pattern ``/*/REST``, after its own ``..`` (which may climb anywhere above)."""
    parts: list[str] = []
    for part in rest.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    if not parts:
        return ["/", ANY_DIR]
    tail = "/".join(parts)
    return ["/" + tail, ANY_DIR + "/" + tail]


def indirect_names(path: str, cwds: Sequence[str | None]) -> list[str] | None:
    """The names ``path`` may stand for when it starts with a directory only the host can resolve, or None when it
    does not.

    ``~NAME/REST``, ``~-/REST`` and ``/proc/PID/cwd/REST``: ``/REST`` and the pattern ``/*/REST`` (:data:`ANY_DIR`);
    ``~+/REST`` and ``/proc/self/cwd/REST``: REST in each of ``cwds`` (the directories the command may run in);
    ``/proc/PID/root/REST``: ``/REST``; ``/proc/PID/fd/N``: any file (the pattern ``/*/*``).

    >>> indirect_names("~sys/sda", ["~"]), indirect_names("~+/x", ["/dev"]), indirect_names("/proc/1/cwd/etc", [])
    (['/sda', '/*/sda'], ['/dev/x'], ['/etc', '/*/etc'])
    """
    for pattern in (_TILDE_ANY_RE, _PROC_CWD_RE, _TILDE_PWD_RE, _PROC_ROOT_RE, _PROC_FD_RE):
        m = pattern.match(path)
        if m is None:
            continue
        rest = path[m.end() :].lstrip("/")
        if pattern is _PROC_FD_RE:  # any file (`/*/*` holds /dev/watchdog), or a name below a directory held open
            return [ANY_DIR + "/*", *_below_any(rest)[1:]] if rest else [ANY_DIR + "/*"]
        if pattern is _PROC_ROOT_RE:
            return [normalise_path("/" + rest)]
        own = pattern is _TILDE_PWD_RE or (pattern is _PROC_CWD_RE and m.group(1) in ("self", "thread-self"))
        if not own:
            return _below_any(rest)
        names = [n for c in cwds for n in (join_dir(c, rest or "."), climbed(c, rest)) if n is not None]
        if any(c is None for c in cwds):
            names += _below_any(rest)
        return list(dict.fromkeys(names)) or _below_any(rest)
    return None
