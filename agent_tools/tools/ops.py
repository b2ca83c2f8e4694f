"""Operations tools: services, files, memory, readiness waits.

Files are read and written through the exec seam (``cat``/``mv`` over the host's shell), not SFTP: one seam
means recording, replay and policies see file writes too, and it works through any login shell. The write is
atomic all the same: content goes to a temp file in the same directory (created by ``cp -p`` of the old file,
so mode and owner are kept), then ``mv -f`` renames it over the target (rename(2) is atomic on one file
system).
"""

from __future__ import annotations

import difflib
import secrets
import shlex
from typing import TYPE_CHECKING, Any, Literal

import anyio
from pydantic import BaseModel, Field

from ..errors import BadArguments
from ..hosts.base import Host, run_on
from ..outcomes import Denied, Detached, Finished, NeedsApproval, ProbeReport
from ..probes.checks import UNIT_PROPS, advance, check_probes
from ..probes.parse import parse_free, parse_nvidia_smi, parse_systemctl_show, parse_timespan_s
from ..probes.specs import probe_from_dict

if TYPE_CHECKING:
    from .toolkit import RunCommandResult, Toolkit

__all__ = ["FileContent", "FileRestored", "FileWritten", "GpuMemory", "HostMemory", "ServiceStatus", "WaitResult"]

BACKUP_DIR = "${XDG_STATE_HOME:-$HOME/.local/state}/agent-tools/backups"
_UNIT_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:-_.@\\")


class ServiceStatus(BaseModel):
    host: str
    unit: str
    active_state: str
    sub_state: str
    result: str
    props: dict[str, str]
    journal: str = Field(default="", description="recent journal lines")


class FileContent(BaseModel):
    host: str
    path: str
    offset: int
    total_bytes: int
    text: str
    eof: bool


class FileWritten(BaseModel):
    host: str
    path: str
    bytes_written: int
    backup_id: str | None = Field(description="restore_file(host, path, backup_id) undoes this write")
    diff: str = Field(description="unified diff old → new")
    next: str = ""


class FileRestored(BaseModel):
    host: str
    path: str
    backup_id: str
    diff: str


class GpuMemory(BaseModel):
    host: str
    gpus: list[dict[str, int]] = Field(description="per GPU: index, used_mib, total_mib, free_mib")
    total_mib: int
    used_mib: int


class HostMemory(BaseModel):
    host: str
    total_bytes: int
    available_bytes: int
    used_bytes: int
    raw: dict[str, int]


class WaitResult(BaseModel):
    host: str
    outcome: Literal["ready", "failed", "deadline_exceeded"]
    elapsed_s: float
    probes: list[ProbeReport]
    why: str


def check_unit(unit: str) -> str:
    """Normalise a unit name (``sglang`` → ``sglang.service``). :raises BadArguments: illegal characters."""
    if not unit or not set(unit) <= _UNIT_CHARS or unit.startswith("-"):
        raise BadArguments(f"{unit!r} is not a systemd unit name")
    return unit if "." in unit else unit + ".service"


async def unit_props(host: Host, unit: str,
                     props: str = UNIT_PROPS + ",FragmentPath,NeedDaemonReload,LoadState") -> dict[str, str]:
    """``systemctl show -p PROPS UNIT`` as a dict."""
    res = await run_on(host, f"systemctl show -p {props} {shlex.quote(unit)}")
    return parse_systemctl_show(res.stdout.decode("utf-8", "replace"))


async def service_status(tk: Toolkit, host: str, unit: str, journal_lines: int = 10) -> ServiceStatus:
    """``systemctl show`` of the unit plus its recent journal lines."""
    h = tk.hosts.get(host)
    unit = check_unit(unit)
    props = await unit_props(h, unit)
    text = ""
    if journal_lines:
        res = await run_on(h, f"journalctl -u {shlex.quote(unit)} -n {journal_lines} -o cat --no-pager")
        text = res.stdout.decode("utf-8", "replace")[-4000:]
    return ServiceStatus(host=host, unit=unit, active_state=props.get("ActiveState", "?"),
                         sub_state=props.get("SubState", "?"), result=props.get("Result", "?"), props=props,
                         journal=text)


