"""agent_tools.testing, the kit users' own tests import: wait_until's contract and free_port."""

from __future__ import annotations

import socket

import anyio
import pytest

from agent_tools.testing import WaitTimeout, free_port, wait_until


async def test_wait_until_returns_the_first_true_value_of_a_sync_or_async_condition() -> None:
    calls: list[int] = []

    def sync() -> str | None:
        calls.append(1)
        return "up" if len(calls) == 3 else None

    assert await wait_until(sync, "the third call", interval_s=0.001) == "up"
    assert len(calls) == 3

    async def asynchronous() -> int:
        await anyio.sleep(0)
        return len(calls)

    assert await wait_until(asynchronous, "a count") == 3


async def test_wait_until_names_what_it_waited_for_when_the_time_is_up() -> None:
    with pytest.raises(WaitTimeout, match=r"^timed out after 0\.2 s waiting for the moon to rise$") as err:
        await wait_until(lambda: False, "the moon to rise", timeout_s=0.2, interval_s=0.01)
    assert isinstance(err.value, TimeoutError)
    assert (err.value.what, err.value.timeout_s) == ("the moon to rise", 0.2)


async def test_wait_until_cancels_an_async_condition_that_hangs_at_the_limit() -> None:
    cancelled = anyio.Event()

    async def hangs() -> bool:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return True  # pragma: no cover - never reached

    with pytest.raises(WaitTimeout, match="a hanging check"):
        await wait_until(hangs, "a hanging check", timeout_s=0.2)
    assert cancelled.is_set()


async def test_wait_until_lets_the_conditions_error_through_and_refuses_bad_limits() -> None:
    def broken() -> bool:
        raise KeyError("no such unit")

    with pytest.raises(KeyError, match="no such unit"):
        await wait_until(broken, "a unit")
    for bad in ({"timeout_s": 0}, {"interval_s": -1.0}, {"timeout_s": float("nan")}):
        with pytest.raises(ValueError, match="timeout_s > 0 and interval_s > 0"):
            await wait_until(lambda: True, "anything", **bad)


def test_free_port_is_a_bindable_loopback_port() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # it was free a moment ago (nothing else here takes ports on purpose)
        s.listen(1)
