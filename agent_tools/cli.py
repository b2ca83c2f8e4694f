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
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import typer
from pydantic import BaseModel
from rich.console import Console

from .cli_import import import_app
from .cli_mcp import mcp
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


PolicyOpt = Annotated[list[str] | None, typer.Option("--policy", help="policy file (repeatable; default "
                                                                   "$AGENT_TOOLS_POLICY)")]


def _toolkit(ssh_config: list[str] | None, policy: list[str] | None = None) -> Toolkit:
    from .errors import PolicyError
    from .tools.factory import build_toolkit

    try:
        return build_toolkit(ssh_config=ssh_config, policy=policy, warm=False)  # one call per process
    except PolicyError as exc:
        err.print(f"[red]policy error:[/] {exc}")
        raise typer.Exit(2) from exc


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
    budget: Annotated[float | None, typer.Option("--budget", help="seconds before it detaches (or is killed); "
                                                                   "default: the policy's, else 15")] = None,
    on_timeout: Annotated[str | None, typer.Option("--on-timeout", help="detach | kill (default: the policy's, "
                                                                        "else detach)")] = None,
    cwd: Annotated[str | None, typer.Option("--cwd", help="working directory on the host")] = None,
    approve: Annotated[str | None, typer.Option("--approve", help="approve this needs_approval id (a_...) "
                                                                  "and run the command it was issued for")] = None,
    as_json: JsonOpt = False,
    ssh_config: SshConfigOpt = None,
    policy: PolicyOpt = None,
) -> None:
    """Run COMMAND on HOST under a budget: finished, or detached into a durable job.

    With a policy, a command the policy asks about is shown with its approval id: on a TTY you are asked at
    once; otherwise run the same command again with ``--approve ID``. The approval is bound to that exact
    command and host, expires, and is used once."""
    cmd = " ".join(command)
    args: dict[str, Any] = {"host": host, "command": cmd, "cwd": cwd}
    if budget is not None:
        args["budget_s"] = budget
    if on_timeout is not None:
        args["on_timeout"] = on_timeout

    async def go() -> dict[str, Any]:
        async with _toolkit(ssh_config, policy) as tk:
            if approve is not None:
                if tk.approvals is None:
                    return {"outcome": "error", "kind": "bad_arguments", "retryable": False,
                            "message": "--approve needs a policy (--policy FILE or $AGENT_TOOLS_POLICY)"}
                from .policy import ApprovalRefused

                try:
                    tk.approvals.approve(approve, by=os.environ.get("USER", "cli"))
                except ApprovalRefused as exc:
                    return {"outcome": "error", "kind": "bad_arguments", "retryable": False,
                            "message": f"cannot approve {approve}: {exc}"}
                args["approval_id"] = approve
            d = await tk.dispatch("run_command", args)
            if d.get("outcome") == "needs_approval" and not as_json and sys.stdin.isatty() and approve is None:
                _render(d)
                if typer.confirm(f"Approve running this on {host}?", default=False):
                    tk.approvals.approve(d["approval_id"], by=os.environ.get("USER", "cli"))  # type: ignore[union-attr]
                    d = await tk.dispatch("run_command", dict(args, approval_id=d["approval_id"]))
            return d

    d = _run(go, None if as_json or sys.stdin.isatty() else f"{host}: {cmd[:60]}")
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



policy_app = typer.Typer(help="Per-host safety policies: schema, check, explain.", no_args_is_help=True)
app.add_typer(policy_app, name="policy")


@policy_app.command("schema")
def policy_schema() -> None:
    """Print the JSON Schema of policy files (for editors: yaml-language-server $schema)."""
    from .policy import Policy

    sys.stdout.write(json.dumps(Policy.json_schema(), indent=2) + "\n")


@policy_app.command("check")
def policy_check(files: Annotated[list[str], typer.Argument(help="policy files")]) -> None:
    """Load each file (schema + inline examples); report the first problem with file, line and key."""
    from .errors import PolicyError
    from .policy import PolicySet

    bad = 0
    for f in files:
        try:
            ps = PolicySet.load([f])
            n = sum(len(p.policy.rules) for p in ps.policies)
            out.print(f"[green]ok[/] {f}: {n} rules, examples pass")
        except PolicyError as exc:
            bad += 1
            out.print(f"[red]error[/] {exc}", highlight=False)
    raise typer.Exit(1 if bad else 0)


@policy_app.command("explain")
def policy_explain(
    host: Annotated[str, typer.Argument(help="host alias the command would run on")],
    command: Annotated[list[str], typer.Argument(help="the command (after --)")],
    policy: PolicyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show how the policy decides COMMAND on HOST: each simple command found, the rule that decided it, the
    final decision, budget, on_timeout, deadline and probes."""
    from .errors import PolicyError
    from .tools.factory import load_policies, policy_paths

    paths = policy_paths(policy) or [str(p) for p in _shipped_policies()]
    try:
        ps = load_policies(paths)
    except PolicyError as exc:
        err.print(f"[red]policy error:[/] {exc}")
        raise typer.Exit(2) from exc
    d = ps.decide(host, " ".join(command))
    if as_json:
        sys.stdout.write(d.model_dump_json(indent=2) + "\n")
        return
    colour = {"allow": "green", "ask": "magenta", "deny": "red"}[d.decision]
    out.print(f"[bold {colour}]{d.decision}[/] (rule {d.rule_id}) — {d.reason}", highlight=False)
    out.print(f"budget {d.budget_s:g} s, on_timeout {d.on_timeout}, detach "
              f"{'immediately' if d.detach_immediately else 'on budget'}, deadline "
              f"{d.deadline_from or d.deadline_s}", highlight=False)
    for c in d.commands:
        extra = " [opaque: " + str(c.opaque_reason) + "]" if getattr(c, "opaque", False) else ""
        out.print(f"  {c.decision:5} {c.rule_id or '-':24} {' '.join(c.argv)}{extra}", highlight=False)
    for p in d.probes:
        out.print(f"  probe {json.dumps(p)}", highlight=False)
    out.print(f"[dim]policy files: {', '.join(d.policy_files)}[/]")


def _shipped_policies() -> list[Path]:
    pkg = Path(__file__).resolve().parent
    for here in (pkg / "_policies", pkg.parent / "policies"):  # wheel install, then source checkout
        if here.is_dir():
            return sorted(here.glob("*.yaml"))
    return []


demo_app = typer.Typer(help="End-to-end examples.", no_args_is_help=True)
app.add_typer(demo_app, name="demo")
app.add_typer(import_app, name="import")


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
