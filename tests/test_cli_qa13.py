"""qa13 round 3, the minor findings: ``agent-tools output --limit`` says where the rest of a cut page is, and
``agent-tools import`` writes a test file that compiles whatever the transcript's commands and file name hold.
Real processes: the ``agent-tools`` CLI on this machine; the generated file is compiled and run by pytest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import agent_tools

REPO = Path(agent_tools.__file__).resolve().parent.parent


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO),
           "XDG_STATE_HOME": str(tmp_path / "xdg")}
    return subprocess.run([sys.executable, "-m", "agent_tools.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120, check=False, stdin=subprocess.DEVNULL, cwd=str(tmp_path))


def test_a_cut_page_of_output_says_where_the_rest_is(tmp_path: Path) -> None:
    ran = json.loads(cli(tmp_path, "run", "local", "--json", "--", "seq 1 200; seq 1 50 >&2").stdout)
    job = ran["job_id"]
    page = cli(tmp_path, "output", job, "--offset", "0", "--limit", "200")
    assert page.returncode == 0 and len(page.stdout.encode()) == 200, page
    assert f"bytes 0-200 of 692 shown; the rest: agent-tools output {job} --offset 200" in page.stderr, page.stderr
    last = cli(tmp_path, "output", job, "--offset", "600", "--limit", "200")
    assert last.stdout.endswith("200\n") and "the rest" not in last.stderr, last
    err = cli(tmp_path, "output", job, "--stream", "stderr", "--limit", "10")
    assert "--offset 10 --stream stderr" in err.stderr, err.stderr
    whole = cli(tmp_path, "output", job)
    assert whole.stdout.startswith("1\n2\n") and "the rest" not in whole.stderr


def test_an_imported_transcript_compiles_whatever_its_commands_and_name_hold(tmp_path: Path) -> None:
    rows = []
    commands = ["echo a\u0000b", "printf '\u001b[2J\u001b]0;t\u0007'; echo ok", "echo \udcff done"]
    for n, command in enumerate(commands):
        rows.append({"type": "assistant", "timestamp": f"2025-11-03T16:05:0{2 * n}.000Z", "message": {"content": [
            {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"command": command}}]}})
        rows.append({"type": "user", "timestamp": f"2025-11-03T16:05:0{2 * n + 1}.000Z", "message": {"content": [
            {"type": "tool_result", "tool_use_id": f"t{n}", "content": "ok", "is_error": False}]}})
    for name in ('s"""+__import__("os")+"""x.jsonl', "a\\N{b}.jsonl", "plain.jsonl"):
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out = tmp_path / f"out-{len(name)}"
        res = cli(tmp_path, "import", "claude-code", str(path), "--out-dir", str(out))
        assert res.returncode == 0, res
        (test_file,) = out.glob("test_*.py")
        source = test_file.read_bytes()
        assert b"\x00" not in source and b"\x1b" not in source, source[:400]
        compile(source, str(test_file), "exec")  # no SyntaxError: NUL, an early end of the docstring, \N{...}
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                              str(test_file)], capture_output=True, text=True, cwd=str(out), timeout=300,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
