"""Bounded, cleaned views of command output for a model to read.

All bytes stay on the host (in the job's directory); the agent gets a head + tail view with the total
byte count, a visible truncation marker, ANSI escape sequences removed, carriage-return progress redraws
collapsed to their final state, NUL bytes shown as ``\\0`` and invalid UTF-8 as U+FFFD.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from .redact import redact

__all__ = ["OutputView", "clean_text", "make_view", "split_budget"]

# ECMA-48 CSI sequences, OSC sequences (terminated by BEL or ST), and other two-byte escapes.
_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI ... final byte
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC ... BEL | ST
    r"|\x1b[@-Z\\-_]"  # 7-bit C1 escapes
)
# other C0 control characters that garble a transcript (keep \t and \n; \r handled separately), an ESC left
# over from an unterminated sequence, and the C1 controls (U+009B is a one-character CSI on some terminals)
_CTRL_RE = re.compile(r"[\x01-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


class OutputView(BaseModel):
    """A bounded view of one output stream.

    ``text`` holds the head and tail of the stream, cleaned; when bytes were left out, a marker line
    ``… [N bytes omitted; job_output(offset=O) reads on from there] …`` stands where they were (``O`` is the
    stream offset of the first byte left out). ``total_bytes`` counts every byte the command wrote
    to this stream (raw, before cleaning); the full bytes stay on the host and ``job_output`` pages them.
    """

    text: str = Field(default="", description="head + tail of the stream, cleaned for reading")
    total_bytes: int = Field(default=0, description="bytes written to this stream in all (raw)")
    omitted_bytes: int = Field(default=0, description="raw bytes left out of `text` (0 = complete)")
    offset: int = Field(default=0, description="stream offset (bytes) where `text` begins (new output of a "
                                               "job_status call starts after what was shown before)")

    @property
    def truncated(self) -> bool:
        """True when ``text`` does not hold every byte of the stream."""
        return self.omitted_bytes > 0


def _collapse_cr(line: str) -> str:
    # A progress bar redraws with "\r": only the last non-empty redraw of a line is what a terminal shows.
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p]
    return parts[-1] if parts else ""


def clean_text(data: bytes) -> str:
    """Decode ``data`` for reading: UTF-8 with U+FFFD for invalid bytes, NUL as ``\\0``, ANSI escapes
    removed, ``\\r`` redraws collapsed, other control characters dropped, secrets (tokens, keys, passwords;
    :func:`agent_tools.redact.redact`) replaced by ``[REDACTED]``: the raw bytes stay on the host only.

    :param data: raw bytes (any encoding; UTF-8 expected).
    :returns: a printable ``str``.
    """
    text = data.decode("utf-8", errors="replace").replace("\x00", "\\0")
    text = _ANSI_RE.sub("", text)
    text = text.replace("\r\n", "\n")
    if "\r" in text:
        text = "\n".join(_collapse_cr(line) for line in text.split("\n"))
    return redact(_CTRL_RE.sub("", text))


def split_budget(max_bytes: int) -> tuple[int, int]:
    """Split a view budget into (head_bytes, tail_bytes): a quarter head, the rest tail.

    The tail gets more because the end of a command's output (the error, the summary) matters most.
    """
    head = max_bytes // 4
    return head, max_bytes - head


def make_view(head: bytes, tail: bytes, total_bytes: int, *, stream: str = "stdout", start: int = 0) -> OutputView:
    """Build a view from the raw ``head`` and ``tail`` bytes of a stream of ``total_bytes``.

    When ``len(head) + len(tail) >= total_bytes`` the two overlap or meet and the stream is complete:
    pass the whole stream as ``head`` and ``b""`` as ``tail`` in that case.

    :param head: the first bytes of the stream (from offset ``start``).
    :param tail: the last bytes of the stream (may be empty).
    :param total_bytes: the size in bytes of the part of the stream viewed (from ``start`` to its end).
    :param stream: ``stdout`` or ``stderr``, named in the marker's ``job_output`` call.
    :param start: the stream offset (bytes) where ``head`` begins (a view of new output starts later than 0).
    """
    omitted = max(0, total_bytes - len(head) - len(tail))
    if omitted == 0:
        data = head + tail if total_bytes >= len(head) + len(tail) else head
        return OutputView(text=clean_text(data[:total_bytes] if total_bytes else data),
                          total_bytes=total_bytes, omitted_bytes=0, offset=start)
    # cut at line boundaries where that loses little, so the model does not read half a line
    nl = head.rfind(b"\n")
    if nl >= len(head) // 2:
        omitted += len(head) - nl - 1
        head = head[: nl + 1]
    nl = tail.find(b"\n")
    if 0 <= nl < len(tail) // 2:
        omitted += nl + 1
        tail = tail[nl + 1 :]
    where = f"offset={start + len(head)}" + (f", stream='{stream}'" if stream != "stdout" else "")
    marker = f"… [{omitted} bytes omitted; job_output({where}) reads on from there] …\n"
    head_text = clean_text(head)
    if head_text and not head_text.endswith("\n"):
        head_text += "\n"
    return OutputView(text=head_text + marker + clean_text(tail), total_bytes=total_bytes,
                      omitted_bytes=omitted, offset=start)
