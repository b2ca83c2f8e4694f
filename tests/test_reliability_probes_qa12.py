"""Fault suite (``scripts/reliability_report.py``), qa12 findings 7, 8, 14-16: a probe passing is about the new
invocation.

Real parts: units restarted on the nspawn systemd hosts (real systemd, real sshd, logind), a stray server started
by an earlier agent job, ground truth read inside the host.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from .reliability_harness import Rel, dump, on_host, rel, toolkit_for
from .test_reliability_readiness import follow, install_unit, settled

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool

pytestmark = pytest.mark.systemd
__all__ = ["rel"]  # the fixture, imported for its use here

#: a log writer: on TERM it appends "ready old" to the file and keeps running 4 s (as a server finishing its
#: requests); started, it waits 6 s before appending "ready new"
LOG_WRITER = r'''
import os, signal, sys, time
path, tag = sys.argv[1], sys.argv[2]
def term(*_):
    with open(path, "a") as f:
        f.write(f"server ready old-{os.getpid()}\n")
    time.sleep(4)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
time.sleep(6)
with open(path, "a") as f:
    f.write(f"server ready {tag}-{os.getpid()}\n")
while True:
    time.sleep(1)
'''

#: an HTTP server that retries its bind every 0.5 s until the port is free (so it stays up, not listening, while a
#: stray server holds the port), then answers "NAME pid=PID"
RETRY_SERVER = r'''
import http.server, os, sys, time
port, name = int(sys.argv[1]), sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{name} pid={os.getpid()}\n".encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
while True:
    try:
        srv = http.server.HTTPServer(("127.0.0.1", port), H)
        break
    except OSError:
        time.sleep(0.5)
srv.serve_forever()
'''


async def _write(pool: HostPool, host: str, path: str, text: str) -> None:
    res = await on_host(pool, host, f"mkdir -p /opt/rp && printf '%s' {shlex.quote(text)} > {path}")
    assert res.returncode == 0, res.stderr


async def test_log_file_probe_counts_only_lines_of_the_new_invocation(systemd_hosts: HostPool, tmp_path: Path,
                                                                      rel: Rel) -> None:
    """Fault: the old process appends the ready line to the log file while it stops (after the restart began), and
    the new process writes its own 6 s after it starts. Protection: while the unit is not up in its new invocation
    the probe's offset follows the file's end (what the old process writes then never counts), and a file not
    written since the new invocation began has nothing new: readiness is never ``ready`` before the new line, and
    the line it passes on is the new one."""
    rel.set(fault="log file probe: the old process writes the ready line while it stops", trials=1,
            checked="never ready before the new process's line; the evidence is the new line")
    pool, host, name = systemd_hosts, "at-h1", "rp-logf.service"
    log = "/var/log/rp-logf.log"
    await _write(pool, host, "/opt/rp/logw.py", LOG_WRITER)
    await install_unit(pool, host, name, f"ExecStart=/usr/bin/python3 -u /opt/rp/logw.py {log} new\n"
                                         "TimeoutStopSec=20")
    await on_host(pool, host, f"rm -f {log}; systemctl restart {name}")
    await anyio.sleep(7)  # the first invocation wrote its line
    seen: list[dict[str, object]] = []
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
            out = dump(await tk.restart_service(host=host, unit=name, probes=[
                {"kind": "log", "path": log, "pattern": "server ready"}]))
            assert out["outcome"] == "detached", out
            st = await follow(rel, tk, out["job_id"], until=settled, limit_s=60, seen=seen)
            assert st["readiness"] == "ready", st
            text = (await on_host(pool, host, f"cat {log}")).stdout
            assert text.count("server ready old-") == 1 and text.count("server ready new-") == 2, text
            new_line = text.strip().splitlines()[-1]
            log_probe = next(p for p in st["probes"] if p["kind"] == "log")
            assert log_probe["evidence"] == new_line, (log_probe, text)
            for s in seen:  # never ready on the old process's line
                assert s["readiness"] != "ready" or s is st, s
    finally:
        await on_host(pool, host, f"systemctl stop {name}; rm -f {log}; true")


async def test_http_and_port_probes_do_not_count_a_stray_listener(systemd_hosts: HostPool, tmp_path: Path,
                                                                  rel: Rel) -> None:
    """Fault: an earlier agent job holds the unit's port (a stray server), so the unit's new server cannot bind it
    and retries; the stray answers HTTP 200. Protection: an http/port probe counts only when a process of the
    unit's new invocation holds the listening socket: not ready while the stray answers (the evidence names it);
    ready once the stray is gone and the new server bound the port."""
    rel.set(fault="stray listener on the unit's port from before the restart", trials=1,
            checked="http and port probes not counted while the stray holds the port; ready after it is killed")
    pool, host, name, port = systemd_hosts, "at-h1", "rp-http.service", 9931
    await _write(pool, host, "/opt/rp/srv.py", RETRY_SERVER)
    await install_unit(pool, host, name, f"ExecStart=/usr/bin/python3 -u /opt/rp/srv.py {port} UNIT")
    await on_host(pool, host, f"systemctl stop {name}; true")
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
            stray = await tk.run_command(host=host, command=f"python3 /opt/rp/srv.py {port} STRAY", budget_s=1)
            assert stray.outcome == "detached", dump(stray)
            got = dump(await tk.http_get(host=host, url=f"http://127.0.0.1:{port}/"))
            assert got.get("body", "").startswith("STRAY"), got
            out = dump(await tk.restart_service(host=host, unit=name, probes=[
                {"kind": "http", "url": f"http://127.0.0.1:{port}/"}, {"kind": "port", "port": port}]))
            assert out["outcome"] == "detached", out
            t_end = anyio.current_time() + 12
            while anyio.current_time() < t_end:
                st = dump(await tk.job_status(job_id=out["job_id"], wait_s=2))
                assert st["readiness"] == "pending", st  # never ready on the stray's answer
            said = st["why"] + " ".join(p.get("evidence", "") for p in st.get("probes", []))  # (evidence: in probes)
            assert "listens on no port" in said and "python3" in said, st
            await tk.job_cancel(job_id=stray.job_id, grace_s=1)  # the stray goes; the unit's server binds
            st = await follow(rel, tk, out["job_id"], until=settled, limit_s=30)
            assert st["readiness"] == "ready", st
            got = dump(await tk.http_get(host=host, url=f"http://127.0.0.1:{port}/"))
            assert got.get("body", "").startswith("UNIT"), got
    finally:
        await on_host(pool, host, f"systemctl stop {name}; pkill -f 'rp/srv.py {port}'; true")


async def test_unit_evidence_names_what_systemd_is_doing(systemd_hosts: HostPool, tmp_path: Path, rel: Rel) -> None:
    """Evidence tells what the unit does: a crash-looping unit's evidence counts its restarts and says it keeps
    dying, and ``next`` no longer says "the service is loading"; a unit whose stop hangs reads "the old invocation
    is stopping" (not "restart not begun yet"); an ExecStartPost= failure names the control command's status and
    the main process's signal (not "exit=15"); a socket unit has no settle window (no "Type=?")."""
    rel.set(fault="crash loop, hanging stop, failing ExecStartPost=, socket unit", trials=4,
            checked="the evidence names restarts, the stop, the failed control command, no settle window")
    pool, host = systemd_hosts, "at-h2"
    await install_unit(pool, host, "rp-loop.service", "Restart=always\nRestartSec=0.2\n"
                                                      "ExecStart=/bin/bash -c 'sleep 1.5; exit 3'")
    await install_unit(pool, host, "rp-stophang.service", "ExecStart=/bin/sleep 1000\n"
                                                          "ExecStop=/bin/sleep 30\nTimeoutStopSec=8")
    await install_unit(pool, host, "rp-post.service", "ExecStart=/bin/sleep 1000\nExecStartPost=/bin/false")
    await install_unit(pool, host, "rp-sock.service", "ExecStart=/bin/sleep 1000")  # (the socket's service)
    await on_host(pool, host, "printf '[Socket]\\nListenStream=127.0.0.1:9941\\nAccept=no\\n' > "
                              "/etc/systemd/system/rp-sock.socket && systemctl daemon-reload && "
                              "systemctl start rp-stophang.service rp-sock.socket")
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
            stop = dump(await tk.restart_service(host=host, unit="rp-stophang.service"))
            unit_probe = stop["probes"][0]
            assert "the old invocation is stopping" in unit_probe["evidence"], stop
            loop = dump(await tk.restart_service(host=host, unit="rp-loop.service", deadline_s=40))
            post = dump(await tk.restart_service(host=host, unit="rp-post.service"))
            sock = dump(await tk.restart_service(host=host, unit="rp-sock.socket"))
            st = await follow(rel, tk, post["job_id"], until=settled, limit_s=30)
            assert st["readiness"] == "failed", st
            assert "ExecStartPost=/bin/false exited 1" in st["why"] and "signal=15" in st["why"], st["why"]
            st = await follow(rel, tk, sock["job_id"], until=settled, limit_s=30)
            assert st["readiness"] == "ready" and "Type=" not in st["why"], st
            t0 = time.monotonic()
            def said(s: dict[str, Any]) -> str:  # a pending job's why points at its probes' evidence
                return str(s["why"]) + " ".join(p.get("evidence", "") for p in s.get("probes", []))
            st = await follow(rel, tk, loop["job_id"], until=lambda s: "keeps dying" in said(s) or settled(s),
                              limit_s=30)
            assert "keeps dying" in said(st) and st["readiness"] == "pending", st
            assert "service is loading" not in st["next"], st
            assert time.monotonic() - t0 < 30
    finally:
        await on_host(pool, host, "systemctl stop rp-loop.service rp-stophang.service rp-post.service "
                                  "rp-sock.socket rp-sock.service; systemctl reset-failed; true")


