"""Command substitutions in text the shell parser hands over as plain text.

tree-sitter-bash reads some places bash evaluates as literal text: a backquote inside ``${x:-...}`` (and every other
parameter expansion operator: ``${x/a/`cmd`}``, ``${x#`cmd`}``), a process substitution there (``${x:-<(cmd)}``), a
backquote in the body of a here-document whose delimiter is not quoted, and single quotes inside ``"${x:-'...'}"``
(which are literal characters there, so what they hold is expanded). Bash runs all of these (bash(1), "Command
Substitution", "Parameter Expansion": the word is "subject to tilde expansion, parameter expansion, command
substitution, and arithmetic expansion", "Here Documents": "all lines of the here-document are subjected to
parameter expansion, command substitution, and arithmetic expansion"). Inside backquotes, a backslash before
``$``, `````, ``\\`` (and ``"`` inside double quotes) is removed before the text is run, so ```echo \\`cmd\\```` runs
``cmd`` (bash(1): "When the old-style backquote form of substitution is used, backslash retains its literal
meaning except when followed by $, `, or \\").

:func:`find_substitutions` scans such text the way bash's reader does for one quoting context and returns every
substitution in it with the script it runs, so the policy decides those commands; the policy also treats each one
as something the parser could not see (at least ``ask``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["OPENERS", "Quoting", "Substitution", "find_substitutions", "unescape_backquoted"]

Quoting = Literal["unquoted", "double", "heredoc"]
"""How bash reads the text: outside quotes (``'``, ``"``, ``$'`` quote; ``<(`` is a process substitution), inside
double quotes (only ``\\$ \\` \\" \\\\`` escape), or as the body of a here-document (``"`` is an ordinary
character too)."""

OPENERS = ("`", "$(", "<(", ">(")
"""Text that may open a substitution; a string holding none of them holds none."""


@dataclass(frozen=True)
class Substitution:
    """One substitution found in text: ``opener`` (`````, ``$(``, ``<(`` or ``>(``), ``text`` as written, starting
    at character ``start`` of the text scanned, and ``script``, the command text bash runs (backquote escapes
    removed), or None when it is not terminated."""

    opener: str
    text: str
    start: int
    script: str | None


def unescape_backquoted(body: str, *, in_double: bool = False) -> str:
    """The script of a backquoted substitution: ``\\$``, ``\\``` and ``\\\\`` (and ``\\"`` inside double quotes)
    lose their backslash; every other backslash stays."""
    special = '$`\\"' if in_double else "$`\\"
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] in special:
            out.append(body[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _backquote_end(text: str, start: int) -> int:
    """Index of the backquote closing the one at ``start - 1`` (a backslash escapes the next character), or -1."""
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "`":
            return i
        i += 1
    return -1


def _paren_end(text: str, start: int) -> int:
    """Index of the ``)`` closing the ``(`` at ``start - 1``, skipping quoted text, escapes and backquotes, or -1.
    (A ``case`` pattern's lone ``)`` is counted as a close: the script found is then cut short, and the policy asks
    all the same.)"""
    depth = 1
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "'":
            end = text.find("'", i + 1)
            i = len(text) if end == -1 else end + 1
            continue
        if ch == '"':
            i = _double_end(text, i + 1) + 1
            continue
        if ch == "`":
            end = _backquote_end(text, i + 1)
            i = len(text) if end == -1 else end + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _double_end(text: str, start: int) -> int:
    """Index of the ``"`` closing a double-quoted string opened at ``start - 1`` (len(text) when unterminated)."""
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == '"':
            return i
        if ch == "`":
            end = _backquote_end(text, i + 1)
            i = len(text) if end == -1 else end + 1
            continue
        if text.startswith("$(", i):
            end = _paren_end(text, i + 2)
            i = len(text) if end == -1 else end + 1
            continue
        i += 1
    return len(text)


def find_substitutions(text: str, quoting: Quoting) -> list[Substitution]:
    """Every command or process substitution bash would run in ``text`` read in the context ``quoting``, outermost
    only (the script of each holds the nested ones).

    :param text: source text as written (escapes and quotes still in it).
    :param quoting: the context it is read in (:data:`Quoting`).
    """
    if not any(o in text for o in OPENERS):
        return []
    found: list[Substitution] = []
    escapable = {"unquoted": None, "double": '$`"\\\n', "heredoc": "$`\\\n"}[quoting]
    in_double = quoting == "double"
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if escapable is None or text[i + 1 : i + 2] in tuple(escapable):
                i += 2
            else:
                i += 1
            continue
        if quoting == "unquoted" and ch == "'":
            end = text.find("'", i + 1)
            i = len(text) if end == -1 else end + 1
            continue
        if quoting == "unquoted" and text.startswith("$'", i):
            j = i + 2
            while j < len(text) and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if quoting == "unquoted" and ch == '"':
            end = _double_end(text, i + 1)
            inner = find_substitutions(text[i + 1 : end], "double")
            found.extend(replace(sub, start=sub.start + i + 1) for sub in inner)
            i = end + 1
            continue
        if ch == "`":
            end = _backquote_end(text, i + 1)
            if end == -1:
                found.append(Substitution("`", text[i:], i, None))
                break
            body = text[i + 1 : end]
            found.append(Substitution("`", text[i : end + 1], i, unescape_backquoted(body, in_double=in_double)))
            i = end + 1
            continue
        opener = text[i : i + 2]
        if opener == "$(" or (quoting == "unquoted" and opener in ("<(", ">(")):
            end = _paren_end(text, i + 2)
            if end == -1:
                found.append(Substitution(opener, text[i:], i, None))
                break
            found.append(Substitution(opener, text[i : end + 1], i, text[i + 2 : end]))
            i = end + 1
            continue
        i += 1
    return found
