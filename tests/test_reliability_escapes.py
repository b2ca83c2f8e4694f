"""Fault suite (``scripts/reliability_report.py``), qa12 findings 1-6 and 9: every process of a job is found,
whatever it does to its cgroup, session or environment; deadlines cover what a command left running; leftovers are
reported after a detach; a job that dies at logout says so.

A root job has an audit session of its own (the job's first process sets its loginuid: a new session id that every
process it starts keeps, whatever it does to its cgroup, session or environment; proc(5), audit), so a cancel or a
deadline finds processes that ``systemd-run --scope`` or ``su``/``su -`` (pam_systemd) moved out of the job's
scope, and says "no survivors" with nothing unchecked. A user cannot start an audit session once its login set
the loginuid: those jobs are found by their cgroup (when they have one), process group and session, marker, the
monitor's lineage record and parentage, and every check says what it could not see.

Real parts: the nspawn systemd hosts (root and ``agent`` logins over their real sshd, logind); ground truth is read
on the host (``pgrep``/``ps`` through nsenter).
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from agent_tools.outcomes import Detached, Finished, result_view

from .reliability_harness import Rel, dump, on_host, rel, toolkit_for, wait_until

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool

__all__ = ["rel"]  # the fixture, imported for its use here

pytestmark = pytest.mark.systemd


def _n() -> int:
    """A sleep length no other test uses (the ground truth greps for it)."""
    return 70000 + secrets.randbelow(29999)


async def _pids(pool: HostPool, name: str, n: int) -> list[str]:
    """Pids of ``sleep N`` on the host (exact command line, also as /usr/bin/sleep), ground truth."""
    res = await on_host(pool, name, f"pgrep -f '^(/usr/bin/)?sleep {n}$' || true")
    return res.stdout.split()


async def _started(pool: HostPool, name: str, n: int) -> None:
    async def up() -> bool:
        return bool(await _pids(pool, name, n))

    await wait_until(up, 20, f"sleep {n} on the host")


ESCAPES = [  # (how the process leaves the job, command with {n})
    ("systemd-run --scope (a sibling)", "systemd-run --scope --quiet sleep {n} & sleep 500"),
    ("systemd-run --scope (the command itself)", "systemd-run --scope --quiet -p MemoryMax=1G sleep {n}"),
    ("su (pam_systemd session)", 'su agent -c "sleep {n}" & sleep 500'),
    ("su - (the command itself)", 'su - agent -c "sleep {n}"'),
    ("systemd-run --scope, setsid, env -i, parent gone", "(systemd-run --scope --quiet setsid env -i sleep {n} &); "
                                                         "sleep 500"),
    ("su - with a setsid daemon, su gone", 'su - agent -c "setsid sleep {n} &"; sleep 500'),
]


@pytest.mark.parametrize(("how", "command"), ESCAPES, ids=[e[0] for e in ESCAPES])
async def test_cancel_finds_processes_that_left_the_jobs_cgroup(systemd_hosts: HostPool, tmp_path: Path, rel: Rel,
                                                               how: str, command: str) -> None:
    """Fault: a root job's process leaves the job's scope (another scope, a logind session), its session and its
    environment. Protection: the job's own audit session, process group and session, marker and parentage find
    it: the cancel kills it, and "no survivors" is said with nothing unchecked only because it is true."""
    rel.set(fault=f"a process of a root job leaves its cgroup: {how}", trials=1,
            checked="job_cancel: no survivors, nothing unchecked, the process gone on the host")
    pool, name = systemd_hosts, "at-h1"
    n = _n()
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
            out = await tk.run_command(host=pool.hosts[name].ssh_alias, command=command.format(n=n), budget_s=1.5)
            assert isinstance(out, Detached), result_view(out)
            await _started(pool, name, n)
            res = await tk.job_cancel(job_id=out.job_id, grace_s=1)
            assert res.state == "killed" and res.survivors == [], result_view(res)
            assert "no survivors" in res.message and res.unchecked == "", result_view(res)
            assert await _pids(pool, name, n) == [], f"sleep {n} survived the cancel"
            st = await tk.job_status(job_id=out.job_id)
            assert st.state == "killed" and st.by == "cancel", result_view(st)
    finally:
        await on_host(pool, name, f"pkill -f '^(/usr/bin/)?sleep ({n}|500)$'; true")


HANDED_ON = [  # (how the job hands a process on, command with {n}; {key}: a key the job may use to ssh to root)
    ("a new loginuid, setsid, env -i, systemd-run --scope, double fork, output closed",
     "(echo 0 > /proc/self/loginuid; exec setsid env -i systemd-run --scope --quiet sleep {n} </dev/null >/dev/null "
     "2>&1 &); sleep 500"),
    ("systemd-run --unit (a transient service PID 1 starts)",
     "systemd-run --quiet --unit=at-esc-{n} sleep {n}; sleep 500"),
    ("ssh root@localhost (a login sshd starts)",
     "ssh -i {key} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes root@127.0.0.1 "
     "'setsid nohup sleep {n} >/dev/null 2>&1 &' 2>/dev/null; sleep 500"),
]


@pytest.mark.parametrize(("how", "command"), HANDED_ON, ids=[e[0] for e in HANDED_ON])
@pytest.mark.parametrize("by", ["cancel", "deadline"])
async def test_a_kill_names_what_the_job_handed_on_instead_of_no_survivors(systemd_hosts: HostPool, tmp_path: Path,
                                                                          rel: Rel, how: str, command: str,
                                                                          by: str) -> None:
    """Fault (qa12c #1): a root job's process leaves every grouping of the job (a new audit session written to
    /proc/self/loginuid, another scope, a new session, no environment, its parent gone, its output closed), or the
    job has systemd or sshd start it (a transient service, a login). No check can tie such a process to the job,
    and the kill used to say "no survivors" while it ran. Protection: the kill's look for what the job handed on
    lists the processes that started while the job ran in a unit, login or audit session of their own: the result
    names them (pid, command, unit) with the call that stops them, in ``unchecked``, and never says "no
    survivors"; that call stops them."""
    rel.set(fault=f"a root job hands a process on: {how}; killed by {by}", trials=1,
            checked="the kill says what still runs (pid, unit, stop call) instead of 'no survivors'; the call stops it")
    pool, name = systemd_hosts, "at-h1"
    n = _n()
    key = f"/tmp/at-key-{n}"
    await on_host(pool, name, f"ssh-keygen -q -N '' -C at-test-{n} -f {key} && "
                              f"cat {key}.pub >> /root/.ssh/authorized_keys")
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
            alias = pool.hosts[name].ssh_alias
            out = await tk.run_command(host=alias, command=command.format(n=n, key=key), budget_s=1.5,
                                       deadline_s=4 if by == "deadline" else None)
            assert isinstance(out, Detached), result_view(out)
            await _started(pool, name, n)
            if by == "cancel":
                res = await tk.job_cancel(job_id=out.job_id, grace_s=1)
                assert res.state == "killed" and res.survivors == [], result_view(res)
                text, unchecked = res.message, res.unchecked
                assert "handed to systemd or a login still run" in text, result_view(res)
            else:
                st = await tk.job_status(job_id=out.job_id, wait_s=15)
                assert st.state == "killed" and st.by == "deadline", result_view(st)
                text, unchecked = st.why, st.unchecked
            assert "no survivors" not in text, text
            pids = await _pids(pool, name, n)
            assert len(pids) == 1 and f"{pids[0]} '" in unchecked and f"sleep {n}" in unchecked, unchecked
            stop = re.search(r"command='([^']+)'", unchecked)
            assert stop is not None and stop.group(1).startswith("systemctl stop "), unchecked
            done = await tk.run_command(host=alias, command=stop.group(1), budget_s=20)
            assert isinstance(done, Finished) and done.exit_status == 0, result_view(done)

            async def gone() -> bool:
                return not await _pids(pool, name, n)

            await wait_until(gone, 10, f"sleep {n} stopped by the call the kill named")
    finally:
        await on_host(pool, name, f"pkill -f '^(/usr/bin/)?sleep ({n}|500)$'; sed -i '/at-test-{n}$/d' "
                                  f"/root/.ssh/authorized_keys; rm -f {key} {key}.pub; true")


