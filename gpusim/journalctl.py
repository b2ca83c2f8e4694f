#!/usr/bin/env python3
# ruff: noqa: T201 - a command-line program: print is its output
"""A ``journalctl`` shim reading the journal written by the ``systemctl`` shim (standard library only).

The journal is ``$SIM_SYSTEMD_ROOT/run/sim-systemd/journal.jsonl``: one JSON object per entry with journald's
field names (``__CURSOR``, ``__REALTIME_TIMESTAMP``, ``_SYSTEMD_UNIT``, ``_SYSTEMD_INVOCATION_ID``, ``_PID``,
``PRIORITY``, ``MESSAGE``, ...). Supported: ``-u/--unit`` (matches ``_SYSTEMD_UNIT`` and the manager's
``UNIT`` field, as journalctl does), ``-t/--identifier``, ``FIELD=VALUE`` matches (values of one field
are OR-ed, fields AND-ed), ``-p/--priority``, ``-o/--output`` (short, short-iso, short-precise, short-unix,
cat, json, json-pretty), ``-n/--lines``, ``-r``, ``-e``, ``-f`` (poll), ``--since/--until``
(``YYYY-MM-DD[ HH:MM[:SS]]``, ``@EPOCH``, ``-5min``, ``today``, ``yesterday``, ``now``), ``--cursor``,
``--after-cursor``, ``--cursor-file``, ``--show-cursor``; ``-b``, ``--no-pager``, ``-q``, ``-x``, ``-a``,
``-l``, ``--utc``, ``--no-hostname`` are accepted (there is one boot: the journal lives under ``run/``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

USEC = 1_000_000
PRIORITIES = ["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"]
OUTPUTS = ("short", "short-iso", "short-precise", "short-unix", "cat", "json", "json-pretty", "with-unit")


def journal_path() -> Path:
    return Path(os.environ.get("SIM_SYSTEMD_ROOT") or "/") / "run/sim-systemd/journal.jsonl"


def unit_name(name: str) -> str:
    if not re.search(r"\.(service|socket|target|timer|mount|path|scope|slice)$", name):
        return name + ".service"
    return name


def cursor_seq(cursor: str) -> int:
    m = re.search(r"(?:^|;)i=([0-9a-fA-F]+)(?:;|$)", cursor.strip())
    if not m:
        raise ValueError(cursor)
    return int(m.group(1), 16)


def parse_priority(spec: str) -> tuple[int, int]:
    def one(s: str) -> int:
        s = s.strip().lower()
        if s.isdigit():
            return int(s)
        if s in PRIORITIES:
            return PRIORITIES.index(s)
        raise ValueError(spec)

    if ".." in spec:
        lo, hi = spec.split("..", 1)
        return (one(lo) if lo else 0, one(hi) if hi else 7)
    return 0, one(spec)


def parse_time(spec: str) -> int:
    """Microseconds since the epoch for journalctl's --since/--until forms."""
    s = spec.strip()
    now = time.time()
    if s == "now":
        return int(now * USEC)
    if s in ("today", "yesterday", "tomorrow"):
        lt = time.localtime(now)
        midnight = time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1))
        shift = {"today": 0, "yesterday": -86400, "tomorrow": 86400}[s]
        return int((midnight + shift) * USEC)
    if s.startswith("@"):
        return int(float(s[1:]) * USEC)
    m = re.fullmatch(r"([+-])\s*(\d+(?:\.\d+)?)\s*(us|ms|s|sec|m|min|h|hour|hours|d|day|days|w|week|weeks)?", s)
    if m:
        unit = {
            "us": 1e-6,
            "ms": 1e-3,
            "s": 1,
            "sec": 1,
            "m": 60,
            "min": 60,
            "h": 3600,
            "hour": 3600,
            "hours": 3600,
            "d": 86400,
            "day": 86400,
            "days": 86400,
            "w": 604800,
            "week": 604800,
            "weeks": 604800,
        }[m.group(3) or "s"]
        delta = float(m.group(2)) * unit
        return int((now + (delta if m.group(1) == "+" else -delta)) * USEC)
    s = s.removesuffix(" ago")
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d", "%H:%M:%S", "%H:%M"):
        try:
            st = time.strptime(s, fmt)
        except ValueError:
            continue
        if fmt.startswith("%H"):
            lt = time.localtime(now)
            return int(
                time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, st.tm_hour, st.tm_min, st.tm_sec, 0, 0, -1)) * USEC
            )
        return int(time.mktime(st) * USEC)
    raise ValueError(spec)