async def restart_service(tk: Toolkit, host: str, unit: str, daemon_reload: bool = True,
                          probes: list[dict[str, Any]] | None = None, deadline_s: float | None = None,
                          approval_id: str | None = None) -> RunCommandResult:
    """Restart a unit without blocking and return a ``detached`` job that follows it to readiness.

    Steps: (1) one round trip reads the unit's properties (``InvocationID``, ``ConditionTimestampMonotonic``,
    ``TimeoutStartUSec``: systemd.service(5)'s start timeout, after which systemd fails the start with
    Result=timeout) and the journal's cursor; (2) run ``systemctl daemon-reload && systemctl restart --no-block
    UNIT`` (``--no-block`` only enqueues the job; a plain restart blocks until Type=notify sends READY=1);
    (3) look at readiness once and return a job whose probes are the unit up in a *new* invocation for its
    settle window (:class:`~agent_tools.probes.specs.SystemdUnitProbe`) plus ``probes``, which count only
    against the new process; its deadline defaults to the unit's start timeout + 30 s.

    :param probes: extra probe specs (dicts). A ``systemd_unit`` probe of ``unit`` itself sets that probe's
        options (e.g. ``settle_s``) instead of adding a second one.
    :param deadline_s: seconds until a restart that is not ready counts as ``deadline_exceeded``.
    :raises BadArguments: invalid unit name or probes, or a unit the host does not know.
    """
    unit = check_unit(unit)
    extra = [probe_from_dict(p).model_dump(exclude_none=True) for p in (probes or [])]
    own = next((p for p in extra if p.get("kind") == "systemd_unit" and check_unit(str(p["unit"])) == unit), {})
    extra = [p for p in extra if p is not own]
    h = tk.hosts.get(host)
    props, cursor, unit_cursor = await _unit_and_cursor(h, unit)
    if props.get("LoadState") == "not-found":
        raise BadArguments(f"unit {unit} is not known on {host}")
    timeout_s = parse_timespan_s(props.get("TimeoutStartUSec", ""))
    if deadline_s is None:
        deadline_s = (timeout_s + 30.0) if timeout_s is not None else 900.0
    for p in extra:
        if p.get("kind") == "log" and p.get("unit") == unit and not p.get("cursor"):
            p["cursor"] = unit_cursor
    condition = props.get("ConditionTimestampMonotonic", "")
    spec = [{**own, "kind": "systemd_unit", "unit": unit, "not_invocation": props.get("InvocationID") or None,
             "before_condition_us": int(condition) if condition.isdigit() else None, "journal_cursor": cursor},
            *extra]
    cmd = ("systemctl daemon-reload && " if daemon_reload else "") + f"systemctl restart --no-block {shlex.quote(unit)}"
    out = await tk.run_command(host=host, command=cmd, budget_s=30.0, approval_id=approval_id,
                               _probes=spec, _deadline_s=deadline_s)
    if not isinstance(out, Finished) or out.exit_status != 0:
        return out  # detached (systemctl hung: the job follows it), or the enqueue failed, or denied/asked
    # the enqueue finished within its budget: the job now follows readiness through its probes
    status = await tk.runner.job_status(h, out.job_id, wait_s=0)
    allows = f"{timeout_s:g} s" if timeout_s is not None else "unlimited time"
    return Detached(host=host, command=cmd, job_id=out.job_id, elapsed_s=out.duration_s, budget_s=30.0,
                    deadline_s=deadline_s,
                    why=f"restart of {unit} enqueued (--no-block); readiness is followed by probes (the unit "
                        f"allows {allows} to start): {status.why}",
                    probes=status.probes, stdout=out.stdout, stderr=out.stderr, next=status.next)


async def _unit_and_cursor(h: Host, unit: str) -> tuple[dict[str, str], str | None, str | None]:
    """The unit's properties (:func:`unit_props`' set) and two journal tail cursors (journalctl(1) ``-n 0
    --show-cursor``: "from now on"): the whole journal's, and the unit's own (None when it has no lines yet),
    in one round trip. A log probe reads ``-u UNIT --after-cursor``, which wants a cursor of an entry that
    matches (see :func:`agent_tools.probes.systemd.after_cursor`)."""
    props = UNIT_PROPS + ",FragmentPath,NeedDaemonReload,LoadState"
    q = shlex.quote(unit)
    res = await run_on(h, f"systemctl show -p {props} {q}; journalctl -n 0 --show-cursor --no-pager -o cat "
                          f"2>/dev/null; echo '--unit--'; journalctl -u {q} -n 0 --show-cursor --no-pager -o cat "
                          "2>/dev/null")
    text = res.stdout.decode("utf-8", "replace")
    cursors: list[str | None] = [None, None]
    part = 0
    for line in text.splitlines():
        if line == "--unit--":
            part = 1
        elif line.startswith("-- cursor: "):
            cursors[part] = line.removeprefix("-- cursor: ").strip()
    shown = "\n".join(ln for ln in text.splitlines() if not ln.startswith("--"))
    return parse_systemctl_show(shown), cursors[0], cursors[1]


