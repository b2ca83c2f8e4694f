"""Lexical path arithmetic for policy decisions (the host is never consulted: symlinks are not resolved).

``~`` stands for the login directory of the host the command runs on; a directory the policy cannot know is
``None``.
"""

from __future__ import annotations

__all__ = ["climbed", "join_dir", "normalise_path"]


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
