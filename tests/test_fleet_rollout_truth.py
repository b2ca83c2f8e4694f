"""Issue 18, what a fleet rollout says and does when it is cancelled, denied, asked, or cannot put a host back
(the qa18 report): against the real Temporal dev server and embedded simulated GPU nodes, with the fleet suites'
fixtures and helpers (tests/fleet_harness.py).

* a cancel is observed after every step and reaches a running one (findings 1, 7);
* a cancel while a host awaits approval ends the rollout without a needless restart (2);
* a step the policy denies is ``denied`` with nothing left changed, no rollback restart (3, 13);
* the restore step's result is checked: a backup gone is written back from the pre-check's copy, a restore
  that fails says what the host was left in (4), and the server's own refusal is quoted (17);
* ``rollout approve`` names hosts; ``*`` is the hosts waiting now, never later ones (5); the restart's job id
  shows while it runs, a retried step's attempt and last failure too (7);
* a host whose step failed for good says what it was left in (8);
* the CLI's ordinary errors are one line and an exit code, a rollout nobody works on still shows its status,
  and no DSA warning is printed (9, 10, 11, 12, 14, 16, 17).
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest

if os.environ.get("AGENT_TOOLS_REQUIRE_TEMPORAL") == "1":
    import temporalio  # noqa: F401  (CI installs the extra: a missing one fails here)
else:
    pytest.importorskip("temporalio")

from temporalio import activity
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from agent_tools.demo.node import EmbeddedNode
from agent_tools.fleet.activities import FleetActivities
from agent_tools.fleet.client import start_rollout, status
from agent_tools.fleet.devserver import DevServer
from agent_tools.fleet.model import RolloutSpec
from agent_tools.hosts.base import run_on
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.jobs.manager import job_id_for_key
from agent_tools.policy import PolicySet
from agent_tools.testing import free_port, wait_until
from agent_tools.tools.toolkit import Toolkit

from . import fleet_harness as fh

pytestmark = pytest.mark.temporal

#: the restart asks a person; the unit's edit (tee) is allowed
_ASK_RESTART = """
version: 1
hosts: ["fleet-*"]
defaults: {budget_s: 30, on_timeout: detach, decision: allow}
rules:
  - id: restart-asks
    match: [systemctl, "-**", "restart", "**"]
    decision: ask
    reason: a restart of the SGLang server drops in-flight requests
  - id: unit-writes
    match: [tee, "**"]
    decision: allow
    redirect_to: "*"
"""
_DENY_RESTART = _ASK_RESTART.replace("decision: ask", "decision: deny").replace("restart-asks", "no-restarts")


def _policy(tmp: Path, text: str) -> PolicySet:
    path = tmp / "policy.yaml"
    path.write_text(text)
    return PolicySet.load([str(path)])


async def _run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    res = await anyio.run_process([sys.executable, "-m", "agent_tools.cli", *args], check=False, env=env)
    return res.returncode, res.stdout.decode(), res.stderr.decode()


async def _unit_text(node: EmbeddedNode) -> str:
    host = node.registry.get(node.alias)
    return (await run_on(host, 'cat "$SIM_SYSTEMD_ROOT"/etc/systemd/system/sglang.service')).stdout.decode()


async def _host_when(client: Client, wid: str, host: str, what: str, test: Any,
                     timeout_s: float = 60) -> dict[str, Any]:
    """The host's status once ``test(host_status)`` holds."""

    async def check() -> dict[str, Any] | None:
        h: dict[str, Any] = (await status(client, wid))["hosts"].get(host) or {}
        return h if h and test(h) else None

    found = await wait_until(check, what, timeout_s=timeout_s, interval_s=0.2)
    assert found is not None
    return found


def _scheduled_after_cancel(history: Any) -> list[str]:
    """The activity types scheduled after the workflow's cancel request, in order."""
    out: list[str] = []
    seen = False
    for e in history.events:
        if e.HasField("workflow_execution_cancel_requested_event_attributes"):
            seen = True
        elif seen and e.HasField("activity_task_scheduled_event_attributes"):
            out.append(e.activity_task_scheduled_event_attributes.activity_type.name)
    return out


