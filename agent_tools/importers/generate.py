"""Import a transcript: shell calls → plan → synthesised cassette + a generated pytest file that replays it.

See :mod:`agent_tools.importers.synth` for what is inferred and how, and ``docs/cassettes.md``.
"""

from __future__ import annotations

import dataclasses
import os
import pprint
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ..hosts.registry import HostRegistry
from ..jobs.journal import Journal
from ..recording.cassette import Cassette
from ..recording.record import Recorder, RecordingHost, RecordingToolkit
from ..recording.vclock import run_virtual
from ..redact import redact
from ..tools.toolkit import DEFAULT_BUDGET_S
from .model import ShellCall, ShellCalls
from .plan import run_plan
from .synth import Timeline, TranscriptHost, infer_timeline

__all__ = ["ImportFailed", "ImportResult", "import_calls", "make_plan"]

HOST = "local"


def make_plan(timeline: Timeline, *, budget_s: float = DEFAULT_BUDGET_S, host: str = HOST) -> list[dict[str, Any]]:
    """The plan of tool calls for ``timeline`` (see :mod:`agent_tools.importers.plan`).

    Every call that ran gets a ``run_command`` step at its time offset. Then: a call that finished but ran
    longer than ``budget_s`` (agent_tools detaches it) is followed with ``job_status`` to its end, so its exit
    status is checked; a call the user (or the agent's ``KillShell``) stopped is followed until then and
    cancelled with ``job_cancel`` at the time the transcript shows it stopped; a call the old tool left running
    (timeout, background) is followed until it settles or the agent's next call is due, and, when the transcript
    shows its end only after other calls, followed again at that time (``at_s``), so its end is checked too. The
    checks :meth:`Timeline.replaced` names get no step. A call made before the ``run_command`` of the one
    before it returns (parallel calls; an old timeout under the budget) gets a ``note`` saying when it runs.
    """
    replaced = timeline.replaced()
    kept = [c for c in timeline.calls if c.index not in replaced]
    plan: list[dict[str, Any]] = []
    later: list[dict[str, Any]] = []  # follow-ups due after other calls (see _merge_later)
    busy: tuple[int, float] | None = None  # (call, when its run_command returns): a call before then waits for it
    for k, c in enumerate(kept):
        start = timeline.start_s[c.index]
        arguments: dict[str, Any] = {"host": host, "command": c.command, "budget_s": budget_s}
        if c.cwd:  # where it ran (a re-recording on a real host runs it there too)
            arguments["cwd"] = c.cwd
        step: dict[str, Any] = {"tool": "run_command", "call": c.index, "at_s": round(start, 3),
                                "arguments": arguments}
        if c.output_cut:
            step["output_cut"] = c.output_cut
        if busy is not None and start < busy[1] - 1.0:  # parallel calls, or an old timeout below the budget
            step["note"] = (f"made at {start:.0f} s, while the replay's run_command of call {busy[0]} still waits "
                            f"(its {budget_s:g} s budget): runs once that returns, at about {busy[1]:.0f} s")
        nxt = timeline.start_s[kept[k + 1].index] if k + 1 < len(kept) else None
        info = timeline.timed_out.get(c.index)
        ran_for = timeline.duration_s[c.index] if info is None else budget_s
        busy = (c.index, max(busy[1] if busy else 0.0, start) + min(ran_for, budget_s))
        if info is None:
            duration = timeline.duration_s[c.index]
            step["was"] = c.exit_text() + c.after()
            plan.append(step)
            if duration > budget_s:  # detached by agent_tools: follow it to its end, where its exit status shows
                end = start + duration
                was = f"it ran {duration:.0f} s, longer than the {budget_s:g} s budget: followed to its {c.exit_text()}"
                until = end + 120.0 if nxt is None else min(end + 120.0, nxt)
                plan.append({"tool": "job_status", "follow": c.index, "wait_s": 60.0, "until_s": round(until, 3),
                             "was": was if until >= end else f"followed until the next call; {was} later"})
                if until < end:  # it ends after the next call began: follow it again then (its exit status)
                    later.append({"tool": "job_status", "follow": c.index, "at_s": round(end, 3), "wait_s": 60.0,
                                  "until_s": round(end + 120.0, 3), "was": was})
            continue
        step["was"] = c.how_it_ended()
        plan.append(step)
        if info.cancel_at_s is not None:  # stopped by the user or on request: cancel the job then
            stop = info.cancel_at_s
            cut = nxt is not None and nxt < stop  # other calls came first: the cancel comes at its own time
            if stop > start + budget_s:
                plan.append({"tool": "job_status", "follow": c.index, "wait_s": 60.0,
                             "until_s": round(min(stop, nxt) if cut and nxt is not None else stop, 3),
                             "was": "followed until the next call" if cut else "followed until it was stopped"})
            (later if cut else plan).append({"tool": "job_cancel", "cancel": c.index, "at_s": round(stop, 3),
                                              "was": info.evidence})
            continue
        until = (info.end_s if info.end_s is not None else timeline.end_s) + 120.0
        if info.url:
            step["probes"] = [{"kind": "http", "url": info.url}]
            step["deadline_s"] = max(900.0, round(until, 0))
        if nxt is not None:  # follow it only until the agent's next call, which keeps its own time
            until = min(until, nxt)
        gone = [i for i, n in replaced.items() if n == c.index]
        plan.append({"tool": "job_status", "follow": c.index, "wait_s": 60.0, "until_s": round(until, 3),
                     "was": (f"replaces call(s) {', '.join(map(str, sorted(gone)))} (its checks): {info.evidence}"
                             if gone else info.evidence)})
        if info.end_s is not None and until < info.end_s:
            # its end shows only after other calls: follow it again then, so that end (state, exit status) is
            # checked too, not only that it was still running when the next call came
            later.append({"tool": "job_status", "follow": c.index, "at_s": round(info.end_s, 3), "wait_s": 60.0,
                          "until_s": round(info.end_s + 120.0, 3), "was": info.evidence})
    return _merge_later(plan, later, timeline)


