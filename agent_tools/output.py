r"""Bounded, cleaned views of command output for a model to read.

All bytes stay on the host (in the job's directory); the agent gets a head + tail view with the total
byte count and a visible truncation marker.

What cleaning does (:func:`clean_text`), deliberately:

* **Colours and progress redraws are cleaned away**, because they carry nothing a reader needs: SGR sequences
  (``ESC [ ... m``) are removed (the view's ``note`` then says so), and a line redrawn with ``\r`` collapses to
  its last state *when it is a progress redraw*: every part of the line reads the same once digits, spaces, bar
  and spinner characters
  (``#=>-.|/\*█░▒▓▏▎▍▌▋▊▉%``) are set aside, such as ``[##   ]  10%`` then ``[#### ]  40%``. An erase-line
  (``ESC [ K``, ``ESC [ 2K``) right after the ``\r`` of such a redraw goes with it. ``\r\n`` is a line end.
* **Nothing else vanishes without trace.** Every other control sequence and character is shown as a visible
  escape, character for character (:func:`agent_tools.display.safe_text`): OSC sequences (``ESC ] 52`` clipboard
  writes, ``ESC ] 0`` titles, ``ESC ] 8`` hyperlinks) as ``\x1b]...\x07``, other CSI sequences (cursor movement,
  screen and line clears) as ``\x1b[2J``, C1 controls (``\x9b``), BEL, backspace, DEL, bidi overrides and
  zero-width characters (``\u202e``, ``\u200b``); a ``\r`` redraw that is not a progress bar keeps every part,
  each ``\r`` shown as ``\r`` (``E…red…G\u202erev H\rOVERWRITTEN`` shows the text the redraw would hide). NUL
  is ``\0`` and invalid UTF-8 is U+FFFD. A backslash the command wrote stays as it is (a path, a regex), so
  ``\0`` reads the same whether the command wrote a NUL or the two characters: the view's ``note`` says when
  cleaning showed escapes (and when it removed colours or collapsed a redraw), so a reader knows which reading
  to doubt; the raw bytes stay on the host (``od -c`` of the job's output file shows them).
* **Secrets are redacted** (:func:`agent_tools.redact.redact`). Where a view or a page cuts the stream, the
  secrets are found with the bytes on both sides of the cut (the host sends :data:`VIEW_CONTEXT_BYTES` more
  around each cut, :func:`view_request`) and a secret the cut splits is hidden on both sides.

The CLI never writes these views raw: it shows them through :mod:`agent_tools.display`, which escapes again.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from pydantic import BaseModel, Field

from .display import has_escapes, safe_text
from .redact import redact_slices

__all__ = ["BINARY", "VIEW_CONTEXT_BYTES", "OutputView", "clean_lines", "clean_text", "clean_window", "make_view",
           "name_job", "split_budget", "view_request"]

VIEW_CONTEXT_BYTES = 4096
"""Bytes read past each cut of a view or page, only to find secrets that straddle the cut (a PEM private key block
of a 4096-bit RSA key is about 3.2 KiB)."""

_SGR_RE = re.compile(r"\x1b\[[0-9;:]*m")
_ERASE_LINE_RE = re.compile(r"^(?:\x1b\[[0-2]?K)+")
#: characters a progress bar or spinner redraws (set aside when comparing the parts of a ``\r`` redraw)
_PROGRESS_NOISE_RE = re.compile(r"[\d\s#=>\-.|/\\*%<~_()\[\]:,+\u2580-\u259f\u2800-\u28ff]+")


class OutputView(BaseModel):
    """A bounded view of one output stream.

    ``text`` holds the head and tail of the stream, cleaned; when bytes were left out, a marker line
    ``… [N bytes omitted; job_output(offset=O) reads on from there] …`` stands where they were (``O`` is the
    stream offset of the first byte left out; a tool result's marker names its job too, ``job_id=...``).
    ``total_bytes`` counts every byte the command wrote to this stream (raw, before cleaning); the full bytes
    stay on the host and ``job_output`` pages them.
    """

    text: str = Field(default="", description="head + tail of the stream, cleaned for reading")
    total_bytes: int = Field(default=0, description="bytes written to this stream in all (raw)")
    omitted_bytes: int = Field(default=0, description="raw bytes left out of `text` (0 = complete)")
    offset: int = Field(default=0, description="stream offset (bytes) where `text` begins (new output of a "
                                               "job_status call starts after what was shown before)")
    note: str = Field(default="", description="what cleaning did to `text` (colours removed, redraws collapsed, "
                                               "control characters shown as escapes, binary data escaped)")

    @property
    def truncated(self) -> bool:
        """True when ``text`` does not hold every byte of the stream."""
        return self.omitted_bytes > 0


#: the call in a view's marker (``… [N bytes omitted; job_output(offset=O) reads on from there] …``)
_MARKER_CALL_RE = re.compile(r"(bytes omitted[^;\n]*; job_output\()(offset=\d+)")


def name_job(text: str, job_id: str) -> str:
    """``text`` (an output view's) with its markers' ``job_output`` calls naming ``job_id``, as every other
    ``next`` of a result does (a view is built before it is known whose job it shows)."""
    return _MARKER_CALL_RE.sub(lambda m: f"{m.group(1)}job_id={job_id!r}, {m.group(2)}", text)


def _progress_key(part: str) -> str:
    return _PROGRESS_NOISE_RE.sub("", _ERASE_LINE_RE.sub("", part))


def _redraws(line: str) -> str:
    """A line holding ``\\r``: its last state if it is a progress redraw, else every part with ``\\r`` kept (to be
    shown as an escape)."""
    parts = [p for p in line.split("\r") if _ERASE_LINE_RE.sub("", p)]
    if not parts:
        return ""
    key = _progress_key(parts[-1])
    if all(_progress_key(p) == key for p in parts):
        return _ERASE_LINE_RE.sub("", parts[-1])
    return line


def _clean(data: bytes) -> str:
    """:func:`clean_text` without the redaction."""
    text = data.decode("utf-8", errors="replace").replace("\x00", "\\0")
    text = _SGR_RE.sub("", text).replace("\r\n", "\n")
    if "\r" in text:
        text = "\n".join(_redraws(line) if "\r" in line else line for line in text.split("\n"))
    return safe_text(text)


def clean_text(data: bytes) -> str:
    """Decode ``data`` for reading (see the module docstring): UTF-8 with U+FFFD for invalid bytes, NUL as ``\\0``,
    colours removed, progress redraws collapsed to their final state, every other control sequence or character
    shown as a visible escape, secrets (tokens, keys, passwords; :func:`agent_tools.redact.redact`) replaced by
    ``[REDACTED]``: the raw bytes stay on the host only.

    :param data: raw bytes (any encoding; UTF-8 expected).
    :returns: a printable ``str``.
    """
    return clean_window(data, 0, len(data))


def clean_window(data: bytes, start: int, end: int) -> str:
    """:func:`clean_text` of ``data[start:end]``, its secrets found with all of ``data`` around it: a secret that
    ``start`` or ``end`` cuts is hidden in part as well.

    :param data: the bytes of the slice plus context on both sides.
    :param start: where the slice begins in ``data`` (bytes; moved back to a UTF-8 character boundary).
    :param end: where it ends (bytes; likewise).
    """
    return clean_lines(data, [(start, end)])[0]


def clean_lines(data: bytes, lines: Sequence[tuple[int, int]]) -> list[str]:
    """:func:`clean_window` of each ``(start, end)`` of ``lines`` (bytes, in ``data``), in one pass: ``data`` is
    cleaned piece by piece between the cuts and its secrets are found once, so many lines of one window cost one
    window, not one window each (a search matching thousands of lines)."""
    ranges = [(_char_boundary(data, a), _char_boundary(data, b)) for a, b in lines]
    cuts = sorted({0, len(data), *(p for r in ranges for p in r)})
    at: dict[int, int] = {}
    pieces: list[str] = []
    n = 0
    for a, b in itertools.pairwise(cuts):
        at[a] = n
        pieces.append(_clean(data[a:b]))
        n += len(pieces[-1])
    at[len(data)] = n
    return redact_slices("".join(pieces), [(at[a], at[b]) for a, b in ranges])


def _char_boundary(data: bytes, pos: int) -> int:
    """``pos`` moved back over UTF-8 continuation bytes (at most 3), so that a cut never splits a character."""
    p = pos
    while 0 < p < len(data) and p > pos - 3 and data[p] & 0xC0 == 0x80:
        p -= 1
    return p


def split_budget(max_bytes: int) -> tuple[int, int]:
    """Split a view budget into (head_bytes, tail_bytes): a quarter head, the rest tail.

    The tail gets more because the end of a command's output (the error, the summary) matters most.
    """
    head = max_bytes // 4
    return head, max_bytes - head


def view_request(max_bytes: int) -> tuple[int, int]:
    """The head and tail bytes to ask the host for, for a view of ``max_bytes``: the view's own
    (:func:`split_budget`) plus :data:`VIEW_CONTEXT_BYTES` each, read only to find secrets across the cuts."""
    head, tail = split_budget(max_bytes)
    return head + VIEW_CONTEXT_BYTES, tail + VIEW_CONTEXT_BYTES


def make_view(head: bytes, tail: bytes, total_bytes: int, *, stream: str = "stdout", start: int = 0,
              budget: int | None = None) -> OutputView:
    """Build a view from the raw ``head`` and ``tail`` bytes of a stream of ``total_bytes``.

    When ``len(head) + len(tail) >= total_bytes`` the two overlap or meet and the stream is complete:
    pass the whole stream as ``head`` and ``b""`` as ``tail`` in that case.

    :param head: the first bytes of the stream (from offset ``start``).
    :param tail: the last bytes of the stream (may be empty).
    :param total_bytes: the size in bytes of the part of the stream viewed (from ``start`` to its end).
    :param stream: ``stdout`` or ``stderr``, named in the marker's ``job_output`` call.
    :param start: the stream offset (bytes) where ``head`` begins (a view of new output starts later than 0).
    :param budget: the view's size in bytes (:func:`split_budget` of it for head and tail) when ``head`` and
        ``tail`` were asked for with :func:`view_request`: the bytes past each cut are then context only. None:
        ``head`` and ``tail`` are the view.
    """
    if _binary(head) and (tail or len(head) >= total_bytes) and total_bytes > sum(split_budget(BINARY_VIEW_BYTES)):
        # escaped binary data is noise to read: a short head and tail, and a note that says what it is
        keep_head, keep_tail = split_budget(BINARY_VIEW_BYTES)
        view = _cut_view(head, tail or head, total_bytes, keep_head, keep_tail, stream, start)
        view.note = BINARY
        return view
    view = _make_view(head, tail, total_bytes, stream=stream, start=start, budget=budget)
    notes = []
    for part in (head, tail):
        plain = _SGR_BYTES_RE.sub(b"", part)
        if len(plain) != len(part) and COLOURS_REMOVED not in notes:
            notes.append(COLOURS_REMOVED)
        if _REDRAW_BYTES_RE.search(plain) and REDRAWS_COLLAPSED not in notes:
            notes.append(REDRAWS_COLLAPSED)
        if ESCAPES_SHOWN not in notes and has_escapes(plain.decode("utf-8", "replace").replace("\r", "")):
            notes.append(ESCAPES_SHOWN)
    view.note = "; ".join(n for n in (COLOURS_REMOVED, REDRAWS_COLLAPSED, ESCAPES_SHOWN) if n in notes)
    return view


#: bytes of a binary stream a view shows (head and tail, escaped)
BINARY_VIEW_BYTES = 128
#: :attr:`OutputView.note` of a binary stream
BINARY = ("binary data (NUL bytes or invalid UTF-8), shown escaped and short: pipe the command into od -A d -c | "
          "head to read its bytes, or file - to say what it is")


def _binary(data: bytes) -> bool:
    """Whether a stream's first bytes are binary data rather than text: more than a tenth of them NUL bytes or
    not UTF-8. Executables and archives are full of NULs; random and compressed data is mostly invalid UTF-8. A
    stray NUL or bad byte in text (``find -print0``, a log with a torn write) keeps it text: grep(1)'s one-NUL
    rule would hide the rest of such a stream behind a 128-byte view."""
    sample = data[:4096]
    if not sample:
        return False
    odd = sample.count(b"\0") + sample.decode("utf-8", "replace").count("\ufffd")
    return odd * 10 > len(sample)


#: :attr:`OutputView.note` when the bytes held SGR colour sequences, which cleaning removes
COLOURS_REMOVED = "colour codes (ANSI SGR escape sequences) were removed"
#: ... when a line was redrawn with ``\r`` (a progress bar keeps its last state; other redraws show each ``\r``)
REDRAWS_COLLAPSED = "a line redrawn with \\r shows its last state if it is a progress bar (else each \\r as \\r)"
#: ... when cleaning showed characters as escapes: a command's own backslashes are kept, so they read alike
ESCAPES_SHOWN = ("control characters are shown as escapes (NUL as \\0, ESC as \\x1b): a backslash sequence in "
                 "the text may be one")
_SGR_BYTES_RE = re.compile(rb"\x1b\[[0-9;:]*m")
_REDRAW_BYTES_RE = re.compile(rb"\r(?!\n)")


def _make_view(head: bytes, tail: bytes, total_bytes: int, *, stream: str, start: int,
               budget: int | None) -> OutputView:
    if budget is not None:
        keep_head, keep_tail = split_budget(budget)
        if not tail:  # the host sent the whole stream
            if len(head) <= keep_head + keep_tail:
                return OutputView(text=clean_text(head), total_bytes=total_bytes, omitted_bytes=0, offset=start)
            tail = head[-(keep_tail + VIEW_CONTEXT_BYTES):]
        return _cut_view(head, tail, total_bytes, keep_head, keep_tail, stream, start)
    omitted = max(0, total_bytes - len(head) - len(tail))
    if omitted == 0:
        data = head + tail if total_bytes >= len(head) + len(tail) else head
        return OutputView(text=clean_text(data[:total_bytes] if total_bytes else data),
                          total_bytes=total_bytes, omitted_bytes=0, offset=start)
    return _cut_view(head, tail, total_bytes, len(head), len(tail), stream, start)


def _cut_view(head: bytes, tail: bytes, total_bytes: int, keep_head: int, keep_tail: int, stream: str,
              start: int) -> OutputView:
    """Head and tail cut to ``keep_head``/``keep_tail`` bytes (at line ends where that loses little); the bytes
    beyond the cuts only serve redaction."""
    h = min(keep_head, len(head))
    t0 = max(0, len(tail) - keep_tail)
    # cut at line boundaries where that loses little, so the model does not read half a line
    nl = head.rfind(b"\n", 0, h)
    if nl >= h // 2:
        h = nl + 1
    nl = tail.find(b"\n", t0)
    if 0 <= nl - t0 < (len(tail) - t0) // 2:
        t0 = nl + 1
    omitted = max(0, total_bytes - h - (len(tail) - t0))
    where = f"offset={start + h}" + (f", stream='{stream}'" if stream != "stdout" else "")
    marker = f"… [{omitted} bytes omitted; job_output({where}) reads on from there] …\n"
    head_text = clean_window(head, 0, h)
    if head_text and not head_text.endswith("\n"):
        head_text += "\n"
    return OutputView(text=head_text + marker + clean_window(tail, t0, len(tail)), total_bytes=total_bytes,
                      omitted_bytes=omitted, offset=start)