class Query:
    def __init__(self) -> None:
        self.units: set[str] = set()
        self.identifiers: set[str] = set()
        self.fields: dict[str, set[str]] = {}
        self.priority: tuple[int, int] | None = None
        self.since: int | None = None
        self.until: int | None = None
        self.after_seq: int | None = None
        self.from_seq: int | None = None
        self.kernel_only = False

    def match(self, e: dict[str, Any]) -> bool:
        if self.kernel_only:
            return False
        if self.units and not (e.get("_SYSTEMD_UNIT") in self.units or e.get("UNIT") in self.units):
            return False
        if self.identifiers and e.get("SYSLOG_IDENTIFIER") not in self.identifiers:
            return False
        for key, values in self.fields.items():
            if e.get(key) not in values:
                return False
        if self.priority is not None:
            try:
                prio = int(e.get("PRIORITY", 6))
            except ValueError:
                prio = 6
            if not self.priority[0] <= prio <= self.priority[1]:
                return False
        rt = int(e.get("__REALTIME_TIMESTAMP", 0))
        if self.since is not None and rt < self.since:
            return False
        if self.until is not None and rt > self.until:
            return False
        seq = entry_seq(e)
        if self.after_seq is not None and seq <= self.after_seq:
            return False
        return not (self.from_seq is not None and seq < self.from_seq)


def entry_seq(e: dict[str, Any]) -> int:
    try:
        return cursor_seq(str(e.get("__CURSOR", "")))
    except ValueError:
        return 0


