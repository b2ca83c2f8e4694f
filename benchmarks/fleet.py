"""A fleet of in-process asyncssh servers (:class:`~agent_tools.testing.EmbeddedHost`) in *this* process.

``python -m benchmarks.fleet COUNT ROOT HOME`` starts ``COUNT`` servers on loopback ports, each with its
own keys and client config under ``ROOT/<alias>/``, prints one JSON line ``{"hosts": [{"alias": ...,
"config": ...}, ...]}`` on stdout once all listen, and serves until its stdin reaches EOF (the parent closed
it, or died) or it gets SIGTERM/SIGINT. Commands run as the current user with ``HOME=HOME``.

The benchmark runs the fleet in its own process so the client under test does not share its event loop
(and its CPU core) with the servers.
"""

from __future__ import annotations

import json
import signal
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import anyio

from agent_tools.logs import configure_logging
from agent_tools.testing import EmbeddedHost


async def _serve(count: int, root: Path, home: str) -> None:
    async with AsyncExitStack() as stack:
        hosts: list[EmbeddedHost] = []
        for i in range(count):
            alias = f"fleet{i:03d}"
            eh = EmbeddedHost(root=root / alias, alias=alias, env={"HOME": home})
            await stack.enter_async_context(eh)
            hosts.append(eh)
        sys.stdout.write(json.dumps({"hosts": [{"alias": h.alias, "config": str(h.config_path), "port": h.port}
                                               for h in hosts]}) + "\n")
        sys.stdout.flush()
        async with anyio.create_task_group() as tg:

            async def wait_stdin_eof() -> None:
                await anyio.to_thread.run_sync(sys.stdin.buffer.read, abandon_on_cancel=True)
                tg.cancel_scope.cancel()

            async def wait_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(wait_stdin_eof)
            tg.start_soon(wait_signal)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m benchmarks.fleet COUNT ROOT HOME", file=sys.stderr)
        return 2
    configure_logging("warning")
    anyio.run(_serve, int(argv[0]), Path(argv[1]), argv[2])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
