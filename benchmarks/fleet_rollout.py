"""``fleet_rollout``: a rollout as a Temporal workflow against the same steps in a plain anyio loop over the
Toolkit, in one run (issue 18), and the per-activity overhead against a direct tool call.

Setup (this process): Temporal's dev server on loopback (the ``temporal`` extra's CLI), ``N`` embedded simulated
GPU nodes (:func:`agent_tools.demo.node.run_node`; 32 full, 8 quick; model load 1 s) and an in-process fleet
worker over its own Toolkit. Both sides share the event loop with the nodes' SSH servers alike.

* A: ``FleetRollout`` over the N hosts, no canary, waves of 8 (quick: 4), pre-check on, failure budget 0.
* B: the same tool calls, wave by wave with every host of a wave concurrent, in an anyio loop over a Toolkit:
  ``gpu_memory``, ``host_memory``, ``service_status`` (KV line), ``read_file``, ``edit_file``, the planned
  restart (``plan_restart`` + ``run_command`` keyed on the host) followed by ``job_status`` to readiness, and
  ``http_get`` of ``/get_server_info``.

Between rollouts every node's unit is put back (the original text written, a restart followed to readiness; a
node slow under the load gets more tries), untimed. Rounds alternate A B, B A. A side that does not verify every
host loses that sample (the note names each host and what it said), not the scenario; a reset that cannot bring
every node back ends the measuring with what was measured. Goal: A's wall time at most 1.3x B's.

``fleet_activity``: ``FleetSteps`` of 20 ``fleet.host_memory`` activities (wall time / 20) against a direct
``Toolkit.host_memory`` call: what one activity costs on top of its tool call (scheduling, history, two round
trips to the server). Reported.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from agent_tools.demo.hicache import HICACHE_FLAGS, KV_LINE_GREP, UNIT, hicache_edit, port_of
from agent_tools.demo.node import EmbeddedNode, run_node
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.outcomes import result_view
from agent_tools.tools import ops
from agent_tools.tools.toolkit import Toolkit

from .env import BenchEnv
from .stats import Row, Side, Target, progress

__all__ = ["LostRound", "fleet_rollout", "measure"]

_PROBES = [{"kind": "http", "url": "http://127.0.0.1:{port}/health"},
           {"kind": "log", "unit": UNIT, "pattern": "The server is fired up and ready to roll!",
            "fail_pattern": "Not enough host memory|Traceback"}]


def _d(out: Any) -> dict[str, Any]:
    return dict(result_view(out))


async def _follow(tk: Toolkit, job_id: str) -> dict[str, Any]:
    """The job's status once its readiness settled, or its error (a retryable one after 30 tries a second apart)."""
    errors = 0
    while True:
        st = _d(await tk.job_status(job_id=job_id, wait_s=1.0))
        if st.get("outcome") == "error" and st.get("retryable") and errors < 30:
            errors += 1  # a node slow under the whole fleet's load: ask again, as the activity's retry would
            await anyio.sleep(1.0)
            continue
        if st.get("readiness") in ("ready", "failed", "deadline_exceeded") or st.get("outcome") == "error":
            return st


async def _plain_host(tk: Toolkit, host: str, key: str) -> str:
    """The workflow's steps for one host, as plain tool calls; returns the host's end state."""
    gpu = _d(await tk.gpu_memory(host=host))
    mem = _d(await tk.host_memory(host=host))
    svc = _d(await tk.service_status(host=host, unit=UNIT, grep=KV_LINE_GREP, journal_lines=1))
    path = str(svc["unit_file"])
    text = str(_d(await tk.read_file(host=host, path=path))["text"])
    from agent_tools.demo.hicache import estimate_hicache

    if not estimate_hicache(gpu, mem, str(svc.get("journal", "")), text).fits:
        return "refused"
    old, new = hicache_edit(text)
    await tk.edit_file(host=host, path=path, old=old, new=new)
    probes = [{**p, "url": p["url"].format(port=port_of(text))} if "url" in p else p for p in _PROBES]
    plan = await ops.plan_restart(tk, host, UNIT, True, probes)
    out = _d(await tk.run_command(host=host, command=plan.command, budget_s=30.0, idempotency_key=key,
                                  _probes=plan.probes, _deadline_s=plan.deadline_s, _key_on_host=True))
    st = await _follow(tk, str(out["job_id"]))
    if st.get("readiness") != "ready":
        return "failed"
    info = _d(await tk.http_get(host=host, url=f"http://127.0.0.1:{port_of(text)}/get_server_info",
                                fields=["enable_hierarchical_cache"]))
    return "verified" if (info.get("data") or {}).get("enable_hierarchical_cache") else "not_verified"


