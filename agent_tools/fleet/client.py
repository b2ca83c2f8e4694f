"""Talking to fleet rollouts: start one, read its state, approve a waiting step, cancel it.

Temporal's own errors (a workflow id that does not exist, a server that cannot be reached, an id already used)
are translated here into :class:`RolloutError`: one line for a person and an exit code.

Reading a rollout's state needs a worker only while it runs (the ``status`` query is answered by the worker
holding the workflow): a finished rollout's status is its result (COMPLETED) or the status it wrote to its memo
(cancelled), both read from the server; a running one whose query no worker answers shows the status of its
memo (written after each wave) with ``answered`` false and why.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from .model import RolloutSpec
from .workflow import STATUS_MEMO, FleetRollout, approval_problem, spec_problem, waiting_hosts

__all__ = ["RolloutError", "approve", "cancel", "connect", "start_rollout", "status"]

#: how long a ``status`` query waits for a worker's answer, seconds
QUERY_TIMEOUT_S = 10.0


class RolloutError(Exception):
    """A rollout command that cannot be done: ``str(exc)`` says why in one line; ``exit_code``: 1 (the server or
    the rollout's state says no) or 2 (the arguments are wrong)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


async def connect(target: str, namespace: str = "default") -> Client:
    """A Temporal client of the server at ``target`` (``HOST:PORT``).

    :raises RolloutError: the server cannot be reached."""
    try:
        return await Client.connect(target, namespace=namespace)
    except RuntimeError as exc:  # temporalio's "Failed client connect: ... message: \"Connection refused\" ..."
        said = re.search(r'message: "([^"]+)"', str(exc))
        raise RolloutError(f"cannot reach the Temporal server at {target}: "
                           + (said.group(1) if said else _first_line(exc))) from exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


async def _describe(client: Client, workflow_id: str) -> WorkflowExecutionDescription:
    """:raises RolloutError: no such workflow, or the server said no."""
    try:
        return await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise RolloutError(f"no rollout {workflow_id} on this Temporal server (namespace "
                               f"{client.namespace})") from exc
        raise RolloutError(f"the Temporal server: {_first_line(exc)}") from exc


def _state(desc: WorkflowExecutionDescription) -> str:
    return desc.status.name if desc.status else "UNKNOWN"


async def start_rollout(client: Client, spec: RolloutSpec, *, workflow_id: str, task_queue: str,
                        reuse_id: bool = False) -> WorkflowHandle[Any, Any]:
    """Start ``FleetRollout`` with ``spec`` as workflow ``workflow_id`` on ``task_queue``.

    :param reuse_id: start although a finished rollout had this id (a new run under it: the old run's status is
        then no longer what the id shows). Without it such an id is refused.
    :raises ValueError: the spec is invalid (:func:`~agent_tools.fleet.workflow.spec_problem`); nothing started.
    :raises RolloutError: the id is in use (running, or finished and ``reuse_id`` false); nothing started."""
    problem = spec_problem(spec)
    if problem:
        raise ValueError(f"invalid rollout: {problem}")
    policy = WorkflowIDReusePolicy.ALLOW_DUPLICATE if reuse_id else WorkflowIDReusePolicy.REJECT_DUPLICATE
    try:
        return await client.start_workflow(FleetRollout.run, spec, id=workflow_id, task_queue=task_queue,
                                           id_reuse_policy=policy)
    except WorkflowAlreadyStartedError as exc:
        desc = await _describe(client, workflow_id)
        if desc.status == WorkflowExecutionStatus.RUNNING:
            raise RolloutError(f"rollout {workflow_id} is running (started {_when(desc.start_time)}): choose "
                               "another --id; see it with: agent-tools rollout status") from exc
        raise RolloutError(f"rollout {workflow_id} already ran ({_state(desc)}, closed {_when(desc.close_time)}): "
                           "its record stays; choose another --id (--reuse-id starts a new run under this id, and "
                           "the old run's status is then no longer shown by it)") from exc
    except RPCError as exc:
        raise RolloutError(f"the Temporal server refused the start: {_first_line(exc)}") from exc


def _when(t: datetime | None) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if t else "at an unknown time"


async def status(client: Client, workflow_id: str, *, query_timeout_s: float = QUERY_TIMEOUT_S) -> dict[str, Any]:
    """The rollout's status plus ``"workflow": RUNNING | COMPLETED | CANCELED | ...`` (the execution's status),
    ``"task_queue"`` and ``"answered"`` (false: a running rollout whose query no worker answered).

    RUNNING: the ``status`` query (given ``query_timeout_s`` seconds), each host's running step with its attempt
    and last failure from the workflow's description (``step``: ``activity``, ``attempt``, ``max_attempts``,
    ``last_failure``, ``heartbeat``: what the activity last reported); when no worker answers, the status last
    written to the memo with ``answered`` false and ``why``. Ended, read from the server without a worker: the
    result (COMPLETED), the status written to the memo when the cancel ended it (CANCELED), else (terminated,
    failed) the one it recorded after its last wave, with ``why`` saying so.

    :raises RolloutError: no such rollout, or the server cannot be asked."""
    handle = client.get_workflow_handle(workflow_id)
    desc = await _describe(client, workflow_id)
    base: dict[str, Any] = {"workflow": _state(desc), "task_queue": desc.task_queue}
    memo = (await desc.memo()).get(STATUS_MEMO)
    recorded: dict[str, Any] = memo if isinstance(memo, dict) else {}
    if desc.status == WorkflowExecutionStatus.RUNNING:
        why = await _no_worker(client, desc.task_queue)
        if why is None:
            try:
                live: dict[str, Any] = await handle.query(FleetRollout.status,
                                                          rpc_timeout=timedelta(seconds=query_timeout_s))
            except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
                why = f"no worker answered the status query ({_first_line(exc)})"
            else:
                await _add_pending(client, desc, live)
                return {**base, "answered": True, **live}
        return {**base, "answered": False, "hosts": {}, **recorded,
                "why": f"{why}: start a worker on task queue {desc.task_queue} (agent-tools worker); "
                       + ("the status below was recorded after the last wave that ended" if recorded else
                          "no status was recorded yet")}
    if desc.status == WorkflowExecutionStatus.COMPLETED:
        result: dict[str, Any] = await handle.result()
        return {**base, "answered": True, **result}
    if recorded and desc.status == WorkflowExecutionStatus.CANCELED:  # written when the cancel ended it
        return {**base, "answered": True, **recorded}
    if recorded:  # terminated, failed, timed out: what it wrote after its last wave
        return {**base, "answered": True, **recorded,
                "why": f"it ended {_state(desc)} before it finished: the status below is the one it recorded after "
                       "its last wave that ended"}
    try:
        await handle.result()
        why = "it recorded no status"
    except WorkflowFailureError as exc:
        why = f"it recorded no status: {_first_line(exc.cause or exc)}"
    return {**base, "answered": True, "phase": _state(desc).lower(), "hosts": {}, "why": why}


async def _no_worker(client: Client, task_queue: str) -> str | None:
    """Why no worker can answer a query on ``task_queue`` (none polled it in the last 2 minutes), or None."""
    try:
        resp = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace=client.namespace, task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
    except RPCError:
        return None  # not known: let the query say
    now = datetime.now(UTC)
    recent = [p for p in resp.pollers if now - p.last_access_time.ToDatetime(UTC) < timedelta(seconds=120)]
    return None if recent else f"no worker polls task queue {task_queue}"


async def _add_pending(client: Client, desc: WorkflowExecutionDescription, st: dict[str, Any]) -> None:
    """Each host's running ``step`` (named by the workflow) with what the server knows of its activity: the
    attempt, the last failure (why it is being retried: an unreachable host, a dead worker's heartbeat timeout)
    and the last heartbeat (a restart's job id and probe states)."""
    by_id = {}
    for pa in desc.raw_description.pending_activities:
        info: dict[str, Any] = {"attempt": pa.attempt, "max_attempts": pa.maximum_attempts}
        if pa.HasField("last_failure") and pa.last_failure.message:
            failure = pa.last_failure
            if failure.HasField("timeout_failure_info"):
                kind = "timeout"
            elif failure.HasField("application_failure_info"):
                kind = failure.application_failure_info.type
            else:
                kind = ""
            info["last_failure"] = f"{kind}: {failure.message}" if kind else failure.message
        if pa.heartbeat_details.payloads:
            try:
                beats = await client.data_converter.decode(pa.heartbeat_details.payloads)
            except Exception:  # what an activity last reported is extra information: never fatal here
                beats = []
            if beats and isinstance(beats[-1], dict):
                info["heartbeat"] = beats[-1]
        by_id[pa.activity_id] = info
    for host in (st.get("hosts") or {}).values():
        step = host.get("step")
        if isinstance(step, dict) and step.get("activity_id") in by_id:
            step.update(by_id[step["activity_id"]])
            job = (step.get("heartbeat") or {}).get("job_id")
            if job and not host.get("job_id"):
                host["job_id"] = job


async def approve(client: Client, workflow_id: str, hosts: list[str], by: str) -> list[dict[str, Any]]:
    """Signal the person's yes for each of ``hosts`` (``"*"``: every host waiting for approval now, never a later
    one); returns what was approved: ``[{"host", "step", "command", "rule_id", "reason"}]``.

    :raises RolloutError: a host is not waiting for approval (:func:`~agent_tools.fleet.workflow.approval_problem`
        on the rollout's status now; the workflow checks again when the signal arrives and lists a late one in
        ``rejected_approvals``), the rollout is not running, or no worker answers; nothing was sent."""
    st = await status(client, workflow_id)
    if st["workflow"] != "RUNNING":
        raise RolloutError(f"rollout {workflow_id} ended ({st['workflow']}): nothing to approve")
    if not st.get("answered"):
        raise RolloutError(f"not approved: {st.get('why')}")
    chosen: list[str] = []
    for host in hosts:
        problem = approval_problem(st, host)
        if problem:
            raise RolloutError(f"not approved: {problem}", exit_code=2)
        chosen.extend(h for h in (waiting_hosts(st) if host == "*" else [host]) if h not in chosen)
    await client.get_workflow_handle(workflow_id).signal(FleetRollout.approve, {"hosts": chosen, "by": by})
    return [{"host": h, **(st["hosts"][h].get("approval") or {})} for h in chosen]


async def cancel(client: Client, workflow_id: str) -> bool:
    """Request cancellation: running steps stop (jobs they follow are cancelled on the hosts), hosts whose unit
    was changed are put back, hosts not done become ``cancelled``. Returns False when a cancel had been requested
    already (nothing new was sent).

    :raises RolloutError: no such rollout, or it has ended (nothing to cancel)."""
    handle = client.get_workflow_handle(workflow_id)
    desc = await _describe(client, workflow_id)
    if desc.status != WorkflowExecutionStatus.RUNNING:
        raise RolloutError(f"rollout {workflow_id} already ended ({_state(desc)}): nothing to cancel")
    if desc.raw_description.workflow_extended_info.cancel_requested:
        return False
    try:
        await handle.cancel()
    except RPCError as exc:
        raise RolloutError(f"the Temporal server refused the cancel: {_first_line(exc)}") from exc
    return True
