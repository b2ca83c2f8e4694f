"""The harness of the reliability-under-faults suite (``tests/test_reliability*.py``, one module per fault family):
what a fault test measured (:class:`Rel`, written as pytest user properties for ``scripts/reliability_report.py``),
bounded waits that count hangs, ground truth read inside the hosts, and the fixtures the fault tests share
(``rel``, ``child_script``, ``private_sshd``, ``run_log``).

Each test of the suite injects one fault into real parts (the nspawn systemd hosts ``at-h1``/``at-h2`` in their
own network namespaces, or a private OpenSSH ``sshd`` on loopback) and checks the outcome against ground truth
taken on the host itself (``pool.run`` enters the host's namespaces, so it works while the host is partitioned).
The docstring of each test names the protection it covers: remove that protection and the test fails. Every test
records what it measured (``fault``, ``trials``, ``checked``, ``lost_jobs``, ``lost_bytes``, ``survivors``,
``hangs``) as pytest user properties; ``scripts/reliability_report.py`` turns them into ``docs/reliability.md``.

``AGENT_TOOLS_LONG=1`` runs the long variants (:data:`LONG`): 20 controller-crash trials instead of 5, 3x the
load, and repeated rounds (``round_``) of the partition, sshd-restart, reboot, cancel, duplicate and slow-open
faults.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.abc
import pytest
from pydantic import BaseModel

from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.testing.waiting import wait_until as testing_wait_until
from agent_tools.tools.toolkit import Toolkit

from .sshd import RealSshd, require_real_sshd

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool

LONG = os.environ.get("AGENT_TOOLS_LONG") == "1"
REPO = Path(__file__).resolve().parents[1]
ROOT_JOBS = "/root/.local/state/agent-tools/jobs"
AGENT_JOBS = "/home/agent/.local/state/agent-tools/jobs"
T = TypeVar("T")


# ----------------------------------------------------------------------------------------------- recording
class Rel:
    """What one fault test measured; written as user properties (junit XML / the report's JSON plugin)."""

    def __init__(self, record: Callable[[str, object], None]) -> None:
        self._record = record
        self.counts = {"lost_jobs": 0, "lost_bytes": 0, "survivors": 0, "hangs": 0}
        for k, v in self.counts.items():
            record(k, v)

    def set(self, **kw: object) -> None:
        for k, v in kw.items():
            self._record(k, v)

    def add(self, key: str, n: int) -> None:
        self.counts[key] += n
        self._record(key, self.counts[key])


@pytest.fixture
def rel(record_property: Callable[[str, object], None]) -> Rel:
    return Rel(record_property)


async def bounded(rel: Rel, aw: Awaitable[T], limit_s: float, what: str) -> T:
    """Await ``aw`` but fail (and count a hang) if it takes longer than ``limit_s`` seconds."""
    try:
        with anyio.fail_after(limit_s):
            return await aw
    except TimeoutError:
        rel.add("hangs", 1)
        raise AssertionError(f"HANG: {what} did not return within {limit_s:g} s") from None


# ----------------------------------------------------------------------------------------------- helpers
def dump(m: BaseModel) -> dict[str, Any]:
    return m.model_dump(mode="json")


def evidence_of(result: dict[str, Any]) -> str:
    """A readiness verdict's evidence as the model reads it: ``why`` and each probe's ``evidence`` (a fact is
    said once, so evidence a probe holds is not repeated in ``why``)."""
    probes = result.get("probes") or []
    return "\n".join([result.get("why") or "", *(p.get("evidence") or "" for p in probes)])


@asynccontextmanager
async def toolkit_for(config: Path | str, journal_path: Path, **ssh: Any) -> AsyncIterator[Toolkit]:
    """A Toolkit over the hosts of an OpenSSH client config, with SshSettings overrides for every alias."""
    overrides = dict(ssh)
    tk = Toolkit(HostRegistry(ssh_config=[str(config)], settings_for=lambda _alias: dict(overrides)),
                 journal=Journal(journal_path))
    try:
        yield tk
    finally:
        await tk.aclose()
        tk.journal.close()


async def on_host(pool: HostPool, name: str, cmd: str, *, user: str = "root",
                  limit_s: float = 120) -> subprocess.CompletedProcess[str]:
    """Ground truth from inside the host (nsenter: works while the host is partitioned)."""
    return await anyio.to_thread.run_sync(functools.partial(pool.run, name, cmd, user=user, timeout=limit_s))


async def wait_until(cond: Callable[[], Awaitable[bool]], limit_s: float, what: str, step_s: float = 0.1) -> None:
    """Bounded polling on a condition (not a sleep-as-synchronisation): :func:`agent_tools.testing.wait_until`
    with the argument order these tests use. :raises TimeoutError: ``cond`` did not hold within ``limit_s``."""
    await testing_wait_until(cond, what, timeout_s=limit_s, interval_s=step_s)


async def settle(rel: Rel, tk: Toolkit, job_id: str, limit_s: float) -> dict[str, Any]:
    """Follow a job with long-polls until it is no longer running; tolerates one transient host error."""
    end = anyio.current_time() + limit_s
    errors = 0
    while True:
        left = end - anyio.current_time()
        if left <= 0:
            rel.add("hangs", 1)
            raise AssertionError(f"HANG: job {job_id} still not settled after {limit_s:g} s")
        st = dump(await bounded(rel, tk.job_status(job_id=job_id, wait_s=min(5.0, left)), min(5.0, left) + 15,
                                f"job_status({job_id})"))
        if st.get("outcome") == "error":
            errors += 1
            assert errors <= 2, f"job_status keeps failing: {st}"
            continue
        if st["state"] != "running":
            return st


async def read_all(rel: Rel, tk: Toolkit, job_id: str, *, stream: str = "stdout",
                   limit: int = 1 << 20) -> tuple[str, int]:
    """Page a stream from offset 0 to its end; returns (text, total_bytes)."""
    parts: list[str] = []
    off = 0
    while True:
        page = dump(await bounded(rel, tk.job_output(job_id=job_id, stream=stream, offset=off, limit=limit), 30,
                                  "job_output"))
        assert "text" in page, page
        parts.append(page["text"])
        assert page["next_offset"] >= off
        if page["next_offset"] == off and not page["eof"]:
            raise AssertionError(f"job_output made no progress at offset {off}: {page}")
        off = page["next_offset"]
        if page["eof"]:
            return "".join(parts), int(page["total_bytes"])


def same(got: T, want: T, what: str) -> None:
    """Assert equality of two long texts with a short message (pytest's own diff of megabytes takes minutes)."""
    if got == want:
        return
    assert isinstance(got, str | bytes) and isinstance(want, str | bytes)
    i = next((k for k, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    raise AssertionError(f"{what}: differs at index {i} (lengths {len(got)} vs {len(want)}): "
                         f"got {got[max(0, i - 20):i + 20]!r}, want {want[max(0, i - 20):i + 20]!r}")


def runs_of(log: Path, tag: str) -> int:
    """How many times a job wrote ``tag`` to a run log (ground truth for "did it start")."""
    return log.read_text().split().count(tag)


def seq_bytes(first: int, last: int) -> bytes:
    return "".join(f"{i}\n" for i in range(first, last + 1)).encode()


async def conn_pids(pool: HostPool, name: str) -> list[int]:
    """Pids of the host's sshd processes serving connections from the controller (the pool's bridge address)."""
    res = await on_host(pool, name, "ss -Htnp state established '( sport = :22 )'")
    return sorted({int(p) for line in res.stdout.splitlines() if f"{pool.bridge_address}:" in line
                   for p in re.findall(r"pid=(\d+)", line)})


async def job_pid_alive(pool: HostPool, name: str, job_id: str, base: str = ROOT_JOBS) -> tuple[bool, bool, int]:
    """(command alive, exit file present, stdout bytes) read inside the host."""
    d = f"{base}/{job_id}"
    res = await on_host(pool, name, f"read p rest < {d}/pid; kill -0 $p 2>/dev/null && echo alive; "
                                    f"[ -f {d}/exit ] && echo exit; wc -c < {d}/stdout")
    words = res.stdout.split()
    return "alive" in words, "exit" in words, int(words[-1]) if words and words[-1].isdigit() else -1


@pytest.fixture
def child_script() -> Path:
    """The child controller process of the crash and cross-process duplicate tests (``tests/controller_child.py``):
    run it as ``python3 CHILD CONFIG_JSON`` with :func:`child_env`."""
    return REPO / "tests" / "controller_child.py"


def child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


@pytest.fixture
def private_sshd() -> Iterator[RealSshd]:
    """An sshd of our own (MaxSessions 10) that a test may stop, restart and cut."""
    require_real_sshd()
    server = RealSshd(max_sessions=10)
    server.start()
    try:
        yield server
    finally:
        server.cleanup()



@pytest.fixture
def run_log() -> Iterator[Path]:
    """A run log the sshd login user can append to (``tmp_path``'s parents are 0700)."""
    d = Path(tempfile.mkdtemp(prefix="agent-tools-rel-"))
    d.chmod(0o777)
    log = d / "runs"
    log.touch()
    log.chmod(0o666)
    try:
        yield log
    finally:
        shutil.rmtree(d, ignore_errors=True)