async def _plain_rollout(tk: Toolkit, hosts: list[str], wave: int, tag: str) -> list[str]:
    states: dict[str, str] = {}
    for i in range(0, len(hosts), wave):
        async with anyio.create_task_group() as tg:
            for h in hosts[i:i + wave]:

                async def one(h: str = h) -> None:
                    states[h] = await _plain_host(tk, h, f"plain/{tag}/{h}")

                tg.start_soon(one)
    return [states[h] for h in hosts]


class LostRound(Exception):
    """A round that cannot be counted (a side did not verify every host, a reset did not get every node back):
    its message names the hosts and what they said."""


#: tries of one node's reset restart, and the pause before the next (seconds): a node busy or slow under the
#: whole fleet's load (a connection lost, a restart not ready in time) gets another
_RESET_TRIES, _RESET_PAUSE_S = 5, 2.0


async def _reset(tk: Toolkit, originals: dict[str, tuple[str, str]]) -> None:
    """Every node's unit back to its original text, restarted and ready (untimed).

    :raises LostRound: a node did not come back in :data:`_RESET_TRIES` tries (all are tried; each one named)."""
    lost: dict[str, str] = {}
    async with anyio.create_task_group() as tg:
        for host, (path, text) in originals.items():

            async def one(host: str = host, path: str = path, text: str = text) -> None:
                why = ""
                for attempt in range(_RESET_TRIES):
                    if attempt:
                        await anyio.sleep(_RESET_PAUSE_S)
                    wrote = _d(await tk.write_file(host=host, path=path, content=text))
                    if wrote.get("outcome") == "error":
                        why = f"write_file: {wrote.get('message')}"
                        continue
                    out = _d(await tk.restart_service(host=host, unit=UNIT))
                    if not out.get("job_id"):
                        why = f"restart_service: {out.get('outcome')}: {out.get('message')}"
                        continue
                    st = await _follow(tk, str(out["job_id"]))
                    if st.get("readiness") == "ready":
                        return
                    why = f"restart {st.get('readiness')}: {st.get('why') or st.get('message')}"
                lost[host] = why

            tg.start_soon(one)
    if lost:
        raise LostRound("the reset did not bring back " + "; ".join(f"{h}: {w}" for h, w in sorted(lost.items())))


def _not_verified(hosts: dict[str, dict[str, Any]]) -> str:
    """The hosts of a rollout's final status that are not ``verified``, each with its state and note."""
    return "; ".join(f"{h}: {v.get('state')}: {v.get('note')}" for h, v in sorted(hosts.items())
                     if v.get("state") != "verified")


async def measure(rounds: int, sides: list[tuple[str, Callable[[], Awaitable[None]], list[float]]],
                  reset: Callable[[], Awaitable[None]], notes: list[str]) -> None:
    """``rounds`` rounds of every side (its order flipped every round), each timed into its list, with ``reset``
    (untimed) after each. A side that raises :class:`LostRound` loses that sample only: its message goes to
    ``notes`` (and the progress line) and the rounds go on; a reset that raises it ends the measuring there
    (the nodes are not in the state a rollout starts from), with what was measured so far."""
    for r in range(rounds):
        for name, fn, out in sides[:: 1 if r % 2 == 0 else -1]:
            progress(f"fleet_rollout: round {r + 1}/{rounds} side {name}")
            t0 = time.perf_counter()
            try:
                await fn()
                out.append(time.perf_counter() - t0)
            except LostRound as exc:
                notes.append(f"round {r + 1} side {name} not counted: {exc}")
                progress(f"fleet_rollout: {notes[-1]}")
            try:
                await reset()
            except LostRound as exc:
                notes.append(f"stopped after round {r + 1} side {name}: {exc}")
                progress(f"fleet_rollout: {notes[-1]}")
                return


