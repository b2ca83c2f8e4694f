"""The Toolkit as an MCP server (official MCP Python SDK 2.x, low-level ``Server``).

Every tool registered on the :class:`~agent_tools.tools.toolkit.Toolkit` is listed with the schema and
description of :func:`~agent_tools.adapters.schemas.tool_schemas` (``"mcp"``) — the low-level server is used
so the schema sent is exactly ours, not one re-derived from a Python signature — and an ``outputSchema``
generated from the tool's result models (:func:`~agent_tools.adapters.schemas.output_schema`; MCP 2025-06-18:
clients validate ``structuredContent`` against it). A call goes through :meth:`Toolkit.dispatch`; its result
is returned as compact JSON text (bounded, see :func:`~agent_tools.adapters.schemas.encode_result`) plus the
same JSON as ``structuredContent``, with ``isError`` set for ``error`` and ``denied`` outcomes. Should the
bounding of a very large result (a small ``max_result_chars``) leave a shape the output schema does not allow,
``structuredContent`` carries the whole result instead (the text stays bounded) and a warning is logged.

What the model reads, and why the JSON is sent twice: MCP clients hand the model one of the two, not both —
Claude Code, Codex and opencode give it ``structuredContent`` when there is one; others (kimi-code, Hermes)
give it the text content and fall back to ``structuredContent`` only when the content is empty; some skip
``structuredContent`` when a text block repeats it verbatim. So the text is exactly the JSON of
``structuredContent`` (compact, integral numbers as integers: the text ``JSON.stringify`` gives), never a
lossy summary that a content-first client would be left with. For a client that passes both to the model
anyway, ``structured_content=False`` (``agent-tools mcp --no-structured-content``) sends the text alone: one
copy.

Long calls (``job_status`` with ``wait_s``, a ``run_command`` within its budget, ``wait_for``): while the
dispatch runs, a progress notification goes out every ``progress_interval_s`` seconds — ``progress`` is the
seconds elapsed, ``total`` the call's ``wait_s``/``budget_s``/``timeout_s``/``deadline_s`` when it has one —
provided the client sent a progress token (the SDK sends nothing otherwise). Clients that reset their request timeout on
progress keep long polls alive this way.

Cancellation: when the client cancels a call (``notifications/cancelled``), the SDK cancels the handler and
so the dispatch — that is the wait, never the job: jobs run on their host under their own monitor and are
only stopped by ``job_cancel``. The cancel is logged (``mcp.call_cancelled``).

Approval: when a call ends in ``needs_approval`` and the client declared the elicitation capability, the
operator is asked through it — by an ``elicitation/create`` request on handshake-era connections (the server
sends it and waits for the answer), or by an ``InputRequiredResult`` on 2026-07-28 connections (which forbid
server-to-client requests). The form shows the host, the working directory, the environment, the rule, the digest
the approval is bound to, the whole command and what the call writes (write_file's content, edit_file's diff: the
digest binds it), secrets of a certain shape redacted (never code) with a warning that counts them. Accept: the
approval is recorded (``approvals.approve(approval_id, by="mcp-elicitation")`` when an approval store is given or
the toolkit has an ``approvals`` attribute) and the call is made again with
``approval_id``. Decline/cancel: the approval is rejected and the call returns ``denied``. Without elicitation the
``needs_approval`` outcome itself is the tool result (a person approves out of band: ``agent-tools approvals
approve ID``).

The ``request_state`` of an ``InputRequiredResult`` is issued by this server and checked on the retry: it holds a
random nonce and an HMAC-SHA256, under a secret of this server object, of the approval id, the nonce and a digest
of the exact call; it is single use and expires with ``elicitation_timeout_s``. A state the server did not issue
(a client that computed one), one used already, a changed call, a connection that is not on a modern protocol
version or a client that declared no form elicitation is refused: nothing is approved or run. Elicitation still
trusts the client: it is as strong as the client's promise to show the form to a person.

Being told: a job this server started for a client (a ``run_command``/``restart_service`` that came back
``detached``, or ``needs_input`` waiting on a secret) is watched in the background (:meth:`McpToolServer.lifespan`'s
task group): its host is looked at (:meth:`Toolkit.job_info`: state, and readiness while probes can change it; no
output is read, so what the agent has not seen stays unseen) every ``job_watch_interval_s`` seconds, growing to
10 s (not while a ``job_status``/``job_input``/``job_cancel`` of the agent follows it: that call shows the change),
and when its state leaves ``running`` or its readiness changes, unless a result already showed the agent that
(:meth:`~agent_tools.jobs.journal.Journal.looks`), a ``notifications/message`` (level
``notice``, logger ``agent_tools.jobs``) goes to the client that started it, with ``data`` = ``{"event":
"job_ended" | "job_readiness", "job": <its list_jobs entry>, "was": {"state": ..., "readiness": ...}}``, redacted
like every result. The watch ends once the job has ended and its readiness is settled, or the connection is gone.
The server declares the ``logging`` capability and honours ``logging/setLevel`` (a level above ``notice`` turns
these off). While a ``job_status``/``job_input`` call waits, each progress notification's message carries the
newest lines the job printed (not yet shown to the agent: its result still shows them).

A job waiting on a password (``needs_input`` with ``secret``): when the client declared URL-mode elicitation
(MCP 2025-11-25; form mode must not carry sensitive data) and can take a server request, the operator is sent
(``elicitation/create``, mode ``url``) to a one-time page on 127.0.0.1 (:mod:`agent_tools.adapters.secret_page`)
whose form writes the value straight to the job's pipe, then ``notifications/elicitation/complete``; the model's
result only says that the page was offered. Otherwise the result names ``agent-tools input JOB --secret``.

Transports: :func:`serve_stdio`, and :func:`serve_http` (streamable HTTP with a bearer token and Host/Origin
checks; see :mod:`agent_tools.adapters.mcp_http`).

Logs go to stderr only (stdout carries the protocol on stdio); entry points configure structlog.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import secrets
import time
import warnings
from collections.abc import AsyncIterator
from typing import Any, Protocol

import anyio
import anyio.abc
import mcp.types as types
import structlog
from mcp.server import Server, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from .. import __version__
from ..display import safe_text
from ..outcomes import Denied, ErrorOutcome, result_view
from ..redact import redact, redact_obj, review_text
from ..tools.toolkit import Toolkit
from .mcp_http import serve_http
from .mcp_tasks import TASK_TOOLS, McpTasks, tasks_capability
from .schemas import (
    DEFAULT_MAX_RESULT_CHARS,
    DEFAULT_MAX_RESULT_TOKENS,
    encode_result,
    is_error_result,
    output_schema,
    tool_schema,
    tool_schemas,
)
from .secret_page import SecretPage

__all__ = ["APPROVAL_STATE_PREFIX", "ApprovalSink", "McpToolServer", "build_mcp_server", "serve_http",
           "serve_stdio"]

log = structlog.get_logger(__name__)

APPROVAL_STATE_PREFIX = "agent-tools/approval:"
"""``request_state`` of the ``InputRequiredResult`` that asks for an approval (2026-07-28 connections):
``PREFIX + approval_id + "/" + nonce + "/" + HMAC`` (see the module docstring), checked on the retry."""

INSTRUCTIONS = (
    "Shell commands on local and SSH hosts under per-command budgets. run_command always returns one "
    "outcome; work that outlives its budget is 'detached' into a durable job that keeps running on the host: "
    "follow it with job_status(job_id, wait_s=...) (long-poll; progress is reported while waiting), page its "
    "output with job_output, stop it with job_cancel. Cancelling a call stops the wait, never the job. "
    "Results lead with the state and name the next call in 'next'.")

_APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Run this command",
                               "description": "approve this exact command on this host, once",
                               "default": False}},
    "required": ["approve"],
}
_WAIT_KEYS = ("wait_s", "budget_s", "timeout_s", "deadline_s")
#: job states that can still end (a job that left them has ended: job_ended)
_RUNNING = ("running", "unconfirmed")
#: RFC 5424 severities as MCP names them, lowest first (logging/setLevel)
_LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class ApprovalSink(Protocol):
    """Where an operator's answer is recorded (``agent_tools.policy.ApprovalStore`` fits)."""

    def approve(self, approval_id: str, *, by: str | None = None) -> Any: ...

    def reject(self, approval_id: str, *, by: str | None = None) -> Any: ...


