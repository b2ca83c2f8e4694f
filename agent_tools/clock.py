"""Time sources: loop time for durations, wall time for timestamps.

Two clocks are used everywhere above the host layer:

* **loop time** — :func:`anyio.current_time` (the event loop's monotonic clock) for every duration, budget
  and deadline (``anyio.sleep``, ``anyio.move_on_after``). A replay runs on a virtual loop clock
  (:class:`agent_tools.recording.vclock.VirtualClockLoop`), so these never wait in real time there.
* **wall time** — :func:`wall_time` (unix seconds) for timestamps that must survive a process restart (a
  job's ``created_at`` in the journal, ``elapsed_s`` of a job across processes).

Normally :func:`wall_time` is :func:`time.time`. A replay makes it advance with the virtual loop time from a
recorded start (:func:`wall_follows_loop`), so a 15-minute restart also *looks* 15 minutes long to the
journal. The override is a :class:`contextvars.ContextVar`: it applies to the task that set it and the tasks
it starts afterwards, never to other threads or to tests running beside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import anyio

__all__ = ["wall_clock", "wall_follows_loop", "wall_time"]

_WALL: ContextVar[Callable[[], float] | None] = ContextVar("agent_tools_wall_clock", default=None)


def wall_time() -> float:
    """Wall-clock unix time in seconds (float): :func:`time.time`, unless a :func:`wall_clock` is active."""
    source = _WALL.get()
    return source() if source is not None else time.time()


@contextmanager
def wall_clock(source: Callable[[], float]) -> Iterator[None]:
    """Make :func:`wall_time` return ``source()`` inside the block (this task and tasks it starts there).

    :param source: a function returning unix seconds (float).
    """
    token = _WALL.set(source)
    try:
        yield
    finally:
        _WALL.reset(token)


@contextmanager
def wall_follows_loop(start: float) -> Iterator[None]:
    """Inside the block, wall time is ``start`` plus the loop time elapsed since the block was entered.

    Used by replays: with a virtual loop clock the wall clock jumps ahead with it. Must be entered inside a
    running event loop (it reads :func:`anyio.current_time`).

    :param start: the wall time (unix seconds) at entry, e.g. the recording's start.
    """
    t0 = anyio.current_time()
    with wall_clock(lambda: start + (anyio.current_time() - t0)):
        yield
