"""Issue 6: importing Claude Code / opencode transcripts into a synthesised cassette and a generated test."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_tools.cli_import import import_app
from agent_tools.importers import ShellCall, import_calls, infer_timeline, parse_claude_code, parse_opencode
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
