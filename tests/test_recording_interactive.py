"""Issue 17, item 5: record and replay cover interactive jobs: writes to a job's stdin (``job_input``) and a terminal
session are recorded like the rest and replayed on the virtual clock, with a secret typed by a person kept only as a
redacted placeholder in the cassette."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from agent_tools.errors import ReplayError
from agent_tools.hosts.local import LocalHost
from agent_tools.hosts.registry import HostRegistry
from agent_tools.outcomes import result_view
from agent_tools.recording import CassetteSession

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool

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


# ---------------------------------------------------------------- a terminal session on a real systemd host
COMMITTED = Path(__file__).parent / "cassettes" / "interactive_systemd.jsonl"
SYSTEMD_HOST = "at-h1-agent"
CURSES = ("import curses\n"
          "def main(s):\n"
          "    s.addstr(0, 0, 'rows %d cols %d; q quits' % s.getmaxyx())\n"
          "    s.refresh()\n"
          "    while s.getch() != ord('q'):\n"
          "        pass\n"
          "curses.wrapper(main)\n"
          "print('curses-done')\n")


def _new_secret() -> str:
    """A secret of a fixed length (a replay compares the masked write, and its byte count, with the recording)."""
    return "pw-" + os.urandom(9).hex()


async def _terminal_session(s: CassetteSession, secret: str) -> list[dict[str, Any]]:
    """python3 -i over the pipe, a curses program in a terminal quit with q, and a password typed into a terminal's
    read -s by a person (``job_input(secret=True)``, as ``agent-tools input --secret`` does)."""
    import shlex

    tk = s.toolkit
    repl = await tk.dispatch("run_command", {"host": SYSTEMD_HOST, "command": "python3 -i", "stdin": "pipe",
                                             "budget_s": 2})
    out = [repl]
    for text in ("x = 6 * 7", "print(x)", "print(x + 1)"):
        out.append(await tk.dispatch("job_input", {"job_id": repl["job_id"], "text": text}))
    out.append(await tk.dispatch("job_input", {"job_id": repl["job_id"], "text": "", "eof": True}))
    out.append(await tk.dispatch("job_status", {"job_id": repl["job_id"], "wait_s": 10}))
    screen = await tk.dispatch("run_command", {"host": SYSTEMD_HOST, "command": f"python3 -c {shlex.quote(CURSES)}",
                                               "stdin": "tty", "budget_s": 2})
    out.append(screen)
    page = await tk.dispatch("job_output", {"job_id": screen["job_id"]})
    for _ in range(20):  # drawn once python3 started (a loaded host takes a moment)
        if "q quits" in page["text"]:
            break
        page = await tk.dispatch("job_status", {"job_id": screen["job_id"], "wait_s": 0.5})
        page = await tk.dispatch("job_output", {"job_id": screen["job_id"]})
    out.append(page)
    out.append(await tk.dispatch("job_input", {"job_id": screen["job_id"], "text": "q"}))
    out.append(await tk.dispatch("job_status", {"job_id": screen["job_id"], "wait_s": 10}))
    out.append(await tk.dispatch("job_output", {"job_id": screen["job_id"]}))
    asks = await tk.dispatch("run_command", {"host": SYSTEMD_HOST, "stdin": "tty", "budget_s": 2,
                                             "command": 'read -s -p "Password: " p; echo; echo "len=${#p}"'})
    out.append(asks)
    out.append(result_view(await tk.job_input(asks["job_id"], secret, secret=True)))
    out.append(await tk.dispatch("job_status", {"job_id": asks["job_id"], "wait_s": 10}))
    out.append(await tk.dispatch("job_output", {"job_id": asks["job_id"]}))
    return out


def _terminal_shape(results: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must hold of such a session, recorded or replayed (not the exact bytes a terminal drew)."""
    r = results
    return [r[0]["outcome"], _text(r[2].get("new_stdout")), _text(r[3].get("new_stdout")),
            (r[5]["state"], r[5]["exit_status"]), r[6]["outcome"], "rows 24 cols 80; q quits" in r[7]["text"],
            (r[9]["state"], r[9]["exit_status"]), "curses-done" in r[10]["text"], (r[11]["outcome"], r[11]["secret"]),
            r[12]["input"], (r[13]["state"], r[13]["exit_status"]), r[14]["text"].replace("\r", "").strip()]


@pytest.mark.systemd
def test_a_terminal_session_on_a_systemd_host_records_and_replays(systemd_hosts: HostPool, tmp_path: Path) -> None:
    @asynccontextmanager
    async def hosts() -> AsyncIterator[HostRegistry]:
        registry = HostRegistry(ssh_config=[str(systemd_hosts.ssh_config)])
        try:
            yield registry
        finally:
            await registry.aclose()

    secret = _new_secret()
    path = tmp_path / "terminal.jsonl"
    rec = CassetteSession(path, "all", hosts=hosts, state_dir=tmp_path / "rec")
    recorded = rec.run(lambda: _terminal_session(rec, secret))
    shape = _terminal_shape(recorded)
    assert shape == ["detached", "42\n", "43\n", ("exited", 0), "detached", True, ("exited", 0), True,
                     ("needs_input", True), "written", ("exited", 0), f"Password: \nlen={len(secret)}"], shape
    assert secret not in path.read_text()
    if not COMMITTED.exists():  # first recording: keep it (commit tests/cassettes/interactive_systemd.jsonl)
        shutil.copy(path, COMMITTED)
    rep = CassetteSession(path, "none", state_dir=tmp_path / "rep")
    assert _terminal_shape(rep.run(lambda: _terminal_session(rep, secret))) == shape
    assert rep.last_run_s is not None and rec.last_run_s is not None and rep.last_run_s < rec.last_run_s


def test_the_committed_terminal_session_replays(tmp_path: Path) -> None:
    """The cassette recorded on the systemd test host replays with no host, another secret of the same length typed
    (only its masked placeholder is in the cassette), on the virtual clock."""
    secret = _new_secret()
    shutil.copy(COMMITTED, tmp_path / "c.jsonl")
    assert "[REDACTED]" in COMMITTED.read_text()  # the recorded password's placeholder
    rep = CassetteSession(tmp_path / "c.jsonl", "none", state_dir=tmp_path / "rep")
    shape = _terminal_shape(rep.run(lambda: _terminal_session(rep, secret)))
    assert shape == ["detached", "42\n", "43\n", ("exited", 0), "detached", True, ("exited", 0), True,
                     ("needs_input", True), "written", ("exited", 0), f"Password: \nlen={len(secret)}"], shape
    assert rep.replay is not None and not rep.replay.failures
    assert rep.last_run_s is not None and rep.last_run_s < 5.0
