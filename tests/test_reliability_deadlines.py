"""Issue 12 item 4: deadlines are enforced on the host, by the job's monitor, so they hold with the controller gone.

Part of the fault suite (``scripts/reliability_report.py`` runs every ``tests/test_reliability*.py``): each test
records its fault, trials and what was checked as user properties.

Real parts: the OpenSSH sshd on loopback (``real_sshd``) with a controller process killed with ``kill -9``
mid-job; this machine (``local``) through the CLI; the nspawn systemd hosts for the unit-derived deadline
(TimeoutStartUSec from ``systemctl show``). Ground truth for "its whole tree is gone" is read from ``/proc``
(the sshd's test user runs on this machine; ``pool.run`` inside the systemd host).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.factory import load_policies
from agent_tools.tools.toolkit import Toolkit

from .reliability_harness import REPO, Rel, child_env, dump, on_host, rel, wait_until
from .sshd import RealSshd

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool

__all__ = ["rel"]  # the fixture, imported for its use here

def _policy(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "policy.yaml"
    p.write_text(text)
    return p


def _alive(marker: str) -> list[int]:
    """Pids on this machine whose command line holds ``marker`` (the test's unique sleep)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if marker in cmdline and stat.rsplit(")", 1)[1].split()[0] != "Z" and "pytest" not in cmdline:
                found.append(int(entry))
    return found


@pytest.mark.sshd
async def test_policy_deadline_kills_with_the_controller_gone(real_sshd: RealSshd, child_script: Path, tmp_path: Path,
                                                              rel: Rel) -> None:
    """Fault: the controller process is killed (``kill -9``) while its job runs past the policy's
    ``hard_deadline_s``; the job left a grandchild in a session of its own that ignores TERM. Protection: the
    job's monitor on the host kills the whole tree at the deadline (TERM, then KILL): nothing of it is left, and
    a new controller reads ``killed`` by ``deadline`` with the output kept, and an ``elapsed_s`` that stays the
    same on every later look. Without the monitor's deadline watcher the job runs on for its 100 s."""
    rel.set(fault="deadline with the controller gone (kill -9 of the controller mid-job)", trials=1,
            checked="job killed on the host at its policy deadline; TERM-ignoring setsid grandchild gone; "
                    "killed by deadline, output kept, elapsed_s constant")
    marker = f"{7000 + secrets.randbelow(999)}.{secrets.randbelow(9) + 1}"
    policy = _policy(tmp_path, "version: 1\nhosts: ['*']\ndefaults: {hard_deadline_s: 3, decision: allow}\n")
    command = (f"echo started; (setsid sh -c 'trap \"\" TERM; exec sleep {marker}' &); "
               "trap '' TERM; sleep 100; echo never")
    journal = tmp_path / "journal.sqlite3"
    # the child controller stays alive after its launch (hold) and never closes anything: killed with SIGKILL
    cfg = {"ssh_config": str(real_sshd.config_path), "journal": str(journal), "policy": str(policy),
           "host": real_sshd.alias, "hold": True,
           "jobs": [{"tag": "job", "command": command, "budget_s": 0.5, "result": True}]}
    proc = await anyio.to_thread.run_sync(lambda: subprocess.Popen(
        [sys.executable, str(child_script), json.dumps(cfg)], stdout=subprocess.PIPE, env=child_env(), cwd=REPO))
    try:
        assert proc.stdout is not None
        line = await anyio.to_thread.run_sync(proc.stdout.readline)
        while line.strip() == b"READY":
            line = await anyio.to_thread.run_sync(proc.stdout.readline)
        out = json.loads(line)["result"]
        assert out["outcome"] == "detached", out
        assert out["hard_deadline_s"] == 3 and "the host kills it 3 s after its start" in out["why"], out
        assert _alive(marker), "the grandchild should be running before the deadline"
    finally:
        proc.send_signal(signal.SIGKILL)  # the controller is gone from here on
        await anyio.to_thread.run_sync(proc.wait)
    await wait_until(lambda: _none_alive(marker), 30, "the job's tree to be killed on the host")
    tk = Toolkit(HostRegistry(ssh_config=[str(real_sshd.config_path)]), journal=Journal(journal))
    try:
        looks = [dump(await tk.job_status(job_id=out["job_id"])) for _ in range(3)]
        st = looks[0]
        assert st["state"] == "killed" and st["by"] == "deadline", st
        assert "3 s deadline" in st["why"] and "defaults of policy.yaml" in st["why"], st["why"]
        # nothing of what the kill found survived; this host (no systemd, a login that set the audit loginuid) gives
        # the job no cgroup and no audit session, so the check says what it could not see instead of "no survivors"
        assert "none of what it found survived" in st["why"] and "no survivors" not in st["why"], st["why"]
        assert "does not run systemd" in st["unchecked"] and "env -i" in st["unchecked"], st
        assert st["exit_status"] in (143, 137), st
        page = dump(await tk.job_output(job_id=out["job_id"]))
        assert page["text"] == "started\n", page  # the output is kept; nothing ran past the kill
        assert st["elapsed_s"] >= 3.0, st  # never killed before its deadline
        assert len({s["elapsed_s"] for s in looks}) == 1, f"elapsed_s changed between looks: {looks}"
        rows: list[dict[str, object]] = []
        offset: int | None = 0  # other tests' jobs on the shared sshd user can be newer: page through them all
        while offset is not None and not any(j["job_id"] == out["job_id"] for j in rows):
            listing = dump(await tk.list_jobs(host=real_sshd.alias, state="killed", limit=50, offset=offset))
            rows += listing["jobs"]
            offset = listing.get("next_offset")
        row = next(j for j in rows if j["job_id"] == out["job_id"])
        assert row["by"] == "deadline" and row["state"] == "killed", row  # (list_jobs rows carry no summary)
        rel.set(elapsed_s=st["elapsed_s"])
    finally:
        await tk.aclose()
    assert not _alive(marker)


async def _none_alive(marker: str) -> bool:
    return not _alive(marker)


@pytest.mark.sshd
async def test_smaller_of_call_and_policy_deadline_applies(real_sshd: RealSshd, tmp_path: Path, rel: Rel) -> None:
    """Fault: a command that runs past its deadline while the call still waits (budget longer than the
    deadline). Protection: the smaller of the call's ``deadline_s`` and the policy's ``hard_deadline_s`` (a
    rule's own, else the defaults') kills it on the host; the launcher reports that in the same round trip as
    the exit (``killed`` by ``deadline`` before the budget), saying which deadline applied, output kept."""
    rel.set(fault="command past its deadline while the call waits (call deadline vs policy rule deadline)",
            trials=3, checked="killed by deadline at the smaller of call/rule deadline, reason names it; "
                              "output kept; a job within its deadline finishes")
    policy = _policy(tmp_path, "version: 1\nhosts: ['*']\ndefaults: {hard_deadline_s: 600, decision: allow}\n"
                               "rules:\n  - {id: quick-sleep, match: [sleep, '1000'], decision: allow, "
                               "hard_deadline_s: 1}\n")
    tk = Toolkit(HostRegistry(ssh_config=[str(real_sshd.config_path)]), journal=Journal(tmp_path / "j.sqlite3"),
                 policy=load_policies([str(policy)]))
    try:
        by_call = dump(await tk.run_command(host=real_sshd.alias, command="echo one; sleep 999", budget_s=20,
                                            deadline_s=1.5))
        assert by_call["outcome"] == "killed" and by_call["by"] == "deadline", by_call
        assert "1.5 s deadline (this call's deadline_s, not the policy's hard_deadline_s of 600 s" in \
            by_call["reason"], by_call["reason"]
        assert by_call["stdout"]["text"] == "one\n" and by_call["survivors"] == [], by_call
        by_rule = dump(await tk.run_command(host=real_sshd.alias, command="echo two && sleep 1000", budget_s=20,
                                            deadline_s=30))
        assert by_rule["outcome"] == "killed" and by_rule["by"] == "deadline", by_rule
        assert "1 s deadline (the policy's hard_deadline_s from the rule quick-sleep of policy.yaml" in \
            by_rule["reason"], by_rule["reason"]
        st = dump(await tk.job_status(job_id=by_rule["job_id"]))
        assert st["state"] == "killed" and st["by"] == "deadline" and st["hard_deadline_s"] == 1, st
        quick = dump(await tk.run_command(host=real_sshd.alias, command="echo three", budget_s=20, deadline_s=30))
        assert quick["outcome"] == "finished" and quick["exit_status"] == 0, quick  # a deadline not reached
    finally:
        await tk.aclose()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_tools.cli", *args], capture_output=True, text=True,
                          env=child_env(), cwd=REPO, timeout=60, check=False)


