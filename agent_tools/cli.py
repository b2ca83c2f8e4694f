"""``agent-tools``: the command line (typer + rich).

Exit status: 0 when a command finished with status 0 or detached into a job; the command's own exit
status when it finished non-zero; 1 for error/denied/needs_approval/needs_input/killed outcomes; 2 for
usage errors.

Everything shown that did not come from this module (commands, output, reasons, rule ids, host names, file
names) is untrusted: it is redacted (:func:`agent_tools.redact.redact`) and put on screen as plain text with
every control character made visible (:mod:`agent_tools.display`), never read as Rich markup or sent to the
terminal as a control sequence.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import typer
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from .cli_fleet import demo_fleet, rollout_app, worker
from .cli_help import HelpGroup
from .cli_import import import_app
from .cli_mcp import mcp
from .display import plain, safe_text
from .logs import configure_logging
from .outcomes import result_view
from .redact import MARK, redact, redact_argv, redact_obj, review_gaps, review_text
from .tools.toolkit import Toolkit

__all__ = ["app", "main"]

app = typer.Typer(cls=HelpGroup, add_completion=False, no_args_is_help=True,
                  help="Run shell commands on local and SSH hosts under per-command budgets; long work "
                       "becomes durable jobs you can follow.")
out = Console()
err = Console(stderr=True)
T = TypeVar("T")

JsonOpt = Annotated[bool, typer.Option("--json", help="print the outcome as JSON (the tools' own model)")]
SshConfigOpt = Annotated[list[str] | None, typer.Option("--ssh-config", "-F", metavar="FILE",
                                                        help="OpenSSH client config file (repeatable)")]


PolicyOpt = Annotated[list[str] | None, typer.Option("--policy", metavar="FILE",
                                                    help="policy file (repeatable; default $AGENT_TOOLS_POLICY)")]


_STDOUT_GONE = False


def _write_out(text: str) -> None:
    """Write ``text`` to stdout and flush. When the reader went away (``| head -3``: EPIPE, Python ignores
    SIGPIPE), the rest is discarded quietly: stdout is pointed at /dev/null (so the interpreter's own flush at
    exit does not fail either) and the command runs to its end, which it reports on stderr."""
    global _STDOUT_GONE
    if _STDOUT_GONE:
        return
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _STDOUT_GONE = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _toolkit(ssh_config: list[str] | None, policy: list[str] | None = None) -> Toolkit:
    from .errors import PolicyError
    from .tools.factory import build_toolkit

    try:
        return build_toolkit(ssh_config=ssh_config, policy=policy, warm=False)  # one call per process
    except PolicyError as exc:
        _say(("policy error: ", "red"), _shown(exc), console=err)
        raise typer.Exit(2) from exc


def _shown(value: object, style: str = "") -> Text:
    """Untrusted ``value`` as it may be shown: redacted, control characters visible, never markup."""
    return plain(redact(str(value)), style)


def _say(*parts: str | tuple[str, str] | Text, console: Console | None = None) -> None:
    """Print one line built from trusted literals (``str`` or ``(str, style)``) and untrusted :func:`_shown`
    parts, with no markup parsing and no highlighting."""
    (console or out).print(Text.assemble(*parts), highlight=False)


def _block(text: str) -> None:
    """Print untrusted output (already cleaned by :func:`agent_tools.output.clean_text`) as it is, line breaks
    kept, control characters visible, no wrapping inserted."""
    out.print(_shown(text), end="" if text.endswith("\n") else "\n", soft_wrap=True, highlight=False)


def _run(fn: Callable[[], Awaitable[T]], label: str | None = None) -> T:
    """Run ``fn`` on anyio; on a TTY show a spinner with the elapsed time while waiting."""
    if label is None or not sys.stderr.isatty():
        return anyio.run(fn)
    with err.status(_shown(label), spinner="dots") as status:
        async def wrapped() -> T:
            async with anyio.create_task_group() as tg:
                async def tick() -> None:
                    t0 = anyio.current_time()
                    while True:
                        await anyio.sleep(0.2)
                        status.update(_shown(label) + Text(f" [{anyio.current_time() - t0:.1f}s]"))
                tg.start_soon(tick)
                result = await fn()
                tg.cancel_scope.cancel()
            return result
        return anyio.run(wrapped)


def _emit(result: BaseModel | dict[str, Any], as_json: bool) -> dict[str, Any]:
    data = result if isinstance(result, dict) else result_view(result)
    data = dict(redact_obj(data))
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")  # ensure_ascii: control characters come out escaped
        return data
    _render(data)
    return data


def _render(d: dict[str, Any]) -> None:
    # what a person reads at this CLI names CLI commands, not the agent's tool calls
    d = {k: cli_hint(v) if k in _HINTED and isinstance(v, str) else v for k, v in d.items()}
    kind = d.get("outcome")
    if kind is None and "state" in d and "job_id" in d:
        _say(_shown(d["job_id"], "bold"), " on ", _shown(d.get("host")), ": ", _shown(d["state"], "bold"),
             Text.assemble(" by ", _shown(d["by"], "bold")) if d.get("by") else "",
             f" exit {d['exit_status']}" if d.get("exit_status") is not None else "",
             Text.assemble(" readiness ", _shown(d["readiness"])) if d.get("readiness") not in (None, "none") else "",
             f" ({float(d.get('elapsed_s') or 0):.1f}s) — ", _shown(d.get("why", "")))
        _probes(d)
        for key in ("new_stdout", "new_stderr"):
            text = (d.get(key) or {}).get("text")
            if text:
                _block(_cli_markers(text, d.get("job_id")))
        if d.get("next"):
            _say(("next: ", "dim"), _shown(cli_hint(d["next"]), "dim"))
        return
    if kind is None:
        # JSON: strings quoted and escaped by the encoder (ensure_ascii: bidi, C1 and zero-width characters too)
        out.print_json(data=d, ensure_ascii=True)
        return
    head = {"finished": "green", "detached": "yellow", "killed": "red", "error": "red", "denied": "red",
            "needs_approval": "magenta", "needs_input": "magenta"}.get(str(kind), "white")
    parts: list[str | tuple[str, str] | Text] = [_shown(kind, f"bold {head}")]
    if kind == "finished":
        parts += [" exit ", _shown(d.get("exit_status")), f" in {d.get('duration_s')}s (job ",
                  _shown(d.get("job_id")), ")"]
    elif kind == "detached":
        parts += [f" after {d.get('elapsed_s')}s: job ", _shown(d.get("job_id"), "bold"), " — ",
                  _shown(d.get("why"))]
    elif kind == "killed":
        parts += [" by ", _shown(d.get("by"), "bold"), f" after {d.get('duration_s')}s — ", _shown(d.get("reason"))]
    elif kind in ("error", "denied", "needs_approval", "needs_input"):
        parts += [" — ", _shown(d.get("message") or d.get("reason") or d.get("prompt") or "")]
    _say(*parts)
    _probes(d)
    for key in ("stdout", "stderr"):
        text = (d.get(key) or {}).get("text")
        if text:
            _block(_cli_markers(text, d.get("job_id")))
    if d.get("next"):
        _say(("next: ", "dim"), _shown(cli_hint(d["next"]), "dim"))


def _probes(d: dict[str, Any]) -> None:
    """One line per probe of a job's result: kind, target, state and evidence (the evidence is said there only)."""
    for p in d.get("probes") or []:
        if isinstance(p, dict):
            _say("  probe ", _shown(p.get("kind"), "bold"), " ", _shown(p.get("target", "")), ": ",
                 _shown(p.get("state")), (" — " if p.get("evidence") else ""), _shown(p.get("evidence", "")))


