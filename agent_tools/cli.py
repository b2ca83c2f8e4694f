"""``agent-tools``: the command line (typer + rich).

Exit status: 0 when a command finished with status 0 or detached into a job; the command's own exit
status when it finished non-zero; 1 for error/denied/needs_approval/needs_input/killed outcomes; 2 for
usage errors.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import anyio
import typer
from pydantic import BaseModel
from rich.console import Console

from .cli_mcp import mcp
from .hosts.registry import HostRegistry
from .jobs.journal import Journal
from .logs import configure_logging
from .tools.toolkit import Toolkit

__all__ = ["app", "main"]

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Run shell commands on local and SSH hosts under per-command budgets; long work "
                       "becomes durable jobs you can follow.")
out = Console()
err = Console(stderr=True)
T = TypeVar("T")

JsonOpt = Annotated[bool, typer.Option("--json", help="print the outcome as JSON (the tools' own model)")]
SshConfigOpt = Annotated[list[str] | None, typer.Option("--ssh-config", "-F",
                                                        help="OpenSSH client config file (repeatable)")]


def _toolkit(ssh_config: list[str] | None) -> Toolkit:
    hosts = HostRegistry(ssh_config=ssh_config) if ssh_config else HostRegistry()
    return Toolkit(hosts, journal=Journal())


def _run(fn: Callable[[], Awaitable[T]], label: str | None = None) -> T:
    """Run ``fn`` on anyio; on a TTY show a spinner with the elapsed time while waiting."""
    if label is None or not sys.stderr.isatty():
        return anyio.run(fn)
    with err.status(label, spinner="dots") as status:
        async def wrapped() -> T:
            async with anyio.create_task_group() as tg:
                async def tick() -> None:
                    t0 = anyio.current_time()
                    while True:
                        await anyio.sleep(0.2)
                        status.update(f"{label} [{anyio.current_time() - t0:.1f}s]")
                tg.start_soon(tick)
                result = await fn()
                tg.cancel_scope.cancel()
            return result
        return anyio.run(wrapped)


def _emit(result: BaseModel | dict[str, Any], as_json: bool) -> dict[str, Any]:
    data = result if isinstance(result, dict) else result.model_dump(mode="json")
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return data
    _render(data)
    return data


def _render(d: dict[str, Any]) -> None:
    kind = d.get("outcome")
    if kind is None and "state" in d and "job_id" in d:
        out.print(f"[bold]{d['job_id']}[/] on {d.get('host')}: [bold]{d['state']}[/]"
                  + (f" exit {d['exit_status']}" if d.get("exit_status") is not None else "")
                  + (f" readiness {d['readiness']}" if d.get("readiness") not in (None, "none") else "")
                  + f" ({d.get('elapsed_s', 0):.1f}s) — {d.get('why', '')}")
        for key in ("new_stdout", "new_stderr"):
            text = (d.get(key) or {}).get("text")
            if text:
                out.out(text, end="" if text.endswith("\n") else "\n", highlight=False)
        if d.get("next"):
            out.print(f"[dim]next: {d['next']}[/]")
        return
    if kind is None:
        out.print_json(data=d)
        return
    head = {"finished": "green", "detached": "yellow", "killed": "red", "error": "red", "denied": "red",
            "needs_approval": "magenta", "needs_input": "magenta"}.get(str(kind), "white")
    line = f"[bold {head}]{kind}[/]"
    if kind == "finished":
        line += f" exit {d.get('exit_status')} in {d.get('duration_s')}s (job {d.get('job_id')})"
    elif kind == "detached":
        line += f" after {d.get('elapsed_s')}s: job [bold]{d.get('job_id')}[/] — {d.get('why')}"
    elif kind in ("error", "denied", "needs_approval", "needs_input", "killed"):
        line += " — " + str(d.get("message") or d.get("reason") or d.get("prompt") or "")
    out.print(line)
    for key in ("stdout", "stderr"):
        text = (d.get(key) or {}).get("text")
        if text:
            out.out(text, end="" if text.endswith("\n") else "\n", highlight=False)
    if d.get("next"):
        out.print(f"[dim]next: {d['next']}[/]")


def _exit_code(d: dict[str, Any]) -> int:
    kind = d.get("outcome")
    if kind == "finished":
        code = d.get("exit_status")
        return int(code) if code is not None else 1
    if kind == "detached" or kind is None:
        return 0
    return 1


@app.callback()
def _main(verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, help="more logs on stderr")] = 0
          ) -> None:
    configure_logging({0: "warning", 1: "info"}.get(verbose, "debug"))


@app.command()
def run(
    host: Annotated[str, typer.Argument(help="host alias: 'local' or an SSH alias")],
    command: Annotated[list[str], typer.Argument(help="the command (after --)")],
    budget: Annotated[float, typer.Option("--budget", help="seconds before it detaches (or is killed)")] = 15.0,
    on_timeout: Annotated[str, typer.Option("--on-timeout", help="detach | kill")] = "detach",
    cwd: Annotated[str | None, typer.Option("--cwd", help="working directory on the host")] = None,
    as_json: JsonOpt = False,
    ssh_config: SshConfigOpt = None,
) -> None:
    """Run COMMAND on HOST under a budget: finished, or detached into a durable job."""
    cmd = " ".join(command)

    async def go() -> dict[str, Any]:
        async with _toolkit(ssh_config) as tk:
            return await tk.dispatch("run_command", {"host": host, "command": cmd, "budget_s": budget,
                                                     "on_timeout": on_timeout, "cwd": cwd})

    d = _run(go, None if as_json else f"{host}: {cmd[:60]}")
    _emit(d, as_json)
    raise typer.Exit(_exit_code(d))


@app.command()
def status(
    job_id: Annotated[str, typer.Argument(help="job id (j_...)")],
    wait: Annotated[float, typer.Option("--wait", help="long-poll up to this many seconds")] = 0.0,
    as_json: JsonOpt = False,
    ssh_config: SshConfigOpt = None,
) -> None:
    """State of a job and the output it wrote since the last status call."""
    async def go() -> dict[str, Any]:
        async with _toolkit(ssh_config) as tk:
            return await tk.dispatch("job_status", {"job_id": job_id, "wait_s": wait})

    d = _run(go, None if as_json or wait <= 0 else f"waiting on {job_id}")
    _emit(d, as_json)
    raise typer.Exit(1 if d.get("outcome") == "error" else 0)


@app.command()
def output(
    job_id: Annotated[str, typer.Argument(help="job id (j_...)")],
    offset: Annotated[int, typer.Option("--offset", help="byte offset")] = 0,
    limit: Annotated[int, typer.Option("--limit", help="bytes at most")] = 65536,
    stream: Annotated[str, typer.Option("--stream", help="stdout | stderr")] = "stdout",
    as_json: JsonOpt = False,
    ssh_config: SshConfigOpt = None,
) -> None:
    """Page a job's output by byte offset."""
    async def go() -> dict[str, Any]:
        async with _toolkit(ssh_config) as tk:
            return await tk.dispatch("job_output", {"job_id": job_id, "offset": offset, "limit": limit,
                                                    "stream": stream})

    d = _run(go)
    if as_json or d.get("outcome") == "error":
        _emit(d, True if as_json else False)
    else:
        sys.stdout.write(d["text"])
    raise typer.Exit(1 if d.get("outcome") == "error" else 0)


