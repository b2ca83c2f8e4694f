"""The shipped policies against an attacker, on real systemd hosts (issue 13, second round): code smuggled in a
call's ``env``, in text bash later evaluates (arithmetic, subscripts, name operands, ``${!x}``, ``${x@P}``), in a
start-up variable, or a read whose output overwrites a root-owned file, never runs without approval. Each command
tries to leave a file (or a change) on the host; the host is checked afterwards, through its own namespaces."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

import agent_tools
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.policy import PolicySet
from agent_tools.tools.toolkit import Toolkit

from .hosts.nspawn import HostPool

REPO = Path(agent_tools.__file__).resolve().parent.parent
POLICIES = REPO / "policies"
HOST = "at-h1"
MARK = "/tmp/at13-pwned"

#: (command, env): each would create a file under MARK if it ran; the tester's report and the next steps of the
#: same kind
ATTACKS: list[tuple[str, dict[str, str] | None]] = [
    ("bash -c ls; true", {"BASH_ENV": f"$(touch {MARK}-env-bashenv)"}),
    ("ls; true", {"BASH_ENV": "/dev/null", "SHELLOPTS": "xtrace", "PS4": f"$(touch {MARK}-env-ps4)"}),
    ("ls /", {"PATH": "/tmp/at13-evil"}),
    ("ls", {"LD_PRELOAD": "/tmp/at13-evil.so"}),
    ("echo $((x))", {"x": f"a[$(touch {MARK}-env-arith)]"}),
    (f"BASH_ENV=/dev/stdin bash -c true <<< 'touch {MARK}-bashenv'", None),
    (f"BASH_ENV=/dev/stdin bash -c '' <<< 'touch {MARK}-bashenv-empty'", None),
    (f"test -v 'a[$(touch {MARK}-testv)]'", None),
    (f"[[ -v 'a[$(touch {MARK}-dbl-v)]' ]]", None),
    (f"printf -v 'a[$(touch {MARK}-printfv)]' x", None),
    (f"read 'a[$(touch {MARK}-read)]' <<< x", None),
    (f": '$(touch {MARK}-atP)'; echo ${{_@P}}", None),
    (f": 'a[$(touch {MARK}-indirect)]'; echo ${{!_}}", None),
    (f"read n <<< 'a[$(touch {MARK}-readarith)]'; echo $((n + 1))", None),
    (f"set -- 'a[$(touch {MARK}-positional)]'; echo $(($1))", None),
    (f"ls; declare 'a[$(touch {MARK}-declare)]'=1", None),
]


@pytest.fixture
async def tk(systemd_hosts: HostPool, tmp_path: Path) -> AsyncIterator[Toolkit]:
    toolkit = Toolkit(HostRegistry(ssh_config=[str(systemd_hosts.ssh_config)]),
                      journal=Journal(tmp_path / "journal.sqlite3"), policy=PolicySet.load([POLICIES / "default.yaml"]))
    try:
        yield toolkit
    finally:
        await toolkit.aclose()


def host_sh(pool: HostPool, cmd: str) -> str:
    return pool.run(HOST, cmd, check=True).stdout


def gpu_alias_config(pool: HostPool, path: Path) -> Path:
    """The pool's ssh config plus ``gpu-at13``, another name for at-h1 (so gpu-node.yaml applies to it)."""
    text = pool.ssh_config.read_text()
    block = re.search(rf"^Host {HOST}\n(.*?)(?=^Host |\Z)", text, re.S | re.M)
    assert block is not None
    path.write_text(text + f"\nHost gpu-at13\n{block.group(1)}")
    return path


async def test_smuggled_code_is_asked_about_and_never_runs(tk: Toolkit, systemd_hosts: HostPool) -> None:
    host_sh(systemd_hosts, f"rm -f {MARK}*")
    outcomes = []
    for command, env in ATTACKS:
        out = await tk.dispatch("run_command", {"host": HOST, "command": command, "env": env})
        outcomes.append((command, env, out["outcome"]))
    assert all(o == "needs_approval" for _, _, o in outcomes), [x for x in outcomes if x[2] != "needs_approval"]
    assert host_sh(systemd_hosts, f"ls {MARK}* 2>/dev/null || true").strip() == ""
    control = await tk.dispatch("run_command", {"host": HOST, "command": "ls / && echo $((2 + 3))",
                                                "env": {"LC_ALL": "C", "TZ": "UTC"}})
    assert control["outcome"] == "finished" and "5" in control["stdout"]["text"], control


