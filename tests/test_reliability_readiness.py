"""Issue 12 (readiness part): every readiness state the agent is told is true, on real systemd hosts.

Each test restarts real units on the nspawn systemd hosts (``at-h1``/``at-h2``: real systemd, real sshd) and
checks what the tools report against ground truth read inside the host (``pool.run``). The docstring of each
test names the fault and the protection it covers: remove that protection and the test fails. Measurements go
to pytest user properties (``fault``, ``trials``, ``checked``, ``lost_jobs``, ...) for
``scripts/reliability_report.py``, as in the other ``tests/test_reliability_*.py`` modules.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from agent_tools.tools.toolkit import Toolkit

from .reliability_harness import Rel, bounded, dump, evidence_of, on_host, rel, toolkit_for, wait_until

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool

pytestmark = pytest.mark.systemd
__all__ = ["rel"]  # the fixture, imported for its use here


async def install_unit(pool: HostPool, host: str, name: str, service: str, unit: str = "") -> None:
    """Write /etc/systemd/system/NAME on the host (ground-truth side) and reset its failure state."""
    text = f"[Unit]\nDescription=agent-tools readiness test {name}\n{unit}\n[Service]\n{service}\n"
    res = await on_host(pool, host, f"printf '%s' {shlex.quote(text)} > /etc/systemd/system/{name} && "
                                    f"systemctl daemon-reload && systemctl reset-failed {name} 2>/dev/null; true")
    assert res.returncode == 0, res.stderr


async def unit_truth(pool: HostPool, host: str, name: str) -> dict[str, str]:
    """``systemctl show`` of the unit plus the host's uptime, read inside the host."""
    res = await on_host(pool, host, "systemctl show -p ActiveState,SubState,InvocationID,MainPID,"
                                    f"ActiveEnterTimestampMonotonic {name}; echo Uptime=$(cut -d' ' -f1 /proc/uptime)")
    return dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)


