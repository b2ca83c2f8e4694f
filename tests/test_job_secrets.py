"""Issue 17, item 3: a job waiting on a password says ``needs_input`` with ``secret: true``; a person types the secret
with ``agent-tools input JOB --secret`` (no echo, from the terminal, straight to the job's pipe) and it appears in no
result, log, journal or file the run wrote. Real OpenSSH sshd on loopback; the CLI runs on a real pseudo-terminal."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

import agent_tools
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit

from .sshd import TEST_USER, RealSshd
from .terminal import files_holding, typed_on_a_terminal

REPO = Path(agent_tools.__file__).resolve().parent.parent
pytestmark = pytest.mark.sshd
SECRET = "Tr0ub4dor-&-3-horse-" + os.urandom(4).hex()


@pytest.mark.parametrize("stdin,command", [
    ("tty", 'read -s -p "Secret: " s; echo; printf %s "$s" | sha256sum'),
    ("pipe", "python3 -c 'import getpass, hashlib; print(hashlib.sha256(getpass.getpass(\"Password: \").encode())"
             ".hexdigest())'"),
])
async def test_a_secret_prompt_is_needs_input_and_the_secret_is_typed_out_of_band(
        real_sshd: RealSshd, state_dir: Path, tmp_path: Path, stdin: str, command: str) -> None:
    tk = Toolkit(HostRegistry(ssh_config=[str(real_sshd.config_path)]), journal=Journal(state_dir / "journal.sqlite3"))
    results: list[dict[str, Any]] = []
    try:
        await _scenario(tk, real_sshd, state_dir, command, stdin, results)
    finally:  # a failure midway leaves no job waiting on the host
        for rec in tk.journal.list():
            if rec.state in ("running", "unconfirmed"):
                await tk.dispatch("job_cancel", {"job_id": rec.job_id, "grace_s": 1})
        await tk.aclose()


async def _scenario(tk: Toolkit, real_sshd: RealSshd, state_dir: Path, command: str, stdin: str,
                    results: list[dict[str, Any]]) -> None:
    tmp_path = state_dir.parent
    with capture_logs() as logs:
        d = await tk.dispatch("run_command", {"host": real_sshd.alias, "command": command, "stdin": stdin,
                                              "budget_s": 2})
        results.append(d)
        assert d["outcome"] == "needs_input" and d["secret"] is True, d
        assert "--secret" in d["next"] and d["prompt"].endswith(":"), d
        job = d["job_id"]
        st = await tk.dispatch("job_status", {"job_id": job})  # no new output: still known to wait on it
        results.append(st)
        assert st["state"] == "running" and st["secret"] is True and st["prompt"] == d["prompt"], st
        env = {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(state_dir)}  # -vv: debug logs
        code, out, err, shown = await anyio.to_thread.run_sync(lambda: typed_on_a_terminal(
            [sys.executable, "-m", "agent_tools.cli", "-vv", "input", "-F", str(real_sshd.config_path), job,
             "--secret", "--json"], env, SECRET.encode() + b"\n"))
        assert code == 0, (out, err)
        typed = json.loads(out)
        results.append(typed)
        assert typed["input"] == "written", typed
        done = await tk.dispatch("job_status", {"job_id": job, "wait_s": 10})
        results.append(done)
        assert done["state"] == "exited" and done["exit_status"] == 0, done
        page = await tk.dispatch("job_output", {"job_id": job})
        results.append(page)
        assert hashlib.sha256(SECRET.encode()).hexdigest() in page["text"], page  # the job got it, whole
    secret = SECRET.encode()
    assert secret not in out + err + shown  # not echoed, not printed by the CLI
    assert SECRET not in json.dumps(results) and SECRET not in repr(logs)
    assert files_holding(tmp_path, secret) == []  # the journal and anything else the run wrote
    home = Path(pwd.getpwnam(TEST_USER).pw_dir)
    job_dir = home / ".local/state/agent-tools/jobs" / job
    assert job_dir.is_dir()
    assert files_holding(job_dir, secret) == []  # the host's queue was emptied once written