#: (unit, [Service] body, [Unit] extra, set up before the restart, evidence that must be in the probe's evidence)
REFUSED = [
    ("rp-cond.service", "ExecStart=/bin/sleep 1000", "ConditionPathExists=/nonexistent-rp", "",
     ["skipped because of an unmet condition check", "ConditionPathExists=/nonexistent-rp"]),
    ("rp-cond-running.service", "ExecStart=/bin/sleep 1000", "ConditionPathExists=/tmp/rp-flag",
     "touch /tmp/rp-flag && systemctl start rp-cond-running.service && rm /tmp/rp-flag",
     ["skipped because of an unmet condition check", "ConditionPathExists=/tmp/rp-flag"]),
    ("rp-assert.service", "ExecStart=/bin/sleep 1000", "AssertPathExists=/nonexistent-rp", "",
     ["an Assert*= failed", "Assertion failed for rp-assert.service"]),
    ("rp-execcond.service", "ExecCondition=/bin/false\nExecStart=/bin/sleep 1000", "", "",
     ["ExecCondition= command failed", "Skipped due to 'exec-condition'"]),
    ("rp-pre.service", "ExecStartPre=/bin/bash -c 'exit 9'\nExecStart=/bin/sleep 1000", "", "",
     ["ExecStartPre=/bin/bash exited 9", "the main process never started"]),
]


