"""Probe specifications (pydantic; JSON-ready so they live in the journal and in policy files)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ..errors import BadArguments

__all__ = ["GpuMemoryProbe", "HostMemoryProbe", "HttpProbe", "LogProbe", "PortProbe", "ProbeSpec",
           "SystemdUnitProbe", "probe_from_dict"]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SystemdUnitProbe(_Spec):
    """A systemd unit is up in a *new* invocation, and has stayed up (systemctl show; systemd.service(5)).

    systemd calls a unit started at different moments by its ``Type=``: ``simple`` right after fork(),
    ``exec`` after execve(), ``forking`` when the parent exits, ``oneshot`` when the process exits, ``notify``
    on READY=1, ``dbus`` once the bus name is taken. So ``ActiveState=active`` proves readiness only for the
    notify and dbus types; for the others the unit must also stay active for ``settle_s`` seconds (timed on
    the host: ``ActiveEnterTimestampMonotonic`` against ``/proc/uptime``).

    * passes: active in an invocation other than ``not_invocation`` (``InvocationID``, systemd >= 232), for
      ``settle_s``; or a ``Type=oneshot`` unit whose new invocation ended with ``Result=success``.
    * not yet: the restart has not begun (same invocation), ``activating`` (a notify unit before READY=1, or
      ``auto-restart`` after a crash: the evidence counts the restarts), active for less than ``settle_s``.
    * fails (terminal): the new invocation is ``failed``, or ended by itself (a service that is not running
      is not ready; a stop requested before it was ready reads as the end of the following, which a job
      counts as failed); a start attempt that made no new invocation (start limit hit, a failed
      ``Condition*=``/``Assert*=``); and, once passed, that invocation's end: the unit failed or exited, or
      systemd restarted it after a crash (``NRestarts`` grew). A later explicit restart or a stop on request
      ends the following without failing (the verdict was true for its time).

    systemd unloads an inactive unit at once (``InvocationID`` then reads empty), so how an invocation ended
    is read from the journal then (the manager's MESSAGE_IDs; see :mod:`agent_tools.probes.systemd`).
    """

    kind: Literal["systemd_unit"] = "systemd_unit"
    unit: str = Field(description="unit name, e.g. sglang.service")
    not_invocation: str | None = Field(default=None, description="InvocationID before the restart: the unit "
                                                                  "must be in a different invocation to pass")
    settle_s: float | None = Field(default=None, ge=0, le=3600,
                                   description="seconds the unit must stay active in its new invocation before "
                                               "it passes; default 3 s for Type=simple/exec/forking/oneshot/idle "
                                               "(systemd calls them started before they are ready), 0 s for "
                                               "Type=notify/notify-reload/dbus")
    before_condition_us: int | None = Field(default=None, ge=0,
                                            description="ConditionTimestampMonotonic (microseconds) before the "
                                                        "restart (set by the tools): a start attempt after it that "
                                                        "made no new invocation fails the probe")
    journal_cursor: str | None = Field(default=None, description="journal cursor from before the restart (set by "
                                                                  "the tools): the failure evidence is the unit's "
                                                                  "journal lines after it")


class HttpProbe(_Spec):
    """An HTTP endpoint answers ``expect_status`` (and ``body_regex``), reached from the host itself.

    "Connection refused" and 503 are "not yet" (SGLang keeps its port closed while loading and answers 503
    on /health while starting).
    """

    kind: Literal["http"] = "http"
    url: str = Field(description="http://HOST:PORT/PATH as seen from the host, e.g. http://127.0.0.1:30000/health")
    expect_status: int = Field(default=200, ge=100, le=599)
    body_regex: str | None = Field(default=None, description="regex the body must match")
    timeout_s: float = Field(default=5.0, gt=0, description="seconds for one request")


class LogProbe(_Spec):
    """A line matching ``pattern`` appears in a unit's journal (``journalctl -u UNIT -o json --after-cursor``)
    or in a log file, after the probe's start point. ``fail_pattern`` makes a matching line a terminal failure."""

    kind: Literal["log"] = "log"
    unit: str | None = Field(default=None, description="systemd unit whose journal to follow")
    path: str | None = Field(default=None, description="log file to follow (instead of a unit)")
    pattern: str = Field(description="regex of the ready line")
    fail_pattern: str | None = Field(default=None, description="regex of a line that means failure")
    cursor: str | None = Field(default=None, description="journal cursor to start after (set by the tools)")
    offset: int = Field(default=0, ge=0, description="file byte offset to start at (for path)")


class PortProbe(_Spec):
    """A TCP port accepts connections (from the host itself)."""

    kind: Literal["port"] = "port"
    port: int = Field(ge=1, le=65535)
    address: str = Field(default="127.0.0.1")


class GpuMemoryProbe(_Spec):
    """GPU memory (``nvidia-smi --query-gpu=index,memory.used,memory.total``) is in a range on every GPU
    (e.g. ``min_used_mib`` once weights are loaded, ``max_used_mib`` after a stop)."""

    kind: Literal["gpu_memory"] = "gpu_memory"
    min_used_mib: int | None = Field(default=None, ge=0)
    max_used_mib: int | None = Field(default=None, ge=0)


class HostMemoryProbe(_Spec):
    """Host memory available (``free -b``) is at least ``min_available_bytes``."""

    kind: Literal["host_memory"] = "host_memory"
    min_available_bytes: int = Field(ge=0)


ProbeSpec = Annotated[
    SystemdUnitProbe | HttpProbe | LogProbe | PortProbe | GpuMemoryProbe | HostMemoryProbe,
    Field(discriminator="kind"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(ProbeSpec)


def probe_from_dict(data: dict[str, Any] | BaseModel) -> SystemdUnitProbe | HttpProbe | LogProbe | PortProbe | \
        GpuMemoryProbe | HostMemoryProbe:
    """Validate a probe spec given as a dict (``{"kind": "http", "url": ...}``).

    :raises BadArguments: unknown kind or invalid fields (the message names them).
    """
    if isinstance(data, BaseModel):
        return data  # type: ignore[return-value]
    try:
        return _ADAPTER.validate_python(data)  # type: ignore[no-any-return]
    except Exception as exc:  # pydantic.ValidationError
        raise BadArguments(f"invalid probe {data!r}: {exc}") from exc
