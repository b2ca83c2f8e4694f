"""Secrets the toolkit knows are hidden on every path (issue 13, second round), on the real sshd: the values of
secret-named variables in a call's env (echoed by the command), a secret-shaped working directory and idempotency
key, and a policy file's own ``redact:`` patterns, through results, pages, the journal, the approvals store, a
recorded cassette, policy explain, ``-vv`` logs and a rediscovery from another state directory, which shows the
command as it was asked for (not the line the launcher wrote for the env)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import agent_tools
from agent_tools.hosts.registry import HostRegistry
from agent_tools.recording import CassetteSession

from .conftest import ssh_host_for
from .sshd import RealSshd

REPO = Path(agent_tools.__file__).resolve().parent.parent


def _alnum(n: int) -> str:
    return "".join(secrets.choice("abcdefghijkmnopqrstuvwxyz23456789") for _ in range(n))


def leaks(values: dict[str, str], root: Path) -> list[str]:
    return [f"{p.relative_to(root)}: {name}" for p in sorted(root.rglob("*")) if p.is_file()
            for name, value in values.items() if value.encode() in p.read_bytes()]


def cli(tmp_path: Path, state: str, *args: str, log: str) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([sys.executable, "-m", "agent_tools.cli", "-vv", *args], capture_output=True, text=True,
                         env={**os.environ, "AGENT_TOOLS_STATE_DIR": str(tmp_path / state), "PYTHONPATH": str(REPO)},
                         timeout=120, check=False, stdin=subprocess.DEVNULL)
    (tmp_path / "logs").mkdir(exist_ok=True)
    (tmp_path / "logs" / f"{log}.out").write_text(res.stdout + "\n--stderr--\n" + res.stderr)
    return res


def test_env_values_cwd_and_idempotency_keys_never_leave_the_host(tmp_path: Path, real_sshd: RealSshd) -> None:
    raw = {"env": "ev" + _alnum(20), "env-shape": "ghp_" + _alnum(36), "cwd": "hf_" + _alnum(34),
           "key": "ghp_" + _alnum(36)}
    remote_cwd = f"/tmp/at13-{raw['cwd']}"
    subprocess.run(real_sshd.ssh_argv(f"mkdir -p {remote_cwd}"), check=True, timeout=30)
    results: list[Any] = []

    @asynccontextmanager
    async def hosts() -> AsyncIterator[HostRegistry]:
        host = ssh_host_for(real_sshd)
        try:
            yield HostRegistry({real_sshd.alias: host})
        finally:
            await host.aclose()

    session = CassetteSession(tmp_path / "cassette.jsonl", "all", hosts=hosts, state_dir=tmp_path / "state")

    async def scenario() -> str:
        tk = session.toolkit
        out = await tk.dispatch("run_command", {
            "host": real_sshd.alias, "command": 'echo "$QA_TOKEN $QA_PLAIN"; pwd; sleep 0.5; echo done >&2',
            "env": {"QA_TOKEN": raw["env"], "QA_PLAIN": raw["env-shape"]}, "cwd": remote_cwd,
            "idempotency_key": raw["key"], "budget_s": 0.2})
        results.append(out)
        results.append(await tk.dispatch("job_status", {"job_id": out["job_id"], "wait_s": 10}))
        results.append(await tk.dispatch("job_output", {"job_id": out["job_id"], "limit": 9}))
        return str(out["job_id"])

    job_id = session.run(scenario)
    assert results[1]["state"] == "exited", results[1]
    text = results[0].get("stdout", {}).get("text", "") + results[1].get("new_stdout", {}).get("text", "")
    assert text.startswith("[REDACTED] [REDACTED]\n") and "/tmp/at13-[REDACTED]" in text, text
    (tmp_path / "results.json").write_text(json.dumps(results))
    # another state directory rediscovers the job from the host: the command asked for, no env line, no value
    res = cli(tmp_path, "state-b", "jobs", real_sshd.alias, "--json", "-F", str(real_sshd.config_path), log="jobs")
    found = next(j for j in json.loads(res.stdout)["jobs"] if j["job_id"] == job_id)
    assert found["command"] == 'echo "$QA_TOKEN $QA_PLAIN"; pwd; sleep 0.5; echo done >&2', found
    try:
        assert not leaks(raw, tmp_path), leaks(raw, tmp_path)
        stored = subprocess.run(real_sshd.ssh_argv(f"cat .local/state/agent-tools/jobs/{job_id}/stdout"),
                                capture_output=True, text=True, timeout=30, check=True).stdout
        assert raw["env"] in stored  # the raw bytes are on the host, in the job's own directory
    finally:
        subprocess.run(real_sshd.ssh_argv(f"rm -rf {remote_cwd} .local/state/agent-tools/jobs/{job_id}"),
                       timeout=30, check=False)


def test_a_policy_files_redact_patterns_apply_on_every_path(tmp_path: Path, real_sshd: RealSshd) -> None:
    value = "corp-" + _alnum(12)
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nhosts: ['*']\ndefaults: {decision: ask}\nredact: ['corp-[a-z0-9]{12}']\n"
                      "rules:\n  - {id: echo, match: [echo], decision: allow}\nexamples:\n  must_allow: [echo hi]\n")
    base = ["-F", str(real_sshd.config_path), "--policy", str(policy)]
    ran = cli(tmp_path, "state", "run", real_sshd.alias, *base, "--json", "--", f"echo {value}", log="run")
    assert json.loads(ran.stdout)["stdout"]["text"] == "[REDACTED]\n", ran.stdout
    asked = cli(tmp_path, "state", "run", real_sshd.alias, *base, "--", f"touch /tmp/{value}", log="ask")
    assert "needs_approval" in asked.stdout and "/tmp/[REDACTED]" in asked.stdout, asked.stdout
    explained = cli(tmp_path, "state", "policy", "explain", real_sshd.alias, "--policy", str(policy), "--",
                    f"echo {value}", log="explain")
    assert "echo [REDACTED]" in explained.stdout, explained.stdout
    assert "[REDACTED]" in cli(tmp_path, "state", "jobs", log="jobs").stdout
    assert (tmp_path / "state" / "approvals.sqlite3").exists() and (tmp_path / "state" / "journal.sqlite3").exists()
    policy.unlink()  # the user's own file names the pattern, not the value
    assert not leaks({"value": value}, tmp_path), leaks({"value": value}, tmp_path)
