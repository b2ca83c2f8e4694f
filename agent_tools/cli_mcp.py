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

from .hosts.registry import HostRegistry
from .jobs.journal import Journal
from .tools.toolkit import Toolkit

__all__ = ["mcp"]

log = structlog.get_logger(__name__)
_err = Console(stderr=True)


def _load_policy(paths: list[Path] | None) -> Any:
    """``PolicySet.load(paths)`` when the policy module provides it; None (with a warning) otherwise."""
    if not paths:
        return None
    try:
        from .policy import PolicySet  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        log.warning("mcp.policy_unavailable", error=repr(exc), paths=[str(p) for p in paths])
        _err.print(f"[yellow]warning:[/] --policy ignored: agent_tools.policy is not available ({exc})")
        return None
    load = getattr(PolicySet, "load", None)
    if load is None:
        _err.print("[yellow]warning:[/] --policy ignored: agent_tools.policy has no PolicySet.load")
        return None
    try:
        return load([str(p) for p in paths])
    except Exception as exc:  # a policy file that does not load must stop the server, with its reason
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
    policies = _load_policy(policy)

    async def serve() -> None:
        hosts = HostRegistry(ssh_config=ssh_config) if ssh_config else HostRegistry()
        async with Toolkit(hosts, journal=Journal(), policy=policies) as toolkit:
            server = build_mcp_server(toolkit)
            if transport == "stdio":
                await serve_stdio(server)
            else:
                _err.print(f"agent-tools MCP server on http://{host}:{port}/mcp (streamable HTTP)")
                await serve_http(server, host=host, port=port)

    anyio.run(serve)
