"""Claude Code session transcripts (``~/.claude/projects/<slug>/<sessionId>.jsonl``): the Bash calls.

Facts used (no official spec; checked against public parsers, see /work/shared/TRANSCRIPTS.md): one JSON
object per line; ``assistant`` lines carry ``tool_use`` blocks ``{id, name: "Bash", input: {command,
timeout? (ms)}}``; a later ``user`` line carries the ``tool_result`` block ``{tool_use_id, content, is_error?}``
and often a ``toolUseResult`` sidecar ``{stdout, stderr, interrupted, ...}`` (or a plain string on errors).
There is no exit-code field: a non-zero exit reads ``Exit code N`` at the start of the content, exit 0 is
implied, empty output reads ``(Bash completed with no output)``, and a timeout reads ``Command timed out after
2m 0s`` (older ``2m 0.0s``), usually with ``Exit code 143``. Durations come from the lines' ``timestamp``.
Unknown line types and fields are skipped.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from .model import ShellCall, parse_iso

__all__ = ["parse_claude_code"]

_EXIT_RE = re.compile(r"^Exit code (-?\d+)\s*\n?")
_TIMEOUT_RE = re.compile(r"\n?Command timed out after (?:(\d+)m\s*)?([\d.]+)s\.?\s*", re.IGNORECASE)
_NO_OUTPUT = "(Bash completed with no output)"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def parse_claude_code(path: str | os.PathLike[str]) -> list[ShellCall]:
    """The Bash calls of a Claude Code session file, in call order.

    :raises OSError: the file cannot be read. Malformed lines are skipped.
    """
    calls: dict[str, ShellCall] = {}
    order: list[str] = []
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if not isinstance(line, dict) or not isinstance(line.get("message"), dict):
            continue
        content = line["message"].get("content")
        if not isinstance(content, list):
            continue
        ts = parse_iso(line.get("timestamp"))
        for block in content:
            if not isinstance(block, dict):
                continue
            if line.get("type") == "assistant" and block.get("type") == "tool_use" and block.get("name") == "Bash":
                inp = block.get("input") if isinstance(block.get("input"), dict) else {}
                assert isinstance(inp, dict)
                cid = str(block.get("id", f"call{len(order) + 1}"))
                timeout_ms = inp.get("timeout")
                calls[cid] = ShellCall(index=len(order) + 1, call_id=cid, command=str(inp.get("command", "")),
                                       started_at=ts, ran=False,
                                       timeout_s=float(timeout_ms) / 1000 if isinstance(timeout_ms, int | float)
                                       else 120.0)
                order.append(cid)
            elif line.get("type") == "user" and block.get("type") == "tool_result":
                call = calls.get(str(block.get("tool_use_id")))
                if call is not None:
                    _apply_result(call, block, line.get("toolUseResult"), ts)
    return [calls[c] for c in order if calls[c].command]


def _apply_result(call: ShellCall, block: dict[str, Any], sidecar: Any, ts: float | None) -> None:
    text = _content_text(block.get("content"))
    call.ended_at = ts
    m = _EXIT_RE.match(text)
    exit_status = int(m.group(1)) if m else None
    if m:
        text = text[m.end():]
    t = _TIMEOUT_RE.search(text)
    interrupted = isinstance(sidecar, dict) and bool(sidecar.get("interrupted"))
    if t or interrupted:
        call.timed_out = True
        if t:
            call.timeout_s = int(t.group(1) or 0) * 60 + float(t.group(2))
            text = text[:t.start()] + text[t.end():]
        exit_status = None  # killed by the tool, not an exit of the command
    elif block.get("is_error") and exit_status is None:
        call.output = text
        call.ran = False  # a refusal or a tool error: the command never ran
        return
    elif exit_status is None:
        exit_status = 0
    if isinstance(sidecar, dict) and ("stdout" in sidecar or "stderr" in sidecar):
        out = str(sidecar.get("stdout") or "")
        err = str(sidecar.get("stderr") or "")
        text = out + ("\n" if out and err and not out.endswith("\n") else "") + err
        t2 = _TIMEOUT_RE.search(text)
        if t2:
            text = text[:t2.start()] + text[t2.end():]
    if text.strip() == _NO_OUTPUT:
        text = ""
    call.output = text
    call.exit_status = exit_status
    call.ran = True