async def test_a_process_holding_the_jobs_output_is_the_jobs_wherever_it_went(systemd_hosts: HostPool,
                                                                              tmp_path: Path, rel: Rel) -> None:
    """Fault (qa12c #1): as above, but the escaped process still writes to the job's stdout. Protection: a process
    holding a file of the job directory open is the job's whatever it did: the cancel kills it and says "no
    survivors" only because it is true."""
    rel.set(fault="a root job's process leaves every grouping but keeps the job's output open", trials=1,
            checked="job_cancel kills it (host pgrep), no survivors")
    pool, name = systemd_hosts, "at-h1"
    n = _n()
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
            out = await tk.run_command(host=pool.hosts[name].ssh_alias, budget_s=1.5, command=(
                f"(echo 0 > /proc/self/loginuid; exec setsid env -i systemd-run --scope --quiet sleep {n} &); "
                "sleep 500"))
            assert isinstance(out, Detached), result_view(out)
            await _started(pool, name, n)
            pid = int((await _pids(pool, name, n))[0])
            res = await tk.job_cancel(job_id=out.job_id, grace_s=1)
            assert res.state == "killed" and pid in res.signalled and res.survivors == [], result_view(res)
            assert "no survivors" in res.message and res.unchecked == "", result_view(res)
            assert await _pids(pool, name, n) == [], f"sleep {n} survived the cancel"
    finally:
        await on_host(pool, name, f"pkill -f '^(/usr/bin/)?sleep ({n}|500)$'; true")


