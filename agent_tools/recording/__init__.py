"""Cassettes: record a session at the hosts/ and tools/ seams, replay it in tests on a virtual clock.

::

    Recorder, RecordingHost, RecordingToolkit      record (real hosts, real time)
    Cassette                                       the versioned JSON-lines file (docs/cassettes.md)
    ReplaySession, ReplayHost, ReplayToolkit       replay (matching, id mapping, recorded timing)
    VirtualClockLoop, run_virtual                  asyncio on a virtual clock that jumps when idle
    CassetteSession                                one test's cassette in a record mode (the pytest plugin)
"""

from .cassette import CASSETTE_VERSION, Cassette, ToolCall
from .ids import IdMap, normalise_ids
from .record import Recorder, RecordingHost, RecordingHostRegistry, RecordingToolkit
from .replay import (
    ExecRequest,
    Matcher,
    ReplayHost,
    ReplayHostRegistry,
    ReplaySession,
    ReplayToolkit,
    abstract_scripts,
    default_matcher,
    strict_matcher,
)
from .session import RECORD_MODES, CassetteSession, HostsFactory, RecordMode
from .vclock import VirtualClockDeadlock, VirtualClockLoop, run_virtual

__all__ = [
    "CASSETTE_VERSION",
    "RECORD_MODES",
    "Cassette",
    "CassetteSession",
    "ExecRequest",
    "HostsFactory",
    "IdMap",
    "Matcher",
    "RecordMode",
    "Recorder",
    "RecordingHost",
    "RecordingHostRegistry",
    "RecordingToolkit",
    "ReplayHost",
    "ReplayHostRegistry",
    "ReplaySession",
    "ReplayToolkit",
    "ToolCall",
    "VirtualClockDeadlock",
    "VirtualClockLoop",
    "abstract_scripts",
    "default_matcher",
    "normalise_ids",
    "run_virtual",
    "strict_matcher",
]
