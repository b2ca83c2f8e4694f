"""Issue 14, the second qa14 report, on real systemd and OpenSSH (the nspawn test hosts), read as an MCP client
receives it through the official SDK client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit

from .test_agent_view import Model, model_for

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool

pytestmark = pytest.mark.systemd
HOST = "at-h1"


@asynccontextmanager
async def model_on(pool: HostPool, tmp_path: Path, **toolkit: Any) -> AsyncIterator[tuple[Toolkit, Model]]:
    tk = Toolkit(HostRegistry(ssh_config=[str(pool.ssh_config)]), journal=Journal(tmp_path / "j.sqlite3"), **toolkit)
    async with tk, model_for(tk) as m:
        yield tk, m


def install_unit(pool: HostPool, name: str, text: str) -> None:
    pool.run(HOST, f"cat > /etc/systemd/system/{name} && systemctl daemon-reload", input_text=text, check=True)


def remove_unit(pool: HostPool, name: str) -> None:
    pool.run(HOST, f"systemctl stop {name}; systemctl reset-failed {name}; rm -f /etc/systemd/system/{name}; "
                   "systemctl daemon-reload")


# ---------------------------------------------------------------------------------------------- 2
async def test_ssh_without_a_known_key_and_systemctl_edit_say_what_to_do(systemd_hosts: HostPool,
                                                                         tmp_path: Path) -> None:
    other = systemd_hosts.hosts["at-h2"].address
    async with model_on(systemd_hosts, tmp_path) as (_, model):
        text, out = await model.read("run_command", {"host": HOST, "command": f"ssh {other} hostname"})
        assert out["outcome"] == "needs_input" and "Host key verification failed" in out["prompt"], text
        assert "alias" in out["next"] and "accept-new" in out["next"], text
        text, out = await model.read("run_command", {"host": HOST, "command": "systemctl edit ssh.service"})
        assert out["outcome"] == "needs_input" and "not on a tty" in out["prompt"], text
        assert "override.conf" in out["next"] and "daemon_reload=true" in out["next"], text


# ---------------------------------------------------------------------------------------------- 3, 4
async def test_a_restart_that_failed_before_it_returned_says_so_with_the_journal(systemd_hosts: HostPool,
                                                                                tmp_path: Path) -> None:
    unit = "at-typo.service"
    install_unit(systemd_hosts, unit, "[Service]\nType=simple\nExecStart=/usr/bin/pyhton3 -m http.server 39921\n")
    try:
        async with model_on(systemd_hosts, tmp_path) as (_, model):
            text, out = await model.read("restart_service", {"host": HOST, "unit": unit, "probes": [
                {"kind": "http", "url": "http://127.0.0.1:39921/"}]})
            if out.get("readiness") == "pending":  # systemd had not run the start yet: the next look has it
                text, out = await model.read("job_status", {"job_id": out["job_id"], "wait_s": 10})
            assert out["readiness"] == "failed", text
            assert "enqueued" not in out["why"] and "pyhton3" in out["why"], text  # the journal's line is in why
            http = next(p for p in out["probes"] if p["kind"] == "http")
            assert http["state"] == "not_passed", text  # not "not_yet": it will not pass for this restart
            # (the journal is in why: not service_status, which shows it again, but the fix and the restart after)
            assert f"systemctl cat {unit}" in out["next"], text
            assert f"restart_service(host='{HOST}', unit='{unit}') once it is fixed" in out["next"], text
    finally:
        remove_unit(systemd_hosts, unit)


async def test_a_refused_restart_says_so_and_its_run_time_is_the_commands(systemd_hosts: HostPool,
                                                                          tmp_path: Path) -> None:
    unit = "at-broken.service"
    install_unit(systemd_hosts, unit, "[Service]\nExecStartt=/bin/true\n")
    try:
        async with model_on(systemd_hosts, tmp_path) as (_, model):
            text, out = await model.read("restart_service", {"host": HOST, "unit": unit})
            assert (out["outcome"], out["exit_status"]) == ("finished", 1), text
            assert "bad unit file setting" in out["stderr"]["text"], text
            assert f"service_status(host='{HOST}', unit='{unit}')" in out["next"], text
            import anyio

            await anyio.sleep(3)
            text, st = await model.read("job_status", {"job_id": out["job_id"]})
            assert (st["state"], st["readiness"]) == ("exited", "failed"), text
            assert st["elapsed_s"] < 2, text  # the command's run time, not the time of this look
            unit_probe = st["probes"][0]
            assert "not begun yet" not in unit_probe["evidence"] and unit_probe["state"] == "not_passed", text
    finally:
        remove_unit(systemd_hosts, unit)


# ---------------------------------------------------------------------------------------------- 7
async def test_http_get_to_the_hosts_address_of_a_loopback_server_names_the_address_it_listens_on(
        systemd_hosts: HostPool, tmp_path: Path) -> None:
    unit, port = "at-loopback.service", 39923
    install_unit(systemd_hosts, unit, f"[Service]\nExecStart=/usr/bin/python3 -m http.server --bind 127.0.0.1 {port}\n")
    address = systemd_hosts.hosts[HOST].address
    try:
        async with model_on(systemd_hosts, tmp_path) as (_, model):
            _, out = await model.read("restart_service", {"host": HOST, "unit": unit, "probes": [
                {"kind": "http", "url": f"http://127.0.0.1:{port}/"}]})
            _, st = await model.read("job_status", {"job_id": out["job_id"], "wait_s": 30})
            assert st["readiness"] == "ready", st
            text, err = await model.read("http_get", {"host": HOST, "url": f"http://{address}:{port}/health"})
            assert (err["kind"], err["retryable"]) == ("connection_refused", False), text
            assert f"listens on 127.0.0.1 only: GET http://127.0.0.1:{port}/health" in err["message"], text
            assert "refuses connections" not in err["message"], text
    finally:
        remove_unit(systemd_hosts, unit)


# ---------------------------------------------------------------------------------------------- 8, 15
async def test_cancelling_a_restart_says_systemd_goes_on_and_restarts_by_other_words_get_the_hint(
        systemd_hosts: HostPool, tmp_path: Path) -> None:
    unit = "at-slow.service"
    install_unit(systemd_hosts, unit, "[Service]\nExecStartPre=/bin/sleep 60\nExecStart=/bin/sleep infinity\n")
    try:
        async with model_on(systemd_hosts, tmp_path) as (_, model):
            # a blocking restart that detached, then cancelled: systemctl is gone, systemd's start job is not
            text, out = await model.read("run_command", {"host": HOST, "command": f"systemctl restart {unit}",
                                                         "budget_s": 2})
            assert out["outcome"] == "detached", text
            text, cancel = await model.read("job_cancel", {"job_id": out["job_id"], "grace_s": 1})
            assert f"{unit} (activating/start-pre)" in cancel["message"], text
            assert "systemctl stop" in cancel["message"], text
            # a restart_service job: nothing of the job runs, and the unit still starts
            _, out = await model.read("restart_service", {"host": HOST, "unit": unit})
            text, cancel = await model.read("job_cancel", {"job_id": out["job_id"], "grace_s": 1})
            assert f"{unit} (activating/start-pre)" in cancel["message"], text
            # --no-block only enqueues: the result says nothing is known yet, and names the calls that tell
            text, out = await model.read("run_command", {"host": HOST,
                                                         "command": f"systemctl --no-block restart {unit}"})
            assert (out["outcome"], out["exit_status"]) == ("finished", 0), text
            assert "only enqueued" in out["next"], text
            assert f"restart_service(host='{HOST}', unit='{unit}')" in out["next"], text
            # service(8) restarts through systemd: a detached one gets the restart_service hint
            text, out = await model.read("run_command", {"host": HOST, "command": "service at-slow restart",
                                                         "budget_s": 2})
            assert out["outcome"] == "detached", text
            assert f"restart_service(host='{HOST}', unit='{unit}')" in out["next"], text
            await model.read("job_cancel", {"job_id": out["job_id"], "grace_s": 1})
    finally:
        remove_unit(systemd_hosts, unit)


# ---------------------------------------------------------------------------------------------- 20
async def test_password_hashes_ask_first_under_the_default_policy_and_are_redacted(systemd_hosts: HostPool,
                                                                                  tmp_path: Path) -> None:
    from agent_tools.tools.factory import load_policies

    from .test_agent_view import REPO

    user = "at-shadow"
    systemd_hosts.run(HOST, f"userdel {user} 2>/dev/null; useradd -M {user} && echo '{user}:Qa14-pass-word' | "
                            "chpasswd", check=True)
    try:
        policy = load_policies([REPO / "policies" / "default.yaml"])
        async with model_on(systemd_hosts, tmp_path, policy=policy) as (_, model):
            text, out = await model.read("read_file", {"host": HOST, "path": "/etc/shadow"})
            assert out["outcome"] == "needs_approval" and out["rule_id"] == "secret-files", text
            assert "same arguments (host, path)" in out["next"], text
            for command in (f"grep {user} /etc/shadow", f"grep {user} < /etc/shadow", "cd /etc && cat gshadow"):
                text, out = await model.read("run_command", {"host": HOST, "command": command})
                assert out["outcome"] == "needs_approval", text
            text, out = await model.read("read_file", {"host": HOST, "path": "/etc/passwd"})
            assert user in out["text"], text  # an ordinary file reads as before
        async with model_on(systemd_hosts, tmp_path / "open") as (_, model):  # no policy: read, hash hidden
            text, out = await model.read("read_file", {"host": HOST, "path": "/etc/shadow"})
            line = next(ln for ln in out["text"].splitlines() if ln.startswith(f"{user}:"))
            assert line.startswith(f"{user}:[REDACTED]:") and "$" not in line, text
            text, out = await model.read("run_command", {"host": HOST, "command": f"grep {user} /etc/shadow"})
            assert out["stdout"]["text"].startswith(f"{user}:[REDACTED]:"), text
    finally:
        systemd_hosts.run(HOST, f"userdel {user}")


# ---------------------------------------------------------------------------------------------- 16
async def test_host_names_that_are_not_the_alias_say_which_alias_to_use(systemd_hosts: HostPool,
                                                                        tmp_path: Path) -> None:
    address = systemd_hosts.hosts[HOST].address
    async with model_on(systemd_hosts, tmp_path) as (_, model):
        text, listing = await model.read("list_hosts")
        users = {h["host"]: h.get("user") for h in listing["hosts"]}
        assert (users[HOST], users[f"{HOST}-agent"]) == ("root", "agent"), text  # the login user tells them apart
        text, err = await model.read("run_command", {"host": "AT-H1", "command": "true"})
        assert err["kind"] == "unknown_host" and f"did you mean '{HOST}'" in err["message"], text
        text, err = await model.read("run_command", {"host": f"{HOST} ", "command": "true"})
        assert err["kind"] == "bad_arguments" and f"did you mean '{HOST}'?" in err["message"], text
        text, err = await model.read("run_command", {"host": address, "command": "true", "budget_s": 10})
        assert err["outcome"] == "error", text
        assert f"{address} is the HostName of '{HOST}' (user root) or '{HOST}-agent' (user agent)" in err["message"]
        text, err = await model.read("host_memory", {"host": "localhost"})
        assert err["outcome"] == "error" and "this machine is host='local'" in err["message"], text


# ---------------------------------------------------------------------------------------------- 18
async def test_a_misspelt_unit_is_told_with_the_closest_units(systemd_hosts: HostPool, tmp_path: Path) -> None:
    install_unit(systemd_hosts, "at-hello.service", "[Service]\nExecStart=/bin/sleep infinity\n")
    try:
        async with model_on(systemd_hosts, tmp_path) as (_, model):
            text, st = await model.read("service_status", {"host": HOST, "unit": "at-helo.service"})
            assert st["state"] == "not-found" and "did you mean 'at-hello.service'?" in st["note"], text
            text, err = await model.read("restart_service", {"host": HOST, "unit": "at-helo"})
            assert err["kind"] == "not_found" and "did you mean 'at-hello.service'?" in err["message"], text
    finally:
        remove_unit(systemd_hosts, "at-hello.service")
