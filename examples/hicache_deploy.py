"""Deploy SGLang's hierarchical KV cache (hicache) the way an agent should, with agent_tools.

    python examples/hicache_deploy.py                      # embedded simulated GPU node (no root, no network)
    python examples/hicache_deploy.py --profile small_ram  # the server refuses: the unit is rolled back
    python examples/hicache_deploy.py --host gpu-node-1    # a real host (alias from ~/.ssh/config)
    python examples/hicache_deploy.py --json               # the transcript as JSON lines

Same walkthrough as ``agent-tools demo hicache`` (agent_tools/demo/hicache.py): memory analysis, KV pool
estimate, unit edit with a diff and a backup, daemon-reload + detached restart, readiness probes (unit state,
/health, the "fired up and ready to roll" log line), verification of /get_server_info, rollback on failure.
"""

from __future__ import annotations

import argparse
import sys

import anyio

from agent_tools import Toolkit
from agent_tools.demo.hicache import run_walkthrough
from agent_tools.demo.node import run_node
from agent_tools.logs import configure_logging


async def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", help="real host alias (default: the embedded simulated node)")
    p.add_argument("--profile", default="default", choices=["default", "small_ram"])
    p.add_argument("--load-s", type=float, default=8.0, help="embedded node: simulated model load seconds")
    p.add_argument("--json", action="store_true", help="transcript as JSON lines")
    args = p.parse_args(argv)
    configure_logging("warning")  # logs to stderr; stdout is the transcript
    if args.host:
        async with Toolkit() as tk:
            res = await run_walkthrough(tk, args.host, json_lines=args.json)
    else:
        async with run_node(args.profile, load_s=args.load_s) as node:  # its jobs stay in its own journal
            res = await run_walkthrough(Toolkit(node.registry, journal=node.journal), node.alias,
                                        json_lines=args.json)
    print(f"RESULT: {res.result} — {res.summary}")
    return 0 if res.result in ("verified", "rolled_back") else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
