"""Untrusted text (commands, output, reasons, rules, file names) made safe to show on a terminal.

Two dangers, both handled here so the CLI never has to think about them:

* **Markup.** Rich reads ``[bold]``, ``[/]``, ``[link=...]`` in strings given to ``print``. Untrusted text is
  therefore only ever put on screen as a :class:`rich.text.Text` (never parsed as markup): :func:`plain`.
* **Terminal control.** ESC sequences (ECMA-48 CSI cursor moves and screen clears, OSC 0 window titles, OSC 8
  hyperlinks, OSC 52 clipboard writes), C1 controls (``U+009B`` is a one-character CSI on some terminals),
  ``\\r`` and backspace overwrites, bidirectional overrides and isolates (``U+202E`` "Trojan Source",
  CVE-2021-42574), zero-width and other invisible format characters, line/paragraph separators, NUL, and
  lone surrogates (bytes that were not UTF-8). :func:`safe_text` shows each of them *visibly* as an escape
  (``\\x1b``, ``\\r``, ``\\u202e``) so that what is on screen is exactly what the text holds, character
  for character; newlines and tabs are kept (multi-line commands stay multi-line).

The categories come from Unicode's General_Category (``Cc`` control, ``Cf`` format, ``Zl``/``Zp``
separators, ``Cs`` surrogates, ``Co`` private use) via :func:`unicodedata.category`, plus the few letters that
render as nothing (Hangul fillers ``U+115F``/``U+3164``, Braille blank ``U+2800``).
"""

from __future__ import annotations

import unicodedata

from rich.text import Text

__all__ = ["plain", "safe_text"]

#: Unicode general categories shown as escapes (see the module docstring)
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co"})
_KEPT = frozenset("\n\t")
#: letters that render as nothing (Hangul fillers, Braille blank, combining grapheme joiner): used to hide text
_INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u2800\u034f")
_NAMED = {"\r": "\\r", "\x00": "\\0", "\x1b": "\\x1b", "\b": "\\b", "\x7f": "\\x7f"}


def _escape(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _needs_escape(ch: str) -> bool:
    return ch not in _KEPT and (unicodedata.category(ch) in _ESCAPED_CATEGORIES or ch in _INVISIBLE)


def has_escapes(text: str) -> bool:
    """Whether :func:`safe_text` would show any character of ``text`` as an escape."""
    return not (text.isascii() and text.isprintable()) and any(_needs_escape(ch) for ch in text)


def safe_text(text: str) -> str:
    """``text`` with every character that could control or fool a terminal shown as a visible escape.

    Kept as they are: printable characters, spaces, ``\\n`` and ``\\t``. Shown as escapes: C0/C1 controls and
    DEL (``\\x1b``, ``\\r``, ``\\0``, ``\\x9b``...), format characters such as bidi overrides and zero-width
    spaces (``\\u202e``, ``\\u200b``), line/paragraph separators, private-use characters and lone surrogates
    (``\\udcff``, what undecodable bytes become). Backslashes already in the text are left as they are (a
    command's ``\\;`` stays readable); :func:`plain` styles the escapes it made (reverse video) so that they
    stand out from text that merely looks like an escape.

    :param text: any string (a command line, command output, a reason, a path).
    :returns: a string that is safe to write to a terminal and to give to Rich as plain text.
    """
    if text.isascii() and text.isprintable():
        return text  # fast path: nothing to escape (no control characters at all)
    return "".join(_escape(ch) if _needs_escape(ch) else ch for ch in text)


def plain(text: object, style: str = "") -> Text:
    """A Rich :class:`~rich.text.Text` of :func:`safe_text` of ``str(text)``, never parsed as markup; the escapes
    it made are in reverse video."""
    raw = str(text)
    out = Text(style=style)
    if raw.isascii() and raw.isprintable():
        out.append(raw)
        return out
    run: list[str] = []
    for ch in raw:
        if _needs_escape(ch):
            if run:
                out.append("".join(run))
                run = []
            out.append(_escape(ch), style="reverse")
        else:
            run.append(ch)
    if run:
        out.append("".join(run))
    return out
