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


def test_a_secret_a_command_shows_is_hidden_where_it_appears_again(tmp_path: Path, real_sshd: RealSshd) -> None:
    """``smbclient -U user%VALUE`` shows VALUE as a secret; the command's output and a transcript's tool result
    repeat VALUE with nothing around it that says so: it is hidden there too (the result, pages, the cassette,
    the import), while plain words a command gave a secret's place (``PASSWORD=secret``) stay visible."""
    from .test_secrets_everywhere import claude_transcript

    raw = {"smb": "sm2" + _alnum(14), "mysql": "my3" + _alnum(12)}
    command = (f"echo smbclient -U user%{raw['smb']} //h/s; echo mysql -p{raw['mysql']} db; DB_PASSWORD=secret true; "
               f"echo 'got {raw['smb']}'; echo 'and {raw['mysql']}, no secret here'")
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
        out = await tk.dispatch("run_command", {"host": real_sshd.alias, "command": command})
        results.append(out)
        results.append(await tk.dispatch("job_output", {"job_id": out["job_id"], "offset": 3}))
        return str(out["job_id"])

    job_id = session.run(scenario)
    try:
        text = results[0]["stdout"]["text"]
        assert "got [REDACTED]\nand [REDACTED], no secret here" in text, text
        assert "DB_PASSWORD=[REDACTED] true" in results[0]["command"], results[0]["command"]
        transcript = tmp_path / "session.jsonl"
        claude_transcript(transcript, command, text.replace("[REDACTED]", raw["smb"]))
        res = cli(tmp_path, "state-import", "import", "claude-code", str(transcript), "--out-dir",
                  str(tmp_path / "imported"), log="import")
        assert res.returncode == 0, res.stdout + res.stderr
        transcript.unlink()  # the user's own file
        (tmp_path / "results.json").write_text(json.dumps(results))
        assert list((tmp_path / "imported").rglob("*.jsonl"))
        assert not leaks(raw, tmp_path), leaks(raw, tmp_path)
    finally:
        subprocess.run(real_sshd.ssh_argv(f"rm -rf .local/state/agent-tools/jobs/{job_id}"), timeout=30, check=False)


MESSAGES = ["ERROR 1045 (28000): Access denied for user root@localhost (using password: YES)",
            "passwd: Authentication token manipulation error", "token: expired, run gh auth login",
            "secret: not set", "api_key=", "Password: incorrect"]


def test_messages_with_secret_words_reach_an_mcp_client_as_they_are(tmp_path: Path, real_sshd: RealSshd) -> None:
    """qa14: ``secret: not set`` came back as ``secret: [REDACTED] set`` and the echoed ``command`` lost its
    quotes. Through the real MCP server and client on the real sshd, the command and its output are unchanged,
    while a real secret next to them is still hidden."""
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    hidden = "pw9" + _alnum(14)
    command = "printf '%s\\n' " + " ".join(f'"{m}"' for m in MESSAGES) + f"; echo --password {hidden}"

    async def call() -> dict[str, Any]:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "agent_tools.cli", "mcp", "-F", str(real_sshd.config_path)],
            env={**os.environ, "AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)})
        with (tmp_path / "server.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (r, w), ClientSession(r, w) as session:
                with anyio.fail_after(60):
                    await session.initialize()
                    res = await session.call_tool("run_command", {"host": real_sshd.alias, "command": command})
        assert res.structured_content is not None
        return res.structured_content

    out = anyio.run(call)
    assert out["command"] == command.replace(hidden, "[REDACTED]"), out["command"]
    assert out["stdout"]["text"] == "\n".join(MESSAGES) + "\n--password [REDACTED]\n", out["stdout"]
    assert not leaks({"pw": hidden}, tmp_path)
    subprocess.run(real_sshd.ssh_argv(f"rm -rf .local/state/agent-tools/jobs/{out['job_id']}"), timeout=30,
                   check=False)