def _accepted(answer: types.ElicitResult | None) -> bool:
    return bool(answer is not None and answer.action == "accept" and (answer.content or {}).get("approve") is True)


def _call_digest(name: str, arguments: dict[str, Any]) -> str:
    """Binds an approval round trip to the exact call it was asked for (the retry must not change it)."""
    canonical = json.dumps([name, {k: v for k, v in arguments.items() if k != "approval_id"}], sort_keys=True,
                           separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _approval_message(name: str, arguments: dict[str, Any], outcome: dict[str, Any],
                      payload: str | None = None, reason: str | None = None) -> str:
    """The elicitation text: host, cwd, env, rule, digest and the whole command as the agent sent it, and what the
    call writes (``payload``, as the approval store keeps it: write_file's content, edit_file's diff), secrets of a
    certain shape redacted where the hidden text cannot be code (:func:`~agent_tools.redact.review_text`), and how
    many spans that hid. Control, bidi and invisible characters are shown as visible escapes (``\\x1b``,
    ``\\u202e``: :func:`~agent_tools.display.safe_text`), so a client printing the text on a terminal shows what
    runs, not what the command draws. ``reason``: the policy's reason as decided (the outcome's own is redacted
    for storage, and may hide code the prompt shows)."""
    command = arguments.get("command")
    if not isinstance(command, str):  # a tool whose approval is not about a command line (write_file: tee PATH)
        command = str(outcome.get("command") or "")
    shown, hidden = review_text(command)
    env = arguments.get("env") if isinstance(arguments.get("env"), dict) else None
    env_text = " ".join(f"{k}={v}" for k, v in redact_obj(env).items()) if env else ""
    where = str(arguments.get("cwd") or outcome.get("cwd") or "")
    escaped = safe_text(shown)
    escapes = escaped != shown
    lines = [f"The agent wants to run ({safe_text(name)}) on {safe_text(str(outcome.get('host')))}",
             f"in {safe_text(review_text(where)[0]) if where else 'the login directory'}",
             "with env " + (safe_text(env_text) if env else "(none given)") + ":",
             "", "    " + escaped.replace("\n", "\n    "), ""]
    if payload is not None:
        written, more = review_text(payload)
        hidden += more
        written_escaped = safe_text(written)
        lines += ["It writes:", "", "    " + written_escaped.replace("\n", "\n    "), ""]
        escapes = escapes or written_escaped != written
    if escapes:
        lines.append("Control or invisible characters are shown as escapes (\\x1b, \\r, \\u202e).")
    if hidden:
        lines.append(f"Warning: {hidden} span(s) of a certain secret shape (tokens, keys, passwords) are shown as "
                     "[REDACTED]; they are values the shell does not expand (never code or a glob), and the digest "
                     "binds the real text.")
    bound = "host, command, cwd, env" + (" and what it writes" if payload is not None else "")
    reason = safe_text(review_text(reason if reason is not None else str(outcome.get("reason") or ""))[0])
    lines.append(f"Digest {outcome.get('command_digest') or '?'} (SHA-256 of the {bound}). Policy "
                 f"rule {safe_text(str(outcome.get('rule_id') or '(none)'))} asks first: {reason}")
    return "\n".join(lines)


def _expected_wait_s(arguments: dict[str, Any]) -> float | None:
    for key in _WAIT_KEYS:
        value = arguments.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value)
    return None


