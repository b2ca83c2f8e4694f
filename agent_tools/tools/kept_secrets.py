"""Keep a file's secrets through a write of the text a model was shown.

Every result hides secrets as ``[REDACTED]`` (:mod:`agent_tools.redact`), so the text a model edits and writes
back (``read_file``'s text, changed) holds the marker where the file holds a secret. Written as it is, that would
replace the secret with the marker. :func:`keep_secrets` puts each secret back where the written text kept its
marker: the file's text is redacted as a result shows it, the written text is compared with that, line by line
(and character by character inside changed lines), and each marker that stands where a secret's marker stood
gets the secret back. A line moved elsewhere keeps its secret too when the file has only one line like it. A
marker that stands where no secret was (a new file, a new line) is reported, and the write is refused: the value
it stands for is not known.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from ..redact import MARK, secret_spans

__all__ = ["Kept", "keep_secrets", "shown_text"]

_MARK_RE = re.compile(re.escape(MARK))
#: the largest changed block (shown characters x written characters) compared character by character
_MAX_CHAR_WORK = 4_000_000


def shown_text(text: str, extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> tuple[str, dict[int, str]]:
    """``text`` as a result shows it (``redact(text, extra_patterns)``) and, by the position of each marker in
    that shown text, the secret it hides."""
    out: list[str] = []
    secrets: dict[int, str] = {}
    pos = at = 0
    for start, end in secret_spans(text, extra_patterns):
        out.append(text[pos:start])
        at += start - pos
        secrets[at] = text[start:end]
        out.append(MARK)
        at += len(MARK)
        pos = end
    out.append(text[pos:])
    return "".join(out), secrets


@dataclass
class Kept:
    """What :func:`keep_secrets` made of a text: ``text`` to write, the (1-based) ``lines`` whose markers got the
    file's secret back, and the ``unknown`` lines holding a marker that stands for no secret of the file."""

    text: str
    lines: list[int] = field(default_factory=list)
    unknown: list[int] = field(default_factory=list)


def _offsets(lines: Sequence[str]) -> list[int]:
    out = [0]
    for line in lines:
        out.append(out[-1] + len(line))
    return out


def keep_secrets(original: str | None, edited: str,
                 extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> Kept:
    """``edited`` with each ``[REDACTED]`` that stands where ``original`` (as a result shows it) hides a secret
    replaced by that secret.

    :param original: the file's text now (None: there is no file, so no secret to keep).
    :param edited: the text to write: the shown text, changed.
    :param extra_patterns: the ``redact:`` patterns the results of this host are redacted with.
    """
    marks = [m.start() for m in _MARK_RE.finditer(edited)]
    if not marks:
        return Kept(edited)
    if original is None:
        return Kept(edited, unknown=sorted({edited.count("\n", 0, p) + 1 for p in marks}))
    shown, secrets = shown_text(original, extra_patterns)
    literal = {m.start() for m in _MARK_RE.finditer(shown)} - set(secrets)  # the file's own "[REDACTED]" text
    found: dict[int, str | None] = {}  # a marker of edited -> the secret it keeps (None: the file's literal text)

    def take(p: int, q: int) -> None:
        if p not in found and q in secrets:
            found[p] = secrets[q]
        elif p not in found and q in literal:
            found[p] = None

    a_lines, b_lines = shown.splitlines(keepends=True), edited.splitlines(keepends=True)
    a_off, b_off = _offsets(a_lines), _offsets(b_lines)
    changed: list[tuple[int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a_lines, b_lines, autojunk=False).get_opcodes():
        inside = [p for p in marks if b_off[j1] <= p < b_off[j2]]
        if tag == "equal":
            for p in inside:
                take(p, p - b_off[j1] + a_off[i1])
        elif inside and i1 < i2:
            changed.append((a_off[i1], a_off[i2], b_off[j1], b_off[j2]))
    # inside a changed block: a marker in a run of text the file's shown text has at the same place (blocks of
    # reasonable size only: the character matcher takes time quadratic in them; a marker not found is refused)
    for a0, a1, b0, b1 in changed:
        if (a1 - a0) * (b1 - b0) > _MAX_CHAR_WORK:
            continue
        matcher = SequenceMatcher(None, shown[a0:a1], edited[b0:b1], autojunk=False)
        for a, b, size in matcher.get_matching_blocks():
            for p in marks:
                if b0 + b <= p and p + len(MARK) <= b0 + b + size:
                    take(p, a0 + a + (p - b0 - b))
    # a line moved: the lines of the file that read the same, marker for marker, if they hide the same secrets
    by_line: dict[str, set[tuple[str | None, ...]]] = {}
    for n, line in enumerate(a_lines):
        if MARK in line:
            held = tuple(secrets.get(a_off[n] + m.start()) for m in _MARK_RE.finditer(line))
            by_line.setdefault(line.rstrip("\r\n"), set()).add(held)
    for n, text in enumerate(b_lines):
        here = [p for p in marks if b_off[n] <= p < b_off[n + 1]]
        same = by_line.get(text.rstrip("\r\n"), set())
        if len(same) == 1 and any(p not in found for p in here):
            for p, value in zip(here, next(iter(same)), strict=True):
                found.setdefault(p, value)
    out: list[str] = []
    pos = 0
    kept: set[int] = set()
    unknown: set[int] = set()
    for p in marks:
        number = edited.count("\n", 0, p) + 1
        if p not in found:
            unknown.add(number)
            continue
        value = found[p]
        if value is not None:
            out += [edited[pos:p], value]
            pos = p + len(MARK)
            kept.add(number)
    out.append(edited[pos:])
    return Kept("".join(out), sorted(kept), sorted(unknown))