@pytest.mark.parametrize(("unit", "service", "unit_extra", "setup", "evidence"), REFUSED, ids=[c[0] for c in REFUSED])
async def test_a_start_systemd_refuses_reads_failed_at_once_with_its_reason(
        systemd_hosts: HostPool, tmp_path: Path, rel: Rel, unit: str, service: str, unit_extra: str, setup: str,
        evidence: list[str]) -> None:
    """Fault (qa12c #2, #7): systemd skips or refuses the start (an unmet Condition*=, with or without an old
    invocation running; a failed Assert*=; a failing ExecCondition=), or an ExecStartPre= fails so the main process
    never runs. The unit reads inactive with no new invocation (and, unloaded, ConditionResult=no and zero
    timestamps whether or not it ran), so the restart used to read "restart not begun yet" until its deadline, and
    an ExecStartPre= failure read "exit=0". Protection: the manager's line that ended the start job (a start job
    done with no new invocation, the unit skipped) is the verdict: readiness failed within seconds, the evidence
    says why with systemd's own words; a main process that never started has no exit status shown."""
    rel.set(fault=f"systemd refuses the start: {unit}", trials=1,
            checked="readiness failed within 15 s (not 'not begun'), the evidence names the reason, no 'exit=0'")
    pool, host = systemd_hosts, "at-h1"
    await install_unit(pool, host, unit, service, unit_extra)
    if setup:
        res = await on_host(pool, host, setup)
        assert res.returncode == 0, res.stderr
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
            t0 = time.monotonic()
            out = dump(await tk.restart_service(host=host, unit=unit))
            st = out if settled(out) else await follow(rel, tk, out["job_id"], until=settled, limit_s=15)
            assert st["readiness"] == "failed", st
            assert time.monotonic() - t0 < 15
            got = st["probes"][0]["evidence"]
            assert all(e in got for e in evidence), got
            assert "not begun" not in got and "exit=0" not in got and "does not say how" not in got, got
    finally:
        await on_host(pool, host, f"systemctl stop {unit}; systemctl reset-failed; rm -f /tmp/rp-flag; true")