def _merge_later(plan: list[dict[str, Any]], later: list[dict[str, Any]], timeline: Timeline) -> list[dict[str, Any]]:
    """``plan`` with each of the ``later`` follow-ups placed before the first call that starts after it (its
    ``until_s`` cut to that call's time, so every call keeps its own time offset)."""
    for step in sorted(later, key=lambda s: float(s["at_s"])):
        at = float(step["at_s"])
        pos = next((i for i, p in enumerate(plan) if p["tool"] == "run_command" and float(p["at_s"]) > at), None)
        if pos is None:
            plan.append(step)
            continue
        if "until_s" in step:
            step["until_s"] = round(min(float(step["until_s"]), float(plan[pos]["at_s"])), 3)
        plan.insert(pos, step)
    return plan


@dataclass
class ImportResult:
    """What an import wrote and found.

    :attr replaced: transcript calls the replay does not run, each with the call whose job ``job_status``
        follows instead (a check of the same thing, up to the end it showed: :meth:`Timeline.replaced`).
    """

    cassette_path: Path
    test_path: Path
    plan: list[dict[str, Any]]
    results: list[dict[str, Any]]
    replaced: dict[int, int] = dataclasses.field(default_factory=dict)


class ImportFailed(ValueError):
    """The import cannot be written: no call can be imported, or a step of the synthesised replay answered an
    error (the generated test would assert it as the expected outcome)."""


#: what NAME may be: it names files and the generated test function (a Python identifier's characters)
NAME_RE = re.compile(r"[A-Za-z0-9_]+")


