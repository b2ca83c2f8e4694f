"""Probe specifications (pydantic; JSON-ready so they live in the journal and in policy files).

One model per probe kind, discriminated by ``kind``; :data:`ProbeSpec` is their union and the source of the
``probes`` schema that ``restart_service`` and ``wait_for`` declare to every runtime (each field described
with its unit and default). Fields the tools set themselves (the invocation before a restart, the journal
cursor) are accepted but left out of that schema (``SkipJsonSchema``): a model has nothing to put there.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from ..errors import BadArguments

__all__ = ["GpuMemoryProbe", "HostMemoryProbe", "HttpProbe", "LogProbe", "PortProbe", "ProbeSpec",
           "SystemdUnitProbe", "check_http_url", "probe_from_dict", "with_log_units"]


def _kind_required(schema: dict[str, Any]) -> None:
    # `kind` has a default in Python (HttpProbe(url=...)), but in a list of probes it is what picks the variant.
    # No additionalProperties: false in the schema (it costs tokens in every tools/list); an unknown field is
    # still refused, by validation, with the nearest valid name.
    schema.pop("additionalProperties", None)
    props = schema.get("properties", {})
    if "kind" in props:
        props["kind"].pop("default", None)
        schema["required"] = ["kind", *[r for r in schema.get("required", []) if r != "kind"]]


def _variant(description: str) -> ConfigDict:
    """Config of one probe kind: the short description a model reads in the schema (the docstring is longer)."""
    def extra(schema: dict[str, Any]) -> None:
        _kind_required(schema)
        schema["description"] = description

    return ConfigDict(extra="forbid", json_schema_extra=extra)


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _regex(value: str | None) -> str | None:
    """A probe's regex, compiled once here so that a malformed one is refused with the call, not met by a check."""
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression ({exc})") from None
    return value


def check_http_url(url: str) -> str:
    """``url`` when a probe can GET it (``http://HOST[:PORT]/...``: a plain HTTP request, no TLS), else
    :class:`ValueError` saying why (``https://``: no TLS; no host; a port that is not a number in 1-65535)."""
    parts = urlsplit(url)
    if parts.scheme.lower() == "https":
        raise ValueError("https is not supported (no TLS): a probe sends a plain HTTP GET from the host itself; "
                         "give the service's http://127.0.0.1:PORT/PATH, or use a port probe")
    if parts.scheme.lower() != "http" or not parts.hostname:
        raise ValueError(f"{url!r} is not an http://HOST[:PORT]/PATH URL")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{url!r} has an invalid port ({exc})") from None
    if port == 0:
        raise ValueError(f"{url!r} has an invalid port (0)")
    return url


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

    model_config = _variant("unit active (in a new invocation)")

    kind: Literal["systemd_unit"] = "systemd_unit"
    unit: str = Field(description="unit name")
    not_invocation: SkipJsonSchema[str | None] = Field(
        default=None, description="InvocationID before the restart: the unit must be in a different invocation "
                                  "to pass (set by the tools)")
    settle_s: float | None = Field(default=None, description="s active before passing (default 3; 0 for "
                                                             "Type=notify, dbus)")
    before_condition_us: SkipJsonSchema[int | None] = Field(
        default=None, ge=0, description="ConditionTimestampMonotonic (microseconds) before the restart (set by the "
                                        "tools): a start attempt after it that made no new invocation fails the "
                                        "probe")
    journal_cursor: SkipJsonSchema[str | None] = Field(
        default=None, description="journal cursor from before the restart (set by the tools): the failure "
                                  "evidence is the unit's journal lines after it")
    old_main_pid: SkipJsonSchema[int | None] = Field(
        default=None, ge=0, description="MainPID before the restart (set by the tools): an http or port probe "
                                        "answered from a port this process (or a child) still holds does not pass")

    @field_validator("settle_s")
    @classmethod
    def _settle(cls, value: float | None) -> float | None:
        # (bounds checked here, not in the schema every tools/list carries: a model passes a sane value, and one
        # out of bounds is refused all the same, by name)
        if value is not None and not 0 <= value <= 3600:
            raise ValueError("settle_s must be 0..3600 seconds")
        return value


class HttpProbe(_Spec):
    """An HTTP endpoint answers ``expect_status`` (and ``body_regex``), reached from the host itself.

    Plain HTTP only (no TLS): an ``https://`` URL, or one without a host or with a bad port, is refused when the
    spec is validated (:func:`check_http_url`), before anything runs.

    "Connection refused" and 503 are "not yet" (SGLang keeps its port closed while loading and answers 503
    on /health while starting).
    """

    model_config = _variant("a GET from the host answers expect_status")

    kind: Literal["http"] = "http"
    url: str = Field(description="http:// URL from the host")
    expect_status: int = Field(default=200, description="passing HTTP status")
    body_regex: str | None = Field(default=None, description="body regex to match")
    timeout_s: float = Field(default=5.0, description="seconds per request")

    @field_validator("expect_status")
    @classmethod
    def _status(cls, value: int) -> int:
        if not 100 <= value <= 599:
            raise ValueError("expect_status must be an HTTP status, 100..599")
        return value

    @field_validator("timeout_s")
    @classmethod
    def _timeout(cls, value: float) -> float:
        if not value > 0:
            raise ValueError("timeout_s must be > 0 seconds")
        return value

    @field_validator("url")
    @classmethod
    def _plain_http(cls, url: str) -> str:
        return check_http_url(url)

    @field_validator("body_regex")
    @classmethod
    def _body_regex(cls, value: str | None) -> str | None:
        return _regex(value)