async def test_leftover_in_another_scope_is_reported_and_stopped(systemd_hosts: HostPool, tmp_path: Path,
                                                                 rel: Rel) -> None:
    """Fault: ``systemd-run --scope sleep N & echo started`` finishes, its sleep in a scope of its own. Protection:
    the look for leftovers goes by the job's audit session too: the sleep is listed as a leftover (with the call
    that stops it), and job_cancel on the finished job stops it."""
    rel.set(fault="a finished command left a process in another cgroup (systemd-run --scope)", trials=1,
            checked="listed in leftovers with job_cancel in next; job_cancel stops it (host pgrep)")
    pool, name = systemd_hosts, "at-h1"
    n = _n()
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
            out = await tk.run_command(host=pool.hosts[name].ssh_alias,
                                       command=f"systemd-run --scope --quiet sleep {n} & sleep 0.5; echo started",
                                       budget_s=10)
            assert isinstance(out, Finished) and out.exit_status == 0, result_view(out)
            assert [lo.command for lo in out.leftovers] == [f"/usr/bin/sleep {n}"], result_view(out)
            assert out.unchecked == "" and f"job_cancel(job_id='{out.job_id}')" in out.next, result_view(out)
            res = await tk.job_cancel(job_id=out.job_id, grace_s=1)
            assert res.state == "exited" and res.signalled == [out.leftovers[0].pid], result_view(res)
            assert await _pids(pool, name, n) == []
    finally:
        await on_host(pool, name, f"pkill -f '^(/usr/bin/)?sleep {n}$'; true")


async def test_user_scope_escape_is_found_and_what_is_unseen_is_said(systemd_hosts: HostPool, tmp_path: Path,
                                                                     rel: Rel) -> None:
    """Fault: a lingering user's job (a ``--user`` scope, no audit session of its own) starts a child in another
    scope (``systemd-run --user --scope``). Protection: the job's process group finds it and the cancel kills it;
    the cancel does not say "no survivors" but what it could not see."""
    rel.set(fault="a process of a user's job leaves its cgroup (systemd-run --user --scope)", trials=1,
            checked="job_cancel kills it (host pgrep); unchecked names the missing audit session")
    pool, name = systemd_hosts, "at-h1"
    n = _n()
    await on_host(pool, name, "loginctl enable-linger agent")
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
            out = await tk.run_command(host=pool.hosts[name].ssh_alias_agent,
                                       command=f"systemd-run --user --scope --quiet sleep {n} & sleep 500",
                                       budget_s=1.5)
            assert isinstance(out, Detached), result_view(out)
            await _started(pool, name, n)
            res = await tk.job_cancel(job_id=out.job_id, grace_s=1)
            assert res.state == "killed" and res.survivors == [], result_view(res)
            assert "no survivors" not in res.message and "no audit session" in res.unchecked, result_view(res)
            assert await _pids(pool, name, n) == [], f"sleep {n} survived the cancel"
    finally:
        await on_host(pool, name, f"pkill -f '^(/usr/bin/)?sleep ({n}|500)$'; loginctl disable-linger agent; true")