def _name(source: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", source.stem).strip("_").lower() or "transcript"


def _short(text: str, n: int = 70) -> str:
    """``text`` on one line, at most ``n`` characters, fit for a ``#`` comment of the generated Python file: a
    character that is not printable (NUL, ESC, a lone surrogate from bytes that were not UTF-8) is written as its
    escape (``\\x00``), as Python source may not hold NUL and a terminal should not run ESC sequences from it."""
    text = " ".join(text.split())
    text = text if len(text) <= n else text[: n - 1] + "…"
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _docstring_text(text: str) -> str:
    """``text`` (a file name) as it may stand inside the generated module's docstring: backslashes and quotes
    escaped, so ``\"\"\"`` or ``\\N`` in a name cannot end the docstring or make a bad escape."""
    return _short(text, 200).replace("\\", "\\\\").replace('"', '\\"')


def import_calls(calls: list[ShellCall], *, runtime: str, source: str | os.PathLike[str],
                 out_dir: str | os.PathLike[str], name: str | None = None) -> ImportResult:
    """Synthesise a cassette for ``calls`` and write it with a pytest file replaying it.

    Writes ``OUT_DIR/cassettes/NAME.jsonl`` and ``OUT_DIR/test_transcript_NAME.py``. Secrets in the calls'
    commands, outputs and skip reasons (which quote the runtime's text) are redacted first
    (:func:`agent_tools.redact.redact`): neither file holds them.

    :param runtime: ``claude-code``, ``opencode`` or ``codex`` (recorded in the cassette header).
    :param source: the transcript file (its name becomes NAME unless ``name`` is given).
    :param name: NAME: letters, digits and ``_`` only (it names both files and the test function).
    :raises ValueError: ``name`` is not such a name (nothing is written).
    :raises ImportFailed: no shell call in the transcript can be imported (the message says why for each), or
        a step of the replay answered an error (named with its message); nothing is written.
    """
    src = Path(source)
    if name is not None and not NAME_RE.fullmatch(name):
        raise ValueError(f"--name {name!r}: use letters, digits and _ only (it names the files "
                         "test_transcript_NAME.py and cassettes/NAME.jsonl, and the test function)")
    name = name or _name(src)
    seen = calls if isinstance(calls, ShellCalls) else None
    # a command holding text that is not valid Unicode (a transcript's lone surrogate, from bytes that were not
    # UTF-8) is refused by every tool as bad_arguments: it cannot be replayed, so it is not imported (the caller's
    # call is marked, with the reason, as the readers mark what they skip)
    for c in calls:
        if c.ran and not _valid_unicode(c.command):
            c.skip("its command holds text that is not valid UTF-8 (a lone surrogate such as \\udcff, from bytes "
                   "that were not UTF-8): agent-tools refuses such a command as bad_arguments")
    # the one seam for transcripts: their commands and outputs are redacted before anything is inferred, run,
    # recorded or written (cassette, generated test, the plan in it); an output's lone surrogate (a JavaScript
    # string cut inside an emoji's surrogate pair, written by JSON.stringify as "\ud83d") becomes U+FFFD, as
    # bytes that are not UTF-8 do on a host: it is what the command printed, and an output is never refused
    calls = [dataclasses.replace(c, command=redact(c.command), output=redact(well_formed(c.output)),
                                 cwd=None if c.cwd is None else redact(well_formed(c.cwd)),
                                 output_cut=None if c.output_cut is None else redact(well_formed(c.output_cut)),
                                 final_output=None if c.final_output is None else redact(well_formed(c.final_output)),
                                 skip_reason=None if c.skip_reason is None else redact(well_formed(c.skip_reason)))
             for c in calls]
    timeline = infer_timeline(calls)
    if not timeline.calls:
        raise ImportFailed(f"{src}: no shell call that can be imported ({_nothing_to_import(calls, seen)})")
    plan = make_plan(timeline)
    host = TranscriptHost(timeline, HOST)
    skipped = [{"call": c.index, "command": c.command, "why": c.skip_reason} for c in calls if not c.ran]
    cut = [{"call": c.index, "what": c.output_cut} for c in calls if c.ran and c.output_cut]
    recorder = Recorder(name, header={"synthesised": True,
                                      "source": {"runtime": runtime, "file": src.name, "calls": len(calls),
                                                 "skipped": skipped,
                                                 **({"output_cut": cut} if cut else {})},
                                      "inferred": host.describe()})
    with tempfile.TemporaryDirectory(prefix="agent-tools-import-") as tmp:
        journal = Journal(Path(tmp) / "journal.sqlite3")
        tk = RecordingToolkit(HostRegistry({HOST: RecordingHost(host, recorder)}), recorder=recorder, journal=journal)

        async def main() -> list[dict[str, Any]]:
            recorder.start()
            host.origin = anyio.current_time()
            return await run_plan(tk, plan, origin=host.origin)

        try:
            results = run_virtual(main, wall_start=timeline.start_wall)
        finally:
            journal.close()
    errors = [r for r in results if r.get("outcome") == "error"]
    if errors:  # a generated test would assert the error as what agent_tools does: nothing is written
        raise ImportFailed(f"{src}: the replay of the transcript's calls answered an error, so no test is written: "
                           + "; ".join(f"call {r['call']}: {r['tool']} -> error"
                                       f"{' (' + str(r['result'].get('kind')) + ')' if r['result'].get('kind') else ''}"
                                       f": {r['result'].get('message')}" for r in errors[:5]))
    cassette: Cassette = recorder.cassette()
    out = Path(out_dir)
    cassette_path = out / "cassettes" / f"{name}.jsonl"
    cassette.save(cassette_path)
    test_path = out / f"test_transcript_{name}.py"
    replaced = timeline.replaced()
    test_path.write_text(_test_source(name, runtime, src.name, plan, results, calls, replaced), encoding="utf-8")
    return ImportResult(cassette_path, test_path, plan, results, replaced)


def well_formed(text: str) -> str:
    """``text`` with each lone UTF-16 surrogate (``\\ud83d`` from a JSON escape, ``\\udcff`` from
    ``surrogateescape``) replaced by U+FFFD; a pair written as two escapes becomes the character it encodes."""
    if _valid_unicode(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _nothing_to_import(calls: list[ShellCall], seen: ShellCalls | None) -> str:
    """Why nothing can be imported, from what the importer read and saw (never a bare "no shell calls")."""
    why = "; ".join(f"call {c.index}: {c.skip_reason}" for c in calls[:10] if c.skip_reason)
    if len(calls) > 10:
        why += f"; ... and {len(calls) - 10} more"
    saw = seen.describe() if seen is not None else ""
    if why:
        return why + (f"; also seen: {saw}" if saw else "")
    if saw:
        return f"no shell call could be read: the transcript holds {saw}"
    lines = f" among its {seen.lines} {seen.unit}" if seen is not None else ""
    return f"no shell tool call of a known shape{lines}"


def _test_source(name: str, runtime: str, source: str, plan: list[dict[str, Any]], results: list[dict[str, Any]],
                 calls: list[ShellCall], replaced: dict[int, int]) -> str:
    by_index = {c.index: c for c in calls}
    checks: list[str] = []
    for i, (step, res) in enumerate(zip(plan, results, strict=True)):
        if step["tool"] == "run_command":
            call = by_index[int(step["call"])]
            checks.append(f"    # call {call.index}: `{_short(call.command, 60)}` — before: {_short(step['was'], 40)}")
            if call.output_cut:
                checks.append(f"    #   its output is cut: {_short(call.output_cut, 100)}")
            if res["outcome"] == "finished" and call.nonzero and call.exit_status is None:
                checks.append(f"    assert steps[{i}][\"outcome\"] == \"finished\" and steps[{i}][\"exit_status\"] != 0"
                              "  # the transcript says only non-zero")
            elif res["outcome"] == "finished":
                checks.append(f"    assert steps[{i}][\"outcome\"] == \"finished\" and steps[{i}][\"exit_status\"] == "
                              f"{res['exit_status']!r}")
            else:
                checks.append(f"    assert steps[{i}][\"outcome\"] == {res['outcome']!r}")
        elif step["tool"] == "job_cancel":
            checks.append(f"    # then cancel call {step['cancel']}'s job — {_short(step['was'], 70)}")
            checks.append(f"    assert steps[{i}][\"state\"] == {res['state']!r}")
        else:
            checks.append(f"    # then follow call {step['follow']}'s job with job_status — {_short(step['was'], 60)}")
            checks.append(f"    assert steps[{i}][\"state\"] == {res['state']!r} and steps[{i}][\"readiness\"] == "
                          f"{res['readiness']!r}")
            if res.get("exit_status") is not None:
                checks.append(f"    assert steps[{i}][\"exit_status\"] == {res['exit_status']!r}")
    plan_text = pprint.pformat(plan, width=110, sort_dicts=False)
    skipped = "".join(f"\n#   call {c.index} `{_short(c.command, 50)}`: {_short(c.skip_reason or '', 120)}"
                      for c in calls if not c.ran)
    if skipped:
        skipped = "\n\n# Not imported (nothing of them to replay):" + skipped
    if replaced:
        skipped += "\n\n# Replaced (not run: the job of the call they checked is followed with job_status instead):" + \
            "".join(f"\n#   call {i} `{_short(by_index[i].command, 50)}`: checks call {n}"
                    for i, n in sorted(replaced.items()))
    return f'''"""Replays the shell calls of a {runtime} session through agent_tools.

Generated by `agent-tools import {runtime}` from:
    {_docstring_text(source)}
The cassette (cassettes/{name}.jsonl) was *synthesised* from the transcript, not recorded on a host:
agent_tools ran the calls below against a synthetic host built from the transcript (outputs, exit statuses
and timings as recorded there; a call the old tool killed at its timeout, or left running, keeps running until
the transcript shows it end); see docs/cassettes.md. The replay runs on a virtual clock: minutes of
transcript take well under a second.
"""

from __future__ import annotations

from pathlib import Path

from agent_tools.importers.plan import replay_plan

CASSETTE = Path(__file__).parent / "cassettes" / {f"{name}.jsonl"!r}

PLAN = {plan_text}{skipped}


def test_{name}_replays_through_agent_tools(tmp_path: Path) -> None:
    steps = replay_plan(CASSETTE, PLAN, tmp_path)
{chr(10).join(checks)}
'''