def read_entries(offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Entries from byte ``offset`` on, and the offset after the last complete line."""
    out: list[dict[str, Any]] = []
    try:
        with open(journal_path(), "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return out, offset
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        with contextlib.suppress(ValueError):
            obj = json.loads(line)
            if isinstance(obj, dict):
                out.append(obj)
    return out, offset + end


def render(e: dict[str, Any], output: str, utc: bool, no_hostname: bool) -> str:
    msg = str(e.get("MESSAGE", ""))
    if output == "cat":
        return msg
    if output == "json":
        return json.dumps(e)
    if output == "json-pretty":
        return json.dumps(e, indent="\t")
    rt = int(e.get("__REALTIME_TIMESTAMP", 0))
    secs = rt / USEC
    tm = time.gmtime(secs) if utc else time.localtime(secs)
    if output == "short-iso":
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", tm)
    elif output == "short-precise":
        stamp = time.strftime("%b %d %H:%M:%S", tm) + f".{rt % USEC:06d}"
    elif output == "short-unix":
        stamp = f"{rt // USEC}.{rt % USEC:06d}"
    else:
        stamp = time.strftime("%b %d %H:%M:%S", tm)
    host = "" if no_hostname else f" {e.get('_HOSTNAME', '')}"
    ident = e.get("SYSLOG_IDENTIFIER") or e.get("_COMM") or "unknown"
    pid = f"[{e['_PID']}]" if e.get("_PID") else ""
    unit = f" {e.get('_SYSTEMD_UNIT', '')}" if output == "with-unit" else ""
    return f"{stamp}{host}{unit} {ident}{pid}: {msg}"


def iter_args(args: list[str]) -> Iterator[tuple[str, str | None]]:
    """Yields (option, value) pairs; value None for flags and positional words are ('', word)."""
    with_value = {
        "-u",
        "--unit",
        "-t",
        "--identifier",
        "-p",
        "--priority",
        "-o",
        "--output",
        "-n",
        "--lines",
        "-S",
        "--since",
        "-U",
        "--until",
        "-c",
        "--cursor",
        "--after-cursor",
        "--cursor-file",
        "-D",
        "--directory",
        "-M",
        "--machine",
        "--user-unit",
    }
    optional_value = {"-b", "--boot"}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and "=" in a:
            k, v = a.split("=", 1)
            yield k, v
        elif a in with_value:
            if i + 1 >= len(args):
                raise SystemExit(f"journalctl: option '{a}' requires an argument")
            yield a, args[i + 1]
            i += 1
        elif a in optional_value:
            nxt = args[i + 1] if i + 1 < len(args) else ""
            if re.fullmatch(r"[+-]?\d+|[0-9a-f]{32}|all", nxt):
                yield a, nxt
                i += 1
            else:
                yield a, None
        elif re.fullmatch(r"-n\d+", a):
            yield "-n", a[2:]
        elif re.fullmatch(r"-[a-zA-Z]{2,}", a):
            for ch in a[1:]:
                yield f"-{ch}", None
        elif a.startswith("-") and a not in ("-", "+"):
            yield a, None
        else:
            yield "", a
        i += 1


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    q = Query()
    output = "short"
    lines: int | None = None
    reverse = follow = show_cursor = quiet = utc = no_hostname = jump_end = False
    cursor_file: Path | None = None
    try:
        for opt, val in iter_args(args):
            if opt in ("-u", "--unit"):
                q.units.add(unit_name(str(val)))
            elif opt in ("-t", "--identifier"):
                q.identifiers.add(str(val))
            elif opt in ("-p", "--priority"):
                q.priority = parse_priority(str(val))
            elif opt in ("-o", "--output"):
                if val not in OUTPUTS:
                    sys.stderr.write(f"Unknown output format '{val}'.\n")
                    return 1
                output = str(val)
            elif opt in ("-n", "--lines"):
                lines = None if val in ("all", "+0") else int(str(val).lstrip("+"))
            elif opt in ("-S", "--since"):
                q.since = parse_time(str(val))
            elif opt in ("-U", "--until"):
                q.until = parse_time(str(val))
            elif opt in ("-c", "--cursor"):
                q.from_seq = cursor_seq(str(val))
            elif opt == "--after-cursor":
                q.after_seq = cursor_seq(str(val))
            elif opt == "--cursor-file":
                cursor_file = Path(str(val))
                with contextlib.suppress(OSError, ValueError):
                    q.after_seq = cursor_seq(cursor_file.read_text())
            elif opt in ("-r", "--reverse"):
                reverse = True
            elif opt in ("-f", "--follow"):
                follow = True
            elif opt in ("-e", "--pager-end"):
                jump_end = True
            elif opt == "--show-cursor":
                show_cursor = True
            elif opt in ("-q", "--quiet"):
                quiet = True
            elif opt == "--utc":
                utc = True
            elif opt == "--no-hostname":
                no_hostname = True
            elif opt in ("-k", "--dmesg"):
                q.kernel_only = True
            elif opt in (
                "-b",
                "--boot",
                "--no-pager",
                "-x",
                "--catalog",
                "-a",
                "--all",
                "-l",
                "--full",
                "-m",
                "--merge",
                "--no-tail",
                "--system",
                "--no-full",
            ):
                pass
            elif opt == "":
                assert val is not None
                if val == "+":
                    continue
                if "=" not in val:
                    sys.stderr.write(f"journalctl: invalid match '{val}' (only FIELD=VALUE is simulated)\n")
                    return 1
                key, value = val.split("=", 1)
                if key == "_SYSTEMD_UNIT":
                    value = unit_name(value)
                q.fields.setdefault(key, set()).add(value)
            elif opt in ("-h", "--help"):
                print(__doc__)
                return 0
            elif opt == "--version":
                print("systemd 252 (252-sim)")
                return 0
            else:
                sys.stderr.write(f"journalctl: unrecognized option '{opt}'\n")
                return 1
    except ValueError as exc:
        sys.stderr.write(f"Failed to parse argument: {exc}\n")
        return 1
    if jump_end and lines is None:
        lines = 1000
    if follow and lines is None:
        lines = 10

    entries, offset = read_entries()
    matching = [e for e in entries if q.match(e)]
    shown = matching
    if lines is not None:
        shown = shown[-lines:] if lines > 0 else []
    if reverse:
        shown.reverse()
    for e in shown:
        print(render(e, output, utc, no_hostname))
    last_cursor = str(shown[-1 if not reverse else 0]["__CURSOR"]) if shown else None
    if last_cursor is None and lines == 0 and matching:
        # `-n 0 --show-cursor`: no entries shown, but the cursor of the tail (the idiom for "from now on")
        last_cursor = str(matching[-1]["__CURSOR"])
    if not shown and not quiet and not follow and not output.startswith("json"):
        print("-- No entries --")
    if follow:
        stop: list[int] = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        signal.signal(signal.SIGINT, lambda *_: stop.append(1))
        sys.stdout.flush()
        while not stop:
            time.sleep(0.2)
            more, offset = read_entries(offset)
            for e in more:
                if q.match(e):
                    print(render(e, output, utc, no_hostname), flush=True)
                    last_cursor = str(e["__CURSOR"])
    if last_cursor and show_cursor:
        print(f"-- cursor: {last_cursor}")
    if last_cursor and cursor_file is not None:
        with contextlib.suppress(OSError):
            cursor_file.write_text(last_cursor)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
