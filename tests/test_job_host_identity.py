"""Issue 15: jobs are followed on the machine they were started on, whatever the config says later.

A job started with ``-F cfg`` (or ``$AGENT_TOOLS_SSH_CONFIG``) is listed with ``agent-tools jobs HOST`` without
``-F`` as well as followed with ``status``; when the alias in that config is re-pointed at another machine, the
tools say they cannot tell (the host key differs from the one recorded at launch) instead of calling the job
``lost`` — and the job, still running on its own machine, is followed again once the config is restored. Real
systemd test hosts (two machines with their own host keys); each CLI call is its own process.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import agent_tools
from agent_tools.testing import ssh_config_block
from tests.hosts.nspawn import HostPool

REPO = Path(agent_tools.__file__).resolve().parent.parent


def _config(pool: HostPool, address: str) -> str:
    return ssh_config_block("gpu", hostname=address, user="root", identity_file=pool.identity_file,
                            known_hosts=pool.known_hosts)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()  # no ~/.ssh/config: the alias exists only in the config the job was started with
    return {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(home), "AGENT_TOOLS_STATE_DIR": str(tmp_path / "st"),
            "AGENT_TOOLS_SSH_CONFIG": ""}


def _cli(env: dict[str, str], *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_tools.cli", *args], env={**env, **extra},
                          capture_output=True, text=True, timeout=90)


def _state(env: dict[str, str], job_id: str) -> str:
    db = sqlite3.connect(Path(env["AGENT_TOOLS_STATE_DIR"]) / "journal.sqlite3")
    try:
        (state,) = db.execute("SELECT state FROM jobs WHERE job_id=?", (job_id,)).fetchone()
    finally:
        db.close()
    return str(state)


@pytest.mark.parametrize("how", ["-F", "AGENT_TOOLS_SSH_CONFIG"])
def test_jobs_host_is_listed_without_the_config_again(systemd_hosts: HostPool, env: dict[str, str], tmp_path: Path,
                                                      how: str) -> None:
    cfg = tmp_path / "cfg"
    cfg.write_text(_config(systemd_hosts, systemd_hosts.address(2)))
    args, extra = (["-F", str(cfg)], {}) if how == "-F" else ([], {"AGENT_TOOLS_SSH_CONFIG": str(cfg)})
    started = json.loads(_cli(env, "run", *args, "--budget", "0.5", "--json", "gpu", "--", "sleep 30", **extra).stdout)
    assert started["outcome"] == "detached", started
    listed = _cli(env, "jobs", "gpu", "--json")  # no -F, no $AGENT_TOOLS_SSH_CONFIG
    data = json.loads(listed.stdout)
    assert [j["state"] for j in data.get("jobs", []) if j["job_id"] == started["job_id"]] == ["running"], listed.stdout
    assert "refreshed from gpu" in data["note"]  # the host itself answered (other job directories may be listed)
    assert _cli(env, "cancel", started["job_id"], "--grace", "1").returncode == 0


def test_an_alias_re_pointed_at_another_machine_does_not_make_the_job_lost(
        systemd_hosts: HostPool, env: dict[str, str], tmp_path: Path) -> None:
    pool = systemd_hosts
    cfg = tmp_path / "cfg"
    cfg.write_text(_config(pool, pool.address(2)))
    started = json.loads(_cli(env, "run", "-F", str(cfg), "--budget", "0.5", "--json", "gpu", "--",
                              "sleep 45; echo finished-ok").stdout)
    job = started["job_id"]
    assert started["outcome"] == "detached", started

    cfg.write_text(_config(pool, pool.address(1)))  # the alias now reaches at-h1, another machine
    status = _cli(env, "status", job, "--json")
    data = json.loads(status.stdout)
    assert (data["outcome"], data["kind"], data["retryable"]) == ("error", "host_changed", False), data
    assert "now reaches another machine" in data["message"] and "changed since" in data["message"]
    assert "changed since" not in status.stderr  # said once, in the result
    listed = json.loads(_cli(env, "jobs", "gpu", "--json").stdout)
    assert [j["state"] for j in listed["jobs"] if j["job_id"] == job] == ["running"], listed
    assert "started on another machine" in listed["note"]
    assert _state(env, job) == "running"  # nothing concluded, nothing stored
    running = pool.run("at-h2", f"cat /proc/$(cut -d' ' -f1 ~/.local/state/agent-tools/jobs/{job}/pid)/cmdline",
                       check=True).stdout
    assert "sleep" in running  # ground truth: it runs on at-h2 all along

    cfg.write_text(_config(pool, pool.address(2)))  # restored: followed again, on its machine
    again = json.loads(_cli(env, "status", job, "--json").stdout)
    assert again["state"] == "running", again
    cancel = json.loads(_cli(env, "cancel", job, "--grace", "1", "--json").stdout)
    assert cancel["state"] == "killed" and cancel["survivors"] == [], cancel