async def read_file(tk: Toolkit, host: str, path: str, offset: int = 0, limit: int = 65536) -> FileContent:
    """Bytes ``[offset, offset+limit)`` of a file on the host, decoded for reading."""
    _check_path(path)
    h = tk.hosts.get(host)
    q = shlex.quote(path)
    res = await run_on(h, f"wc -c < {q} && tail -c +{offset + 1} -- {q} | head -c {limit}")
    if res.exit_status != 0:
        raise BadArguments(f"cannot read {path} on {host}: {res.stderr.decode('utf-8', 'replace').strip()}")
    first, _, data = res.stdout.partition(b"\n")
    total = int(first.strip() or 0)
    return FileContent(host=host, path=path, offset=offset, total_bytes=total,
                       text=data.decode("utf-8", "replace"), eof=offset + len(data) >= total)


async def _read_all(h: Host, path: str) -> bytes | None:
    res = await run_on(h, f"cat -- {shlex.quote(path)}", max_output_bytes=8 << 20)
    return res.stdout if res.exit_status == 0 else None


async def write_file(tk: Toolkit, host: str, path: str, content: str, backup: bool = True,
                     approval_id: str | None = None) -> FileWritten | Denied | NeedsApproval:
    """Write ``content`` to ``path`` atomically (temp file + rename), keeping a backup; returns the diff."""
    _check_path(path)
    h = tk.hosts.get(host)
    decision = tk.check_policy(host, f"tee {shlex.quote(path)}", approval_id)
    if decision is not None:
        return decision
    old = await _read_all(h, path)
    data = content.encode()
    backup_id = None
    q = shlex.quote(path)
    script = "set -e; umask 077\n"
    if backup and old is not None:
        backup_id = "b_" + secrets.token_hex(8)
        script += (f'bd="{BACKUP_DIR}"; mkdir -p "$bd"; cp -p -- {q} "$bd/{backup_id}"; '
                   f'printf "%s" {q} > "$bd/{backup_id}.path"\n')
    script += (f"t={q}.at-tmp.$$; umask 022; if [ -e {q} ]; then cp -p -- {q} \"$t\"; fi; cat > \"$t\"; "
               f"mv -f -- \"$t\" {q}")
    res = await run_on(h, script, stdin=data)
    if res.exit_status != 0:
        raise BadArguments(f"cannot write {path} on {host}: {res.stderr.decode('utf-8', 'replace').strip()}")
    diff = _diff(old or b"", data, path)
    nxt = f"restore_file(host='{host}', path='{path}', backup_id='{backup_id}') undoes it" if backup_id else ""
    return FileWritten(host=host, path=path, bytes_written=len(data), backup_id=backup_id, diff=diff, next=nxt)


async def restore_file(tk: Toolkit, host: str, path: str, backup_id: str) -> FileRestored:
    """Put a backup made by write_file back in place (atomically); returns the diff current → restored."""
    _check_path(path)
    if not backup_id.startswith("b_") or not backup_id[2:].isalnum():
        raise BadArguments(f"{backup_id!r} is not a backup id (b_...)")
    h = tk.hosts.get(host)
    current = await _read_all(h, path)
    q = shlex.quote(path)
    script = (f'set -e; bd="{BACKUP_DIR}"; [ "$(cat "$bd/{backup_id}.path")" = {q} ] || '
              f'{{ echo "backup {backup_id} is not of {path}" >&2; exit 3; }}; '
              f't={q}.at-tmp.$$; cp -p -- "$bd/{backup_id}" "$t"; mv -f -- "$t" {q}; cat -- {q}')
    res = await run_on(h, script)
    if res.exit_status != 0:
        raise BadArguments(f"cannot restore {path} on {host}: {res.stderr.decode('utf-8', 'replace').strip()}")
    return FileRestored(host=host, path=path, backup_id=backup_id, diff=_diff(current or b"", res.stdout, path))


