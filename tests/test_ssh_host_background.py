"""``SshHost`` owns its background work, on the real OpenSSH sshd on loopback: the connect attempts that outlive
the caller that started them, the warm sessions being started, the channels closing after their call and the
ends of liveness waits all belong to the host, and ``aclose()`` cancels and awaits them, so no task the host
started is still pending when ``aclose()`` returns."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import anyio
import pytest

from agent_tools.hosts import SshHost
from agent_tools.hosts.base import run_on
from agent_tools.hosts.ssh import WARM_READY
from agent_tools.testing import wait_until

from .conftest import ssh_host_for
from .sshd import RealSshd

pytestmark = pytest.mark.sshd


def _pending_since(before: set[asyncio.Task[object]]) -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t not in before and not t.done()]


def _warm_factory() -> tuple[str, str]:
    return "token", f"echo '{WARM_READY.decode()}'; cat >/dev/null"


async def test_no_task_outlives_aclose_after_calls_and_warm_sessions(real_sshd: RealSshd) -> None:
    """Calls close their channels in the background and each close starts warm sessions; ``aclose()`` right
    after a call (while those are under way) leaves none of them running."""
    before = asyncio.all_tasks()
    host = ssh_host_for(real_sshd, warm_sessions=2)
    try:
        assert await host.take_warm("k", _warm_factory) is None  # asks for the key: refills start after calls
        res = await run_on(host, "echo hi")
        assert res.stdout.strip() == b"hi"
        await host.wait_warm()
        assert host.warm_count("k") == 2
        await run_on(host, "true")  # its close and the refill it starts are under way now
    finally:
        await host.aclose()
    assert _pending_since(before) == []
    # the host is usable again after aclose (the next call connects anew), and closes as cleanly
    try:
        assert (await run_on(host, "echo again")).stdout.strip() == b"again"
    finally:
        await host.aclose()
    assert _pending_since(before) == []


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port whose kernel completes the TCP handshake (listen backlog) and that never says a word:
    an SSH connect to it waits for the server's banner until its own deadline."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


async def test_aclose_ends_a_connect_attempt_its_caller_gave_up_on(real_sshd: RealSshd, silent_port: int) -> None:
    """A connect attempt goes on after the caller that started it gave up (so a slow connect still ends up
    pooled); ``aclose()`` cancels it and waits for it to end."""
    before = asyncio.all_tasks()
    host: SshHost = ssh_host_for(real_sshd, hostname="127.0.0.1", port=silent_port, connect_timeout_s=60)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.connection)
            progress = await wait_until(lambda: (p := host.connect_progress()) is not None and p.tcp_s is not None,
                                        "the attempt's TCP connection to the silent port")
            assert progress
            tg.cancel_scope.cancel()  # the caller gives up; the attempt goes on
        assert host.connect_progress() is not None
    finally:
        await host.aclose()
    assert host.connect_progress() is None
    assert _pending_since(before) == []
