"""Issue 15 (qa15 finding 1), on real systemd (nspawn test hosts) and read as an MCP client receives it: a probe
that cannot be checked is refused with the call, before anything runs; and one that fails while it is checked
(a job started by an older version that kept such a probe) is that probe's evidence, never an internal error of
job_status, list_jobs or restart_service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from agent_tools.errors import PolicyFileError
from agent_tools.hosts.base import run_on
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.policy.loader import load_policy_file
from agent_tools.tools.toolkit import Toolkit

from .test_agent_view import Model, model_for

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool

HOST = "at-h2"
UNIT = "at-probe-err.service"
HTTPS = {"kind": "http", "url": "https://127.0.0.1:443/health"}


@asynccontextmanager
async def model_on(pool: HostPool, tmp_path: Path) -> AsyncIterator[tuple[Toolkit, Model]]:
    tk = Toolkit(HostRegistry(ssh_config=[str(pool.ssh_config)]), journal=Journal(tmp_path / "j.sqlite3"))
    async with tk, model_for(tk) as m:
        yield tk, m


async def _invocation(tk: Toolkit) -> str:
    res = await run_on(tk.hosts.get(HOST), f"systemctl show -p InvocationID --value {UNIT}")
    return res.stdout.decode().strip()


@pytest.mark.systemd
async def test_probes_that_cannot_be_checked_are_refused_before_anything_runs(
        systemd_hosts: HostPool, tmp_path: Path) -> None:
    async with model_on(systemd_hosts, tmp_path) as (tk, model):
        await model.read("write_file", {"host": HOST, "path": f"/etc/systemd/system/{UNIT}", "content":
                                        "[Service]\nType=simple\nExecStart=/bin/sleep infinity\n"})
        _, started = await model.read("run_command", {"host": HOST, "budget_s": 30, "command":
                                                      f"systemctl daemon-reload && systemctl restart {UNIT}"})
        assert started["exit_status"] == 0, started
        before = await _invocation(tk)
        for probe, says in ((HTTPS, "https is not supported (no TLS)"),
                            ({"kind": "http", "url": "http://127.0.0.1:99999/"}, "invalid port"),
                            ({"kind": "log", "unit": UNIT, "pattern": "ready ("}, "not a valid regular expression")):
            text, out = await model.read("restart_service", {"host": HOST, "unit": UNIT, "probes": [probe]})
            assert out["outcome"] == "error" and out["kind"] == "bad_arguments", text
            assert says in out["message"] and "probes.0" in out["message"], text
            assert "internal" not in text and "Value error" not in text, text
            text, out = await model.read("wait_for", {"host": HOST, "probes": [probe], "deadline_s": 2})
            assert out["outcome"] == "error" and out["kind"] == "bad_arguments" and says in out["message"], text
        assert await _invocation(tk) == before  # nothing was restarted
        _, jobs = await model.read("list_jobs", {"host": HOST, "limit": 100})
        mine = next(j for j in jobs["jobs"] if j["job_id"] == started["job_id"])
        later = [j["command"] for j in jobs["jobs"] if j["created_at"] > mine["created_at"]]
        assert later == [], jobs  # no job was launched after the test's own start
        await run_on(tk.hosts.get(HOST), f"systemctl stop {UNIT}; rm -f /etc/systemd/system/{UNIT}; "
                                         "systemctl daemon-reload")


@pytest.mark.systemd
async def test_a_probe_that_fails_to_check_is_its_own_evidence_not_an_internal_error(
        systemd_hosts: HostPool, tmp_path: Path) -> None:
    """A job's probes kept in the journal by a version that took an https URL and a malformed regex: its
    job_status, list_jobs(host) and the CLI still answer, the other probe still reports."""
    async with model_on(systemd_hosts, tmp_path) as (tk, model):
        await model.read("write_file", {"host": HOST, "path": f"/etc/systemd/system/{UNIT}", "content":
                                        "[Service]\nType=simple\nExecStart=/bin/sleep infinity\n"})
        unit_probe = {"kind": "systemd_unit", "unit": UNIT, "settle_s": 0}
        bad_log = {"kind": "log", "unit": UNIT, "pattern": "ready ("}
        out = await tk.run_command(host=HOST, budget_s=30,
                                   command=f"systemctl daemon-reload && systemctl restart {UNIT}",
                                   _probes=[unit_probe, HTTPS, bad_log])  # as an older version kept them
        assert out.outcome == "finished" and out.job_id, out
        text, st = await model.read("job_status", {"job_id": out.job_id, "wait_s": 5})
        assert st.get("outcome") != "error", text  # was: internal ... ExceptionGroup ... this is a bug
        assert st["state"] == "exited" and st["exit_status"] == 0, text
        probes = {p["kind"]: p for p in st["probes"]}
        assert probes["systemd_unit"]["state"] == "passed", text
        assert probes["http"]["state"] == "failed" and "https is not supported" in probes["http"]["evidence"], text
        assert probes["log"]["state"] == "failed" and "not a valid regular expression" in probes["log"]["evidence"]
        # why names the probes that decided; their evidence is said once, in probes
        assert st["readiness"] == "failed" and "http https://127.0.0.1:443/health" in st["why"], text
        assert "read the evidence (why, and each probe's evidence)" in st["next"], text
        text, jobs = await model.read("list_jobs", {"host": HOST})
        assert jobs.get("outcome") != "error" and out.job_id in text, text
        await run_on(tk.hosts.get(HOST), f"systemctl stop {UNIT}; rm -f /etc/systemd/system/{UNIT}; "
                                         "systemctl daemon-reload")


def test_a_policy_rule_with_a_probe_that_cannot_be_checked_is_refused_at_load(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\nhosts: ['*']\nrules:\n  - id: restart\n    match: [systemctl, restart, '{unit}']\n"
                      "    decision: allow\n    probes:\n      - {kind: systemd_unit, unit: '{unit}'}\n"
                      "      - {kind: http, url: 'https://127.0.0.1:30000/health'}\n")
    with pytest.raises(PolicyFileError, match=r"probes\[1\]: invalid http probe: url: https is not supported"):
        load_policy_file(policy)
    policy.write_text(policy.read_text().replace("https://127.0.0.1:30000", "http://127.0.0.1:{port}"))
    with pytest.raises(PolicyFileError, match=r"probes use \{port\}"):
        load_policy_file(policy)
