"""pytest plugin (entry point ``pytest11: agent_tools``): record agent_tools sessions once, replay them in tests.

Usage (a complete example against this machine; the README's "Record and replay" has it as files)::

    # conftest.py
    @pytest.fixture
    def agent_tools_hosts() -> HostsFactory:           # only needed to record: the real hosts
        @asynccontextmanager
        async def hosts() -> AsyncIterator[HostRegistry]:
            registry = HostRegistry()                   # 'local', plus SSH aliases from ~/.ssh/config
            try:
                yield registry
            finally:
                await registry.aclose()
        return hosts

    # test_greeting.py
    @pytest.mark.agent_tools_cassette("greeting")
    def test_greeting(agent_tools_cassette, agent_tools_toolkit) -> None:
        async def scenario() -> None:
            out = await agent_tools_toolkit.run_command(host="local", command="echo hello")
            assert out.outcome == "finished" and out.stdout.text == "hello\n"
        agent_tools_cassette.run(scenario)

``pytest --agent-tools-record=once`` records ``tests/cassettes/greeting.jsonl``; plain ``pytest`` replays it on
a virtual clock without touching a host. Tool calls are recorded and checked the same way whether made with
``agent_tools_toolkit.dispatch(name, arguments)`` or a typed method; a replay that does not match raises its
:class:`~agent_tools.errors.ReplayError` (with the diff) at the call that met it.

* ``--agent-tools-record=none|once|new_episodes|all`` (default ``none``: replay only, see
  :mod:`agent_tools.recording.session`); ini ``agent_tools_cassette_dir`` (default ``tests/cassettes``).
* ``@pytest.mark.agent_tools_cassette("name")``: the cassette ``<dir>/<name>.jsonl`` (default name:
  ``<test module>__<test name>``).
* Fixtures: ``agent_tools_cassette`` (a :class:`~agent_tools.recording.session.CassetteSession`; its ``run``
  runs a coroutine function on the virtual clock when replaying), ``agent_tools_toolkit`` (its Toolkit),
  ``agent_tools_hosts`` (override it to record; default None), ``agent_tools_record_mode``.

Tests are synchronous functions: a replay needs its own event loop with a virtual clock, which
``CassetteSession.run`` creates (pytest-asyncio's loop keeps real time).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the recording layer is imported only when a test asks for a fixture
    from ..recording.session import CassetteSession, HostsFactory
    from ..tools.toolkit import Toolkit

__all__ = ["pytest_addoption", "pytest_configure"]

_RECORD_MODES = ("none", "once", "new_episodes", "all")  # agent_tools.recording.session.RECORD_MODES


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agent_tools", "agent_tools cassettes")
    group.addoption("--agent-tools-record", dest="agent_tools_record", default=None, choices=_RECORD_MODES,
                    help="record mode for agent_tools cassettes: none (replay only, default), once (record "
                         "missing cassettes), new_episodes (append unmatched requests), all (re-record)")
    parser.addini("agent_tools_cassette_dir", "directory of agent_tools cassettes (relative to the rootdir)",
                  default="tests/cassettes")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "agent_tools_cassette(name): the agent_tools cassette this test replays "
                                       "(tests/cassettes/<name>.jsonl)")


@pytest.fixture
def agent_tools_record_mode(request: pytest.FixtureRequest) -> str:
    """The record mode of this run (``--agent-tools-record``, default ``none``)."""
    return str(request.config.getoption("agent_tools_record") or "none")


@pytest.fixture
def agent_tools_cassette_dir(request: pytest.FixtureRequest) -> Path:
    """Where cassettes live (ini ``agent_tools_cassette_dir``, relative to the rootdir)."""
    return Path(request.config.rootpath) / str(request.config.getini("agent_tools_cassette_dir"))


@pytest.fixture
def agent_tools_hosts() -> HostsFactory | None:
    """The real hosts to record against; None (replay only) unless a test module or conftest overrides it."""
    return None


@pytest.fixture
def agent_tools_cassette(request: pytest.FixtureRequest, tmp_path: Path, agent_tools_record_mode: str,
                         agent_tools_cassette_dir: Path,
                         agent_tools_hosts: HostsFactory | None) -> CassetteSession:
    """The test's cassette session (see the module docstring)."""
    from ..errors import ReplayError
    from ..recording.session import CassetteSession

    marker = request.node.get_closest_marker("agent_tools_cassette")
    if marker is not None and marker.args:
        name = str(marker.args[0])
    else:
        module = Path(str(request.node.path)).stem
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{module}__{request.node.name}")
    session: CassetteSession | None = None
    try:
        session = CassetteSession(agent_tools_cassette_dir / f"{name}.jsonl", agent_tools_record_mode,
                                  hosts=agent_tools_hosts, state_dir=tmp_path / "agent-tools-state", name=name)
    except ReplayError as exc:
        message = exc.message  # it says how to record the cassette
    if session is None:  # failed outside the except block: pytest shows the message, not a chained traceback
        pytest.fail(message + ("" if agent_tools_hosts is not None else "; " + _NEEDS_HOSTS), pytrace=False)
    if session.recording and agent_tools_hosts is None:
        session.journal.close()
        pytest.fail(f"cannot record cassette {name!r} (--agent-tools-record={agent_tools_record_mode}): "
                    + _NEEDS_HOSTS, pytrace=False)
    return session


_NEEDS_HOSTS = ("recording needs an agent_tools_hosts fixture that returns the real hosts to record against, e.g. "
                "in conftest.py: @pytest.fixture def agent_tools_hosts(): an async context manager factory yielding "
                "agent_tools.HostRegistry() ('local' plus your SSH aliases); see README, Record and replay")


@pytest.fixture
def agent_tools_toolkit(agent_tools_cassette: CassetteSession) -> Toolkit:
    """A Toolkit bound to the test's cassette: replaying it, or recording into it."""
    return agent_tools_cassette.toolkit
