"""Issues 6 and 15: importing Claude Code / opencode / Codex transcripts into a synthesised cassette and a
generated test."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_tools.cli_import import import_app
from agent_tools.importers import (
    ShellCall,
    import_calls,
    infer_timeline,
    parse_claude_code,
    parse_codex,
    parse_opencode,
)
from agent_tools.recording import Cassette

SAMPLES = Path(__file__).parent / "transcripts"
CLAUDE = SAMPLES / "claude_code_sglang_restart.jsonl"
OPENCODE = SAMPLES / "opencode_sglang_restart.json"


def _run_generated(test_path: Path, tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(test_path.stem, test_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    getattr(module, next(n for n in dir(module) if n.startswith("test_")))(tmp_path)


def test_both_runtimes_read_the_same_story() -> None:
    cc, oc = parse_claude_code(CLAUDE), parse_opencode(OPENCODE)
    assert [c.command for c in cc] == [c.command for c in oc] and len(cc) == 8
    for calls in (cc, oc):
        restart = calls[2]
        assert restart.command == "sudo systemctl restart sglang.service"
        assert restart.timed_out and restart.timeout_s == 15 and restart.exit_status is None
        assert calls[3].exit_status == 3 and calls[3].output == "activating"
        assert calls[4].exit_status == 7 and "Failed to connect" in calls[4].output
        assert calls[6].exit_status == 0 and calls[6].output == ""  # "(Bash completed with no output)"
        assert [round(c.duration_s or 0) for c in calls][:3] == [1, 1, 15]


@pytest.fixture(scope="module")
def claude_import(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    out = tmp_path_factory.mktemp("claude-import")
    res = CliRunner().invoke(import_app, ["claude-code", str(CLAUDE), "--out-dir", str(out)])
    assert res.exit_code == 0, res.output
    return res.output, out


def _plan_text(source: str) -> str:
    return source[source.index("PLAN = "):source.index("def test_")]


def test_claude_code_import_cli_writes_a_test_that_now_detaches_then_gets_ready(
        claude_import: tuple[str, Path], tmp_path: Path) -> None:
    output, out = claude_import
    assert "call 3: run_command -> detached" in output and "exited / readiness ready" in output
    test_path = out / "test_transcript_claude_code_sglang_restart.py"
    source = test_path.read_text()
    # the call that hit the old 15 s timeout: now detached, then followed to ready
    assert "killed by the old tool's 15 s timeout" in source
    assert "assert steps[2][\"outcome\"] == 'detached'" in source
    assert "assert steps[3][\"state\"] == 'exited' and steps[3][\"readiness\"] == 'ready'" in source
    cassette = Cassette.load(out / "cassettes" / "claude_code_sglang_restart.jsonl")
    assert cassette.header["synthesised"] is True and cassette.header["source"]["runtime"] == "claude-code"
    assert cassette.header["inferred"][0]["evidence"].startswith("call 7 `curl -s http://127.0.0.1:30000/health`")
    _run_generated(test_path, tmp_path)  # the generated test passes (replay on the virtual clock)


def test_opencode_import_gives_the_same_plan(claude_import: tuple[str, Path], tmp_path: Path) -> None:
    res = CliRunner().invoke(import_app, ["opencode", str(OPENCODE), "--out-dir", str(tmp_path), "--name", "oc"])
    assert res.exit_code == 0, res.output
    assert [ln.split(": ", 1)[1] for ln in res.output.splitlines() if ln.startswith("  call ")] == [
        "run_command -> finished", "run_command -> finished", "run_command -> detached",
        "job_status -> exited / readiness ready after 3 job_status call(s)", "run_command -> finished"]
    oc_source = (tmp_path / "test_transcript_oc.py").read_text()
    assert "'probes': [{'kind': 'http', 'url': 'http://127.0.0.1:30000/health'}]" in oc_source
    cc_source = (claude_import[1] / "test_transcript_claude_code_sglang_restart.py").read_text()
    assert _plan_text(oc_source) == _plan_text(cc_source)


def test_without_evidence_the_timed_out_call_is_still_running(tmp_path: Path) -> None:
    calls = [ShellCall(1, "a", "make -j8 all", started_at=0.0, ended_at=120.0, timeout_s=120, timed_out=True),
             ShellCall(2, "b", "systemctl is-active build.service", "activating", 3, started_at=130.0,
                       ended_at=130.2),
             ShellCall(3, "c", "echo hi", "hi\n", 0, started_at=200.0, ended_at=200.1),
             ShellCall(4, "d", "rm -rf /", "permission denied by the user", started_at=210.0, ran=False)]
    timeline = infer_timeline(calls)
    assert timeline.timed_out[1].end_s is None and [c.index for c in timeline.calls] == [1, 2, 3]
    res = import_calls(calls, runtime="claude-code", source=tmp_path / "build.jsonl", out_dir=tmp_path)
    assert [(s["tool"], s["outcome"] or s["state"]) for s in res.results] == [
        ("run_command", "detached"), ("job_status", "running"), ("run_command", "finished"),
        ("run_command", "finished")]
    _run_generated(res.test_path, tmp_path / "run")


# ------------------------------------------------------------------------------------------------ issue 15
# Fixture files in each format version the importers claim (tests/transcripts/), written from the formats'
# documentation and real shapes: failed, refused, timed-out, interrupted and backgrounded calls, plus line types
# and fields the importers do not know (skipped, never fatal).
CC_1_0 = SAMPLES / "claude_code_1_0_failures_and_refusals.jsonl"
CC_2_0 = SAMPLES / "claude_code_2_0_background_and_permissions.jsonl"
OC_EXPORT = SAMPLES / "opencode_export_shell_metadata.json"
OC_STORAGE = SAMPLES / "opencode_storage"
OC_STORAGE_SESSION = "ses_7b2e1d4c0ffe3Kq9Ws1Hc2Jd"
OC_DB_SESSION = "ses_3c9d8e7f6ffeAa1Bb2Cc3Dd4"
CODEX_0_46 = SAMPLES / "codex_rollout_0_46_shell.jsonl"
CODEX_UNIFIED = SAMPLES / "codex_rollout_unified_exec.jsonl"
#: ``codex exec --json`` events, written from codex-rs exec/src/exec_events.rs (ThreadEvent, CommandExecutionItem)
CODEX_EXEC_JSON = SAMPLES / "codex_exec_json_events.jsonl"


@pytest.fixture
def opencode_db(tmp_path: Path) -> Path:
    """opencode's SQLite storage (``opencode.db``), loaded from the SQL dump in tests/transcripts."""
    import sqlite3

    path = tmp_path / "opencode" / "opencode.db"
    path.parent.mkdir()
    db = sqlite3.connect(path)
    db.executescript((SAMPLES / "opencode_db.sql").read_text())
    db.close()
    return path


