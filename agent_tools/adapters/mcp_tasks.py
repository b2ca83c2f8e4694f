"""MCP Tasks (spec 2025-11-25, experimental) for the long tools, mapped onto agent_tools jobs.

A client that sees ``tasks.requests.tools.call`` in the server's capabilities and ``execution.taskSupport`` on a
tool may send ``tools/call`` with ``params.task`` (``{"ttl": ms}``): the server answers at once with a
``CreateTaskResult`` (``status: working``) and runs the call in the background; the client polls ``tasks/get``,
waits on ``tasks/result`` (the call's ``CallToolResult``, with ``_meta["io.modelcontextprotocol/related-task"]``),
lists its tasks with ``tasks/list`` and stops one with ``tasks/cancel``.

Mapping onto the job: a task runs the call as a plain ``tools/call`` would (approvals and the password page
included). When the result names a job that is not settled (``detached``, ``needs_input`` waiting on a secret, a
``job_status``/``job_input`` whose job still runs or whose readiness is pending), the task follows that job with
``job_status`` (30 s long polls; ``statusMessage`` says its state and why) until it ended and its readiness is
settled; the task's result is then that last ``job_status``. While the job waits on a password the task is
``input_required`` (a person types it: the URL-mode page when the client declared it, else ``agent-tools input JOB
--secret``); it is ``working`` again once the job reads on. The task ends ``completed``, or ``failed`` when the
result is an error (``isError``, as 2025-11-25 asks of tool calls). ``tasks/cancel`` of a task whose call started
the job (``run_command``, ``restart_service``) stops the job's whole process tree (``job_cancel``), unlike
``notifications/cancelled``, which stops a wait, never a job; for a task that only follows a job (``job_status``,
``job_input``, ``wait_for``) it stops the following. A task is kept ``ttl`` ms from its creation (default 1 h, at
most 24 h) and is visible only to the session that made it (its id is 128 random bits besides).

What the installed SDK (``mcp`` 2.3) has, and what is used: the 2025-11-25 wire types (``Task``,
``CreateTaskResult``, ``GetTaskResult``, ``CancelTaskResult``, ``ListTasksResult``, ``ServerTasksCapability``,
``Tool.execution``) exist, but its task runtime (the former ``experimental`` modules) was removed, ``tasks/*`` is
left out of its 2025-11-25 surface maps, and the ``tools/call`` result of a handshake-era connection is sieved (on
the server) and validated (by its client) as a ``CallToolResult`` only, so neither its ``call_tool`` nor a handler
can carry a ``CreateTaskResult`` (python-sdk PR #3161, open). So: a server middleware (``Server.middleware``: its
result is not sieved) answers a task-augmented ``tools/call`` itself, ``tasks/*`` are served with
``Server.add_request_handler`` (methods outside the spec surface reach their handler as they are), and the
capability is added to what ``Server.get_capabilities`` derives. Only handshake-era connections (2025-11-25) get
tasks; on 2026-07-28 the tasks extension (SEP-2663, ``io.modelcontextprotocol/tasks``) has another shape and is not
served: a ``task`` parameter there is ignored and the call runs as usual. No ``notifications/tasks/status`` are
sent (optional in the spec; the SDK's surface does not list it): clients poll ``tasks/get``.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
import mcp.types as types
import structlog
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

if TYPE_CHECKING:
    from .mcp_server import McpToolServer

__all__ = ["RELATED_TASK", "TASK_TOOLS", "McpTasks", "tasks_capability"]

log = structlog.get_logger(__name__)

#: the tools a client may run as a task (the long ones), and those of them whose call starts the job it follows
TASK_TOOLS = ("run_command", "restart_service", "job_status", "job_input", "wait_for")
_STARTS_JOB = ("run_command", "restart_service")
#: ``_meta`` key of a task's result (MCP 2025-11-25)
RELATED_TASK = "io.modelcontextprotocol/related-task"
_DEFAULT_TTL_MS = 3_600_000
_MAX_TTL_MS = 86_400_000
_POLL_INTERVAL_MS = 2000
_FOLLOW_WAIT_S = 30.0
_TERMINAL = ("completed", "failed", "cancelled")


def tasks_capability() -> types.ServerTasksCapability:
    """What the server declares: ``tasks/list``, ``tasks/cancel`` and task-augmented ``tools/call``."""
    return types.ServerTasksCapability(
        list=types.TasksListCapability(), cancel=types.TasksCancelCapability(),
        requests=types.ServerTasksRequestsCapability(tools=types.TasksToolsCapability(call=types.TasksCallCapability())))


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class _Task:
    task_id: str
    tool: str
    owner: Any
    ttl_ms: int
    created_at: str = field(default_factory=_now_iso)
    expires_at: float = 0.0  # wall clock (time.time), for the purge
    status: str = "working"
    message: str = ""
    updated_at: str = field(default_factory=_now_iso)
    job_id: str | None = None
    result: types.CallToolResult | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)

    def set(self, status: str, message: str) -> None:
        if self.status in _TERMINAL:
            return
        self.status, self.message, self.updated_at = status, message[:300], _now_iso()

    def wire(self) -> dict[str, Any]:
        return types.Task(task_id=self.task_id, status=self.status,
                          status_message=self.message or None, created_at=self.created_at,
                          last_updated_at=self.updated_at, ttl=self.ttl_ms,
                          poll_interval=_POLL_INTERVAL_MS).model_dump(by_alias=True, mode="json", exclude_none=True)


class McpTasks:
    """The tasks of one :class:`~agent_tools.adapters.mcp_server.McpToolServer` (see the module docstring): its
    ``tools/call`` middleware (:meth:`__call__`) and its ``tasks/*`` handlers."""

    def __init__(self, server: McpToolServer) -> None:
        self._server = server
        self._tasks: dict[str, _Task] = {}

    # ------------------------------------------------------------------ tools/call with a task
    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if (ctx.method != "tools/call" or not isinstance(params, Mapping) or params.get("task") is None
                or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or params.get("name") not in TASK_TOOLS
                or self._server.background is None):
            return await call_next(ctx)
        try:
            call = types.CallToolRequestParams.model_validate({k: v for k, v in params.items() if k != "task"},
                                                              by_name=False)
            asked = types.TaskMetadata.model_validate(params["task"], by_name=False)
        except ValueError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=f"invalid task-augmented tools/call: {exc}") from exc
        self._purge()
        ttl = min(asked.ttl if asked.ttl and asked.ttl > 0 else _DEFAULT_TTL_MS, _MAX_TTL_MS)
        task = _Task(task_id=secrets.token_urlsafe(16), tool=call.name, owner=_owner(ctx), ttl_ms=ttl,
                     expires_at=time.time() + ttl / 1000)
        task.set("working", f"{call.name} started")
        self._tasks[task.task_id] = task
        self._server.background.start_soon(self._run, task, ctx, call)
        log.info("mcp.task_created", task_id=task.task_id, tool=call.name, ttl_ms=ttl)
        return {"task": task.wire()}

    async def _run(self, task: _Task, ctx: ServerRequestContext[Any, Any], call: types.CallToolRequestParams) -> None:
        """The task's work: the call, then the job it names followed to its end (see the module docstring)."""
        server = self._server
        try:
            with task.scope:
                result = await server.call_tool(ctx, call)
                if not isinstance(result, types.CallToolResult):  # (an InputRequiredResult: modern connections only)
                    raise RuntimeError("the call asked for input in a way a task cannot carry")
                data = _data(result)
                while (job_id := _unsettled_job(data)) is not None:
                    task.job_id = job_id
                    secret = data.get("secret") is True
                    task.set("input_required" if secret else "working", _status_message(job_id, data))
                    status = await server.toolkit.dispatch("job_status", {"job_id": job_id, "wait_s": _FOLLOW_WAIT_S})
                    result = server.tool_result("job_status", status)
                    data = status
                task.result = result
                task.set("failed" if result.is_error else "completed", _status_message(task.job_id, data))
        except Exception as exc:  # a bug, or a call that failed outside any outcome: the task fails, saying why
            log.exception("mcp.task_failed", task_id=task.task_id)
            task.result = types.CallToolResult(content=[types.TextContent(type="text", text=f"task failed: {exc}")],
                                               is_error=True)
            task.set("failed", f"{type(exc).__name__}: {exc}")
        finally:
            if task.status not in _TERMINAL:  # cancelled (tasks/cancel set the result and the status)
                task.set("cancelled", "cancelled")
            task.done.set()
            log.info("mcp.task_done", task_id=task.task_id, status=task.status, job_id=task.job_id)

    # ------------------------------------------------------------------ tasks/*
    def _find(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> _Task:
        self._purge()
        task = self._tasks.get(task_id)
        if task is None or task.owner is not _owner(ctx):
            raise MCPError(code=types.INVALID_PARAMS, message=f"no task {task_id!r} (unknown, expired, or another "
                                                              "session's)")
        return task

    async def get(self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams) -> dict[str, Any]:
        """``tasks/get``: the task's status now."""
        return self._find(ctx, params.task_id).wire()

    async def result(self, ctx: ServerRequestContext[Any, Any],
                     params: types.GetTaskPayloadRequestParams) -> dict[str, Any]:
        """``tasks/result``: waits until the task is terminal, then its call's result (``CallToolResult``)."""
        task = self._find(ctx, params.task_id)
        await task.done.wait()
        if task.result is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"task {task.task_id} was {task.status}: no result")
        out = task.result.model_dump(by_alias=True, mode="json", exclude_none=True)
        out.pop("resultType", None)  # a 2026-07-28 field (handshake-era connections have tasks; it is not sieved)
        out["_meta"] = {**(out.get("_meta") or {}), RELATED_TASK: {"taskId": task.task_id}}
        return out

    async def cancel(self, ctx: ServerRequestContext[Any, Any],
                     params: types.CancelTaskRequestParams) -> dict[str, Any]:
        """``tasks/cancel``: stops the task; a task whose call started a job stops the job's whole tree."""
        task = self._find(ctx, params.task_id)
        if task.status in _TERMINAL:
            raise MCPError(code=types.INVALID_PARAMS, message=f"task {task.task_id} is {task.status} already")
        task.scope.cancel()
        with anyio.move_on_after(10):
            await task.done.wait()  # the work stopped (it marks the task cancelled), or it had just ended
        if task.status == "cancelled" and task.job_id is not None and task.tool in _STARTS_JOB:
            stopped = await self._server.toolkit.dispatch("job_cancel", {"job_id": task.job_id, "grace_s": 5})
            task.result = self._server.tool_result("job_cancel", stopped)
            task.message = f"cancelled: job {task.job_id} {stopped.get('state') or stopped.get('outcome')}"
            task.updated_at = _now_iso()
        log.info("mcp.task_cancelled", task_id=task.task_id, job_id=task.job_id, status=task.status)
        return task.wire()

    async def list_tasks(self, ctx: ServerRequestContext[Any, Any],
                   params: types.PaginatedRequestParams) -> dict[str, Any]:
        """``tasks/list``: this session's tasks, newest first (one page: they expire with their ttl)."""
        self._purge()
        mine = [t for t in self._tasks.values() if t.owner is _owner(ctx)]
        return {"tasks": [t.wire() for t in reversed(mine)]}

    def _purge(self) -> None:
        now = time.time()
        for task_id in [t.task_id for t in self._tasks.values() if t.expires_at < now and t.done.is_set()]:
            del self._tasks[task_id]


def _owner(ctx: ServerRequestContext[Any, Any]) -> Any:
    """What a task belongs to: its connection, known by the client's ``initialize`` params the connection keeps (the
    SDK's session object is made per request; tasks exist on handshake-era connections only)."""
    return ctx.session.client_params


def _data(result: types.CallToolResult) -> dict[str, Any]:
    if result.structured_content is not None:
        return dict(result.structured_content)
    text = next((c.text for c in result.content if isinstance(c, types.TextContent)), "{}")
    try:
        loaded = json.loads(text)
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _unsettled_job(data: dict[str, Any]) -> str | None:
    """The job a result names when the task is to follow it: started and running, waiting on a password, or still
    pending readiness; else None."""
    job_id = data.get("job_id")
    if not isinstance(job_id, str):
        return None
    outcome, state = data.get("outcome"), data.get("state")
    if outcome == "detached" or (outcome == "needs_input" and data.get("secret") is True):
        return job_id
    if state in ("running", "unconfirmed") or data.get("readiness") == "pending":
        return job_id
    return None


def _status_message(job_id: str | None, data: dict[str, Any]) -> str:
    what = data.get("state") or data.get("outcome") or "?"
    readiness = data.get("readiness")
    head = f"job {job_id}: {what}" + (f", readiness {readiness}" if readiness and readiness != "none" else "")
    why = data.get("prompt") if data.get("secret") else data.get("why")
    return f"{head}; {why}" if why else head
