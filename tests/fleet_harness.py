"""The fleet suites' fixtures and helpers (tests/test_fleet_temporal.py, tests/test_fleet_rollout_truth.py): the
real Temporal dev server (``temporal`` fixture, one per test module), embedded simulated GPU nodes, in-process
workers, replay of a recorded history, the CLI.

Nothing here imports temporalio at import time (tests/conftest.py imports the fixtures for every suite, also
where the extra is not installed); the suites that use them skip without it.
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from agent_tools.demo.node import EmbeddedNode, run_node
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

    from agent_tools.fleet.activities import FleetActivities
    from agent_tools.fleet.devserver import DevServer

__all__ = ["cli", "fleet_config", "ids", "in_process_worker", "nodes", "replays", "stack", "state_of", "temporal",
           "toolkit"]


@pytest.fixture(scope="module")
def temporal() -> Iterator[DevServer]:
    """One dev server for the module (SQLite database in a temp dir)."""
    from agent_tools.fleet.devserver import spawn_dev_server

    with tempfile.TemporaryDirectory(prefix="at-temporal-") as tmp:
        server = spawn_dev_server(Path(tmp) / "temporal.db", log=Path(tmp) / "temporal.log")
        try:
            anyio.run(server.wait_ready)
            yield server
        finally:
            server.stop()


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def nodes(stack: AsyncExitStack, tmp: Path, specs: list[tuple[str, str]], load_s: float
                ) -> dict[str, EmbeddedNode]:
    """Embedded nodes ``(alias, profile)``, stopped with ``stack``."""
    out: dict[str, EmbeddedNode] = {}
    for alias, profile in specs:
        (tmp / alias).mkdir()
        out[alias] = await stack.enter_async_context(run_node(profile, load_s=load_s, workdir=tmp / alias,
                                                              alias=alias))
    return out


def fleet_config(tmp: Path, nodes: dict[str, EmbeddedNode]) -> Path:
    """One SSH client config naming every node."""
    config = tmp / "fleet_ssh_config"
    config.write_text("\n".join(n.ssh_config.read_text() for n in nodes.values()))
    return config


def toolkit(tmp: Path, nodes: dict[str, EmbeddedNode], name: str, policy: Any = None) -> Toolkit:
    """A worker's Toolkit: every node, a journal of its own."""
    registry = HostRegistry(ssh_config=[str(fleet_config(tmp, nodes))])
    return Toolkit(registry, journal=Journal(tmp / f"{name}.sqlite3"), policy=policy)


async def in_process_worker(stack: AsyncExitStack, client: Client, queue: str, tk: Toolkit,
                            activities: FleetActivities | None = None) -> None:
    """A fleet worker over ``tk`` (``activities``: other steps, see ``build_worker``), stopped with ``stack``."""
    from agent_tools.fleet.worker import build_worker

    await stack.enter_async_context(tk)
    await stack.enter_async_context(build_worker(client, queue, tk, activities=activities))


async def replays(handle: WorkflowHandle[Any, Any]) -> None:
    """The recorded history replays deterministically with the current workflow code."""
    from temporalio.worker import Replayer

    from agent_tools.fleet.worker import WORKFLOWS, sandbox_runner

    history = await handle.fetch_history()
    result = await Replayer(workflows=WORKFLOWS, workflow_runner=sandbox_runner()).replay_workflow(
        history, raise_on_replay_failure=True)
    assert result.replay_failure is None


async def cli(*args: str) -> str:
    """``agent-tools ARGS`` (this interpreter); its stdout. :raises AssertionError: it failed."""
    res = await anyio.run_process([sys.executable, "-m", "agent_tools.cli", *args], check=False)
    assert res.returncode == 0, (args, res.stdout, res.stderr)
    return res.stdout.decode()


def state_of(st: dict[str, Any], host: str) -> str | None:
    """A host's state in a status read while the rollout runs (none yet: no worker has answered so far)."""
    return (st["hosts"].get(host) or {}).get("state")


def ids() -> tuple[str, str]:
    """A fresh workflow id and task queue."""
    tag = uuid.uuid4().hex[:8]
    return f"rollout-{tag}", f"queue-{tag}"