@pytest.mark.parametrize("command", ["systemd-run --scope --quiet sleep {n}", 'su agent -c "sleep {n}"'])
async def test_deadline_kills_what_left_the_cgroup_and_the_state_settles(systemd_hosts: HostPool, tmp_path: Path,
                                                                         rel: Rel, command: str) -> None:
    """Fault: a job whose only process left its scope runs past its deadline (the kill used to find nothing and the
    job read "running — being killed" for ever while the process ran on). Protection: the kill finds it (audit
    session, process group): the job reads killed by deadline, no survivors, and nothing runs on the host."""
    rel.set(fault="deadline of a job whose process left its cgroup", trials=1,
            checked="killed by deadline within 10 s, no survivors, nothing unchecked; the process gone on the host")
    pool, name = systemd_hosts, "at-h1"
    n = _n()
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
            out = await tk.run_command(host=pool.hosts[name].ssh_alias, command=command.format(n=n), budget_s=1,
                                       deadline_s=3)
            assert isinstance(out, Detached), result_view(out)
            st = await tk.job_status(job_id=out.job_id, wait_s=10)
            assert st.state == "killed" and st.by == "deadline", result_view(st)
            assert "no survivors" in st.why and st.unchecked == "", result_view(st)
            assert await _pids(pool, name, n) == [], f"sleep {n} outlived its deadline"
    finally:
        await on_host(pool, name, f"pkill -f '^(/usr/bin/)?sleep {n}$'; true")


async def test_without_cgroup_or_audit_session_every_check_says_what_it_could_not_see(systemd_hosts: HostPool,
                                                                                     tmp_path: Path,
                                                                                     rel: Rel) -> None:
    """Fault: a user without linger (no scope) and with its login's loginuid (no audit session of its own) leaves
    an ``env -i setsid`` orphan, once past a deadline and once from a command that finishes. Protection: the
    deadline kill and the look for leftovers say what they could not see (``unchecked``) instead of "no
    survivors" or nothing at all; job_status says the same later."""
    rel.set(fault="no cgroup and no audit session: env -i setsid orphan past a deadline and after a finish",
            trials=2, checked="unchecked set on the deadline kill, the finished result and job_status; never "
                              "'no survivors'")
    pool, name = systemd_hosts, "at-h1"
    n1, n2 = _n(), _n()
    await on_host(pool, name, "loginctl disable-linger agent")
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
            alias = pool.hosts[name].ssh_alias_agent
            out = await tk.run_command(host=alias, command=f"(env -i setsid sleep {n1} &); sleep 500", budget_s=1,
                                       deadline_s=3)
            assert isinstance(out, Detached), result_view(out)
            st = await tk.job_status(job_id=out.job_id, wait_s=15)
            assert st.state == "killed" and st.by == "deadline", result_view(st)
            assert "no survivors" not in st.why and "env -i" in st.unchecked, result_view(st)
            assert "enable-linger agent" in st.unchecked and "loginuid" in st.unchecked, result_view(st)

            fin = await tk.run_command(host=alias, command=f"(env -i setsid sleep {n2} &); echo ok", budget_s=10)
            assert isinstance(fin, Finished) and fin.exit_status == 0, result_view(fin)
            assert "env -i" in fin.unchecked, result_view(fin)
            again = await tk.job_status(job_id=fin.job_id)
            assert again.state == "exited" and again.unchecked == fin.unchecked, result_view(again)
    finally:
        await on_host(pool, name, f"pkill -f '^(/usr/bin/)?sleep ({n1}|{n2}|500)$'; true")