#: the marker an output view puts where it left bytes out (agent_tools.output), with the call that reads on
_VIEW_MARKER_RE = re.compile(r"(… \[\d+ bytes omitted; )job_output\((?:job_id='[\w-]+', )?offset=(\d+)"
                             r"(?:, stream='(stdout|stderr)')?\)"
                             r"( reads on from there\] …)")


def _cli_markers(text: str, job_id: Any) -> str:
    """An output view's text with its markers naming this CLI's command (``agent-tools output JOB --offset N``)
    instead of the agent's ``job_output(offset=N)``."""
    if not isinstance(job_id, str):
        return text
    return _VIEW_MARKER_RE.sub(lambda m: f"{m.group(1)}agent-tools output {shlex.quote(job_id)} --offset {m.group(2)}"
                               + (f" --stream {m.group(3)}" if m.group(3) else "") + m.group(4), text)


#: the fields of a result whose text may name tools (translated by :func:`cli_hint` before it is shown)
_HINTED = frozenset({"next", "why", "message", "reason", "prompt", "note"})

#: a tool call written in a hint (``job_status(job_id='j_x', wait_s=60)``) and its keyword arguments
_CALL_RE = re.compile(r"\b(job_status|job_output|job_cancel|list_jobs|list_hosts|service_status|restart_service)"
                      r"\(([^()]*)\)")
#: a tool named without a call (``list_hosts lists the known hosts``) that has a CLI command
_BARE_RE = re.compile(r"\b(job_status|job_output|job_cancel|list_jobs|list_hosts)\b(?!\()")
_BARE_CLI = {"job_status": "agent-tools status", "job_output": "agent-tools output", "job_cancel": "agent-tools cancel",
             "list_jobs": "agent-tools jobs", "list_hosts": "agent-tools hosts"}
_KWARG_RE = re.compile(r"(\w+)=(?:'([^']*)'|([\w.\-]+))")
_APPROVAL_RE = re.compile(r"call again with the same arguments(?: \([^()]*\))? and approval_id='([\w-]+)'")


def _cli_next(tk: Toolkit, d: dict[str, Any]) -> dict[str, Any]:
    """``d`` with its ``next`` as CLI commands, for a person at this CLI. A job's result (``detached``, a job
    status) takes it from the same decision the agent's text came from (:func:`agent_tools.jobs.hints.guide`
    of the journal row, rendered in the ``cli`` style); other results keep their text (:func:`cli_hint`)."""
    job_id = d.get("job_id")
    if not d.get("next") or not isinstance(job_id, str) or d.get("outcome") not in (None, "detached"):
        return d
    from .jobs.hints import guide
    from .jobs.manager import facts_of

    try:
        rec = tk.journal.get(job_id)
    except Exception:  # a job the journal does not know: the agent's text, translated
        return d
    facts = facts_of(rec, state=str(d.get("state") or "running"),
                     output_cut="job_output" in str(d["next"]))  # (the agent's text knew whether output was cut)
    return dict(d, next=guide(facts).next_text("cli"))