class _StubbornPrecheck(FleetActivities):
    """A pre-check that completes although it was asked to cancel: it holds until ``gate`` exists, then makes the
    pre-check's steps, all without heartbeats (a cancel reaches an activity only in the answer to a heartbeat),
    as a short step does when the cancel comes after its last heartbeat."""

    def __init__(self, tk: Toolkit, gate: Path) -> None:
        super().__init__(tk)
        self.gate = gate

    @activity.defn(name="fleet.precheck")
    async def precheck(self, req: dict[str, Any]) -> dict[str, Any]:
        await wait_until(self.gate.exists, "the test to open the gate", timeout_s=120)
        steps = FleetActivities.precheck.__wrapped__  # type: ignore[attr-defined]  (without _beating's heartbeats)
        out: dict[str, Any] = await steps(self, req)
        return out


async def test_a_cancel_during_a_short_step_stops_the_host_there(temporal: DevServer, stack: AsyncExitStack,
                                                                 tmp_path: Path) -> None:
    """Finding 1: the cancel arrives while the pre-check runs and the pre-check completes anyway: nothing after it
    is scheduled (it used to go on to edit, restart and verify the host), the status shows the pending cancel
    meanwhile (finding 7), and a second cancel says it was requested already."""
    nodes = await fh.nodes(stack, tmp_path, [("fleet-s1", "default")], load_s=1.0)
    node = nodes["fleet-s1"]
    before = await _unit_text(node)
    wid, queue = fh.ids()
    gate = tmp_path / "gate"
    client = await Client.connect(temporal.target)
    tk = fh.toolkit(tmp_path, nodes, "worker")
    await fh.in_process_worker(stack, client, queue, tk, _StubbornPrecheck(tk, gate))
    handle = await start_rollout(client, RolloutSpec(hosts=["fleet-s1"], canary=0, heartbeat_s=30.0),
                                 workflow_id=wid, task_queue=queue)
    await _host_when(client, wid, "fleet-s1", "the pre-check to run", lambda h: h["state"] == "prechecking")
    code, out, err = await _run_cli("rollout", "cancel", wid, "--temporal", temporal.target)
    assert code == 0 and "cancellation requested" in out, (out, err)
    st = await status(client, wid)
    assert st["cancel_requested"] is True and st["phase"] == "cancelling", st
    assert st["hosts"]["fleet-s1"]["step"]["activity"] == "fleet.precheck", st
    code, out, err = await _run_cli("rollout", "status", wid, "--temporal", temporal.target)
    assert code == 0 and "CANCEL REQUESTED" in out, out
    code, out, err = await _run_cli("rollout", "cancel", wid, "--temporal", temporal.target)
    assert code == 0 and "was requested already" in out, (out, err)
    gate.touch()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    final = await status(client, wid)
    assert final["workflow"] == "CANCELED" and final["hosts"]["fleet-s1"]["state"] == "cancelled", final
    assert _scheduled_after_cancel(await handle.fetch_history()) == [], "a step was scheduled after the cancel"
    assert node.starts() == 1 and await _unit_text(node) == before  # nothing edited, nothing restarted
    await fh.replays(handle)


async def test_a_cancel_reaches_a_running_step_within_seconds(temporal: DevServer, stack: AsyncExitStack,
                                                              tmp_path: Path) -> None:
    """Finding 1: a step that is still running (the node's nvidia-smi hangs in the pre-check) learns of the cancel
    at its next heartbeat, about a second later (the worker's heartbeat throttle), not 0.8 x the heartbeat
    timeout later (24 s here)."""
    nodes = await fh.nodes(stack, tmp_path, [("fleet-s2", "default")], load_s=1.0)
    smi = nodes["fleet-s2"].root / "usr/local/bin/nvidia-smi"
    hung = tmp_path / "hung"
    smi.write_text(f"#!/bin/sh\ntouch {hung}\nsleep 300\n")
    wid, queue = fh.ids()
    client = await Client.connect(temporal.target)
    await fh.in_process_worker(stack, client, queue, fh.toolkit(tmp_path, nodes, "worker"))
    handle = await start_rollout(client, RolloutSpec(hosts=["fleet-s2"], canary=0, heartbeat_s=30.0),
                                 workflow_id=wid, task_queue=queue)
    await wait_until(hung.exists, "the pre-check's nvidia-smi to hang", timeout_s=60)
    t0 = anyio.current_time()
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    assert anyio.current_time() - t0 < 10, "the running step learned of the cancel late"
    final = await status(client, wid)
    assert final["hosts"]["fleet-s2"]["state"] == "cancelled" and nodes["fleet-s2"].starts() == 1, final