def test_cli_deadline_and_explain(tmp_path: Path, rel: Rel) -> None:
    """Fault: a command past the deadline given on the command line (``agent-tools run --deadline S``, this
    machine). Protection: killed on the host at S, ``killed by deadline`` in ``status``; ``policy explain`` says,
    in words, the deadline that will apply (it printed ``deadline None`` while the setting did nothing)."""
    rel.set(fault="CLI --deadline on the local host; policy explain of hard_deadline_s", trials=1,
            checked="killed by deadline, output kept, nothing left; explain names the kill deadline and its file")
    marker = f"{8000 + secrets.randbelow(999)}.{secrets.randbelow(9) + 1}"
    res = _cli("run", "--json", "--deadline", "1", "local", "--", f"echo hi; sleep {marker}")
    out: dict[str, Any] = json.loads(res.stdout)
    assert out["outcome"] == "killed" and out["by"] == "deadline", out
    assert out["stdout"]["text"] == "hi\n" and not _alive(marker), out
    status = _cli("status", out["job_id"])
    assert "killed by deadline" in status.stdout, status.stdout
    policy = _policy(tmp_path, "version: 1\nhosts: ['*']\ndefaults: {hard_deadline_s: 3, decision: allow}\n")
    explain = _cli("policy", "explain", "--policy", str(policy), "local", "--", "sleep", "100")
    words = " ".join(explain.stdout.split())
    assert "killed on the host 3 s after it starts, detached or not" in words, words
    assert "defaults of policy.yaml" in words and "None" not in words, words


