"""The owner of a host's background work: every task it starts and every timer it sets, ended by ``aclose``.

A host is created without an event loop and used from whatever task calls it, so its background work (connect
attempts that outlive the caller that started them, warm sessions being started, channels closing after their
call, the end of a liveness wait) cannot live in an ``async with`` task group of its own. :class:`Background`
gives the same guarantee: it holds a strong reference to each task (asyncio keeps only weak ones), retrieves
the exception of a task nobody awaits (no "exception was never retrieved"), and :meth:`Background.aclose`
cancels every task and waits for each to end, and runs every pending timer's callback at once, so nothing the
host started outlives it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import structlog

log = structlog.get_logger(__name__)

T = TypeVar("T")

#: how long :meth:`Background.aclose` waits for cancelled tasks to end (seconds); one that does not is logged
CLOSE_WAIT_S = 5.0


class Background:
    """The tasks and timers of one owner (an :class:`~agent_tools.hosts.ssh.SshHost`)."""

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: dict[asyncio.TimerHandle, Callable[[], None]] = {}

    def __len__(self) -> int:
        """Tasks and timers not yet ended."""
        return len(self._tasks) + len(self._timers)

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``coro`` as a task owned here. Its exception is retrieved when it ends (an awaiter still gets it).

        :raises RuntimeError: no running event loop (``coro`` is closed, never run).
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            raise
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a failure nobody awaits any more is no error

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` after ``delay_s`` seconds (loop clock), or at :meth:`aclose` if that comes first.

        :raises RuntimeError: no running event loop.
        """
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.pop(handle, None)
            callback()

        handle = loop.call_later(delay_s, fire)
        self._timers[handle] = callback

    async def aclose(self) -> None:
        """Cancel every task and wait for each to end (also tasks started meanwhile, for up to
        :data:`CLOSE_WAIT_S`); run every pending timer's callback now. Never raises for a task's failure."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLOSE_WAIT_S
        # tasks of another (finished) event loop cannot be awaited here, nor run again: forget them
        self._tasks = {t for t in self._tasks if t.get_loop() is loop}
        self._timers = {h: cb for h, cb in self._timers.items() if not h.cancelled()}
        while self._tasks:
            left = deadline - loop.time()
            if left <= 0:
                log.warning("background.tasks_left", owner=self._owner, tasks=len(self._tasks))
                break
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=left)
        while self._timers:
            handle, callback = self._timers.popitem()
            handle.cancel()
            callback()