def _by_command(calls: list[ShellCall]) -> dict[str, ShellCall]:
    return {c.command: c for c in calls}


def test_claude_code_1_0_failed_commands_are_failures_and_refusals_are_told_apart() -> None:
    calls = _by_command(parse_claude_code(CC_1_0))
    # 1.0.x: is_error with the raw output and no "Exit code N" line: the command ran and failed
    for cmd, text in (("ls src/components/legacy", "No such file or directory"), ("npx tsc --noEmit", "TS2322"),
                      ("npm run build", "npm ERR! code ELIFECYCLE")):
        assert calls[cmd].ran and text in calls[cmd].output, calls[cmd]
        # finished non-zero; which status the transcript does not say, so none is made up
        assert (calls[cmd].nonzero, calls[cmd].exit_status) == (True, None), calls[cmd]
        assert calls[cmd].how_it_ended() == "exit non-zero (the transcript does not say which)"
    refused = calls["rm -rf node_modules package-lock.json"]
    assert not refused.ran and refused.skip_reason.startswith("refused by the user: \"The user doesn't want")
    denied = calls["git push --force origin main"]
    assert not denied.ran and denied.skip_reason.startswith("denied by a permission rule")
    assert calls["npm test"].timed_out and calls["npm test"].timeout_s == 5 and calls["npm test"].exit_status is None
    assert not calls["npm test"].nonzero  # killed by the tool's timeout: not a failure of its own
    dev = calls["npm run dev"]  # run_in_background, read with BashOutput, stopped with KillShell 20 s later
    assert dev.background and dev.output == "" and dev.finished_at is None and dev.final_exit_status is None
    # stopped on request, not an exit of its own (qa15 finding 5): replayed as job_cancel then
    assert dev.started_at is not None and dev.killed_at is not None and round(dev.killed_at - dev.started_at) == 20
    assert dev.killed_by == "KillShell"
    assert "VITE v5.4.2  ready" in (dev.final_output or "")
    assert calls["git status --short"].ran and calls["git status --short"].output == ""


def test_claude_code_2_x_background_tasks_permissions_and_interrupts() -> None:
    calls = _by_command(parse_claude_code(CC_2_0))
    assert (calls["systemctl is-active app.service"].exit_status, calls["systemctl is-active app.service"].output) == (
        3, "inactive")
    build = calls["docker build -t app:latest ."]  # ended per the <task-notification> 90 s later
    assert build.background and build.final_exit_status == 0
    assert build.finished_at is not None and build.started_at is not None
    assert round(build.finished_at - build.started_at) == 90
    smoke = calls["pytest -x tests/smoke"]  # moved to the background at its 120 s timeout; TaskOutput: failed, 1
    assert smoke.background and not smoke.timed_out and smoke.final_exit_status == 1
    assert "1 failed, 3 passed" in (smoke.final_output or "")
    assert calls["sudo systemctl restart app.service"].timed_out
    reasons = {c.command: c.skip_reason for c in calls.values() if not c.ran}
    assert reasons["git push origin main"].startswith("denied by a permission rule")
    assert reasons["rm -rf /var/cache/app/*"].startswith("not permitted (no permission granted)")
    assert reasons["bash -c 'cd / && ls'"].startswith("rejected by the tool: 'InputValidationError")
    assert reasons["uptime"].startswith("no result in the transcript")
    follow = calls["journalctl -u app.service -f"]  # stopped by the user while it ran: it ran
    assert follow.ran and follow.interrupted and follow.output == "Nov 03 16:11:40 web1 app[912]: GET /healthz 200\n"
    assert calls["true"].ran and calls["true"].output == "" and calls["true"].exit_status == 0


def test_opencode_export_shell_metadata_timeouts_null_exits_and_placeholders() -> None:
    calls = _by_command(parse_opencode(OC_EXPORT))
    restart = calls["sudo systemctl restart vllm.service"]  # <shell_metadata> timeout: not exit 0
    assert restart.timed_out and restart.timeout_s == 5 and restart.exit_status is None and restart.output == ""
    assert calls["curl -sf http://127.0.0.1:8000/health"].output == ""  # "(no output)" is not output
    killed = calls["python bench.py --requests 500"]  # metadata.exit null, no timeout note: not 0, not imported
    assert not killed.ran and "metadata.exit is null" in (killed.skip_reason or "")
    aborted = calls["tail -f /var/log/vllm/access.log"]
    assert aborted.interrupted and aborted.output == "GET /v1/models 200\n"
    assert calls["grep -c ERROR /var/log/vllm/server.log"].exit_status == 1
    assert (calls["sudo rm -rf /var/lib/vllm/cache"].skip_reason or "").startswith(
        "refused by the user: 'The user rejected")
    assert "state 'running'" in (calls["vllm bench serve --dataset sharegpt"].skip_reason or "")


def test_opencode_file_storage_of_older_releases(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="holds 2 sessions: name one with --session"):
        parse_opencode(OC_STORAGE)
    calls = parse_opencode(OC_STORAGE, session=OC_STORAGE_SESSION)
    session_file = OC_STORAGE / "storage" / "session" / "prj1" / f"{OC_STORAGE_SESSION}.json"
    assert [c.command for c in parse_opencode(session_file)] == [c.command for c in calls] == [
        "make -j8 site", "ls dist/", "npm run serve", "echo done"]  # messages by time, parts by id
    make, ls, serve, echo = calls
    assert make.timed_out and make.timeout_s == 10 and make.output == "[ 10%] Building pages\n[ 40%] Building assets"
    assert (ls.exit_status, serve.interrupted, serve.output, echo.output) == (2, True, "serving on :4000", "done\n")
    res = CliRunner().invoke(import_app, ["opencode", str(OC_STORAGE), "--out-dir", str(tmp_path)])
    assert res.exit_code == 1 and OC_STORAGE_SESSION in res.output and "--session" in res.output


