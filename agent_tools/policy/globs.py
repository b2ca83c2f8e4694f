"""Pathname patterns as sets of strings: whether two fnmatch patterns may name the same word.

A rule that asks or denies counts a pattern the shell expands (``/d?v/sda``, ``re[b]oot``) for every name it may
expand to, so it compares the word's pattern with its own (``/dev/*``, ``reboot``): they meet when some string
matches both. Both are read as :func:`fnmatch.fnmatchcase` patterns (``*`` also matches ``/``: an
over-approximation of bash's pathname expansion, where ``*`` stops at ``/``).
"""

from __future__ import annotations

import functools

__all__ = ["globs_intersect"]


def _glob_tokens(pattern: str) -> list[str | frozenset[str] | None]:
    """An fnmatch pattern as tokens: a one-character string (a literal), a frozenset (a ``[...]`` class; one holding
    ``"!"`` is negated), None (``?``) and the two-character string ``"**"`` (``*``)."""
    out: list[str | frozenset[str] | None] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            if not out or out[-1] != "**":
                out.append("**")
        elif ch == "?":
            out.append(None)
        elif ch == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            members: set[str] = set()
            k = 0
            while k < len(body):
                if k + 2 < len(body) and body[k + 1] == "-":
                    members.update(chr(c) for c in range(ord(body[k]), ord(body[k + 2]) + 1))
                    k += 3
                else:
                    members.add(body[k])
                    k += 1
            out.append(frozenset({"!", *members}) if negate else frozenset(members))
            i = end
        else:
            out.append(ch)
        i += 1
    return out


def _chars_meet(a: str | frozenset[str] | None, b: str | frozenset[str] | None) -> bool:
    """Whether two one-character tokens accept a common character."""
    if a is None or b is None:
        return True
    na, nb = isinstance(a, frozenset) and "!" in a, isinstance(b, frozenset) and "!" in b
    sa = ({a} if isinstance(a, str) else set(a)) - ({"!"} if na else set())
    sb = ({b} if isinstance(b, str) else set(b)) - ({"!"} if nb else set())
    if na and nb:
        return True  # both exclude finitely many characters
    if na:
        return bool(sb - sa)
    if nb:
        return bool(sa - sb)
    return bool(sa & sb)


@functools.lru_cache(maxsize=4096)
def globs_intersect(a: str, b: str) -> bool:
    """Whether some string matches both fnmatch patterns ``a`` and ``b`` (``/d?v/sda`` and ``/dev/*`` do)."""
    ta, tb = _glob_tokens(a), _glob_tokens(b)

    @functools.cache
    def meet(i: int, j: int) -> bool:
        if i == len(ta) and j == len(tb):
            return True
        if i < len(ta) and ta[i] == "**":
            return meet(i + 1, j) or (j < len(tb) and meet(i, j + 1))
        if j < len(tb) and tb[j] == "**":
            return meet(i, j + 1) or (i < len(ta) and meet(i + 1, j))
        if i == len(ta) or j == len(tb):
            return False
        return _chars_meet(ta[i], tb[j]) and meet(i + 1, j + 1)

    return meet(0, 0)