def cli_hint(text: str) -> str:
    """A ``next`` text that no structured hint made (an approval's, a tool's own) as this CLI's commands: the tool
    calls written for an agent (``job_status(job_id='j_x', wait_s=60)``, ``job_output``, ``job_cancel``,
    ``list_jobs``, ``list_hosts``, ``service_status``, ``restart_service``; "call again with approval_id='a_x'")
    become ``agent-tools status j_x --wait 60``, ``output``, ``cancel``, ``jobs``, ``hosts``, ``run HOST --
    systemctl status|restart UNIT`` and ``--approve a_x``; a tool named alone (``list_hosts lists ...``) becomes
    its command too. Calls of tools that have no CLI command (read_file, restore_file) stay as they are."""
    def command(m: re.Match[str]) -> str:
        # a placeholder (host=...) becomes the argument's name in capitals, as in the commands' usage lines
        args = {k: k.upper() if (a or b) == "..." else (a or b) for k, a, b in _KWARG_RE.findall(m.group(2))}
        job = shlex.quote(args.get("job_id", "JOB_ID"))
        where = shlex.quote(args.get("host", "HOST"))
        unit = shlex.quote(args.get("unit", "UNIT"))
        if m.group(1) == "list_hosts":
            return "agent-tools hosts" + (" --check" if args.get("check") in ("true", "True") else "")
        if m.group(1) == "service_status":
            return f"agent-tools run {where} -- systemctl status {unit}"
        if m.group(1) == "restart_service":
            reload = "systemctl daemon-reload && " if args.get("daemon_reload") in ("true", "True") else ""
            return f"agent-tools run {where} -- {shlex.quote(reload + 'systemctl restart --no-block ' + unit)}"
        if m.group(1) == "job_status":
            return f"agent-tools status {job}" + (f" --wait {args['wait_s']}" if "wait_s" in args else "")
        if m.group(1) == "job_output":
            return (f"agent-tools output {job}" + (f" --offset {args['offset']}" if "offset" in args else "")
                    + (f" --stream {shlex.quote(args['stream'])}" if "stream" in args else ""))
        if m.group(1) == "job_cancel":
            return f"agent-tools cancel {job}" + (f" --grace {args['grace_s']}" if "grace_s" in args else "")
        return "agent-tools jobs" + (f" {shlex.quote(args['host'])}" if "host" in args else "") + \
            (f" --state {shlex.quote(args['state'])}" if "state" in args else "") + \
            (f" --offset {args['offset']}" if "offset" in args else "")

    text = _APPROVAL_RE.sub(lambda m: f"run the same command again with --approve {m.group(1)}", text)
    text = _CALL_RE.sub(command, text)
    return _BARE_RE.sub(lambda m: _BARE_CLI[m.group(1)], text)


_SHELL_SYNTAX = frozenset(";|&<>$`()\n")


def _hides_syntax(command: str, shown: str) -> bool:
    """Whether redaction removed shell operators from ``command`` (a secret-looking span that hides code)."""
    from collections import Counter

    before = Counter(c for c in command if c in _SHELL_SYNTAX)
    after = Counter(c for c in shown if c in _SHELL_SYNTAX)
    return any(after[c] < n for c, n in before.items())


#: a command longer than this many screen lines is shown through the pager ($PAGER, else less) before the prompt
_PAGE_MARGIN_LINES = 12