async def test_an_approval_is_for_the_env_and_cwd_it_was_asked_with(tk: Toolkit, systemd_hosts: HostPool) -> None:
    host_sh(systemd_hosts, "rm -rf /tmp/at13-victim /tmp/at13-other; mkdir -p /tmp/at13-victim /tmp/at13-other; "
                           "touch /tmp/at13-victim/keep /tmp/at13-other/keep")
    call = {"host": HOST, "command": "rm -f keep", "cwd": "/tmp/at13-victim", "env": {"LC_ALL": "C"}}
    asked = await tk.dispatch("run_command", call)
    assert asked["outcome"] == "needs_approval" and asked["cwd"] == "/tmp/at13-victim", asked
    tk.approvals.approve(asked["approval_id"])  # type: ignore[union-attr]
    for changed in ({"cwd": "/tmp/at13-other"}, {"env": {"LC_ALL": "C", "BASH_ENV": "/dev/null"}}, {"env": None},
                    {"cwd": None}):
        other = await tk.dispatch("run_command", {**call, **changed, "approval_id": asked["approval_id"]})
        assert other["outcome"] == "needs_approval" and "not usable" in other["reason"], (changed, other)
    assert host_sh(systemd_hosts, "ls /tmp/at13-victim /tmp/at13-other").split() == [
        "/tmp/at13-other:", "keep", "/tmp/at13-victim:", "keep"]
    ran = await tk.dispatch("run_command", {**call, "approval_id": asked["approval_id"]})
    assert ran["outcome"] == "finished", ran
    assert host_sh(systemd_hosts, "ls -A /tmp/at13-victim; ls /tmp/at13-other").split() == ["keep"]


async def test_gpu_node_reads_that_overwrite_files_as_root_are_asked(systemd_hosts: HostPool, tmp_path: Path) -> None:
    config = gpu_alias_config(systemd_hosts, tmp_path / "ssh_config")
    before = host_sh(systemd_hosts, "md5sum /etc/issue /etc/passwd")
    for files in (["gpu-node.yaml"], ["default.yaml", "gpu-node.yaml"]):
        tk = Toolkit(HostRegistry(ssh_config=[str(config)]), journal=Journal(tmp_path / f"j{len(files)}.sqlite3"),
                     policy=PolicySet.load([POLICIES / f for f in files]))
        async with tk:
            for command in ("free -m > /etc/issue", "journalctl -n 3 >> /etc/issue", "free -m > /etc/passwd",
                            "nvidia-smi -L | tee /etc/issue", "journalctl -n 1 --cursor-file=/etc/issue",
                            "ls; :(){ :|:& };:", "test -v 'a[$(touch /tmp/at13-gpu)]'"):
                out = await tk.dispatch("run_command", {"host": "gpu-at13", "command": command})
                assert out["outcome"] == "needs_approval", (files, command, out)
            read = await tk.dispatch("run_command", {"host": "gpu-at13", "command": "free -m"})
            assert read["outcome"] == "finished", read
    assert host_sh(systemd_hosts, "md5sum /etc/issue /etc/passwd") == before
    assert host_sh(systemd_hosts, "ls /tmp/at13-gpu 2>/dev/null || true").strip() == ""