@app.command()
def cancel(
    job_id: Annotated[str, typer.Argument(help="job id (j_...)")],
    grace: Annotated[float, typer.Option("--grace", help="seconds between TERM and KILL")] = 5.0,
    as_json: JsonOpt = False,
    ssh_config: SshConfigOpt = None,
) -> None:
    """Kill a job's whole process tree and verify nothing of it is left."""
    async def go() -> dict[str, Any]:
        async with _toolkit(ssh_config) as tk:
            return await tk.dispatch("job_cancel", {"job_id": job_id, "grace_s": grace})

    d = _run(go, None if as_json else f"cancelling {job_id}")
    if as_json:
        _emit(d, True)
    else:
        out.print(d.get("message") or d)
    raise typer.Exit(1 if d.get("outcome") == "error" or d.get("survivors") else 0)


@app.command()
def jobs(
    host: Annotated[str | None, typer.Argument(help="only this host (refreshes states from it)")] = None,
    as_json: JsonOpt = False,
    ssh_config: SshConfigOpt = None,
) -> None:
    """List known jobs, newest first."""
    async def go() -> dict[str, Any]:
        async with _toolkit(ssh_config) as tk:
            return await tk.dispatch("list_jobs", {"host": host})

    d = _run(go)
    if as_json or d.get("outcome") == "error":
        _emit(d, True)
        raise typer.Exit(1 if d.get("outcome") == "error" else 0)
    from rich.table import Table

    table = Table("job", "host", "state", "exit", "command")
    for j in d["jobs"]:
        table.add_row(j["job_id"], j["host"], j["state"],
                      "" if j["exit_status"] is None else str(j["exit_status"]), j["command"][:70])
    out.print(table)


app.command()(mcp)


def main() -> None:
    """Console-script entry point."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()



demo_app = typer.Typer(help="End-to-end examples.", no_args_is_help=True)
app.add_typer(demo_app, name="demo")


@demo_app.command("hicache")
def demo_hicache(
    host: Annotated[str | None, typer.Option("--host", help="run on this SSH alias instead of the embedded node")
                    ] = None,
    profile: Annotated[str, typer.Option("--profile", help="embedded node: default (fits) | small_ram (rolls back)")
                       ] = "default",
    load_s: Annotated[float, typer.Option("--load-s", help="embedded node: simulated model load seconds")] = 8.0,
    as_json: Annotated[bool, typer.Option("--json", help="transcript as JSON lines")] = False,
    ssh_config: SshConfigOpt = None,
) -> None:
    """Memory analysis → add hicache flags → restart detached → follow readiness → verify (or roll back)."""
    from .demo.hicache import embedded_node, run_walkthrough

    def emit(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    async def go() -> str:
        if host is not None:
            async with _toolkit(ssh_config) as tk:
                res = await run_walkthrough(tk, host, emit=emit, json_lines=as_json)
                emit(json.dumps({"result": res.result, "summary": res.summary}) if as_json else
                     f"RESULT: {res.result} — {res.summary}")
                return res.result
        if not as_json:
            emit(f"# starting the embedded simulated GPU node (profile {profile}, model load {load_s:g} s)")
        async with embedded_node(profile, load_s=load_s) as (alias, registry):
            tk = Toolkit(registry, journal=Journal())
            res = await run_walkthrough(tk, alias, emit=emit, json_lines=as_json)
            emit(json.dumps({"result": res.result, "summary": res.summary}) if as_json else
                 f"RESULT: {res.result} — {res.summary}")
            return res.result

    result = anyio.run(go)
    raise typer.Exit(0 if result in ("verified", "rolled_back") else 1)


if __name__ == "__main__":
    main()
