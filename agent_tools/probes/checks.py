"""Running probes against a host. Each check makes at most one round trip (one exec or one TCP exchange)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import h11

from ..errors import HostError
from ..hosts.base import Host, run_on
from ..outcomes import ProbeReport
from .parse import parse_free, parse_nvidia_smi, parse_systemctl_show
from .specs import (
    GpuMemoryProbe,
    HostMemoryProbe,
    HttpProbe,
    LogProbe,
    PortProbe,
    SystemdUnitProbe,
    probe_from_dict,
)

__all__ = ["UNIT_PROPS", "ProbeResult", "advance", "check_probe", "check_probes"]

#: the unit properties a systemd_unit probe reads (systemctl(1) show -p)
UNIT_PROPS = "ActiveState,SubState,Result,ExecMainStatus,NRestarts,InvocationID,TimeoutStartUSec"


@dataclass
class ProbeResult:
    """One probe check.

    :param state: ``passed``, ``not_yet`` or ``failed`` (terminal: the thing probed will not become ready).
    :param evidence: what was seen, short (unit state, HTTP status, matched line).
    :param updates: spec fields to carry into the next check (log cursor / file offset).
    """

    kind: str
    target: str
    state: Literal["passed", "not_yet", "failed"]
    evidence: str
    updates: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def report(self) -> ProbeReport:
        """The agent-facing view of this result."""
        return ProbeReport(kind=self.kind, target=self.target, state=self.state, evidence=self.evidence)


#: key a passed log probe's spec carries into later checks (the line it saw); internal, not part of the schema
MATCHED = "matched_line"


def advance(specs: list[dict[str, Any]], results: list[ProbeResult]) -> list[dict[str, Any]]:
    """The specs to check next time: each spec with its result's ``updates`` (log cursor / file offset, and
    for a log probe that passed, the line it saw: it stays passed)."""
    return [dict(spec, **r.updates) for spec, r in zip(specs, results, strict=True)]


async def _systemd(host: Host, p: SystemdUnitProbe) -> ProbeResult:
    res = await run_on(host, f"systemctl show -p {UNIT_PROPS} {shlex.quote(p.unit)}")
    props = parse_systemctl_show(res.stdout.decode("utf-8", "replace"))
    active, sub, result = props.get("ActiveState", "?"), props.get("SubState", "?"), props.get("Result", "?")
    inv = props.get("InvocationID", "")
    evidence = f"{active}/{sub} result={result}"
    if props.get("NRestarts", "0") not in ("", "0"):
        evidence += f" restarts={props['NRestarts']}"
    new_invocation = p.not_invocation is None or (inv != "" and inv != p.not_invocation)
    if active == "failed" and new_invocation:
        return ProbeResult("systemd_unit", p.unit, "failed", evidence + f" exit={props.get('ExecMainStatus', '?')}",
                           details=props)
    if not new_invocation:
        return ProbeResult("systemd_unit", p.unit, "not_yet", evidence + " (restart not begun yet)", details=props)
    if active == "active":
        return ProbeResult("systemd_unit", p.unit, "passed", evidence, details=props)
    if active == "inactive" and result not in ("success", "?"):
        return ProbeResult("systemd_unit", p.unit, "failed", evidence, details=props)
    return ProbeResult("systemd_unit", p.unit, "not_yet", evidence, details=props)


async def http_get(host: Host, url: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    """GET ``url`` from the host's point of view (SSH direct-tcpip for remote hosts); HTTP/1.1 via h11.

    :returns: (status code, body bytes, at most 1 MiB).
    :raises ConnectionRefusedError: nothing listens there. :raises OSError, TimeoutError: other failures.
    """
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"only http:// URLs are supported, got {url!r}")
    port = parts.port or 80
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    with anyio.fail_after(timeout_s):
        stream = await host.open_tcp(parts.hostname, port)
        try:
            conn = h11.Connection(h11.CLIENT)
            req = h11.Request(method="GET", target=target,
                              headers=[("Host", f"{parts.hostname}:{port}"), ("Connection", "close"),
                                       ("User-Agent", "agent-tools-probe")])
            await stream.send(conn.send(req) + (conn.send(h11.EndOfMessage()) or b""))
            status = 0
            body = bytearray()
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    try:
                        data = await stream.receive(65536)
                    except anyio.EndOfStream:
                        data = b""
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    if len(body) < 1 << 20:
                        body.extend(event.data)
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    break
            return status, bytes(body)
        finally:
            await stream.aclose()


async def _http(host: Host, p: HttpProbe) -> ProbeResult:
    try:
        status, body = await http_get(host, p.url, p.timeout_s)
    except ConnectionRefusedError:
        return ProbeResult("http", p.url, "not_yet", "connection refused (normal while the server loads)")
    except TimeoutError:
        return ProbeResult("http", p.url, "not_yet", f"no answer within {p.timeout_s:g} s")
    except (OSError, h11.ProtocolError) as exc:
        return ProbeResult("http", p.url, "not_yet", f"{type(exc).__name__}: {exc}")
    text = body[:200].decode("utf-8", "replace").strip()
    if status == p.expect_status and (p.body_regex is None or re.search(p.body_regex, body.decode("utf-8", "replace"))):
        return ProbeResult("http", p.url, "passed", f"HTTP {status}", details={"status": status})
    return ProbeResult("http", p.url, "not_yet", f"HTTP {status} {text[:80]}".strip(), details={"status": status})


async def _log(host: Host, p: LogProbe) -> ProbeResult:
    target = p.unit or p.path or "?"
    if p.unit:
        cmd = (f"journalctl -u {shlex.quote(p.unit)} -o json --no-pager"
               + (f" --after-cursor={shlex.quote(p.cursor)}" if p.cursor else " -n 200"))
        res = await run_on(host, cmd, max_output_bytes=8 << 20)
        lines: list[str] = []
        cursor = p.cursor
        for raw in res.stdout.decode("utf-8", "replace").splitlines():
            try:
                entry = json.loads(raw)
            except json.JSONDecodeError:
                continue
            msg = entry.get("MESSAGE", "")
            if isinstance(msg, list):  # journald sends non-UTF-8 messages as byte arrays
                msg = bytes(msg).decode("utf-8", "replace")
            lines.append(str(msg))
            cursor = entry.get("__CURSOR", cursor)
        updates: dict[str, Any] = {"cursor": cursor} if cursor != p.cursor else {}
    else:
        assert p.path is not None
        res = await run_on(host, f"tail -c +{p.offset + 1} -- {shlex.quote(p.path)} | head -c 4194304")
        lines = res.stdout.decode("utf-8", "replace").splitlines()
        updates = {"offset": p.offset + len(res.stdout)} if res.stdout else {}
    for line in lines:
        if p.fail_pattern and re.search(p.fail_pattern, line):
            return ProbeResult("log", target, "failed", line.strip()[:300], updates)
        if re.search(p.pattern, line):
            return ProbeResult("log", target, "passed", line.strip()[:300], {**updates, MATCHED: line.strip()[:300]})
    return ProbeResult("log", target, "not_yet", f"no line matching {p.pattern!r} yet ({len(lines)} new lines)",
                       updates, details={"lines": lines[-5:]})


async def _port(host: Host, p: PortProbe) -> ProbeResult:
    target = f"{p.address}:{p.port}"
    try:
        with anyio.fail_after(5):
            stream = await host.open_tcp(p.address, p.port)
        await stream.aclose()
    except (OSError, TimeoutError) as exc:
        return ProbeResult("port", target, "not_yet", f"not accepting connections ({type(exc).__name__})")
    return ProbeResult("port", target, "passed", "accepting connections")


async def _gpu(host: Host, p: GpuMemoryProbe) -> ProbeResult:
    res = await run_on(host, "nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits")
    gpus = parse_nvidia_smi(res.stdout.decode("utf-8", "replace"))
    if res.exit_status != 0 or not gpus:
        return ProbeResult("gpu_memory", "nvidia-smi", "not_yet", "nvidia-smi gave no GPUs: "
                           + res.stderr.decode("utf-8", "replace").strip()[:200])
    used = [g["used_mib"] for g in gpus]
    ok = all((p.min_used_mib is None or u >= p.min_used_mib) and (p.max_used_mib is None or u <= p.max_used_mib)
             for u in used)
    return ProbeResult("gpu_memory", "nvidia-smi", "passed" if ok else "not_yet",
                       f"used MiB per GPU: {used}", details={"gpus": gpus})


async def _hostmem(host: Host, p: HostMemoryProbe) -> ProbeResult:
    res = await run_on(host, "free -b")
    mem = parse_free(res.stdout.decode("utf-8", "replace"))
    avail = mem.get("available_bytes", 0)
    return ProbeResult("host_memory", "free -b", "passed" if avail >= p.min_available_bytes else "not_yet",
                       f"available {avail / 2**30:.1f} GiB", details=mem)


async def check_probe(host: Host, spec: dict[str, Any] | Any) -> ProbeResult:
    """Run one probe on ``host``.

    :param spec: a probe spec model or dict (``{"kind": ...}``).
    :returns: a :class:`ProbeResult`; host problems give ``not_yet`` with the error as evidence (a probe never
        raises for a transient fault).
    :raises BadArguments: invalid spec.
    """
    if isinstance(spec, dict) and MATCHED in spec:
        if spec.get("kind") == "log" and spec[MATCHED]:
            # a log line is an event: once seen after the start point it stays seen, even though the cursor
            # has moved past it (another probe may pass only later)
            target = spec.get("unit") or spec.get("path") or "?"
            return ProbeResult("log", str(target), "passed", str(spec[MATCHED]))
        spec = {k: v for k, v in spec.items() if k != MATCHED}
    p = probe_from_dict(spec)
    try:
        if isinstance(p, SystemdUnitProbe):
            return await _systemd(host, p)
        if isinstance(p, HttpProbe):
            return await _http(host, p)
        if isinstance(p, LogProbe):
            return await _log(host, p)
        if isinstance(p, PortProbe):
            return await _port(host, p)
        if isinstance(p, GpuMemoryProbe):
            return await _gpu(host, p)
        return await _hostmem(host, p)
    except HostError as exc:
        return ProbeResult(p.kind, getattr(p, "unit", None) or getattr(p, "url", "") or p.kind, "not_yet",
                           f"host error: {exc.message}")


async def check_probes(host: Host, specs: list[dict[str, Any]]) -> list[ProbeResult]:
    """Run several probes on one host concurrently (each at most one round trip)."""
    results: list[ProbeResult | None] = [None] * len(specs)

    async def one(i: int, s: dict[str, Any]) -> None:
        results[i] = await check_probe(host, s)

    async with anyio.create_task_group() as tg:
        for i, s in enumerate(specs):
            tg.start_soon(one, i, s)
    return [r for r in results if r is not None]
