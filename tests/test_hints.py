"""Issue 12: one source for what comes next. ``guide`` derives ``next``, ``why`` and the summary from state +
readiness + exit status; this table covers every combination (5 states x 5 readiness values x 3 exit status
classes), and the rendering is checked once for the tool-call style."""

from __future__ import annotations

import itertools

import pytest

from agent_tools.jobs.hints import JobFacts, NextCall, exit_class, guide, render

STATES = ("running", "exited", "killed", "lost", "not_started")
READINESS = ("none", "pending", "ready", "failed", "deadline_exceeded")
EXITS = {"none": None, "zero": 0, "nonzero": 3}

# (state, readiness, exit class) -> (first next tool or None, final, a phrase the rendered next must contain,
# a phrase it must not contain); "*" matches anything. The most specific row wins; every combination must be
# matched by exactly one most specific row.
TABLE: dict[tuple[str, str, str], tuple[str | None, bool, str, str]] = {
    ("*", "failed", "*"): ("service_status", True, "readiness failed: read", "done"),
    ("*", "deadline_exceeded", "*"): ("service_status", True, "was not ready by its deadline", "done"),
    ("running", "none", "*"): ("job_status", False, "to keep following", "done"),
    ("running", "pending", "*"): ("job_status", False, "until readiness is ready", "done"),
    ("running", "ready", "*"): (None, True, "ready: go on", "done"),
    ("exited", "none", "zero"): (None, True, "done", "failed"),
    ("exited", "pending", "zero"): ("job_status", False, "readiness is still pending", "done"),
    ("exited", "ready", "zero"): (None, True, "ready: go on", "failed"),
    ("exited", "none", "nonzero"): ("job_output", True, "it failed", "done"),
    ("exited", "pending", "nonzero"): ("job_output", True, "it failed", "done"),
    ("exited", "ready", "nonzero"): ("job_output", True, "it failed", "go on"),
    ("exited", "none", "none"): ("job_output", True, "it failed", "done"),
    ("exited", "pending", "none"): ("job_output", True, "it failed", "done"),
    ("exited", "ready", "none"): ("job_output", True, "it failed", "go on"),
    ("killed", "none", "*"): (None, True, "it was killed", "done"),
    ("killed", "pending", "*"): (None, True, "it was killed", "done"),
    ("killed", "ready", "*"): (None, True, "it was killed", "go on"),
    ("lost", "none", "*"): (None, True, "outcome is unknown", "done"),
    ("lost", "pending", "*"): (None, True, "outcome is unknown", "done"),
    ("lost", "ready", "*"): (None, True, "outcome is unknown", "go on"),
    ("not_started", "none", "*"): (None, True, "never started", "done"),
    ("not_started", "pending", "*"): (None, True, "never started", "done"),
    ("not_started", "ready", "*"): (None, True, "never started", "go on"),
}


def _row(state: str, readiness: str, cls: str) -> tuple[str | None, bool, str, str]:
    keys = [k for k in TABLE if all(want in ("*", got) for want, got in zip(k, (state, readiness, cls), strict=True))]
    assert keys, f"no row for {(state, readiness, cls)}"
    best = max(sum(w != "*" for w in k) for k in keys)
    top = [k for k in keys if sum(w != "*" for w in k) == best]
    assert len(top) == 1, f"ambiguous rows for {(state, readiness, cls)}: {top}"
    return TABLE[top[0]]


@pytest.mark.parametrize(("state", "readiness", "cls"), list(itertools.product(STATES, READINESS, EXITS)))
def test_every_combination_has_one_consistent_answer(state: str, readiness: str, cls: str) -> None:
    code = EXITS[cls]
    facts = JobFacts(job_id="j_abcdefgh12345678", host="gpu-1", state=state, readiness=readiness, exit_status=code,
                     detail=f"host says {state}", readiness_detail="probe evidence" if readiness != "none" else "",
                     units=("svc.service",), deadline_s=930.0)
    g = guide(facts)
    tool, final, phrase, absent = _row(state, readiness, cls)
    text = g.next_text()
    assert g.next and g.next[0].tool == tool, (g.next, tool)
    assert g.final is final
    assert phrase in text, text
    assert absent not in text, text
    # the summary leads with the state, names the exit status and readiness when there are any
    assert g.summary.startswith(state), g.summary
    if state == "exited" and code is not None:
        assert g.summary.startswith(f"exited {code}"), g.summary
    assert (f"readiness {readiness}" in g.summary) is (readiness != "none"), g.summary
    # why carries the evidence: the probes' when there are probes, else the host's
    assert ("probe evidence" if readiness != "none" else "host says") in g.why, g.why
    # a job still worth following is followed with a long poll scaled to its deadline
    if not final:
        assert "job_status(job_id='j_abcdefgh12345678', wait_s=60)" in text, text
    # every suggested call names this job or its host
    for call in g.next:
        if call.tool is not None:
            assert call.args.get("job_id") == facts.job_id or call.args.get("host") == "gpu-1", call


def test_guide_is_pure_and_exit_classes() -> None:
    facts = JobFacts(job_id="j_abcdefgh12345678", host="h", state="exited", readiness="pending", exit_status=0)
    assert guide(facts) == guide(facts)
    assert [exit_class(c) for c in (None, 0, 1, 143)] == ["none", "zero", "nonzero", "nonzero"]
    short = JobFacts(job_id="j_abcdefgh12345678", host="h", state="running", deadline_s=35.0)
    assert "wait_s=15)" in guide(short).next_text()


def test_render_tool_style() -> None:
    calls = [NextCall("job_status", {"job_id": "j_x", "wait_s": 60.0}, "to keep following"),
             NextCall(None, note="done"), NextCall("job_output", {"job_id": "j_x", "stream": "stderr"})]
    assert render(calls) == ("job_status(job_id='j_x', wait_s=60) to keep following; done; "
                             "job_output(job_id='j_x', stream='stderr')")
    with pytest.raises(ValueError, match="unknown rendering style"):
        render(calls, "yaml")


def test_render_cli_style() -> None:
    """Issue 14: the same next calls as ``agent-tools`` command lines, for the CLI (a tool it has no command for
    keeps its call)."""
    calls = [NextCall("job_status", {"job_id": "j_x", "wait_s": 60.0}, "to keep following"),
             NextCall("job_output", {"job_id": "j_x", "offset": 1536, "stream": "stderr"}, "reads on"),
             NextCall("job_cancel", {"job_id": "j_x"}), NextCall("list_jobs", {"host": "gpu 1"}),
             NextCall("service_status", {"host": "gpu-1", "unit": "sglang.service"}, "shows the unit"),
             NextCall("restart_service", {"host": "gpu-1", "unit": "sglang.service"}), NextCall(None, note="done")]
    assert render(calls, "cli") == (
        "agent-tools status j_x --wait 60 to keep following; agent-tools output j_x --offset 1536 --stream stderr "
        "reads on; agent-tools cancel j_x; agent-tools jobs 'gpu 1'; agent-tools run gpu-1 -- systemctl status "
        "sglang.service shows the unit; restart_service(host='gpu-1', unit='sglang.service'); done")


def test_a_running_job_without_probes_is_followed_or_stopped() -> None:
    """Issue 14 (item 8): no job_output hint next to job_status, which brings the new output itself."""
    g = guide(JobFacts(job_id="j_x", host="h", state="running"))
    assert [c.tool for c in g.next] == ["job_status", "job_cancel"], g.next
