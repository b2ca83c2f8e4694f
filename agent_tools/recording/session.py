"""One cassette, used by one test: record it against real hosts, or replay it on a virtual clock.

Record modes (the names and meanings of vcrpy / pytest-recording):

==================  ======================================================================================
``none``            replay only; a missing cassette is an error (the default: tests never touch real hosts)
``once``            replay when the cassette exists, else record it
``new_episodes``    replay what matches, send unmatched requests to the real hosts and append them
``all``             always record (re-record), overwriting the cassette
==================  ======================================================================================

Replays run on a :class:`~.vclock.VirtualClockLoop` with the wall clock starting at the recording's start;
recordings (and ``new_episodes``, which mixes in real hosts) run on a normal event loop.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Literal, TypeVar, get_args

import anyio

from ..errors import ReplayError
from ..hosts.registry import HostRegistry
from ..jobs.journal import Journal
from ..tools.toolkit import Toolkit
from .cassette import Cassette
from .record import TYPED_CALLS_HEADER, Recorder, RecordingHostRegistry, RecordingToolkit
from .replay import ReplaySession, ReplayToolkit
from .vclock import run_virtual

__all__ = ["RECORD_MODES", "CassetteSession", "HostsFactory", "RecordMode"]

T = TypeVar("T")
RecordMode = Literal["none", "once", "new_episodes", "all"]
RECORD_MODES: tuple[str, ...] = get_args(RecordMode)

#: makes the real hosts to record against: an async context manager yielding a :class:`HostRegistry`
HostsFactory = Callable[[], AbstractAsyncContextManager[HostRegistry]]


class CassetteSession:
    """A cassette bound to a :class:`Toolkit` (:attr:`toolkit`) and a way to run code with it (:meth:`run`).

    :param path: the cassette file (``.jsonl``).
    :param mode: a record mode (see the module docstring).
    :param hosts: the real hosts to record against (needed when recording).
    :param state_dir: a private directory for the job journal of the run.
    :param name: the cassette's name (default: the file's stem).
    :param check_tools: when replaying, compare each tool call and result with the recorded ones.
    :param extra_patterns: more redaction regexes.
    :raises ReplayError: ``mode`` is ``none`` and the cassette is missing or unreadable.
    :raises ValueError: an unknown mode.
    """

    def __init__(self, path: str | os.PathLike[str], mode: str = "none", *, hosts: HostsFactory | None = None,
                 state_dir: str | os.PathLike[str], name: str | None = None, check_tools: bool = True,
                 extra_patterns: Iterable[str] = ()) -> None:
        if mode not in RECORD_MODES:
            raise ValueError(f"record mode must be one of {', '.join(RECORD_MODES)}, got {mode!r}")
        self.path = Path(path)
        self.mode = mode
        self.hosts = hosts
        self.name = name or self.path.stem
        self.journal = Journal(Path(state_dir) / "journal.sqlite3")
        self.last_run_s: float | None = None
        patterns = tuple(extra_patterns)
        exists = self.path.exists()
        self.cassette: Cassette | None = None
        self.replay: ReplaySession | None = None
        self.recorder: Recorder | None = None
        self._recording_registry: RecordingHostRegistry | None = None
        self.toolkit: Toolkit
        if mode == "none" or (mode == "once" and exists):
            self.cassette = Cassette.load(self.path)
            self.replay = ReplaySession(self.cassette, extra_patterns=patterns)
            self.toolkit = ReplayToolkit(self.replay.registry(), session=self.replay, check_tools=check_tools,
                                         journal=self.journal)
        elif mode == "new_episodes" and exists:
            self.cassette = Cassette.load(self.path)
            last_id = max((int(e["id"]) for e in self.cassette.events if "id" in e), default=0)
            self.recorder = Recorder(self.name, extra_patterns=patterns, first_id=last_id + 1)
            self._recording_registry = RecordingHostRegistry(None, self.recorder)
            self.replay = ReplaySession(self.cassette, extra_patterns=patterns, fallback=self._recording_registry)
            self.toolkit = RecordingToolkit(self.replay.registry(), recorder=self.recorder, journal=self.journal)
        else:
            self.recorder = Recorder(self.name, extra_patterns=patterns)
            self._recording_registry = RecordingHostRegistry(None, self.recorder)
            self.toolkit = RecordingToolkit(self._recording_registry, recorder=self.recorder, journal=self.journal)

    @property
    def recording(self) -> bool:
        """True when :meth:`run` talks to real hosts (and writes the cassette)."""
        return self.recorder is not None

    def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn()`` (which uses :attr:`toolkit`) to completion, from a synchronous caller.

        Replaying: on a virtual clock, then :meth:`ReplaySession.assert_all_used`. Recording: against the
        hosts from ``hosts``, then the redacted cassette is written to :attr:`path`.

        :raises ReplayError: the replay did not match the cassette (raised at the tool call that met the mismatch,
            with its diff; and in place of any other exception ``fn`` raised after a mismatch), or recording
            without ``hosts``.
        """
        t0 = time.perf_counter()
        try:
            if self.recorder is None:
                assert self.replay is not None and self.cassette is not None
                replay = self.replay

                async def replay_main() -> T:
                    replay.start()
                    return await fn()

                try:
                    result = run_virtual(replay_main, wall_start=self.cassette.wall_start)
                except Exception as exc:  # e.g. the test's own assert on an error outcome: the replay's cause first
                    if replay.failures and exc is not replay.failures[0]:
                        raise replay.failures[0] from exc
                    raise
                replay.assert_all_used()
                return result
            return anyio.run(self._record_main, fn)
        finally:
            self.last_run_s = time.perf_counter() - t0
            self.journal.close()

    async def _record_main(self, fn: Callable[[], Awaitable[T]]) -> T:
        assert self.recorder is not None and self._recording_registry is not None
        if self.hosts is None:
            raise ReplayError(f"cannot record cassette {self.name!r} (mode {self.mode}): no hosts to record "
                              "against; provide a host factory (the agent_tools_hosts fixture)")
        async with self.hosts() as registry:
            self._recording_registry.bind(registry)
            if self.replay is not None and self.cassette is not None:
                self.replay.start()
                self.recorder.start(origin=self.replay.origin, wall_start=self.cassette.wall_start)
            else:
                self.recorder.start()
            result = await fn()
        self._save()
        return result

    def _save(self) -> None:
        assert self.recorder is not None
        new = self.recorder.cassette()
        if self.cassette is not None and self.replay is not None:
            # new_episodes: keep the old host events, add the new ones, and take this run's tool calls with the
            # ids it shared with old interactions written as the recorded ids
            old = [e for e in self.cassette.events if e.get("ev") not in ("tool", "tool_result")]
            ids = self.replay.ids
            fresh = [json.loads(ids.to_recorded(json.dumps(e))) if e.get("ev") in ("tool", "tool_result") else e
                     for e in new.events]
            events = sorted([*old, *fresh], key=lambda e: float(e["t"]))
            new = Cassette(dict(self.cassette.header, redacted=True, **{TYPED_CALLS_HEADER: True}), events)
        new.save(self.path)
