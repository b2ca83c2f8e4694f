"""A virtual clock for asyncio: loop time that jumps ahead when the loop has nothing to do.

:class:`VirtualClockLoop` is an :class:`asyncio.SelectorEventLoop` whose :meth:`~VirtualClockLoop.time` is a
counter instead of :func:`time.monotonic`. Each turn, asyncio asks its selector to wait until the next timer
(``select(timeout)``). The loop's selector first polls real I/O without waiting; when nothing is ready and a
timer is due later, it moves the counter forward by ``timeout`` and returns at once, so the timer fires now.
``anyio.sleep(600)``, ``anyio.move_on_after(15)`` and ``anyio.current_time()`` all run on this counter, and a
15-minute replay takes milliseconds. This is trio's ``MockClock(autojump_threshold=0)`` idea, for asyncio.

Sharp edges (the same as trio's autojump):

* Work done outside the loop (threads, subprocesses, sockets to real servers) takes no virtual time, and the
  clock jumps while such work is in flight unless ``autojump_threshold_s`` > 0: then the loop first waits
  that long in *real* time for I/O before jumping (threads report back through the loop's self-pipe).
  Replays do no outside work, so the default is 0.
* When no timer is scheduled and nothing is ready, only outside I/O can wake the loop. That is a deadlock in
  a replay: after ``deadlock_timeout_s`` real seconds the loop raises :class:`VirtualClockDeadlock`.

Why not a library: ``looptime`` (PyPI, nolar) does this for pytest-asyncio and was checked first. Installed,
its pytest plugin patches every pytest-asyncio event loop of the whole test suite (enabled on demand), and it
would become a runtime dependency of agent_tools' own pytest plugin; it also spends 42 no-op loop cycles
before every jump by default. The part needed here is ~40 lines on documented asyncio extension points (a
loop subclass overriding ``time()`` plus a selector), so it lives here.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio

from ..clock import wall_follows_loop

__all__ = ["VirtualClockDeadlock", "VirtualClockLoop", "run_virtual"]

T = TypeVar("T")


class VirtualClockDeadlock(RuntimeError):
    """Every task waits and no timer is scheduled: nothing but outside I/O could ever wake the loop."""


class _JumpingSelector(selectors.BaseSelector):
    """Delegates to a real selector; turns "wait ``timeout`` for I/O" into "advance the clock by ``timeout``"."""

    def __init__(self, inner: selectors.BaseSelector, loop: VirtualClockLoop) -> None:
        self._inner = inner
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._inner.select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        threshold = self._loop.autojump_threshold_s
        if threshold > 0:
            ready = self._inner.select(threshold)
            if ready:
                return ready
        if timeout is None:
            limit = self._loop.deadlock_timeout_s
            ready = self._inner.select(limit)
            if not ready and limit is not None:
                raise VirtualClockDeadlock(
                    f"virtual clock: every task is waiting, no timer is scheduled and no I/O came within {limit:g} "
                    "real seconds (a replayed read that the recording never answered, with no deadline around it?)")
            return ready
        self._loop.advance(timeout)
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a virtual clock that jumps to the next timer whenever the loop is idle.

    :param start_s: the loop time at creation (seconds, float).
    :param autojump_threshold_s: real seconds to wait for outside I/O before jumping (0: jump at once).
    :param deadlock_timeout_s: real seconds to wait when no timer is scheduled before raising
        :class:`VirtualClockDeadlock` (None: wait forever, like a normal loop).
    """

    def __init__(self, *, start_s: float = 0.0, autojump_threshold_s: float = 0.0,
                 deadlock_timeout_s: float | None = 10.0) -> None:
        self._virtual_now = float(start_s)
        self.autojump_threshold_s = autojump_threshold_s
        self.deadlock_timeout_s = deadlock_timeout_s
        self.jumped_s = 0.0
        super().__init__(_JumpingSelector(selectors.DefaultSelector(), self))

    def time(self) -> float:
        """The virtual loop time in seconds."""
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (>= 0); timers that become due run on the next turn."""
        if seconds > 0:
            self._virtual_now += seconds
            self.jumped_s += seconds


def run_virtual(fn: Callable[[], Awaitable[T]], *, wall_start: float | None = None,
                autojump_threshold_s: float = 0.0, deadlock_timeout_s: float | None = 10.0) -> T:
    """Run ``fn()`` to completion on a fresh :class:`VirtualClockLoop` (anyio, asyncio backend).

    Must be called where no event loop is running (a plain function or a synchronous test).

    :param wall_start: when given, :func:`agent_tools.clock.wall_time` starts at this unix time and advances
        with the virtual loop clock (a replay passes the recording's start); None keeps the real wall clock.
    :param autojump_threshold_s: see :class:`VirtualClockLoop`.
    :param deadlock_timeout_s: see :class:`VirtualClockLoop`.
    :returns: what ``fn`` returns. :raises VirtualClockDeadlock: the code under test waits for nothing.
    """

    async def main() -> T:
        if wall_start is None:
            return await fn()
        with wall_follows_loop(wall_start):
            return await fn()

    def factory() -> asyncio.AbstractEventLoop:
        return VirtualClockLoop(autojump_threshold_s=autojump_threshold_s, deadlock_timeout_s=deadlock_timeout_s)

    return anyio.run(main, backend="asyncio", backend_options={"loop_factory": factory})
