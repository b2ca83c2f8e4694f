"""Readiness probes: typed specs with an async check returning passed / not_yet / failed plus evidence.

Probe kinds (the ``kind`` field): ``systemd_unit``, ``http``, ``log``, ``port``, ``gpu_memory``,
``host_memory``. Every check goes through the :class:`~agent_tools.hosts.base.Host` seam, so services that
bind 127.0.0.1 on a remote machine are reached over SSH (``direct-tcpip``).
"""

from .checks import ProbeResult, check_probe, check_probes
from .parse import parse_free, parse_nvidia_smi, parse_systemctl_show, parse_timespan_s
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
    "check_probe",
    "check_probes",
    "parse_free",
    "parse_nvidia_smi",
    "parse_systemctl_show",
    "parse_timespan_s",
    "probe_from_dict",
]
