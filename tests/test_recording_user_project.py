"""Issue 15, item 4: record and replay in a user's own project, run as a user would — the README's example files
written into a fresh directory and ``python -m pytest`` run there as a subprocess (real LocalHost, real plugin
loaded through its ``pytest11`` entry point)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import agent_tools

REPO = Path(agent_tools.__file__).resolve().parent.parent


def _readme_files() -> dict[str, str]:
    """The README's code blocks that start with ``# tests/NAME.py``: path -> source."""
    text = (REPO / "README.md").read_text()
    return {m.group(1): m.group(0).split("\n", 1)[1].rsplit("\n", 1)[0] + "\n"
            for m in re.finditer(r"(?<=```python\n)# (tests/\w+\.py)\n.*?(?=```)", text, re.DOTALL)}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    files = _readme_files()
    assert set(files) == {"tests/conftest.py", "tests/test_greeting.py"}, files
    root = tmp_path / "project"
    for name, source in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(source)
    return root


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(project / ".state"),
           "XDG_STATE_HOME": str(project / ".xdg")}
    # unrelated plugins of this machine stay out (CPython 3.11.7's ast.parse of hypothesis' plugin at the
    # terminal summary fails now and then with "AST constructor recursion depth mismatch")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                           *args], cwd=project, env=env, capture_output=True, text=True, timeout=120)


def test_the_readme_example_records_then_replays_in_a_users_project(project: Path) -> None:
    missing = _pytest(project, "-rN")  # no short summary: its line's length follows the terminal's width
    assert missing.returncode == 1
    assert missing.stdout.count("record it first") == 1, missing.stdout  # the hint, once
    assert "During handling of the above exception" not in missing.stdout

    recorded = _pytest(project, "--agent-tools-record=once")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    cassette = project / "tests" / "cassettes" / "greeting.jsonl"
    lines = [json.loads(ln) for ln in cassette.read_text().splitlines()]
    assert lines[0]["typed_calls"] is True
    tools = [(e["name"], e["arguments"]) for e in lines if e.get("ev") == "tool"]
    # the typed call is recorded as a tool call the same way as dispatch
    assert tools == [("run_command", {"host": "local", "command": "echo hello"}), ("list_jobs", {})]

    replayed = _pytest(project)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


def test_a_replay_mismatch_raises_the_replay_error_with_its_diff_at_the_call(project: Path) -> None:
    assert _pytest(project, "--agent-tools-record=once").returncode == 0
    test = project / "tests" / "test_greeting.py"
    test.write_text(test.read_text().replace('command="echo hello"', 'command="echo hullo"'))
    res = _pytest(project)
    assert res.returncode == 1
    out = res.stdout
    assert "agent_tools.errors.ReplayError: cassette 'greeting': unmatched exec request #1 on local" in out, out
    assert "-hello'" in out and "+hullo'" in out  # the word diff of the recorded and the new request
    assert "AssertionError" not in out and "ErrorOutcome(" not in out  # not the test's own assert on an error
    assert "exec exec" not in out and "on local: command exec /bin/sh" in out
    assert re.search(r"tests/test_greeting\.py:\d+: in scenario", out)  # raised at the call in the scenario


def test_a_typed_calls_result_is_checked_against_the_recording(project: Path) -> None:
    assert _pytest(project, "--agent-tools-record=once").returncode == 0
    cassette = project / "tests" / "cassettes" / "greeting.jsonl"
    events = [json.loads(ln) for ln in cassette.read_text().splitlines()]
    for e in events:  # the recorded run_command result says something else than the host's recorded bytes
        if e.get("ev") == "tool_result" and e["name"] == "run_command":
            e["result"]["stdout"]["text"] = "HELLO\n"
    cassette.write_text("".join(json.dumps(e) + "\n" for e in events))
    res = _pytest(project)
    assert res.returncode == 1
    assert "tool call #1 run_command: the result differs from the recording" in res.stdout, res.stdout
    # (the recorded result is the compact view the model reads: the stream's text is its only key, no comma)
    assert '-  "text": "HELLO\\n"\n' in res.stdout and '+  "text": "hello\\n"\n' in res.stdout


def test_recording_without_an_agent_tools_hosts_fixture_says_what_to_add(project: Path) -> None:
    (project / "tests" / "conftest.py").unlink()
    res = _pytest(project, "--agent-tools-record=once")
    assert res.returncode == 1
    assert "recording needs an agent_tools_hosts fixture" in res.stdout, res.stdout


def _scenario(project: Path, name: str, body: str) -> Path:
    test = project / "tests" / f"test_{name}.py"
    test.write_text(f"""import pytest


@pytest.mark.agent_tools_cassette("{name}")
def test_{name}(agent_tools_cassette, agent_tools_toolkit):
    tk = agent_tools_toolkit

    async def scenario():
{body}
    agent_tools_cassette.run(scenario)
""")
    return test


def test_typed_calls_and_dispatch_replay_each_other(project: Path) -> None:
    """qa15 finding 13: a call recorded as ``tk.run_command(...)`` replays as ``dispatch("run_command", ...)`` and
    the other way round (both are recorded as the JSON the model reads)."""
    typed = ('        out = await tk.run_command(host="local", command="echo hello")\n'
             '        assert out.outcome == "finished" and out.stdout.text == "hello\\n"\n')
    dispatched = ('        out = await tk.dispatch("run_command", {"host": "local", "command": "echo hello"})\n'
                  '        assert out["outcome"] == "finished" and out["stdout"]["text"] == "hello\\n"\n')
    for first, then in ((typed, dispatched), (dispatched, typed)):
        test = _scenario(project, "both", first)
        (project / "tests" / "cassettes" / "both.jsonl").unlink(missing_ok=True)
        assert _pytest(project, str(test), "--agent-tools-record=once").returncode == 0
        _scenario(project, "both", then)
        res = _pytest(project, str(test))
        assert res.returncode == 0, res.stdout  # was: ReplayError ... the result differs ("leftovers": [], ...)


def test_secrets_in_the_output_replay_as_they_were_recorded(project: Path) -> None:
    """qa15 finding 12: the stream is stored with its secrets masked length-preserving; the replayed result
    shows them as the recording did (`[REDACTED]`), long or short, typed or dispatched."""
    cmd = "echo password=hunter22; echo AKIAIOSFODNN7EXAMPLE; echo password=hunter23 is short"
    test = _scenario(project, "secret", (
        f'        out = await tk.run_command(host="local", command="{cmd}")\n'
        '        want = "password=[REDACTED]\\n[REDACTED]\\npassword=[REDACTED] is short\\n"\n'
        '        assert out.stdout.text == want, out.stdout.text\n'
        f'        d = await tk.dispatch("run_command", {{"host": "local", "command": "{cmd}"}})\n'
        '        assert d["stdout"]["text"] == want, d\n'))
    assert _pytest(project, str(test), "--agent-tools-record=once").returncode == 0
    stored = (project / "tests" / "cassettes" / "secret.jsonl").read_text()
    assert "hunter22" not in stored and "AKIAIOSFODNN7EXAMPLE" not in stored
    # the stream: both secrets (and the newline between them) masked as one run, its length kept
    assert "password=[REDACTED]*******************\\npassword=******** is short" in stored
    res = _pytest(project, str(test))
    assert res.returncode == 0, res.stdout  # was: AssertionError ... [REDACTED]**********; or a ReplayError
