#!/usr/bin/env python3
# ruff: noqa: T201 - a command-line program: print is its output
"""A ``systemctl`` shim for hosts without systemd (standard library only).

A tiny service manager good enough for the hicache walkthrough on an "embedded" host. Everything lives under
``$SIM_SYSTEMD_ROOT`` (default ``/``):

* unit files: ``etc/systemd/system``, ``run/systemd/system``, ``usr/local/lib/systemd/system``,
  ``lib/systemd/system``, ``usr/lib/systemd/system`` (first match wins) plus ``NAME.d/*.conf`` drop-ins;
* state: ``run/sim-systemd/`` (per-unit state JSON guarded by ``fcntl`` locks, the loaded unit snapshots,
  the journal ``journal.jsonl`` read by the ``journalctl`` shim).

Like systemd, units are loaded once (on first use or at ``daemon-reload``) and a start/restart keeps using
the loaded snapshot when the file changed on disk; ``show -p NeedDaemonReload`` then says ``yes``.

Verbs: ``daemon-reload``, ``start|stop|restart [--no-block] UNIT...``, ``show [-p A,B|--property=A] [--value]
UNIT...``, ``status UNIT``, ``is-active``, ``is-failed``, ``cat``, ``reset-failed``, ``kill [-s SIG]``,
``enable|disable`` (recorded only).

``start`` hands the unit to a supervisor: a daemon (double fork + ``setsid``, stdio on ``/dev/null``) that
runs ExecStartPre=, ExecStart= (``shlex`` words, ``\\`` continuations, ``$VAR``/``${VAR}`` and ``%n``-style
specifiers), ExecStartPost=, with Environment=, EnvironmentFile=, WorkingDirectory=, TimeoutStartSec=,
TimeoutStopSec=, Type=simple|exec|notify, Restart=no|on-failure|always, RestartSec=. For Type=notify it binds
an abstract ``AF_UNIX`` datagram socket, exports ``NOTIFY_SOCKET`` and moves ``activating/start`` to
``active/running`` on ``READY=1`` (any sender is accepted, i.e. ``NotifyAccess=all``); on TimeoutStartSec
it sends SIGTERM to the service's process group, SIGKILL after TimeoutStopSec, and records
``failed``/``Result=timeout``; a non-zero exit records ``Result=exit-code`` and ``ExecMainStatus``. The
blocking ``start``/``restart`` waits for that job's end like systemctl does (exit 1 and systemd's "Job for
... failed" message on failure); ``--no-block`` returns at once. The service's stdout/stderr lines and
systemd-style manager messages go to the journal, one JSON object per line with journald's field names.

The manager's lifetime: systemd stops every service when it exits, and so does the simulation when it has an
owner. A process that runs the simulated host (the embedded node) writes ``run/sim-systemd/owner`` (``PID
START_TICKS`` from ``/proc/PID/stat``, and ``remove-root`` when the root is a temporary directory of its own);
each supervisor checks every half second that this process still lives, and when it is gone (killed with
SIGKILL: it could not stop its services) stops its unit as ``stop`` would and exits; the last one out removes
the root when the owner asked for that. Without an owner file supervisors run until stopped, as daemons do.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import select
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

USEC = 1_000_000
INFINITY = -1
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_TIMEOUT_USEC = 90 * USEC
START_LIMIT_INTERVAL_S = 10.0  # systemd's DefaultStartLimitIntervalSec / DefaultStartLimitBurst
START_LIMIT_BURST = 5
CLEAN_SIGNALS = {signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE}
EXIT_STATUS_NAMES = {
    0: "SUCCESS",
    1: "FAILURE",
    2: "INVALIDARGUMENT",
    3: "NOTIMPLEMENTED",
    4: "NOPERMISSION",
    5: "NOTINSTALLED",
    6: "NOTCONFIGURED",
    7: "NOTRUNNING",
}
JOB_FAILURE_REASONS = {
    "exit-code": "the control process exited with error code",
    "timeout": "a timeout was exceeded",
    "signal": "a fatal signal was delivered to the control process",
    "core-dump": "a fatal signal was delivered causing the control process to dump core",
    "protocol": "the service did not take the steps required by its unit configuration",
    "resources": "of unavailable resources or another system error",
}


# ---------------------------------------------------------------------------------------------------------
# paths and files


def root() -> Path:
    return Path(os.environ.get("SIM_SYSTEMD_ROOT") or "/")


def unit_dirs() -> list[Path]:
    r = root()
    return [
        r / "etc/systemd/system",
        r / "run/systemd/system",
        r / "usr/local/lib/systemd/system",
        r / "lib/systemd/system",
        r / "usr/lib/systemd/system",
    ]


def state_dir() -> Path:
    d = root() / "run/sim-systemd"
    (d / "units").mkdir(parents=True, exist_ok=True)
    (d / "loaded").mkdir(parents=True, exist_ok=True)
    return d


def journal_path() -> Path:
    return state_dir() / "journal.jsonl"


def unit_name(name: str) -> str:
    if "." not in name.rsplit("/", 1)[-1] or not re.search(r"\.(service|socket|target|timer|mount|path)$", name):
        return name + ".service"
    return name


@contextlib.contextmanager
def flocked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def ident_file(name: str) -> str:
    """A random id created once per root (boot id, journal seqnum id)."""
    path = state_dir() / name
    with flocked(state_dir() / "ids.lock"):
        if not path.exists():
            path.write_text(uuid.uuid4().hex)
        return path.read_text().strip()


# ---------------------------------------------------------------------------------------------------------
# state


def state_file(name: str) -> Path:
    return state_dir() / "units" / f"{name}.json"


def state_lock(name: str) -> Path:
    return state_dir() / "units" / f"{name}.lock"


def run_lock(name: str) -> Path:
    return state_dir() / "units" / f"{name}.run"


def read_state(name: str) -> dict[str, Any]:
    return read_json(state_file(name))


def update_state(name: str, **fields: Any) -> dict[str, Any]:
    with flocked(state_lock(name)):
        st = read_state(name)
        st.update(fields)
        write_atomic(state_file(name), json.dumps(st, indent=1, sort_keys=True))
        return st


def supervisor_alive(name: str) -> bool:
    """True while a supervisor holds the unit's run lock."""
    fd = os.open(run_lock(name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def now_usec() -> int:
    return time.time_ns() // 1000


# ---------------------------------------------------------------------------------------------------------
# time spans (systemd.time(7))

_SPAN_UNITS: dict[str, float] = {
    "us": 1,
    "usec": 1,
    "µs": 1,
    "ms": 1e3,
    "msec": 1e3,
    "s": USEC,
    "sec": USEC,
    "second": USEC,
    "seconds": USEC,
    "m": 60 * USEC,
    "min": 60 * USEC,
    "minute": 60 * USEC,
    "minutes": 60 * USEC,
    "h": 3600 * USEC,
    "hr": 3600 * USEC,
    "hour": 3600 * USEC,
    "hours": 3600 * USEC,
    "d": 86400 * USEC,
    "day": 86400 * USEC,
    "days": 86400 * USEC,
    "w": 604800 * USEC,
    "week": 604800 * USEC,
    "weeks": 604800 * USEC,
    "M": 2629800 * USEC,
    "month": 2629800 * USEC,
    "months": 2629800 * USEC,
    "y": 31557600 * USEC,
    "year": 31557600 * USEC,
    "years": 31557600 * USEC,
}


def parse_timespan(text: str, default_unit: float = USEC) -> int:
    """Microseconds, or INFINITY. Raises ValueError on bad input."""
    t = text.strip()
    if t == "infinity":
        return INFINITY
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return int(float(t) * default_unit)
    total = 0.0
    pos = 0
    for m in re.finditer(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Zµ]+)", t):
        if m.start() != pos:
            raise ValueError(text)
        unit = m.group(2)
        if unit not in _SPAN_UNITS:
            raise ValueError(text)
        total += float(m.group(1)) * _SPAN_UNITS[unit]
        pos = m.end()
    if pos == 0 or t[pos:].strip():
        raise ValueError(text)
    return int(total)


def format_timespan(usec: int) -> str:
    """systemd's format_timespan(): ``15min``, ``1min 30s``, ``500ms``, ``infinity``."""
    if usec == INFINITY:
        return "infinity"
    if usec <= 0:
        return "0"
    table = [
        ("y", 31557600 * USEC),
        ("month", 2629800 * USEC),
        ("w", 604800 * USEC),
        ("d", 86400 * USEC),
        ("h", 3600 * USEC),
        ("min", 60 * USEC),
        ("s", USEC),
        ("ms", 1000),
        ("us", 1),
    ]
    parts: list[str] = []
    rest = usec
    for suffix, size in table:
        if rest <= 0:
            break
        if rest < size:
            continue
        n, rest = divmod(rest, size)
        if suffix == "s" and rest:
            frac = f"{rest:06d}".rstrip("0")
            parts.append(f"{n}.{frac}s")
            rest = 0
            break
        parts.append(f"{n}{suffix}")
    return " ".join(parts)


def format_timestamp(usec: int) -> str:
    if not usec:
        return ""
    return time.strftime("%a %Y-%m-%d %H:%M:%S %Z", time.localtime(usec / USEC))


# ---------------------------------------------------------------------------------------------------------
# unit files


def find_unit_files(name: str) -> tuple[Path | None, list[Path]]:
    fragment: Path | None = None
    for d in unit_dirs():
        cand = d / name
        if cand.is_file():
            fragment = cand
            break
    dropins: dict[str, Path] = {}
    for d in reversed(unit_dirs()):
        ddir = d / f"{name}.d"
        if ddir.is_dir():
            for conf in ddir.glob("*.conf"):
                dropins[conf.name] = conf
    return fragment, [dropins[k] for k in sorted(dropins)]


def file_stamps(paths: list[Path]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for p in paths:
        try:
            st = p.stat()
        except OSError:
            continue
        out[str(p)] = [st.st_mtime_ns, st.st_size]
    return out


def snapshot_path(name: str) -> Path:
    return state_dir() / "loaded" / f"{name}.json"


def take_snapshot(name: str) -> dict[str, Any] | None:
    fragment, dropins = find_unit_files(name)
    if fragment is None:
        with contextlib.suppress(OSError):
            snapshot_path(name).unlink()
        return None
    texts = [fragment.read_text(encoding="utf-8")]
    texts += [d.read_text(encoding="utf-8") for d in dropins]
    snap = {
        "name": name,
        "fragment": str(fragment),
        "dropins": [str(d) for d in dropins],
        "texts": texts,
        "stamps": file_stamps([fragment, *dropins]),
        "loaded_at": now_usec(),
    }
    write_atomic(snapshot_path(name), json.dumps(snap))
    return snap


def loaded_unit(name: str) -> tuple[dict[str, Any] | None, bool]:
    """(snapshot, need_daemon_reload). Loads a unit on first use, like systemd does."""
    with flocked(state_dir() / "loaded.lock"):
        snap = read_json(snapshot_path(name))
        if not snap:
            return take_snapshot(name), False
    fragment, dropins = find_unit_files(name)
    current = file_stamps([fragment, *dropins]) if fragment is not None else {}
    return snap, current != snap.get("stamps")


def daemon_reload() -> None:
    with flocked(state_dir() / "loaded.lock"):
        names: set[str] = set()
        for d in unit_dirs():
            if d.is_dir():
                names.update(p.name for p in d.iterdir() if p.is_file() and "." in p.name)
        for p in (state_dir() / "loaded").glob("*.json"):
            names.add(p.name[: -len(".json")])
        for name in sorted(names):
            take_snapshot(name)


def parse_unit_texts(texts: list[str]) -> dict[str, dict[str, list[str]]]:
    """systemd.syntax(7): sections, Key=Value, ``\\`` continuations, comments; empty value resets a list."""
    sections: dict[str, dict[str, list[str]]] = {}
    for text in texts:
        section = ""
        pending = ""
        for raw_line in text.splitlines():
            line = raw_line.strip()
            if pending and line.startswith(("#", ";")):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line = (pending + line).strip()
            pending = ""
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
                sections.setdefault(section, {})
                continue
            if "=" not in line:
                continue
            key, value = (s.strip() for s in line.split("=", 1))
            values = sections.setdefault(section, {}).setdefault(key, [])
            if value == "":
                values.clear()
            else:
                values.append(value)
        if pending.strip():
            key, _, value = pending.strip().partition("=")
            sections.setdefault(section, {}).setdefault(key.strip(), []).append(value.strip())
    return sections


@dataclass
class Command:
    argv: list[str]
    ignore_failure: bool = False
    raw: str = ""


@dataclass
class Config:
    name: str
    fragment: str
    dropins: list[str]
    description: str
    type: str = "simple"
    exec_start: list[Command] = field(default_factory=list)
    exec_start_pre: list[Command] = field(default_factory=list)
    exec_start_post: list[Command] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    working_directory: str | None = None
    timeout_start_usec: int = DEFAULT_TIMEOUT_USEC
    timeout_stop_usec: int = DEFAULT_TIMEOUT_USEC
    restart: str = "no"
    restart_usec: int = 100_000
    notify_access: str = "none"
    kill_signal: int = int(signal.SIGTERM)


def expand_specifiers(word: str, name: str) -> str:
    prefix = name.rsplit(".", 1)[0]
    table = {
        "n": name,
        "N": prefix,
        "p": prefix.split("@", 1)[0],
        "i": prefix.split("@", 1)[1] if "@" in prefix else "",
        "t": str(root() / "run"),
        "h": os.environ.get("HOME", "/root"),
        "%": "%",
    }
    return re.sub(r"%([nNpith%])", lambda m: table[m.group(1)], word)


def parse_command(value: str, name: str, env: dict[str, str]) -> Command:
    ignore = False
    while value and value[0] in "-@:+!":
        if value[0] == "-":
            ignore = True
        value = value[1:]
    words: list[str] = []
    for word in shlex.split(value):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if m:
            words.extend(env.get(m.group(1), "").split())
            continue
        word = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda mm: env.get(mm.group(1), ""), word)
        words.append(expand_specifiers(word, name))
    return Command(argv=words, ignore_failure=ignore, raw=value)


def parse_env_assignments(value: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in shlex.split(value):
        if "=" in word:
            k, v = word.split("=", 1)
            out[k] = v
    return out


def read_env_file(spec: str) -> dict[str, str]:
    optional = spec.startswith("-")
    path = Path(spec.lstrip("-"))
    out: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        if optional:
            return out
        raise
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        k, v = line.split("=", 1)
        v = v.strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
            v = v[1:-1]
        out[k.strip()] = v
    return out


def build_config(snap: dict[str, Any]) -> Config:
    name = str(snap["name"])
    sections = parse_unit_texts(list(snap["texts"]))
    unit = sections.get("Unit", {})
    svc = sections.get("Service", {})

    def last(key: str, default: str | None = None) -> str | None:
        vals = svc.get(key)
        return vals[-1] if vals else default

    cfg = Config(
        name=name,
        fragment=str(snap["fragment"]),
        dropins=list(snap.get("dropins", [])),
        description=(unit.get("Description") or [name])[-1],
    )
    cfg.type = last("Type", "simple") or "simple"
    env: dict[str, str] = {}
    for spec in svc.get("EnvironmentFile", []):
        with contextlib.suppress(OSError):
            env.update(read_env_file(spec))
    for value in svc.get("Environment", []):
        env.update(parse_env_assignments(value))
    cfg.environment = env
    cfg.exec_start = [parse_command(v, name, env) for v in svc.get("ExecStart", [])]
    cfg.exec_start_pre = [parse_command(v, name, env) for v in svc.get("ExecStartPre", [])]
    cfg.exec_start_post = [parse_command(v, name, env) for v in svc.get("ExecStartPost", [])]
    wd = last("WorkingDirectory")
    cfg.working_directory = expand_specifiers(wd.lstrip("-"), name) if wd else None
    both = last("TimeoutSec")
    for attr, key in (("timeout_start_usec", "TimeoutStartSec"), ("timeout_stop_usec", "TimeoutStopSec")):
        span = last(key, both)
        if span is not None:
            with contextlib.suppress(ValueError):
                usec = parse_timespan(span)
                setattr(cfg, attr, INFINITY if usec == 0 else usec)
    cfg.restart = last("Restart", "no") or "no"
    rs = last("RestartSec")
    if rs is not None:
        with contextlib.suppress(ValueError):
            cfg.restart_usec = max(0, parse_timespan(rs))
    cfg.notify_access = last("NotifyAccess", "main" if cfg.type == "notify" else "none") or "none"
    ks = last("KillSignal")
    if ks:
        with contextlib.suppress(ValueError, AttributeError):
            cfg.kill_signal = (
                int(ks) if ks.isdigit() else int(getattr(signal, ks if ks.startswith("SIG") else "SIG" + ks))
            )
    return cfg


# ---------------------------------------------------------------------------------------------------------
# journal


class Journal:
    """Appends journald-shaped entries to ``journal.jsonl`` under a cross-process lock."""

    def __init__(self) -> None:
        self.path = journal_path()
        self.lock_path = state_dir() / "journal.lock"
        self.seq_path = state_dir() / "journal.seq"
        self.boot_id = ident_file("boot_id")
        self.seqnum_id = ident_file("seqnum_id")
        self.hostname = socket.gethostname()
        self.tlock = threading.Lock()

    def write(self, message: str, **fields: str) -> None:
        with self.tlock, flocked(self.lock_path):
            try:
                seq = int(self.seq_path.read_text().strip() or 0) + 1
            except (OSError, ValueError):
                seq = 1
            rt = now_usec()
            mono = time.monotonic_ns() // 1000
            digest = int(hashlib.sha256(f"{seq}{rt}{message}".encode()).hexdigest()[:16], 16)
            entry: dict[str, str] = {
                "__CURSOR": f"s={self.seqnum_id};i={seq:x};b={self.boot_id};m={mono:x};t={rt:x};x={digest:x}",
                "__REALTIME_TIMESTAMP": str(rt),
                "__MONOTONIC_TIMESTAMP": str(mono),
                "_BOOT_ID": self.boot_id,
                "_HOSTNAME": self.hostname,
                "_UID": str(os.getuid()),
                "PRIORITY": "6",
                "SYSLOG_FACILITY": "3",
            }
            entry.update(fields)
            entry["MESSAGE"] = message
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry) + "\n")
            self.seq_path.write_text(str(seq))

    def manager(self, unit: str, invocation: str, message: str, priority: int = 6) -> None:
        """A message from "PID 1" about a unit (journalctl -u shows it through the UNIT= field)."""
        self.write(
            message,
            PRIORITY=str(priority),
            SYSLOG_IDENTIFIER="systemd",
            _PID="1",
            _COMM="systemd",
            _TRANSPORT="journal",
            _SYSTEMD_UNIT="init.scope",
            UNIT=unit,
            INVOCATION_ID=invocation,
            CODE_FUNC="unit_log",
        )

    def service(self, unit: str, invocation: str, pid: int, ident: str, message: str) -> None:
        self.write(
            message,
            SYSLOG_IDENTIFIER=ident,
            _PID=str(pid),
            _COMM=ident[:15],
            _TRANSPORT="stdout",
            _SYSTEMD_UNIT=unit,
            _SYSTEMD_INVOCATION_ID=invocation,
            _SYSTEMD_CGROUP=f"/system.slice/{unit}",
            _SYSTEMD_SLICE="system.slice",
        )


