"""Issue 14, the qa14c report, on real systemd and OpenSSH (the nspawn test hosts: ``at-h1`` logs in as root,
``at-h1-agent`` as an unprivileged user of the same machine), read as an MCP client receives it through the
official SDK client."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from .test_agent_view_qa14_systemd import HOST, install_unit, model_on, remove_unit

if TYPE_CHECKING:
    from pathlib import Path

    from tests.hosts.nspawn import HostPool

pytestmark = pytest.mark.systemd
AGENT = "at-h1-agent"


# ---------------------------------------------------------------------------------------------- 1
async def test_a_config_written_back_as_read_keeps_its_password_on_the_host(systemd_hosts: HostPool,
                                                                            tmp_path: Path) -> None:
    path = "/etc/qa14c-db.conf"
    systemd_hosts.run(HOST, f"printf '[db]\\nuser = webapp\\npassword = hunter2xyz\\npool = 5\\n' > {path}",
                      check=True)
    try:
        async with model_on(systemd_hosts, tmp_path) as (_, model):
            text, shown = await model.read("read_file", {"host": HOST, "path": path})
            assert "password = [REDACTED]" in shown["text"], text
            text, out = await model.read("write_file", {"host": HOST, "path": path,
                                                        "content": shown["text"].replace("pool = 5", "pool = 20")})
            assert "the [REDACTED] on line 3 kept the file's secret" in out["next"], text
            on_host = systemd_hosts.run(HOST, f"cat {path}", check=True).stdout
            assert on_host == "[db]\nuser = webapp\npassword = hunter2xyz\npool = 20\n", on_host
    finally:
        systemd_hosts.run(HOST, f"rm -f {path}")


# ---------------------------------------------------------------------------------------------- 5
async def test_systemctl_answers_and_a_unit_without_reload_say_what_they_mean(systemd_hosts: HostPool,
                                                                              tmp_path: Path) -> None:
    unit = "at-noreload.service"
    install_unit(systemd_hosts, unit, "[Service]\nExecStart=/bin/sleep infinity\n")
    try:
        async with model_on(systemd_hosts, tmp_path) as (_, model):
            text, out = await model.read("run_command", {"host": HOST, "command": f"systemctl is-active {unit}"})
            assert out["exit_status"] == 3, text
            assert out["next"] == "systemctl is-active answers with its exit status: the unit is inactive (not an " \
                                  "error)", text
            systemd_hosts.run(HOST, f"systemctl start {unit}", check=True)
            text, out = await model.read("run_command", {"host": HOST, "command": f"systemctl reload {unit}"})
            assert out["exit_status"] != 0 and "fix the cause" not in out["next"], text
            assert out["next"] == (f"{unit} has no reload (no ExecReload=): restart_service(host='{HOST}', "
                                   f"unit='{unit}') restarts it"), text
    finally:
        remove_unit(systemd_hosts, unit)


# ---------------------------------------------------------------------------------------------- 6, 7
async def test_the_unprivileged_alias_is_pointed_at_the_root_alias_and_says_what_it_cannot_see_once(
        systemd_hosts: HostPool, tmp_path: Path) -> None:
    unit = "at-agentrestart.service"
    install_unit(systemd_hosts, unit, "[Service]\nExecStart=/bin/sleep infinity\n")
    try:
        async with model_on(systemd_hosts, tmp_path) as (_, model):
            text, first = await model.read("run_command", {"host": AGENT, "command": "id -un"})
            assert first["stdout"]["text"] == "agent\n", text
            if first.get("unchecked"):  # (the same on each job of this host: said in full once, then referred to)
                text, second = await model.read("run_command", {"host": AGENT, "command": "id -un"})
                assert second["unchecked"] == "as an earlier result on this host said (the same for each of its " \
                                              "jobs)", text
            text, out = await model.read("restart_service", {"host": AGENT, "unit": unit})
            assert out["outcome"] == "finished" and out["exit_status"] != 0, text
            assert f"the login user of {AGENT} may not manage systemd units" in out["next"], text
            assert f"restart_service(host='{HOST}', unit='{unit}') does it as root on the same machine" in out["next"]
            assert "service_status" not in out["next"], text
            text, err = await model.read("write_file", {"host": AGENT, "path": "/etc/qa14c-agent.conf",
                                                        "content": "x\n"})
            assert err["kind"] == "permission_denied", text
            assert f"host='{HOST}' reaches the same machine as root" in err["message"], text
    finally:
        remove_unit(systemd_hosts, unit)


# ---------------------------------------------------------------------------------------------- 8, 9
async def test_a_crash_loop_and_a_disabled_unit_are_said_and_a_ready_restart_says_each_fact_once(
        systemd_hosts: HostPool, tmp_path: Path) -> None:
    loop, served, port = "at-crashloop.service", "at-served.service", 39931
    install_unit(systemd_hosts, loop, "[Service]\nRestart=always\nRestartSec=1\nExecStart=/usr/bin/python3 -c "
                                      "\"int('8O90')\"\n")
    install_unit(systemd_hosts, served, f"[Service]\nExecStart=/usr/bin/python3 -m http.server --bind 127.0.0.1 "
                                        f"{port}\n\n[Install]\nWantedBy=multi-user.target\n")
    try:
        async with model_on(systemd_hosts, tmp_path) as (_, model):
            systemd_hosts.run(HOST, f"systemctl start {loop}", check=True)
            await anyio.sleep(5)
            text, st = await model.read("service_status", {"host": HOST, "unit": loop})
            assert st["note"].startswith("crash-looping: systemd restarted it"), text
            assert "journal shows why each run ended" in st["note"] and "ValueError" in st["journal"], text
            assert st["unit_file_state"] == "static", text
            # a unit that is disabled: the restart works, and it says that the unit will not come back at boot
            text, out = await model.read("restart_service", {"host": HOST, "unit": served, "probes": [
                {"kind": "http", "url": f"http://127.0.0.1:{port}/"}]})
            assert f"{served} is disabled: it will not start at boot" in out["why"], text
            for _ in range(10):
                text, st = await model.read("job_status", {"job_id": out["job_id"], "wait_s": 10})
                if st["readiness"] != "pending":
                    break
            assert st["readiness"] == "ready" and st["why"] == "all probes passed (see probes)", text
            text, status = await model.read("service_status", {"host": HOST, "unit": served, "journal_lines": 0})
            assert status["unit_file_state"] == "disabled", text
    finally:
        remove_unit(systemd_hosts, loop)
        remove_unit(systemd_hosts, served)


async def test_a_unit_file_logged_again_at_each_reload_shows_each_line_once(systemd_hosts: HostPool,
                                                                            tmp_path: Path) -> None:
    unit = "at-badkey.service"
    install_unit(systemd_hosts, unit, "[Service]\nExecStartt=/bin/true\n")
    try:
        for _ in range(3):
            systemd_hosts.run(HOST, f"systemctl daemon-reload; systemctl restart {unit}")
        async with model_on(systemd_hosts, tmp_path) as (_, model):
            text, st = await model.read("service_status", {"host": HOST, "unit": unit})
            lines = st["journal"].splitlines()
            assert len(lines) == len(set(lines)) == 2, text
            assert all(line.endswith(" times)") for line in lines), text
            # 14: the restart's deadline is the manager's default start timeout + 30 s, not 900 s
            text, out = await model.read("restart_service", {"host": HOST, "unit": unit})
            assert out["exit_status"] != 0, text
            text, job = await model.read("job_status", {"job_id": out["job_id"]})
            assert job["deadline_s"] == 120, text
    finally:
        remove_unit(systemd_hosts, unit)


# ---------------------------------------------------------------------------------------------- 11, 14
async def test_a_restart_that_failed_at_once_points_at_the_fix_and_its_port_is_not_worth_a_retry(
        systemd_hosts: HostPool, tmp_path: Path) -> None:
    unit, slow, port = "at-typo14c.service", "at-slow14c.service", 39932
    install_unit(systemd_hosts, unit, f"[Service]\nType=simple\nExecStart=/usr/bin/pyhton3 -m http.server {port}\n")
    install_unit(systemd_hosts, slow, "[Service]\nExecStartPre=/bin/sleep 30\nExecStart=/bin/sleep infinity\n")
    try:
        async with model_on(systemd_hosts, tmp_path) as (_, model):
            text, out = await model.read("restart_service", {"host": HOST, "unit": unit, "probes": [
                {"kind": "http", "url": f"http://127.0.0.1:{port}/"}]})
            if out.get("readiness") == "pending":
                text, out = await model.read("job_status", {"job_id": out["job_id"], "wait_s": 10})
            assert out["readiness"] == "failed" and "pyhton3" in out["why"], text
            # the journal is in why already: the next step is the fix, then the restart again
            assert f"why holds {unit}'s journal; fix the cause (run_command 'systemctl cat {unit}'" in out["next"]
            assert out["next"].endswith(f"restart_service(host='{HOST}', unit='{unit}') once it is fixed"), text
            assert "service_status" not in out["next"], text
            text, err = await model.read("http_get", {"host": HOST, "url": f"http://127.0.0.1:{port}/"})
            assert err["kind"] == "connection_refused" and f"{unit} is failed/failed" in err["message"], text
            assert err["retryable"] is False, text
            # a pending restart with a deadline of its own says that deadline
            text, out = await model.read("restart_service", {"host": HOST, "unit": slow, "deadline_s": 8})
            assert out["readiness"] == "pending", text
            assert out["why"] == (f"restart of {slow} enqueued; the probes judge readiness within 8 s (the unit "
                                  "allows 90 s to start)"), text
            await model.read("job_cancel", {"job_id": out["job_id"], "grace_s": 1})
    finally:
        remove_unit(systemd_hosts, unit)
        remove_unit(systemd_hosts, slow)


# ---------------------------------------------------------------------------------------------- 13
async def test_ready_by_the_unit_alone_says_so(systemd_hosts: HostPool, tmp_path: Path) -> None:
    unit = "at-flaky14c.service"
    install_unit(systemd_hosts, unit, "[Service]\nRestart=always\nExecStart=/bin/sh -c 'sleep 5; exit 3'\n")
    try:
        async with model_on(systemd_hosts, tmp_path) as (_, model):
            _, out = await model.read("restart_service", {"host": HOST, "unit": unit})
            for _ in range(10):
                text, st = await model.read("job_status", {"job_id": out["job_id"], "wait_s": 10})
                if st["readiness"] != "pending":
                    break
            assert st["readiness"] == "ready", text
            assert st["next"].startswith("ready: go on with the task (only the unit's state was checked: it stayed "
                                         "up for its settle window"), text
            assert "a later job_status" in st["next"], text
            # 9: it dies (sleep 5; exit 3): the later look says so, each fact once
            await anyio.sleep(6)
            text, st = await model.read("job_status", {"job_id": out["job_id"]})
            assert st["readiness"] == "failed" and st["why"].startswith("it was ready, then:"), text
            evidence = st["probes"][0]["evidence"]
            assert evidence and evidence not in st["why"] and text.count(evidence) == 1, text
    finally:
        remove_unit(systemd_hosts, unit)