async def test_leftovers_after_a_detach_are_reported_by_job_status_and_list_jobs(systemd_hosts: HostPool,
                                                                               tmp_path: Path, rel: Rel) -> None:
    """Fault: a command that detached exits leaving a process running (and one that finished within its budget).
    Protection: the monitor records what is left when the command ends and its watcher keeps that current:
    job_status says so (leftovers, the job_cancel call; never "done"), list_jobs(host) lists it and names the
    call, list_jobs() says its rows are as last recorded; the run result's leftovers stay visible later."""
    rel.set(fault="leftovers of a command that ended after it detached", trials=2,
            checked="job_status and list_jobs report them with job_cancel; gone after job_cancel (host pgrep)")
    pool, name = systemd_hosts, "at-h1"
    n1, n2 = _n(), _n()
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
            alias = pool.hosts[name].ssh_alias
            out = await tk.run_command(host=alias, command=f"sleep {n1} & sleep 2; echo started", budget_s=1)
            assert isinstance(out, Detached), result_view(out)
            st = await tk.job_status(job_id=out.job_id, wait_s=15)
            assert st.state == "exited" and st.exit_status == 0, result_view(st)
            assert [lo.command for lo in st.leftovers] == [f"sleep {n1}"], result_view(st)
            assert f"job_cancel(job_id='{out.job_id}')" in st.next and "done" not in st.next, result_view(st)
            rows = dump(await tk.list_jobs(host=alias))
            row = next(j for j in rows["jobs"] if j["job_id"] == out.job_id)
            assert row["leftovers"] == [st.leftovers[0].pid], rows
            assert f"job_cancel(job_id='{out.job_id}')" in rows["note"], rows
            everywhere = dump(await tk.list_jobs())
            assert "as last recorded" in everywhere["note"], everywhere

            fin = await tk.run_command(host=alias, command=f"sleep {n2} & echo ok", budget_s=10)
            assert isinstance(fin, Finished) and fin.leftovers, result_view(fin)
            for _ in range(2):
                later = await tk.job_status(job_id=fin.job_id)
                assert later.leftovers == fin.leftovers and "job_cancel" in later.next, result_view(later)
            await tk.job_cancel(job_id=out.job_id, grace_s=1)
            await tk.job_cancel(job_id=fin.job_id, grace_s=1)
            gone = await tk.job_status(job_id=out.job_id)
            assert gone.leftovers == [] and "job_cancel" not in gone.next, result_view(gone)
            rows = dump(await tk.list_jobs(host=alias))
            assert all(not j.get("leftovers") for j in rows["jobs"] if j["job_id"] in (out.job_id, fin.job_id)), rows
            assert await _pids(pool, name, n1) == [] and await _pids(pool, name, n2) == []
    finally:
        await on_host(pool, name, f"pkill -f '^(/usr/bin/)?sleep ({n1}|{n2})$'; true")


async def test_hard_deadline_covers_what_the_command_left_running(systemd_hosts: HostPool, tmp_path: Path,
                                                                  rel: Rel) -> None:
    """Fault: a command with a hard deadline puts its work in the background and exits (the deadline used to stop
    applying). Protection: the job's watcher on the host follows what it left running and kills it at the
    deadline; the run result says so, and job_status reports it later."""
    rel.set(fault="leftovers past a hard deadline", trials=1,
            checked="the leftover is killed at the deadline on the host; the result and job_status say so")
    pool, name = systemd_hosts, "at-h1"
    n = _n()
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
            out = await tk.run_command(host=pool.hosts[name].ssh_alias, command=f"sleep {n} & echo started",
                                       budget_s=5, deadline_s=3)
            assert isinstance(out, Finished) and out.leftovers, result_view(out)
            assert "the host kills them at the job's deadline" in out.next, result_view(out)

            async def gone() -> bool:
                return not await _pids(pool, name, n)

            t0 = anyio.current_time()
            await wait_until(gone, 15, f"sleep {n} to be killed at the job's deadline")
            assert anyio.current_time() - t0 < 10  # at the deadline (3 s from the start), not later

            async def checked() -> bool:  # the kill's check (survivors, what it handed on) ends just after the kill
                return "had not finished" not in (await tk.job_status(job_id=out.job_id)).why

            await wait_until(checked, 5, "the deadline kill's survivor check to finish")
            st = await tk.job_status(job_id=out.job_id)
            assert st.state == "exited" and st.exit_status == 0 and st.leftovers == [], result_view(st)
            assert "left running were killed" in st.why and "3 s deadline" in st.why, result_view(st)
            assert "no survivors" in st.why, result_view(st)
    finally:
        await on_host(pool, name, f"pkill -f '^(/usr/bin/)?sleep {n}$'; true")


