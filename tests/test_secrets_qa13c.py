"""qa13c #1, #3, #4, #7: secrets in the shapes a recursive or indirect reader prints them (a key's body after
``FILE:`` or ``> ``, a hash through ``tr``), in a ``job_output`` grep line or a ``read_file`` page cut from their
context, a glob hidden in an approval prompt, and shapes the redactor missed. Real parts: a real ed25519 key
(ssh-keygen), the commands run on this machine through the official MCP client (``agent-tools mcp`` over stdio and
the server in process), the CLI on a pseudo-terminal; every file the run wrote is searched for the raw values."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pexpect
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext

import agent_tools
from agent_tools.adapters.mcp_server import build_mcp_server
from agent_tools.hosts.local import LocalHost
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.policy import PolicySet
from agent_tools.redact import redact, review_text
from agent_tools.tools.toolkit import Toolkit

REPO = Path(agent_tools.__file__).resolve().parent.parent
POLICY = REPO / "policies" / "default.yaml"


def _value(prefix: str) -> str:
    return prefix + "".join(secrets.choice("abcdefghijkmnopqrstuvwxyz23456789") for _ in range(16)) + "Q7"


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    data = json.loads(result.content[0].text)
    assert isinstance(data, dict)
    return data


def leaks(values: dict[str, str], root: Path) -> list[str]:
    return [f"{p.relative_to(root)}: {name}" for p in sorted(root.rglob("*")) if p.is_file()
            for name, value in values.items() if value.encode() in p.read_bytes()]


@pytest.fixture
def secret_tree(tmp_path: Path) -> tuple[Path, list[str], dict[str, str]]:
    """A directory like /etc/ssh plus a home: a real private key, a multi-line .netrc and a shadow line; returns it,
    the key's body lines and the other raw values."""
    tree = tmp_path / "etc"
    (tree / "ssh").mkdir(parents=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tree / "ssh" / "ssh_host_ed25519_key")],
                   check=True, capture_output=True)
    body = (tree / "ssh" / "ssh_host_ed25519_key").read_text().splitlines()[1:-1]
    raw = {"netrc": _value("netrcpw"), "hash": "j9T$" + _value("salt")[:22] + "$" + _value("hash") + "abcdefghij"}
    (tree / "netrc").write_text(f"machine git.example.com\n  login deploy\n  password {raw['netrc']}\n")
    (tree / "shadow").write_text(f"root:*:20000:0:99999:7:::\nagent:$y${raw['hash']}:20794:0:99999:7:::\n")
    (tree / "empty").mkdir()
    return tree, body, raw


def test_key_bodies_and_hashes_are_hidden_whatever_prefixes_their_lines(
        secret_tree: tuple[Path, list[str], dict[str, str]], tmp_path: Path) -> None:
    tree, body, raw = secret_tree
    q = str(tree)
    commands = [f"grep -r . {q}/ssh", f"grep -rn . {q}/ssh", f"diff -rN {q}/empty {q}/ssh",
                f"cat -A {q}/ssh/ssh_host_ed25519_key", f"cat -n {q}/ssh/ssh_host_ed25519_key",
                f"grep --color=always . {q}/ssh/ssh_host_ed25519_key", f"grep -r --color=always . {q}/ssh",
                f"diff -u /dev/null {q}/ssh/ssh_host_ed25519_key",
                f"grep -rh agent: {q} | tr '$' '%'", f"grep -r agent: {q} | tr '$' '#'", f"cat {q}/netrc"]
    shown = []
    for command in commands:
        out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False).stdout
        plain = re.sub(r"\x1b\[[0-9;]*[mK]", "", out)
        assert any(line in plain for line in body) or raw["netrc"] in out or raw["hash"][4:20] in out.replace(
            "%", "$").replace("#", "$"), (command, out)  # the command does print the secret
        shown.append(redact(out))
    for command, text in zip(commands, shown, strict=True):
        assert not any(line in text for line in body), (command, text)
        assert raw["netrc"] not in text and raw["hash"][4:20] not in text.replace("%", "$").replace("#", "$"), (
            command, text)


