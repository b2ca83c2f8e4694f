"""Talking to fleet rollouts: start one, read its state, approve a waiting step, cancel it."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowHandle

from .model import RolloutSpec
from .workflow import FleetRollout, approval_problem, spec_problem

__all__ = ["approve", "cancel", "start_rollout", "status"]


async def start_rollout(client: Client, spec: RolloutSpec, *, workflow_id: str,
                        task_queue: str) -> WorkflowHandle[Any, Any]:
    """Start ``FleetRollout`` with ``spec`` as workflow ``workflow_id`` on ``task_queue``.

    :raises ValueError: the spec is invalid (:func:`~agent_tools.fleet.workflow.spec_problem`); nothing started."""
    problem = spec_problem(spec)
    if problem:
        raise ValueError(f"invalid rollout: {problem}")
    return await client.start_workflow(FleetRollout.run, spec, id=workflow_id, task_queue=task_queue)


async def status(client: Client, workflow_id: str) -> dict[str, Any]:
    """The rollout's ``status`` query, plus ``"workflow": RUNNING | COMPLETED | ...`` (the execution's status)."""
    handle = client.get_workflow_handle(workflow_id)
    desc = await handle.describe()
    state: dict[str, Any] = await handle.query(FleetRollout.status)
    return {"workflow": desc.status.name if desc.status else "UNKNOWN", **state}


async def approve(client: Client, workflow_id: str, host: str, by: str) -> None:
    """Signal the person's yes for ``host`` (``"*"``: every host) of the rollout.

    :raises ValueError: the host is not waiting for approval (:func:`~agent_tools.fleet.workflow.approval_problem`
        on the rollout's status now; the workflow checks again when the signal arrives and lists a late one in
        ``rejected_approvals``); nothing was sent."""
    handle = client.get_workflow_handle(workflow_id)
    problem = approval_problem(await handle.query(FleetRollout.status), host)
    if problem:
        raise ValueError(f"not approved: {problem}")
    await handle.signal(FleetRollout.approve, {"host": host, "by": by})


async def cancel(client: Client, workflow_id: str) -> None:
    """Request cancellation: running activities cancel their jobs, hosts not done become ``cancelled``."""
    await client.get_workflow_handle(workflow_id).cancel()