async def test_a_cancel_while_a_restart_awaits_approval_restarts_nothing(
        temporal: DevServer, stack: AsyncExitStack, tmp_path: Path) -> None:
    """Finding 2: the restart waits for a person when the rollout is cancelled: the unit is put back, nothing is
    restarted (no restart ran), no approval is asked again, the note names no job, and the workflow ends."""
    nodes = await fh.nodes(stack, tmp_path, [("fleet-m", "default")], load_s=1.0)
    node = nodes["fleet-m"]
    before = await _unit_text(node)
    wid, queue = fh.ids()
    client = await Client.connect(temporal.target)
    tk = fh.toolkit(tmp_path, nodes, "worker", policy=_policy(tmp_path, _ASK_RESTART))
    await fh.in_process_worker(stack, client, queue, tk)
    handle = await start_rollout(client, RolloutSpec(hosts=["fleet-m"], canary=0, heartbeat_s=5.0,
                                                     flags=["--max-running-requests", "502"]),
                                 workflow_id=wid, task_queue=queue)
    waiting = await _host_when(client, wid, "fleet-m", "the restart to ask approval",
                               lambda h: h["state"] == "awaiting_approval")
    assert waiting["approval"]["step"] == "fleet.restart" and "job_id" not in waiting, waiting
    assert "502" in await _unit_text(node)  # edited
    code, _, err = await _run_cli("rollout", "cancel", wid, "--temporal", temporal.target)
    assert code == 0, err
    with anyio.fail_after(60), pytest.raises(WorkflowFailureError):
        await handle.result()
    host = (await status(client, wid))["hosts"]["fleet-m"]
    assert host["state"] == "cancelled" and "the service was not restarted" in host["note"], host
    assert "j_" not in host["note"] and "restarts" not in host, host
    assert await _unit_text(node) == before and node.starts() == 1
    await fh.replays(handle)


async def test_a_denied_restart_is_denied_with_the_unit_put_back_and_nothing_restarted(
        temporal: DevServer, stack: AsyncExitStack, tmp_path: Path) -> None:
    """Finding 3: the worker's policy denies the restart: the host is ``denied`` (no failure, nothing ``rolled
    back`` by a restart of a service that was never restarted), its unit is back, its restarts list is empty
    (finding 13), and the node saw no restart."""
    nodes = await fh.nodes(stack, tmp_path, [("fleet-n", "default")], load_s=1.0)
    node = nodes["fleet-n"]
    before = await _unit_text(node)
    wid, queue = fh.ids()
    client = await Client.connect(temporal.target)
    tk = fh.toolkit(tmp_path, nodes, "worker", policy=_policy(tmp_path, _DENY_RESTART))
    await fh.in_process_worker(stack, client, queue, tk)
    handle = await start_rollout(client, RolloutSpec(hosts=["fleet-n"], canary=0, heartbeat_s=5.0,
                                                     flags=["--max-running-requests", "303"]),
                                 workflow_id=wid, task_queue=queue)
    final = await handle.result()
    host = final["hosts"]["fleet-n"]
    assert host["state"] == "denied", host
    assert "denied by the worker's policy (rule no-restarts)" in host["note"], host
    assert "restored the unit from backup" in host["note"] and "not restarted" in host["note"], host
    assert "restarts" not in host and final["failures"] == 0 and final["phase"] == "done", final
    assert await _unit_text(node) == before and node.starts() == 1
    await fh.replays(handle)


