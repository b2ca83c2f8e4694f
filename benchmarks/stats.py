"""Samples, interleaved A/B measurement, and the result table (text and JSON)."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["CpuMeter", "Row", "Side", "Target", "interleave", "progress", "render_table"]

TargetKind = Literal["max_ratio", "min_ratio", "max_a", "report", "pending"]


_T0 = time.perf_counter()


def progress(msg: str) -> None:
    """A progress line on stderr (stdout carries the table or the JSON), with seconds since start."""
    print(f"[bench {time.perf_counter() - _T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


@dataclass
class Side:
    """One side of a comparison: a label, the unit of its samples, and the samples."""

    label: str
    unit: str
    samples: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        s = self.samples
        return {
            "label": self.label,
            "unit": self.unit,
            "n": len(s),
            "min": min(s) if s else None,
            "median": statistics.median(s) if s else None,
            "max": max(s) if s else None,
        }

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None


@dataclass(frozen=True)
class Target:
    """What a row is judged by.

    ``max_ratio``: median(A)/median(B) <= value (times: lower is better); ``min_ratio``: median(A)/median(B)
    >= value (throughputs); ``max_a``: every A sample < value (peak memory); ``report``: no target;
    ``pending``: not measurable yet.
    """

    kind: TargetKind
    value: float = 0.0

    def text(self) -> str:
        if self.kind == "max_ratio":
            return f"<= {self.value:g}x"
        if self.kind == "min_ratio":
            return f">= {self.value:g}x"
        if self.kind == "max_a":
            return f"A < {self.value:g}"
        return self.kind


@dataclass
class Row:
    """One result row: scenario ``name`` (what ``--only`` selects), side A (agent_tools), side B (baseline)."""

    name: str
    title: str
    a: Side
    b: Side
    target: Target
    note: str = ""
    pending_reason: str = ""

    @property
    def ratio(self) -> float | None:
        am, bm = self.a.median, self.b.median
        if am is None or bm is None or bm == 0:
            return None
        return am / bm

    @property
    def status(self) -> str:
        t = self.target
        if t.kind == "pending" or not self.a.samples:
            why = self.pending_reason if len(self.pending_reason) <= 60 else self.pending_reason[:59] + "…"
            return f"pending ({why})" if why else "pending"
        if t.kind == "report":
            return "report"
        r = self.ratio
        if t.kind == "max_a":
            return "met" if max(self.a.samples) < t.value else "MISSED"
        if r is None:
            return "n/a"
        ok = r <= t.value if t.kind == "max_ratio" else r >= t.value
        return "met" if ok else "MISSED"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "a": self.a.summary(),
            "b": self.b.summary(),
            "ratio_of_medians": self.ratio,
            "target": self.target.text(),
            "status": self.status,
            "pending_reason": self.pending_reason,
            "note": self.note,
        }


async def interleave(
    a: Callable[[], Awaitable[object]],
    b: Callable[[], Awaitable[object]],
    *,
    rounds: int,
    per_round: int,
    warmup: int = 2,
    settle: Callable[[], Awaitable[object]] | None = None,
) -> tuple[list[float], list[float]]:
    """Time ``a`` and ``b`` (one sample = one awaited call, in ms) in alternating rounds.

    Each round runs ``per_round`` calls of one side, then of the other; the order flips every round
    (A B, B A, A B, ...) so slow drift of the machine (other load, page cache, thermal) hits both sides alike.
    ``warmup`` untimed calls of each side go first (connection set-up, imports, caches). ``settle``, when
    given, is awaited untimed after every call of either side: the pause between an agent's calls, in which
    background work of the previous call (a warm session being started) finishes instead of landing on the
    next timed call of either side.
    """
    for _ in range(warmup):
        await a()
        await b()
    sa: list[float] = []
    sb: list[float] = []
    for r in range(rounds):
        order = ((a, sa), (b, sb)) if r % 2 == 0 else ((b, sb), (a, sa))
        for fn, out in order:
            for _ in range(per_round):
                t0 = time.perf_counter()
                await fn()
                out.append((time.perf_counter() - t0) * 1000.0)
                if settle is not None:
                    await settle()
    return sa, sb


class CpuMeter:
    """CPU seconds spent during wrapped calls: of this process (``pid=None``, ``time.process_time``), or of
    process ``pid`` plus its reaped children (``/proc/PID/stat`` utime + stime + cutime + cstime)."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid
        self.total_s = 0.0
        self.calls = 0

    def _now(self) -> float:
        if self.pid is None:
            return time.process_time()
        try:
            with open(f"/proc/{self.pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        ticks = sum(int(x) for x in fields[11:15])  # fields 14-17 of proc(5): utime stime cutime cstime
        return ticks / os.sysconf("SC_CLK_TCK")

    def wrap(self, fn: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
        async def metered() -> None:
            t0 = self._now()
            await fn()
            self.total_s += self._now() - t0
            self.calls += 1

        return metered

    @property
    def per_call_ms(self) -> float:
        return self.total_s * 1000 / self.calls if self.calls else 0.0


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def render_table(rows: list[Row]) -> str:
    """A fixed-width text table: two lines per row (A, then B), the ratio and verdict on the A line."""
    head = ("scenario", "side", "n", "unit", "min", "median", "max", "A/B", "target", "status")
    lines: list[list[str]] = [list(head)]
    for row in rows:
        for i, side in enumerate((row.a, row.b)):
            s = side.summary()
            lines.append([
                row.name if i == 0 else "",
                f"{'A' if i == 0 else 'B'}: {side.label}",
                str(s["n"]),
                side.unit,
                _fmt(s["min"]),
                _fmt(s["median"]),
                _fmt(s["max"]),
                (f"{row.ratio:.2f}x" if row.ratio is not None else "-") if i == 0 else "",
                row.target.text() if i == 0 else "",
                row.status if i == 0 else "",
            ])
    widths = [max(len(line[c]) for line in lines) for c in range(len(head))]
    right = {2, 4, 5, 6, 7}
    out: list[str] = []
    for k, line in enumerate(lines):
        cells = [cell.rjust(widths[c]) if c in right else cell.ljust(widths[c]) for c, cell in enumerate(line)]
        out.append("  ".join(cells).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
