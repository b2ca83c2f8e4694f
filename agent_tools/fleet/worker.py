"""A fleet worker: the fleet workflows and the activities of :mod:`.activities` over one Toolkit, on one task
queue. Several workers (processes, machines) share a queue; each keeps its own per-host channel limit (its
Toolkit's SSH pool) and its own policies.
"""

from __future__ import annotations

from datetime import timedelta

import anyio
import structlog
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from ..tools.toolkit import Toolkit
from .activities import FleetActivities
from .client import connect
from .workflow import FleetRollout, FleetSteps, HostJob

__all__ = ["HEARTBEAT_THROTTLE_S", "WORKFLOWS", "build_worker", "connect", "run_worker"]

log = structlog.get_logger(__name__)

#: the workflow classes a fleet worker runs (the Replayer takes the same list)
WORKFLOWS = [FleetRollout, FleetSteps, HostJob]


def sandbox_runner() -> SandboxedWorkflowRunner:
    """Temporal's workflow sandbox with this package passed through (the workflow module imports only its own
    model; passing ``agent_tools`` through spares re-importing the library per workflow run)."""
    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules("agent_tools"))


#: the longest the SDK holds back an activity's heartbeats (it sends at most one per this interval, at most 0.8 of
#: the heartbeat timeout): a cancel request reaches an activity only in the answer to a heartbeat, so this is about
#: how long a running step takes to learn of a rollout's cancel (the SDK's default: up to 30-60 s)
HEARTBEAT_THROTTLE_S = 1.0


def build_worker(client: Client, task_queue: str, toolkit: Toolkit, *, max_concurrent_activities: int = 64,
                 poll_s: float = 1.0, sticky_timeout_s: float = 10.0,
                 activities: FleetActivities | None = None) -> Worker:
    """A :class:`temporalio.worker.Worker` running the fleet workflows and activities (not started); activities
    send a heartbeat about every :data:`HEARTBEAT_THROTTLE_S` seconds while they run.

    :param activities: the activities to run (default: :class:`FleetActivities` over ``toolkit``, following jobs
        with ``poll_s``-second long polls); a subclass changes what a step does (tests make steps slow or fail).
    :param sticky_timeout_s: how long the server keeps a workflow's next task for this worker (its cached
        workflow state) before any worker of the queue may take it (``sticky_queue_schedule_to_start_timeout``,
        10 s in the SDK): after this worker dies, the rollout waits that long once before another worker
        replays it."""
    acts = activities or FleetActivities(toolkit, poll_s=poll_s)
    throttle = timedelta(seconds=HEARTBEAT_THROTTLE_S)
    return Worker(client, task_queue=task_queue, workflows=WORKFLOWS, activities=acts.all(),
                  workflow_runner=sandbox_runner(), max_concurrent_activities=max_concurrent_activities,
                  sticky_queue_schedule_to_start_timeout=timedelta(seconds=sticky_timeout_s),
                  max_heartbeat_throttle_interval=throttle, default_heartbeat_throttle_interval=throttle)


async def run_worker(target: str, task_queue: str, toolkit: Toolkit, *, stop: anyio.Event | None = None,
                     namespace: str = "default", ready: anyio.Event | None = None,
                     sticky_timeout_s: float = 10.0) -> None:
    """Run a fleet worker (:func:`build_worker`) until ``stop`` is set (or forever, until cancelled); ``ready`` is
    set once it polls."""
    client = await connect(target, namespace)
    worker = build_worker(client, task_queue, toolkit, sticky_timeout_s=sticky_timeout_s)
    async with worker:
        log.info("fleet.worker_started", target=target, task_queue=task_queue)
        if ready is not None:
            ready.set()
        await (stop or anyio.Event()).wait()