async def test_the_restore_steps_result_is_checked(temporal: DevServer, stack: AsyncExitStack,
                                                   tmp_path: Path) -> None:
    """Finding 4: both restarts fail (the server refuses ``--context-length qqq``, and its own line is quoted:
    finding 17). fleet-o's backup was moved away: the unit is written back from the pre-check's copy, and the
    note says so. fleet-p's unit directory was moved away: the restore fails, and the note says the host was
    left edited and that nothing was restarted (it used to say "restored the unit"). ``rollout approve`` with two
    ``--host`` says what it approved (finding 5)."""
    nodes = await fh.nodes(stack, tmp_path, [("fleet-o", "default"), ("fleet-p", "default")], load_s=1.0)
    before = await _unit_text(nodes["fleet-o"])
    wid, queue = fh.ids()
    client = await Client.connect(temporal.target)
    tk = fh.toolkit(tmp_path, nodes, "worker", policy=_policy(tmp_path, _ASK_RESTART))
    await fh.in_process_worker(stack, client, queue, tk)
    handle = await start_rollout(client, RolloutSpec(hosts=["fleet-o", "fleet-p"], canary=0, wave_size=2,
                                                     heartbeat_s=5.0, flags=["--context-length", "qqq"]),
                                 workflow_id=wid, task_queue=queue)
    for name in ("fleet-o", "fleet-p"):
        await _host_when(client, wid, name, f"{name}'s restart to ask approval",
                         lambda h: h["state"] == "awaiting_approval")
    o = nodes["fleet-o"].registry.get("fleet-o")
    moved = await run_on(o, f'mkdir -p {tmp_path}/moved && mv "${{XDG_STATE_HOME:-$HOME/.local/state}}"/agent-tools/'
                            f'backups/* {tmp_path}/moved/')
    assert moved.exit_status == 0, moved
    p = nodes["fleet-p"].registry.get("fleet-p")
    gone = await run_on(p, 'mv "$SIM_SYSTEMD_ROOT"/etc/systemd/system "$SIM_SYSTEMD_ROOT"/etc/systemd/away')
    assert gone.exit_status == 0, gone
    code, out, err = await _run_cli("rollout", "approve", wid, "--host", "fleet-o", "--host", "fleet-p", "--by",
                                    "erin", "--temporal", temporal.target)
    assert code == 0, err
    assert [line.split(":")[0] for line in out.splitlines()] == [f"approved fleet-o of {wid} as erin",
                                                                 f"approved fleet-p of {wid} as erin"], out
    assert "fleet.restart" in out and "(rule restart-asks)" in out, out
    final = await handle.result()
    ho, hp = final["hosts"]["fleet-o"], final["hosts"]["fleet-p"]
    assert hp["state"] == "failed" and "restoring the unit FAILED" in hp["note"], hp
    assert "LEFT with" in hp["note"] and "edited" in hp["note"] and "nothing was restarted" in hp["note"], hp
    assert [r["key"] for r in hp["restarts"]] == ["restart"], hp  # no rollback restart onto the edited unit
    assert ho["state"] == "rolled_back" and "restored the unit from the pre-check's copy" in ho["note"], ho
    assert "restoring backup b_" in ho["note"] and "it serves again" in ho["note"], ho
    assert await _unit_text(nodes["fleet-o"]) == before
    assert "invalid int value: 'qqq'" in ho["note"], ho  # the server's own words
    assert final["phase"] == "done" and final["halted"] is None, final  # one wave: nothing left to halt
    await fh.replays(handle)


#: every write asks a person (the policy's implicit write rule: no rule allows tee); restarts are allowed
_ASK_WRITES = """
version: 1
hosts: ["fleet-*"]
defaults: {budget_s: 30, on_timeout: detach, decision: allow}
rules: []
"""


