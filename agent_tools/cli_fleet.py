"""``agent-tools worker``, ``agent-tools rollout start|status|approve|cancel`` and ``agent-tools demo fleet``: fleet
rollouts as Temporal workflows (:mod:`agent_tools.fleet`; needs the ``temporal`` extra, imported only when one of
these commands runs).

Registered on the main CLI by :mod:`agent_tools.cli`. What the hosts said (notes, probe evidence, host names) is
untrusted: redacted and shown as plain text with control characters visible.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn, TypeVar

import anyio
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .cli_help import HelpGroup
from .display import plain
from .redact import redact

__all__ = ["demo_fleet", "expand_hosts", "live_view", "rollout_app", "status_table", "worker"]

_T = TypeVar("_T")

_out = Console()
_err = Console(stderr=True)

TemporalOpt = Annotated[str, typer.Option("--temporal", metavar="HOST:PORT", help="the Temporal server (gRPC)")]
QueueOpt = Annotated[str, typer.Option("--task-queue", metavar="QUEUE", help="the task queue of the fleet workers")]
NamespaceOpt = Annotated[str, typer.Option("--namespace", help="the Temporal namespace")]


def _need_temporal() -> None:
    try:
        import temporalio  # noqa: F401
    except ImportError as exc:
        _err.print("error: fleet commands need the temporal extra: pip install 'agent-tools[temporal]'",
                   highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(2) from exc


def _exit_now(code: int = 0) -> NoReturn:
    """Flush and end the process without interpreter teardown: temporalio's client (its Rust runtime's threads)
    can abort a short-lived process at finalization ("PyGILState_Release: thread state ... must be current",
    SIGABRT after the work was done; temporalio/sdk-python#300, open)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _shown(value: object, style: str = "") -> Text:
    return plain(redact(str(value)), style)


def _fail(message: object, code: int) -> NoReturn:
    """``error: MESSAGE`` (one line, untrusted text escaped) on stderr, exit ``code``."""
    _err.print(Text.assemble(("error: ", "red"), _shown(message)), highlight=False, soft_wrap=True)
    _exit_now(code)


def _run(fn: Callable[[], Awaitable[_T]]) -> _T:
    """``anyio.run(fn)``; a :class:`~agent_tools.fleet.client.RolloutError` (no such rollout, the server cannot be
    reached, an id in use, ...; also inside a task group's exception group) ends the command with its one line and
    exit code, not a traceback."""
    from .fleet.client import RolloutError

    try:
        return anyio.run(fn)
    except RolloutError as exc:
        _fail(exc, exc.exit_code)
    except BaseExceptionGroup as group:
        found: BaseException | None = group.split(RolloutError)[0]
        while isinstance(found, BaseExceptionGroup):
            found = found.exceptions[0]
        if isinstance(found, RolloutError):
            _fail(found, found.exit_code)
        raise


_STYLE = {"verified": "green", "already_done": "green", "denied": "yellow",
          "refused": "yellow", "rolled_back": "yellow", "failed": "red", "skipped": "dim",
          "cancelled": "dim", "awaiting_approval": "magenta", "restarting": "cyan", "rolling_back": "yellow",
          "verifying": "cyan"}


def _note(h: dict[str, Any]) -> str:
    """A host's note, led by what its running step is going through when it is being retried (the attempt and
    the last failure: an unreachable host, a dead worker's heartbeat timeout)."""
    note = str(h.get("note", ""))
    step = h.get("step") if isinstance(h.get("step"), dict) else None
    if step and (int(step.get("attempt") or 1) > 1 or step.get("last_failure")):
        tries = f"attempt {step.get('attempt')}/{step.get('max_attempts') or '∞'}"
        failure = f"; last failure: {step['last_failure']}" if step.get("last_failure") else ""
        note = f"retrying {step.get('activity')} ({tries}{failure}) — {note}"
    return note


def status_table(st: dict[str, Any], starts: dict[str, int] | None = None) -> Table:
    """A rollout's ``status`` as a rich table (one line per host, its note cut to the width with an ellipsis: the
    full text is in ``rollout status --json``; ``starts``: the unit's restarts counted on the nodes). Waves are
    counted from 1 here (the status' ``wave`` from 0)."""
    counts = ", ".join(f"{k} {v}" for k, v in sorted(st.get("counts", {}).items()))
    cancel = " — CANCEL REQUESTED" if st.get("cancel_requested") and st.get("phase") != "cancelled" else ""
    title = (f"rollout: {st.get('phase')}{cancel} (wave {max(st.get('wave', -1) + 1, 0)}/{st.get('waves')}), "
             f"failures {st.get('failures')}/{st.get('failure_budget')} budget — {counts}")
    table = Table(title=title, title_justify="left", expand=False)
    for col in ("host", "wave", "state", "job", *(["node restarts"] if starts is not None else [])):
        table.add_column(col, no_wrap=True)
    # the one column that gives way to the width; its cells are cut there with an ellipsis, not wrapped (one
    # line per host; the full text: --json)
    table.add_column("note", overflow="ellipsis")
    for host, h in st.get("hosts", {}).items():
        state = str(h.get("state"))
        note = _note(h)
        wave = h.get("wave")
        row = [_shown(host), Text(str(wave + 1) if isinstance(wave, int) else ""),
               _shown(state, _STYLE.get(state, "")), _shown(h.get("job_id") or "")]
        if starts is not None:
            row.append(Text(str(starts.get(host, ""))))
        cell = _shown(note.replace("\n", " "), "dim")
        cell.no_wrap, cell.overflow = True, "ellipsis"
        row.append(cell)
        table.add_row(*row)
    if st.get("halted"):
        table.caption = redact(str(st["halted"]))
    return table


def expand_hosts(patterns: list[str], ssh_config: list[str] | None) -> list[str]:
    """``patterns`` with every glob (``*``, ``?``, ``[``: fnmatch, as policy files' ``hosts``) replaced by the SSH
    config's ``Host`` aliases it matches, sorted; plain aliases kept as given; each host once, first place kept.

    :raises ValueError: a glob matches no alias."""
    from fnmatch import fnmatchcase

    from .hosts.registry import HostRegistry

    known: list[str] | None = None
    out: list[str] = []
    for pat in patterns:
        if not any(c in pat for c in "*?["):
            found = [pat]
        else:
            if known is None:
                known = sorted(a for a in HostRegistry(ssh_config=ssh_config).known() if a != "local")
            found = [a for a in known if fnmatchcase(a, pat)]
            if not found:
                raise ValueError(f"{pat!r} matches no Host alias of the SSH config")
        out.extend(a for a in found if a not in out)
    return out


def worker(
    temporal: TemporalOpt,
    task_queue: QueueOpt = "agent-tools-fleet",
    policy: Annotated[list[str] | None, typer.Option("--policy", metavar="FILE",
                                                     help="policy file (repeatable; default $AGENT_TOOLS_POLICY)")
                      ] = None,
    ssh_config: Annotated[list[str] | None, typer.Option("--ssh-config", "-F", metavar="FILE",
                                                         help="OpenSSH client config file (repeatable)")] = None,
    sticky_timeout_s: Annotated[float, typer.Option("--sticky-timeout-s", metavar="SECONDS",
                                                    help="how long a workflow's next task waits for this worker "
                                                         "before another may take it")] = 10.0,
    namespace: NamespaceOpt = "default",
) -> None:
    """Run a fleet worker: the FleetRollout/HostJob workflows and their activities over this machine's hosts and
    policies, until SIGINT/SIGTERM. Several workers may share a task queue."""
    _need_temporal()
    from .errors import PolicyError
    from .fleet.client import connect
    from .fleet.worker import run_worker
    from .tools.factory import build_toolkit

    if not sticky_timeout_s > 0:
        _fail("--sticky-timeout-s must be > 0 seconds", 2)
    try:
        tk = build_toolkit(ssh_config=ssh_config, policy=policy, warm=True)
    except PolicyError as exc:
        _err.print(Text.assemble(("policy error: ", "red"), plain(exc)), highlight=False)
        raise typer.Exit(2) from exc

    async def go() -> None:
        await connect(temporal, namespace)  # a server that cannot be reached: one line, before anything starts
        stop = anyio.Event()
        async with tk, anyio.create_task_group() as tg:

            async def on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        stop.set()
                        return

            tg.start_soon(on_signal)
            ready = anyio.Event()
            tg.start_soon(lambda: run_worker(temporal, task_queue, tk, stop=stop, namespace=namespace, ready=ready,
                                             sticky_timeout_s=sticky_timeout_s))
            await ready.wait()
            _err.print(Text.assemble("fleet worker polling ", _shown(task_queue), " on ", _shown(temporal)),
                       highlight=False)
            await stop.wait()
            tg.cancel_scope.cancel()

    _run(go)
    _exit_now(0)


rollout_app = typer.Typer(cls=HelpGroup, no_args_is_help=True,
                          help="Fleet rollouts (Temporal workflows): start, status, approve, cancel.")


@rollout_app.command("start")
def rollout_start(
    hosts: Annotated[list[str], typer.Argument(help="host aliases in rollout order, or globs (gpu-*) matched "
                                                    "against the SSH config's Host aliases, sorted")],
    temporal: TemporalOpt,
    workflow_id: Annotated[str, typer.Option("--id", metavar="ID", help="the rollout's workflow id")],
    task_queue: QueueOpt = "agent-tools-fleet",
    flag: Annotated[list[str] | None, typer.Option("--flag", metavar="WORD",
                                                   help="a word to add to ExecStart (repeatable; default: the "
                                                        "hicache walkthrough's flags)")] = None,
    unit: Annotated[str, typer.Option("--unit", help="the systemd unit")] = "sglang.service",
    canary: Annotated[int, typer.Option("--canary", help="hosts in the first wave")] = 1,
    wave_size: Annotated[int, typer.Option("--wave-size", help="hosts per later wave")] = 3,
    failure_budget: Annotated[int, typer.Option("--failure-budget", help="host failures tolerated")] = 0,
    precheck: Annotated[bool, typer.Option("--precheck/--no-precheck",
                                           help="refuse hosts whose RAM cannot hold the hicache pool")] = True,
    heartbeat_s: Annotated[float, typer.Option("--heartbeat-s", metavar="SECONDS",
                                               help="heartbeat timeout of every step (> 0): a silent worker is "
                                                    "taken for dead after it")] = 10.0,
    reuse_id: Annotated[bool, typer.Option("--reuse-id", help="start although a finished rollout had this id "
                                                              "(its status is then no longer shown by the id)")
                        ] = False,
    wait: Annotated[bool, typer.Option("--wait", help="wait for the end, showing the live table")] = False,
    ssh_config: Annotated[list[str] | None, typer.Option("--ssh-config", "-F", metavar="FILE",
                                                         help="OpenSSH client config whose aliases globs match "
                                                              "(repeatable; default ~/.ssh/config)")] = None,
    namespace: NamespaceOpt = "default",
) -> None:
    """Start a FleetRollout of the unit change over HOSTS. An id a rollout already had is refused (unless
    --reuse-id); with --wait, exit 0 only when it ends done with no host failed."""
    _need_temporal()
    from .fleet.client import connect, start_rollout
    from .fleet.model import RolloutSpec
    from .fleet.workflow import spec_problem

    try:
        chosen = expand_hosts(list(hosts), ssh_config)
    except ValueError as exc:
        _fail(exc, 2)
    spec = RolloutSpec(hosts=chosen, flags=list(flag or []), unit=unit, canary=canary, wave_size=wave_size,
                       failure_budget=failure_budget, precheck=precheck, heartbeat_s=heartbeat_s)
    problem = spec_problem(spec)
    if problem:
        _fail(problem, 2)

    async def go() -> dict[str, Any] | None:
        client = await connect(temporal, namespace)
        handle = await start_rollout(client, spec, workflow_id=workflow_id, task_queue=task_queue,
                                     reuse_id=reuse_id)
        _err.print(Text.assemble("started rollout ", _shown(handle.id), f" over {len(chosen)} host(s) on task "
                                 "queue ", _shown(task_queue)), highlight=False)
        if not wait:
            return None
        return await _watch(client, workflow_id)

    final = _run(go)
    ok = final is None or (final.get("phase") == "done" and not final.get("counts", {}).get("failed"))
    _exit_now(0 if ok else 1)


@contextmanager
def live_view(console: Console) -> Iterator[Any]:
    """A rich ``Live`` on ``console`` whose last render ends with a newline also when the console is not a
    terminal (rich adds it only on one: piped output ran into the next line)."""
    from rich.live import Live

    with Live(console=console, auto_refresh=False) as live:
        yield live
    if not console.is_terminal:
        console.line()


async def _watch(client: Any, workflow_id: str) -> dict[str, Any]:
    from rich.console import Group

    from .fleet.client import status

    with live_view(_out) as live:
        while True:
            st = await status(client, workflow_id)
            live.update(Group(*_status_lines(workflow_id, st), *([status_table(st)] if "phase" in st else [])),
                        refresh=True)
            if st["workflow"] != "RUNNING":
                return st
            await anyio.sleep(0.5)  # a person's view: the workflow pushes nothing, its state is queried


def _status_lines(workflow_id: str, st: dict[str, Any]) -> list[Text]:
    """The lines above a rollout's table: its execution status, and why the table is not the live state when
    no worker answered (or what the workflow recorded when it ended without a status)."""
    lines = [Text.assemble("workflow ", _shown(workflow_id), ": ", _shown(st["workflow"]))]
    if st.get("why"):
        lines.append(_shown(st["why"], "yellow"))
    return lines


@rollout_app.command("status")
def rollout_status(
    workflow_id: Annotated[str, typer.Argument(help="the rollout's workflow id")],
    temporal: TemporalOpt,
    as_json: Annotated[bool, typer.Option("--json", help="the status as JSON")] = False,
    namespace: NamespaceOpt = "default",
) -> None:
    """Per-host state of a rollout: while it runs, a worker's answer (each host's step, job id and retries); once
    it ended, its final status from the server (no worker needed)."""
    _need_temporal()
    from .fleet.client import connect, status

    async def go() -> dict[str, Any]:
        return await status(await connect(temporal, namespace), workflow_id)

    st = _run(go)
    if as_json:
        sys.stdout.write(json.dumps(st, default=str) + "\n")
    else:
        for line in _status_lines(workflow_id, st):
            _out.print(line, highlight=False, soft_wrap=True)
        if "phase" in st:  # (nothing to tabulate when a running rollout recorded no status and no worker answers)
            _out.print(status_table(st))
    _exit_now(0)


@rollout_app.command("approve")
def rollout_approve(
    workflow_id: Annotated[str, typer.Argument(help="the rollout's workflow id")],
    temporal: TemporalOpt,
    host: Annotated[list[str], typer.Option("--host", metavar="ALIAS",
                                            help="a host whose waiting step to approve (repeatable; '*': every "
                                                 "host waiting now, never a later one)")],
    by: Annotated[str | None, typer.Option("--by", metavar="NAME", help="who approves (default: $USER)")] = None,
    namespace: NamespaceOpt = "default",
) -> None:
    """Send a person's yes to the rollout's steps waiting for approval on the hosts named (a Temporal signal); the
    yes also covers that host's later steps in this rollout. Prints each host approved and its step."""
    _need_temporal()
    from .fleet.client import approve, connect

    who = by or os.environ.get("USER")
    if not who:
        _fail("say who approves: --by NAME ($USER is not set)", 2)

    async def go() -> list[dict[str, Any]]:
        return await approve(await connect(temporal, namespace), workflow_id, list(host), who)

    approved = _run(go)
    for a in approved:
        rule = f" (rule {a.get('rule_id')})" if a.get("rule_id") else ""
        _out.print(Text.assemble("approved ", _shown(a["host"]), " of ", _shown(workflow_id), " as ", _shown(who),
                                 ": ", _shown(a.get("step") or "its waiting step"), " ", _shown(a.get("command") or ""),
                                 _shown(rule)), highlight=False, soft_wrap=True)
    _exit_now(0)


@rollout_app.command("cancel")
def rollout_cancel(
    workflow_id: Annotated[str, typer.Argument(help="the rollout's workflow id")],
    temporal: TemporalOpt,
    namespace: NamespaceOpt = "default",
) -> None:
    """Cancel a running rollout: running steps stop (their jobs cancelled on the hosts), hosts whose unit was
    changed are put back, hosts not done become cancelled. A rollout that ended: exit 1, nothing sent."""
    _need_temporal()
    from .fleet.client import cancel, connect

    async def go() -> bool:
        return await cancel(await connect(temporal, namespace), workflow_id)

    if _run(go):
        _out.print(Text.assemble("cancellation requested for ", _shown(workflow_id), ": running steps stop and "
                                 "changed hosts are put back (rollout status shows them)"), highlight=False,
                   soft_wrap=True)
    else:
        _out.print(Text.assemble("cancellation of ", _shown(workflow_id), " was requested already: it is putting "
                                 "hosts back (rollout status shows them)"), highlight=False, soft_wrap=True)
    _exit_now(0)


def demo_fleet(
    hosts: Annotated[int, typer.Option("--hosts", help="embedded simulated GPU nodes (one has too little RAM; at "
                                                       "least 2, 3 with --kill)")] = 8,
    load_s: Annotated[float, typer.Option("--load-s", help="simulated model load seconds")] = 4.0,
    wave_size: Annotated[int, typer.Option("--wave-size", help="hosts per wave after the canary")] = 3,
    kill: Annotated[bool, typer.Option("--kill/--no-kill", help="SIGKILL the worker mid-wave, start another")
                    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="print the final summary as one JSON line")] = False,
) -> None:
    """A local Temporal dev server, HOSTS embedded nodes, a worker process: a canary then waves roll the hicache
    flags out; the worker is SIGKILLed mid-wave and a new one re-attaches. Ends with the counts (verified,
    refused, restarts counted on the nodes); exit 0 only when all of it happened (the kill too, with --kill)."""
    _need_temporal()
    from .demo.fleet import demo_problem, run_fleet_demo

    problem = demo_problem(hosts, wave_size=wave_size, kill=kill, load_s=load_s)
    if problem:
        _fail(problem, 2)
    with live_view(_err if as_json else _out) as live:

        def show(st: dict[str, Any], starts: dict[str, int], events: list[str]) -> None:
            from rich.console import Group

            live.update(Group(status_table(st, starts), *(_shown(e, "bold") for e in events[-4:])), refresh=True)

        summary = _run(lambda: run_fleet_demo(hosts, load_s=load_s, wave_size=wave_size, kill=kill, show=show))
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        _out.print(Text.assemble(("RESULT: ", "bold"), _shown(summary["line"])), highlight=False)
    _exit_now(0 if summary["ok"] else 1)