def test_opencode_sqlite_storage_of_current_releases(opencode_db: Path, tmp_path: Path) -> None:
    calls = parse_opencode(opencode_db.parent, session=OC_DB_SESSION)  # the data directory holding opencode.db
    assert [c.command for c in calls] == [c.command for c in parse_opencode(opencode_db, session=OC_DB_SESSION)]
    pull, up, ready, prune, ps = calls
    assert (pull.exit_status, pull.output) == (0, "api Pulled\n")
    assert up.timed_out and up.timeout_s == 30 and up.output == "Container api  Recreate"
    assert not prune.ran and (prune.skip_reason or "").startswith("refused: 'The user has specifically restricted")
    assert (ready.output, ps.output, ps.exit_status) == ('{"ready":true}', "", 0)
    res = CliRunner().invoke(import_app, ["opencode", str(opencode_db), "--session", OC_DB_SESSION,
                                          "--out-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "not imported: call 4 `docker system prune -af` — refused" in res.output
    _run_generated(tmp_path / f"test_transcript_{OC_DB_SESSION.lower()}.py", tmp_path / "run")


def test_codex_0_46_shell_argv_and_json_outputs() -> None:
    calls = parse_codex(CODEX_0_46)
    assert [c.command for c in calls] == [  # ["bash", "-lc", CMD] unwrapped; a plain argv joined
        "systemctl status worker.service --no-pager | head -3", "sudo systemctl restart worker.service",
        "systemctl is-active worker.service", "systemctl is-active worker.service", "rm -rf /var/lib/worker/queue",
        "python3 -m pytest -q tests/test_queue.py"]
    status, restart, activating, active, rm, pytest_ = calls
    assert status.exit_status == 0 and status.output.startswith("● worker.service")
    assert restart.timed_out and restart.exit_status is None and restart.output == ""  # exit 124 + the note
    assert (activating.exit_status, activating.output, active.exit_status) == (3, "activating\n", 0)
    assert not rm.ran and rm.skip_reason == "refused: 'exec command rejected by user'"
    assert pytest_.exit_status == 1 and round(pytest_.duration_s or 0, 1) == 3.9


def test_codex_unified_exec_sessions_prefer_exec_command_end() -> None:
    calls = _by_command(parse_codex(CODEX_UNIFIED))
    assert calls["df -h /srv | tail -1"].output == "/dev/nvme0n1p1  1.8T  1.1T  700G  62% /srv\n"
    weights = calls["make -C /srv/model weights"]  # freeform "Exit code: 124" + "command timed out after ..."
    assert weights.timed_out and weights.output == "downloading shard 1/8\ndownloading shard 2/8\n"
    server = calls["python -m vllm.entrypoints.openai.api_server --model /srv/model/w --port 8011"]
    assert server.background and server.output == "INFO Loading weights\n"  # what the first answer showed
    assert server.final_exit_status == 1 and server.final_output is not None  # exec_command_end: whole output
    assert server.final_output.startswith("INFO Loading weights\n") and "OutOfMemoryError" in server.final_output
    assert server.started_at is not None and round((server.finished_at or 0) - server.started_at, 1) == 60.4
    assert (calls["nvidia-smi --query-gpu=memory.used --format=csv,noheader"].exit_status,
            calls["grep -c MiB /tmp/none.log"].exit_status, calls["ls /srv/model/w | wc -l"].output) == (0, 2, "12\n")
    assert calls["pkill -f vllm.entrypoints"].skip_reason == "refused: 'exec command rejected by user'"
    # in flight when its turn was aborted (turn_aborted, no output after it): it ran until then (qa15c #10)
    assert calls["sleep 600"].ran and calls["sleep 600"].interrupted
    assert calls["sleep 600"].how_it_ended() == "stopped when its turn was aborted (interrupted)"
    assert "update_plan" not in " ".join(calls) and len(calls) == 8  # other tools are not shell calls


def test_codex_exec_command_end_supplies_what_the_output_lacks(tmp_path: Path) -> None:
    import json

    def line(typ: str, payload: dict[str, object]) -> str:
        return json.dumps({"timestamp": "2026-02-06T00:30:00.000Z", "type": typ, "payload": payload})

    call = line("response_item", {"type": "function_call", "name": "shell", "call_id": "c1",
                                  "arguments": json.dumps({"command": ["bash", "-lc", "make check"]})})
    out = line("response_item", {"type": "function_call_output", "call_id": "c1", "output": "all good"})
    end = line("event_msg", {"type": "exec_command_end", "call_id": "c1", "aggregated_output": "all good\n",
                             "exit_code": 0, "duration": {"secs": 2, "nanos": 0}, "status": "completed"})
    without, with_end = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    without.write_text("\n".join([call, out]) + "\n")
    with_end.write_text("\n".join([call, end, out]) + "\n")
    assert (parse_codex(without)[0].skip_reason or "").startswith("no exit status")
    c = parse_codex(with_end)[0]
    assert (c.ran, c.exit_status, c.output, c.duration_s) == (True, 0, "all good\n", 2.0)


@pytest.mark.parametrize(("runtime", "path", "skipped"), [
    ("claude-code", CC_1_0, {3: "refused by the user", 6: "denied by a permission rule"}),
    ("claude-code", CC_2_0, {7: "denied by a permission rule", 8: "not permitted", 9: "rejected by the tool",
                             12: "no result in the transcript"}),
    ("opencode", OC_EXPORT, {6: "refused", 7: "no exit status", 10: "no result in the transcript"}),
    ("codex", CODEX_0_46, {5: "refused"}),
    ("codex", CODEX_UNIFIED, {5: "refused"}),  # call 8: in flight when the turn was aborted (qa15c #10)
    ("codex", CODEX_EXEC_JSON, {3: "refused", 5: "no exit status", 6: "no result in the transcript"}),
])
def test_import_cli_says_why_each_call_was_not_imported_and_the_test_replays(
        runtime: str, path: Path, skipped: dict[int, str], tmp_path: Path) -> None:
    res = CliRunner().invoke(import_app, [runtime, str(path), "--out-dir", str(tmp_path), "--name", "t"])
    assert res.exit_code == 0, res.output
    said = {int(m.group(1)): m.group(2) for m in re.finditer(r"not imported: call (\d+) `[^`]*` — (.*)", res.output)}
    assert set(said) == set(skipped) and all(said[n].startswith(why) for n, why in skipped.items()), res.output
    assert f"{len(skipped)} not" in res.output.splitlines()[0]
    source = (tmp_path / "test_transcript_t.py").read_text()
    assert all(f"call {n} `" in source for n in skipped)  # the generated test names them too
    _run_generated(tmp_path / "test_transcript_t.py", tmp_path / "run")


def test_claude_code_1_0_failures_replay_as_finished_with_a_non_zero_status(tmp_path: Path) -> None:
    res = import_calls(parse_claude_code(CC_1_0), runtime="claude-code", source=CC_1_0, out_dir=tmp_path, name="f")
    first_runs = {r["call"]: r for r in res.results if r["tool"] == "run_command"}
    for n in (1, 2, 5):  # ls of a missing directory, tsc errors, a failing npm run build
        assert (first_runs[n]["outcome"], first_runs[n]["exit_status"]) == ("finished", 1), first_runs[n]
    source = res.test_path.read_text()
    # 6: `curl localhost:5173` (call 9) is replayed; it checks nothing `npm test` (call 7) did (qa15 finding 2)
    assert source.count("== \"finished\" and steps[") == 6
    assert source.count("[\"exit_status\"] != 0  # the transcript says only non-zero") == 3  # not == 1: unknown
    assert "exit non-zero (the transcript does not say which)" in source
    assert 3 not in first_runs and 6 not in first_runs  # the refusals ran nothing, so nothing is replayed
    _run_generated(res.test_path, tmp_path / "run")


def test_output_that_quotes_the_runtimes_own_markers_is_output(tmp_path: Path) -> None:
    import json

    def lines(text: str, is_error: bool = False) -> str:
        use = {"type": "assistant", "timestamp": "2025-11-03T16:05:00.000Z", "message": {"content": [
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "grep -r Command notes.txt"}}]}}
        res = {"type": "user", "timestamp": "2025-11-03T16:05:01.000Z", "message": {"content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": text, "is_error": is_error}]},
               "toolUseResult": {"stdout": text, "stderr": "", "interrupted": False}}
        return json.dumps(use) + "\n" + json.dumps(res) + "\n"

    quoted = "notes.txt: then it said Command running in background with ID: bash_9\n"
    path = tmp_path / "s.jsonl"
    path.write_text(lines(quoted))
    (call,) = parse_claude_code(path)
    assert call.ran and not call.background and call.exit_status == 0 and call.output == quoted
    path.write_text(lines("notes.txt: The user doesn't want to proceed with this tool use\n"))
    (call,) = parse_claude_code(path)  # not an error result: a refusal text in the output is output
    assert call.ran and call.exit_status == 0


