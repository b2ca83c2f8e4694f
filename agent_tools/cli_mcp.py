"""``agent-tools mcp``: serve the tools over MCP (stdio for a local agent, or streamable HTTP with a bearer token).

Registered on the main CLI with ``app.command()(mcp)`` (see :mod:`agent_tools.cli`). stdout carries the
protocol on stdio: everything else (logs, messages) goes to stderr.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import anyio
import structlog
import typer
from rich.console import Console
from rich.text import Text

from .display import plain

__all__ = ["mcp"]

log = structlog.get_logger(__name__)
_err = Console(stderr=True)


def _build(policy: list[Path] | None, ssh_config: list[str] | None, state_dir: Path | None = None) -> Any:
    """The Toolkit for the server; a policy file that does not load stops the server with its reason (file,
    line, key)."""
    from .errors import PolicyError
    from .tools.factory import build_toolkit

    try:
        return build_toolkit(ssh_config=ssh_config, policy=policy, state_dir=state_dir)
    except PolicyError as exc:
        _err.print(Text.assemble(("error:", "red"), " policy: ", plain(exc)), highlight=False)
        raise typer.Exit(2) from exc


def mcp(
    policy: Annotated[list[Path] | None, typer.Option(
        "--policy", metavar="FILE", help="policy file (YAML; repeatable): per-host allow/ask/deny and budgets")] = None,
    transport: Annotated[str, typer.Option("--transport", metavar="stdio|http",
                                           help="stdio (default: for a local agent) | http")] = "stdio",
    host: Annotated[str, typer.Option("--host", metavar="ADDRESS",
                                      help="http: address to listen on (loopback unless you give a token "
                                           "and --allow-host)")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", metavar="PORT", help="http: TCP port to listen on")] = 8765,
    token_file: Annotated[Path | None, typer.Option(
        "--token-file", metavar="FILE",
        help="http: file holding the bearer token (created 0600 with a random token if missing; "
             "default STATE_DIR/mcp-http.token; $AGENT_TOOLS_MCP_TOKEN gives the token instead)"),
    ] = None,
    no_auth: Annotated[bool, typer.Option(
        "--no-auth", help="http: no bearer token (refused unless --host is loopback)")] = False,
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", metavar="NAME",
        help="http: another name clients use in Host/Origin (repeatable; needed for 0.0.0.0)")] = None,
    ssh_config: Annotated[list[str] | None, typer.Option(
        "--ssh-config", "-F", metavar="FILE", help="OpenSSH client config file (repeatable; default "
        "$AGENT_TOOLS_SSH_CONFIG, then ~/.ssh/config)")] = None,
    state_dir: Annotated[Path | None, typer.Option(
        "--state-dir", metavar="DIR", help="where the job journal and approvals live (default "
        "$AGENT_TOOLS_STATE_DIR, else ~/.local/state/agent-tools)")] = None,
    structured_content: Annotated[bool, typer.Option(
        "--structured-content/--no-structured-content",
        help="send each result as structuredContent too (the same JSON as the text); off for a client that "
             "passes both to the model (no outputSchema is declared then)")] = True,
    out_of_band_approvals: Annotated[bool, typer.Option(
        "--out-of-band-approvals",
        help="never ask the client to approve: only `agent-tools approvals approve ID` (same state dir) approves, "
             "so the client cannot approve its own requests")] = False,
) -> None:
    """Serve the tools over MCP: stdio (the agent starts this command) or streamable HTTP at /mcp.

    HTTP requires ``Authorization: Bearer TOKEN`` on every request (401 otherwise) and checks Host/Origin against
    DNS rebinding; see README "MCP over HTTP" for how Claude Code, Codex and the Inspector pass the token.

    Clients that start the server without passing an environment (MCP Inspector 2.x) lose
    $AGENT_TOOLS_SSH_CONFIG, $AGENT_TOOLS_STATE_DIR and $AGENT_TOOLS_POLICY: pass -F, --state-dir and --policy
    as arguments instead."""
    from .adapters.mcp_http import (
        TOKEN_ENV,
        TOKEN_FILE_NAME,
        InsecureListen,
        http_url,
        is_loopback,
        load_or_create_token,
        transport_security,
    )
    from .adapters.mcp_server import build_mcp_server, serve_http, serve_stdio
    from .jobs.journal import default_state_dir

    if transport not in ("stdio", "http"):
        raise typer.BadParameter("must be 'stdio' or 'http'", param_hint="--transport")
    token: str | None = None
    if transport == "http":
        if no_auth and not is_loopback(host):
            raise typer.BadParameter(f"--no-auth is only allowed on a loopback address, not {host}",
                                     param_hint="--no-auth")
        if not no_auth:
            env_token = os.environ.get(TOKEN_ENV, "").strip()
            path = token_file or (state_dir.expanduser() if state_dir is not None else default_state_dir()) / \
                TOKEN_FILE_NAME
            try:
                token = env_token if env_token and token_file is None else load_or_create_token(path)
            except (OSError, ValueError) as exc:
                _err.print(Text.assemble(("error:", "red"), " bearer token: ", plain(exc)), highlight=False)
                raise typer.Exit(2) from exc
            if len(token) < 16:
                raise typer.BadParameter(f"${TOKEN_ENV} must be at least 16 characters", param_hint=TOKEN_ENV)
            where = f"${TOKEN_ENV}" if env_token and token_file is None else str(path)
        try:  # refused before anything is built or printed (no "MCP server on ..." line for a server that never runs)
            transport_security(host, port, tuple(allow_host or ()))
        except InsecureListen as exc:
            _err.print(Text.assemble(("error:", "red"), " ", plain(exc)), highlight=False)
            raise typer.Exit(2) from exc
    # clients start the server without a shell: expand ~ here (ssh_config(5) paths, the state directory)
    toolkit = _build([p.expanduser() for p in policy] if policy else None,
                     [os.path.expanduser(p) for p in ssh_config] if ssh_config else None,
                     state_dir.expanduser() if state_dir is not None else None)

    async def serve() -> None:
        async with toolkit:
            server = build_mcp_server(toolkit, structured_content=structured_content,
                                      out_of_band_approvals=out_of_band_approvals)
            if transport == "stdio":
                await serve_stdio(server)
                return
            auth = f"bearer token from {where}" if token is not None else "NO authentication (--no-auth)"
            _err.print(plain(f"agent-tools MCP server on {http_url(host, port)} (streamable HTTP; {auth})"),
                       highlight=False)
            await serve_http(server, host=host, port=port, token=token, allowed_hosts=tuple(allow_host or ()))

    try:
        anyio.run(serve)
    except InsecureListen as exc:
        _err.print(Text.assemble(("error:", "red"), " ", plain(exc)), highlight=False)
        raise typer.Exit(2) from exc
