"""The child controller process of the reliability tests (controller crash, cross-process duplicate launch): a
small program using the library as an agent's controller would, started (and killed) by the tests.

Usage: ``python3 tests/controller_child.py CONFIG_JSON`` with the repository on ``PYTHONPATH``. CONFIG_JSON:
``ssh_config`` (path), ``journal`` (path), ``host`` (alias), ``jobs`` (a list of ``{"tag", "command",
"budget_s", "key"?}``), optional ``go_file`` (wait until this file exists before launching) and ``hold`` (stay
alive after the launches, to be killed). Prints ``READY``, then one JSON line per job (``tag``, ``outcome``,
``job_id``, ``kind``), then ``ALLDONE``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.factory import load_policies
from agent_tools.tools.toolkit import Toolkit


def wait_for_go(go_file: str | None) -> None:
    """Block until ``go_file`` exists (none: return at once). Blocking on purpose: nothing else runs in this
    process yet, and a 2 ms poll releases every child the test started at the same moment."""
    while go_file and not Path(go_file).exists():
        time.sleep(0.002)


async def main() -> None:
    cfg = json.loads(sys.argv[1])
    policy = load_policies([cfg["policy"]]) if cfg.get("policy") else None
    tk = Toolkit(HostRegistry(ssh_config=[cfg["ssh_config"]]), journal=Journal(cfg["journal"]), policy=policy)
    print("READY", flush=True)
    wait_for_go(cfg.get("go_file"))

    async def one(job: dict[str, Any]) -> None:
        out = await tk.run_command(host=cfg["host"], command=job["command"], budget_s=job["budget_s"],
                                   idempotency_key=job.get("key"))
        line = {"tag": job["tag"], "outcome": out.outcome, "job_id": getattr(out, "job_id", None),
                "kind": getattr(out, "kind", None)}
        if job.get("result"):
            line["result"] = out.model_dump(mode="json")
        print(json.dumps(line), flush=True)

    async with anyio.create_task_group() as tg:
        for job in cfg["jobs"]:
            tg.start_soon(one, job)
    print("ALLDONE", flush=True)
    if cfg.get("hold"):
        await anyio.sleep(3600)
    await tk.aclose()


if __name__ == "__main__":
    anyio.run(main)