class LogProbe(_Spec):
    """A line matching ``pattern`` appears in a unit's journal (``journalctl -u UNIT -o json --after-cursor``)
    or in a log file, after the probe's start point. ``fail_pattern`` makes a matching line a terminal failure."""

    model_config = _variant("a new journal (or file) line matches")

    kind: Literal["log"] = "log"
    unit: str | None = Field(default=None, description="unit's journal (restart_service: its own)")
    path: str | None = Field(default=None, description="or a log file to follow")
    pattern: str = Field(description="regex of the ready line")
    fail_pattern: str | None = Field(default=None, description="regex of a failure line")
    cursor: SkipJsonSchema[str | None] = Field(default=None, description="journal cursor to start after (set by "
                                                                         "the tools)")
    offset: SkipJsonSchema[int] = Field(default=0, ge=0, description="path: byte offset to start at (0: the whole "
                                                                     "file; moved on by the tools as they read)")

    @field_validator("pattern", "fail_pattern")
    @classmethod
    def _regexes(cls, value: str | None) -> str | None:
        return _regex(value)

    @field_validator("unit")
    @classmethod
    def _unit_name(cls, unit: str | None) -> str | None:
        # systemd.unit(5): a name without a type suffix means a service (as systemctl and journalctl -u read it);
        # normalised so it compares equal to the unit a restart follows
        return unit if unit is None or "." in unit else unit + ".service"

    @model_validator(mode="after")
    def _one_source(self) -> LogProbe:
        # neither: the journal of the unit the job follows, filled in by restart_service (see with_log_units)
        if self.unit is not None and self.path is not None:
            raise ValueError("a log probe follows one source: give unit (its journal) or path (a log file), not both")
        return self


class PortProbe(_Spec):
    """A TCP port accepts connections (from the host itself)."""

    model_config = _variant("TCP port accepts connections")

    kind: Literal["port"] = "port"
    port: int = Field(description="TCP port")
    address: str = Field(default="127.0.0.1", description="address from the host")

    @field_validator("port")
    @classmethod
    def _port(cls, value: int) -> int:
        if not 1 <= value <= 65535:
            raise ValueError("port must be 1..65535")
        return value


class GpuMemoryProbe(_Spec):
    """GPU memory (``nvidia-smi --query-gpu=index,memory.used,memory.total``) is in a range on every GPU
    (e.g. ``min_used_mib`` once weights are loaded, ``max_used_mib`` after a stop)."""

    model_config = _variant("each GPU's used memory in bounds")

    kind: Literal["gpu_memory"] = "gpu_memory"
    min_used_mib: int | None = Field(default=None, ge=0, description="MiB used at least")
    max_used_mib: int | None = Field(default=None, ge=0, description="MiB used at most")


class HostMemoryProbe(_Spec):
    """Host memory available (``free -b``) is at least ``min_available_bytes``."""

    model_config = _variant("host memory available (free -b)")

    kind: Literal["host_memory"] = "host_memory"
    min_available_bytes: int = Field(ge=0, description="bytes at least")


ProbeSpec = Annotated[
    SystemdUnitProbe | HttpProbe | LogProbe | PortProbe | GpuMemoryProbe | HostMemoryProbe,
    Field(discriminator="kind"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(ProbeSpec)


def probe_from_dict(data: dict[str, Any] | BaseModel) -> SystemdUnitProbe | HttpProbe | LogProbe | PortProbe | \
        GpuMemoryProbe | HostMemoryProbe:
    """Validate a probe spec given as a dict (``{"kind": "http", "url": ...}``).

    :raises BadArguments: unknown kind or invalid fields (the message names them), e.g. an ``https://`` URL (a
        probe sends plain HTTP) or a regex that does not compile.
    """
    if isinstance(data, BaseModel):  # validated again: a model built without validation (model_construct) too
        data = data.model_dump()
    try:
        return _ADAPTER.validate_python(data)  # type: ignore[no-any-return]
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'probe'}: "
                             f"{e['msg'].removeprefix('Value error, ')}" for e in exc.errors())
        kind = data.get("kind") if isinstance(data, dict) else None
        what = f"{kind} probe" if isinstance(kind, str) and kind.isidentifier() and len(kind) <= 20 else "probe"
        raise BadArguments(f"invalid {what}: {problems}") from exc


def with_log_units(probes: list[dict[str, Any]], unit: str | None) -> list[dict[str, Any]]:
    """``probes`` with each log probe that names neither ``unit`` nor ``path`` following ``unit``'s journal (the
    unit a restart follows).

    :raises BadArguments: such a probe and no ``unit`` to follow (``wait_for``, a job without a unit probe).
    """
    out = []
    for p in probes:
        if p.get("kind") == "log" and not p.get("unit") and not p.get("path"):
            if unit is None:
                raise BadArguments("a log probe needs unit (the unit whose journal to follow) or path (a log file) "
                                   "here: only restart_service has a unit of its own to follow")
            p = {**p, "unit": unit}
        out.append(p)
    return out
