"""agent_tools.testing, the kit users' own tests import: the README's example run in a user's project,
wait_until's contract, free_port, and the SSH client files as the real OpenSSH client reads them."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

import agent_tools
from agent_tools.testing import WaitTimeout, free_port, known_hosts_line, ssh_config_block, wait_until

REPO = Path(agent_tools.__file__).resolve().parent.parent


def test_the_readme_kit_example_passes_in_a_users_project(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(# test_hosts\.py\n.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    assert len(blocks) == 1, "the README's test kit example (a block starting '# test_hosts.py')"
    (tmp_path / "test_hosts.py").write_text(blocks[0])
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(tmp_path / ".state")}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                          "test_hosts.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "2 passed" in res.stdout, res.stdout + res.stderr


async def test_wait_until_returns_the_first_true_value_of_a_sync_or_async_condition() -> None:
    calls: list[int] = []

    def sync() -> str | None:
        calls.append(1)
        return "up" if len(calls) == 3 else None

    assert await wait_until(sync, "the third call", interval_s=0.001) == "up"
    assert len(calls) == 3

    async def asynchronous() -> int:
        await anyio.lowlevel.checkpoint()
        return len(calls)

    assert await wait_until(asynchronous, "a count") == 3


async def test_wait_until_names_what_it_waited_for_when_the_time_is_up() -> None:
    with pytest.raises(WaitTimeout, match=r"^timed out after 0\.2 s waiting for the moon to rise$") as err:
        await wait_until(lambda: False, "the moon to rise", timeout_s=0.2, interval_s=0.01)
    assert isinstance(err.value, TimeoutError)
    assert (err.value.what, err.value.timeout_s) == ("the moon to rise", 0.2)


async def test_wait_until_cancels_an_async_condition_that_hangs_at_the_limit() -> None:
    cancelled = anyio.Event()

    async def hangs() -> bool:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return True  # pragma: no cover - never reached

    with pytest.raises(WaitTimeout, match="a hanging check"):
        await wait_until(hangs, "a hanging check", timeout_s=0.2)
    assert cancelled.is_set()


async def test_wait_until_lets_the_conditions_error_through_and_refuses_bad_limits() -> None:
    def broken() -> bool:
        raise KeyError("no such unit")

    with pytest.raises(KeyError, match="no such unit"):
        await wait_until(broken, "a unit")
    for bad in ({"timeout_s": 0}, {"interval_s": -1.0}, {"timeout_s": float("nan")}):
        with pytest.raises(ValueError, match="timeout_s > 0 and interval_s > 0"):
            await wait_until(lambda: True, "anything", **bad)


def test_free_port_is_a_bindable_loopback_port() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # it was free a moment ago (nothing else here takes ports on purpose)
        s.listen(1)


def test_ssh_config_block_is_read_by_openssh_as_written(tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(ssh_config_block("node-1", user="ops", identity_file=tmp_path / "key",
                                    known_hosts=tmp_path / "known_hosts", port=2222, connect_timeout_s=7))
    out = subprocess.run(["ssh", "-G", "-F", str(cfg), "node-1"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    got = {k.lower(): v for k, v in (line.split(" ", 1) for line in out.stdout.splitlines())}
    assert (got["hostname"], got["port"], got["user"]) == ("127.0.0.1", "2222", "ops")
    assert (got["identityfile"], got["identitiesonly"]) == (str(tmp_path / "key"), "yes")
    assert (got["userknownhostsfile"], got["globalknownhostsfile"]) == (str(tmp_path / "known_hosts"), "/dev/null")
    assert (got["stricthostkeychecking"], got["updatehostkeys"], got["batchmode"]) == ("true", "false", "yes")
    assert (got["passwordauthentication"], got["kbdinteractiveauthentication"]) == ("no", "no")
    assert (got["connecttimeout"], got["controlmaster"], got["loglevel"]) == ("7", "false", "ERROR")
    assert "controlpath" not in got  # none
    with pytest.raises(ValueError, match="one name without white space or patterns"):
        ssh_config_block("gpu-*", user="ops", identity_file="k", known_hosts="kh")


def test_known_hosts_line_brackets_a_port_other_than_22() -> None:
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample comment words"
    assert known_hosts_line(key, port=2222) == "[127.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample\n"
    assert known_hosts_line(key, hostname="10.0.0.5") == "10.0.0.5 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample\n"
    with pytest.raises(ValueError, match="not an OpenSSH public key line"):
        known_hosts_line("ssh-ed25519")
