"""``wait_until``: poll a condition until it holds, within a time limit (for tests of things that change on
their own: a process that exits, a port that opens, a state on another machine).

Polling is for state that gives no event to await (a host's ``/proc``, a unit's state, a remote file); where
an event exists (an ``anyio.Event``, a process's exit, a stream's EOF), await it instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast, overload

import anyio

__all__ = ["WaitTimeout", "wait_until"]

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """:func:`wait_until`'s condition did not hold in time.

    :ivar what: what was waited for (the caller's words). :ivar timeout_s: the limit, in seconds.
    """

    def __init__(self, what: str, timeout_s: float) -> None:
        super().__init__(f"timed out after {timeout_s:g} s waiting for {what}")
        self.what = what
        self.timeout_s = timeout_s


@overload
async def wait_until(condition: Callable[[], Awaitable[T]], what: str, *, timeout_s: float = ...,
                     interval_s: float = ...) -> T: ...
@overload
async def wait_until(condition: Callable[[], T], what: str, *, timeout_s: float = ...,
                     interval_s: float = ...) -> T: ...
async def wait_until(condition: Callable[[], T | Awaitable[T]], what: str, *, timeout_s: float = 10.0,
                     interval_s: float = 0.05) -> T:
    """Call ``condition`` every ``interval_s`` seconds until it returns a true value; return that value.

    :param condition: a function of no arguments, sync or async (an awaitable result is awaited). Its first
        true value (``bool(value)``) ends the wait. An exception it raises ends the wait and propagates.
    :param what: what is waited for, in words (``"the job's processes to exit"``): the error names it.
    :param timeout_s: the limit in seconds (float, > 0), on the event loop's clock (``anyio.current_time``),
        counted from the call. An async condition still running at the limit is cancelled; a sync one that
        blocks is not interrupted (the limit is checked when it returns).
    :param interval_s: seconds (float, > 0) between the end of one call and the start of the next.
    :raises WaitTimeout: (a :class:`TimeoutError`) the condition did not hold within ``timeout_s``; its message
        names ``what`` and the limit.
    :raises ValueError: ``timeout_s`` or ``interval_s`` is not > 0.
    """
    if not timeout_s > 0 or not interval_s > 0:
        raise ValueError(f"wait_until needs timeout_s > 0 and interval_s > 0, got {timeout_s!r} and {interval_s!r}")
    with anyio.move_on_after(timeout_s):
        while True:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return cast(T, value)
            await anyio.sleep(interval_s)
    raise WaitTimeout(what, timeout_s)