@pytest.mark.parametrize(
    ("text", "secret"),
    [("psk=\"correct horse battery\"", "correct horse battery"), ("wpa_psk=8a7d6f5e4c3b2a19", "8a7d6f5e4c3b2a19"),
     ("db.example.com:5432:app:deploy:S3cretPgPw", "S3cretPgPw"), ("*:*:*:postgres:Pg-Pass-9", "Pg-Pass-9"),
     ("token: |\n  eyJrIjoiT0tTcG1pUlY2RnVKZTFVaDFsNFZXdE9ZV\nnext: 1", "eyJrIjoiT0tTcG1pUlY2RnVKZTFVaDFsNFZXdE9ZV"),
     ("secrets:\n  - hunter2x9\n  - 'q8!zz-top'\nname: x", "hunter2x9"),
     ("secrets:\n  - hunter2x9\n  - 'q8!zz-top'\nname: x", "q8!zz-top"),
     ("admin:$apr1$Vw3d5xTk$2yK8Qm1Pf0Lh7uQ8V9xGz/", "2yK8Qm1Pf0Lh7uQ8V9xGz/"),
     ("bob:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", "W6ph5Mm5Pz8GgiULbPgzG37mj9g"),
     ("GET https://maps.googleapis.com/maps/api/geocode/json?key=AbCd1234EfGh&address=x", "AbCd1234EfGh"),
     ("curl https://api.telegram.org/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/getMe",
      "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"),
     ("https://discord.com/api/webhooks/123456789012345678/" + "a" * 60, "a" * 60),
     ('{"type": "service_account", "private_key_id": "' + "0f" * 20 + '"}', "0f" * 20),
     ("echo 'Pa55-w0rd!' | passwd --stdin bob", "Pa55-w0rd!"),
     ("\uff30\uff21\uff33\uff33\uff37\uff2f\uff32\uff24=hunter2x9", "hunter2x9"),
     ("PASS\u200bWORD=hunter2x9", "hunter2x9"), ("API\u00adTOKEN=hunter2x9", "hunter2x9"),
     ("agent:%y%j9T%WD3/mO2YCeAb1SwkAkc.O1%aLcFAl5xX6.rsm5.XjDuex4B5u0fxj2bVFILyrnwxh1:20794:0:99999:7:::",
      "aLcFAl5xX6.rsm5.XjDuex4B5u0fxj2bVFILyrnwxh1")],
)
def test_more_shapes_are_hidden(text: str, secret: str) -> None:
    shown = redact(text)
    assert secret not in shown and "[REDACTED]" in shown, shown


@pytest.mark.parametrize(
    "text",
    ["root:x:0:0:root:/root:/bin/bash", "10:20:30:40:50", "password: |\n  not set\n", "keys:\n  - a\n  - b\n",
     "ssh_authorized_keys:\n  - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH example\n", "time 12:34:56:78:90 done",
     "https://example.com/?page=2&sort=asc", "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n"],
)
def test_ordinary_text_in_those_shapes_stays(text: str) -> None:
    assert redact(text) == text


def test_a_glob_or_an_expansion_is_never_hidden_in_a_prompt() -> None:
    for command in ("sshpass -p /usr/bin/[st][oe][uq]* ssh backup01 uptime", "sshpass -p /usr/sbin/[hr]e* ssh h",
                    "zip -P * out.zip x", "docker login -p * registry", "API_TOKEN=* ./deploy.sh",
                    "sshpass -p ~root true", "sshpass -p {a,b}x true", "mysql -pab?c1234 db"):
        shown, hidden = review_text(command)
        assert (shown, hidden) == (command, 0), command
    assert review_text("sshpass -p s3cretPw9 ssh h") == ("sshpass -p [REDACTED] ssh h", 1)


async def test_grep_lines_and_read_file_pages_are_redacted_with_their_context(
        secret_tree: tuple[Path, list[str], dict[str, str]], tmp_path: Path) -> None:
    tree, body, raw = secret_tree
    key = tree / "ssh" / "ssh_host_ed25519_key"
    xdg = tmp_path / "host-state"  # this machine is the host: its job directories live here (raw bytes stay)
    os.environ["XDG_STATE_HOME"] = str(xdg)
    try:
        tk = Toolkit(HostRegistry({"local": LocalHost()}), journal=Journal(tmp_path / "state" / "journal.sqlite3"))
        async with tk, Client(build_mcp_server(tk), mode="legacy") as client:
            with anyio.fail_after(120):
                command = f"find {tree}/ssh -name 'ssh_host_ed*' ! -name '*.pub' -exec cat {{}} +; cat {tree}/netrc"
                keyjob = structured(await client.call_tool("run_command", {"host": "local", "command": command}))
                assert keyjob["outcome"] == "finished", keyjob
                pages = [structured(await client.call_tool("job_output", {"job_id": keyjob["job_id"], **args}))
                         for args in ({"grep": "^[A-Za-z0-9+/=]{20,}$"}, {"grep": "password"}, {"grep": "AAAA"},
                                      {"grep": "[a-z]", "tail_lines": 3}, {"offset": 100, "limit": 60})]
                reads = [structured(await client.call_tool("read_file", {"host": "local", "path": str(path), **args}))
                         for path, args in ((tree / "netrc", {"offset": 2}), (tree / "netrc", {"offset": 30}),
                                            (key, {"offset": 36}), (key, {"offset": 120, "limit": 50}),
                                            (key, {"limit": 100}))]
    finally:
        del os.environ["XDG_STATE_HOME"]
    assert pages[0]["matches"] >= 3 and pages[1]["matches"] == 1, pages
    for page in [*pages, *reads]:
        assert page.get("outcome") not in ("error",), page
        text = page["text"]
        assert not any(line in text for line in body) and raw["netrc"] not in text, page
        assert not any(len(part) >= 20 and any(part in line for line in body)
                       for part in re.findall(r"[A-Za-z0-9+/=]{20,}", text)), page
    assert "password [REDACTED]" in pages[1]["text"] and "password [REDACTED]" in reads[0]["text"]
    job_dir = xdg / "agent-tools" / "jobs" / keyjob["job_id"]
    assert raw["netrc"] in (job_dir / "stdout").read_text()  # the raw bytes are on the host, in the job's directory
    for path in job_dir.iterdir():
        path.unlink()
    for name in ("netrc", "shadow"):
        (tree / name).unlink()
    for path in (tree / "ssh").iterdir():
        path.unlink()
    assert not leaks({**raw, **{f"key line {i}": line for i, line in enumerate(body)}}, tmp_path)


