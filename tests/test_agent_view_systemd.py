"""Issue 14 on real systemd (nspawn test hosts), read as an MCP client receives it through the official SDK
client: a missing unit, a unit file edited and the hint to reload, a blocking restart that detaches and the hint
to use restart_service, a refused port with the state of the unit it belongs to."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from agent_tools.hosts.base import run_on
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit

from .test_agent_view import Model, model_for

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool

pytestmark = pytest.mark.systemd
HOST = "at-h1"


@asynccontextmanager
async def model_on(pool: HostPool, tmp_path: Path) -> AsyncIterator[Model]:
    tk = Toolkit(HostRegistry(ssh_config=[str(pool.ssh_config)]), journal=Journal(tmp_path / "j.sqlite3"))
    async with tk, model_for(tk) as m:
        yield m


async def test_a_missing_unit_says_so_at_the_top(systemd_hosts: HostPool, tmp_path: Path) -> None:
    async with model_on(systemd_hosts, tmp_path) as model:
        text, st = await model.read("service_status", {"host": HOST, "unit": "sglang2.service"})
        assert list(st)[:4] == ["host", "unit", "state", "note"], text
        assert st["state"] == "not-found" and "sglang2.service does not exist on at-h1" in st["note"], text
        assert "result" not in st, text  # not "inactive/dead/success" as if it were a stopped unit


async def test_a_unit_edit_points_at_daemon_reload_and_a_blocking_restart_at_restart_service(
        systemd_hosts: HostPool, tmp_path: Path) -> None:
    async with model_on(systemd_hosts, tmp_path) as model:
        path = "/etc/systemd/system/at-view.service"
        unit = ("[Unit]\nDescription=agent-tools issue 14\n\n[Service]\nType=notify\nNotifyAccess=all\n"
                "ExecStart=/bin/sh -c 'sleep 6; systemd-notify --ready; exec sleep infinity'\n")
        text, wrote = await model.read("write_file", {"host": HOST, "path": path, "content": unit})
        reload = f"restart_service(host='{HOST}', unit='at-view.service', daemon_reload=true)"
        assert wrote["next"] == f"created {path} (7 lines); {reload} applies it", text
        # a blocking restart (Type=notify: systemctl waits for READY=1) outlives its budget and detaches
        text, out = await model.read("run_command", {"host": HOST, "budget_s": 1,
                                                     "command": "systemctl daemon-reload && systemctl restart at-view"})
        assert out["outcome"] == "detached", text
        assert f"restart_service(host='{HOST}', unit='at-view.service') returns at once" in out["next"], text
        _, done = await model.read("job_status", {"job_id": out["job_id"], "wait_s": 30})
        assert (done["state"], done["exit_status"]) == ("exited", 0), done

        # the running unit's file edited: the edit and the unit's status both say how to apply it
        text, edited = await model.read("edit_file", {"host": HOST, "path": path, "old": "sleep 6;",
                                                      "new": "sleep 5;"})
        assert "daemon_reload=true) applies it" in edited["next"] and "-ExecStart" in edited["diff"], text
        text, st = await model.read("service_status", {"host": HOST, "unit": "at-view.service", "journal_lines": 0})
        assert st["state"] == "active/running" and st["need_daemon_reload"] is True, text
        assert st["note"] == (f"the unit file changed since systemd read it: restart_service(host='{HOST}', "
                              "unit='at-view.service', daemon_reload=true) applies it"), text
        await model.read("run_command", {"host": HOST, "command": f"systemctl stop at-view; rm -f {path}; "
                                                                  "systemctl daemon-reload", "budget_s": 30})


async def test_a_refused_port_names_its_units_state(systemd_hosts: HostPool, tmp_path: Path) -> None:
    async with model_on(systemd_hosts, tmp_path) as model:
        path = "/etc/systemd/system/at-port.service"
        unit = ("[Service]\nType=simple\nExecStart=/usr/bin/python3 -m http.server --bind 127.0.0.1 39917\n")
        await model.read("write_file", {"host": HOST, "path": path, "content": unit})
        _, restart = await model.read("restart_service", {"host": HOST, "unit": "at-port.service", "probes": [
            {"kind": "http", "url": "http://127.0.0.1:39917/"}]})
        _, st = await model.read("job_status", {"job_id": restart["job_id"], "wait_s": 30})
        assert st["readiness"] == "ready", st
        await model.read("run_command", {"host": HOST, "command": "systemctl stop at-port", "budget_s": 30})
        text, err = await model.read("http_get", {"host": HOST, "url": "http://127.0.0.1:39917/"})
        # the unit is stopped: the same GET is refused until it runs again, so not retryable
        assert (err["kind"], err["retryable"]) == ("connection_refused", False), text
        assert "at-port.service is inactive/dead" in err["message"], text
        assert f"service_status(host='{HOST}', unit='at-port.service')" in err["message"]
        host = HostRegistry(ssh_config=[str(systemd_hosts.ssh_config)]).get(HOST)
        await run_on(host, f"rm -f {path}; systemctl daemon-reload")
        await host.aclose()