def _screen_lines(text: Text, width: int) -> int:
    return sum(max(1, -(-len(line.plain) // max(1, width))) for line in text.split("\n"))


def _show_call(d: dict[str, Any], command: str, digest: str, *, hidden: int, stored: bool = False,
               payload: str | None = None, length: int | None = None) -> None:
    """The request a person approves: host, cwd, env, rule, digest, approval id, the whole command between
    rules and what the call writes (``payload``: write_file's content, edit_file's diff) between rules of its own
    (multi-line kept, nothing cut; paged when it does not fit the screen). ``command``, ``payload`` and
    ``d["reason"]`` are shown as given (already redacted by the caller: certain shapes only, or as stored);
    ``length`` is the real command's length in characters (None: not known, a stored request)."""
    lines = command.count("\n") + 1
    _say(("needs approval", "bold magenta"), " — ", plain(d.get("reason") or ""))
    _say("  host     ", _shown(d.get("host"), "bold"))
    _say("  cwd      ", _shown(d["cwd"], "bold") if d.get("cwd") else Text("(the login directory)"))
    env = d.get("env") or {}
    _say("  env      ", _shown(" ".join(f"{k}={v}" for k, v in env.items()), "bold") if env else Text("(none given)"))
    _say("  rule     ", _shown(d.get("rule_id") or "(none)"))
    _say("  digest   ", (digest, "bold"), "  (SHA-256 of the host, command, cwd and env"
                                          + (" and of what it writes" if payload is not None else "")
                                          + " shown here; the approval is bound to it)")
    _say("  approval ", _shown(d.get("approval_id")), f"  (expires in {d.get('expires_s')} s)")
    body = plain(command)
    if not command.count(MARK):
        note = f"  command  {lines} line(s), {len(command)} character(s), shown exactly between the rules"
    elif length is not None:
        note = (f"  command  {lines} line(s), {length} character(s); shown between the rules with "
                f"{command.count(MARK)} span(s) as [REDACTED] ({len(command)} character(s) as shown)")
    else:
        note = (f"  command  {lines} line(s) as stored, {len(command)} character(s) as shown, with "
                f"{command.count(MARK)} span(s) as [REDACTED]")
    if body.plain != command:
        note += "; control/invisible characters shown as escapes"
    _say(note)
    if hidden:
        what = ("as stored: secrets were redacted before the request was saved, so a hidden span may hold more than a "
                "value" if stored else "values of a certain secret shape (tokens, keys, passwords), never code or a "
                "glob")
        _say((f"  warning: {hidden} span(s) shown as [REDACTED] ({what}); the digest binds the real text", "bold red"))
    framed = Text.assemble(("─" * 8 + " command " + "─" * 8 + "\n", "dim"), body,
                           ("\n" + "─" * 8 + " end " + "─" * 12, "dim"))
    if payload is not None:
        framed = Text.assemble(framed, ("\n" + "─" * 8 + " it writes " + "─" * 8 + "\n", "dim"), plain(payload),
                               ("\n" + "─" * 8 + " end " + "─" * 12, "dim"))
    if _screen_lines(framed, out.size.width) > max(4, out.size.height - _PAGE_MARGIN_LINES):
        _say(f"  (the command is {lines} line(s) long: it is shown in the pager first; quit the pager to answer)")
        with out.pager(styles=False):
            out.print(Text.assemble(f"digest {digest}, host ", _shown(d.get("host")), "\n"), highlight=False)
            out.print(framed, highlight=False, soft_wrap=False)
        _say("  (shown in full in the pager)")
    else:
        out.print(framed, highlight=False, soft_wrap=False)


def _ask_approval(d: dict[str, Any], command: str, cwd: str | None, reason: str | None = None) -> bool:
    """Show the call the approval is for (:func:`_show_call`: secrets of certain shape hidden, code never; the
    policy's ``reason`` as well when given raw) and ask y/N. Returns the answer."""
    from .policy.approvals import call_digest

    digest = call_digest(str(d.get("host")), command, cwd=cwd)
    if d.get("command_digest") and d["command_digest"] != digest:  # cannot happen unless the call changed
        _say(("the approval request is for another call; not asking", "red"), console=err)
        return False
    shown, hidden = review_text(command)
    if _hides_syntax(command, shown):  # cannot happen with certain shapes only; kept as the last guard
        _say(("  a redacted part of this command holds shell syntax: not asking", "bold red"), console=err)
        return False
    _show_call({**d, "cwd": cwd, "reason": review_text(reason)[0] if reason else d.get("reason")}, shown, digest,
               hidden=hidden, length=len(command))
    host = safe_text(str(d.get("host")))
    return typer.confirm(f"Approve running this command (digest {digest}) on {host}?", default=False)


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
    budget: Annotated[float | None, typer.Option("--budget", metavar="SECONDS",
                                                 help="seconds before it detaches (or is killed); "
                                                      "default: the policy's, else 15")] = None,
    on_timeout: Annotated[str | None, typer.Option("--on-timeout", metavar="detach|kill",
                                                   help="detach | kill (default: the policy's, "
                                                        "else detach)")] = None,
    deadline: Annotated[float | None, typer.Option("--deadline", metavar="SECONDS",
                                                   help="kill it on the host this many seconds after its start, "
                                                        "detached or not (the policy's hard deadline applies if "
                                                        "smaller)")] = None,
    cwd: Annotated[str | None, typer.Option("--cwd", metavar="DIR", help="working directory on the host")] = None,
    approve: Annotated[str | None, typer.Option("--approve", metavar="ID",
                                                help="approve this needs_approval id (a_...) "
                                                     "and run the command it was issued for")] = None,
    stdin: Annotated[str, typer.Option("--stdin", metavar="none|pipe",
                                       help="pipe: the job reads a pipe that `agent-tools input` writes to")] = "none",
    tty: Annotated[bool, typer.Option("--tty", help="run it in a pseudo-terminal (80x24) fed by that pipe")] = False,
    as_json: JsonOpt = False,
    ssh_config: SshConfigOpt = None,
    policy: PolicyOpt = None,
) -> None:
    """Run COMMAND on HOST under a budget: finished, or detached into a durable job.

    With a policy, a command the policy asks about is shown with its approval id: on a TTY you are asked at
    once; otherwise run the same command again with ``--approve ID``. The approval is bound to that exact
    host, command and cwd, expires, and is used once (an agent's request: ``agent-tools approvals``)."""
    cmd = " ".join(command)
    args: dict[str, Any] = {"host": host, "command": cmd, "cwd": cwd}
    if budget is not None:
        args["budget_s"] = budget
    if on_timeout is not None:
        args["on_timeout"] = on_timeout
    if deadline is not None:
        args["deadline_s"] = deadline
    if tty or stdin != "none":
        args["stdin"] = "tty" if tty else stdin

    async def go() -> dict[str, Any]:
        async with _toolkit(ssh_config, policy) as tk:
            if approve is not None:
                if tk.approvals is None:
                    return {"outcome": "error", "kind": "bad_arguments", "retryable": False,
                            "message": "--approve needs a policy (--policy FILE or $AGENT_TOOLS_POLICY)"}
                from .policy import ApprovalRefused
                from .policy.approvals import call_digest

                try:  # only for exactly this call: host, command and cwd (an agent's request: `approvals approve`)
                    tk.approvals.approve(approve, by=os.environ.get("USER", "cli"),
                                         digest=call_digest(host, cmd, cwd=cwd))
                except ApprovalRefused as exc:
                    hint = (f"; `agent-tools approvals approve {approve}` approves an agent's request for its own "
                            "call" if exc.code == "mismatch" else
                            "; run the command again without --approve for a new approval id")
                    return {"outcome": "error", "kind": "bad_arguments", "retryable": False,
                            "message": f"cannot approve {approve}: {exc}. Nothing was approved or run{hint}"}
                args["approval_id"] = approve
            d = await tk.dispatch("run_command", args)
            if d.get("outcome") == "needs_approval" and not as_json and sys.stdin.isatty() and approve is None:
                decision = tk.decide(host, cmd, cwd=cwd)
                if _ask_approval(d, cmd, cwd, decision.reason if decision is not None else None):
                    from .policy.approvals import call_digest

                    tk.approvals.approve(d["approval_id"], by=os.environ.get("USER", "cli"),  # type: ignore[union-attr]
                                         digest=call_digest(host, cmd, cwd=cwd))
                    d = await tk.dispatch("run_command", dict(args, approval_id=d["approval_id"]))
                else:
                    tk.approvals.reject(d["approval_id"], by=os.environ.get("USER", "cli"))  # type: ignore[union-attr]
                    d = dict(d, next="not approved; nothing ran")
            return d if as_json else _cli_next(tk, d)

    d = _run(go, None if as_json or sys.stdin.isatty() else f"{host}: {cmd[:60]}")
    _emit(d, as_json)
    raise typer.Exit(_exit_code(d))


@app.command()
def status(
    job_id: Annotated[str, typer.Argument(help="job id (j_...)")],
    wait: Annotated[float, typer.Option("--wait", metavar="SECONDS", help="long-poll up to this many seconds")] = 0.0,
    as_json: JsonOpt = False,
    ssh_config: SshConfigOpt = None,
) -> None:
    """State of a job and the output it wrote since the last status call."""
    async def go() -> dict[str, Any]:
        async with _toolkit(ssh_config) as tk:
            d = await tk.dispatch("job_status", {"job_id": job_id, "wait_s": wait})
            return d if as_json else _cli_next(tk, d)

    d = _run(go, None if as_json or wait <= 0 else f"waiting on {job_id}")
    _emit(d, as_json)
    raise typer.Exit(1 if d.get("outcome") == "error" else 0)


@app.command("input")
def input_(
    job_id: Annotated[str, typer.Argument(help="job id (j_...)")],
    text: Annotated[str, typer.Argument(help="what to type (a newline is added)")] = "",
    eof: Annotated[bool, typer.Option("--eof", help="then end the job's input")] = False,
    no_newline: Annotated[bool, typer.Option("--no-newline", help="add no newline")] = False,
    secret: Annotated[bool, typer.Option("--secret", help="read it from the terminal without echo (a password): "
                                                          "it goes straight to the job, shown nowhere")] = False,
    wait: Annotated[float, typer.Option("--wait", metavar="SECONDS",
                                        help="wait this long at most for its answer")] = 2.0,
    as_json: JsonOpt = False,
    ssh_config: SshConfigOpt = None,
) -> None:
    """Type TEXT into a job started with --stdin pipe or --tty, then show what it printed since. With --secret the
    text is read from the terminal with echo off (getpass) instead of the command line, which would keep it in the
    shell's history and the process list."""
    if secret:
        if text:
            _say(("--secret reads the text from the terminal: give no TEXT", "red"), console=err)
            raise typer.Exit(2)
        import getpass

        try:
            text = getpass.getpass(f"secret for {job_id} (not shown): ")
        except (EOFError, KeyboardInterrupt):
            _say(("nothing typed; nothing was sent", "red"), console=err)
            raise typer.Exit(1) from None

    async def go() -> dict[str, Any]:
        async with _toolkit(ssh_config) as tk:
            result = await tk.job_input(job_id, text, eof=eof, newline=not no_newline, wait_s=wait, secret=secret)
            d = dict(redact_obj(result_view(result)))  # as dispatch shows it (newline is not a tool argument)
            return d if as_json else _cli_next(tk, d)

    d = _run(go, None)
    _emit(d, as_json)
    raise typer.Exit(1 if d.get("outcome") == "error" else 0)


@app.command()
def output(
    job_id: Annotated[str, typer.Argument(help="job id (j_...)")],
    offset: Annotated[int, typer.Option("--offset", metavar="BYTES", help="byte offset")] = 0,
    limit: Annotated[int, typer.Option("--limit", metavar="BYTES", help="bytes at most")] = 65536,
    stream: Annotated[str, typer.Option("--stream", metavar="stdout|stderr", help="stdout | stderr")] = "stdout",
    as_json: JsonOpt = False,
    ssh_config: SshConfigOpt = None,
) -> None:
    """Page a job's output by byte offset (a page that does not reach the end says on stderr where the rest is)."""
    async def go() -> dict[str, Any]:
        async with _toolkit(ssh_config) as tk:
            return await tk.dispatch("job_output", {"job_id": job_id, "offset": offset, "limit": limit,
                                                    "stream": stream})

    d = _run(go)
    if as_json or d.get("outcome") == "error":
        _emit(d, True if as_json else False)
    else:
        sys.stdout.write(safe_text(redact(d["text"])))
        sys.stdout.flush()
        nxt, total = d.get("next_offset"), d.get("total_bytes")
        if not d.get("eof") and isinstance(nxt, int) and isinstance(total, int) and nxt < total:
            # the page is cut: say where the rest is (on stderr, so stdout holds the bytes of the page only)
            more = f"agent-tools output {job_id} --offset {nxt}" + (" --stream stderr" if stream == "stderr" else "")
            err.print(Text.assemble(f"(bytes {offset}-{nxt} of {total} shown; the rest: ", _shown(more), ")"),
                      highlight=False, soft_wrap=True)
    raise typer.Exit(1 if d.get("outcome") == "error" else 0)


@app.command()
def cancel(
    job_id: Annotated[str, typer.Argument(help="job id (j_...)")],
    grace: Annotated[float, typer.Option("--grace", metavar="SECONDS", help="seconds between TERM and KILL")] = 5.0,
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
        _say(_shown(cli_hint(str(d.get("message") or json.dumps(d)))))
        # the fields the message refers to ("see unchecked ...", survivors)
        if d.get("survivors"):
            _say(("survivors (pids still alive): ", "bold red"), _shown(" ".join(map(str, d["survivors"]))))
        if d.get("unchecked"):
            _say(("unchecked: ", "dim"), _shown(d["unchecked"]))
    raise typer.Exit(1 if d.get("outcome") == "error" or d.get("survivors") else 0)


@app.command()
def jobs(
    host: Annotated[str | None, typer.Argument(help="only this host (refreshes states from it)")] = None,
    state: Annotated[str | None, typer.Option("--state", metavar="running|exited|killed|lost",
                                              help="only jobs in this state")] = None,
    limit: Annotated[int, typer.Option("--limit", metavar="N", help="jobs at most (1-100)")] = 20,
    offset: Annotated[int, typer.Option("--offset", metavar="N", help="jobs to skip (the next page's offset)")] = 0,
    as_json: JsonOpt = False,
    ssh_config: SshConfigOpt = None,
) -> None:
    """List known jobs, newest first, a page at a time."""
    async def go() -> dict[str, Any]:
        async with _toolkit(ssh_config) as tk:
            args: dict[str, Any] = {"host": host, "limit": limit, "offset": offset}
            if state is not None:
                args["state"] = state
            return await tk.dispatch("list_jobs", args)

    d = _run(go)
    if as_json or d.get("outcome") == "error":
        _emit(d, as_json)  # an error reads as every command's error does ("error — ..."), JSON only with --json
        raise typer.Exit(1 if d.get("outcome") == "error" else 0)
    from rich.table import Table

    table = Table("job", "host", "state", "exit", "command")
    for j in d["jobs"]:
        command = redact(j["command"])
        first = command.split("\n", 1)[0]
        cut = first[:70] + (f" … ({len(command)} chars)" if len(first) > 70 or len(first) < len(command) else "")
        table.add_row(_shown(j["job_id"]), _shown(j["host"]),
                      _shown(j["state"] + (f" by {j['by']}" if j.get("by") else "")
                             + (f", readiness {j['readiness']}" if j.get("readiness") not in (None, "none") else "")
                             + (f", {len(j['leftovers'])} left running" if j.get("leftovers") else "")),
                      "" if j.get("exit_status") is None else _shown(j["exit_status"]), _shown(cut))
    out.print(table)
    shown = f"jobs {offset + 1}-{offset + len(d['jobs'])} of {d['total']}" if d["jobs"] else f"no job of {d['total']}"
    if d.get("next_offset") is not None:
        more = ["agent-tools", "jobs", *([host] if host else []), *(["--state", state] if state else []),
                "--limit", str(limit), "--offset", str(d["next_offset"])]
        shown += f"; next page: {shlex.join(more)}"
    _say((shown, "dim"))
    if d.get("note"):
        _say(("note: ", "dim"), _shown(cli_hint(d["note"]), "dim"))


@app.command()
def hosts(
    check: Annotated[bool, typer.Option("--check", help="connect to each host now: is it reachable?")] = False,
    as_json: JsonOpt = False,
    ssh_config: SshConfigOpt = None,
) -> None:
    """Hosts to use: local and the SSH config and policy aliases, with the jobs running on each."""
    async def go() -> dict[str, Any]:
        async with _toolkit(ssh_config) as tk:
            return await tk.dispatch("list_hosts", {"check": check})

    d = _run(go, None if as_json or not check else "checking hosts")
    if as_json or d.get("outcome") == "error":
        _emit(d, as_json)  # an error reads as every command's error does ("error — ..."), JSON only with --json
        raise typer.Exit(1 if d.get("outcome") == "error" else 0)
    from rich.table import Table

    table = Table("host", "source", "hostname", "jobs running", *(["reachable"] if check else []))
    for h in d["hosts"]:
        row: list[Text | str] = [_shown(h["host"]), _shown(h["source"]), _shown(h.get("hostname", "")),
                                 str(h.get("jobs_running", 0))]
        if check:
            row.append(_shown("yes" if h.get("reachable") else f"no: {h.get('error', '')}"))
        table.add_row(*row)
    out.print(table)
    if d.get("note"):
        _say(("note: ", "dim"), _shown(cli_hint(d["note"]), "dim"))


app.command()(mcp)
app.command()(worker)
app.add_typer(rollout_app, name="rollout")


def main() -> None:
    """Console-script entry point."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()



policy_app = typer.Typer(cls=HelpGroup, help="Per-host safety policies: schema, check, explain.", no_args_is_help=True)
app.add_typer(policy_app, name="policy")


@policy_app.command("schema")
def policy_schema() -> None:
    """Print the JSON Schema of policy files (for editors: yaml-language-server $schema)."""
    from .policy import Policy

    sys.stdout.write(json.dumps(Policy.json_schema(), indent=2) + "\n")


@policy_app.command("check")
def policy_check(files: Annotated[list[str], typer.Argument(help="policy files")]) -> None:
    """Load each file (schema + inline examples); report its problems, the first with file, line and key."""
    from .errors import PolicyError
    from .policy import PolicySet

    bad = 0
    for f in files:
        try:
            ps = PolicySet.load([f])
            n = sum(len(p.policy.rules) for p in ps.policies)
            _say(("ok", "green"), " ", _shown(f), f": {n} rules, examples pass")
        except PolicyError as exc:
            bad += 1
            _say(("error", "red"), " ", _shown(exc))
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
        _say(("policy error: ", "red"), _shown(exc), console=err)
        raise typer.Exit(2) from exc
    d = ps.decide(host, " ".join(command))
    if as_json:
        data = redact_obj(d.model_dump(mode="json"))
        for c in data.get("commands", []):
            c["argv"] = redact_argv(c.get("argv", []))
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    colour = {"allow": "green", "ask": "magenta", "deny": "red"}[d.decision]
    _say((d.decision, f"bold {colour}"), " (rule ", _shown(d.rule_id), ") — ", _shown(d.reason))
    _say(f"budget {d.budget_s:g} s, on_timeout {d.on_timeout}, detach "
         f"{'immediately' if d.detach_immediately else 'on budget'}, {_deadline_words(d)}")
    for c in d.commands:
        argv = " ".join(redact_argv(c.argv)) if c.argv else "(" + redact(getattr(c, "text", "") or "") + ")"
        parts: list[str | tuple[str, str] | Text] = [f"  {c.decision:5} ", _shown(f"{c.rule_id or '-':24}"), " ",
                                                     _shown(argv)]
        if getattr(c, "opaque", False):
            parts += [" [opaque: ", _shown(c.opaque_reason), "]"]
        _say(*parts)
    for p in d.probes:
        _say("  probe ", _shown(json.dumps(p)))
    _say(("policy files: ", "dim"), _shown(", ".join(d.policy_files), "dim"))


def _deadline_words(d: Any) -> str:
    """A decision's deadlines in words (never ``None``): the probes' (readiness) deadline, and the hard (kill) one
    if any."""
    if d.deadline_from == "unit_timeout":
        words = "readiness deadline: the unit's TimeoutStartSec + 30 s" + (
            f" (else {d.deadline_s:g} s)" if d.deadline_s is not None else "")
    elif d.deadline_s is not None:
        words = f"readiness deadline {d.deadline_s:g} s"
    else:
        words = "no readiness deadline"
    if getattr(d, "hard_deadline_s", None) is not None:
        source = getattr(d, "hard_deadline_from", "")
        words += (f"; killed on the host {d.hard_deadline_s:g} s after it starts, detached or not (hard deadline"
                  + (f" from the {source}" if source else "") + "; a call's --deadline/deadline_s applies instead "
                  "when smaller)")
    else:
        words += "; no kill deadline (a call's --deadline/deadline_s sets one)"
    if d.deadline_from == "unit_timeout":
        words += "; the unit's TimeoutStartSec + 30 s is also a kill deadline when smaller"
    return words


def _shipped_policies() -> list[Path]:
    pkg = Path(__file__).resolve().parent
    for here in (pkg / "_policies", pkg.parent / "policies"):  # wheel install, then source checkout
        if here.is_dir():
            return sorted(here.glob("*.yaml"))
    return []


approvals_app = typer.Typer(cls=HelpGroup, no_args_is_help=True,
                            help="Approve or reject what an agent asked to run (its needs_approval ids), out of band.")
app.add_typer(approvals_app, name="approvals")


def _approval_store() -> Any:
    from .jobs.journal import default_state_dir
    from .policy import ApprovalStore
    from .private import private_dir

    base = default_state_dir()
    private_dir(base)
    return ApprovalStore(base / "approvals.sqlite3")


@approvals_app.command("list")
def approvals_list(as_json: JsonOpt = False) -> None:
    """Pending approval requests (newest last): id, host, rule, digest, cwd and the command as stored (redacted)."""
    store = _approval_store()
    pending = store.pending()
    store.close()
    if as_json:
        sys.stdout.write(json.dumps([redact_obj(a.model_dump(mode="json")) for a in pending], indent=2) + "\n")
        return
    if not pending:
        _say("no pending approval requests")
    for a in pending:
        first = a.command.split("\n", 1)[0]
        _say(_shown(a.id, "bold"), " on ", _shown(a.host), f"  digest {a.command_sha256[:12]}  rule ",
             _shown(a.rule_id), ("  cwd " if a.cwd else ""), _shown(a.cwd or ""), "  ",
             _shown(first[:70] + (" …" if len(first) > 70 or len(first) < len(a.command) else "")),
             (f"  (+ what it writes: {_payload_lines(a.payload)} line(s))" if a.payload is not None else ""))


def _payload_lines(shown: str) -> int:
    """Lines of what a write's approval shows after its first line (which says what the call does): a last line
    end ends a line, it begins none."""
    body = shown.split("\n", 1)[1] if "\n" in shown else shown
    return body.count("\n") + (0 if body.endswith("\n") or not body else 1)


@approvals_app.command("approve")
def approvals_approve(
    approval_id: Annotated[str, typer.Argument(help="the approval id (a_...) from needs_approval")],
    digest: Annotated[str | None, typer.Option("--digest", metavar="HEX",
                                               help="the digest shown with the request (needed without a terminal)")
                      ] = None,
    command: Annotated[str | None, typer.Option(
        "--command", metavar="TEXT", help="the exact command the agent sent, when the stored one hides code "
                                          "(checked against the request)")] = None,
    command_file: Annotated[Path | None, typer.Option(
        "--command-file", metavar="FILE", help="as --command, read from FILE (exactly its bytes)")] = None,
) -> None:
    """Approve an agent's request: it is shown (host, cwd, env, rule, digest, the command and what it writes, as
    stored, secrets redacted) and asked about on a terminal; without one, ``--digest`` must be the request's
    digest. The agent's call with ``approval_id=ID`` then runs it, once, before the approval expires.

    A request whose stored command hides more than values of a certain secret shape (shell code or words in a
    secret's place: they are redacted before a request is saved) is only approved with the exact command given
    (``--command``/``--command-file``), checked against the request and shown in its place."""
    from .policy import ApprovalRefused
    from .policy.approvals import command_sha256

    store = _approval_store()
    try:
        a = store.get(approval_id)
        if a is None or a.status in ("used", "rejected") or a.expires_at <= time.time():
            store.approve(approval_id, by=os.environ.get("USER", "cli"))  # refused, saying why
            raise typer.Exit(1)
        if a.status == "approved":
            _say("already approved: ", _shown(approval_id))
            return
        given = command_file.read_bytes().decode("utf-8", "surrogateescape") if command_file else command
        d = {"host": a.host, "cwd": a.cwd, "env": a.env, "rule_id": a.rule_id, "approval_id": a.id,
             "expires_s": round(a.expires_at - time.time(), 1),
             "reason": f"an agent asked to run this: {a.reason}" if a.reason else "an agent asked to run this"}
        hidden_code = a.hidden_code if a.hidden_code is not None else (1 if MARK in a.command else 0)
        if given is not None:
            if a.text_sha256 is None or command_sha256(given) != a.text_sha256:
                _say(("error", "red"), " the command given is not the one request ", _shown(approval_id),
                     " is for; nothing was approved", console=err)
                raise typer.Exit(1)
            shown, hidden = review_text(given)
            _show_call(d, shown, a.command_sha256[:12], hidden=hidden + (a.payload or "").count(MARK),
                       payload=a.payload, length=len(given))
            hidden_code -= review_gaps(given)
        else:
            hidden = (a.command.count(MARK) + sum(str(v).count(MARK) for v in (a.env or {}).values())
                      + (a.payload or "").count(MARK))
            _show_call(d, a.command, a.command_sha256[:12], hidden=hidden, stored=True, payload=a.payload)
        if hidden_code > 0:
            where = ("its cwd or env" if given is not None else "it")
            _say(("error", "red"), f" the stored request hides {hidden_code} span(s) that may be shell code or words "
                 "that run (it is redacted before it is saved, and these are no values of a certain secret shape), "
                 f"in {where}: it cannot be approved from what is stored. "
                 + ("Give the exact command the agent sent: `agent-tools approvals approve ID --command-file FILE` "
                    "(checked against the request). " if given is None else "")
                 + "Or approve it where the whole call is shown: the MCP client's approval prompt, or `agent-tools "
                   "run HOST --approve ID -- COMMAND` (which runs it yourself)", console=err)
            raise typer.Exit(2)
        if digest is None:
            if not sys.stdin.isatty():
                _say(("error", "red"), " without a terminal, give --digest (the digest shown with the request)",
                     console=err)
                raise typer.Exit(2)
            if not typer.confirm(f"Approve this request (digest {a.command_sha256[:12]}) on "
                                 f"{safe_text(a.host)}?", default=False):
                _say("not approved; nothing changed")
                raise typer.Exit(1)
            digest = a.command_sha256
        store.approve(approval_id, by=os.environ.get("USER", "cli"), digest=digest)
        _say(("approved", "bold green"), " ", _shown(approval_id),
             ": the agent's call with this approval_id runs it once, before it expires")
    except ApprovalRefused as exc:
        _say(("error", "red"), " ", _shown(exc), console=err)
        raise typer.Exit(1) from exc
    finally:
        store.close()


@approvals_app.command("reject")
def approvals_reject(approval_id: Annotated[str, typer.Argument(help="the approval id (a_...)")]) -> None:
    """Reject an agent's request: its approval id can never be used."""
    from .policy import ApprovalRefused

    store = _approval_store()
    try:
        store.reject(approval_id, by=os.environ.get("USER", "cli"))
        _say(("rejected", "bold"), " ", _shown(approval_id))
    except ApprovalRefused as exc:
        _say(("error", "red"), " ", _shown(exc), console=err)
        raise typer.Exit(1) from exc
    finally:
        store.close()


demo_app = typer.Typer(cls=HelpGroup, help="End-to-end examples.", no_args_is_help=True)
app.add_typer(demo_app, name="demo")
app.add_typer(import_app, name="import")


@demo_app.command("hicache")
def demo_hicache(
    host: Annotated[str | None, typer.Option("--host", metavar="ALIAS",
                                             help="run on this SSH alias instead of the embedded node")
                    ] = None,
    profile: Annotated[str, typer.Option("--profile", metavar="NAME",
                                         help="embedded node: default (fits) | small_ram (rolls back)")
                       ] = "default",
    load_s: Annotated[float, typer.Option("--load-s", metavar="SECONDS",
                                          help="embedded node: simulated model load seconds")] = 8.0,
    as_json: Annotated[bool, typer.Option("--json", help="transcript as JSON lines")] = False,
    ssh_config: SshConfigOpt = None,
) -> None:
    """Memory analysis → add hicache flags → restart detached → follow readiness → verify (or roll back)."""
    from .demo.hicache import run_walkthrough
    from .demo.node import run_node

    def emit(line: str) -> None:
        # the walkthrough's lines quote command output from the host: untrusted
        _write_out(safe_text(redact(line)) + "\n")

    async def go() -> str:
        if host is not None:
            async with _toolkit(ssh_config) as tk:
                res = await run_walkthrough(tk, host, emit=emit, json_lines=as_json)
                emit(json.dumps({"result": res.result, "summary": res.summary}) if as_json else
                     f"RESULT: {res.result} — {res.summary}")
                return res.result
        if not as_json:
            emit(f"# starting the embedded simulated GPU node (profile {profile}, model load {load_s:g} s)")
        async with run_node(profile, load_s=load_s) as node:  # its jobs stay in its own journal, gone with it
            tk = Toolkit(node.registry, journal=node.journal)
            res = await run_walkthrough(tk, node.alias, emit=emit, json_lines=as_json)
            emit(json.dumps({"result": res.result, "summary": res.summary}) if as_json else
                 f"RESULT: {res.result} — {res.summary}")
            return res.result

    result = anyio.run(go)
    if _STDOUT_GONE:
        err.print(f"stdout was closed early (broken pipe): the rest of the transcript was not shown; the "
                  f"walkthrough ran to its end: {escape(result)}", highlight=False)
    raise typer.Exit(0 if result in ("verified", "rolled_back") else 1)


demo_app.command("fleet")(demo_fleet)


@demo_app.command("node")
def demo_node(
    profile: Annotated[str, typer.Option("--profile", help="default (hicache fits) | small_ram (it does not)")
                       ] = "default",
    load_s: Annotated[float, typer.Option("--load-s", help="simulated model load seconds")] = 8.0,
    alias: Annotated[str, typer.Option("--alias", metavar="NAME",
                                       help="the node's host alias (several nodes under their own names form a "
                                            "fleet: concatenate their SSH configs)")] = "gpu-node-1",
    as_json: Annotated[bool, typer.Option("--json", help="print the node's facts as one JSON line")] = False,
) -> None:
    """Start the embedded simulated GPU node and keep it running until interrupted (Ctrl-C, SIGTERM).

    Prints the host alias, the ``-F`` SSH config naming it, and the state dir to use, so an MCP client can
    drive it: ``AGENT_TOOLS_STATE_DIR=DIR agent-tools mcp -F CONFIG`` (the node's jobs then stay in its own
    journal and vanish with it)."""
    import re
    import signal

    from .demo.node import run_node

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", alias):
        err.print(f"error: --alias {escape(repr(alias))} is not a plain host name (letters, digits, . _ -)",
                  highlight=False)
        raise typer.Exit(2)

    async def go() -> None:
        async with run_node(profile, load_s=load_s, alias=alias) as node:
            mcp_cmd = ["agent-tools", "mcp", "-F", str(node.ssh_config)]
            facts = {"alias": node.alias, "ssh_config": str(node.ssh_config), "state_dir": str(node.state_dir),
                     "mcp_command": mcp_cmd, "mcp_env": {"AGENT_TOOLS_STATE_DIR": str(node.state_dir)}}
            if as_json:
                _write_out(json.dumps(facts) + "\n")
            else:
                _write_out(f"embedded GPU node {node.alias} is running (profile {profile}, model load "
                           f"{load_s:g} s); Ctrl-C stops it\n"
                           f"  host alias:  {node.alias}\n  ssh config:  {node.ssh_config}\n"
                           f"  state dir:   {node.state_dir}\n"
                           f"  MCP server:  AGENT_TOOLS_STATE_DIR={node.state_dir} {' '.join(mcp_cmd)}\n")
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    break

    anyio.run(go)


if __name__ == "__main__":
    main()