async def fleet_rollout(env: BenchEnv, p: Any) -> list[Row]:
    try:
        from agent_tools.fleet.client import start_rollout
        from agent_tools.fleet.devserver import dev_server
        from agent_tools.fleet.model import RolloutSpec
        from agent_tools.fleet.worker import build_worker, connect
        from agent_tools.fleet.workflow import FleetSteps
    except ImportError as exc:
        why = f"the temporal extra is not installed ({exc})"
        return [Row("fleet_rollout", "FleetRollout vs a plain anyio loop", Side("FleetRollout", "s"),
                    Side("anyio loop", "s"), Target("pending"), pending_reason=why)]
    n, wave, rounds = p.pick(32, 8), p.pick(8, 4), p.pick(2, 1)
    aliases = [f"bench-node-{i + 1:02d}" for i in range(n)]
    nodes: dict[str, EmbeddedNode] = {}
    sa: list[float] = []
    sb: list[float] = []
    act: list[float] = []
    direct: list[float] = []
    lost: list[str] = []
    with tempfile.TemporaryDirectory(prefix="agent-tools-bench-fleet-") as tmp:
        root = Path(tmp)
        up, stop = anyio.Event(), anyio.Event()
        progress(f"fleet_rollout: dev server + {n} embedded nodes")
        async with dev_server(root / "temporal.db") as server, anyio.create_task_group() as tg:

            async def hold(alias: str) -> None:
                (root / alias).mkdir()
                async with run_node("default", load_s=1.0, workdir=root / alias, alias=alias) as node:
                    nodes[alias] = node
                    if len(nodes) == n:
                        up.set()
                    await stop.wait()

            for a in aliases:
                tg.start_soon(hold, a)
            await up.wait()
            config = root / "fleet_ssh_config"
            config.write_text("\n".join(nodes[a].ssh_config.read_text() for a in aliases))
            tk_w = Toolkit(HostRegistry(ssh_config=[str(config)]), journal=Journal(root / "worker.sqlite3"))
            tk_b = Toolkit(HostRegistry(ssh_config=[str(config)]), journal=Journal(root / "plain.sqlite3"))
            client = await connect(server.target)
            queue = f"bench-{uuid.uuid4().hex[:8]}"
            try:
                async with tk_w, tk_b, build_worker(client, queue, tk_w):
                    originals: dict[str, tuple[str, str]] = {}
                    for a in aliases:
                        svc = _d(await tk_b.service_status(host=a, unit=UNIT))
                        path = str(svc["unit_file"])
                        originals[a] = (path, str(_d(await tk_b.read_file(host=a, path=path))["text"]))

                    async def side_a() -> None:
                        spec = RolloutSpec(hosts=aliases, flags=list(HICACHE_FLAGS), canary=0, wave_size=wave,
                                           heartbeat_s=10.0)
                        h = await start_rollout(client, spec, workflow_id=f"bench-{uuid.uuid4().hex[:8]}",
                                                task_queue=queue)
                        final = await h.result()
                        if final["counts"].get("verified") != n:
                            raise LostRound(f"FleetRollout did not verify every host ({final['counts']}): "
                                            + _not_verified(final["hosts"]))

                    async def side_b() -> None:
                        states = await _plain_rollout(tk_b, aliases, wave, uuid.uuid4().hex[:8])
                        if states.count("verified") != n:
                            raise LostRound("the plain loop did not verify every host: " + "; ".join(
                                f"{a}: {st}" for a, st in zip(aliases, states, strict=True) if st != "verified"))

                    await measure(rounds, [("A", side_a, sa), ("B", side_b, sb)], lambda: _reset(tk_b, originals),
                                  lost)
                    k = 20
                    steps = [{"activity": "fleet.host_memory", "args": {"host": aliases[0]}}] * k
                    for _ in range(p.pick(5, 2)):
                        t0 = time.perf_counter()
                        await client.execute_workflow(FleetSteps.run, steps, id=f"steps-{uuid.uuid4().hex[:8]}",
                                                      task_queue=queue)
                        act.append((time.perf_counter() - t0) * 1000 / k)
                        for _ in range(k):
                            t1 = time.perf_counter()
                            await tk_b.host_memory(host=aliases[0])
                            direct.append((time.perf_counter() - t1) * 1000)
            finally:
                stop.set()
    return [Row("fleet_rollout", f"rollout of {n} embedded nodes in waves of {wave}: FleetRollout vs the same "
                                 "steps in a plain anyio loop over the Toolkit",
                Side("FleetRollout (dev server, 1 worker)", "s", sa), Side("anyio loop over Toolkit", "s", sb),
                Target("max_ratio", 1.3), note="wall time per rollout; model load 1 s per node"
                + "".join(f"; {x}" for x in lost),
                pending_reason="" if sa and sb else (lost[-1] if lost else "no round was measured")),
            Row("fleet_activity", "one activity (fleet.host_memory in FleetSteps) vs the direct tool call",
                Side("activity", "ms", act), Side("Toolkit.host_memory", "ms", direct), Target("report"),
                note="per call; the activity adds scheduling, history and the server's round trips")]