class McpToolServer:
    """The handlers behind :func:`build_mcp_server` (one per server; holds no connection state).

    :param toolkit: the tools to serve (its registry is read at every ``tools/list``).
    :param progress_interval_s: seconds between progress notifications during a call (float > 0).
    :param max_result_chars: bound on each result's JSON text (characters).
    :param max_result_tokens: bound on each result's JSON text (tokens, as
        :func:`~agent_tools.adapters.schemas.estimate_tokens` counts them; default 600).
    :param structured_content: also send each result as ``structuredContent`` (the same JSON as the text); off
        for clients that would pass both to the model.
    :param approvals: where elicitation answers are recorded; None: ``toolkit.approvals`` if it exists.
    :param elicitation_timeout_s: seconds to wait for the operator's answer (then the outcome is returned).
    :param out_of_band_approvals: never ask through the client (elicitation, ``request_state``): a
        ``needs_approval`` goes back to the agent and only ``agent-tools approvals approve ID`` (on the machine
        holding the state directory) approves it, so whoever controls the client or holds the HTTP token cannot
        approve its own request.
    :param job_watch_interval_s: seconds between the looks at a job the session started, for its notifications
        (float > 0; the interval grows while nothing changes, see the module docstring).
    """

    def __init__(self, toolkit: Toolkit, *, progress_interval_s: float = 1.0,
                 max_result_chars: int = DEFAULT_MAX_RESULT_CHARS, approvals: ApprovalSink | None = None,
                 elicitation_timeout_s: float = 600.0, structured_content: bool = True,
                 max_result_tokens: int = DEFAULT_MAX_RESULT_TOKENS, out_of_band_approvals: bool = False,
                 job_watch_interval_s: float = 2.0) -> None:
        if not progress_interval_s > 0:
            raise ValueError("progress_interval_s must be > 0 seconds")
        if not job_watch_interval_s > 0:
            raise ValueError("job_watch_interval_s must be > 0 seconds")
        self.job_watch_interval_s = job_watch_interval_s
        #: the connection's background task group (set by :meth:`lifespan`), and the jobs being watched
        self._watchers: anyio.abc.TaskGroup | None = None
        self._watched: set[str] = set()
        self._notify_jobs = True  # logging/setLevel above notice turns the job notifications off
        #: job id -> calls of the agent following that job now (the job's watch stands aside meanwhile)
        self._following: dict[str, int] = {}
        self._followed_at: dict[str, float] = {}  # job id -> when such a call last ended (anyio clock)
        self._page: SecretPage | None = None  # started at the first password page offered
        self.toolkit = toolkit
        #: long calls as MCP tasks (see agent_tools.adapters.mcp_tasks)
        self.tasks = McpTasks(self)
        self.progress_interval_s = progress_interval_s
        self.max_result_chars = max_result_chars
        self.max_result_tokens = max_result_tokens
        self.structured_content = structured_content
        self.approvals = approvals
        self.elicitation_timeout_s = elicitation_timeout_s
        self.out_of_band_approvals = out_of_band_approvals
        self._state_key = secrets.token_bytes(32)
        #: nonce -> monotonic expiry of every request_state issued and not yet answered (single use)
        self._issued: dict[str, float] = {}

    # ------------------------------------------------------------------ tools/list
    def tools(self) -> list[types.Tool]:
        """The MCP ``Tool`` of every registered tool, in registration order (without ``outputSchema`` when
        results go without ``structuredContent``: MCP requires structured results from a tool that declares one)."""
        declared = tool_schemas(self.toolkit, "mcp")
        if not self.structured_content:
            declared = [{k: v for k, v in d.items() if k != "outputSchema"} for d in declared]
        # the long tools may run as MCP tasks (2025-11-25; see agent_tools.adapters.mcp_tasks)
        declared = [{**d, "execution": {"taskSupport": "optional"}} if d["name"] in TASK_TOOLS else d
                    for d in declared]
        return [types.Tool.model_validate(d) for d in declared]

    def input_schema(self, name: str) -> dict[str, Any] | None:
        """One tool's input schema (None: unknown tool)."""
        spec = next((s for s in self.toolkit.specs if s.name == name), None)
        return None if spec is None else dict(tool_schema(spec, "mcp")["inputSchema"])

    async def list_tools(self, ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools())

    # ------------------------------------------------------------------ tools/call
    async def call_tool(self, ctx: ServerRequestContext[Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult:
        name = params.name
        arguments = dict(params.arguments or {})
        state = params.request_state
        if state is not None and state.startswith(APPROVAL_STATE_PREFIX):
            approval_id, refusal = self._check_state(ctx, state, name, arguments)
            if self.out_of_band_approvals:
                refusal = "this server takes approvals only from `agent-tools approvals approve ID`"
            if refusal is not None or params.input_responses is None:
                log.warning("mcp.approval_state_refused", tool=name, reason=refusal or "no input_responses")
                return self._result(name, result_view(ErrorOutcome(
                    kind="approval", retryable=False,
                    message=f"{refusal or 'the approval answer is missing'}: nothing was approved or run; call again "
                            "without request_state")))
            answer = params.input_responses.get("approval")
            result = await self._after_answer(ctx, name, arguments, approval_id,
                                              _accepted(answer if isinstance(answer, types.ElicitResult) else None))
            return self._result(name, result)
        result = await self.dispatch(ctx, name, arguments)
        if result.get("outcome") == "needs_approval":
            asked = await self._ask_operator(ctx, name, arguments, result)
            if isinstance(asked, types.InputRequiredResult):
                return asked
            result = asked
        result = await self._offer_secret_page(ctx, result)
        self._watch(ctx, result)
        return self._result(name, result)

    # ------------------------------------------------------------------ secrets a person types
    async def _offer_secret_page(self, ctx: ServerRequestContext[Any], result: dict[str, Any]) -> dict[str, Any]:
        """A job waiting on a password (``needs_input`` with ``secret``): when the client declared URL-mode
        elicitation and can take a request now, send the operator to a one-time loopback page
        (:class:`~agent_tools.adapters.secret_page.SecretPage`) that writes what they type straight to the job's
        pipe; the model only learns that the page was offered."""
        job_id = result.get("job_id")
        if not (result.get("outcome") == "needs_input" and result.get("secret") is True and isinstance(job_id, str)):
            return result
        caps = ctx.session.client_capabilities
        elicitation = caps.elicitation if caps is not None else None
        if elicitation is None or elicitation.url is None or not ctx.session.can_send_request \
                or self._watchers is None:
            return result
        if self._page is None:
            self._page = SecretPage(expiry_s=self.elicitation_timeout_s)
            await self._watchers.start(self._page.serve)
        elicitation_id = secrets.token_urlsafe(16)
        session = ctx.session

        async def deliver(value: str) -> None:
            out = await self.toolkit.job_input(job_id, value, secret=True)
            if isinstance(out, ErrorOutcome):
                raise RuntimeError(out.kind)
            with contextlib.suppress(Exception):  # the connection may be gone: the job has it anyway
                await session.send_elicit_complete(elicitation_id)

        url = await self._page.offer(job_id, deliver)
        message = redact(f"Job {job_id} on {result.get('host')} waits on a password ({result.get('prompt')}). "
                         "Open the page to type it: it goes straight to the job, never to the agent.")
        try:
            with anyio.fail_after(self.elicitation_timeout_s):
                answer = await session.elicit_url(message, url, elicitation_id, related_request_id=ctx.request_id)
        except Exception as exc:  # no answer: the agent gets needs_input as it was
            log.warning("mcp.secret_elicitation_failed", job_id=job_id, error=repr(exc))
            return result
        if answer.action != "accept":
            return {**result, "next": f"the operator declined the password page; {result.get('next', '')}"}
        return {**result, "next": f"the operator was given a one-time page to type the password (never you): "
                                  f"job_status(job_id='{job_id}', wait_s=60) to follow the job"}

    # ------------------------------------------------------------------ being told: job end / readiness
    @contextlib.asynccontextmanager
    async def lifespan(self, server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        """The server's lifespan (``Server(lifespan=...)``): the task group the job watches (and the secret page)
        run in; entered once per server (stdio: per connection; streamable HTTP: by the session manager)."""
        async with anyio.create_task_group() as tg:
            self._watchers = tg
            try:
                yield {}
            finally:
                self._watchers = None
                tg.cancel_scope.cancel()

    async def set_logging_level(self, ctx: ServerRequestContext[Any],
                                params: types.SetLevelRequestParams) -> types.EmptyResult:
        """``logging/setLevel``: job notifications (level ``notice``) go out only at ``notice`` or below."""
        self._notify_jobs = _LOG_LEVELS.index(params.level) <= _LOG_LEVELS.index("notice")
        return types.EmptyResult()

    def _watch(self, ctx: ServerRequestContext[Any], result: dict[str, Any]) -> None:
        """Watch the job ``result`` started (``detached``, or ``needs_input`` waiting on a secret) until it has
        ended and its readiness is settled (see the module docstring)."""
        job_id = result.get("job_id")
        started = result.get("outcome") == "detached" or (result.get("outcome") == "needs_input"
                                                          and result.get("secret") is True)
        if not started or not isinstance(job_id, str) or job_id in self._watched or self._watchers is None:
            return
        try:
            rec = self.toolkit.journal.get(job_id)
        except Exception:  # not in the journal: nothing to follow
            return
        self._watched.add(job_id)
        self._watchers.start_soon(self._watch_job, ctx.session, job_id, rec.state, rec.readiness)

    async def _watch_job(self, session: Any, job_id: str, state: str, readiness: str) -> None:
        """Look at the job now and then; tell the client when its state left ``running`` or its readiness changed,
        unless the agent was shown that already (a result of its own: :meth:`Journal.looks`). While a call of the
        agent follows the job (``job_status``/``job_input``/``job_cancel`` on it), and for ``job_watch_interval_s``
        after such a call, the watch does not look: those calls do, and show the agent what changed."""
        delay = self.job_watch_interval_s
        try:
            while True:
                await anyio.sleep(delay)
                delay = min(delay * 1.5, max(10.0, self.job_watch_interval_s))
                since = anyio.current_time() - self._followed_at.get(job_id, -1e9)
                if self._following.get(job_id) or since < self.job_watch_interval_s:
                    continue  # the agent follows it itself: its calls show what changed
                try:
                    info = await self.toolkit.job_info(job_id)
                except Exception as exc:  # a host down for a while: look again later
                    log.debug("mcp.job_watch_failed", job_id=job_id, error=repr(exc))
                    continue
                shown = self.toolkit.journal.looks([job_id]).get(job_id, "")
                now = f"{info.state}/{info.readiness}"
                if (info.state, info.readiness) != (state, readiness) and now != shown:
                    ended = state in _RUNNING and info.state not in _RUNNING
                    data = {"event": "job_ended" if ended else "job_readiness", "job": result_view(info),
                            "was": {"state": state, "readiness": readiness}}
                    if self._notify_jobs:
                        await session.send_notification(types.LoggingMessageNotification(
                            params=types.LoggingMessageNotificationParams(
                                level="notice", logger="agent_tools.jobs", data=redact_obj(data))))
                    log.info("mcp.job_change_notified", job_id=job_id, change=data["event"], state=info.state,
                             readiness=info.readiness, sent=self._notify_jobs)
                state, readiness = info.state, info.readiness
                if state not in _RUNNING and readiness != "pending":
                    return
        except Exception as exc:  # the connection closed: nobody to tell
            log.debug("mcp.job_notify_failed", job_id=job_id, error=repr(exc))
        finally:
            self._watched.discard(job_id)
            self._followed_at.pop(job_id, None)

    async def dispatch(self, ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """``toolkit.dispatch(name, arguments)`` with progress notifications every ``progress_interval_s``.

        :raises anyio.get_cancelled_exc_class(): the client cancelled the call (logged; the job keeps running).
        """
        total = _expected_wait_s(arguments)
        t0 = anyio.current_time()

        job_id = arguments.get("job_id") if name in ("job_status", "job_input") else None
        followed = arguments.get("job_id") if name in ("job_status", "job_input", "job_cancel") else None
        if isinstance(followed, str):  # the watch of this job stands aside meanwhile (see _watch_job)
            self._following[followed] = self._following.get(followed, 0) + 1

        async def tick() -> None:
            while True:
                await anyio.sleep(self.progress_interval_s)
                elapsed = round(anyio.current_time() - t0, 1)
                within = total is not None and elapsed <= total
                newest = await self._newest_output(job_id)
                message = redact(f"{name}: {elapsed:g} s" + (f" of {total:g} s" if within else "")
                                 + "; cancelling stops this wait, not the job" + (f"\n{newest}" if newest else ""))
                try:
                    await ctx.session.report_progress(elapsed, total if within else None, message)
                except Exception as exc:  # a closed stream must not fail the call itself
                    log.debug("mcp.progress_failed", tool=name, error=repr(exc))
                    return

        result: dict[str, Any] = {}
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(tick)
                result = await self.toolkit.dispatch(name, arguments)
                tg.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            log.info("mcp.call_cancelled", tool=name, elapsed_s=round(anyio.current_time() - t0, 3),
                     note="the wait was cancelled; any job keeps running on its host")
            raise
        finally:
            if isinstance(followed, str):
                self._following[followed] -= 1
                self._followed_at[followed] = anyio.current_time()
                if not self._following[followed]:
                    del self._following[followed]
        log.info("mcp.tool_call", tool=name, outcome=result.get("outcome") or result.get("state") or "ok",
                 elapsed_s=round(anyio.current_time() - t0, 3))
        return result

    async def _newest_output(self, job_id: Any) -> str:
        """The newest lines job ``job_id`` printed that the agent has not seen (for a progress message), "" when
        there are none or they cannot be had within a second (the wait goes on regardless)."""
        if not isinstance(job_id, str):
            return ""
        with anyio.move_on_after(1.0):
            try:
                return await self.toolkit.newest_output(job_id)
            except Exception as exc:  # an unknown job, a host that does not answer: the message goes without
                log.debug("mcp.progress_output_failed", job_id=job_id, error=repr(exc))
        return ""

    @property
    def background(self) -> anyio.abc.TaskGroup | None:
        """The task group of the server's lifespan (:meth:`lifespan`), where background work runs (job watches,
        the secret page, tasks); None outside it."""
        return self._watchers

    def tool_result(self, name: str, result: dict[str, Any]) -> types.CallToolResult:
        """Tool ``name``'s result (a dispatch's JSON) as the ``CallToolResult`` a ``tools/call`` answers with."""
        return self._result(name, result)

    def _result(self, name: str, result: dict[str, Any]) -> types.CallToolResult:
        text = encode_result(result, max_chars=self.max_result_chars, max_tokens=self.max_result_tokens)
        structured = json.loads(text)
        if structured != result and not self._conforms(name, structured):
            log.warning("mcp.bounded_result_outside_output_schema", tool=name, chars=len(text),
                        note="structuredContent carries the whole result; the text stays bounded")
            structured = result
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structured_content=structured if self.structured_content else None,
                                    is_error=is_error_result(result))

    def _conforms(self, name: str, data: dict[str, Any]) -> bool:
        """``data`` is valid against tool ``name``'s output schema (True without one)."""
        result_type = self.toolkit.result_type(name)
        if result_type is None:
            return True
        from jsonschema.validators import validator_for

        schema = output_schema(result_type)
        return bool(validator_for(schema)(schema).is_valid(data))

    # ------------------------------------------------------------------ approvals
    def _sink(self) -> ApprovalSink | None:
        sink = self.approvals if self.approvals is not None else getattr(self.toolkit, "approvals", None)
        return sink if hasattr(sink, "approve") and hasattr(sink, "reject") else None

    def _issue_state(self, approval_id: str, name: str, arguments: dict[str, Any]) -> str:
        now = time.monotonic()
        self._issued = {n: t for n, t in self._issued.items() if t > now}
        nonce = secrets.token_urlsafe(16)
        self._issued[nonce] = now + self.elicitation_timeout_s
        return f"{APPROVAL_STATE_PREFIX}{approval_id}/{nonce}/{self._mac(approval_id, nonce, name, arguments)}"

    def _mac(self, approval_id: str, nonce: str, name: str, arguments: dict[str, Any]) -> str:
        message = f"{approval_id}/{nonce}/{_call_digest(name, arguments)}".encode()
        return hmac.new(self._state_key, message, hashlib.sha256).hexdigest()

    def _check_state(self, ctx: ServerRequestContext[Any], state: str, name: str,
                     arguments: dict[str, Any]) -> tuple[str, str | None]:
        """``(approval_id, None)`` for a request_state this server issued for exactly this call, not used yet;
        else ``(approval_id or "", why it is refused)``. The nonce is spent either way."""
        parts = state[len(APPROVAL_STATE_PREFIX):].split("/")
        if len(parts) != 3:
            return "", "the approval state was not issued by this server"
        approval_id, nonce, mac = parts
        expiry = self._issued.pop(nonce, None)
        if expiry is None or expiry <= time.monotonic():
            return approval_id, "the approval state was not issued by this server, was used already or expired"
        if not hmac.compare_digest(mac, self._mac(approval_id, nonce, name, arguments)):
            return approval_id, "the call was changed between the approval request and its answer"
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS or not self._client_elicits(ctx):
            return approval_id, "this connection cannot answer an approval request (no form elicitation)"
        return approval_id, None

    @staticmethod
    def _client_elicits(ctx: ServerRequestContext[Any]) -> bool:
        caps = ctx.session.client_capabilities
        elicitation = caps.elicitation if caps is not None else None
        # an empty elicitation capability means form mode (MCP 2025-11-25)
        return elicitation is not None and (elicitation.form is not None or elicitation.url is None)

    def _payload(self, approval_id: str) -> str | None:
        """What the approval's call writes, as the approval store keeps it for display (None: nothing, or no store
        to ask)."""
        get = getattr(self._sink(), "get", None)
        approval = get(approval_id) if callable(get) else None
        payload = getattr(approval, "payload", None)
        return payload if isinstance(payload, str) else None

    def _takes_approval_id(self, name: str) -> bool:
        spec = next((s for s in self.toolkit.specs if s.name == name), None)
        return spec is not None and "approval_id" in spec.args_model.model_fields

    async def _ask_operator(self, ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any],
                            outcome: dict[str, Any]) -> dict[str, Any] | types.InputRequiredResult:
        approval_id = outcome.get("approval_id")
        if self.out_of_band_approvals and isinstance(approval_id, str):
            return {**outcome, "next": f"ask the operator to run `agent-tools approvals approve {approval_id}` (this "
                                       "server takes approvals only from there); then call again with the same "
                                       f"arguments and approval_id='{approval_id}'"}
        if not isinstance(approval_id, str) or not self._client_elicits(ctx) or not self._takes_approval_id(name):
            return outcome
        decision = None
        if name == "run_command" and isinstance(arguments.get("command"), str):
            env = arguments.get("env") if isinstance(arguments.get("env"), dict) else None
            decision = self.toolkit.decide(str(arguments.get("host")), arguments["command"],
                                           cwd=arguments.get("cwd"), env=env)
        message = _approval_message(name, arguments, outcome, self._payload(approval_id),
                                   decision.reason if decision is not None else None)
        if ctx.session.can_send_request:
            answer: types.ElicitResult | None = None
            try:
                with anyio.fail_after(self.elicitation_timeout_s):
                    answer = await ctx.session.elicit_form(message, _APPROVAL_SCHEMA, related_request_id=ctx.request_id)
            except Exception as exc:  # no answer (timeout, client error): the agent gets needs_approval
                log.warning("mcp.elicitation_failed", tool=name, approval_id=approval_id, error=repr(exc))
                return outcome
            return await self._after_answer(ctx, name, arguments, approval_id, _accepted(answer))
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            request = types.ElicitRequest(params=types.ElicitRequestFormParams(message=message,
                                                                              requested_schema=_APPROVAL_SCHEMA))
            return types.InputRequiredResult(input_requests={"approval": request},
                                             request_state=self._issue_state(approval_id, name, arguments))
        return outcome

    async def _after_answer(self, ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any],
                            approval_id: str, accepted: bool) -> dict[str, Any]:
        sink = self._sink()
        log.info("mcp.approval_answer", tool=name, approval_id=approval_id, accepted=accepted)
        host, command = str(arguments.get("host") or ""), str(arguments.get("command") or "")
        if not accepted:
            if sink is not None:
                try:
                    sink.reject(approval_id, by="mcp-elicitation")
                except Exception as exc:  # already decided/expired: the answer stands anyway
                    log.info("mcp.approval_reject_failed", approval_id=approval_id, error=repr(exc))
            return result_view(Denied(host=host, command=command,
                                      reason="the operator declined the approval request"))
        if sink is not None:
            try:
                sink.approve(approval_id, by="mcp-elicitation")
            except Exception as exc:  # unknown / expired / used approval: say so, run nothing
                return result_view(ErrorOutcome(host=host or None, command=command or None, kind="approval",
                                                retryable=False,
                                                message=f"approval {approval_id} could not be recorded: {exc}"))
        return await self.dispatch(ctx, name, {**arguments, "approval_id": approval_id})


def build_mcp_server(
    toolkit: Toolkit,
    *,
    name: str = "agent-tools",
    progress_interval_s: float = 1.0,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    approvals: ApprovalSink | None = None,
    elicitation_timeout_s: float = 600.0,
    structured_content: bool = True,
    max_result_tokens: int = DEFAULT_MAX_RESULT_TOKENS,
    out_of_band_approvals: bool = False,
) -> Server[Any]:
    """An MCP server (SDK low-level :class:`mcp.server.Server`) serving every tool of ``toolkit``.

    Run it with :func:`serve_stdio` / :func:`serve_http`, or ``server.run(read, write, options)`` on any
    transport. Parameters as :class:`McpToolServer`. The toolkit is not closed by the server.
    """
    handlers = McpToolServer(toolkit, progress_interval_s=progress_interval_s, max_result_chars=max_result_chars,
                             approvals=approvals, elicitation_timeout_s=elicitation_timeout_s,
                             structured_content=structured_content, max_result_tokens=max_result_tokens,
                             out_of_band_approvals=out_of_band_approvals)
    with warnings.catch_warnings():
        # the logging capability is deprecated as of 2026-07-28 (SEP-2577), but handshake-era clients (2025-11-25)
        # get the job notifications as notifications/message, which a server must declare it to send
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server = _Server(name, version=__version__, instructions=INSTRUCTIONS, lifespan=handlers.lifespan,
                         get_tool_input_schema=handlers.input_schema, on_set_logging_level=handlers.set_logging_level,
                         on_list_tools=handlers.list_tools, on_call_tool=handlers.call_tool)
    tasks = handlers.tasks
    server.middleware.append(tasks)  # a task-augmented tools/call is answered there (mcp_tasks)
    server.add_request_handler("tasks/get", types.GetTaskRequestParams, tasks.get)
    server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, tasks.result)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, tasks.cancel)
    server.add_request_handler("tasks/list", types.PaginatedRequestParams, tasks.list_tasks)
    return server


