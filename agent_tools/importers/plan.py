"""A transcript's shell calls as a plan of agent_tools tool calls, and running it (live, synthesised, replayed).

A plan is a list of JSON-ready steps, in transcript order, each at its original time offset:

* ``{"tool": "run_command", "call": N, "at_s": S, "arguments": {...}, "probes"?: [...], "deadline_s"?: D}`` —
  transcript call N through ``run_command`` (default 15 s budget; ``cwd`` in the arguments when the transcript
  says where it ran). ``probes``, when inferred, judge the job's readiness (as ``restart_service`` does); an
  ``output_cut`` says what of the call's output the transcript does not hold (the replay shows only the rest).
* ``{"tool": "job_status", "follow": N, "at_s"?: S, "wait_s": W, "until_s": U}`` — (from offset S, when given:
  a follow-up the transcript shows after other calls) follow call N's job with
  ``job_status(wait_s=W)`` (each wait cut to what is left before ``U``) until it settles (readiness
  ``ready``/``failed``/``deadline_exceeded``, or a final state without probes) or the loop clock passes ``U``
  seconds from the start (an import sets ``U`` no later than the next call's time, so every later call keeps
  the time offset it had in the transcript, unless it was made while the call before it still ran: steps run
  one after another, so such a call runs when that call's ``run_command`` returns, and its step's ``note``
  says when).
* ``{"tool": "job_cancel", "cancel": N, "at_s": S}`` — cancel call N's job at offset S (the user, or the
  agent's ``KillShell``, stopped the call then, per the transcript).

Each step's result is summarised as ``{"call", "tool", "outcome", "state", "readiness", "exit_status",
"polls"}`` (absent fields None), which generated tests assert on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio

from ..recording.session import CassetteSession
from ..tools.toolkit import Toolkit

__all__ = ["replay_plan", "run_plan"]

_SETTLED = ("ready", "failed", "deadline_exceeded", "superseded")


def _summary(step: dict[str, Any], result: dict[str, Any], polls: int | None = None) -> dict[str, Any]:
    return {"call": step.get("call", step.get("follow", step.get("cancel"))), "tool": step["tool"],
            "outcome": result.get("outcome"),
            "state": result.get("state"), "readiness": result.get("readiness"),
            "exit_status": result.get("exit_status"), "job_id": result.get("job_id"), "polls": polls,
            "result": result}


async def run_plan(tk: Toolkit, plan: list[dict[str, Any]], *, origin: float | None = None) -> list[dict[str, Any]]:
    """Run ``plan`` through ``tk``, each step at its ``at_s`` offset (loop time) from ``origin`` (default now).

    :returns: one summary per step (see the module docstring).
    """
    t0 = anyio.current_time() if origin is None else origin
    jobs: dict[int, str] = {}
    out: list[dict[str, Any]] = []
    for step in plan:
        delay = t0 + float(step.get("at_s", 0.0)) - anyio.current_time()
        if delay > 0:
            await anyio.sleep(delay)
        if step["tool"] == "run_command":
            args = dict(step["arguments"])
            if step.get("probes"):
                model = await tk.run_command(**args, _probes=list(step["probes"]), _deadline_s=step.get("deadline_s"))
                result = model.model_dump(mode="json")
            else:
                result = await tk.dispatch("run_command", args)
            if result.get("job_id"):
                jobs[int(step["call"])] = str(result["job_id"])
            out.append(_summary(step, result))
        elif step["tool"] == "job_status":
            job_id = jobs.get(int(step["follow"]))
            if job_id is None:
                out.append(_summary(step, {"outcome": "error", "message": "no job to follow"}, 0))
                continue
            until = t0 + float(step.get("until_s", 3600.0))
            polls = 0
            while True:
                wait_s = max(0.0, min(float(step.get("wait_s", 60.0)), until - anyio.current_time()))
                result = await tk.dispatch("job_status", {"job_id": job_id, "wait_s": round(wait_s, 3)})
                polls += 1
                readiness = result.get("readiness")
                settled = readiness in _SETTLED or (readiness in (None, "none") and result.get("state") != "running")
                if settled or result.get("outcome") == "error" or anyio.current_time() >= until:
                    break
            out.append(_summary(step, result, polls))
        elif step["tool"] == "job_cancel":
            job_id = jobs.get(int(step["cancel"]))
            if job_id is None:
                out.append(_summary(step, {"outcome": "error", "message": "no job to cancel"}))
                continue
            out.append(_summary(step, await tk.dispatch("job_cancel", {"job_id": job_id})))
        else:
            raise ValueError(f"unknown plan step tool {step['tool']!r}")
    return out


def replay_plan(cassette: str | os.PathLike[str], plan: list[dict[str, Any]],
                state_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Replay ``plan`` against ``cassette`` on a virtual clock (from a synchronous caller, e.g. a test).

    :raises ReplayError: the plan's requests do not match the cassette.
    """
    session = CassetteSession(Path(cassette), "none", state_dir=state_dir)
    return session.run(lambda: run_plan(session.toolkit, plan))
