"""What the scenarios run against: servers on loopback, temp dirs, journals — and their cleanup.

Everything lives under one temp dir (``/tmp/agent-tools-bench-*``): the journal, the job directories of the
real-sshd jobs (owned by the sshd's login user) and of the fleet's jobs, the 1 GB data file, the fleet's
keys. Cleanup, which also runs on Ctrl-C / SIGTERM / errors:

1. (async, best effort) close connections; running jobs are cancelled by their scenario with
   ``JobRunner.cancel``;
2. (sync, always) SIGKILL any process that still carries ``AGENT_TOOLS_JOB=<id>`` of one of *our* job ids
   (ids from our job directories and from the CLI's JSON output) — a safety net that should find nothing;
3. remove the job directories the CLI scenario created in the login user's default jobs dir (by id only);
4. stop the fleet process and sshd; remove the temp dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import asyncssh

from agent_tools.hosts.ssh import SshHost, SshSettings
from agent_tools.jobs.journal import Journal
from agent_tools.jobs.manager import JobRunner
from tests.sshd import RealSshd

from .stats import progress

__all__ = ["REPO_ROOT", "BenchEnv", "Fleet"]

REPO_ROOT = Path(__file__).resolve().parent.parent


def child_env(**extra: str) -> dict[str, str]:
    """Environment for our Python children: the repo on ``PYTHONPATH`` (``benchmarks`` and ``tests``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


class Fleet:
    """The fleet process (:mod:`benchmarks.fleet`) and the aliases/configs of its servers."""

    def __init__(self, proc: subprocess.Popen[bytes], hosts: list[dict[str, Any]]) -> None:
        self.proc = proc
        self.hosts = hosts

    def stop(self) -> None:
        proc = self.proc
        if proc.poll() is not None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()  # the fleet exits on stdin EOF
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


class BenchEnv:
    """Servers, connections and dirs shared by the scenarios, created on first use."""

    def __init__(self) -> None:
        self.run_dir = Path(tempfile.mkdtemp(prefix="agent-tools-bench-"))
        self.run_dir.chmod(0o755)  # the sshd's login user must reach its jobs dir and the data file
        self.state_dir = self.run_dir / "state"
        self.state_dir.mkdir(mode=0o700)
        self.journal = Journal(self.state_dir / "journal.sqlite3")
        self.sshd: RealSshd | None = None
        self.sshd_jobs_dir = self.run_dir / "sshd-jobs"
        self.fleet_jobs_dir = self.run_dir / "fleet-jobs"
        self.data_dir = self.run_dir / "data"
        self._host: SshHost | None = None
        self._conn: asyncssh.SSHClientConnection | None = None
        self._runner: JobRunner | None = None
        self.fleet: Fleet | None = None
        self.cli_job_ids: list[str] = []
        self.extra_job_ids: set[str] = set()
        self.cli_started_at: float | None = None
        self.notes: list[str] = []

    # ------------------------------------------------------------------ real sshd
    def ensure_sshd(self) -> RealSshd:
        if self.sshd is None:
            progress("starting a real OpenSSH sshd on loopback (tests.sshd.RealSshd)")
            sshd = RealSshd()
            self.sshd = sshd  # before start(): cleanup removes its temp dir even when start fails
            sshd.start()
            user = pwd.getpwnam(sshd.user)
            self.sshd_jobs_dir.mkdir(mode=0o700)
            os.chown(self.sshd_jobs_dir, user.pw_uid, user.pw_gid)
        return self.sshd

    @property
    def ssh_config(self) -> str:
        return str(self.ensure_sshd().config_path)

    @property
    def alias(self) -> str:
        return self.ensure_sshd().alias

    async def host(self) -> SshHost:
        """The :class:`SshHost` under test (one pooled connection, opened now)."""
        if self._host is None:
            self._host = SshHost(SshSettings(self.alias, config_paths=[self.ssh_config]))
            await self._host.connection()
        return self._host

    async def conn(self) -> asyncssh.SSHClientConnection:
        """The baseline's own asyncssh connection to the same sshd, with the same client config."""
        if self._conn is None:
            self._conn = await asyncssh.connect(self.alias, config=[self.ssh_config])
        return self._conn

    def runner(self) -> JobRunner:
        if self._runner is None:
            self.ensure_sshd()
            self._runner = JobRunner(self.journal, jobs_dir=str(self.sshd_jobs_dir))
        return self._runner

    # ------------------------------------------------------------------ fleet
    async def start_fleet(self, count: int) -> Fleet:
        if self.fleet is not None:
            return self.fleet
        root = self.run_dir / "fleet"
        home = self.run_dir / "fleet-home"
        root.mkdir()
        home.mkdir(mode=0o700)
        self.fleet_jobs_dir.mkdir(mode=0o700)
        progress(f"starting {count} in-process asyncssh servers in a separate process (benchmarks.fleet)")
        proc = _spawn_fleet(count, root, home)
        self.fleet = Fleet(proc, [])
        assert proc.stdout is not None
        line = await anyio.to_thread.run_sync(proc.stdout.readline)
        if not line:
            raise RuntimeError(f"the fleet process exited before it was ready (status {proc.wait()})")
        self.fleet.hosts = json.loads(line)["hosts"]
        return self.fleet

    # ------------------------------------------------------------------ cleanup
    async def aclose(self) -> None:
        """Close our connections (jobs are cancelled by the scenarios that started them)."""
        host, self._host = self._host, None
        if host is not None:
            await host.aclose()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with anyio.move_on_after(2):
                await conn.wait_closed()

    def our_job_ids(self) -> set[str]:
        ids = set(self.cli_job_ids) | self.extra_job_ids
        for d in (self.sshd_jobs_dir, self.fleet_jobs_dir):
            with contextlib.suppress(OSError):
                ids.update(p.name for p in d.iterdir() if p.name.startswith("j_"))
        return ids

    def cleanup(self) -> None:
        """Synchronous, idempotent, safe to call after any failure (see the module docstring)."""
        ids = self.our_job_ids()
        killed = kill_marked(ids)
        if killed:
            self.notes.append(f"cleanup safety net SIGKILLed {killed} leftover job process(es)")
            progress(f"cleanup: SIGKILLed {killed} leftover job process(es)")
        self._remove_cli_job_dirs()
        if self.fleet is not None:
            self.fleet.stop()
        if self.sshd is not None:
            self.sshd.cleanup()
        with contextlib.suppress(Exception):
            self.journal.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def _cli_jobs_dir(self) -> Path | None:
        if self.sshd is None:
            return None
        home = Path(pwd.getpwnam(self.sshd.user).pw_dir)
        return home / ".local" / "state" / "agent-tools" / "jobs"

    def _remove_cli_job_dirs(self) -> None:
        base = self._cli_jobs_dir()
        if base is None:
            return
        for job_id in self.cli_job_ids:
            shutil.rmtree(base / job_id, ignore_errors=True)
        # A CLI call interrupted before it printed its job id: remove job dirs of `true` created since the
        # scenario began (by id, only those; other users of the account keep theirs).
        if self.cli_started_at is None:
            return
        with contextlib.suppress(OSError):
            for d in base.iterdir():
                if d.name in self.cli_job_ids or not d.name.startswith("j_"):
                    continue
                with contextlib.suppress(OSError):
                    if d.stat().st_mtime >= self.cli_started_at and (d / "command").read_text() == "true":
                        shutil.rmtree(d, ignore_errors=True)


def _spawn_fleet(count: int, root: Path, home: Path) -> subprocess.Popen[bytes]:
    # a new session: a Ctrl-C in the terminal reaches only us, and we stop the fleet in cleanup
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.fleet", str(count), str(root), str(home)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO_ROOT, env=child_env(), start_new_session=True,
    )


def kill_marked(job_ids: set[str]) -> int:
    """SIGKILL every process whose environment has ``AGENT_TOOLS_JOB=<id>`` for an id in ``job_ids``."""
    if not job_ids:
        return 0
    wanted = {f"AGENT_TOOLS_JOB={j}".encode() for j in job_ids}
    me = os.getpid()
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if wanted.intersection(env):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), signal.SIGKILL)
                count += 1
    return count

