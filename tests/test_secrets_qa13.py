"""qa13 round 3: secrets stay hidden on every later read, from any process, and in shapes the tester found.

A job's env values and the values a certain rule finds in its command were hidden only in the process that launched
it: a restarted MCP server's ``job_output`` and a later ``agent-tools output`` showed them raw. Now every process
reads them back from the job's own ``command`` file on the host. Single-line ``.netrc`` entries and other shapes are
hidden, and an alias given as ``user:PASSWORD@host`` is not stored raw in the journal or the logs. Real parts: two
``agent-tools mcp`` processes driven by the official SDK client, the ``agent-tools`` CLI, commands run on this
machine; every file the run wrote is searched for the raw values."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp import Client, StdioServerParameters

import agent_tools
from agent_tools.redact import redact

REPO = Path(agent_tools.__file__).resolve().parent.parent


def _value(prefix: str) -> str:
    return prefix + "".join(secrets.choice("abcdefghijkmnopqrstuvwxyz23456789") for _ in range(16)) + "Q7"


def leaks(values: dict[str, str], root: Path) -> list[str]:
    return [f"{p.relative_to(root)}: {name}" for p in sorted(root.rglob("*")) if p.is_file()
            for name, value in values.items() if value.encode() in p.read_bytes()]


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    data = json.loads(result.content[0].text)
    assert isinstance(data, dict)
    return data


def test_secrets_hidden_at_launch_stay_hidden_for_every_later_process(tmp_path: Path) -> None:
    state, logs = tmp_path / "state", tmp_path / "logs"
    logs.mkdir()  # what the processes returned, searched with every other file
    raw = {"env": _value("envpw"), "mysql": _value("mypw"), "aws": _value("awspw")}
    command = (f"mysql -p{raw['mysql']} -e 1 2>/dev/null; echo first $DB_PASSWORD; sleep 1.5; "
               f"echo second $DB_PASSWORD bare {raw['mysql']}; "
               f"AWS_SECRET_ACCESS_KEY={raw['aws']} sh -c 'echo $AWS_SECRET_ACCESS_KEY >&2'")
    xdg = tmp_path / "host-state"  # this machine is the host: its job directories live here (raw bytes stay)
    env = {"AGENT_TOOLS_STATE_DIR": str(state), "PYTHONPATH": str(REPO), "PATH": os.environ["PATH"],
           "HOME": os.environ.get("HOME", "/root"), "XDG_STATE_HOME": str(xdg)}

    server = StdioServerParameters(command=sys.executable, args=["-m", "agent_tools.cli", "-vv", "mcp",
                                                                 "--state-dir", str(state)], env=env)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with Client(server, mode="legacy") as first:
            with anyio.fail_after(60):
                launched = structured(await first.call_tool("run_command", {
                    "host": "local", "command": command, "budget_s": 0.8, "env": {"DB_PASSWORD": raw["env"]}}))
        await anyio.sleep(2.5)  # the job ends meanwhile; the launching server is gone
        async with Client(server, mode="legacy") as second:  # a new server process
            with anyio.fail_after(60):
                out = structured(await second.call_tool("job_output", {"job_id": launched["job_id"]}))
                err = structured(await second.call_tool("job_output", {"job_id": launched["job_id"],
                                                                       "stream": "stderr"}))
                status = structured(await second.call_tool("job_status", {"job_id": launched["job_id"]}))
        return launched, out, err, status

    launched, out, err, status = anyio.run(scenario)
    assert launched["outcome"] == "detached", launched
    assert out["text"] == "first [REDACTED]\nsecond [REDACTED] bare [REDACTED]\n", out
    assert err["text"] == "[REDACTED]\n", err
    cli = subprocess.run([sys.executable, "-m", "agent_tools.cli", "output", launched["job_id"]], capture_output=True,
                         text=True, env=env, timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert cli.stdout == "first [REDACTED]\nsecond [REDACTED] bare [REDACTED]\n", cli
    cli_err = subprocess.run([sys.executable, "-m", "agent_tools.cli", "output", launched["job_id"], "--stream",
                              "stderr"], capture_output=True, text=True, env=env, timeout=60,
                             check=False, stdin=subprocess.DEVNULL)
    assert cli_err.stdout == "[REDACTED]\n", cli_err
    (logs / "results.json").write_text(json.dumps([launched, out, err, status]) + cli.stdout + cli_err.stdout)
    job_dir = xdg / "agent-tools" / "jobs" / launched["job_id"]
    assert raw["env"] in (job_dir / "stdout").read_text()  # the raw bytes are on the host, in the job's directory
    for path in xdg.rglob("*"):
        if path.is_file() and job_dir not in path.parents:
            path.unlink()
    for path in job_dir.iterdir():
        path.unlink()
    assert not leaks(raw, tmp_path), leaks(raw, tmp_path)


def test_netrc_entries_and_other_shapes_are_hidden() -> None:
    value = _value("netrc")
    for text in (f"machine h login u password {value}", f"default login anonymous password {value}",
                 f"machine h\nlogin u\npassword {value}\n", f"machine h password {value} login u",
                 f"Bearer {value}", f"SECRET_KEY_BASE={value}", f"password => '{value}'",
                 f"echo 'u:{value}' | chpasswd", f"useradd -p {value} bob", f"lftp -u bob,{value} host",
                 f"az login -u bob -p {value}", f"ssh u:{value}@host", f"scp x bob:{value}@h:/tmp",
                 f"PuTTY-User-Key-File-3: ssh-ed25519\nPrivate-Lines: 1\n{value}\nPrivate-MAC: 00"):
        shown = redact(text)
        assert value not in shown and "[REDACTED]" in shown, (text, shown)
    for text in ("mailto:foo@bar.com", "git@github.com:org/repo.git", "ssh root@host", "machine learning password"
                 " manager", "at 12:30@home", "Bearer token", "PASSWORD=>/etc/x"):
        assert redact(text) == text, text


def test_an_alias_with_a_password_is_not_stored_or_logged_raw(tmp_path: Path) -> None:
    value = _value("urlpw")
    env = {**os.environ, "AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-m", "agent_tools.cli", "-vv", "run", f"u:{value}@nohost-qa13", "--",
                          "true"], capture_output=True, text=True, env=env, timeout=60, check=False,
                         stdin=subprocess.DEVNULL)
    assert "unknown_host" in res.stdout + res.stderr, res
    assert value not in res.stdout + res.stderr and "u:[REDACTED]@nohost-qa13" in res.stdout + res.stderr
    assert (tmp_path / "state" / "journal.sqlite3").exists()
    assert not leaks({"alias password": value}, tmp_path), leaks({"alias password": value}, tmp_path)