async def gpu_memory(tk: Toolkit, host: str) -> GpuMemory:
    """Per-GPU memory from ``nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits``."""
    h = tk.hosts.get(host)
    res = await run_on(h, "nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits")
    gpus = parse_nvidia_smi(res.stdout.decode("utf-8", "replace"))
    if res.exit_status != 0:
        raise BadArguments(f"nvidia-smi failed on {host}: {res.stderr.decode('utf-8', 'replace').strip()[:300]}")
    return GpuMemory(host=host, gpus=gpus, total_mib=sum(g["total_mib"] for g in gpus),
                     used_mib=sum(g["used_mib"] for g in gpus))


async def host_memory(tk: Toolkit, host: str) -> HostMemory:
    """Host memory from ``free -b`` (procps): total, available (what can be allocated without swapping)."""
    h = tk.hosts.get(host)
    res = await run_on(h, "free -b")
    mem = parse_free(res.stdout.decode("utf-8", "replace"))
    return HostMemory(host=host, total_bytes=mem.get("total_bytes", 0), available_bytes=mem.get("available_bytes", 0),
                      used_bytes=mem.get("used_bytes", 0), raw=mem)


async def wait_for(tk: Toolkit, host: str, probes: list[dict[str, Any]], deadline_s: float = 60.0) -> WaitResult:
    """Poll ``probes`` on ``host`` (backoff 0.2 → 2 s) until all pass, one fails, or ``deadline_s`` passes.

    As for a job (:func:`agent_tools.probes.checks.check_probes`): ``systemd_unit`` probes are checked first
    and must see their unit up for its settle window; the other probes count only while every unit is active.
    """
    specs = [probe_from_dict(p).model_dump() for p in probes]
    h = tk.hosts.get(host)
    t0 = anyio.current_time()
    delay = 0.2
    while True:
        results = await check_probes(h, specs)
        specs = advance(specs, results)
        reports = [r.report() for r in results]
        elapsed = round(anyio.current_time() - t0, 3)
        if any(r.state == "failed" for r in results):
            return WaitResult(host=host, outcome="failed", elapsed_s=elapsed, probes=reports,
                              why="; ".join(r.evidence for r in results if r.state == "failed"))
        if all(r.state == "passed" for r in results):
            return WaitResult(host=host, outcome="ready", elapsed_s=elapsed, probes=reports, why="all probes passed")
        remaining = deadline_s - (anyio.current_time() - t0)
        if remaining <= 0:
            return WaitResult(host=host, outcome="deadline_exceeded", elapsed_s=elapsed, probes=reports,
                              why="; ".join(f"{r.kind}: {r.evidence}" for r in results if r.state != "passed"))
        await anyio.sleep(min(delay, remaining))
        delay = min(delay * 1.6, 2.0)


class HttpResponse(BaseModel):
    host: str
    url: str
    status: int
    body: str = Field(description="response body (first 16 KiB, decoded)")


async def http_get(tk: Toolkit, host: str, url: str) -> HttpResponse:
    """GET ``url`` as seen from ``host`` (an SSH direct-tcpip channel for remote hosts; no curl needed)."""
    from ..probes.checks import http_get as _get

    h = tk.hosts.get(host)
    try:
        status, body = await _get(h, url, 10.0)
    except (OSError, TimeoutError, ValueError) as exc:
        raise BadArguments(f"GET {url} from {host} failed: {type(exc).__name__}: {exc}") from exc
    return HttpResponse(host=host, url=url, status=status, body=body[:16384].decode("utf-8", "replace"))


def _check_path(path: str) -> None:
    if not path.startswith("/") or "\0" in path:
        raise BadArguments(f"path {path!r} must be absolute")


def _diff(old: bytes, new: bytes, path: str) -> str:
    a = old.decode("utf-8", "replace").splitlines(keepends=True)
    b = new.decode("utf-8", "replace").splitlines(keepends=True)
    text = "".join(difflib.unified_diff(a, b, fromfile=f"{path} (before)", tofile=f"{path} (after)"))
    return text if len(text) < 8000 else text[:8000] + "\n… [diff truncated]\n"


