"""Parsers for the outputs probes read: systemctl show, systemd time spans, free -b, nvidia-smi csv."""

from __future__ import annotations

import re

__all__ = ["parse_free", "parse_nvidia_smi", "parse_systemctl_show", "parse_timespan_s"]

_SPAN_UNITS = {
    "us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0, "hr": 3600.0, "hour": 3600.0,
    "hours": 3600.0, "d": 86400.0, "day": 86400.0, "days": 86400.0, "w": 604800.0, "week": 604800.0,
    "weeks": 604800.0,
}


def parse_systemctl_show(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines of ``systemctl show -p ...`` → dict (values verbatim)."""
    props: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


def parse_timespan_s(text: str) -> float | None:
    """A systemd time span (systemd.time(7): ``15min``, ``1min 30s``, ``5s``, ``900ms``, ``infinity``) in
    seconds; None for ``infinity`` or an unparsable value."""
    text = text.strip()
    if not text or text == "infinity":
        return None
    total = 0.0
    matched = False
    for num, unit in re.findall(r"([0-9.]+)\s*([a-z]*)", text):
        factor = _SPAN_UNITS.get(unit or "s")
        if factor is None:
            return None
        total += float(num) * factor
        matched = True
    return total if matched else None


def parse_free(text: str) -> dict[str, int]:
    """``free -b`` (procps) → ``{"total_bytes", "used_bytes", "free_bytes", "available_bytes", ...}``.

    :raises ValueError: no ``Mem:`` line.
    """
    header: list[str] = []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "total":
            header = parts
        elif parts[0] == "Mem:":
            values = [int(v) for v in parts[1:]]
            names = header or ["total", "used", "free", "shared", "buff/cache", "available"]
            out = {f"{n.replace('/', '_')}_bytes": v for n, v in zip(names, values, strict=False)}
            return out
    raise ValueError("no 'Mem:' line in free output")


def parse_nvidia_smi(text: str) -> list[dict[str, int]]:
    """``nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits`` →
    ``[{"index", "used_mib", "total_mib", "free_mib"}]`` (MiB as nvidia-smi reports them)."""
    gpus: list[dict[str, int]] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        idx, used, total = int(parts[0]), int(float(parts[1])), int(float(parts[2]))
        gpus.append({"index": idx, "used_mib": used, "total_mib": total, "free_mib": total - used})
    return gpus