async def test_over_mcp_the_env_is_decided_too(systemd_hosts: HostPool, tmp_path: Path) -> None:
    host_sh(systemd_hosts, f"rm -f {MARK}-mcp")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agent_tools.cli", "mcp", "--policy", str(POLICIES / "default.yaml"), "-F",
              str(systemd_hosts.ssh_config), "--state-dir", str(tmp_path / "state")],
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        res = await session.call_tool("run_command", {"host": HOST, "command": "bash -c ls; true",
                                                      "env": {"BASH_ENV": f"$(touch {MARK}-mcp)"}})
        data: dict[str, Any] = res.structured_content or {}
    assert data["outcome"] == "needs_approval" and data["env"] == {"BASH_ENV": f"$(touch {MARK}-mcp)"}, data
    assert host_sh(systemd_hosts, f"ls {MARK}-mcp 2>/dev/null || true").strip() == ""


async def test_a_carriage_return_is_not_a_blank_to_bash(tk: Toolkit, systemd_hosts: HostPool) -> None:
    """tree-sitter-bash reads \\r, \\f and \\v as blanks, bash reads them as part of a word: ``cat\\r/tmp/x.sh``
    looked like ``cat /tmp/x.sh`` (allowed) and ran ./cat\\r/tmp/x.sh, a program a repository can ship."""
    work = "/tmp/at13-cr"
    for n, blank in enumerate(("\\r", "\\f", "\\v")):
        host_sh(systemd_hosts, f"rm -rf {work}; d={work}/\"$(printf 'cat{blank}')\"/tmp; mkdir -p \"$d\"; "
                               f"printf '#!/bin/sh\\ntouch {MARK}-blank{n}\\n' > \"$d/x.sh\"; chmod +x \"$d/x.sh\"")
        command = "cat" + {"\\r": "\r", "\\f": "\f", "\\v": "\v"}[blank] + "/tmp/x.sh"
        out = await tk.dispatch("run_command", {"host": HOST, "command": command, "cwd": work})
        assert out["outcome"] == "needs_approval" and "part of a word" in out["reason"], out
        assert host_sh(systemd_hosts, f"ls {MARK}-blank{n} 2>/dev/null || true").strip() == ""
        # the attack is real: bash itself runs the program
        ran = f"cd {work} && bash -c {shlex.quote(command)}; ls {MARK}-blank{n}; rm -f {MARK}-blank{n}"
        host_sh(systemd_hosts, ran)  # (check=True: the marker is there)
    host_sh(systemd_hosts, f"rm -rf {work}")


async def test_path_changed_by_builtins_or_local_code_through_ssh_never_runs(tk: Toolkit,
                                                                           systemd_hosts: HostPool) -> None:
    """``unset PATH`` makes bash look a command up in the current directory, ``PATH[0]=.`` assigns PATH,
    ``BASH_CMDS[ls]=FILE`` is bash's command hash table (like ``hash -p``), and ssh's
    ProxyCommand runs a local command: each was allowed (``ls``, ``true``) and ran a program the agent planted."""
    work = "/tmp/at13-path"
    host_sh(systemd_hosts, f"rm -rf {work} {MARK}*; mkdir -p {work}; for p in ls cat; do "
                           f"printf '#!/bin/sh\\ntouch {MARK}-planted-%s\\n' $p > {work}/$p; chmod +x {work}/$p; done")
    for command in ("unset PATH; ls", "unset -v PATH; cat /etc/hostname", "PATH[0]=.; ls", "PATH[0]=. ls",
                    f"BASH_CMDS[ls]={work}/ls; ls", f"declare -A BASH_CMDS=([cat]={work}/cat); cat /etc/hostname",
                    f"ssh -o ProxyCommand='touch {MARK}-proxy' -o BatchMode=yes nohost true",
                    f"ssh -oProxyCommand='touch {MARK}-proxy2' nohost true"):
        out = await tk.dispatch("run_command", {"host": HOST, "command": command, "cwd": work})
        assert out["outcome"] == "needs_approval", (command, out)
    assert host_sh(systemd_hosts, f"ls {MARK}* 2>/dev/null || true").strip() == ""
    before = host_sh(systemd_hosts, "md5sum /etc/issue")
    for command in ("cat <<EOF >> /etc/issue\npwned\nEOF", f"sh <<EOF < {work}/evil.sh\nls\nEOF",
                    f"bash <<< ls < {work}/evil.sh"):  # a redirection after <<EOF; the last input is what sh reads
        host_sh(systemd_hosts, f"printf 'touch {MARK}-stdin\\n' > {work}/evil.sh")
        out = await tk.dispatch("run_command", {"host": HOST, "command": command, "cwd": work})
        assert out["outcome"] == "needs_approval", (command, out)
    assert host_sh(systemd_hosts, "md5sum /etc/issue") == before
    assert host_sh(systemd_hosts, f"ls {MARK}* 2>/dev/null || true").strip() == ""
    # the attack is real: bash itself runs ./ls once PATH is unset
    host_sh(systemd_hosts, f"cd {work} && bash -c 'unset PATH; ls'; ls {MARK}-planted-ls")
    host_sh(systemd_hosts, f"bash -c 'BASH_CMDS[cat]={work}/cat; cat /etc/hostname'; ls {MARK}-planted-cat")
    host_sh(systemd_hosts, f"rm -rf {work} {MARK}*")