class _Server(Server[Any]):
    """The SDK's low-level server, declaring MCP tasks (2025-11-25) on handshake-era connections: the SDK derives
    capabilities from its handlers and knows no tasks (see :mod:`agent_tools.adapters.mcp_tasks`)."""

    def get_capabilities(self, notification_options: NotificationOptions | None = None,
                         experimental_capabilities: dict[str, dict[str, Any]] | None = None,
                         extensions: dict[str, dict[str, Any]] | None = None, *,
                         protocol_version: str | None = None) -> types.ServerCapabilities:
        caps = super().get_capabilities(notification_options, experimental_capabilities, extensions,
                                        protocol_version=protocol_version)
        if protocol_version not in MODERN_PROTOCOL_VERSIONS:
            caps.tasks = tasks_capability()
        return caps


async def serve_stdio(server: Server[Any]) -> None:
    """Serve ``server`` on this process's stdin/stdout until the client closes stdin.

    A request the SDK cannot read because it holds text that is not valid Unicode (a lone surrogate such as
    ``\\udcff`` in its JSON) gets a JSON-RPC error reply (``-32602``) naming why, instead of no reply at all;
    nothing of it runs.
    """
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(_AnsweringReadStream(read_stream, write_stream), write_stream,
                         server.create_initialization_options())