def read_journal() -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    try:
        with open(journal_path(), encoding="utf-8") as fh:
            for line in fh:
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
    except OSError:
        pass
    return out


# ---------------------------------------------------------------------------------------------------------
# the supervisor (runs detached, one per started unit)


def describe_exit(code: int, status: int) -> str:
    if code == 1:
        return f"code=exited, status={status}/{EXIT_STATUS_NAMES.get(status, str(status))}"
    try:
        signame = signal.Signals(status).name[3:]
    except ValueError:
        signame = str(status)
    return f"code={'dumped' if code == 3 else 'killed'}, status={status}/{signame}"


class Supervisor:
    def __init__(self, name: str, job_id: str) -> None:
        self.name = name
        self.job_id = job_id
        self.job_open = True
        self.stop_requested = threading.Event()
        self.journal = Journal()
        self.invocation = ""
        self.run_fd = -1
        self.desc = name

    # -- helpers
    def log(self, message: str, priority: int = 6) -> None:
        self.journal.manager(self.name, self.invocation, message, priority)

    def set_state(self, active: str, sub: str, **extra: Any) -> None:
        t = now_usec()
        fields: dict[str, Any] = {"ActiveState": active, "SubState": sub, "StateChangeTimestamp": t, **extra}
        if active == "active":
            fields["ActiveEnterTimestamp"] = t
        elif active in ("inactive", "failed"):
            fields["InactiveEnterTimestamp"] = t
        update_state(self.name, **fields)

    def job_done(self, result: str) -> None:
        if not self.job_open:
            return
        self.job_open = False
        with flocked(state_lock(self.name)):
            st = read_state(self.name)
            job = st.get("job") or {}
            if job.get("id") == self.job_id:
                job.update(state="done", result=result, finished=now_usec())
                st["job"] = job
                write_atomic(state_file(self.name), json.dumps(st, indent=1, sort_keys=True))

    # -- locking / replacing an older supervisor
    def acquire(self, stop_wait_s: float) -> bool:
        self.run_fd = os.open(run_lock(self.name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        signalled = killed = False
        deadline = time.monotonic() + stop_wait_s + 5
        while True:
            try:
                fcntl.flock(self.run_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            st = read_state(self.name)
            old = int(st.get("supervisor_pid") or 0)
            if old and old != os.getpid() and is_supervisor(old, self.name):
                if not signalled:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(old, signal.SIGTERM)
                    signalled = True
                elif time.monotonic() > deadline and not killed:
                    main_pid = int(st.get("MainPID") or 0)
                    for pid, grp in ((main_pid, True), (old, False)):
                        if pid > 0:
                            with contextlib.suppress(ProcessLookupError, PermissionError):
                                (os.killpg if grp else os.kill)(pid, signal.SIGKILL)
                    killed = True
            if killed and time.monotonic() > deadline + 10:
                return False
            time.sleep(0.05)

    # -- process handling
    def spawn(self, cmd: Command, env: dict[str, str], cwd: str | None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            cmd.argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def pump(self, proc: subprocess.Popen[bytes], ident: str) -> list[threading.Thread]:
        threads = []
        for stream in (proc.stdout, proc.stderr):
            if stream is None:
                continue

            def reader(s: IO[bytes] = stream) -> None:
                for raw_line in iter(s.readline, b""):
                    text = raw_line.decode("utf-8", "replace").rstrip("\r\n")
                    self.journal.service(self.name, self.invocation, proc.pid, ident, text)
                s.close()

            t = threading.Thread(target=reader, daemon=True)
            t.start()
            threads.append(t)
        return threads

    def terminate(self, proc: subprocess.Popen[bytes], cfg: Config) -> bool:
        """SIGTERM (KillSignal) the group, SIGKILL after TimeoutStopSec. True when SIGKILL was needed."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, cfg.kill_signal)
        limit = None if cfg.timeout_stop_usec == INFINITY else cfg.timeout_stop_usec / USEC
        try:
            proc.wait(timeout=limit)
            return False
        except subprocess.TimeoutExpired:
            self.log(f"{self.name}: State 'stop-sigterm' timed out. Killing.", 4)
            comm = ""
            with contextlib.suppress(OSError):
                comm = Path(f"/proc/{proc.pid}/comm").read_text().strip()
            self.log(f"{self.name}: Killing process {proc.pid} ({comm}) with signal SIGKILL.", 4)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return True

    def run_control(self, cmd: Command, env: dict[str, str], cfg: Config, deadline: float | None) -> str:
        """Run an ExecStartPre/Post command. Returns a systemd result ('success', 'exit-code', 'timeout')."""
        if not cmd.argv:
            return "success"
        try:
            proc = self.spawn(cmd, env, cfg.working_directory)
        except OSError as exc:
            self.log(f"{self.name}: Failed to execute {cmd.argv[0]}: {exc.strerror}", 3)
            return "success" if cmd.ignore_failure else "exit-code"
        threads = self.pump(proc, Path(cmd.argv[0]).name)
        while proc.poll() is None:
            if self.stop_requested.is_set() or (deadline is not None and time.monotonic() > deadline):
                self.terminate(proc, cfg)
                for t in threads:
                    t.join(timeout=2)
                return "timeout"
            time.sleep(0.05)
        for t in threads:
            t.join(timeout=2)
        if proc.returncode != 0 and not cmd.ignore_failure:
            return "exit-code"
        return "success"

    # -- one start attempt; returns the result ("success", "exit-code", "timeout", ...)
    def start_once(self, cfg: Config) -> str:
        self.invocation = uuid.uuid4().hex
        self.desc = f"{self.name} - {cfg.description}" if cfg.description != self.name else self.name
        self.set_state(
            "activating",
            "start-pre" if cfg.exec_start_pre else "start",
            Result="success",
            InvocationID=self.invocation,
            MainPID=0,
            ExecMainStatus=0,
            ExecMainCode=0,
            StatusText="",
            supervisor_pid=os.getpid(),
            LoadedTimeoutStartUSec=cfg.timeout_start_usec,
        )
        self.log(f"Starting {self.desc}...")
        started = time.monotonic()
        deadline = None if cfg.timeout_start_usec == INFINITY else started + cfg.timeout_start_usec / USEC
        env = {
            "PATH": DEFAULT_PATH,
            "LANG": "C.UTF-8",
            "INVOCATION_ID": self.invocation,
            "SYSTEMD_EXEC_PID": "0",
        }
        env.update(cfg.environment)

        for cmd in cfg.exec_start_pre:
            result = self.run_control(cmd, env, cfg, deadline)
            if result != "success":
                return self.finish_failed_start(result)
        if self.stop_requested.is_set():
            return self.finish_stopped(None, cfg, False)

        if len(cfg.exec_start) != 1 or not cfg.exec_start[0].argv:
            self.log(f"{self.name}: Service has no ExecStart=, or more than one. Refusing.", 3)
            return self.finish_failed_start("resources")
        main = cfg.exec_start[0]
        notify_sock: socket.socket | None = None
        if cfg.type == "notify":
            notify_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            root_tag = hashlib.sha1(str(root()).encode()).hexdigest()[:12]
            addr = f"sim-systemd/{root_tag}/{self.name}/{self.invocation}"
            notify_sock.bind("\0" + addr)
            env["NOTIFY_SOCKET"] = "@" + addr
        exe = main.argv[0]
        if "/" not in exe:
            found = next((str(Path(d) / exe) for d in env["PATH"].split(":") if (Path(d) / exe).is_file()), None)
            exe = found or exe
        try:
            proc = self.spawn(Command([exe, *main.argv[1:]]), env, cfg.working_directory)
        except OSError as exc:
            self.log(f"{self.name}: Failed to execute {main.argv[0]}: {exc.strerror}", 3)
            self.log(f"{self.name}: Failed at step EXEC spawning {main.argv[0]}: {exc.strerror}", 3)
            update_state(self.name, ExecMainCode=1, ExecMainStatus=203, ExecMainExitTimestamp=now_usec())
            if notify_sock is not None:
                notify_sock.close()
            return self.finish_failed_start("exit-code")
        update_state(
            self.name,
            ExecMainPID=proc.pid,
            MainPID=proc.pid,
            ExecMainStartTimestamp=now_usec(),
            ExecMainExitTimestamp=0,
            SubState="start",
        )
        threads = self.pump(proc, Path(main.argv[0]).name)
        activating = True

        def become_active() -> str:
            for cmd in cfg.exec_start_post:
                r = self.run_control(cmd, env, cfg, deadline)
                if r != "success":
                    return r
            self.set_state("active", "running")
            self.log(f"Started {self.desc}.")
            self.job_done("done")
            return "success"

        try:
            if cfg.type != "notify":
                r = become_active()
                activating = False
                if r != "success":
                    self.terminate(proc, cfg)
                    return self.finish_failed_start(r)
            while True:
                if notify_sock is not None:
                    ready, _, _ = select.select([notify_sock], [], [], 0.05)
                    if ready:
                        data = notify_sock.recv(65536).decode("utf-8", "replace")
                        for line in data.splitlines():
                            key, _, value = line.partition("=")
                            if key == "STATUS":
                                update_state(self.name, StatusText=value)
                            elif key == "READY" and value == "1" and activating:
                                activating = False
                                r = become_active()
                                if r != "success":
                                    self.terminate(proc, cfg)
                                    return self.finish_failed_start(r)
                            elif key == "STOPPING" and value == "1":
                                update_state(self.name, ActiveState="deactivating", SubState="stop-sigterm")
                        continue
                else:
                    time.sleep(0.05)
                rc = proc.poll()
                if rc is not None:
                    for t in threads:
                        t.join(timeout=2)
                    return self.finish_exited(proc, rc, activating, cfg)
                if self.stop_requested.is_set():
                    return self.finish_stopped(proc, cfg, activating)
                if activating and deadline is not None and time.monotonic() > deadline:
                    self.log(f"{self.name}: start operation timed out. Terminating.", 3)
                    self.set_state("deactivating", "stop-sigterm")
                    self.terminate(proc, cfg)
                    for t in threads:
                        t.join(timeout=2)
                    self.record_exit(proc)
                    return self.finish_failed_start("timeout")
        finally:
            if notify_sock is not None:
                notify_sock.close()

    def record_exit(self, proc: subprocess.Popen[bytes]) -> tuple[int, int]:
        rc = proc.returncode if proc.returncode is not None else 0
        code, status = (1, rc) if rc >= 0 else (2, -rc)
        update_state(self.name, MainPID=0, ExecMainCode=code, ExecMainStatus=status, ExecMainExitTimestamp=now_usec())
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        return code, status

    def finish_failed_start(self, result: str) -> str:
        self.set_state("failed", "failed", Result=result, MainPID=0)
        self.log(f"{self.name}: Failed with result '{result}'.", 4)
        self.log(f"Failed to start {self.desc}.", 3)
        self.job_done(result)
        return result

    def finish_exited(self, proc: subprocess.Popen[bytes], rc: int, activating: bool, cfg: Config) -> str:
        code, status = self.record_exit(proc)
        clean = (code == 1 and status == 0) or (code == 2 and status in CLEAN_SIGNALS)
        if not clean:
            self.log(f"{self.name}: Main process exited, {describe_exit(code, status)}", 5)
        if clean and not (activating and cfg.type == "notify"):
            self.set_state("inactive", "dead", Result="success", MainPID=0)
            self.log(f"{self.name}: Deactivated successfully.")
            self.job_done("done")
            return "success"
        result = "protocol" if clean else ("exit-code" if code == 1 else "signal")
        if activating:
            return self.finish_failed_start(result)
        self.set_state("failed", "failed", Result=result, MainPID=0)
        self.log(f"{self.name}: Failed with result '{result}'.", 4)
        return result

    def finish_stopped(self, proc: subprocess.Popen[bytes] | None, cfg: Config, activating: bool) -> str:
        self.log(f"Stopping {self.desc}...")
        self.set_state("deactivating", "stop-sigterm")
        if activating:
            self.job_done("canceled")
        killed = False
        result = "success"
        if proc is not None:
            killed = self.terminate(proc, cfg)
            code, status = self.record_exit(proc)
            clean = (code == 1 and status == 0) or (code == 2 and status in CLEAN_SIGNALS)
            if killed:
                result = "timeout"
            elif not clean:
                self.log(f"{self.name}: Main process exited, {describe_exit(code, status)}", 5)
                result = "exit-code" if code == 1 else "signal"
        if result == "success":
            self.set_state("inactive", "dead", Result="success", MainPID=0)
            self.log(f"{self.name}: Deactivated successfully.")
        else:
            self.set_state("failed", "failed", Result=result, MainPID=0)
            self.log(f"{self.name}: Failed with result '{result}'.", 4)
        self.log(f"Stopped {self.desc}.")
        return "stopped"

    def watch_owner(self) -> None:
        """Stop the unit when the simulated host's owner process is gone (see the module docstring)."""
        while not self.stop_requested.wait(0.5):
            gone, remove = owner_gone()
            if gone:
                self.orphaned, self.remove_root = True, remove
                self.stop_requested.set()
                return

    # -- main
    def run(self) -> int:
        self.orphaned = self.remove_root = False
        threading.Thread(target=self.watch_owner, daemon=True).start()
        try:
            return self._run()
        finally:
            if self.orphaned:
                update_state(self.name, supervisor_pid=0)
                if self.remove_root:
                    remove_orphaned_root()

    def _run(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: self.stop_requested.set())
        signal.signal(signal.SIGINT, lambda *_: self.stop_requested.set())
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        snap, _ = loaded_unit(self.name)
        if snap is None:
            return 5
        stop_wait = build_config(snap).timeout_stop_usec
        if not self.acquire(600.0 if stop_wait == INFINITY else stop_wait / USEC):
            return 1
        with flocked(state_lock(self.name)):
            st = read_state(self.name)
            job = st.get("job") or {}
            if job.get("id") != self.job_id:
                return 0  # superseded by a later job (stop, another restart) while we waited
            job["state"] = "running"
            st.update(job=job, supervisor_pid=os.getpid())
            write_atomic(state_file(self.name), json.dumps(st, indent=1, sort_keys=True))
        starts: list[float] = []
        while True:
            snap, _ = loaded_unit(self.name)
            if snap is None:
                self.job_done("failed")
                return 5
            cfg = build_config(snap)
            starts = [t for t in starts if time.monotonic() - t < START_LIMIT_INTERVAL_S] + [time.monotonic()]
            if len(starts) > START_LIMIT_BURST:
                self.set_state("failed", "failed", Result="start-limit-hit", MainPID=0)
                self.log(f"{self.name}: Start request repeated too quickly.", 4)
                self.log(f"{self.name}: Failed with result 'start-limit-hit'.", 4)
                self.log(f"Failed to start {self.desc}.", 3)
                break
            result = self.start_once(cfg)
            if result in ("success", "stopped") or self.stop_requested.is_set():
                break
            if cfg.restart not in ("on-failure", "always", "on-abnormal", "on-abort"):
                break
            if cfg.restart == "on-abnormal" and result == "exit-code":
                break
            self.set_state("activating", "auto-restart", Result=result)
            if self.stop_requested.wait(cfg.restart_usec / USEC):
                self.set_state("failed", "failed", Result=result)  # systemd keeps the failure
                self.log(f"Stopped {self.desc}.")
                break
            n = int(read_state(self.name).get("NRestarts") or 0) + 1
            update_state(self.name, NRestarts=n)
            self.log(f"{self.name}: Scheduled restart job, restart counter is at {n}.")
            self.log(f"Stopped {self.desc}.")
        update_state(self.name, supervisor_pid=0)
        return 0


def spawn_supervisor(name: str, job_id: str) -> int:
    """Start a detached supervisor (double fork, setsid, stdio on /dev/null). Returns its pid."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # intermediate child
        try:
            os.close(rfd)
            os.setsid()
            gpid = os.fork()
            if gpid == 0:  # the daemon
                os.close(wfd)
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
                os.closerange(3, 65536)
                os.chdir("/")
                # systemd.exec(5): a service's environment is the manager's (plus Environment=), never the
                # client's: the caller's agent-tools job marker must not reach it (the unit is not the job's)
                env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_TOOLS_")}
                env["SIM_SYSTEMD_ROOT"] = str(root())
                # nor its audit session (proc(5) /proc/PID/sessionid): systemd's services are PID 1's children, in
                # none; a caller's job started one of its own that this child would keep. Unsetting the loginuid
                # (4294967295) takes it out of it; it needs CAP_AUDIT_CONTROL (root), else the session stays.
                try:
                    with open("/proc/self/loginuid", "w") as f:
                        f.write("4294967295")
                except OSError:
                    pass
                os.execve(
                    sys.executable,
                    [sys.executable, os.path.abspath(__file__), "__supervise", name, job_id],
                    env,
                )
            os.write(wfd, str(gpid).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return int(data or b"0")


def is_supervisor(pid: int, name: str) -> bool:
    """Guards every signal sent to a recorded supervisor pid against pid reuse."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"__supervise" in argv and name.encode() in argv


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def owner_file() -> Path:
    """Where the process that owns the simulated host says who it is (see the module docstring)."""
    return root() / "run/sim-systemd/owner"


def start_ticks(pid: int) -> str:
    """The start time of process ``pid`` (proc(5) /proc/PID/stat field 22, clock ticks since boot), "" if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 and fields[0] not in ("Z", "X") else ""


def owner_gone() -> tuple[bool, bool]:
    """``(gone, remove_root)``: whether the owner named in :func:`owner_file` no longer runs (False without an
    owner file: no owner, nothing to outlive), and whether it asked for the root to be removed."""
    try:
        words = owner_file().read_text().split()
    except OSError:
        return False, False
    if len(words) < 2 or not words[0].isdigit():
        return False, False
    return start_ticks(int(words[0])) != words[1], "remove-root" in words[2:]


def remove_orphaned_root() -> None:
    """Remove the simulated host's root once no supervisor of it runs any more (the owner asked for it)."""
    import shutil

    d = state_dir() / "units"
    for f in d.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(json.loads(f.read_text()).get("supervisor_pid") or 0)
            if pid and pid != os.getpid() and pid_alive(pid):
                return  # another supervisor still runs: the last one out removes it
    r = root()
    if r != Path("/") and (r / "run/sim-systemd").is_dir():
        shutil.rmtree(r, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------------
# verbs


class Options:
    def __init__(self) -> None:
        self.no_block = False
        self.quiet = False
        self.value = False
        self.properties: list[str] = []
        self.lines = 10
        self.signal = "SIGTERM"


def warn_reload(name: str, need: bool) -> None:
    if need:
        sys.stderr.write(
            f"Warning: The unit file, source configuration file or drop-ins of {name} changed on "
            "disk. Run 'systemctl daemon-reload' to reload units.\n"
        )


def wait_job(name: str, job_id: str, spawned_pid: int) -> int:
    while True:
        st = read_state(name)
        job = st.get("job") or {}
        if job.get("id") != job_id:
            sys.stderr.write(f"Job for {name} canceled.\n")
            return 1
        if job.get("state") == "done":
            result = str(job.get("result"))
            if result == "done":
                return 0
            if result == "canceled":
                sys.stderr.write(f"Job for {name} canceled.\n")
                return 1
            reason = JOB_FAILURE_REASONS.get(result)
            head = f"Job for {name} failed because {reason}." if reason else f"Job for {name} failed."
            sys.stderr.write(f'{head}\nSee "systemctl status {name}" and "journalctl -xeu {name}" for details.\n')
            return 1
        if (spawned_pid <= 0 or not pid_alive(spawned_pid)) and not supervisor_alive(name):
            st = read_state(name)
            if (st.get("job") or {}).get("state") != "done":
                sys.stderr.write(f"Job for {name} failed.\n")
                return 1
        time.sleep(0.05)


def cmd_start(names: list[str], opts: Options, restart: bool) -> int:
    verb = "restart" if restart else "start"
    rc = 0
    for raw_name in names:
        name = unit_name(raw_name)
        snap, need = loaded_unit(name)
        if snap is None:
            sys.stderr.write(f"Failed to {verb} {name}: Unit {name} not found.\n")
            rc = 5
            continue
        warn_reload(name, need)
        job_id = uuid.uuid4().hex[:16]
        with flocked(state_lock(name)):
            st = read_state(name)
            alive = supervisor_alive(name)
            if not restart and alive and st.get("ActiveState") in ("active", "activating", "reloading"):
                job = st.get("job") or {}
                if st.get("ActiveState") != "activating" or job.get("state") == "done" or opts.no_block:
                    continue
                # join the start job already running, as systemctl does
                wait_for, sup_pid, spawn = str(job.get("id")), int(st.get("supervisor_pid") or 0), False
            else:
                st["job"] = {"id": job_id, "type": verb, "state": "waiting", "queued": now_usec()}
                write_atomic(state_file(name), json.dumps(st, indent=1, sort_keys=True))
                wait_for, sup_pid, spawn = job_id, 0, True
        if spawn:
            sup_pid = spawn_supervisor(name, job_id)
        if opts.no_block:
            continue
        rc = max(rc, wait_job(name, wait_for, sup_pid))
    return rc


def cmd_stop(names: list[str], opts: Options) -> int:
    rc = 0
    for raw_name in names:
        name = unit_name(raw_name)
        snap, need = loaded_unit(name)
        st0 = read_state(name)
        if snap is None and not st0:
            sys.stderr.write(f"Failed to stop {name}: Unit {name} not loaded.\n")
            rc = 5
            continue
        warn_reload(name, need)
        with flocked(state_lock(name)):
            st = read_state(name)
            st["job"] = {
                "id": uuid.uuid4().hex[:16],
                "type": "stop",
                "state": "running",
                "queued": now_usec(),
            }
            write_atomic(state_file(name), json.dumps(st, indent=1, sort_keys=True))
            pid = int(st.get("supervisor_pid") or 0)
            alive = supervisor_alive(name)
            if alive and pid and is_supervisor(pid, name):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        if opts.no_block or not alive:
            continue
        while supervisor_alive(name):
            time.sleep(0.05)
    return rc


def unit_properties(name: str) -> dict[str, str]:
    snap, need = loaded_unit(name)
    st = read_state(name)
    props: dict[str, str] = {"Id": name, "Names": name}
    if snap is None:
        props.update(
            LoadState="not-found",
            ActiveState=st.get("ActiveState", "inactive") if st else "inactive",
            SubState=st.get("SubState", "dead") if st else "dead",
            Description=name,
            FragmentPath="",
            NeedDaemonReload="no",
            Result=str(st.get("Result", "success")),
            MainPID="0",
            ExecMainPID=str(st.get("ExecMainPID", 0)),
            ExecMainStatus=str(st.get("ExecMainStatus", 0)),
            NRestarts=str(st.get("NRestarts", 0)),
            InvocationID=str(st.get("InvocationID", "")),
            UnitFileState="",
        )
        return props
    cfg = build_config(snap)
    main = cfg.exec_start[0] if cfg.exec_start else Command([])
    running = supervisor_alive(name)
    active = str(st.get("ActiveState", "inactive"))
    sub = str(st.get("SubState", "dead"))
    if not running and active in ("active", "activating", "deactivating", "reloading"):
        active, sub = "failed", "failed"  # the supervisor died (host reboot, kill -9): report it failed
    start_ts = format_timestamp(int(st.get("ExecMainStartTimestamp") or 0)) or "n/a"
    stop_ts = format_timestamp(int(st.get("ExecMainExitTimestamp") or 0)) or "n/a"
    code_name = {0: "(null)", 1: "exited", 2: "killed", 3: "dumped"}.get(int(st.get("ExecMainCode") or 0), "?")
    exec_line = (
        f"{{ path={main.argv[0] if main.argv else ''} ; argv[]={' '.join(main.argv)} ; "
        f"ignore_errors={'yes' if main.ignore_failure else 'no'} ; start_time=[{start_ts}] ; "
        f"stop_time=[{stop_ts}] ; pid={st.get('ExecMainPID', 0)} ; code={code_name} ; "
        f"status={st.get('ExecMainStatus', 0)}/{st.get('ExecMainStatus', 0)} }}"
    )
    props.update(
        {
            "Type": cfg.type,
            "Restart": cfg.restart,
            "NotifyAccess": cfg.notify_access,
            "RestartUSec": format_timespan(cfg.restart_usec),
            "TimeoutStartUSec": format_timespan(cfg.timeout_start_usec),
            "TimeoutStopUSec": format_timespan(cfg.timeout_stop_usec),
            "MainPID": str(st.get("MainPID", 0) if running else 0),
            "ExecMainStartTimestamp": format_timestamp(int(st.get("ExecMainStartTimestamp") or 0)),
            "ExecMainExitTimestamp": format_timestamp(int(st.get("ExecMainExitTimestamp") or 0)),
            "ExecMainPID": str(st.get("ExecMainPID", 0)),
            "ExecMainCode": str(st.get("ExecMainCode", 0)),
            "ExecMainStatus": str(st.get("ExecMainStatus", 0)),
            "ExecStart": exec_line,
            "StatusText": str(st.get("StatusText", "")),
            "Result": str(st.get("Result", "success")),
            "NRestarts": str(st.get("NRestarts", 0)),
            "InvocationID": str(st.get("InvocationID", "")),
            "Environment": " ".join(f"{k}={v}" for k, v in cfg.environment.items()),
            "WorkingDirectory": cfg.working_directory or "",
            "Description": cfg.description,
            "LoadState": "loaded",
            "ActiveState": active,
            "SubState": sub,
            "FragmentPath": cfg.fragment,
            "DropInPaths": " ".join(cfg.dropins),
            "UnitFileState": "enabled" if st.get("enabled") else "disabled",
            "StateChangeTimestamp": format_timestamp(int(st.get("StateChangeTimestamp") or 0)),
            "InactiveEnterTimestamp": format_timestamp(int(st.get("InactiveEnterTimestamp") or 0)),
            "ActiveEnterTimestamp": format_timestamp(int(st.get("ActiveEnterTimestamp") or 0)),
            "ActiveEnterTimestampMonotonic": "0",
            "NeedDaemonReload": "yes" if need else "no",
        }
    )
    return props


def cmd_show(names: list[str], opts: Options) -> int:
    wanted = [p for spec in opts.properties for p in spec.split(",") if p]
    for i, raw_name in enumerate(names):
        if i:
            print()
        props = unit_properties(unit_name(raw_name))
        keys = wanted or list(props)
        for key in keys:
            if key not in props:
                continue
            print(props[key] if opts.value else f"{key}={props[key]}")
    return 0


def ago(usec: int) -> str:
    secs = max(0, (now_usec() - usec) // USEC)
    return format_timespan(int(secs) * USEC) if secs else "0s"


def cmd_status(names: list[str], opts: Options) -> int:
    rc = 0
    entries = read_journal() if opts.lines > 0 else []
    for i, raw_name in enumerate(names):
        name = unit_name(raw_name)
        if i:
            print()
        snap, need = loaded_unit(name)
        if snap is None and not read_state(name):
            sys.stderr.write(f"Unit {name} could not be found.\n")
            rc = max(rc, 4)
            continue
        p = unit_properties(name)
        st = read_state(name)
        active, sub = p["ActiveState"], p["SubState"]
        bullet = {"active": "●", "failed": "×", "activating": "●", "deactivating": "●"}.get(active, "○")
        print(f"{bullet} {name} - {p.get('Description', name)}")
        print(
            f"     Loaded: {p['LoadState']} ({p.get('FragmentPath', '')}; "
            f"{p.get('UnitFileState', 'disabled')}; preset: enabled)"
        )
        if p.get("DropInPaths"):
            print(f"    Drop-In: {p['DropInPaths']}")
        stamp_key = "ActiveEnterTimestamp" if active == "active" else "StateChangeTimestamp"
        stamp = int(st.get(stamp_key) or 0)
        extra = f" (Result: {p['Result']})" if active == "failed" else ""
        when = f" since {format_timestamp(stamp)}; {ago(stamp)} ago" if stamp else ""
        state_text = active if active == "failed" else f"{active} ({sub})"
        print(f"     Active: {state_text}{extra}{when}")
        main_pid = int(p.get("MainPID", "0"))
        if main_pid:
            comm = ""
            with contextlib.suppress(OSError):
                comm = Path(f"/proc/{main_pid}/comm").read_text().strip()
            print(f"   Main PID: {main_pid} ({comm or '?'})")
        elif int(p.get("ExecMainPID", "0") or 0):
            code = int(p.get("ExecMainCode", "0"))
            status = int(p.get("ExecMainStatus", "0"))
            if code:
                print(f"   Main PID: {p['ExecMainPID']} ({describe_exit(code, status)})")
        if p.get("StatusText"):
            print(f'     Status: "{p["StatusText"]}"')
        if need:
            print(
                f"\nWarning: The unit file, source configuration file or drop-ins of {name} changed on disk. "
                "Run 'systemctl daemon-reload' to reload units."
            )
        mine = [e for e in entries if e.get("_SYSTEMD_UNIT") == name or e.get("UNIT") == name]
        if mine and opts.lines > 0:
            print()
            for e in mine[-opts.lines :]:
                ts = time.strftime("%b %d %H:%M:%S", time.localtime(int(e["__REALTIME_TIMESTAMP"]) / USEC))
                print(
                    f"{ts} {e.get('_HOSTNAME', '')} {e.get('SYSLOG_IDENTIFIER', '')}[{e.get('_PID', '')}]: "
                    f"{e.get('MESSAGE', '')}"
                )
        if active not in ("active", "reloading"):
            rc = max(rc, 3)
    return rc


def cmd_is(names: list[str], opts: Options, wanted: tuple[str, ...]) -> int:
    ok = False
    for raw_name in names:
        state = unit_properties(unit_name(raw_name))["ActiveState"]
        if not opts.quiet:
            print(state)
        ok = ok or state in wanted
    return 0 if ok else (1 if wanted == ("failed",) else 3)


def cmd_cat(names: list[str]) -> int:
    rc = 0
    for i, raw_name in enumerate(names):
        name = unit_name(raw_name)
        fragment, dropins = find_unit_files(name)
        if fragment is None:
            sys.stderr.write(f"No files found for {name}.\n")
            rc = 1
            continue
        _, need = loaded_unit(name)
        if i:
            print()
        if need:
            print(
                f"# Warning: {name} changed on disk, the version systemd has loaded is outdated.\n"
                "# This output shows the current version of the unit's original fragment and drop-in files.\n"
                "# If fragments or drop-ins were added or removed, they are not properly reflected in this "
                "output.\n# Run 'systemctl daemon-reload' to reload units."
            )
        for path in (fragment, *dropins):
            print(f"# {path}")
            sys.stdout.write(path.read_text(encoding="utf-8"))
            if dropins and path is not dropins[-1]:
                print()
    return rc


def cmd_reset_failed(names: list[str]) -> int:
    targets = [unit_name(n) for n in names] or [p.name[:-5] for p in (state_dir() / "units").glob("*.json")]
    for name in targets:
        with flocked(state_lock(name)):
            st = read_state(name)
            if st.get("ActiveState") == "failed":
                st.update(ActiveState="inactive", SubState="dead", Result="success")
                write_atomic(state_file(name), json.dumps(st, indent=1, sort_keys=True))
    return 0


def cmd_kill(names: list[str], opts: Options) -> int:
    sig_name = opts.signal.upper()
    try:
        sig = (
            int(sig_name)
            if sig_name.isdigit()
            else int(getattr(signal, sig_name if sig_name.startswith("SIG") else "SIG" + sig_name))
        )
    except (AttributeError, ValueError):
        sys.stderr.write(f"Failed to parse signal string {opts.signal}.\n")
        return 1
    for raw_name in names:
        name = unit_name(raw_name)
        pid = int(unit_properties(name).get("MainPID", "0"))
        if pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
    return 0


def cmd_enable(names: list[str], enabled: bool) -> int:
    for raw_name in names:
        update_state(unit_name(raw_name), enabled=enabled)
    return 0


USAGE = """systemctl [OPTIONS...] COMMAND ...  (simulated: a shim for hosts without systemd)

  start|stop|restart UNIT...   --no-block to only enqueue the job
  show UNIT...                 -p/--property=A,B  --value
  status|is-active|is-failed|cat|reset-failed|kill|enable|disable UNIT...
  daemon-reload
"""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["__supervise"]:
        return Supervisor(unit_name(args[1]), args[2]).run()
    opts = Options()
    positional: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--no-block":
            opts.no_block = True
        elif a in ("-q", "--quiet"):
            opts.quiet = True
        elif a == "--value":
            opts.value = True
        elif a in ("-p", "--property", "-P"):
            if i + 1 >= len(args):
                sys.stderr.write(f"systemctl: option requires an argument -- '{a}'\n")
                return 1
            opts.properties.append(args[i + 1])
            opts.value = opts.value or a == "-P"
            i += 1
        elif a.startswith("--property="):
            opts.properties.append(a.split("=", 1)[1])
        elif a.startswith("-p") and len(a) > 2:
            opts.properties.append(a[2:])
        elif a in ("-n", "--lines"):
            opts.lines = int(args[i + 1])
            i += 1
        elif a.startswith("--lines="):
            opts.lines = int(a.split("=", 1)[1])
        elif a in ("-s", "--signal", "--kill-whom") and i + 1 < len(args):
            if a != "--kill-whom":
                opts.signal = args[i + 1]
            i += 1
        elif a.startswith("--signal="):
            opts.signal = a.split("=", 1)[1]
        elif a in (
            "--no-pager",
            "--no-legend",
            "--plain",
            "-l",
            "--full",
            "--system",
            "-a",
            "--all",
            "--no-ask-password",
            "-o",
            "--output",
        ) or a.startswith("--output="):
            if a in ("-o", "--output"):
                i += 1
        elif a in ("-h", "--help"):
            print(USAGE)
            return 0
        elif a == "--version":
            print("systemd 252 (252-sim)\n+SIMULATED")
            return 0
        elif a.startswith("-") and a != "-":
            sys.stderr.write(f"systemctl: unrecognized option '{a}'\n")
            return 1
        else:
            positional.append(a)
        i += 1
    if not positional:
        sys.stderr.write("Too few arguments.\n")
        return 1
    verb, names = positional[0], positional[1:]
    needs_unit = {
        "start",
        "stop",
        "restart",
        "try-restart",
        "reload-or-restart",
        "status",
        "is-active",
        "is-failed",
        "cat",
        "kill",
        "enable",
        "disable",
        "show",
    }
    if verb in needs_unit and not names:
        sys.stderr.write("Too few arguments.\n")
        return 1
    if verb == "daemon-reload":
        daemon_reload()
        return 0
    if verb == "start":
        return cmd_start(names, opts, restart=False)
    if verb in ("restart", "reload-or-restart", "try-restart"):
        if verb == "try-restart":
            names = [n for n in names if unit_properties(unit_name(n))["ActiveState"] in ("active", "activating")]
        return cmd_start(names, opts, restart=True)
    if verb == "stop":
        return cmd_stop(names, opts)
    if verb == "show":
        return cmd_show(names, opts)
    if verb == "status":
        return cmd_status(names, opts)
    if verb == "is-active":
        return cmd_is(names, opts, ("active", "reloading"))
    if verb == "is-failed":
        return cmd_is(names, opts, ("failed",))
    if verb == "cat":
        return cmd_cat(names)
    if verb == "reset-failed":
        return cmd_reset_failed(names)
    if verb == "kill":
        return cmd_kill(names, opts)
    if verb in ("enable", "disable"):
        return cmd_enable(names, verb == "enable")
    sys.stderr.write(f"Unknown command verb {verb}.\n")
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
