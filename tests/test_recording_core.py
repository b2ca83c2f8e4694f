"""Issue 6: cassette format, redaction, id mapping, the virtual clock, record/replay on this machine, the plugin."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent_tools.clock import wall_time
from agent_tools.errors import ReplayError
from agent_tools.hosts.base import run_on
from agent_tools.hosts.local import LocalHost
from agent_tools.hosts.registry import HostRegistry
from agent_tools.recording import (
    RECORD_MODES,
    Cassette,
    CassetteSession,
    ExecRequest,
    IdMap,
    Recorder,
    RecordingHost,
    ReplayHost,
    VirtualClockDeadlock,
    abstract_scripts,
    default_matcher,
    run_virtual,
    strict_matcher,
)
from agent_tools.recording.cassette import mask_secrets

pytest_plugins = ("pytester",)


# ------------------------------------------------------------------ ids
def test_ids_pair_consistently_and_keep_lengths() -> None:
    ids = IdMap()
    rec = "status 'j_aaaaaaaaaaaaaaaa:0:0' then j_bbbbbbbbbbbbbbbb and b_0123456789abcdef"
    new = "status 'j_xxxxxxxxxxxxxxxx:0:0' then j_yyyyyyyyyyyyyyyy and b_fedcba9876543210"
    bindings = ids.pair(rec, new)
    assert bindings == {"j_aaaaaaaaaaaaaaaa": "j_xxxxxxxxxxxxxxxx", "j_bbbbbbbbbbbbbbbb": "j_yyyyyyyyyyyyyyyy",
                        "b_0123456789abcdef": "b_fedcba9876543210"}
    ids.bind(bindings)
    # a recorded id already paired cannot stand for another new id, nor a new id for another recorded one
    assert ids.pair("x j_aaaaaaaaaaaaaaaa", "x j_zzzzzzzzzzzzzzzz") is None
    assert ids.pair("x j_cccccccccccccccc", "x j_xxxxxxxxxxxxxxxx") is None
    assert ids.pair("x j_aaaaaaaaaaaaaaaa", "y j_xxxxxxxxxxxxxxxx") is None  # other text differs
    out = ids.to_new(b"@@AT started j_aaaaaaaaaaaaaaaa 42\n")
    assert out == b"@@AT started j_xxxxxxxxxxxxxxxx 42\n"
    assert ids.to_recorded("job_status(job_id='j_yyyyyyyyyyyyyyyy')") == "job_status(job_id='j_bbbbbbbbbbbbbbbb')"


# ------------------------------------------------------------------ format
def test_masking_keeps_byte_counts_and_hides_the_secret() -> None:
    data = b"line 1\nexport API_TOKEN=s3cr3t-value-long-enough\nAuthorization: Bearer abcdef0123456789\n"
    masked = mask_secrets(data)
    assert len(masked) == len(data)
    assert b"s3cr3t" not in masked and b"abcdef0123" not in masked
    assert b"API_TOKEN=[REDACTED]" in masked and masked.startswith(b"line 1\n")


def test_cassette_round_trip_blobs_and_stream_redaction(tmp_path: Path) -> None:
    script = "echo '" + "x" * 300 + "'"
    long_word = "printf %s " + "y" * 400
    cmd = f"exec /bin/sh -c {shlex.quote(long_word)} at-x j_aaaaaaaaaaaaaaaa"
    c = Cassette.new("demo", wall_start=1_700_000_000.0)
    c.events = [
        {"t": 0.0, "ev": "exec", "id": 1, "host": "h", "command": cmd, "env": ["LANG"]},
        {"t": 0.1, "ev": "stdout", "id": 1, "text": "PASSWORD=hun"},  # a secret split over two chunks
        {"t": 0.2, "ev": "stdout", "id": 1, "text": "ter2\n"},
        {"t": 0.3, "ev": "stdout", "id": 1, "b64": "//79"},  # not UTF-8
        {"t": 0.4, "ev": "exec", "id": 2, "host": "h", "command": cmd.replace("j_a", "j_b"), "env": []},
        {"t": 0.5, "ev": "exec", "id": 3, "host": "h", "command": script, "env": []},
    ]
    red = c.redacted()
    red.save(tmp_path / "c.jsonl")
    text = (tmp_path / "c.jsonl").read_text()
    assert "hunter2" not in text and "hun" not in text.split("PASSWORD")[1][:8]
    lines = [json.loads(ln) for ln in text.splitlines()]
    assert lines[0]["cassette"] == 1 and lines[0]["redacted"] is True
    assert sum(1 for ln in lines if ln.get("ev") == "blob") == 2  # each long word is stored once
    assert "@{sh" in lines[2]["command"] and len(lines[2]["command"]) < 120
    back = Cassette.load(tmp_path / "c.jsonl")
    assert [e["command"] for e in back.events if e["ev"] == "exec"] == [cmd, cmd.replace("j_a", "j_b"), script]
    assert back.events[3]["b64"] == "//79" and back.wall_start == 1_700_000_000.0


def test_versions_and_malformed_cassettes_are_refused(tmp_path: Path) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text('{"cassette": 2, "name": "x"}\n')
    with pytest.raises(ReplayError, match="version 2 is newer"):
        Cassette.load(p)
    p.write_text('{"cassette": 1, "name": "x"}\n{"t": 0}\n')
    with pytest.raises(ReplayError, match=r"c.jsonl:2: an event needs an 'ev' field"):
        Cassette.load(p)
    with pytest.raises(ReplayError, match="no cassette at"):
        Cassette.load(tmp_path / "missing.jsonl")


# ------------------------------------------------------------------ virtual clock
def test_virtual_clock_jumps_and_wall_time_follows() -> None:
    async def main() -> tuple[float, float]:
        t0, w0 = anyio.current_time(), wall_time()
        with anyio.move_on_after(900):
            await anyio.sleep(3600)
        return anyio.current_time() - t0, wall_time() - w0

    t = time.perf_counter()
    loop_s, wall_s = run_virtual(main, wall_start=1_000.0)
    assert loop_s == pytest.approx(900) and wall_s == pytest.approx(900)
    assert time.perf_counter() - t < 2


def test_virtual_clock_reports_a_deadlock() -> None:
    async def stuck() -> None:
        await anyio.Event().wait()  # nothing will ever set it, and no timer is scheduled

    with pytest.raises(VirtualClockDeadlock, match="every task is waiting"):
        run_virtual(stuck, deadlock_timeout_s=0.05)


# ------------------------------------------------------------------ record and replay on this machine
@asynccontextmanager
async def _local() -> AsyncIterator[HostRegistry]:
    yield HostRegistry({"local": LocalHost()})


def _session(path: Path, mode: str, tmp: Path) -> CassetteSession:
    return CassetteSession(path, mode, hosts=_local, state_dir=tmp / f"state-{mode}-{time.monotonic_ns()}")


async def _scenario(s: CassetteSession, target: Path, extra: bool = False) -> list[dict[str, Any]]:
    tk = s.toolkit
    out = [await tk.dispatch("run_command", {"host": "local", "command": "echo hi; echo oops >&2; exit 3"}),
           await tk.dispatch("run_command", {"host": "local", "budget_s": 0.3,
                                             "command": "sleep 0.6; echo GITHUB_TOKEN=ghp_" + "a" * 36})]
    out.append(await tk.dispatch("job_status", {"job_id": out[1]["job_id"], "wait_s": 5}))
    out.append(await tk.dispatch("write_file", {"host": "local", "path": str(target), "content": "new\n"}))
    if extra:
        out.append(await tk.dispatch("run_command", {"host": "local", "command": "echo episode two"}))
    return out


def _shape(results: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r.get("outcome"), r.get("state"), r.get("exit_status"), bool(r.get("backup_id"))) for r in results]


def test_record_then_replay_on_this_machine(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old\n")
    path = tmp_path / "local.jsonl"
    rec = _session(path, "all", tmp_path)
    recorded = rec.run(lambda: _scenario(rec, target))
    assert _shape(recorded) == [("finished", None, 3, False), ("detached", None, None, False),
                                (None, "exited", 0, False), (None, None, None, True)]
    text = path.read_text()
    assert "ghp_aaaa" not in text and "GITHUB_TOKEN=[REDACTED]" in text  # redacted before writing

    target.write_text("old\n")
    rep = _session(path, "none", tmp_path)
    replayed = rep.run(lambda: _scenario(rep, target))
    assert _shape(replayed) == _shape(recorded)
    assert replayed[1]["job_id"] != recorded[1]["job_id"]  # new ids, mapped onto the recorded ones
    assert rep.last_run_s is not None and rep.last_run_s < 1.0
    assert target.read_text() == "old\n"  # the replay touched nothing

    # a different write (stdin) than recorded fails with a diff
    bad = _session(path, "none", tmp_path)

    async def changed() -> list[dict[str, Any]]:
        tk = bad.toolkit
        await tk.dispatch("run_command", {"host": "local", "command": "echo hi; echo oops >&2; exit 3"})
        r = await tk.dispatch("run_command", {"host": "local", "budget_s": 0.3,
                                              "command": "sleep 0.6; echo GITHUB_TOKEN=ghp_" + "a" * 36})
        await tk.dispatch("job_status", {"job_id": r["job_id"], "wait_s": 5})
        return [await tk.dispatch("write_file", {"host": "local", "path": str(target), "content": "other\n"})]

    with pytest.raises(ReplayError, match=r"(?s)stdin of #\d+ .* differs from the recording:.*-new.*\+other"):
        bad.run(changed)


def test_new_episodes_appends_unmatched_requests(tmp_path: Path) -> None:
    path = tmp_path / "ep.jsonl"

    def scenario(s: CassetteSession, commands: list[str]) -> Any:
        async def run() -> list[dict[str, Any]]:
            return [await s.toolkit.dispatch("run_command", {"host": "local", "command": c}) for c in commands]
        return run

    first = _session(path, "all", tmp_path)
    first.run(scenario(first, ["echo one"]))
    second = _session(path, "new_episodes", tmp_path)
    second.run(scenario(second, ["echo one", "echo two"]))
    assert second.replay is not None and second.replay.fallback_requests == 1
    assert [e["command"].split("'")[-2] for e in Cassette.load(path).events if e["ev"] == "exec"] == ["echo one",
                                                                                                     "echo two"]
    third = _session(path, "none", tmp_path)
    out = third.run(scenario(third, ["echo one", "echo two"]))
    assert [r["stdout"]["text"] for r in out] == ["one\n", "two\n"]


# ------------------------------------------------------------------ the pytest plugin
_PLUGIN_TEST = '''
from contextlib import asynccontextmanager

import pytest

from agent_tools.hosts.local import LocalHost
from agent_tools.hosts.registry import HostRegistry


@pytest.fixture
def agent_tools_hosts():
    @asynccontextmanager
    async def hosts():
        yield HostRegistry({"local": LocalHost()})
    return hosts


@pytest.mark.agent_tools_cassette("echo")
def test_echo(agent_tools_cassette, agent_tools_toolkit):
    out = agent_tools_cassette.run(lambda: agent_tools_toolkit.dispatch(
        "run_command", {"host": "local", "command": "echo plugin"}))
    assert out["outcome"] == "finished" and out["stdout"]["text"] == "plugin\\n"
    print("MODE", agent_tools_cassette.mode, "RECORDING", agent_tools_cassette.recording)


@pytest.mark.agent_tools_cassette("never_recorded")
def test_missing(agent_tools_cassette):
    pass
'''


def test_plugin_records_once_then_replays(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_plugin_demo=_PLUGIN_TEST)
    pytester.runpytest_subprocess("-q", "-s", "-k", "echo", "--agent-tools-record=once").assert_outcomes(passed=1)
    assert (pytester.path / "tests" / "cassettes" / "echo.jsonl").exists()
    replayed = pytester.runpytest_subprocess("-q", "-s")  # default mode none: replay only
    replayed.assert_outcomes(passed=1, errors=1)
    out = replayed.stdout.str()
    assert "MODE none RECORDING False" in out
    assert "no cassette at" in out and "never_recorded.jsonl" in out and "--agent-tools-record=once" in out


def test_recording_host_and_replay_host_directly() -> None:
    async def record() -> Cassette:
        rec = Recorder("direct")
        host = RecordingHost(LocalHost(), rec)
        rec.start()
        await run_on(host, "echo a-$((1+1)); exit 4")
        return rec.cassette()

    cassette = anyio.run(record)
    assert [e["ev"] for e in cassette.events][:2] == ["exec", "stdin_eof"]

    def any_command(recorded: ExecRequest, request: ExecRequest, ids: IdMap) -> dict[str, str] | None:
        return {} if recorded.host == request.host else None

    loose = ReplayHost(cassette, matcher=any_command)
    res = run_virtual(lambda: run_on(loose, "echo something else"))
    assert (res.exit_status, res.stdout) == (4, b"a-2\n")
    loose.assert_all_used()

    strict = ReplayHost(cassette)
    with pytest.raises(ReplayError, match="unmatched exec request #1 on local"):
        run_virtual(lambda: run_on(strict, "echo something else"))
    with pytest.raises(ReplayError, match="unmatched exec request"):
        strict.assert_all_used()  # the first failure is kept and raised again


def test_plugin_modes_match_the_library() -> None:
    from agent_tools.testing.pytest_plugin import _RECORD_MODES

    assert _RECORD_MODES == RECORD_MODES


def test_default_matcher_leaves_out_the_job_scripts_text_strict_does_not() -> None:
    cassette = Cassette.load(Path(__file__).parent / "cassettes" / "hicache_walkthrough.jsonl")
    launch = next(e["command"] for e in cassette.events if e["ev"] == "exec" and "at-launch" in e["command"])
    edited = launch.replace("umask 077", "umask 077  # a harmless edit of the launcher")
    assert edited != launch
    rec, req = ExecRequest("h", launch), ExecRequest("h", edited)
    assert default_matcher(rec, req, IdMap()) is not None
    assert strict_matcher(rec, req, IdMap()) is None
    other = ExecRequest("h", launch.replace("sglang.service", "other.service"))
    assert default_matcher(rec, other, IdMap()) is None  # the job's own command still counts
    assert "@{agent_tools script} at-launch" in abstract_scripts(launch)