async def test_hidden_substitutions_and_host_resolved_names_never_run(tk: Toolkit, systemd_hosts: HostPool) -> None:
    """qa13 round 3: a backquote inside ${...}, nested backquotes, <(...) in ${...} and a backquote in an unquoted
    here-document run in bash though tree-sitter-bash reads them as text; ~sys is /dev and PID 1's cwd is / on the
    host; grep -D read opens what -r alone skips. Each was allowed; now none runs (and bash does run them)."""
    host_sh(systemd_hosts, f"rm -rf {MARK}*")
    hidden = [f"echo ${{x:-`touch {MARK}-bt1; id -un`}}", f"x=a; echo ${{x/a/`touch {MARK}-bt2`}}",
              f"ls -d ${{HOME#`touch {MARK}-bt3`}}", f"cat <<EOF\n`touch {MARK}-heredoc`\nEOF",
              f"systemctl status ${{x:-`touch {MARK}-systemctl`}} --no-pager", f"ls -d ${{HOME:+`touch {MARK}-plus`}}",
              f"echo ${{x:-<(touch {MARK}-procsub)}}; sleep 0.5", f"echo `echo \\`touch {MARK}-nested\\``"]
    for command in hidden:
        out = await tk.dispatch("run_command", {"host": HOST, "command": command})
        assert out["outcome"] == "needs_approval" and "touch" in out["reason"], (command, out)
    assert host_sh(systemd_hosts, f"ls {MARK}* 2>/dev/null || true").strip() == ""
    for command in hidden:  # the attack is real: bash runs every hidden command
        host_sh(systemd_hosts, f"bash -c {shlex.quote(command)} >/dev/null 2>&1 || true")
    assert len(host_sh(systemd_hosts, f"ls {MARK}*").split()) == len(hidden)
    host_sh(systemd_hosts, f"rm -f {MARK}*")
    # names only the host resolves: on this Debian host ~sys is /dev and PID 1's working directory is /
    assert host_sh(systemd_hosts, "getent passwd sys | cut -d: -f6").strip() == "/dev"
    assert host_sh(systemd_hosts, "readlink /proc/1/cwd").strip() == "/"
    for command in ("head -c 40 ~sys/watchdog", "cat /proc/1/cwd/dev/watchdog", "cat ~root/../dev/watchdog",
                    "cd ~sys; cat watchdog", "cp /dev/zero ~sys/sda", "grep -D read -r x /dev"):
        out = await tk.dispatch("run_command", {"host": HOST, "command": command})
        assert out["outcome"] == "denied", (command, out)
    # grep opens a FIFO (a device alike) below the start only with -D read: -r alone skips it (returns at once)
    host_sh(systemd_hosts, f"rm -rf {MARK}-g; mkdir {MARK}-g; mkfifo {MARK}-g/f")
    assert host_sh(systemd_hosts, f"timeout 3 grep -r x {MARK}-g; echo $?").strip() == "1"
    assert host_sh(systemd_hosts, f"timeout 3 grep -D read -r x {MARK}-g; echo $?").strip() == "124"
    host_sh(systemd_hosts, f"rm -rf {MARK}-g")