# ------------------------------------------------------------------------------------- the unit's own deadline
@pytest.mark.systemd
async def test_unit_deadline_kills_a_queued_restart(systemd_hosts: HostPool, tmp_path: Path, rel: Rel) -> None:
    """Fault: a blocking restart stuck behind another unit's start job (``After=`` ordering waits for it; the
    unit's own TimeoutStartSec does not run while its job waits in the queue). Protection: killed on the host at
    the unit-derived deadline (TimeoutStartUSec from ``systemctl show`` + 30 s, policy ``deadline_from:
    unit_timeout``); ``restart_service`` launches its job with that deadline too."""
    rel.set(fault="restart queued behind a unit that never finishes starting (systemd host)", trials=1,
            checked="restart_service armed with TimeoutStartSec + 30 s; the queued systemctl killed by deadline "
                    "at it, no systemctl left")
    from .test_reliability_readiness import install_unit

    pool, host = systemd_hosts, "at-h1"
    await install_unit(pool, host, "dl-slow.service",
                       "Type=oneshot\nExecStart=/bin/sleep 300\nTimeoutStartSec=infinity")
    await install_unit(pool, host, "dl-late.service", "Type=oneshot\nExecStart=/bin/true\nTimeoutStartSec=2",
                       unit="After=dl-slow.service")
    policy = _policy(tmp_path, "version: 1\nhosts: ['*']\ndefaults: {decision: allow}\nrules:\n"
                               "  - {id: restart-unit, match: [systemctl, restart, '{unit}'], decision: allow, "
                               "detach: immediately, deadline_from: unit_timeout, "
                               "probes: [{kind: systemd_unit, unit: '{unit}'}]}\n")
    tk = Toolkit(HostRegistry(ssh_config=[str(pool.ssh_config)]), journal=Journal(tmp_path / "j.sqlite3"),
                 policy=load_policies([str(policy)]))
    try:
        res = await on_host(pool, host, "systemctl start --no-block dl-slow.service")
        assert res.returncode == 0, res.stderr
        armed = dump(await tk.restart_service(host=host, unit="dl-late.service", daemon_reload=False))
        # 2 s + 30 s, read from the unit; the kill deadline is armed with the job (its result shows it only while the
        # command runs: this `systemctl restart --no-block` has exited)
        assert armed["deadline_s"] == 32, armed
        assert tk.journal.get(armed["job_id"]).meta["hard_deadline_s"] == 32, armed
        out = dump(await tk.run_command(host=host, command="systemctl restart dl-late.service"))
        assert out["outcome"] == "detached" and out["hard_deadline_s"] == 32, out
        assert "the unit's TimeoutStartSec + 30 s" in out["why"], out["why"]
        end = anyio.current_time() + 90
        while True:
            st = dump(await tk.job_status(job_id=out["job_id"], wait_s=10))
            if st["state"] != "running" or anyio.current_time() > end:
                break
        assert st["state"] == "killed" and st["by"] == "deadline", st
        assert st["elapsed_s"] >= 32, st
        left = await on_host(pool, host, "pgrep -fx 'systemctl restart dl-late.service' || true")
        assert left.stdout.strip() == "", left.stdout
    finally:
        await tk.aclose()
        await on_host(pool, host, "systemctl stop dl-slow.service dl-late.service; true")


