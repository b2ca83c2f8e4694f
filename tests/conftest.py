"""Shared fixtures. Real parts: ``real_sshd`` (OpenSSH on loopback), ``systemd_hosts`` (nspawn test hosts)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agent_tools.hosts import LocalHost, SshHost, SshSettings
from agent_tools.hosts.base import Host
from agent_tools.jobs.journal import Journal
from agent_tools.jobs.manager import DEFAULT_JOBS_DIR, JobRunner

from .fleet_harness import stack, temporal  # noqa: F401  (fixtures of the fleet suites)
from .reliability_harness import child_script, private_sshd, rel, run_log  # noqa: F401  (fixtures of the fault suite)
from .sshd import RealSshd, real_sshd  # noqa: F401  (fixture)

try:  # the systemd test hosts harness (needs root + systemd-nspawn)
    from .hosts.fixtures import systemd_hosts  # noqa: F401  (fixture)
except ImportError:  # pragma: no cover - harness not present
    pass


_RUN_STATE: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    """The test run gets a state home of its own: the job directories of local and embedded-node jobs,
    write_file backups, journals and approvals of every test (and of the CLI processes tests start) go to a
    temporary ``XDG_STATE_HOME``/``AGENT_TOOLS_STATE_DIR``, removed at the end, never to the real ``$HOME``."""
    global _RUN_STATE
    _RUN_STATE = Path(tempfile.mkdtemp(prefix="agent-tools-test-state-"))
    os.environ["XDG_STATE_HOME"] = str(_RUN_STATE / "xdg")
    os.environ["AGENT_TOOLS_STATE_DIR"] = str(_RUN_STATE / "agent-tools")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _RUN_STATE is not None:
        shutil.rmtree(_RUN_STATE, ignore_errors=True)


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private agent-tools state dir (journal) for one test."""
    d = tmp_path / "state"
    monkeypatch.setenv("AGENT_TOOLS_STATE_DIR", str(d))
    return d


@pytest.fixture
def journal(state_dir: Path) -> Iterator[Journal]:
    j = Journal(state_dir / "journal.sqlite3")
    yield j
    j.close()


@pytest.fixture
def runner(journal: Journal) -> JobRunner:
    return JobRunner(journal)


def ssh_host_for(server: RealSshd, alias: str | None = None, **kw: object) -> SshHost:
    return SshHost(SshSettings(alias or server.alias, config_paths=[str(server.config_path)], **kw))  # type: ignore[arg-type]


@pytest.fixture(params=["local", "sshd", "sshd-warm"])
async def any_host(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Host]:
    """The same test against this machine and against the real OpenSSH sshd on loopback: with a fresh
    connection (first call on a new session), and with a warm session ready (``SshHost.take_warm``), so the
    test's first command runs through the warm launcher."""
    if request.param == "local":
        yield LocalHost()
        return
    server: RealSshd = request.getfixturevalue("real_sshd")
    host = ssh_host_for(server)
    try:
        if request.param == "sshd-warm":
            journal = Journal(tmp_path / "warm-up.sqlite3")
            await JobRunner(journal).run(host, "true", budget_s=10)
            await host.wait_warm()
            journal.close()
            assert host.warm_count("agent_tools.jobs:" + DEFAULT_JOBS_DIR) == 1, "the warm session did not start"
        yield host
    finally:
        await host.aclose()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """CI guard: with AGENT_TOOLS_REQUIRE_SSHD=1 / AGENT_TOOLS_REQUIRE_SYSTEMD=1 a skipped real-parts test fails
    the run (the fixtures fail instead of skipping; this catches skips from anywhere else)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    need = {"sshd": os.environ.get("AGENT_TOOLS_REQUIRE_SSHD") == "1",
            "systemd": os.environ.get("AGENT_TOOLS_REQUIRE_SYSTEMD") == "1"}
    for rep in reporter.stats.get("skipped", []):
        for mark, required in need.items():
            if required and mark in getattr(rep, "keywords", {}):
                reporter.write_line(f"REQUIRED {mark} test was skipped: {rep.nodeid}", red=True)
                session.exitstatus = 1


_REAL_PARTS = {"sshd": "the real OpenSSH sshd on loopback", "systemd": "the real systemd test hosts"}


def _install_hint(part: str) -> str:
    if part == "sshd":
        from .sshd import sshd_install_hint

        return sshd_install_hint()
    if os.geteuid() != 0:
        return "run the tests as root (network namespaces, overlay mounts, systemd-nspawn)"
    from .hosts.nspawn import MACHINE_PACKAGES

    missing = [pkg for pkg, path in MACHINE_PACKAGES.items() if not Path(path).exists()]
    return f"apt-get install -y {' '.join(missing)}" if missing else "(nothing to install: see the skip reasons)"


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    """The run's closing lines say which real parts did not run (their tests were skipped), why, and the one
    command that makes them run — right above pytest's own "N passed, M skipped" line."""
    skipped: dict[str, dict[str, int]] = {}
    for rep in terminalreporter.stats.get("skipped", []):
        part = next((p for p in _REAL_PARTS if p in getattr(rep, "keywords", {})), None)
        if part is None:
            continue
        longrepr = rep.longrepr
        reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        skipped.setdefault(part, {}).setdefault(reason, 0)
        skipped[part][reason] += 1
    if not skipped:
        return
    terminalreporter.section("real parts that did not run", sep="=", yellow=True, bold=True)
    for part, reasons in skipped.items():
        for reason, n in reasons.items():
            terminalreporter.write_line(f"{n} test(s) of {_REAL_PARTS[part]} skipped: {reason}", yellow=True)
        terminalreporter.write_line(f"  to run them: {_install_hint(part)}, then run the same pytest command again",
                                    bold=True)
    terminalreporter.write_line("(`bash .ci/run` installs everything and fails the run on any such skip)")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads xdist_group to route tests (loadgroup)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses a real sshd / systemd host, so the CI guard above can see skips."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        if "real_sshd" in names or (callspec is not None and callspec.params.get("any_host") == "sshd"):
            item.add_marker(pytest.mark.sshd)
        if "systemd_hosts" in names:
            item.add_marker(pytest.mark.systemd)
            item.add_marker(pytest.mark.xdist_group("systemd-hosts"))  # one worker boots the pool