async def test_a_rollbacks_restore_is_approved_in_the_name_of_who_approved_the_edit(
        temporal: DevServer, stack: AsyncExitStack, tmp_path: Path) -> None:
    """Finding 4 under a policy that asks for every write: the edit waits for a person's yes, the restart fails
    (the server refuses ``--context-length qqq``), and the rollback's restore_file, which the policy asks about as
    it asked about the edit (tee PATH), is approved in that person's name: the unit is back from its backup (a
    restore the policy still asked about would be a failed restore, not "restored"), and it serves again."""
    nodes = await fh.nodes(stack, tmp_path, [("fleet-w", "default")], load_s=1.0)
    node = nodes["fleet-w"]
    before = await _unit_text(node)
    wid, queue = fh.ids()
    client = await Client.connect(temporal.target)
    tk = fh.toolkit(tmp_path, nodes, "worker", policy=_policy(tmp_path, _ASK_WRITES))
    await fh.in_process_worker(stack, client, queue, tk)
    handle = await start_rollout(client, RolloutSpec(hosts=["fleet-w"], canary=0, heartbeat_s=5.0,
                                                     flags=["--context-length", "qqq"]),
                                 workflow_id=wid, task_queue=queue)
    waiting = await _host_when(client, wid, "fleet-w", "the edit to ask approval",
                               lambda h: h["state"] == "awaiting_approval")
    assert waiting["approval"]["step"] == "fleet.edit", waiting
    code, _, err = await _run_cli("rollout", "approve", wid, "--host", "fleet-w", "--by", "dave", "--temporal",
                                  temporal.target)
    assert code == 0, err
    final = await handle.result()
    host = final["hosts"]["fleet-w"]
    assert host["state"] == "rolled_back", host
    assert f"restored the unit from backup {host['backup_id']}" in host["note"] and "serves again" in host["note"]
    assert await _unit_text(node) == before
    assert [r["key"] for r in host["restarts"]] == ["restart", "rollback"], host


async def test_approve_names_hosts_and_star_is_the_hosts_waiting_now(
        temporal: DevServer, stack: AsyncExitStack, tmp_path: Path) -> None:
    """Finding 5: ``*`` approves the canary waiting now and says so, and the next wave's host waits for its own
    yes (``--host`` is needed: tested with the other CLI errors). Finding 7: while the restart runs, the status
    shows its job id."""
    nodes = await fh.nodes(stack, tmp_path, [("fleet-q", "default"), ("fleet-r", "default")], load_s=3.0)
    wid, queue = fh.ids()
    client = await Client.connect(temporal.target)
    tk = fh.toolkit(tmp_path, nodes, "worker", policy=_policy(tmp_path, _ASK_RESTART))
    await fh.in_process_worker(stack, client, queue, tk)
    handle = await start_rollout(client, RolloutSpec(hosts=["fleet-q", "fleet-r"], canary=1, heartbeat_s=5.0,
                                                     flags=["--max-running-requests", "301"]),
                                 workflow_id=wid, task_queue=queue)
    await _host_when(client, wid, "fleet-q", "the canary's restart to ask approval",
                     lambda h: h["state"] == "awaiting_approval")
    code, out, err = await _run_cli("rollout", "approve", wid, "--host", "*", "--by", "alice", "--temporal",
                                    temporal.target)
    assert code == 0 and out.startswith(f"approved fleet-q of {wid} as alice: fleet.restart "), out
    assert "fleet-r" not in out and len(out.strip().splitlines()) == 1, out
    run_id = (await handle.describe()).run_id
    job = job_id_for_key("fleet-q", f"fleet/{wid}/{run_id}/fleet-q/restart")
    running = await _host_when(client, wid, "fleet-q", "the canary's restart to run",
                               lambda h: h["state"] == "restarting" and h.get("step", {}).get("activity")
                               == "fleet.restart")
    assert running["job_id"] == job, running  # shown while it runs, not only after
    r = await _host_when(client, wid, "fleet-r", "the next host to ask for its own yes",
                         lambda h: h["state"] in ("awaiting_approval", "verified", "failed"))
    assert r["state"] == "awaiting_approval", r
    code, out, err = await _run_cli("rollout", "approve", wid, "--host", "fleet-r", "--by", "bob", "--temporal",
                                    temporal.target)
    assert code == 0, err
    final = await handle.result()
    assert {h: v["state"] for h, v in final["hosts"].items()} == {"fleet-q": "verified", "fleet-r": "verified"}
    assert final["hosts"]["fleet-q"]["restarts"][0]["job_id"] == job
    assert tk.approvals is not None
    assert tk.approvals.get(final["hosts"]["fleet-r"]["restarts"][0]["approval_id"]).decided_by == "bob"