async def test_an_interrupted_deadline_kill_does_not_read_being_killed_for_ever(systemd_hosts: HostPool,
                                                                               tmp_path: Path, rel: Rel) -> None:
    """Fault: the watcher killing a job at its deadline is itself killed mid-kill (the job ignores TERM, so the kill
    waits its 2 s grace). Protection: the deadline record names the watcher, so a status that finds it gone does
    not read "being killed" for ever but says the kill was interrupted and names job_cancel, which stops it."""
    rel.set(fault="the deadline kill is interrupted (its watcher killed)", trials=1,
            checked="job_status says interrupted with job_cancel; job_cancel kills it (host pgrep)")
    pool, name = systemd_hosts, "at-h1"
    n = _n()
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
            out = await tk.run_command(host=pool.hosts[name].ssh_alias, command=f"trap '' TERM; sleep {n}",
                                       budget_s=1, deadline_s=2)
            assert isinstance(out, Detached), result_view(out)
            base = f"/root/.local/state/agent-tools/jobs/{out.job_id}"

            async def fired() -> bool:
                return (await on_host(pool, name, f"test -s {base}/deadline && echo y || true")).stdout.strip() == "y"

            await wait_until(fired, 15, "the deadline to fire")
            # the watcher that fires a deadline records its own pid (the deadline file's third word)
            await on_host(pool, name, f"kill -KILL $(cut -d' ' -f3 {base}/deadline | head -1); true")
            st: Any = None
            for _ in range(10):
                st = await tk.job_status(job_id=out.job_id, wait_s=1)
                if "interrupted" in st.why:
                    break
            assert st.state == "running" and "interrupted" in st.why and "job_cancel" in st.why, result_view(st)
            assert await _pids(pool, name, n), "the TERM-ignoring sleep should still run"
            res = await tk.job_cancel(job_id=out.job_id, grace_s=0.5)
            assert res.state == "killed" and res.survivors == [], result_view(res)
            assert await _pids(pool, name, n) == []
    finally:
        await on_host(pool, name, f"pkill -KILL -f '^(/usr/bin/)?sleep {n}$'; true")


async def test_a_job_that_dies_at_logout_says_so(systemd_hosts: HostPool, tmp_path: Path, rel: Rel) -> None:
    """Fault: logind ``KillUserProcesses=yes`` and a user without linger: logind kills the job when the SSH
    connection that started it closes. Protection: the launch detects it (``loginctl show-session``): the detached
    result says the job runs only while that connection stays open (not "keeps running on the host"); once it
    closed and the job died, job_status says why."""
    rel.set(fault="logind KillUserProcesses=yes, user without linger", trials=1,
            checked="detached why says it dies with the connection; job_status after the close says why")
    pool, name = systemd_hosts, "at-h2"
    n = _n()
    await on_host(pool, name, "mkdir -p /etc/systemd/logind.conf.d && printf '[Login]\\nKillUserProcesses=yes\\n' > "
                              "/etc/systemd/logind.conf.d/at-test.conf && systemctl restart systemd-logind && "
                              "loginctl disable-linger agent")
    try:
        journal = tmp_path / "j.sqlite3"
        async with toolkit_for(pool.ssh_config, journal) as tk:
            out = await tk.run_command(host=pool.hosts[name].ssh_alias_agent, command=f"sleep {n}", budget_s=1)
            assert isinstance(out, Detached), result_view(out)
            assert "keeps running on the host" not in out.why and "KillUserProcesses=yes" in out.why, out.why
            assert "enable-linger agent" in out.why, out.why
        # the toolkit closed its connection: logind ends the session and kills what is in it

        async def dead() -> bool:
            return not await _pids(pool, name, n)

        await wait_until(dead, 20, "logind to kill the job at logout")
        async with toolkit_for(pool.ssh_config, journal) as tk:
            st = await tk.job_status(job_id=out.job_id)
            assert st.state in ("lost", "killed") and "KillUserProcesses=yes" in st.why, result_view(st)
    finally:
        await on_host(pool, name, f"rm -f /etc/systemd/logind.conf.d/at-test.conf; systemctl restart systemd-logind; "
                                  f"pkill -f '^sleep {n}$'; true")
