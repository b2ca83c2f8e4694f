"""``agent-tools mcp``: serve the tools over MCP (stdio for a local agent, or streamable HTTP).

Registered on the main CLI with ``app.command()(mcp)`` (see :mod:`agent_tools.cli`). stdout carries the
protocol on stdio: everything else (logs, messages) goes to stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import anyio
import structlog
import typer
from rich.console import Console

__all__ = ["mcp"]

log = structlog.get_logger(__name__)
_err = Console(stderr=True)


def _build(policy: list[Path] | None, ssh_config: list[str] | None) -> Any:
    """The Toolkit for the server; a policy file that does not load stops the server with its reason (file,
    line, key)."""
    from .errors import PolicyError
    from .tools.factory import build_toolkit

    try:
        return build_toolkit(ssh_config=ssh_config, policy=policy)
    except PolicyError as exc:
        _err.print(f"[red]error:[/] policy: {exc}")
        raise typer.Exit(2) from exc


def mcp(
    policy: Annotated[list[Path] | None, typer.Option(
        "--policy", help="policy file (YAML; repeatable): per-host allow/ask/deny and budgets")] = None,
    transport: Annotated[str, typer.Option("--transport", help="stdio (default: for a local agent) | http")] = "stdio",
    host: Annotated[str, typer.Option("--host", help="http: address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="http: TCP port to listen on")] = 8765,
    ssh_config: Annotated[list[str] | None, typer.Option(
        "--ssh-config", "-F", help="OpenSSH client config file (repeatable)")] = None,
) -> None:
    """Serve the tools over MCP: stdio (the agent starts this command) or streamable HTTP at /mcp."""
    from .adapters.mcp_server import build_mcp_server, serve_http, serve_stdio

    if transport not in ("stdio", "http"):
        raise typer.BadParameter("must be 'stdio' or 'http'", param_hint="--transport")
    toolkit = _build(policy, ssh_config)

    async def serve() -> None:
        async with toolkit:
            server = build_mcp_server(toolkit)
            if transport == "stdio":
                await serve_stdio(server)
            else:
                _err.print(f"agent-tools MCP server on http://{host}:{port}/mcp (streamable HTTP)")
                await serve_http(server, host=host, port=port)

    anyio.run(serve)
