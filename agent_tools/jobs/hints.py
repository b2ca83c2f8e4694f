"""What comes next for a job: one function from its state to the summary line, the ``why`` and the next calls.

Every result about a job (``run_command``'s ``detached``, ``job_status``, ``list_jobs`` rows,
``restart_service``) takes its ``next``, ``why`` and summary from :func:`guide`, so they can never disagree
with each other or with the state they describe. The input is the job's *state* (``running`` | ``exited`` |
``killed`` | ``lost`` | ``not_started`` | ``unconfirmed``), its *readiness* (``none`` | ``pending`` | ``ready`` |
``failed`` | ``deadline_exceeded``) and its *exit status class* (:func:`exit_class`: ``none`` | ``zero`` | ``nonzero``);
the rules, in order:

0. an ``unconfirmed`` start (its request went out unanswered; nothing ran so far) is followed with
   ``job_status`` until the host settles it, never run again meanwhile.
1. readiness ``failed`` or ``deadline_exceeded`` is the verdict: read the evidence, fix, try again.
2. a command that failed (exit status not 0), was killed, was lost or never started (``not_started``: the
   launch provably never reached the host) says so, whatever the readiness
   (``pending`` can no longer be reached; ``ready`` was true before it ended).
3. readiness ``pending`` means *keep following*, also after the command itself exited 0 (a
   ``systemctl restart --no-block`` exits at once while the service loads for minutes).
4. readiness ``ready``: go on with the task.
5. no probes: ``running`` is followed (a command that runs until stopped, such as ``watch``, gets what to run
   instead and ``job_cancel``); ``exited`` with status 0 is done.

A non-zero exit status that is an answer (``grep`` 1: no line matched) or has a known cause (127: not installed)
is said as such (:mod:`agent_tools.jobs.exits`) instead of "it failed: fix the cause".

The next calls are data (:class:`NextCall`: tool, arguments, a short note) rendered to text in one place,
:func:`render`, so another rendering (a command line instead of a tool call) reuses the same decisions.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ExitClass", "Guidance", "JobFacts", "NextCall", "cli_command", "exit_class", "follow_wait_s", "guide",
           "render"]

ExitClass = Literal["none", "zero", "nonzero"]

#: readiness values that no later look changes (``ready`` may still turn ``failed``: see probes.readiness)
FINAL_READINESS = frozenset({"failed", "deadline_exceeded"})


@dataclass(frozen=True)
class NextCall:
    """One suggested next step.

    :param tool: the tool to call (``job_status``, ``job_output``, ...), or None when the step is not a call
        (the note says what to do).
    :param args: the call's arguments (JSON-ready values).
    :param note: a short reason, read after the call ("to keep following").
    """

    tool: str | None
    args: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class JobFacts:
    """What :func:`guide` needs to know about a job.

    :param state: ``running`` | ``exited`` | ``killed`` | ``lost`` | ``not_started`` | ``unconfirmed``.
    :param readiness: ``none`` | ``pending`` | ``ready`` | ``failed`` | ``deadline_exceeded``.
    :param exit_status: the exit status (None when there is none).
    :param signal: the signal name when the status says the command died of one (128+N).
    :param detail: what the host's job directory says ("exited with status 0", "cancelled: ...").
    :param readiness_detail: the probes' evidence ("waiting for readiness: ...", journal lines).
    :param units: systemd units the job's probes follow (for ``service_status`` hints).
    :param deadline_s: the job's deadline in seconds (chooses the long-poll wait), or None.
    :param superseded_by: the newer restart job of the same unit that took over (readiness ``superseded``).
    :param output_cut: some of the job's output was left out of what the agent was shown (False: every byte was
        in a result, so ``job_output`` would only repeat it and is not suggested).
    :param killed_by: who killed a ``killed`` job: ``budget`` | ``deadline`` | ``cancel`` (``""``: not known).
    :param needs: what a command that failed wanted from a person or a terminal and what to run instead
        (:func:`agent_tools.jobs.terminal.interactive_need`'s ``next``; ``""``: nothing of the kind).
    :param leftovers: how many processes the job's ended command left running still run (``job_cancel`` stops
        them); 0 while it runs; -1 while its monitor is still looking for them (another look tells).
    :param exit_note: what a non-zero exit status means when it is an answer or has a known cause
        (:func:`agent_tools.jobs.exits.exit_note`; ``""``: a plain failure).
    :param endless: the command runs until stopped, and what to run instead
        (:func:`agent_tools.jobs.exits.never_ends`; ``""``: it ends by itself).
    :param endless_follow: following such a command still shows something (a log it follows).
    :param unit_only: its only probes are ``systemd_unit`` ones: readiness rests on the unit's state alone.
    """

    job_id: str
    host: str
    state: str
    readiness: str = "none"
    exit_status: int | None = None
    signal: str | None = None
    detail: str = ""
    readiness_detail: str = ""
    units: tuple[str, ...] = ()
    deadline_s: float | None = None
    superseded_by: str = ""
    output_cut: bool = True
    killed_by: str = ""
    needs: str = ""
    leftovers: int = 0
    exit_note: str = ""
    endless: str = ""
    endless_follow: bool = False
    unit_only: bool = False


@dataclass(frozen=True)
class Guidance:
    """:func:`guide`'s answer.

    :param summary: one line leading with the state ("exited 0, readiness pending").
    :param why: the explanation shown as a result's ``why``.
    :param next: the next calls, most useful first.
    :param final: True when following the job further changes nothing (done, failed, killed, lost, ready).
    """

    summary: str
    why: str
    next: tuple[NextCall, ...]
    final: bool

    def next_text(self, style: str = "tool") -> str:
        """:func:`render` of :attr:`next`."""
        return render(self.next, style)


def exit_class(exit_status: int | None) -> ExitClass:
    """``none`` (no exit status), ``zero`` or ``nonzero``."""
    if exit_status is None:
        return "none"
    return "zero" if exit_status == 0 else "nonzero"


def follow_wait_s(deadline_s: float | None) -> float:
    """The ``wait_s`` to suggest for following a job: 60 s, or 15 s when its deadline is 2 minutes or less."""
    return 60.0 if deadline_s is None or deadline_s > 120 else 15.0


def _state_phrase(f: JobFacts) -> str:
    if f.state == "exited":
        if f.exit_status is None:
            return "exited without an exit status"
        return f"exited {f.exit_status}" + (f" (signal {f.signal})" if f.signal else "")
    if f.state == "killed":
        return "killed" + (f" by {f.killed_by}" if f.killed_by else "") + (f" ({f.signal})" if f.signal else "")
    return f.state


def guide(f: JobFacts) -> Guidance:
    """The summary, why and next calls for a job in the state ``f`` describes (see the module docstring for the
    rules), with, once the command ended, the call that stops what it left running (``leftovers``). Pure: the
    same facts give the same guidance."""
    g = _guide(f)
    if not f.leftovers or f.state == "running":
        return g
    if f.leftovers < 0:
        look = NextCall("job_status", {"job_id": f.job_id, "wait_s": 5.0}, "shows what it left running (its monitor "
                                                                            "on the host is looking)")
        return Guidance(g.summary, g.why, (*(c for c in g.next if c.note != "done"), look), g.final)
    n = f.leftovers
    stop = NextCall("job_cancel", {"job_id": f.job_id}, f"stops the {n} process(es) it left running (leave them if "
                                                         "they are meant to run on)")
    nexts = tuple(c for c in g.next if c.note != "done")
    return Guidance(f"{g.summary}; {n} process(es) it started still run", g.why, (*nexts, stop), g.final)


def _guide(f: JobFacts) -> Guidance:
    jid = {"job_id": f.job_id}
    follow = NextCall("job_status", {**jid, "wait_s": follow_wait_s(f.deadline_s)}, "to keep following")
    cancel = NextCall("job_cancel", dict(jid), "to stop it")
    stderr = NextCall("job_output", {**jid, "stream": "stderr"}, "shows why")
    wrote: tuple[NextCall, ...] = (NextCall("job_output", dict(jid), "shows what it wrote"),) if f.output_cut else ()
    inspect = tuple(NextCall("service_status", {"host": f.host, "unit": u}, "shows the unit and its journal")
                    for u in f.units[:2])
    cls = exit_class(f.exit_status)
    phrase = _state_phrase(f)
    summary = phrase if f.readiness == "none" else f"{phrase}, readiness {f.readiness}"
    state_why = f.detail or phrase
    ready_why = f.readiness_detail

    def both() -> str:
        return "; ".join(t for t in (state_why, ready_why) if t)

    failed = f.state in ("killed", "lost", "not_started") or (f.state == "exited" and cls != "zero")
    nexts: tuple[NextCall, ...]
    if f.state == "unconfirmed":
        settle = NextCall("job_status", {**jid, "wait_s": 15.0}, "settles it (running if the command arrives, "
                                                                 "not_started if not); do not run it again before")
        return Guidance(summary, state_why, (settle,), False)
    if f.readiness == "superseded":
        newer = f.superseded_by
        nexts = (NextCall("job_status", {"job_id": newer, "wait_s": follow_wait_s(f.deadline_s)},
                          "follows the newer restart"),) if newer else (NextCall(None, note="follow the newer "
                                                                                            "restart's job"),)
        return Guidance(summary, ready_why or "a newer restart of the same unit took over", nexts, True)
    if f.readiness in FINAL_READINESS:
        # "failed" also follows "ready" (the unit died later: see probes.readiness), so it is not "never ready"
        word = "readiness failed" if f.readiness == "failed" else "it was not ready by its deadline"
        if f.units and "\njournal:\n" in ready_why:
            # why holds the unit's journal already (service_status would show it again): what to fix, and the call
            # that tries again once it is fixed
            unit = f.units[0]
            nexts = (NextCall(None, note=f"{word}: why holds {unit}'s journal; fix the cause (run_command 'systemctl "
                                         f"cat {unit}' shows its unit file)"),
                     NextCall("restart_service", {"host": f.host, "unit": unit}, "once it is fixed"))
        else:
            nexts = (*inspect, *(() if inspect or not f.output_cut else (stderr,)),
                     NextCall(None, note=f"{word}: read the evidence (why, and each probe's evidence), fix the cause, "
                                         "then try again"))
        if f.state == "running":
            nexts += (cancel,)
        return Guidance(summary, ready_why or both(), nexts, True)
    if failed:
        if f.state == "lost":
            nexts = (NextCall(None, note="the job's outcome is unknown: check the host's state before acting (do "
                                         "not assume success)"), *wrote)
        elif f.state == "not_started":
            nexts = (NextCall(None, note="it never started (nothing ran): why says what stopped it; once that is "
                                         "fixed, run the command again if it is still wanted"),)
        elif f.state == "killed":
            nexts = (NextCall(None, note="it was killed; run it again only if that is still wanted"), *wrote)
        elif f.needs:
            nexts = (NextCall(None, note=f.needs),)
        elif f.exit_note:
            nexts = (NextCall(None, note=f.exit_note), *wrote)
        else:
            nexts = (*((stderr,) if f.output_cut else ()),
                     NextCall(None, note="it failed: fix the cause before running it again"))
        if f.readiness == "pending":
            ready_why = "readiness will not be reached: " + (ready_why or "the command did not succeed")
        elif f.readiness == "ready":
            ready_why = "it had been ready before it ended" + (f" ({ready_why})" if ready_why else "")
        return Guidance(summary, both(), (*nexts, *inspect), True)
    if f.readiness == "pending":
        note = ("to keep following: the command exited 0 but readiness is still pending (why says what the probes "
                "see)" if f.state == "exited" else "to keep following until readiness is ready, failed or "
                "deadline_exceeded")
        nexts = (NextCall(follow.tool, follow.args, note),)
        if f.state == "running":
            nexts += (cancel,)
        why = ready_why if f.state == "running" else both()
        return Guidance(summary, why or "waiting for readiness", nexts, False)
    if f.readiness == "ready":
        said = ("ready: go on with the task (only the unit's state was checked: it stayed up for its settle window; "
                "a unit that dies later shows in a later job_status, and an http, port or log probe checks its "
                "work)" if f.unit_only else "ready: go on with the task")
        nexts = (NextCall(None, note=said),)
        if f.state == "running":
            nexts += (cancel,)
        why = ready_why if f.state in ("running", "exited") else both()
        return Guidance(summary, why or "ready", nexts + inspect[:1], True)
    # no probes
    if f.state == "running":
        if f.endless:  # following it never ends: say what to run instead, and how to stop this one
            stop = NextCall("job_cancel", dict(jid), "stops this job")
            shows = NextCall(follow.tool, follow.args, "shows what it adds")
            return Guidance(summary, state_why, (NextCall(None, note=f.endless), stop,
                                                 *((shows,) if f.endless_follow else ())), False)
        # (not job_output: job_status brings the new output, and a shortened view says where job_output reads on)
        return Guidance(summary, state_why, (follow, cancel), False)
    pages = (NextCall("job_output", {**jid, "offset": 0}, "pages the full output"),) if f.output_cut else ()
    return Guidance(summary, state_why, (NextCall(None, note="done"), *pages), True)


def _arg(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value)


def _tool_call(call: NextCall) -> str:
    if call.tool is None:
        return call.note
    text = f"{call.tool}({', '.join(f'{k}={_arg(v)}' for k, v in call.args.items())})"
    return f"{text} {call.note}" if call.note else text


def cli_command(call: NextCall) -> str | None:
    """``call`` as an ``agent-tools`` command line (shell-quoted), or None when the CLI has no command for its
    tool: ``job_status`` → ``agent-tools status JOB [--wait S]``, ``job_output`` → ``agent-tools output JOB
    [--offset N] [--stream S]``, ``job_cancel`` → ``agent-tools cancel JOB``, ``list_jobs`` → ``agent-tools jobs
    [HOST]``, ``service_status`` → ``agent-tools run HOST -- systemctl status UNIT``."""
    a = call.args
    q = shlex.quote

    def opt(flag: str, key: str) -> str:
        if key not in a:
            return ""
        value = a[key]
        return f" {flag} {q(f'{value:g}' if isinstance(value, float) else str(value))}"

    if call.tool == "job_status":
        return f"agent-tools status {q(str(a.get('job_id', 'JOB_ID')))}" + opt("--wait", "wait_s")
    if call.tool == "job_output":
        return f"agent-tools output {q(str(a.get('job_id', 'JOB_ID')))}" + opt("--offset", "offset") + \
            opt("--stream", "stream")
    if call.tool == "job_cancel":
        return f"agent-tools cancel {q(str(a.get('job_id', 'JOB_ID')))}" + opt("--grace", "grace_s")
    if call.tool == "list_jobs":
        return "agent-tools jobs" + (f" {q(str(a['host']))}" if "host" in a else "")
    if call.tool == "service_status" and "host" in a and "unit" in a:
        return f"agent-tools run {q(str(a['host']))} -- systemctl status {q(str(a['unit']))}"
    return None


def _cli_call(call: NextCall) -> str:
    if call.tool is None:
        return call.note
    command = cli_command(call)
    if command is None:
        return _tool_call(call)  # a tool the CLI has no command for: its call, as an agent would make it
    return f"{command} {call.note}" if call.note else command


#: renderings of a :class:`NextCall` by style name: ``tool`` for agents, ``cli`` for people at the CLI
STYLES: dict[str, Callable[[NextCall], str]] = {"tool": _tool_call, "cli": _cli_call}


def render(calls: Sequence[NextCall], style: str = "tool") -> str:
    """The next calls as one line of text: ``job_status(job_id='j_…', wait_s=60) to keep following; ...``.

    :param style: ``tool`` (tool-call syntax, for agents), ``cli`` (``agent-tools`` command lines:
        :func:`cli_command`); the styles are registered in :data:`STYLES`.
    :raises ValueError: unknown style.
    """
    try:
        one = STYLES[style]
    except KeyError:
        raise ValueError(f"unknown rendering style {style!r}; known: {', '.join(STYLES)}") from None
    return "; ".join(one(c) for c in calls)
