"""opencode sessions as printed by ``opencode export [sessionID]``: the bash tool calls.

Facts used (see /work/shared/TRANSCRIPTS.md): JSON ``{info, messages: [{info, parts}]}``; a tool part is
``{type: "tool", tool: "bash", callID, state}`` with ``state.status`` ``completed`` (``input {command,
timeout? ms}``, ``output``, ``metadata {exit, ...}``, ``time {start, end}`` in epoch ms) or ``error``
(``error`` text). A timeout is not an error state: the output ends with a ``<bash_metadata>`` block saying the
command was terminated after exceeding the timeout (older builds: ``(Command timed out after N ms)``).
``exit`` may be null. Unknown fields are skipped.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from .model import ShellCall

__all__ = ["parse_opencode"]

_META_RE = re.compile(r"\s*<bash_metadata>(.*?)</bash_metadata>\s*", re.DOTALL)
_OLD_TIMEOUT_RE = re.compile(r"\s*\(Command timed out after (\d+) ?ms\)\s*")


def _ms(value: Any) -> float | None:
    return float(value) / 1000 if isinstance(value, int | float) else None


def parse_opencode(path: str | os.PathLike[str]) -> list[ShellCall]:
    """The bash calls of an ``opencode export`` file, in order.

    :raises OSError: unreadable file. :raises ValueError: not JSON.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    calls: list[ShellCall] = []
    messages = data.get("messages", []) if isinstance(data, dict) else []
    for msg in messages if isinstance(messages, list) else []:
        parts = msg.get("parts", []) if isinstance(msg, dict) else []
        for part in parts if isinstance(parts, list) else []:
            if not (isinstance(part, dict) and part.get("type") == "tool" and part.get("tool") == "bash"):
                continue
            state = part.get("state") if isinstance(part.get("state"), dict) else {}
            assert isinstance(state, dict)
            inp = state.get("input") if isinstance(state.get("input"), dict) else {}
            assert isinstance(inp, dict)
            times = state.get("time") if isinstance(state.get("time"), dict) else {}
            assert isinstance(times, dict)
            call = ShellCall(index=len(calls) + 1, call_id=str(part.get("callID") or part.get("id") or ""),
                             command=str(inp.get("command", "")), started_at=_ms(times.get("start")),
                             ended_at=_ms(times.get("end")), timeout_s=_ms(inp.get("timeout")) or 120.0)
            status = state.get("status")
            if status == "completed":
                out = str(state.get("output", ""))
                meta = _META_RE.search(out)
                old = _OLD_TIMEOUT_RE.search(out)
                if meta and "timeout" in meta.group(1).lower():
                    call.timed_out = True
                    out = out[:meta.start()] + out[meta.end():]
                elif old:
                    call.timed_out = True
                    call.timeout_s = int(old.group(1)) / 1000
                    out = out[:old.start()] + out[old.end():]
                elif meta:
                    out = out[:meta.start()] + out[meta.end():]
                metadata = state.get("metadata") if isinstance(state.get("metadata"), dict) else {}
                assert isinstance(metadata, dict)
                code = metadata.get("exit")
                call.exit_status = None if call.timed_out else (int(code) if isinstance(code, int) else 0)
                call.output = out
            else:  # error / pending / running: never ran to a result we can use
                call.ran = False
                call.output = str(state.get("error", ""))
            if call.command:
                calls.append(call)
    return calls