@pytest.mark.systemd
async def test_deadline_kills_an_escaped_process_through_the_jobs_scope(systemd_hosts: HostPool, tmp_path: Path,
                                                                         rel: Rel) -> None:
    """Fault: ``(env -i setsid sleep N &); sleep M`` past its deadline: the sleep dropped the job's environment
    marker and left its session, so only the job's cgroup (its systemd scope) still holds it. Protection: the
    deadline watcher kills through the same at_cancel/at_targets a job_cancel runs, by the cgroup, so nothing of
    the job is left on the host, in the foreground (``killed`` by ``deadline``, nothing unchecked) and detached."""
    rel.set(fault="deadline passes on a job whose child escaped its session and marker (env -i setsid; systemd "
                  "host)", trials=2,
            checked="run_command killed by deadline with no survivors and nothing unchecked; a detached one killed "
                    "by deadline; pgrep finds neither sleep on the host")
    pool, name = systemd_hosts, "at-h1"
    alias = pool.hosts[name].ssh_alias
    tk = Toolkit(HostRegistry(ssh_config=[str(pool.ssh_config)]), journal=Journal(tmp_path / "j.sqlite3"))
    try:
        out = dump(await tk.run_command(host=alias, command="(env -i setsid sleep 791 &); sleep 501", budget_s=60,
                                        deadline_s=3))
        assert out["outcome"] == "killed" and out["by"] == "deadline", out
        assert out["survivors"] == [] and out["unchecked"] == "", out  # seen through the scope's cgroup
        left = await on_host(pool, name, "pgrep -f '^sleep (791|501)$' || true")
        assert left.stdout.split() == [], f"left on the host past the deadline: {left.stdout}"

        out = dump(await tk.run_command(host=alias, command="(env -i setsid sleep 792 &); sleep 502", budget_s=1,
                                        deadline_s=4))
        assert out["outcome"] == "detached" and out["hard_deadline_s"] == 4, out
        end = anyio.current_time() + 60
        while True:
            st = dump(await tk.job_status(job_id=out["job_id"], wait_s=10))
            if st["state"] != "running" or anyio.current_time() > end:
                break
        assert st["state"] == "killed" and st["by"] == "deadline", st
        assert "no survivors" in st["why"], st["why"]
        left = await on_host(pool, name, "pgrep -f '^sleep (792|502)$' || true")
        assert left.stdout.split() == [], f"left on the host past the deadline: {left.stdout}"
    finally:
        await tk.aclose()
        await on_host(pool, name, "pkill -f '^sleep (791|792|501|502)$'; true")


# ------------------------------------------------------------------------------- durations freeze at exit
@pytest.mark.sshd
async def test_killed_job_elapsed_is_the_hosts_run_time(real_sshd: RealSshd, tmp_path: Path, rel: Rel) -> None:
    """Fault: a job cancelled or killed at its deadline, looked at again later. Protection: its ``elapsed_s``
    is the run time the monitor recorded on the host (the ``exit`` file's uptimes at start and end), exactly,
    and stays so (a cancel used to overwrite it with the moment the cancel call ended)."""
    import pwd

    rel.set(fault="late looks at cancelled and deadline-killed jobs", trials=2,
            checked="elapsed_s = the host's recorded run time, equal on every look")
    home = Path(pwd.getpwnam(real_sshd.user).pw_dir)
    tk = Toolkit(HostRegistry(ssh_config=[str(real_sshd.config_path)]), journal=Journal(tmp_path / "j.sqlite3"))
    try:
        cancelled = dump(await tk.run_command(host=real_sshd.alias, command="sleep 300", budget_s=0.3))
        assert cancelled["outcome"] == "detached", cancelled
        assert dump(await tk.job_cancel(job_id=cancelled["job_id"], grace_s=1))["state"] == "killed"
        by_deadline = dump(await tk.run_command(host=real_sshd.alias, command="sleep 300", budget_s=0.3,
                                                deadline_s=1))
        await wait_until(lambda: _exited(home, by_deadline["job_id"]), 30, "the deadline kill")
        for job in (cancelled, by_deadline):
            t0, t1 = (home / ".local/state/agent-tools/jobs" / job["job_id"] / "exit").read_text().split()[1:3]
            looks = [dump(await tk.job_status(job_id=job["job_id"]))["elapsed_s"] for _ in range(3)]
            assert looks == [round(float(t1) - float(t0), 2)] * 3, (job["job_id"], looks, t0, t1)
    finally:
        await tk.aclose()


async def _exited(home: Path, job_id: str) -> bool:
    return (home / ".local/state/agent-tools/jobs" / job_id / "exit").is_file()
