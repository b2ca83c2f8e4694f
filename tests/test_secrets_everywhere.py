"""Secrets are redacted on every path that stores or shows text (issue 13).

One corpus of secret shapes is pushed, in commands and in output, through: a launch on this machine and on the
real sshd (detached, then job_status and job_output pages), errors whose message quotes the bad input, a
recorded cassette, rediscovery of the jobs from another state directory (``agent-tools jobs HOST``, text and
JSON) and ``status``/``output`` from there, ``policy explain`` (text and JSON), an approval request, the MCP
stdio server (results and progress notifications), a transcript import, and the structlog events of every
process (``-vv``). Then every file the run wrote under the test's directory is searched for the raw values:
they may only be in the jobs' own directories on the hosts, where they are checked to be (so the corpus did
reach the hosts). The jobs' directories on the sshd host are removed at the end, and nothing of the corpus is
left in that user's state directory.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

import agent_tools
from agent_tools.hosts import LocalHost
from agent_tools.hosts.registry import HostRegistry
from agent_tools.recording import CassetteSession

from .conftest import ssh_host_for
from .sshd import RealSshd

REPO = Path(agent_tools.__file__).resolve().parent.parent
POLICY = REPO / "policies" / "default.yaml"


def _alnum(n: int) -> str:
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789"
    return "".join(secrets.choice(alphabet) for _ in range(n))


def corpus() -> tuple[dict[str, str], list[str]]:
    """Fresh random secrets of each shape (name -> raw value) and the lines that carry them."""
    raw = {
        "hf": "hf_" + _alnum(34),
        "github": "ghp_" + _alnum(36),
        "aws": "AKIA" + "".join(secrets.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16)),
        "password-flag": "pw" + _alnum(14),
        "url-password": "up" + _alnum(14),
        "bearer": "bt" + _alnum(30),
        "openai": "sk-proj-" + _alnum(40),
        "gitlab": "glpat-" + _alnum(20),
        "private-key": "b3BlbnNzaC1rZXktdjE" + _alnum(40),
        "mysql": "my" + _alnum(14),
        "quoted-assignment": "qa" + _alnum(14),
        "jwt": "eyJ" + _alnum(20) + ".eyJ" + _alnum(24) + "." + _alnum(30),
        "api-key-header": "ak" + _alnum(20),
        "curl-user": "cu" + _alnum(14),
        "npm": "npm_" + _alnum(36),
        "json-password": "jp" + _alnum(14),
        "yaml-token": "yt" + _alnum(14),
        "cookie": "ck" + _alnum(14),
        "netrc": "nr" + _alnum(14),
        "netrc-default": "nd" + _alnum(14),
        "userinfo": "ui" + _alnum(14),
    }
    lines = [
        f"HF_TOKEN={raw['hf']}",
        f"token {raw['github']} for the push",
        f"aws key {raw['aws']}",
        f"tool --password {raw['password-flag']} --verbose",
        f"git clone https://bob:{raw['url-password']}@git.example.invalid/x.git",
        f"Authorization: Bearer {raw['bearer']}",
        f"key {raw['openai']}",
        f"gitlab {raw['gitlab']}",
        "-----BEGIN OPENSSH PRIVATE KEY-----", raw["private-key"], "-----END OPENSSH PRIVATE KEY-----",
        f"mysql -u root -p{raw['mysql']} db",
        f"DB_PASSWORD='{raw['quoted-assignment']}'",
        f"jwt {raw['jwt']}",
        f"X-Api-Key: {raw['api-key-header']}",
        f"curl -u alice:{raw['curl-user']} http://127.0.0.1:9/",
        f"npm {raw['npm']}",
        json.dumps({"user": "bob", "password": raw["json-password"]}),
        f"  token: {raw['yaml-token']}",
        f"Cookie: sid={raw['cookie']}; theme=dark",
        f"machine git.example.invalid login bob password {raw['netrc']}",
        f"default login anonymous password {raw['netrc-default']}",
        f"scp backup.tar bob:{raw['userinfo']}@backup.example.invalid:/srv",
    ]
    return raw, lines


def heredoc(lines: list[str], *, sleep_s: float = 0.0) -> str:
    """A command that holds every secret and prints every secret."""
    body = "\n".join(lines)
    return (f"sleep {sleep_s}; " if sleep_s else "") + f"cat <<'EOF'\n{body}\nEOF"


def leaks(raw: dict[str, str], root: Path, *, skip: tuple[Path, ...] = ()) -> list[str]:
    """``file: secret name`` for every file under ``root`` (but not under ``skip``) holding a raw value."""
    found = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or any(path.is_relative_to(s) for s in skip):
            continue
        data = path.read_bytes()
        found += [f"{path.relative_to(root)}: {name}" for name, value in raw.items() if value.encode() in data]
    return found


def cli(tmp_path: Path, state: str, *args: str, env: dict[str, str], log: str) -> subprocess.CompletedProcess[str]:
    """``agent-tools -vv ARGS`` with its own state directory; stdout and stderr (the logs) kept in files."""
    res = subprocess.run([sys.executable, "-m", "agent_tools.cli", "-vv", *args], capture_output=True, text=True,
                         env={**env, "AGENT_TOOLS_STATE_DIR": str(tmp_path / state)}, timeout=120, check=False,
                         stdin=subprocess.DEVNULL)
    (tmp_path / "logs").mkdir(exist_ok=True)
    (tmp_path / "logs" / f"{log}.stdout").write_text(res.stdout)
    (tmp_path / "logs" / f"{log}.stderr").write_text(res.stderr)
    return res


async def mcp_session_run(tmp_path: Path, env: dict[str, str], command: str, bad_tool: str) -> list[Any]:
    """Through the MCP stdio server: a detached run, a long-poll with progress, an unknown tool named after a
    secret. Returns every result and progress message the client received."""
    seen: list[Any] = []
    errlog = (tmp_path / "logs" / "mcp-server.stderr").open("w")
    params = StdioServerParameters(command=sys.executable, args=["-m", "agent_tools.cli", "-vv", "mcp"],
                                   env={**env, "AGENT_TOOLS_STATE_DIR": str(tmp_path / "state-mcp")})
    try:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(60):
                await session.initialize()
                out = await session.call_tool("run_command", {"host": "local", "command": command, "budget_s": 0.3})
                seen.append(out.model_dump(mode="json"))
                job_id = json.loads(out.content[0].text)["job_id"]  # type: ignore[union-attr]

                async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                    seen.append(message)

                st = await session.call_tool("job_status", {"job_id": job_id, "wait_s": 10},
                                             progress_callback=on_progress)
                seen.append(st.model_dump(mode="json"))
                seen.append((await session.call_tool(bad_tool, {}, progress_callback=on_progress)).model_dump(
                    mode="json"))
    finally:
        errlog.close()
    return seen


def claude_transcript(path: Path, command: str, output: str) -> None:
    base = {"isSidechain": False, "userType": "external", "cwd": "/srv", "sessionId": "s-1", "version": "1.0.51"}
    lines = [
        {**base, "parentUuid": None, "type": "user", "uuid": "u1", "timestamp": "2025-06-03T14:02:11.000Z",
         "message": {"role": "user", "content": "print the config"}},
        {**base, "parentUuid": "u1", "type": "assistant", "uuid": "a1", "timestamp": "2025-06-03T14:02:12.000Z",
         "message": {"id": "m1", "type": "message", "role": "assistant", "model": "x", "content": [
             {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": command}}]}},
        {**base, "parentUuid": "a1", "type": "user", "uuid": "u2", "timestamp": "2025-06-03T14:02:13.000Z",
         "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                  "content": output}]},
         "toolUseResult": {"stdout": output, "stderr": "", "interrupted": False, "isImage": False}},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_no_raw_secret_outside_the_jobs_own_directories(tmp_path: Path, real_sshd: RealSshd,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    raw, lines = corpus()
    xdg = tmp_path / "xdg"  # this machine's job directories: the raw bytes may live there, nowhere else
    monkeypatch.setenv("XDG_STATE_HOME", str(xdg))
    env = {**os.environ, "XDG_STATE_HOME": str(xdg), "PYTHONPATH": str(REPO), "HOME": str(tmp_path / "home")}
    ssh_config = str(real_sshd.config_path)
    command = heredoc(lines, sleep_s=0.6)
    results: list[Any] = []

    # 1. launch (detached), job_status and job_output pages, errors quoting the input; recorded as a cassette
    @asynccontextmanager
    async def hosts() -> AsyncIterator[HostRegistry]:
        sshd_host = ssh_host_for(real_sshd)
        try:
            yield HostRegistry({"local": LocalHost(), real_sshd.alias: sshd_host})
        finally:
            await sshd_host.aclose()

    session = CassetteSession(tmp_path / "cassettes" / "secrets.jsonl", "all", hosts=hosts,
                              state_dir=tmp_path / "state-launch")

    async def scenario() -> list[str]:
        tk = session.toolkit
        ids = []
        for host in ("local", real_sshd.alias):
            out = await tk.dispatch("run_command", {"host": host, "command": command, "budget_s": 0.2})
            assert out["outcome"] == "detached", out
            results.append(out)
            st = await tk.dispatch("job_status", {"job_id": out["job_id"], "wait_s": 15})
            assert st["state"] == "exited" and "[REDACTED]" in st["new_stdout"]["text"], st
            results.append(st)
            for offset in (0, 40):
                results.append(await tk.dispatch("job_output", {"job_id": out["job_id"], "offset": offset}))
            ids.append(out["job_id"])
        results.append(await tk.dispatch("run_command", {"host": "local", "command": "true",
                                                         "env": {f"BAD NAME {raw['github']}": "1"}}))
        results.append(await tk.dispatch("job_status", {"job_id": raw["hf"]}))
        results.append(await tk.dispatch(f"tool {raw['openai']}", {}))
        assert [r["outcome"] for r in results[-3:]] == ["error"] * 3, results[-3:]
        return ids

    job_ids = session.run(scenario)
    assert (tmp_path / "cassettes" / "secrets.jsonl").exists()

    try:
        # 2. rediscovery from another state directory, and status/output of the rediscovered jobs
        for host, extra in (("local", []), (real_sshd.alias, ["-F", ssh_config])):
            res = cli(tmp_path, "state-rediscover", "jobs", host, *extra, env=env, log=f"jobs-{host}")
            assert res.returncode == 0 and "rediscovered" in res.stdout, res.stdout + res.stderr
            res = cli(tmp_path, "state-rediscover", "jobs", host, "--json", "--limit", "100", *extra, env=env,
                      log=f"jobs-json-{host}")  # (every job: the listing is paged, 20 a page by default)
            listed = json.loads(res.stdout)["jobs"]
            assert {j["job_id"] for j in listed} >= set(job_ids) & {j["job_id"] for j in listed}
            assert any("HF_TOKEN=[REDACTED]" in j["command"] for j in listed), listed
        for job_id in job_ids:
            res = cli(tmp_path, "state-rediscover", "status", job_id, "-F", ssh_config, env=env, log=f"status-{job_id}")
            assert res.returncode == 0 and "[REDACTED]" in res.stdout, res.stdout + res.stderr
            res = cli(tmp_path, "state-rediscover", "output", job_id, "-F", ssh_config, env=env, log=f"output-{job_id}")
            assert res.returncode == 0 and "[REDACTED]" in res.stdout, res.stdout + res.stderr

        # 3. policy explain (text and JSON) and an approval request (needs_approval is stored)
        asking = f"touch /tmp/x; echo {shlex.quote(lines[0])} {shlex.quote(lines[1])}; " + heredoc(lines)
        for fmt in ([], ["--json"]):
            res = cli(tmp_path, "state-policy", "policy", "explain", "local", "--policy", str(POLICY), *fmt, "--",
                      asking, env=env, log=f"explain{''.join(fmt)}")
            assert res.returncode == 0 and "[REDACTED]" in res.stdout, res.stdout + res.stderr
        res = cli(tmp_path, "state-policy", "run", "local", "--policy", str(POLICY), "--json", "--", asking, env=env,
                  log="run-ask")
        assert json.loads(res.stdout)["outcome"] == "needs_approval", res.stdout
        assert (tmp_path / "state-policy" / "approvals.sqlite3").exists()

        # 4. the MCP server: results and progress notifications
        seen = anyio.run(mcp_session_run, tmp_path, env, heredoc(lines, sleep_s=2.5), f"tool-{raw['jwt']}")
        assert any(isinstance(s, str) and "job_status" in s for s in seen), seen  # progress did arrive
        (tmp_path / "logs" / "mcp-client-seen.json").write_text(json.dumps(seen))

        # 5. a transcript import
        transcript = tmp_path / "session.jsonl"
        claude_transcript(transcript, heredoc(lines), "\n".join(lines))
        res = cli(tmp_path, "state-import", "import", "claude-code", str(transcript), "--out-dir",
                  str(tmp_path / "imported"), env=env, log="import")
        assert res.returncode == 0, res.stdout + res.stderr
        assert list((tmp_path / "imported").rglob("*.jsonl")) and list((tmp_path / "imported").glob("test_*.py"))
        transcript.unlink()  # the input itself is the user's file, not something agent-tools wrote

        # every dispatch result seen in-process
        (tmp_path / "logs" / "results.json").write_text(json.dumps(results))
        assert "[REDACTED]" in (tmp_path / "logs" / "results.json").read_text()

        # the raw values are in the jobs' own directories on the hosts (the corpus reached them) ...
        local_jobs = xdg / "agent-tools" / "jobs"
        assert len({n for f in leaks(raw, local_jobs) for n in [f.rsplit(": ", 1)[1]]}) == len(raw), \
            "the corpus never reached this machine's job directories"
        remote = subprocess.run(real_sshd.ssh_argv(f"cat .local/state/agent-tools/jobs/{job_ids[1]}/stdout"),
                                capture_output=True, text=True, timeout=30, check=False)
        assert raw["hf"] in remote.stdout, remote.stderr
        # ... and in no other file this run wrote: journals, approvals, cassettes, logs, CLI and MCP output,
        # imports (SQLite WAL files included)
        found = leaks(raw, tmp_path, skip=(local_jobs,))
        assert not found, "raw secrets outside the jobs' own directories:\n" + "\n".join(found)
    finally:
        ids = " ".join(f".local/state/agent-tools/jobs/{j}" for j in job_ids)
        subprocess.run(real_sshd.ssh_argv(f"rm -rf {ids}"), capture_output=True, timeout=30, check=False)
    left = subprocess.run(real_sshd.ssh_argv("grep -rl -F -e " + " -e ".join(raw.values())
                                             + " .local/state/agent-tools/ || true"),
                          capture_output=True, text=True, timeout=30, check=False)
    assert left.stdout.strip() == "", left.stdout