class _AnsweringReadStream:
    """The transport's read stream, answering requests that could not be read (see :func:`serve_stdio`)."""

    def __init__(self, inner: Any, write_stream: Any) -> None:
        self._inner = inner
        self._write = write_stream

    @property
    def last_context(self) -> Any:  # the SDK restores the sender's context from here
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            reply = _reply_to_unreadable(item) if isinstance(item, Exception) else None
            if reply is None:
                return item
            from mcp.shared.message import SessionMessage

            await self._write.send(SessionMessage(reply))

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _AnsweringReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _AnsweringReadStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _reply_to_unreadable(exc: Exception) -> types.JSONRPCError | None:
    """A JSON-RPC error for a request whose line is JSON but not valid Unicode (a lone surrogate), else None."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return None
    try:
        raw = errors()[0].get("input")
        message = json.loads(raw) if isinstance(raw, str) else None
    except (ValueError, IndexError, TypeError):
        return None
    if not isinstance(message, dict) or "method" not in message or not isinstance(message.get("id"), int | str):
        return None
    log.warning("mcp.unreadable_request", method=str(message.get("method"))[:60], id=message["id"])
    return types.JSONRPCError(jsonrpc="2.0", id=message["id"], error=types.ErrorData(
        code=types.INVALID_PARAMS, message="the request holds text that is not valid Unicode (a lone surrogate such as "
                                           "\\udcff, from bytes that were not UTF-8): send valid UTF-8 text, writing "
                                           "such bytes as escapes in the command ($'\\xff'); nothing was run"))