async def test_a_retried_step_shows_its_attempt_and_last_failure(temporal: DevServer, stack: AsyncExitStack,
                                                                 tmp_path: Path) -> None:
    """Finding 7: a host that refuses connections: its pre-check is retried, and the status (a worker's answer plus
    the workflow's description) shows the attempt and the last failure; ``rollout status`` prints them."""
    config = tmp_path / "ssh_config"
    config.write_text(f"Host fleet-gone\n  HostName 127.0.0.1\n  Port {free_port()}\n  User root\n  BatchMode yes\n"
                      "  ConnectTimeout 2\n")
    wid, queue = fh.ids()
    client = await Client.connect(temporal.target)
    tk = Toolkit(HostRegistry(ssh_config=[str(config)]), journal=Journal(tmp_path / "worker.sqlite3"))
    await fh.in_process_worker(stack, client, queue, tk)
    handle = await start_rollout(client, RolloutSpec(hosts=["fleet-gone"], canary=0, heartbeat_s=5.0),
                                 workflow_id=wid, task_queue=queue)
    host = await _host_when(client, wid, "fleet-gone", "the pre-check to be retried",
                            lambda h: int(h.get("step", {}).get("attempt") or 0) >= 2
                            and h["step"].get("last_failure"))
    assert host["step"]["activity"] == "fleet.precheck" and host["step"]["max_attempts"] == 20, host
    assert host["step"]["last_failure"].startswith("unreachable: "), host
    code, out, err = await _run_cli("rollout", "status", wid, "--temporal", temporal.target, "--json")
    assert code == 0, err
    shown = json.loads(out)["hosts"]["fleet-gone"]
    assert shown["step"]["last_failure"].startswith("unreachable: "), shown
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()


class _LostAfterRestart(FleetActivities):
    """The restart runs on the node, then the host stops answering for good (its retries spent)."""

    @activity.defn(name="fleet.restart")
    async def restart(self, req: dict[str, Any]) -> dict[str, Any]:
        await super().restart(req)
        raise ApplicationError(f"launch: {req['host']}: cannot connect (the test's host stopped answering)",
                               type="unreachable", non_retryable=True)


async def test_a_host_lost_mid_step_says_what_it_was_left_in(temporal: DevServer, stack: AsyncExitStack,
                                                             tmp_path: Path) -> None:
    """Finding 8: a host whose restart step failed for good (unreachable) is ``failed`` with a note that says its
    unit is left edited, which backup puts it back, and that its restart job may have run."""
    nodes = await fh.nodes(stack, tmp_path, [("fleet-u", "default")], load_s=1.0)
    wid, queue = fh.ids()
    client = await Client.connect(temporal.target)
    tk = fh.toolkit(tmp_path, nodes, "worker")
    await fh.in_process_worker(stack, client, queue, tk, _LostAfterRestart(tk))
    handle = await start_rollout(client, RolloutSpec(hosts=["fleet-u"], canary=0, heartbeat_s=5.0,
                                                     flags=["--max-running-requests", "401"]),
                                 workflow_id=wid, task_queue=queue)
    final = await handle.result()
    host = final["hosts"]["fleet-u"]
    run_id = (await handle.describe()).run_id
    job = job_id_for_key("fleet-u", f"fleet/{wid}/{run_id}/fleet-u/restart")
    assert host["state"] == "failed" and "cannot connect" in host["note"], host
    assert f"backup_id={host['backup_id']})" in host["note"] and "edited" in host["note"], host
    assert f"restart job {job} may have run" in host["note"] and "nothing was put back" in host["note"], host
    assert "401" in await _unit_text(nodes["fleet-u"])  # as the note says


