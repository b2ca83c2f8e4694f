"""The readiness verdict of a job: its probes and its command's state, judged together, again on every look.

Readiness moves ``pending`` → ``ready`` | ``failed`` | ``deadline_exceeded``, and ``ready`` → ``failed``:

* **pending**: every probe is checked (:func:`~agent_tools.probes.checks.check_probes`: the other probes count
  only against the units' new processes). ``failed`` when a probe failed terminally (with the unit's journal
  lines, systemd's own included) or the command failed, was killed or lost; ``failed`` too when a unit the
  job follows was restarted or stopped by someone else before the job was ready; ``ready`` when every probe
  passed; ``deadline_exceeded`` past the deadline; else still ``pending``.
* **ready** is kept honest: each look checks the job's ``systemd_unit`` probes again (one round trip each).
  When the invocation that was ready failed, exited or was restarted by systemd after a crash, readiness
  turns ``failed`` with the journal lines. A later explicit restart or a stop on request ends the following
  (the probe is marked final) and readiness stays ``ready``: it was true.
* ``failed`` and ``deadline_exceeded`` are final. A probe that had not passed when readiness was decided is
  reported ``not_passed`` (no longer checked), not ``not_yet``: it will not pass for this job. When the verdict
  is the command's failure, the verdict belongs to the command's end (:attr:`Verdict.at_end`), and a unit still
  in the invocation from before the restart reads "no restart began", not "not begun yet".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..hosts.base import Host
from ..outcomes import ProbeReport
from .checks import advance, check_probes
from .result import ProbeResult
from .systemd import NOT_BEGUN, unit_journal

__all__ = ["Verdict", "judge"]


@dataclass
class Verdict:
    """One look at a job's readiness.

    :param readiness: ``pending`` | ``ready`` | ``failed`` | ``deadline_exceeded``.
    :param detail: the evidence, for the job's ``why`` (probe evidence; journal lines after a failure).
    :param reports: one report per probe (the latest result of each).
    :param specs: the probe specs to keep for the next look (cursors, the invocation that passed).
    :param journal: the failed units' journal lines ("" when none).
    :param results: this look's probe results (empty when nothing was checked).
    :param at_end: the verdict follows from the command's end (it failed, was killed or lost): it holds since
        then, not since this look.
    :param at_deadline: the verdict is ``deadline_exceeded``: it holds since the deadline, not since this look
        (which may come much later).
    """

    readiness: str
    detail: str
    reports: list[ProbeReport]
    specs: list[dict[str, Any]]
    journal: str = ""
    results: list[ProbeResult] = field(default_factory=list)
    at_end: bool = False
    at_deadline: bool = False


def _decided(reports: list[ProbeReport], *, command_failed: bool = False) -> list[ProbeReport]:
    """The reports of a final verdict: a probe that had not passed is ``not_passed`` (it is no longer checked);
    after the command failed, a unit still in its old invocation never began a restart."""
    out = []
    for r in reports:
        if r.state == "not_yet":
            ev = r.evidence
            if command_failed and ev.endswith(NOT_BEGUN):
                ev = ev.removesuffix(NOT_BEGUN) + " (no restart began: the command failed)"
            r = r.model_copy(update={"state": "not_passed", "evidence": ev})
        out.append(r)
    return out


#: the detail of a ready verdict (each probe's evidence is in its report, not said again)
_ALL_PASSED = "all probes passed (see probes)"


async def _with_journal(host: Host, specs: list[dict[str, Any]], failed: list[ProbeResult]) -> str:
    """The journal lines of the failed unit probes (best effort, "" when none could be read)."""
    parts = []
    for r in failed:
        if r.kind != "systemd_unit":
            continue
        spec = next((s for s in specs if s.get("kind") == "systemd_unit" and s.get("unit") == r.target), {})
        lines = await unit_journal(host, r.target, cursor=spec.get("journal_cursor"),
                                   invocation=str(r.details.get("InvocationID") or "") or None)
        if lines:
            parts.append(lines)
    return "\n".join(parts)


async def judge(host: Host, specs: list[dict[str, Any]], *, readiness: str, state: str, exit_status: int | None,
                state_detail: str, elapsed_s: float, deadline_s: float | None,
                last: list[ProbeReport] | None = None) -> Verdict:
    """Look at a job's readiness once (see the module docstring for the rules).

    :param specs: the job's probe specs as kept from the previous look.
    :param readiness: its readiness so far; ``failed``/``deadline_exceeded`` are returned as they are.
    :param state: the job's state now (``running`` | ``exited`` | ``killed`` | ``lost``).
    :param exit_status: its exit status (None while running).
    :param state_detail: what the host says about the state (for the evidence when the command failed).
    :param elapsed_s: seconds since the job started; :param deadline_s: its deadline (None: none).
    :param last: the reports of the previous look (kept for the probes a ``ready`` look does not check again).
    """
    last = list(last or [])
    if readiness not in ("pending", "ready"):
        return Verdict(readiness, "", last, specs)
    if readiness == "ready":
        idx = [i for i, s in enumerate(specs) if s.get("kind") == "systemd_unit" and not s.get("final")]
        if not idx:
            return Verdict("ready", _ALL_PASSED, last, specs)
        fresh = await check_probes(host, [specs[i] for i in idx])
        new_specs = list(specs)
        for i, spec in zip(idx, advance([specs[i] for i in idx], fresh), strict=True):
            new_specs[i] = spec
        reports = list(last) if len(last) == len(specs) else [ProbeReport(kind=str(s.get("kind")), state="passed")
                                                             for s in specs]
        for i, r in zip(idx, fresh, strict=True):
            reports[i] = r.report()
        dead = [r for r in fresh if r.state == "failed"]
        if dead:
            journal = await _with_journal(host, specs, dead)
            detail = "it was ready, then: " + "; ".join(f"{r.kind} {r.target}: {r.evidence}" for r in dead)
            return Verdict("failed", detail + (f"\njournal:\n{journal}" if journal else ""), reports, new_specs,
                           journal, fresh)
        return Verdict("ready", _ALL_PASSED, reports, new_specs, "", fresh)

    results = await check_probes(host, specs)
    new_specs = advance(specs, results)
    reports = [r.report() for r in results]
    failed = [r for r in results if r.state == "failed"]
    ended = [r for r in results if r.kind == "systemd_unit" and r.details.get("ended") in ("stopped", "superseded")]
    if failed:
        journal = await _with_journal(host, specs, failed)
        detail = "; ".join(f"{r.kind} {r.target}: {r.evidence}" for r in failed)
        return Verdict("failed", detail + (f"\njournal:\n{journal}" if journal else ""), _decided(reports), new_specs,
                       journal, results)
    if ended:
        return Verdict("failed", "; ".join(f"{r.kind} {r.target}: {r.evidence}" for r in ended)
                       + " (before the job was ready)", _decided(reports), new_specs, "", results)
    if state in ("killed", "lost") or (state == "exited" and exit_status != 0):
        return Verdict("failed", f"the command did not succeed ({state_detail})",
                       _decided(reports, command_failed=True), new_specs, "", results, at_end=True)
    if all(r.state == "passed" for r in results):
        return Verdict("ready", _ALL_PASSED, reports, new_specs, "", results)
    if deadline_s is not None and elapsed_s > deadline_s:
        # due at the deadline; this look may be later, and its evidence is what it saw then
        return Verdict("deadline_exceeded",
                       f"not ready by its {deadline_s:g} s deadline (as seen {elapsed_s:.0f} s after start): "
                       + "; ".join(f"{r.kind} {r.target}: {r.evidence}" for r in results if r.state != "passed"),
                       _decided(reports), new_specs, "", results, at_deadline=True)
    # (each probe's evidence is in its report: the verdict names the probes it waits for, not their evidence again)
    waiting = ", ".join(f"{r.kind} {r.target}".strip() for r in results if r.state != "passed")
    return Verdict("pending", f"waiting for readiness: not passed yet: {waiting} (see probes)", reports, new_specs,
                   "", results)