async def follow(rel: Rel, tk: Toolkit, job_id: str, *, until: Callable[[dict[str, Any]], bool], limit_s: float,
                 seen: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """job_status long-polls (2 s) until ``until(status)``; every status goes to ``seen``."""
    end = anyio.current_time() + limit_s
    while True:
        st = dump(await bounded(rel, tk.job_status(job_id=job_id, wait_s=2), 30, f"job_status({job_id})"))
        assert st.get("outcome") != "error", st
        if seen is not None:
            seen.append(st)
        if until(st):
            return st
        if anyio.current_time() > end:
            raise AssertionError(f"job {job_id}: condition not reached in {limit_s:g} s; last status {st}")


def settled(st: dict[str, Any]) -> bool:
    return st.get("readiness") in ("ready", "failed", "deadline_exceeded")


# ------------------------------------------------------------------------------------------------ 1. ready/dead
#: (unit, host, [Service] body, [Unit] extra, extra probes, final readiness, evidence that must be in `why`)
UNIT_CASES: list[tuple[str, str, str, str, list[dict[str, Any]], str, list[str]]] = [
    ("rr-die-simple.service", "at-h1", "Type=simple\nExecStart=/bin/bash -c 'echo start; sleep 8; echo dying; "
     "exit 1'", "", [], "failed", ["dying", "Main process exited", "status=1/FAILURE"]),
    ("rr-die-settle.service", "at-h1", "Type=simple\nExecStart=/bin/bash -c 'echo start; sleep 4; echo dying; "
     "exit 1'", "", [{"kind": "systemd_unit", "unit": "rr-die-settle.service", "settle_s": 15}], "failed",
     ["dying", "Failed with result"]),
    ("rr-false.service", "at-h1", "ExecStart=/bin/false", "", [], "failed",
     ["Main process exited", "status=1/FAILURE"]),
    ("rr-exec-missing.service", "at-h1", "Type=exec\nExecStart=/nonexistent/rr-binary", "", [], "failed",
     ["203"]),
    ("rr-forking.service", "at-h1", "Type=forking\nExecStart=/bin/bash -c '(sleep 2; echo fork-child-dies; exit 2) "
     "& exit 0'", "", [], "failed", ["status=2"]),
    ("rr-oneshot.service", "at-h2", "Type=oneshot\nRemainAfterExit=yes\nExecStart=/bin/true", "", [], "ready",
     ["settle"]),
    ("rr-oneshot-done.service", "at-h2", "Type=oneshot\nExecStart=/bin/sh -c 'sleep 1; echo done'", "", [],
     "ready", ["ran to completion"]),
    ("rr-exits-0.service", "at-h2", "Type=simple\nExecStart=/bin/sh -c 'sleep 1; echo bye'", "", [], "failed",
     ["exited by itself", "bye"]),
    ("rr-oneshot-fail.service", "at-h2", "Type=oneshot\nExecStart=/bin/sh -c 'echo oneshot-broke; exit 4'", "", [],
     "failed", ["oneshot-broke", "status=4"]),
    ("rr-crashloop.service", "at-h2", "Type=simple\nRestart=on-failure\nRestartSec=0.5\nExecStart=/bin/bash -c "
     "'echo looping; sleep 1; exit 3'", "StartLimitIntervalSec=60\nStartLimitBurst=3", [], "failed",
     ["restarts=", "looping"]),
    ("rr-notify-dies.service", "at-h2", "Type=notify\nNotifyAccess=all\nExecStart=/bin/sh -c 'sleep 1; "
     "systemd-notify --ready; sleep 6; echo notify-dying; exit 1'", "", [], "failed", ["notify-dying"]),
    ("rr-healthy.service", "at-h2", "Type=simple\nExecStart=/bin/sleep infinity", "", [], "ready", ["settle"]),
]


async def test_unit_dies_after_start(systemd_hosts: HostPool, tmp_path: Path, rel: Rel) -> None:
    """Fault: a unit that systemd calls started but that dies (or never really runs): Type=simple/exec dying
    after a few seconds or at exec, /bin/false, a forking daemon whose child dies, a failing oneshot, a crash
    loop under Restart=on-failure, a notify unit dying after READY=1, a simple unit exiting 0 by itself (systemd
    unloads it at once: InvocationID reads empty); and healthy simple/oneshot units (with and without
    RemainAfterExit).
    Protection: readiness is a verdict about the new invocation after a settle window for non-notify types
    (``settle_s``), kept honest over time (a unit that dies after ``ready`` turns ``failed`` on the next
    ``job_status`` or ``list_jobs``), with journal evidence that includes systemd's own lines."""
    pool = systemd_hosts
    rel.set(fault="unit dies after start (simple/exec/forking/oneshot/notify/crash loop; /bin/false)",
            trials=len(UNIT_CASES),
            checked="final readiness per unit type; ready never before the settle window (host clock); a unit "
                    "dying after ready reads failed in list_jobs and job_status, with journal lines")
    for name, host, service, unit, *_ in UNIT_CASES:
        await install_unit(pool, host, name, service, unit)
    problems: list[str] = []
    misreported = 0
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:

        async def case(name: str, host: str, probes: list[dict[str, Any]], want: str, needles: list[str]) -> None:
            nonlocal misreported
            out = dump(await tk.restart_service(host=host, unit=name, probes=probes))
            assert out["outcome"] == "detached", out
            seen: list[dict[str, Any]] = []
            st = await follow(rel, tk, out["job_id"], until=settled, limit_s=60, seen=seen)
            if st["readiness"] == "ready":
                truth = await unit_truth(pool, host, name)
                up_s = float(truth["Uptime"]) - int(truth["ActiveEnterTimestampMonotonic"]) / 1e6
                if truth["ActiveState"] == "active" and name != "rr-notify-dies.service" and up_s < 3.0:
                    problems.append(f"{name}: ready although up only {up_s:.2f} s on the host (settle window 3 s)")
                    misreported += 1
            if want == "failed" and st["readiness"] == "ready":
                # ready, then dead: wait for the host to say the unit failed, then the next look must say so
                await wait_until(lambda: _is_failed(pool, host, name), 60, f"{name} failed on the host")
                if name == "rr-die-simple.service":
                    rows = dump(await tk.list_jobs(host=host))["jobs"]
                    row = next(r for r in rows if r["job_id"] == out["job_id"])
                    if row["readiness"] != "failed":
                        problems.append(f"{name}: list_jobs after the unit died says {row['readiness']}: {row}")
                        misreported += 1
                st = dump(await tk.job_status(job_id=out["job_id"]))
            if st["readiness"] != want:
                problems.append(f"{name}: readiness {st['readiness']}, want {want}: {st['why'][:600]}")
                misreported += 1
                return
            for needle in needles:
                if needle not in evidence_of(st):
                    problems.append(f"{name}: {needle!r} missing from the evidence: {evidence_of(st)[:800]}")
            if want == "ready":  # and it stays ready on a later look
                again = dump(await tk.job_status(job_id=out["job_id"]))
                if again["readiness"] != "ready":
                    problems.append(f"{name}: ready, then {again['readiness']} while the unit is up: {again}")

        async with anyio.create_task_group() as tg:
            for name, host, _s, _u, probes, want, needles in UNIT_CASES:
                tg.start_soon(case, name, host, probes, want, needles)
    rel.set(misreported=misreported)
    for name, host, *_ in UNIT_CASES:
        await on_host(pool, host, f"systemctl stop {name}; systemctl reset-failed {name} 2>/dev/null; true")
    assert not problems, "\n".join(problems)


async def test_ready_unit_later_killed_restarted_or_stopped(systemd_hosts: HostPool, tmp_path: Path,
                                                           rel: Rel) -> None:
    """Fault: after a restart was reported ready, its process is killed (kill -9) and systemd restarts it
    (Restart=always), or someone restarts or stops the unit on purpose. Protection: readiness follows the
    invocation that was ready: its death reads ``failed`` (NRestarts grew: systemd restarted it after a crash),
    while an explicit restart (superseded) or a stop on request ends the following and keeps ``ready``."""
    pool = systemd_hosts
    host = "at-h2"
    cases = {"rr-later-kill.service": "kill", "rr-later-restart.service": "restart", "rr-later-stop.service": "stop"}
    rel.set(fault="ready unit later killed by a signal / restarted / stopped on purpose", trials=len(cases),
            checked="killed (auto-restarted) → failed; explicit restart → ready (superseded); stop → ready (stopped)")
    for name in cases:
        await install_unit(pool, host, name, "Type=simple\nRestart=always\nRestartSec=0.2\n"
                                             "ExecStart=/bin/sleep infinity")
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:
        jobs = {}
        for name in cases:
            out = dump(await tk.restart_service(host=host, unit=name))
            jobs[name] = out["job_id"]
        for job in jobs.values():
            st = await follow(rel, tk, job, until=settled, limit_s=60)
            assert st["readiness"] == "ready", st
        before = {name: await unit_truth(pool, host, name) for name in cases}
        await on_host(pool, host, f"kill -9 {before['rr-later-kill.service']['MainPID']}; "
                                  "systemctl restart rr-later-restart.service; systemctl stop rr-later-stop.service")

        async def moved_on() -> bool:
            kill = await unit_truth(pool, host, "rr-later-kill.service")
            return kill["InvocationID"] != before["rr-later-kill.service"]["InvocationID"]

        await wait_until(moved_on, 30, "systemd to restart the killed unit")
        got = {name: dump(await tk.job_status(job_id=job)) for name, job in jobs.items()}
        assert got["rr-later-kill.service"]["readiness"] == "failed", got["rr-later-kill.service"]
        assert "systemd restarted the unit" in evidence_of(got["rr-later-kill.service"]), got["rr-later-kill.service"]
        assert got["rr-later-restart.service"]["readiness"] == "ready", got["rr-later-restart.service"]
        assert "superseded" in evidence_of(got["rr-later-restart.service"]), got["rr-later-restart.service"]
        assert got["rr-later-stop.service"]["readiness"] == "ready", got["rr-later-stop.service"]
        assert "stopped on request" in evidence_of(got["rr-later-stop.service"]), got["rr-later-stop.service"]
    for name in cases:
        await on_host(pool, host, f"systemctl stop {name}")


async def _is_failed(pool: HostPool, host: str, name: str) -> bool:
    return (await on_host(pool, host, f"systemctl is-failed {name}")).stdout.strip() == "failed"


# --------------------------------------------------------------------------------------- 2. the old server
SERVER = r'''
import http.server, os, signal, sys, threading, time
port = int(sys.argv[1])
time.sleep(2)  # loading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"pid {os.getpid()}\n".encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
def term(*_):
    # an old server that drains: it keeps answering (and logs its ready line again) for 4 s after SIGTERM
    print(f"READY pid {os.getpid()} (draining)", flush=True)
    threading.Timer(4, lambda: os._exit(0)).start()
signal.signal(signal.SIGTERM, term)
print(f"READY pid {os.getpid()}", flush=True)
srv.serve_forever()
'''


async def test_http_probe_counts_only_the_new_process(systemd_hosts: HostPool, tmp_path: Path, rel: Rel) -> None:
    """Fault: during a restart the old server keeps answering HTTP 200 (and logs its ready line again) for 4 s
    while the unit is ``deactivating/stop-sigterm``. Protection: http/port/log probes count only once the unit
    is active in its new invocation (they are not checked before), and journal lines of other invocations never
    count; readiness is reached only against the new process."""
    pool = systemd_hosts
    host, name, port = "at-h1", "rr-http.service", 39123
    rel.set(fault="old server answers during the restart (HTTP 200 and its ready line while stop-sigterm)",
            trials=1, checked="no http/log probe passes while the host shows the old invocation or a stopping "
                              "unit; ready only with the new process answering")
    await on_host(pool, host, f"mkdir -p /opt/rr && printf '%s' {shlex.quote(SERVER)} > /opt/rr/server.py")
    await install_unit(pool, host, name, f"Type=simple\nTimeoutStopSec=20\nExecStart=/usr/bin/python3 -u "
                                         f"/opt/rr/server.py {port}")
    await on_host(pool, host, f"systemctl restart {name}")
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:
        url = f"http://127.0.0.1:{port}/health"

        async def serving() -> bool:
            return dump(await tk.http_get(host=host, url=url)).get("status") == 200

        await wait_until(serving, 30, "the first server to answer", step_s=0.2)
        old = await unit_truth(pool, host, name)
        out = dump(await tk.restart_service(host=host, unit=name, probes=[
            {"kind": "http", "url": url}, {"kind": "log", "unit": name, "pattern": "READY pid"}]))
        assert out["outcome"] == "detached", out
        during = 0
        wrong: list[str] = []
        for p in out["probes"]:
            if p["kind"] != "systemd_unit" and p["state"] == "passed":
                wrong.append(f"restart_service's own look: {p}")
        end = anyio.current_time() + 60
        while True:
            before = await unit_truth(pool, host, name)
            st = dump(await tk.job_status(job_id=out["job_id"]))
            after = await unit_truth(pool, host, name)
            old_side = all(t["InvocationID"] == old["InvocationID"] or t["ActiveState"] != "active"
                           for t in (before, after))
            if old_side:
                during += 1
                wrong += [f"{p['kind']} {p['state']}: {p['evidence']} while the host showed {before['ActiveState']}/"
                          f"{before['SubState']} → {after['ActiveState']}/{after['SubState']}"
                          for p in st["probes"] if p["kind"] != "systemd_unit" and p["state"] == "passed"]
                if st["readiness"] == "ready":
                    wrong.append(f"ready while the host showed the old or a stopping process: {st['why']}")
            if settled(st) or anyio.current_time() > end:
                break
        assert during >= 1, "no look fell in the old server's stop window (the fault was not exercised)"
        assert not wrong, "\n".join(wrong)
        assert st["readiness"] == "ready", st
        new = await unit_truth(pool, host, name)
        body = dump(await tk.http_get(host=host, url=url))["body"]
        assert new["InvocationID"] != old["InvocationID"] and body.strip() == f"pid {new['MainPID']}", (new, body)
        rel.set(looks_in_stop_window=during, misreported=len(wrong))
    await on_host(pool, host, f"systemctl stop {name}")


# ------------------------------------------------------------------------------------------------ 3. next
async def test_next_follows_readiness_while_the_restart_loads(systemd_hosts: HostPool, tmp_path: Path,
                                                              rel: Rel) -> None:
    """Fault: ``systemctl restart --no-block`` exits 0 at once while the service loads (here a Type=notify unit
    that sends READY=1 after 6 s). Protection: one function derives ``next``, ``why`` and the summary from state
    + readiness + exit status: an exited-0 job whose readiness is pending says "keep following", never "done",
    in job_status, list_jobs and restart_service alike."""
    pool = systemd_hosts
    host, name = "at-h2", "rr-loading.service"
    rel.set(fault="restart exits 0 while the service still loads", trials=1,
            checked="next/why/summary of exited+pending say follow; of ready say go on")
    await install_unit(pool, host, name, "Type=notify\nNotifyAccess=all\nExecStart=/bin/sh -c 'sleep 6; "
                                         "systemd-notify --ready; exec sleep infinity'")
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:
        out = dump(await tk.restart_service(host=host, unit=name))
        assert out["outcome"] == "detached", out
        assert out["next"].startswith(f"job_status(job_id='{out['job_id']}'"), out["next"]
        await wait_until(lambda: _job_exited(pool, host, out["job_id"]), 30, "the restart command to exit")
        st = dump(await tk.job_status(job_id=out["job_id"]))
        assert (st["state"], st["exit_status"], st["readiness"]) == ("exited", 0, "pending"), st
        assert st["next"].startswith(f"job_status(job_id='{out['job_id']}', wait_s="), st["next"]
        assert "done" not in st["next"] and "pending" in st["next"], st["next"]
        assert "activating" in st["probes"][0]["evidence"], st  # (said once: in the probe, not again in why)
        row = next(r for r in dump(await tk.list_jobs(host=host))["jobs"] if r["job_id"] == out["job_id"])
        assert (row["state"], row["exit_status"], row["readiness"]) == ("exited", 0, "pending"), row
        st = await follow(rel, tk, out["job_id"], until=settled, limit_s=60)
        assert st["readiness"] == "ready", st
        assert st["next"].startswith("ready: go on"), st["next"]
        row = next(r for r in dump(await tk.list_jobs(host=host))["jobs"] if r["job_id"] == out["job_id"])
        assert (row["state"], row["exit_status"], row["readiness"]) == ("exited", 0, "ready"), row
    await on_host(pool, host, f"systemctl stop {name}")


async def _job_exited(pool: HostPool, host: str, job_id: str) -> bool:
    res = await on_host(pool, host, f"test -s /root/.local/state/agent-tools/jobs/{job_id}/exit && echo yes")
    return res.stdout.strip() == "yes"


# ------------------------------------------------------------------------------------------ 10. durations
async def test_elapsed_freezes_at_exit(systemd_hosts: HostPool, tmp_path: Path, rel: Rel) -> None:
    """Fault: the agent looks at a finished job long after it ended, and again later. Protection: a finished
    job's ``elapsed_s`` is its real run time (the host's own record of start and end in the job's ``exit``
    file), the same on every later look; a killed job's and a ready restart's freeze too."""
    pool = systemd_hosts
    host = "at-h1"
    rel.set(fault="late and repeated looks at finished jobs", trials=3,
            checked="elapsed_s of an exited job = host run time (mtimes of pid and exit files) and constant; "
                    "killed and ready jobs constant")
    await install_unit(pool, host, "rr-quick.service", "Type=notify\nNotifyAccess=all\nExecStart=/bin/sh -c "
                                                       "'systemd-notify --ready; exec sleep infinity'")
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:
        # connected first: a 0.3 s budget is for the job, not for connecting on a loaded machine
        assert dump(await tk.run_command(host=host, command="true", budget_s=30))["outcome"] == "finished"
        short = dump(await tk.run_command(host=host, command="sleep 1", budget_s=0.3))
        marker = dump(await tk.run_command(host=host, command="sleep 4", budget_s=0.3))
        doomed = dump(await tk.run_command(host=host, command="sleep 300", budget_s=0.3))
        assert [o["outcome"] for o in (short, marker, doomed)] == ["detached"] * 3, (short, marker, doomed)
        restart = dump(await tk.restart_service(host=host, unit="rr-quick.service"))
        ready = await follow(rel, tk, restart["job_id"], until=settled, limit_s=60)
        assert ready["readiness"] == "ready", ready
        cancel = dump(await tk.job_cancel(job_id=doomed["job_id"], grace_s=1))
        assert cancel["state"] == "killed", cancel
        # the first look at the short job comes when the 4 s marker job has ended: ≥ 3 s after the short one did
        await wait_until(lambda: _job_exited(pool, host, marker["job_id"]), 30, "the marker job to end")
        d = f"/root/.local/state/agent-tools/jobs/{short['job_id']}"
        times = (await on_host(pool, host, f"stat -c %.3Y {d}/pid {d}/exit")).stdout.split()
        truth = float(times[1]) - float(times[0])
        looks: dict[str, list[float]] = {"short": [], "killed": [], "ready": []}
        for _round in range(2):
            for key, job in (("short", short), ("killed", doomed), ("ready", restart)):
                st = dump(await tk.job_status(job_id=job["job_id"]))
                assert st["state"] != "running", st
                looks[key].append(st["elapsed_s"])
            # the second round: after another job ended (time passed on the host, not a sleep to synchronise)
            again = dump(await tk.run_command(host=host, command="sleep 1.5", budget_s=5))
            assert again["outcome"] == "finished", again
        rel.set(host_run_time_s=round(truth, 3), reported_s=looks["short"][0])
        assert abs(looks["short"][0] - truth) < 0.5, (looks, truth)
        for key, values in looks.items():
            assert len(set(values)) == 1, f"{key}: elapsed_s changed between looks: {values}"
    await on_host(pool, host, "systemctl stop rr-quick.service")


async def test_deadline_exceeded_freezes_elapsed_at_the_deadline(systemd_hosts: HostPool, tmp_path: Path,
                                                                  rel: Rel) -> None:
    """Fault (qa12c #6): nobody looks at a restart that never gets ready until well past its readiness deadline.
    Protection: the verdict ``deadline_exceeded`` holds since the deadline, so ``elapsed_s`` freezes at the
    deadline (not at the first later look), the same on every later look, and the evidence says when it was seen."""
    pool, host = systemd_hosts, "at-h1"
    rel.set(fault="first look at a never-ready restart long after its deadline", trials=1,
            checked="elapsed_s = the deadline on every later look; the why names the deadline and the look's time")
    await install_unit(pool, host, "rr-slowpre.service", "ExecStartPre=/bin/sleep 60\nExecStart=/bin/sleep 1000")
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:
            out = dump(await tk.restart_service(host=host, unit="rr-slowpre.service", deadline_s=3))
            assert out["readiness"] == "pending", out
            # no look until well past the deadline: another job that takes 8 s, followed to its end
            other = dump(await tk.run_command(host=host, command="sleep 8", budget_s=20))
            assert other["outcome"] == "finished", other
            first = dump(await tk.job_status(job_id=out["job_id"]))
            assert first["readiness"] == "deadline_exceeded", first
            assert abs(first["elapsed_s"] - 3) < 0.01, first
            assert "by its 3 s deadline" in first["why"] and "as seen" in first["why"], first["why"]
            again = dump(await tk.job_status(job_id=out["job_id"]))
            assert again["elapsed_s"] == first["elapsed_s"] and again["why"] == first["why"], (first, again)
    finally:
        await on_host(pool, host, "systemctl stop rr-slowpre.service; true")


SURVIVOR = r'''
import http.server, os, signal, sys, time
port, mode = int(sys.argv[1]), sys.argv[2]
if mode == "proxy":  # a reverse proxy of another unit: PORT forwards to PORT+1
    import socket, threading
    def pipe(a, b):
        while data := a.recv(65536):
            b.sendall(data)
        b.shutdown(socket.SHUT_WR)
    lsock = socket.create_server(("127.0.0.1", port))
    print("proxy READY", flush=True)
    while True:
        c, _ = lsock.accept()
        try:
            u = socket.create_connection(("127.0.0.1", port + 1))
        except OSError:
            c.close()
            continue
        threading.Thread(target=pipe, args=(c, u), daemon=True).start()
        threading.Thread(target=pipe, args=(u, c), daemon=True).start()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"pid {os.getpid()}\n".encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
if mode == "ignore-term":  # the old server answers on until systemd's SIGKILL at TimeoutStopSec
    signal.signal(signal.SIGTERM, lambda *a: print("ignoring SIGTERM", flush=True))
while True:  # a new server whose port is still taken keeps trying (and its unit stays active)
    try:
        srv = http.server.HTTPServer(("127.0.0.1", port), H)
        break
    except OSError as exc:
        print(f"bind failed: {exc}", flush=True)
        time.sleep(0.5)
if mode == "child" and os.fork() != 0:  # the main process idles; its child serves (and survives KillMode=process)
    while True:
        time.sleep(100)
print(f"READY pid {os.getpid()}", flush=True)
srv.serve_forever()
'''


async def test_old_server_that_survives_or_ignores_the_stop(systemd_hosts: HostPool, tmp_path: Path,
                                                            rel: Rel) -> None:
    """Fault (variants of item 2): the old server outlives the restart's stop. (a) ``KillMode=process``: the old
    main process is stopped but its serving child lives on and keeps the port; the new server cannot bind and
    retries, its unit ``active/running``: ``http`` answered 200 from the old child and readiness said ``ready``.
    (b) a Type=exec server that ignores SIGTERM answers until systemd's SIGKILL at ``TimeoutStopSec=6``, probed
    with a ``port`` probe.

    Protection: a passed http/port probe of an address on the host itself counts only when a process holding
    the listening socket started after the unit's new activation (``checks._only_new_listeners``: ss(8) and
    /proc/PID/stat start times against ``InactiveExitTimestampMonotonic``): (a) stays ``pending`` with the old
    pid as evidence until that child is killed, then reads ``ready`` with the new process answering; (b) reads
    ``ready`` only against the new process. (c) A server probed through a reverse proxy of another unit (older
    than the restart) reads ``ready``: a listener outside the unit's cgroup is not held against it."""
    pool = systemd_hosts
    host = "at-h1"
    cases = {"rr-survivor.service": (39131, "child", "Type=simple\nKillMode=process\n", "http"),
             "rr-ignore-term.service": (39132, "ignore-term", "Type=exec\nTimeoutStopSec=6\n", "port"),
             # probed through a reverse proxy (another unit, older than the restart): its answers are the new
             # server's once that serves, and must not be held against it
             "rr-behind-proxy.service": (39134, "plain", "Type=simple\n", "proxied")}
    rel.set(fault="old server outlives the stop (KillMode=process child keeps the port; SIGTERM ignored until "
                  "SIGKILL)", trials=len(cases),
            checked="never ready while the port's holder is older than the restart; ready once the new process "
                    "serves (its pid answers)")
    await on_host(pool, host, f"mkdir -p /opt/rr && printf '%s' {shlex.quote(SURVIVOR)} > /opt/rr/survivor.py")
    await install_unit(pool, host, "rr-proxy.service", "ExecStart=/usr/bin/python3 -u /opt/rr/survivor.py 39133 proxy")
    await on_host(pool, host, "systemctl restart rr-proxy.service")
    for name, (port, mode, service, _kind) in cases.items():
        await install_unit(pool, host, name, f"{service}ExecStart=/usr/bin/python3 -u /opt/rr/survivor.py {port} "
                                             f"{mode}")
        await on_host(pool, host, f"systemctl restart {name}")
    wrong: list[str] = []
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:

        async def serving_pid(port: int) -> str:
            out = dump(await tk.http_get(host=host, url=f"http://127.0.0.1:{port}/"))
            return str(out.get("body") or "").strip() if out.get("status") == 200 else ""

        async def case(name: str, port: int, kind: str) -> None:
            await wait_until(lambda: _answers(serving_pid, port), 30, f"{name} to serve", step_s=0.2)
            old = await serving_pid(port)
            probe = ({"kind": "http", "url": f"http://127.0.0.1:{port}/"} if kind == "http"
                     else {"kind": "http", "url": f"http://127.0.0.1:{port - 1}/"} if kind == "proxied"
                     else {"kind": "port", "port": port})
            out = dump(await tk.restart_service(host=host, unit=name, probes=[probe]))
            assert out["outcome"] == "detached", out
            end = anyio.current_time() + 60
            killed = False
            while True:
                st = dump(await tk.job_status(job_id=out["job_id"], wait_s=1))
                now_serving = await serving_pid(port)
                if st["readiness"] == "ready" and not await _new_process(pool, host, name, now_serving, old):
                    wrong.append(f"{name}: ready while {now_serving} answers (the old server was {old}): "
                                 f"{st['why']}")
                if settled(st) or anyio.current_time() > end:
                    break
                if name == "rr-survivor.service" and not killed and any(
                        "of the old invocation" in p["evidence"] for p in st["probes"]):
                    assert now_serving == old, (now_serving, old)  # the fault holds: the old child answers
                    await on_host(pool, host, f"kill {old.split()[1]}")
                    killed = True
            if st["readiness"] != "ready":
                wrong.append(f"{name}: readiness {st['readiness']}, want ready once the new process serves: {st}")
            if name == "rr-survivor.service" and not killed:
                wrong.append(f"{name}: the old child's answer was never named as the old process's: {st['probes']}")

        async with anyio.create_task_group() as tg:
            for name, (port, _mode, _service, kind) in cases.items():
                tg.start_soon(case, name, port, kind)
    rel.set(misreported=len(wrong))
    for name in (*cases, "rr-proxy.service"):
        await on_host(pool, host, f"systemctl kill -s KILL {name}; systemctl stop {name}; true")
    assert not wrong, "\n".join(wrong)


async def _new_process(pool: HostPool, host: str, name: str, serving: str, old: str) -> bool:
    """Ground truth: the answering process (``pid N``) is not the old server and is in the unit's cgroup."""
    if not serving or serving == old:
        return False
    res = await on_host(pool, host, f"grep -q {shlex.quote(name)} /proc/{serving.split()[1]}/cgroup && echo yes")
    return res.stdout.strip() == "yes"


async def _answers(serving_pid: Callable[[int], Any], port: int) -> bool:
    return bool(await serving_pid(port))


#: (unit, host, [Service] body, the unit's last line that must be in `why`); every one of them fails
DYING: list[tuple[str, str, str, str]] = [
    ("rv-exec-3s.service", "at-h1", "Type=exec\nExecStart=/bin/bash -c 'echo up; sleep 3; echo exec3-dying; exit 2'",
     "exec3-dying"),
    ("rv-exec-8s.service", "at-h1", "Type=exec\nExecStart=/bin/bash -c 'echo up; sleep 8; echo exec8-dying; exit 2'",
     "exec8-dying"),
    ("rv-fork-pidfile-8s.service", "at-h1", "Type=forking\nPIDFile=/run/rv-fork.pid\nExecStart=/bin/bash -c "
     "'(echo $BASHPID > /run/rv-fork.pid; sleep 8; echo fork8-dying; exit 6) & sleep 0.2; exit 0'", "fork8-dying"),
    ("rv-oneshot-8s.service", "at-h2", "Type=oneshot\nExecStart=/bin/bash -c 'sleep 8; echo oneshot8-dying; exit 5'",
     "oneshot8-dying"),
    ("rv-notify-3s.service", "at-h2", "Type=notify\nNotifyAccess=all\nExecStart=/bin/bash -c 'systemd-notify "
     "--ready; sleep 3; echo notify3-dying; exit 1'", "notify3-dying"),
    ("rv-notify-8s.service", "at-h2", "Type=notify\nNotifyAccess=all\nExecStart=/bin/bash -c 'sleep 1; "
     "systemd-notify --ready; sleep 8; echo notify8-dying; exit 1'", "notify8-dying"),
    ("rv-always-3s.service", "at-h1", "Type=simple\nRestart=always\nRestartSec=1\nExecStart=/bin/bash -c "
     "'sleep 3.5; echo always-dying; exit 1'", "always-dying"),
]


async def test_units_dying_at_3_and_8_s_read_failed(systemd_hosts: HostPool, tmp_path: Path, rel: Rel) -> None:
    """Fault (variants of item 1): units of every type dying 3 s and 8 s after the start: Type=exec, a forking
    daemon with a PIDFile, a oneshot, notify units after READY=1, and a Restart=always unit dying 3.5 s in (just
    past the 3 s settle window, so it may be reported ready first).

    Protection: readiness turns ``failed`` on the next look after the host says the invocation ended, with the
    unit's last line and systemd's own lines as evidence; and ``next`` says readiness failed without claiming
    the unit never became ready (``hints.guide``: it said "it did not become ready" after a unit that had been
    ready died)."""
    pool = systemd_hosts
    rel.set(fault="units of every type dying 3 s and 8 s after the start", trials=len(DYING),
            checked="failed with the unit's last line and systemd's lines; next true for ready-then-failed")
    for name, host, service, _line in DYING:
        await install_unit(pool, host, name, service)
    problems: list[str] = []
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:

        async def case(name: str, host: str, line: str) -> None:
            out = dump(await tk.restart_service(host=host, unit=name))
            seen: list[dict[str, Any]] = []
            st = await follow(rel, tk, out["job_id"], until=lambda s: s["readiness"] == "failed", limit_s=60,
                              seen=seen)
            for needle in (line, "Main process exited"):
                if needle not in st["why"]:
                    problems.append(f"{name}: {needle!r} missing from why: {st['why'][:600]}")
            if any(s["readiness"] == "ready" for s in seen) and "did not become ready" in st["next"]:
                problems.append(f"{name}: ready, then failed, but next says {st['next']!r}")
            if "readiness failed" not in st["next"]:
                problems.append(f"{name}: next {st['next']!r}")

        async with anyio.create_task_group() as tg:
            for name, host, _service, line in DYING:
                tg.start_soon(case, name, host, line)
    for name, host, *_ in DYING:
        await on_host(pool, host, f"systemctl stop {name}; systemctl reset-failed {name} 2>/dev/null; true")
    rel.set(misreported=len(problems))
    assert not problems, "\n".join(problems)
