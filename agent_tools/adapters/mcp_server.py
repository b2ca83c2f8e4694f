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

Transports: :func:`serve_stdio`, and :func:`serve_http` (streamable HTTP with a bearer token and Host/Origin
checks; see :mod:`agent_tools.adapters.mcp_http`).

Logs go to stderr only (stdout carries the protocol on stdio); entry points configure structlog.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from typing import Any, Protocol

import anyio
import mcp.types as types
import structlog
from mcp.server import Server, ServerRequestContext
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from .. import __version__
from ..display import safe_text
from ..outcomes import Denied, ErrorOutcome, result_view
from ..redact import redact, redact_obj, review_text
from ..tools.toolkit import Toolkit
from .mcp_http import serve_http
from .schemas import (
    DEFAULT_MAX_RESULT_CHARS,
    DEFAULT_MAX_RESULT_TOKENS,
    encode_result,
    is_error_result,
    output_schema,
    tool_schema,
    tool_schemas,
)

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
    """

    def __init__(self, toolkit: Toolkit, *, progress_interval_s: float = 1.0,
                 max_result_chars: int = DEFAULT_MAX_RESULT_CHARS, approvals: ApprovalSink | None = None,
                 elicitation_timeout_s: float = 600.0, structured_content: bool = True,
                 max_result_tokens: int = DEFAULT_MAX_RESULT_TOKENS, out_of_band_approvals: bool = False) -> None:
        if not progress_interval_s > 0:
            raise ValueError("progress_interval_s must be > 0 seconds")
        self.toolkit = toolkit
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
        return self._result(name, result)

    async def dispatch(self, ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """``toolkit.dispatch(name, arguments)`` with progress notifications every ``progress_interval_s``.

        :raises anyio.get_cancelled_exc_class(): the client cancelled the call (logged; the job keeps running).
        """
        total = _expected_wait_s(arguments)
        t0 = anyio.current_time()

        async def tick() -> None:
            while True:
                await anyio.sleep(self.progress_interval_s)
                elapsed = round(anyio.current_time() - t0, 1)
                within = total is not None and elapsed <= total
                message = redact(f"{name}: {elapsed:g} s" + (f" of {total:g} s" if within else "")
                                 + "; cancelling stops this wait, not the job")
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
        log.info("mcp.tool_call", tool=name, outcome=result.get("outcome") or result.get("state") or "ok",
                 elapsed_s=round(anyio.current_time() - t0, 3))
        return result

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
    return Server(name, version=__version__, instructions=INSTRUCTIONS,
                  get_tool_input_schema=handlers.input_schema,
                  on_list_tools=handlers.list_tools, on_call_tool=handlers.call_tool)


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
