"""Issue 15, qa15c findings 1-6 and 9-11: transcript imports on shapes nobody here wrote — a lone surrogate in an
output, a command's own text that reads like the old tool's timeout, Codex apply_patch edits, a command's own
exit 124, a session stopped with Ctrl-C, outputs the runtime cut or saved to a file, opencode subagents, a turn
aborted while a call ran, and where each command ran."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_tools.cli_import import import_app
from agent_tools.importers import import_calls, parse_claude_code, parse_codex, parse_opencode

SAMPLES = Path(__file__).parent / "transcripts"
#: Codex 0.58 rollout: apply_patch through the shell tool (argv and heredoc forms), a command printing the
#: tool's timeout note itself, `timeout 10` exiting 124, the tool's own timeout, a unified exec session stopped
#: with Ctrl-C, a lone surrogate in an output, a turn aborted while a call ran; workdirs absolute and relative
CODEX = SAMPLES / "codex_rollout_patches_own_timeout_texts_ctrl_c.jsonl"
#: Claude Code 2.1: an own "Command timed out" line, a real timeout, outputs saved to tool-results/ (one file
#: here, one not), a lone surrogate
CC_2 = SAMPLES / "claude_code_2_1_own_timeout_text_persisted_output.jsonl"
#: Claude Code 1.0.43: a failure printing a timeout-like last line after 3 s, and a real timeout
CC_1 = SAMPLES / "claude_code_1_0_own_timeout_text.jsonl"
#: opencode: a relative workdir, outputs cut by opencode (file absent / present / older end marker), a task part
OC_EXPORT = SAMPLES / "opencode_export_cut_outputs_workdir_subagent.json"


def _by_command(calls: list) -> dict:  # type: ignore[type-arg]
    return {c.command: c for c in calls}


def _run_generated(test_path: Path, tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(test_path.stem, test_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    getattr(module, next(n for n in dir(module) if n.startswith("test_")))(tmp_path)


@pytest.mark.parametrize(("runtime", "path", "command"), [
    ("codex", CODEX, "cat emoji.txt"), ("claude-code", CC_2, "tail -c 100 chat.log")])
def test_a_lone_surrogate_in_an_output_is_imported_as_a_replacement_character(
        runtime: str, path: Path, command: str, tmp_path: Path) -> None:
    """Finding 1: `"ok \\ud83d"` (a JavaScript string cut inside an emoji's surrogate pair) made the synthetic
    replay fail inside agent_tools (UnicodeEncodeError), so nothing was imported."""
    res = CliRunner().invoke(import_app, [runtime, str(path), "--out-dir", str(tmp_path), "--name", "t"])
    assert res.exit_code == 0, res.output
    assert "internal" not in res.output and "UnicodeEncodeError" not in res.output, res.output
    calls = parse_codex(path) if runtime == "codex" else parse_claude_code(path)
    index = next(c.index for c in calls if c.command == command)
    assert f"call {index}: run_command -> finished" in res.output
    result = import_calls(calls, runtime=runtime, source=path, out_dir=tmp_path / "api", name="t")
    step = next(r for r in result.results if r["call"] == index and r["tool"] == "run_command")
    assert step["result"]["stdout"]["text"] == "ok \ufffd", step
    _run_generated(tmp_path / "test_transcript_t.py", tmp_path / "run")


def test_claude_code_a_commands_own_timeout_line_is_output_not_the_tools_timeout(tmp_path: Path) -> None:
    """Finding 2 (Claude Code): the notice counts only when the tool can have written it: from 2.0 on with
    `Exit code 143`, and in every version when the call lasted about the time it names."""
    calls = _by_command(parse_claude_code(CC_2))
    own = calls["pytest -q tests/test_net.py"]
    assert (own.timed_out, own.exit_status) == (False, 1)
    assert own.output.endswith("Command timed out after 10s")  # kept: the command printed it
    real = calls["./wait-for-db.sh"]
    assert real.timed_out and real.timeout_s == 30 and real.exit_status is None and real.output == "waiting..."
    old = _by_command(parse_claude_code(CC_1))
    failed = old["./integration.sh"]  # 1.0.43, failed after 3 s: no 30 s timeout met it
    assert (failed.timed_out, failed.nonzero, failed.exit_status) == (False, True, None)
    assert failed.output == "connecting...\nCommand timed out after 30s"
    assert old["sleep 60"].timed_out and old["sleep 60"].timeout_s == 5  # the tool's, after its 5 s
    res = import_calls(list(old.values()), runtime="claude-code", source=CC_1, out_dir=tmp_path, name="t")
    assert (res.results[0]["call"], res.results[0]["tool"], res.results[0]["outcome"]) == (1, "run_command",
                                                                                          "finished")
    assert res.plan[0]["was"] == "exit non-zero (the transcript does not say which) after 3.0 s"


def test_codex_timeout_note_counts_only_in_the_tools_answer_and_a_commands_own_124_is_its_status(
        tmp_path: Path) -> None:
    """Findings 2 and 4 (Codex): the note "command timed out after N milliseconds" is the tool's only in the
    model-facing output (function_call_output) with exit 124, never in the command's aggregated_output; and an
    exit 124 whose model-facing output has no note is the command's own (`timeout 10 ...`), even when it lasted
    the tool's default 10 s."""
    calls = _by_command(parse_codex(CODEX))
    own_note = calls["./probe.sh"]
    assert (own_note.timed_out, own_note.exit_status) == (False, 1)
    assert own_note.output.startswith("command timed out after 2000 milliseconds\n")
    own_124 = calls["timeout 10 curl -s http://10.0.0.5/"]
    assert (own_124.timed_out, own_124.exit_status) == (False, 124)
    tool = calls["./slow-migrate.sh"]
    assert tool.timed_out and tool.timeout_s == 20 and tool.output == "applying 0042...\n"
    res = import_calls(parse_codex(CODEX), runtime="codex", source=CODEX, out_dir=tmp_path, name="t")
    by_call = {r["call"]: r for r in res.results if r["tool"] == "run_command"}
    assert (by_call[own_note.index]["outcome"], by_call[own_note.index]["exit_status"]) == ("finished", 1)
    assert (by_call[own_124.index]["outcome"], by_call[own_124.index]["exit_status"]) == ("finished", 124)
    assert by_call[tool.index]["outcome"] == "detached"  # the old tool's 20 s timeout: it kept running


def test_codex_apply_patch_through_the_shell_tool_is_a_file_edit_not_a_command(tmp_path: Path) -> None:
    """Finding 3: Codex intercepts `["apply_patch", PATCH]` and `bash -lc "cd src && apply_patch <<'EOF' ..."`
    and applies the patch itself (codex-rs apply-patch): nothing runs in a shell, so neither is a shell call (a
    re-recording would have run `apply_patch` on a host)."""
    calls = parse_codex(CODEX)
    assert not [c for c in calls if "apply_patch" in c.command]
    assert "2 apply_patch file edit(s) made through a shell tool" in calls.describe()
    res = CliRunner().invoke(import_app, ["codex", str(CODEX), "--out-dir", str(tmp_path), "--name", "t"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"{len(calls)} shell call(s) read"), res.output
    assert "also seen: 2 apply_patch file edit(s)" in res.output
    assert "apply_patch" not in (tmp_path / "test_transcript_t.py").read_text().split("PLAN = ")[1]


def test_codex_a_session_stopped_with_ctrl_c_replays_as_job_cancel(tmp_path: Path) -> None:
    """Finding 5: `write_stdin {chars: "\\u0003"}` then "Process exited with code 130": the agent stopped the
    server, it did not exit by itself; replayed as job_cancel at the time of the Ctrl-C."""
    server = _by_command(parse_codex(CODEX))["python3 -m http.server 8000"]
    assert server.background and server.killed_by == "write_stdin Ctrl-C" and server.finished_at is None
    assert server.started_at is not None and server.killed_at == server.started_at + 10
    res = import_calls(parse_codex(CODEX), runtime="codex", source=CODEX, out_dir=tmp_path, name="t")
    cancel = next(i for i, p in enumerate(res.plan) if p["tool"] == "job_cancel" and p["cancel"] == server.index)
    assert "stopped on request (write_stdin Ctrl-C)" in res.plan[cancel]["was"]
    assert res.results[cancel]["state"] == "killed"
    assert not [r for r in res.results if r["call"] == server.index and r.get("exit_status") == 130]


def test_codex_a_call_in_flight_when_the_turn_was_aborted_was_stopped_then(tmp_path: Path) -> None:
    """Finding 10: a call without a result before `turn_aborted` ran until the user interrupted the turn; the
    session did not end there."""
    sleep = _by_command(parse_codex(CODEX))["sleep 500"]
    assert sleep.ran and sleep.interrupted and sleep.skip_reason is None
    assert sleep.how_it_ended() == "stopped when its turn was aborted (interrupted)"
    assert round(sleep.duration_s or 0) == 10
    res = CliRunner().invoke(import_app, ["codex", str(CODEX), "--out-dir", str(tmp_path), "--name", "t"])
    assert res.exit_code == 0 and "session ended" not in res.output, res.output
    assert f"call {sleep.index}: job_cancel -> killed" in res.output


def test_where_each_command_ran_is_kept_in_every_format(tmp_path: Path) -> None:
    """Finding 11: Codex `workdir` (relative to the turn's cwd) or the turn's cwd, opencode `workdir` (relative to
    the session's directory) or that directory, Claude Code's `cwd`: the plan's run_command runs it there."""
    cx = _by_command(parse_codex(CODEX))
    assert cx["./probe.sh"].cwd == "/home/dev/proj/scripts"  # workdir "scripts"
    assert cx["cat emoji.txt"].cwd == "/home/dev/proj/sub dir"
    assert cx["sleep 500"].cwd == "/home/dev/proj"  # no workdir: the turn's cwd
    oc = _by_command(parse_opencode(OC_EXPORT))
    assert oc["./run.sh"].cwd == "/srv/app/tools" and oc["seq 1 5"].cwd == "/srv/app"
    cc = _by_command(parse_claude_code(CC_2))
    assert cc["tail -c 100 chat.log"].cwd == "/home/dev/app/logs" and cc["cat big.log"].cwd == "/home/dev/app"
    res = import_calls(parse_codex(CODEX), runtime="codex", source=CODEX, out_dir=tmp_path, name="t")
    probe = next(p for p in res.plan if p["tool"] == "run_command" and p["arguments"]["command"] == "./probe.sh")
    assert probe["arguments"]["cwd"] == "/home/dev/proj/scripts"
    _run_generated(res.test_path, tmp_path / "run")


def test_claude_code_an_output_saved_to_a_file_is_read_from_it_or_said_to_be_cut(tmp_path: Path) -> None:
    """Finding 6 (Claude Code >= 2.0.52): `<persisted-output>` and the sidecar's `persistedOutputPath`: the whole
    output is the saved file when it is beside the transcript (`<session>/tool-results/`); otherwise the preview
    is all there is, and the CLI, the plan and the generated test say so."""
    calls = _by_command(parse_claude_code(CC_2))
    whole = calls["cat big.log"]
    assert whole.output_cut is None and whole.output.startswith("line 1\n") and whole.output.endswith(
        "ERROR at the end\n")
    cut = calls["journalctl -b --no-pager"]
    assert cut.output == "-- Journal begins --\nboot 1"
    assert cut.output_cut is not None and "only its preview (first 2.0 KB)" in cut.output_cut
    assert "Output too large (1.5 MB)" in cut.output_cut and "toolu_01qa15c004.txt, which is not here" in cut.output_cut
    res = CliRunner().invoke(import_app, ["claude-code", str(CC_2), "--out-dir", str(tmp_path), "--name", "t"])
    assert res.exit_code == 0, res.output
    assert f"output cut: call {cut.index} `journalctl -b --no-pager` — the transcript holds only its preview" \
        in res.output
    step = next(p for p in _plan(tmp_path) if p.get("call") == cut.index)
    assert "only its preview" in step["output_cut"]
    assert "its output is cut" in (tmp_path / "test_transcript_t.py").read_text()


def _plan(out: Path) -> list[dict]:  # type: ignore[type-arg]
    spec = importlib.util.spec_from_file_location("gen", out / "test_transcript_t.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.PLAN)


def test_a_saved_output_is_read_only_from_the_runtimes_own_directory(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A transcript names the saved file's path; only its name is looked up in the runtime's own directory, so a
    transcript naming another file of this machine cannot make an import copy it into the cassette."""
    secret = tmp_path / "elsewhere" / "toolu_x.txt"
    secret.parent.mkdir()
    secret.write_text("TOPSECRET-CONTENT\n")
    line = CC_2.read_text().splitlines()[6:8]  # call 4: its saved file is not beside the transcript
    session = tmp_path / "s.jsonl"
    session.write_text("\n".join(line).replace(
        "/home/dev/.claude/projects/-home-dev-app/5e551011-qa15c/tool-results/toolu_01qa15c004.txt", str(secret))
        + "\n")
    [call] = parse_claude_code(session)
    assert "TOPSECRET" not in call.output and call.output_cut is not None, call
    (tmp_path / "s" / "tool-results").mkdir(parents=True)
    (tmp_path / "s" / "tool-results" / "toolu_x.txt").write_text("the saved output\n")
    [call] = parse_claude_code(session)
    assert (call.output, call.output_cut) == ("the saved output\n", None)  # the same name, beside the transcript
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    export = tmp_path / "export.json"
    export.write_text(OC_EXPORT.read_text().replace("/home/dev/.local/share/opencode/tool-output/tool_q3here",
                                                    str(tmp_path / "elsewhere" / "toolu_x.txt")))
    seq = _by_command(parse_opencode(export))["seq 1 5"]
    assert "TOPSECRET" not in seq.output and seq.output_cut is not None, seq
    (tmp_path / "xdg" / "opencode" / "tool-output").mkdir(parents=True)
    (tmp_path / "xdg" / "opencode" / "tool-output" / "toolu_x.txt").write_text("1\n2\n")
    assert _by_command(parse_opencode(export))["seq 1 5"].output == "1\n2\n"  # opencode's own data directory


def test_opencode_cut_outputs_are_read_whole_or_said_to_be_cut(tmp_path: Path) -> None:
    """Finding 6 (opencode): `...output truncated...` + `metadata.truncated`: the whole output from
    `metadata.outputPath` (or the data directory's `tool-output/`) when it is there, else the part kept, said to be
    cut; older builds' end marker says the start was kept."""
    db = tmp_path / "data" / "opencode.db"
    db.parent.mkdir()
    conn = sqlite3.connect(db)
    conn.executescript((SAMPLES / "opencode_db_subagent.sql").read_text())
    conn.close()
    (tmp_path / "data" / "tool-output").mkdir()
    (tmp_path / "data" / "tool-output" / "tool_q3here").write_text("1\n2\n3\n4\n5\n")
    calls = _by_command(parse_opencode(db, session="ses_qa15cParent"))
    assert calls["seq 1 5"].output == "1\n2\n3\n4\n5\n" and calls["seq 1 5"].output_cut is None
    missing = calls["seq 1 100000"]
    assert missing.output == "99999\n100000\n"
    assert missing.output_cut == ("the transcript holds only the end of its output (opencode cut it: "
                                  "metadata.truncated); the whole output was saved to "
                                  "/home/dev/.local/share/opencode/tool-output/tool_q2missing, which is not here")
    older = calls["cat huge.txt"]
    assert older.output == "first\nsecond" and (older.output_cut or "").startswith(
        "the transcript holds only the start of its output")
    from_export = _by_command(parse_opencode(OC_EXPORT))  # no data directory: the file is not found
    assert from_export["seq 1 5"].output == "4\n5\n" and from_export["seq 1 5"].output_cut is not None


def test_opencode_subagent_sessions_are_named_and_the_listing_says_whose_they_are(tmp_path: Path) -> None:
    """Finding 9: the session a `task` part started (parent_id in the database) has bash calls of its own; the
    import says so and how to import it, and a database with several sessions is called one (not "not an
    opencode session"), its listing naming each subagent's parent."""
    db = tmp_path / "opencode.db"
    conn = sqlite3.connect(db)
    conn.executescript((SAMPLES / "opencode_db_subagent.sql").read_text())
    conn.close()
    res = CliRunner().invoke(import_app, ["opencode", str(db), "--out-dir", str(tmp_path / "a")])
    assert res.exit_code == 1
    assert "not an opencode session" not in res.output and "holds 2 sessions: name one with --session" in res.output
    assert "ses_qa15cChild  run tests (@general subagent)  (/srv/app)  [subagent of ses_qa15cParent]" in res.output
    res = CliRunner().invoke(import_app, ["opencode", str(db), "--session", "ses_qa15cParent", "--out-dir",
                                          str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert ("also seen: 1 bash call(s) of this session's subagent session(s) ses_qa15cChild (not part of this "
            "import: import each with --session ID)") in res.output
    res = CliRunner().invoke(import_app, ["opencode", str(OC_EXPORT), "--out-dir", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    assert "1 subagent session(s) started by its task tool (ses_qa15cChild), not in this file" in res.output
    # the file storage of older releases: parentID in the child's session file
    storage = tmp_path / "storage"
    for sid, parent in (("ses_qa15cParent", None), ("ses_qa15cChild", "ses_qa15cParent")):
        f = storage / "session" / "prj" / f"{sid}.json"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({"id": sid, "title": "t", "directory": "/srv/app",
                                 **({"parentID": parent} if parent else {})}))
    (storage / "message" / "ses_qa15cChild").mkdir(parents=True)
    (storage / "message" / "ses_qa15cChild" / "msg_c.json").write_text('{"id": "msg_c", "time": {"created": 1}}')
    (storage / "part" / "msg_c").mkdir(parents=True)
    (storage / "part" / "msg_c" / "prt_c.json").write_text(
        '{"type": "tool", "tool": "bash", "callID": "c", "state": {"status": "completed", "input": {"command": '
        '"pytest -q"}, "output": "1 failed", "metadata": {"exit": 1}, "time": {"start": 1, "end": 2}}}')
    (storage / "message" / "ses_qa15cParent").mkdir(parents=True)
    calls = parse_opencode(storage, session="ses_qa15cParent")
    assert "1 bash call(s) of this session's subagent session(s) ses_qa15cChild" in calls.describe()


def test_codex_the_tools_answer_decides_an_exit_124_whichever_line_comes_first(tmp_path: Path) -> None:
    """Finding 4, the other order: a function_call_output before its exec_command_end still decides (no note: the
    command's own 124; the note: the tool's timeout), not the duration alone."""
    def line(t: str, kind: str, payload: dict[str, object]) -> str:
        return json.dumps({"timestamp": f"2026-01-05T09:00:{t}.000Z", "type": kind, "payload": payload}) + "\n"

    def shell(t: str, cid: str, cmd: str) -> str:
        return line(t, "response_item", {"type": "function_call", "name": "shell", "call_id": cid,
                                         "arguments": json.dumps({"command": ["bash", "-lc", cmd]})})

    def answer(t: str, cid: str, out: str) -> str:
        return line(t, "response_item", {"type": "function_call_output", "call_id": cid, "output": json.dumps(
            {"output": out, "metadata": {"exit_code": 124, "duration_seconds": 10.0}})})

    def end(t: str, cid: str) -> str:
        return line(t, "event_msg", {"type": "exec_command_end", "call_id": cid, "aggregated_output": "",
                                     "exit_code": 124, "duration": {"secs": 10, "nanos": 0}})

    rollout = tmp_path / "rollout-order.jsonl"
    rollout.write_text(line("00", "session_meta", {"id": "s", "cwd": "/w"})
                       + shell("01", "a", "timeout 10 curl -s http://10.0.0.5/") + answer("11", "a", "")
                       + end("12", "a") + shell("13", "b", "sleep 99")
                       + answer("23", "b", "command timed out after 10000 milliseconds\n") + end("24", "b"))
    own, killed = parse_codex(rollout)
    assert (own.timed_out, own.exit_status) == (False, 124)
    assert killed.timed_out and killed.timeout_s == 10 and killed.exit_status is None