async def test_the_elicitation_shows_a_glob_whole(tmp_path: Path) -> None:
    shown: list[str] = []

    async def operator(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        shown.append(params.message)
        return types.ElicitResult(action="decline")

    commands = ["sshpass -p /usr/bin/[st][oe][uq]* ssh backup01 uptime", "zip -P * out.zip x",
                "API_TOKEN=* ./deploy.sh", "sshpass -p ~root true"]
    tk = Toolkit(HostRegistry({"local": LocalHost()}), journal=Journal(tmp_path / "journal.sqlite3"),
                 policy=PolicySet.load([POLICY]))
    async with tk, Client(build_mcp_server(tk), mode="legacy", elicitation_callback=operator) as client:
        with anyio.fail_after(60):
            for command in commands:
                out = structured(await client.call_tool("run_command", {"host": "local", "command": command}))
                assert out["outcome"] == "denied", out  # declined: nothing ran
    assert len(shown) == len(commands)
    for command, message in zip(commands, shown, strict=True):
        block = message.split("Digest ")[0]
        assert f"    {command}\n" in block and "[REDACTED]" not in block and "span(s)" not in block, message


def test_the_cli_prompt_counts_the_real_command(tmp_path: Path) -> None:
    password = "pwQA13c" + "k" * 12
    command = f"mysql --password={password} -e 'select 1'; sshpass -p /usr/bin/[st][oe][uq]* ssh backup01 uptime"
    env = {**os.environ, "AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO),
           "TERM": "xterm-256color", "COLUMNS": "200", "PAGER": "cat"}
    child = pexpect.spawn(sys.executable, ["-m", "agent_tools.cli", "run", "local", "--policy", str(POLICY), "--",
                                           command], env=env, encoding="utf-8", dimensions=(40, 200), timeout=60)
    child.expect(r"\[y/N\]: ")
    screen = re.sub(r"\x1b\[[0-9;]*m", "", child.before or "")
    child.sendline("n")
    child.expect(pexpect.EOF)
    assert f"1 line(s), {len(command)} character(s)" in screen, screen
    assert "1 span(s) as [REDACTED]" in screen and "shown exactly" not in screen, screen
    assert "sshpass -p /usr/bin/[st][oe][uq]* ssh backup01 uptime" in screen and password not in screen, screen
    assert "--password=[REDACTED]" in screen


def test_mcp_over_stdio_redacts_a_prefixed_key(secret_tree: tuple[Path, list[str], dict[str, str]],
                                               tmp_path: Path) -> None:
    tree, body, _ = secret_tree
    state, xdg = tmp_path / "state", tmp_path / "host-state"
    env = {"PYTHONPATH": str(REPO), "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"),
           "XDG_STATE_HOME": str(xdg)}
    server = StdioServerParameters(command=sys.executable, args=["-m", "agent_tools.cli", "mcp", "--state-dir",
                                                                 str(state)], env=env)

    async def scenario() -> list[dict[str, Any]]:
        async with Client(server, mode="legacy") as client:
            with anyio.fail_after(60):
                out = []
                for command in (f"grep -r . {tree}/ssh", f"diff -rN {tree}/empty {tree}/ssh"):
                    ran = structured(await client.call_tool("run_command", {"host": "local", "command": command}))
                    out.append(ran)
                    out.append(structured(await client.call_tool("job_output", {"job_id": ran["job_id"]})))
                return out

    results = anyio.run(scenario)
    text = json.dumps(results)
    assert "PRIVATE KEY-----[REDACTED]" in text or "[REDACTED]" in text
    assert not any(line in text for line in body), text