async def test_ordinary_cli_errors_are_one_line_and_status_needs_no_worker(temporal: DevServer,
                                                                           tmp_path: Path) -> None:
    """Findings 9-12, 14, 16, 17: no traceback for a missing rollout, an unreachable server, an id in use, a demo
    that cannot show what it claims, a zero heartbeat or a bad unit; a rollout no worker polls shows that (and
    its empty status) at once; a second cancel says so; no DSA deprecation warning anywhere."""
    t = temporal.target
    wid, queue = fh.ids()
    client = await Client.connect(t)
    await start_rollout(client, RolloutSpec(hosts=["fleet-z"]), workflow_id=wid, task_queue=queue)
    calls = {
        "missing": (1, "no rollout nosuch on this Temporal server", ["rollout", "status", "nosuch", "--temporal", t]),
        "cancel-missing": (1, "no rollout nosuch", ["rollout", "cancel", "nosuch", "--temporal", t]),
        "approve-missing": (1, "no rollout nosuch", ["rollout", "approve", "nosuch", "--host", "n1", "--by", "a",
                                                     "--temporal", t]),
        "unreachable": (1, "cannot reach the Temporal server at 127.0.0.1:1: Connection refused",
                        ["rollout", "status", wid, "--temporal", "127.0.0.1:1"]),
        "running-id": (1, f"rollout {wid} is running", ["rollout", "start", "fleet-z", "--id", wid, "--temporal", t]),
        "no-worker": (0, f"no worker polls task queue {queue}", ["rollout", "status", wid, "--temporal", t]),
        "approve-no-worker": (1, "not approved: no worker polls", ["rollout", "approve", wid, "--host", "*", "--by",
                                                                   "a", "--temporal", t]),
        "demo-1": (2, "the fleet demo needs at least 2 hosts", ["demo", "fleet", "--hosts", "1"]),
        "demo-2-kill": (2, "--kill needs a host of a later wave", ["demo", "fleet", "--hosts", "2"]),
        "heartbeat-0": (2, "must be > 0 seconds", ["rollout", "start", "h1", "--id", "r", "--temporal", t,
                                                   "--heartbeat-s", "0"]),
        "bad-unit": (2, "is not a systemd unit name", ["rollout", "start", "h1", "--id", "r", "--temporal", t,
                                                       "--unit", "sglang.service;touch /tmp/x"]),
        "help": (0, "", ["--help"]),
        "approve-no-host": (2, "Missing option '--host'", ["rollout", "approve", wid, "--by", "a", "--temporal", t]),
        "approve-no-user": (2, "say who approves: --by NAME ($USER is not set)",
                            ["rollout", "approve", wid, "--host", "*", "--temporal", t]),
    }
    no_user = {k: v for k, v in os.environ.items() if k != "USER"}
    got: dict[str, tuple[int, str, str]] = {}
    t0 = anyio.current_time()
    async with anyio.create_task_group() as tg:
        for name, (_, _, args) in calls.items():

            async def one(name: str = name, args: list[str] = args) -> None:
                got[name] = await _run_cli(*args, env=no_user if name == "approve-no-user" else None)

            tg.start_soon(one)
    assert anyio.current_time() - t0 < 90
    for name, (code, said, _) in calls.items():
        rc, out, err = got[name]
        assert rc == code, (name, rc, out, err)
        assert said in (err if code else out), (name, out, err)
        assert "Traceback" not in out + err and "DSA" not in err, (name, err)
        if code and name != "approve-no-host":  # (that one is typer's usage error, boxed)
            assert len(err.strip().splitlines()) == 1, (name, err)
    await client.get_workflow_handle(wid).cancel()
    code, out, err = await _run_cli("rollout", "cancel", wid, "--temporal", t)
    assert code == 0 and "was requested already" in out, (out, err)
    await client.get_workflow_handle(wid).terminate("test: no worker ever polls its queue")
    st = await status(client, wid)
    assert st["workflow"] == "TERMINATED" and "recorded no status" in st["why"], st
