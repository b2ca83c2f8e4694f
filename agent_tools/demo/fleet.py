"""``agent-tools demo fleet``: the hicache change rolled out over a fleet of embedded simulated GPU nodes by a
Temporal workflow, surviving the death of its worker.

Steps: (1) Temporal's dev server on loopback (:mod:`agent_tools.fleet.devserver`); (2) ``n`` embedded nodes
(:func:`~agent_tools.demo.node.run_node`, started concurrently), one of them with too little host RAM for the
hicache pool (``small_ram``); (3) a worker process (``agent-tools worker``) with a state dir of its own;
(4) ``FleetRollout`` with a canary and waves; (5) once a host of a later wave is restarting (its restart job
started on the node, the activity following it), the worker is killed with SIGKILL and a second worker, with
another state dir (another journal), is started: the activity is retried there after its heartbeat timeout and
re-attaches to the job on the host; (6) the end: hosts verified and refused, and the restarts each node saw
(counted on the node: its unit's invocations) against the restarts the workflow asked for.

The node's processes, the server and the workers run in a temporary directory removed afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from .node import EmbeddedNode, run_node

__all__ = ["demo_problem", "run_fleet_demo", "spawn_worker"]

Show = Callable[[dict[str, Any], dict[str, int], list[str]], None]


def spawn_worker(target: str, task_queue: str, ssh_config: Path, state_dir: Path, log: Path,
                 policy: list[str] | None = None, sticky_timeout_s: float = 2.0) -> subprocess.Popen[bytes]:
    """``agent-tools worker`` as a process of its own (this interpreter), with ``state_dir`` as its
    ``AGENT_TOOLS_STATE_DIR`` (its journal) and its output appended to ``log``; ``sticky_timeout_s``: how soon
    another worker takes over the workflow tasks of a dead one (the worker's ``--sticky-timeout-s``)."""
    env = {**os.environ, "AGENT_TOOLS_STATE_DIR": str(state_dir), "AGENT_TOOLS_POLICY": ""}
    args = [sys.executable, "-m", "agent_tools.cli", "worker", "--temporal", target, "--task-queue", task_queue,
            "-F", str(ssh_config), "--sticky-timeout-s", str(sticky_timeout_s)]
    for p in policy or []:
        args += ["--policy", p]
    with open(log, "ab") as out:
        return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def demo_problem(n: int, *, canary: int = 1, wave_size: int = 3, kill: bool = True, load_s: float = 4.0,
                 small_ram: int | None = None) -> str | None:
    """What keeps :func:`run_fleet_demo` from showing what it claims with these arguments, or None: fewer than 2
    nodes; ``kill`` without a later-wave node that restarts (the kill waits for one: with the small-RAM node
    refused there, 3 nodes at least); a wave size < 1, a canary < 0 or a load time < 0."""
    small = small_ram if small_ram is not None else min(n - 1, canary)
    if n < 2:
        return "the fleet demo needs at least 2 hosts (one of them the small-RAM node that is refused)"
    if wave_size < 1 or canary < 0 or load_s < 0:
        return "the fleet demo needs --wave-size >= 1, a canary >= 0 and --load-s >= 0"
    if kill and not [i for i in range(max(canary, 0), n) if i != small]:
        return (f"--kill needs a host of a later wave that restarts (the worker is killed during its restart): "
                f"--hosts {max(canary, 1) + 2} or more, or --no-kill")
    return None


async def run_fleet_demo(n: int = 8, *, load_s: float = 4.0, canary: int = 1, wave_size: int = 3,
                         kill: bool = True, small_ram: int | None = None, heartbeat_s: float = 4.0,
                         show: Show | None = None) -> dict[str, Any]:
    """Run the demo (see the module docstring) and return its summary.

    :param n: nodes (>= 2). :param load_s: the simulated model load, seconds.
    :param small_ram: index of the node with too little RAM (default: the first host of the second wave).
    :param kill: SIGKILL the worker mid-wave and start another.
    :param heartbeat_s: the restart activities' heartbeat timeout (how soon a dead worker's step is retried).
    :param show: called with the rollout's status, the restarts counted on each node and the demo's events,
        whenever they are read.
    :returns: ``{"ok", "line", "verified", "refused", "duplicated_restarts", "node_restarts", "status",
        "events"}``; ``ok``: every node but the small one verified, that one refused, no restart duplicated, and
        with ``kill`` the worker killed mid-wave and replaced.
    :raises ValueError: the arguments cannot show that (:func:`demo_problem`).
    """
    from ..fleet.client import start_rollout, status
    from ..fleet.devserver import dev_server
    from ..fleet.model import RolloutSpec
    from ..fleet.worker import connect

    problem = demo_problem(n, canary=canary, wave_size=wave_size, kill=kill, load_s=load_s, small_ram=small_ram)
    if problem:
        raise ValueError(problem)
    small = small_ram if small_ram is not None else min(n - 1, canary)
    aliases = [f"gpu-node-{i + 1}" for i in range(n)]
    events: list[str] = []
    with tempfile.TemporaryDirectory(prefix="agent-tools-fleet-") as tmp:
        root = Path(tmp)
        nodes: dict[str, EmbeddedNode] = {}
        all_up, stop_nodes = anyio.Event(), anyio.Event()
        async with dev_server(root / "temporal.db", log=root / "temporal.log") as server, \
                anyio.create_task_group() as tg:

            async def hold(i: int) -> None:
                async with run_node("small_ram" if i == small else "default", load_s=load_s,
                                    workdir=root / aliases[i], alias=aliases[i]) as node:
                    nodes[node.alias] = node
                    if len(nodes) == n:
                        all_up.set()
                    await stop_nodes.wait()

            for i in range(n):
                (root / aliases[i]).mkdir()
                tg.start_soon(hold, i)
            await all_up.wait()
            config = root / "fleet_ssh_config"
            config.write_text("\n".join(nodes[a].ssh_config.read_text() for a in aliases))
            queue = f"fleet-demo-{uuid.uuid4().hex[:8]}"
            workers = [spawn_worker(server.target, queue, config, root / "worker1", root / "worker1.log")]
            events.append(f"worker 1 started (pid {workers[0].pid})")
            try:
                client = await connect(server.target)
                wid = f"fleet-demo-{uuid.uuid4().hex[:8]}"
                spec = RolloutSpec(hosts=aliases, canary=canary, wave_size=wave_size, failure_budget=0,
                                   heartbeat_s=heartbeat_s)
                handle = await start_rollout(client, spec, workflow_id=wid, task_queue=queue)
                killed = not kill
                while True:
                    st = await status(client, wid)
                    restarts = {a: nodes[a].starts() - 1 for a in aliases}
                    if not killed:
                        busy = [a for a, h in st["hosts"].items()
                                if h.get("wave", 0) >= 1 and h["state"] == "restarting" and restarts[a] >= 1]
                        if busy:
                            os.kill(workers[0].pid, signal.SIGKILL)
                            await anyio.to_thread.run_sync(workers[0].wait)
                            events.append(f"SIGKILL worker 1 (pid {workers[0].pid}) in wave {st['wave']} while "
                                          f"{busy[0]}'s restart job runs")
                            workers.append(spawn_worker(server.target, queue, config, root / "worker2",
                                                        root / "worker2.log"))
                            events.append(f"worker 2 started (pid {workers[1].pid}, another journal): the step "
                                          f"is retried after its {heartbeat_s:g} s heartbeat timeout and re-attaches")
                            killed = True
                    if show is not None:
                        show(st, restarts, events)
                    if st["workflow"] != "RUNNING":
                        break
                    await anyio.sleep(0.3)  # the live table's refresh (the workflow pushes nothing)
                final: dict[str, Any] = await handle.result()
            finally:
                for w in workers:
                    await anyio.to_thread.run_sync(_stop, w)
                stop_nodes.set()
        restarts = {a: nodes[a].starts() - 1 for a in aliases}
        hosts = final["hosts"]
        asked = {a: len(hosts[a].get("restarts", [])) for a in aliases}
        duplicated = sum(max(0, restarts[a] - asked[a]) for a in aliases)
        verified = sum(1 for h in hosts.values() if h["state"] == "verified")
        refused = sum(1 for h in hosts.values() if h["state"] == "refused")
        ok = (verified == n - 1 and refused == 1 and hosts[aliases[small]]["state"] == "refused" and duplicated == 0
              and (killed or not kill))  # with kill: only when the worker was killed mid-wave and replaced
        line = (f"{verified} verified, {refused} refused at pre-check, {duplicated} duplicated restarts (counted "
                f"on the nodes: {sum(restarts.values())} restarts for {sum(asked.values())} asked)"
                + (f"; worker killed and replaced: {len(workers) - 1}" if kill else "")
                + ("; the worker was NOT killed: no later-wave host restarted while it ran" if kill and not killed
                   else ""))
        return {"ok": ok, "line": line, "verified": verified, "refused": refused,
                "duplicated_restarts": duplicated, "node_restarts": restarts, "status": final, "events": events}
