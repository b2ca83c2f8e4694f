"""Issue 17, item 5: record and replay cover interactive jobs: writes to a job's stdin (``job_input``) and a terminal
session are recorded like the rest and replayed on the virtual clock, with a secret typed by a person kept only as a
redacted placeholder in the cassette."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agent_tools.errors import ReplayError
from agent_tools.hosts.local import LocalHost
from agent_tools.hosts.registry import HostRegistry
from agent_tools.outcomes import result_view
from agent_tools.recording import CassetteSession

SECRET = "Corr3ct-h0rse-battery-" + os.urandom(4).hex()


@asynccontextmanager
async def _local() -> AsyncIterator[HostRegistry]:
    yield HostRegistry({"local": LocalHost()})


def _session(path: Path, mode: str, tmp: Path) -> CassetteSession:
    return CassetteSession(path, mode, hosts=_local, state_dir=tmp / f"state-{mode}-{time.monotonic_ns()}")


def _text(view: Any) -> str:
    return "" if view is None else view if isinstance(view, str) else str(view.get("text", ""))


async def _interactive(s: CassetteSession, second: str = "print(x)") -> list[dict[str, Any]]:
    tk = s.toolkit
    out = [await tk.dispatch("run_command", {"host": "local", "command": "python3 -i", "stdin": "pipe",
                                             "budget_s": 1})]
    job = out[0]["job_id"]
    for text in ("x = 6 * 7", second, "raise SystemExit(5)"):
        out.append(await tk.dispatch("job_input", {"job_id": job, "text": text}))
    out.append(await tk.dispatch("job_status", {"job_id": job, "wait_s": 10}))
    asks = await tk.dispatch("run_command", {"host": "local", "stdin": "tty", "budget_s": 1,
                                             "command": 'read -s -p "Password: " p; echo; echo "len=${#p}"'})
    out.append(asks)
    out.append(result_view(await tk.job_input(asks["job_id"], SECRET, secret=True)))  # as `input --secret` does
    out.append(await tk.dispatch("job_status", {"job_id": asks["job_id"], "wait_s": 10}))
    out.append(await tk.dispatch("job_output", {"job_id": asks["job_id"]}))
    return out


def _shape(results: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r.get("outcome"), r.get("state"), r.get("exit_status"), r.get("input"), r.get("secret"),
             _text(r.get("new_stdout")).strip(), r.get("text", "").replace("\r", "").strip()) for r in results]


def test_an_interactive_session_records_and_replays(tmp_path: Path) -> None:
    path = tmp_path / "interactive.jsonl"
    rec = _session(path, "all", tmp_path)
    recorded = rec.run(lambda: _interactive(rec))
    shape = _shape(recorded)
    # (the write that ends a job answers while it may still be exiting: running or exited)
    ended = {(None, "exited", 5, "written", None), (None, "running", None, "written", None)}
    assert [s[:5] for s in shape[:3]] == [("detached", None, None, None, None),
                                          (None, "running", None, "written", None),
                                          (None, "running", None, "written", None)], shape
    assert shape[3][:5] in ended and shape[4][:5] == (None, "exited", 5, None, None), shape
    assert shape[5][:5] == ("needs_input", None, None, None, True), shape
    assert shape[6][3] == "written" and shape[7][:3] == (None, "exited", 0), shape
    assert shape[2][5] == "42" and shape[8][6] == f"Password: \nlen={len(SECRET)}", repr(shape[8][6])
    text = path.read_text()
    assert SECRET not in text and '"ev": "stdin"' in text.replace('"ev":"stdin"', '"ev": "stdin"')

    rep = _session(path, "none", tmp_path)
    replayed = rep.run(lambda: _interactive(rep))
    assert _shape(replayed) == shape
    assert rep.last_run_s is not None and rep.last_run_s < 2.0  # the virtual clock, not the recorded 10+ s

    other = _session(path, "none", tmp_path)  # typed something else: the replay says where it differs
    differs = r"(?s)stdin of #\d+ .* differs from the recording:.*-print\(x\).*\+print\(y\)"
    with pytest.raises(ReplayError, match=differs):
        other.run(lambda: _interactive(other, second="print(y)"))  # as long as print(x): the same request