def test_skip_reasons_quoting_a_secret_are_redacted_everywhere(tmp_path: Path) -> None:
    import json

    secret = "Bearer sk-live-0123456789abcdef0123456789abcdef"
    cmd = f'curl -H "Authorization: {secret}" https://api.example.invalid/deploy'
    rows = []
    for n, (command, content, is_error) in enumerate([
            ("echo ok", "ok", False),
            (cmd, f"Permission to use Bash with command {cmd} has been denied.", True)]):
        rows.append({"type": "assistant", "timestamp": f"2025-11-03T16:05:0{2 * n}.000Z", "message": {"content": [
            {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"command": command}}]}})
        rows.append({"type": "user", "timestamp": f"2025-11-03T16:05:0{2 * n + 1}.000Z", "message": {"content": [
            {"type": "tool_result", "tool_use_id": f"t{n}", "content": content, "is_error": is_error}]}})
    path = tmp_path / "secret.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = CliRunner().invoke(import_app, ["claude-code", str(path), "--out-dir", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "not imported: call 2" in res.output and "denied by a permission rule" in res.output
    written = [p.read_text() for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert written and not any("sk-live-0123456789abcdef" in t for t in [res.output, *written])


# ------------------------------------------------------------------------------- issue 15: material from outside
# Fixture files in the shapes of real public transcripts (each names its source in the importer's docstring):
# Codex 0.152 code mode and a pre-envelope 2025 rollout (tenequm/pond's adapter fixtures), Claude Code 2.1.x
# refusals, reinterpreted exits and resumed sessions, opencode's aborted parts and permission errors.
CODEX_0_152 = SAMPLES / "codex_rollout_0_152_code_mode.jsonl"
CODEX_BARE = SAMPLES / "codex_rollout_2025_no_envelope.jsonl"
CODEX_ABORTED = SAMPLES / "codex_rollout_aborted_and_exit_124.jsonl"
CC_2_1 = SAMPLES / "claude_code_2_1_refusals_and_reinterpreted_exits.jsonl"
CC_QUOTING = SAMPLES / "claude_code_2_1_output_quoting_markers.jsonl"
CC_RESUMED = SAMPLES / "claude_code_2_1_resumed_session_long_build.jsonl"
OC_ABORTED = SAMPLES / "opencode_export_aborted_and_rules.json"


def _outcomes(calls: list[ShellCall]) -> list[str]:
    return [c.how_it_ended() if c.ran else f"skip: {c.skip_reason}" for c in calls]


def test_codex_code_mode_commands_are_the_shell_calls(tmp_path: Path) -> None:
    calls = parse_codex(CODEX_0_152)
    assert [(c.command, c.exit_status) for c in calls] == [
        ("systemctl cat app.service | head -3", 0), ("cat /etc/app/missing.conf", 1),
        ("python3 -m pytest -q tests/unit", 0), ('sh -c "exit 2"', 2)]  # one script ran two; apply_patch ran none
    assert calls[1].output == "cat: /etc/app/missing.conf: No such file or directory\n"
    assert round(calls[2].duration_s or 0, 2) == 2.38 and not calls.describe()
    res = CliRunner().invoke(import_app, ["codex", str(CODEX_0_152), "--out-dir", str(tmp_path), "--name", "cm"])
    assert res.exit_code == 0 and "4 imported, 0 not" in res.output, res.output
    _run_generated(tmp_path / "test_transcript_cm.py", tmp_path / "run")


def test_codex_rollout_written_before_the_envelope() -> None:
    calls = parse_codex(CODEX_BARE)
    assert [(c.command, c.exit_status, c.output.splitlines()[0]) for c in calls] == [
        ("systemctl is-active worker.service", 3, "failed"),
        ("journalctl -u worker.service -n 2 --no-pager -o cat", 0, "Failed to start worker.service.")]


def test_a_transcript_whose_calls_cannot_be_read_says_what_it_saw(tmp_path: Path) -> None:
    scripts_only = tmp_path / "rollout-scripts-only.jsonl"  # code-mode scripts without their CommandExecution items
    scripts_only.write_text("".join(ln for ln in CODEX_0_152.read_text().splitlines(keepends=True)
                                    if '"item_completed"' not in ln))
    res = CliRunner().invoke(import_app, ["codex", str(scripts_only), "--out-dir", str(tmp_path)])
    assert res.exit_code == 1
    assert "3 code-mode custom_tool_call 'exec' script(s) naming a shell tool" in res.output, res.output
    assert "has no shell calls" not in res.output
    empty = tmp_path / "rollout-other.jsonl"
    empty.write_text('{"timestamp": "2026-01-01T00:00:00Z", "type": "response_item", "payload": {"type": "message"}}\n'
                     "not json\n")
    res = CliRunner().invoke(import_app, ["codex", str(empty), "--out-dir", str(tmp_path)])
    assert res.exit_code == 1 and "1 line(s) that are not JSON" in res.output, res.output


def test_codex_interrupted_call_ran_and_a_commands_own_exit_124_is_its_status() -> None:
    restart, own, killed, by_duration, echo = parse_codex(CODEX_ABORTED)
    assert restart.ran and restart.interrupted and round(restart.duration_s or 0) == 300  # "aborted" after 5 min
    assert (own.timed_out, own.exit_status) == (False, 124)  # `timeout 5` exited 124 after 5 s of a 60 s timeout
    assert killed.timed_out and killed.timeout_s == 10  # default 10 s, lasted 10 s
    assert by_duration.timed_out and by_duration.timeout_s == 30  # exec_command_end only: 30 s of timeout_ms 30000
    assert echo.exit_status == 0


def test_claude_code_2_1_refusals_are_not_failures_and_reinterpreted_exits_are_1() -> None:
    calls = parse_claude_code(CC_2_1)
    assert _outcomes(calls)[:4] == ["exit 2", "exit 1", "exit 1", "exit 0"]  # grep no match / diff differ: 1
    reasons = {c.command: c.skip_reason or "" for c in calls if not c.ran}
    assert reasons["cat ~/.ssh/id_rsa | head -5"].startswith("denied by the auto mode classifier")
    assert reasons["gcloud compute instances reset node-0199"].startswith(
        "blocked: the auto mode classifier was unavailable")
    assert reasons["ls -la /srv/app/subdir/"].startswith("rejected by the tool (no such path)")
    assert reasons["npm run lint"].startswith("the tool answered with an error and no exit status")
    stopped = reasons["git commit -am 'rung D' && git push origin main"]
    assert "refused by the user, or interrupted by the user while it ran" in stopped and "cannot tell" in stopped
    assert len(reasons) == 5 and calls[-1].exit_status == 0


def test_claude_code_markers_quoted_in_a_commands_output_are_output() -> None:
    calls = parse_claude_code(CC_QUOTING)
    assert _outcomes(calls) == ["exit 0", "exit 0", "exit 0", "exit 1", "exit 1", "exit 2",
                                "left running in the background by the old tool"]  # asked for run_in_background
    assert calls[0].output == "Command running in background with ID: b2f8b9" and not calls[0].background
    assert "Command timed out after 30s" in calls[1].output and not calls[1].timed_out
    assert calls[2].output == "Exit code 5\nfrom the nightly job"
    assert calls[3].output == "docs/a.md:3:The user doesn't want to proceed with this tool use."


def test_claude_code_resumed_session_and_a_long_failure_replay_as_they_ran(tmp_path: Path) -> None:
    calls = parse_claude_code(CC_RESUMED)
    assert [c.index for c in calls] == [1, 2, 3] and [c.command for c in calls] == [
        "npm run build", "echo once", "git status --short"]  # the repeated tool_use is the same call
    res = import_calls(calls, runtime="claude-code", source=CC_RESUMED, out_dir=tmp_path, name="r")
    build_run, build_follow = res.results[0], res.results[1]
    assert build_run["outcome"] == "detached"  # 40 s > the 15 s budget
    assert (build_follow["tool"], build_follow["state"], build_follow["exit_status"]) == ("job_status", "exited", 1)
    assert [r["exit_status"] for r in res.results[2:]] == [0, 0]
    source = res.test_path.read_text()
    assert 'assert steps[1]["exit_status"] == 1' in source and "== 127" not in source
    _run_generated(res.test_path, tmp_path / "run")


def test_opencode_aborted_running_call_and_permission_errors() -> None:
    calls = parse_opencode(OC_ABORTED)
    restart = calls[0]  # "Tool execution aborted" + metadata.interrupted: it ran for 5 minutes, then was stopped
    assert restart.ran and restart.interrupted and round(restart.duration_s or 0) == 300
    reasons = [c.skip_reason or "" for c in calls if not c.ran]
    assert reasons[0].startswith("aborted before it returned") and "may never have started" in reasons[0]
    assert reasons[1].startswith("denied by a permission rule: 'The user has specified a rule")
    assert reasons[2].startswith("refused by the user: 'The user rejected permission")
    quoting, npm_ci = calls[5], calls[6]
    assert (quoting.timed_out, quoting.exit_status) == (False, 0) and "<shell_metadata>" in quoting.output
    assert npm_ci.timed_out and npm_ci.timeout_s == 5 and npm_ci.output == "added 812 packages"


@pytest.mark.parametrize(("runtime", "path", "call", "stopped_at_s"), [
    ("opencode", OC_ABORTED, 1, 300.0), ("codex", CODEX_ABORTED, 1, 300.0)])  # codex: turn_aborted's time
def test_a_call_stopped_while_it_ran_replays_as_a_job_cancelled_then(
        runtime: str, path: Path, call: int, stopped_at_s: float, tmp_path: Path) -> None:
    res = import_calls(parse_opencode(path) if runtime == "opencode" else parse_codex(path), runtime=runtime,
                       source=path, out_dir=tmp_path, name="s")
    steps = [(p["tool"], p.get("call", p.get("follow", p.get("cancel")))) for p in res.plan]
    assert steps[:3] == [("run_command", call), ("job_status", call), ("job_cancel", call)]
    assert res.plan[2]["at_s"] == stopped_at_s
    assert [(r["tool"], r["outcome"] or r["state"]) for r in res.results[:3]] == [
        ("run_command", "detached"), ("job_status", "running"), ("job_cancel", "killed")]
    cassette = Cassette.load(res.cassette_path)
    assert cassette.header["inferred"][0]["cancelled_at_s"] == stopped_at_s
    _run_generated(res.test_path, tmp_path / "run")


def test_codex_exec_json_event_streams() -> None:
    calls = parse_codex(CODEX_EXEC_JSON)
    assert [c.command for c in calls] == ["systemctl is-active app.service", "curl -fsS http://127.0.0.1:8080/health",
                                          "rm -rf /srv/app/cache", "timeout 5 make test", "ls", "journalctl -u app -f"]
    active, health, rm, tmo, ls, follow = calls
    assert (active.ran, active.exit_status, active.output) == (True, 3, "activating\n")
    assert (health.exit_status, health.output) == (0, '{"ok":true}')
    assert not rm.ran and (rm.skip_reason or "").startswith("refused: the command was declined")
    # no timeout note and no duration in the stream: 124 is the command's own (timeout 5 ...), not made a timeout
    assert (tmo.ran, tmo.timed_out, tmo.exit_status) == (True, False, 124)
    assert tmo.maybe_timed_out and not active.maybe_timed_out  # which of the two, the stream does not say
    assert not ls.ran and "exit_code null" in (ls.skip_reason or "")
    assert not follow.ran and (follow.skip_reason or "").startswith("no result in the transcript")
    assert all(c.started_at is None and c.duration_s is None for c in calls)  # the stream has no times


async def test_transcript_host_kills_at_the_launch_deadline(tmp_path: Path) -> None:
    """The synthetic host speaks the launch's deadline word as the job's monitor does: a job still running at
    its deadline ends ``killed`` by ``deadline`` (143, cancel and deadline reported), its output kept; one that
    ends first is untouched. Without it, an imported session run under a policy with ``hard_deadline_s``
    would replay a job the real host had killed."""
    from agent_tools.importers import ShellCall
    from agent_tools.importers.synth import TranscriptHost
    from agent_tools.jobs.journal import Journal
    from agent_tools.jobs.manager import JobRunner

    calls = [ShellCall(index=1, call_id="c1", command="make train", output="epoch 1\n", exit_status=0,
                       started_at=1000.0, ended_at=1060.0),
             ShellCall(index=2, call_id="c2", command="echo ok", output="ok\n", exit_status=0, started_at=1061.0,
                       ended_at=1061.1)]
    host = TranscriptHost(infer_timeline(calls))
    runner = JobRunner(Journal(tmp_path / "j.sqlite3"), warm=False)
    killed = await runner.run(host, "make train", budget_s=30, hard_deadline_s=0.2)
    assert killed.outcome == "killed" and killed.by == "deadline", killed
    assert killed.exit_status == 143 and killed.stdout.text == "epoch 1\n", killed
    st = await runner.job_status(host, killed.job_id)
    assert (st.state, st.by, st.hard_deadline_s) == ("killed", "deadline", 0.2), st
    ok = await runner.run(host, "echo ok", budget_s=30, hard_deadline_s=5)
    assert ok.outcome == "finished" and ok.exit_status == 0, ok


CC_BG_LATER = SAMPLES / "claude_code_2_0_background_ends_after_another_call.jsonl"


def test_a_background_job_whose_end_shows_after_other_calls_is_followed_to_that_end(tmp_path: Path) -> None:
    res = import_calls(parse_claude_code(CC_BG_LATER), runtime="claude-code", source=CC_BG_LATER, out_dir=tmp_path,
                       name="b")
    steps = [(p["tool"], p.get("call", p.get("follow"))) for p in res.plan]
    assert steps == [("run_command", 1), ("job_status", 1), ("run_command", 2), ("job_status", 1), ("run_command", 3)]
    again = res.plan[3]
    assert again["at_s"] == 40.5 and again["until_s"] == 43.0  # the BashOutput's time; before call 3's
    assert (res.results[1]["state"], res.results[3]["state"], res.results[3]["exit_status"]) == (
        "running", "exited", 2)
    assert res.plan[4]["at_s"] == 43.0  # call 3 keeps its own time
    source = res.test_path.read_text()
    assert 'assert steps[3]["state"] == \'exited\'' in source and 'assert steps[3]["exit_status"] == 2' in source
    _run_generated(res.test_path, tmp_path / "run")


def test_codex_exec_json_calls_say_their_duration_and_an_exit_124_are_unknown(tmp_path: Path) -> None:
    res = import_calls(parse_codex(CODEX_EXEC_JSON), runtime="codex", source=CODEX_EXEC_JSON, out_dir=tmp_path,
                       name="x")
    was = {p["arguments"]["command"]: p["was"] for p in res.plan if p["tool"] == "run_command"}
    assert was["systemctl is-active app.service"] == "exit 3, duration unknown (the transcript gives no times)"
    assert was["timeout 5 make test"].startswith("exit 124 (the old tool's timeout or the command's own")
    assert not any(re.search(r"after \d", w) for w in was.values()), was  # no made-up durations
    _run_generated(res.test_path, tmp_path / "run")


@pytest.mark.parametrize("version", ["1.0.40", "2.0.37"])
@pytest.mark.parametrize("text", [
    "PreToolUse:Bash [~/.claude/hooks/guard.sh] failed with status code 2: Blocked: force push",
    "PreToolUse:Bash hook error: [~/.claude/hooks/guard.sh]: no force pushes",
    "Hook PreToolUse:Bash blocked this command: no force pushes",
    "Blocked by hook: no force pushes"])
def test_claude_code_hook_blocks_are_refusals_not_commands_that_ran(version: str, text: str, tmp_path: Path) -> None:
    import json

    use = {"type": "assistant", "version": version, "timestamp": "2025-11-03T16:05:00.000Z", "message": {
        "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "git push -f"}}]}}
    res = {"type": "user", "version": version, "timestamp": "2025-11-03T16:05:01.000Z", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": text, "is_error": True}]},
           "toolUseResult": f"Error: {text}"}
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(use) + "\n" + json.dumps(res) + "\n")
    (call,) = parse_claude_code(path)
    assert not call.ran and not call.nonzero and (call.skip_reason or "").startswith("blocked by a hook"), call


def test_opencode_storage_parts_are_read_in_time_order_not_file_name_order(tmp_path: Path) -> None:
    import json
    import shutil

    storage = tmp_path / "storage"
    shutil.copytree(OC_STORAGE / "storage", storage)
    part_dir = storage / "part" / "msg_01c"
    for old, new in (("prt_01c1", "prt_01c9"), ("prt_01c2", "prt_01c10")):  # "prt_01c10" sorts before "prt_01c9"
        data = json.loads((part_dir / f"{old}.json").read_text())
        data["id"] = new
        (part_dir / f"{new}.json").write_text(json.dumps(data))
        (part_dir / f"{old}.json").unlink()
    calls = parse_opencode(storage, session=OC_STORAGE_SESSION)
    assert [c.command for c in calls][2:] == ["npm run serve", "echo done"]  # by time.start, as export and DB
    assert [c.index for c in calls] == [1, 2, 3, 4]


# ------------------------------------------------------------------------------------------------ qa15
CC_OTHER_CHECKS = SAMPLES / "claude_code_2_1_checks_of_other_things.jsonl"
CC_PARALLEL = SAMPLES / "claude_code_2_1_parallel_calls.jsonl"


def test_only_a_check_of_the_same_thing_ends_a_timed_out_call_and_the_replaced_checks_are_listed(
        tmp_path: Path) -> None:
    """qa15 findings 2-4: `systemctl status nginx` says nothing of `make test`, `curl https://api.github.com` nothing
    of `pip install` (and https is no probe); a check of the unit a call restarted (or this host's HTTP after it)
    does end it; every check not run is listed as replaced, and only those are named "replaced"."""
    res = CliRunner().invoke(import_app, ["claude-code", str(CC_OTHER_CHECKS), "--out-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "10 shell call(s) read from" in res.output and ": 8 imported, 2 replaced, 0 not" in res.output
    assert re.findall(r"replaced: call (\d+) `[^`]*` — a check of call (\d+)", res.output) == [("8", "7"), ("9", "7")]
    source = (tmp_path / "test_transcript_claude_code_2_1_checks_of_other_things.py").read_text()
    # make test: still running when the next call came (was: "exited", exit 0, as if it had passed)
    assert "assert steps[1][\"state\"] == 'running' and steps[1][\"readiness\"] == None" in source
    assert "assert steps[2][\"outcome\"] == \"finished\"" in source  # systemctl status nginx is replayed
    assert "'probes'" not in source and "internal" not in source  # no https probe, no internal error asserted
    assert "replaces call(s) 8, 9 (its checks)" in source and "replaces checks" not in source
    assert source.count("replaces call(s)") == 2  # the plan's step and its comment; calls 1, 4 replace nothing
    assert "#   call 8 `systemctl is-active web`: checks call 7" in source
    cassette = Cassette.load(tmp_path / "cassettes" / "claude_code_2_1_checks_of_other_things.jsonl")
    inferred = {i["call"]: i for i in cassette.header["inferred"]}
    assert inferred[1]["ends_at_s"] is None and inferred[4]["ends_at_s"] is None and inferred[4]["probe_url"] is None
    assert inferred[7]["evidence"].startswith("call 9 `curl -sk https://127.0.0.1:8443/health`")
    assert inferred[7]["superseded_calls"] == [8, 9] and inferred[1]["superseded_calls"] == []
    _run_generated(tmp_path / "test_transcript_claude_code_2_1_checks_of_other_things.py", tmp_path / "run")


def test_an_import_whose_replay_answers_an_error_writes_nothing(tmp_path: Path) -> None:
    """qa15 finding 3: a step that answers an error would be asserted as the expected outcome: the import fails
    naming it, and writes no cassette and no test."""
    from agent_tools.importers import ImportFailed

    huge = "echo " + "x" * 200_000  # longer than a host's shell takes: run_command refuses it
    calls = [ShellCall(1, "a", "echo hi", "hi\n", 0, started_at=0.0, ended_at=0.1),
             ShellCall(2, "b", huge, "", 0, started_at=1.0, ended_at=1.1)]
    with pytest.raises(ImportFailed, match=r"call 2: run_command -> error \(bad_arguments\)"):
        import_calls(calls, runtime="claude-code", source=tmp_path / "t.jsonl", out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_background_command_killed_by_the_agent_replays_as_job_cancel(tmp_path: Path) -> None:
    """qa15 finding 5: KillShell stopped `npm run dev`: it is cancelled then, not replayed as exiting 143 itself."""
    res = import_calls(parse_claude_code(CC_1_0), runtime="claude-code", source=CC_1_0, out_dir=tmp_path, name="k")
    steps = {(r["tool"], r["call"]): r for r in res.results}
    assert steps[("job_cancel", 8)]["state"] == "killed", steps
    assert ("job_status", 8) not in steps or steps[("job_status", 8)]["exit_status"] is None
    cancel = next(s for s in res.plan if s["tool"] == "job_cancel")
    assert cancel["cancel"] == 8 and "stopped on request (KillShell)" in cancel["was"]
    # the cancel comes at its own time, after call 9 (made before it)
    assert [s.get("call", s.get("cancel")) for s in res.plan if s["tool"] != "job_status"][-3:] == [9, 8, 10]


def test_parallel_calls_keep_their_order_and_the_long_ones_end_is_still_checked(tmp_path: Path) -> None:
    """qa15 finding 6: `git status` made alongside `npm ci` runs when npm ci's run_command returns (its budget),
    not after npm ci's 40 s; npm ci's exit status is checked by a later follow-up at 40 s; the plan says so."""
    res = import_calls(parse_claude_code(CC_PARALLEL), runtime="claude-code", source=CC_PARALLEL, out_dir=tmp_path)
    status = next(s for s in res.plan if s.get("call") == 2)
    assert status["at_s"] == 0.0 and "runs once that returns, at about 15 s" in status["note"], status
    follow = [s for s in res.plan if s["tool"] == "job_status" and s["follow"] == 1]
    assert [f["until_s"] for f in follow] == [0.0, 45.0] and follow[1]["at_s"] == 40.0, follow
    events = Cassette.load(res.cassette_path).events
    started = {e["arguments"]["command"]: e["t"] for e in events if e.get("ev") == "tool"
               and e.get("name") == "run_command"}
    assert started == {"npm ci": 0.0, "git status --short": 15.0, "npm test": 45.0}, started
    last = [r for r in res.results if r["tool"] == "job_status" and r["call"] == 1][-1]
    assert (last["state"], last["exit_status"]) == ("exited", 0), last
    _run_generated(res.test_path, tmp_path / "run")


@pytest.mark.parametrize("name", ["../../escape", "bad name; rm", "x/y", ""])
def test_import_name_must_be_a_plain_name(tmp_path: Path, name: str) -> None:
    """qa15 finding 9: --name names two files and a Python function: anything else is refused, nothing written."""
    out = tmp_path / "out"
    res = CliRunner().invoke(import_app, ["claude-code", str(CC_PARALLEL), "--out-dir", str(out), "--name", name])
    assert res.exit_code == 2 and "letters, digits and _ only" in res.output, res.output
    assert not out.exists() and not list(tmp_path.rglob("*.jsonl"))
    with pytest.raises(ValueError, match="letters, digits and _ only"):
        import_calls(parse_claude_code(CC_PARALLEL), runtime="claude-code", source=CC_PARALLEL, out_dir=out, name=name)


def test_claude_code_1_0_reads_no_framing_from_the_commands_output(tmp_path: Path) -> None:
    """qa15 finding 7: in 1.0.x an error result is the command's raw output, so output that starts like the
    tool's refusal or like 2.x's `Exit code N` line is the failed command's own text; only a whole one-line
    refusal (a permission rule naming this very command) is the tool's."""
    calls = _by_command(parse_claude_code(SAMPLES / "claude_code_1_0_output_like_framing.jsonl"))
    for cmd in ("node check.js", "./check-exit.sh", "./gate.sh"):  # ran and failed; which status, not said
        assert calls[cmd].ran and (calls[cmd].nonzero, calls[cmd].exit_status) == (True, None), calls[cmd]
    assert calls["./check-exit.sh"].output.startswith("Exit code 3\n")  # kept as the command printed it
    assert not calls["./deploy.sh"].ran and calls["./deploy.sh"].skip_reason.startswith("denied by a permission rule")
    assert not calls["cd /etc && ls"].ran  # the tool's one-line path check
    res = import_calls(list(calls.values()), runtime="claude-code", source=tmp_path / "f.jsonl", out_dir=tmp_path)
    assert [(r["call"], r["outcome"]) for r in res.results] == [(1, "finished"), (2, "finished"), (3, "finished")]
    assert res.test_path.read_text().count("!= 0  # the transcript says only non-zero") == 3


def test_subagent_transcripts_and_files_of_another_runtime_are_named(opencode_db: Path, tmp_path: Path) -> None:
    """qa15 findings 8 and 14: the Bash calls of a session's subagents (``<id>/subagents/agent-*.jsonl``) are said
    to be there and how to import them; a Codex rollout given to ``import claude-code`` (and the other way round)
    names the right importer; an empty opencode session says so, not "0 line(s)"."""
    res = CliRunner().invoke(import_app, ["claude-code", str(SAMPLES / "claude_code_2_1_with_subagent.jsonl"),
                                          "--out-dir", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert ("also seen: 1 Bash call(s) of this session's subagents, in 1 transcript(s) under "
            "claude_code_2_1_with_subagent/subagents/ (not part of this import: import each agent-*.jsonl by "
            "itself)") in res.output
    res = CliRunner().invoke(import_app, ["claude-code", str(CODEX_0_46), "--out-dir", str(tmp_path / "b")])
    assert res.exit_code == 1 and "import it with: agent-tools import codex FILE" in res.output, res.output
    res = CliRunner().invoke(import_app, ["codex", str(CC_PARALLEL), "--out-dir", str(tmp_path / "c")])
    assert res.exit_code == 1 and "import it with: agent-tools import claude-code FILE" in res.output, res.output
    import sqlite3

    db = sqlite3.connect(opencode_db)
    sid = db.execute("select id from session").fetchone()[0]
    db.execute("delete from part where session_id = ?", (sid,))
    db.execute("delete from message where session_id = ?", (sid,))
    db.commit()
    db.close()
    res = CliRunner().invoke(import_app, ["opencode", str(opencode_db), "--session", sid, "--out-dir",
                                          str(tmp_path / "d")])
    assert res.exit_code == 1 and "the session is empty" in res.output and "line(s)" not in res.output, res.output


def test_codex_sandbox_denied_output_is_the_commands_exit(tmp_path: Path) -> None:
    """qa15 finding 14: codex-rs' SandboxErr::Denied text ("failed in sandbox ... exit code: 6, stdout: ...,
    stderr: ...") is a command that ran in the sandbox and exited 6, not a result without an exit status."""
    import json

    def line(t: str, kind: str, payload: dict[str, object]) -> str:
        return json.dumps({"timestamp": f"2026-01-05T09:00:{t}.000Z", "type": kind, "payload": payload}) + "\n"

    rollout = tmp_path / "rollout-2026-01-05T09-00-00-sandbox.jsonl"
    rollout.write_text(
        line("00", "session_meta", {"id": "s", "cwd": "/w"})
        + line("01", "response_item", {"type": "function_call", "name": "shell", "call_id": "c6",
                                       "arguments": json.dumps({"command": ["bash", "-lc", "curl https://pypi.org"]})})
        + line("02", "response_item", {"type": "function_call_output", "call_id": "c6", "output": (
            "failed in sandbox LinuxSeccomp with execution error: sandbox denied exec error, exit code: 6, stdout: , "
            "stderr: curl: (6) Could not resolve host: pypi.org\n")}))
    [call] = parse_codex(rollout)
    assert call.ran and call.skip_reason is None, call
    assert (call.exit_status, call.output) == (6, "curl: (6) Could not resolve host: pypi.org\n")
