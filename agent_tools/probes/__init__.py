"""Readiness probes: typed specs with an async check returning passed / not_yet / failed plus evidence.

Probe kinds (the ``kind`` field): ``systemd_unit``, ``http``, ``log``, ``port``, ``gpu_memory``,
``host_memory``. Every check goes through the :class:`~agent_tools.hosts.base.Host` seam, so services that
bind 127.0.0.1 on a remote machine are reached over SSH (``direct-tcpip``).

:func:`check_probes` checks a job's unit probes first and counts the others only against the units' new
processes; :func:`~agent_tools.probes.readiness.judge` turns the results and the command's state into the
job's readiness, again on every look (see :mod:`agent_tools.probes.readiness`).
"""

from .checks import check_probe, check_probes
from .parse import parse_free, parse_nvidia_smi, parse_systemctl_show, parse_timespan_s
from .readiness import Verdict, judge
from .result import ProbeResult
from .specs import (
    GpuMemoryProbe,
    HostMemoryProbe,
    HttpProbe,
    LogProbe,
    PortProbe,
    ProbeSpec,
    SystemdUnitProbe,
    probe_from_dict,
)

__all__ = [
    "GpuMemoryProbe",
    "HostMemoryProbe",
    "HttpProbe",
    "LogProbe",
    "PortProbe",
    "ProbeResult",
    "ProbeSpec",
    "SystemdUnitProbe",
    "Verdict",
    "check_probe",
    "check_probes",
    "judge",
    "parse_free",
    "parse_nvidia_smi",
    "parse_systemctl_show",
    "parse_timespan_s",
    "probe_from_dict",
]
