"""The hicache walkthrough: from memory analysis to deploying SGLang's hierarchical KV cache, verified.

An agent-shaped script: every step is one tool call chosen from the results before it (no value known in
advance but the unit's name), made through a :data:`Caller` (a Toolkit's ``dispatch``, or an MCP client
session: the benchmark ``agent_view`` drives the same script over MCP). Each outcome is printed as a
transcript line (or a JSON line with ``json_lines=True``). Steps:

1. Which host (``list_hosts``, when none is given); GPU and host memory (``gpu_memory``, ``host_memory``); the
   unit's file and the KV pool it allocated (``service_status`` with ``grep``: SGLang logs "KV Cache is
   allocated. #tokens: N, KV size: X GB" per rank); the unit file (``read_file``).
2. KV pool estimate. The hicache host pool is the GPU pool × ``--hicache-ratio`` (or ``--hicache-size`` GB)
   per rank, and SGLang refuses to start when host RAM available minus 10 GiB is not enough
   (sglang/srt/mem_cache/memory_pool_host.py). The GPU pool itself is ``available_after_weights -
   total_gpu_memory * (1 - mem_fraction_static)`` (the fallback when the journal has no KV line).
3. Add ``--enable-hierarchical-cache --hicache-ratio 2.0 --hicache-write-policy write_through
   --hicache-io-backend kernel`` to ExecStart (``edit_file``: the last ExecStart line, exact text; atomic,
   backup, diff).
4. ``restart_service`` (daemon-reload + restart --no-block → a detached job with unit/health/log probes),
   then ``job_status(wait_s=...)`` until readiness is ready / failed / deadline_exceeded.
5. Verify ``/get_server_info`` shows hicache on (``http_get`` with ``fields``). On failure: ``restore_file``,
   restart again, follow it to ready, and report what happened (the failed probe's evidence says why).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..tools.toolkit import Toolkit

__all__ = ["HICACHE_FLAGS", "KV_LINE_GREP", "UNIT", "VERIFY_FIELDS", "Caller", "HicacheFit", "WalkthroughResult",
           "add_hicache_flags", "estimate_hicache", "hicache_edit", "missing_flags", "port_of", "run_walkthrough"]

HICACHE_FLAGS = ["--enable-hierarchical-cache", "--hicache-ratio", "2.0", "--hicache-write-policy",
                 "write_through", "--hicache-io-backend", "kernel"]
UNIT = "sglang.service"
GIB = 2**30
TEN_GIB = 10 * GIB
#: journal lines that say how large SGLang's GPU KV pool is (MLA models: "KV size"; MHA: "K size ..., V size")
KV_LINE_GREP = "KV Cache is allocated"
#: what /get_server_info must show once hicache is on
VERIFY_FIELDS = ["enable_hierarchical_cache", "hicache_ratio", "hicache_write_policy", "hicache_io_backend"]

Caller = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
"""``await call(tool_name, arguments)`` → the result as the model reads it (a JSON object)."""


@dataclass
class WalkthroughResult:
    """What happened: ``verified`` (hicache on), ``rolled_back`` (restored and serving again) or ``failed``."""

    result: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    summary: str = ""


def _exec_words(unit_text: str) -> list[str]:
    """The words of the unit's ExecStart commands (``\\`` continuations joined; ``--name=value`` as two words)."""
    words: list[str] = []
    lines = unit_text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("ExecStart="):
            command = lines[i].lstrip()[len("ExecStart="):]
            while command.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command.rstrip()[:-1] + " " + lines[i]
            for word in command.split():
                words.extend(word.split("=", 1) if word.startswith("--") and "=" in word else [word])
        i += 1
    return words


def missing_flags(unit_text: str, flags: list[str]) -> list[str]:
    """The part of ``flags`` the unit's ExecStart lacks: each ``--name`` with the words after it up to the next
    ``--`` word (its value) is kept unless the command has ``--name`` last with that value (argparse: the last
    one wins), in order."""
    words = _exec_words(unit_text)
    out: list[str] = []
    i = 0
    while i < len(flags):
        j = i + 1
        while j < len(flags) and not flags[j].startswith("--"):
            j += 1
        group = flags[i:j]
        at = max((k for k, w in enumerate(words) if w == group[0]), default=-1)
        if at < 0 or words[at + 1:at + len(group)] != group[1:]:
            out.extend(group)
        i = j
    return out


def hicache_edit(unit_text: str, flags: list[str] = HICACHE_FLAGS) -> tuple[str, str]:
    """The ``edit_file`` that appends the ``flags`` its ExecStart command lacks (:func:`missing_flags`) to a unit
    file: ``(old, new)`` where ``old`` is the last line of the ExecStart command (``\\`` continuation lines
    followed) with its newline, and ``new`` that line continued by one more line holding the flags.

    :raises ValueError: no ExecStart line, or the unit already has every flag.
    """
    lines = unit_text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.lstrip().startswith("ExecStart="):
            add = missing_flags(unit_text, flags)
            if not add:
                raise ValueError(f"the unit already has every flag: {' '.join(flags)}")
            j = i
            while lines[j].rstrip("\n").endswith("\\") and j + 1 < len(lines):
                j += 1
            last = lines[j].rstrip("\n")
            indent = re.match(r"\s*", lines[j]).group(0) if j > i else "    "  # type: ignore[union-attr]
            end = "\n" if lines[j].endswith("\n") else ""
            return lines[j], last + " \\\n" + indent + " ".join(add) + end
    raise ValueError("no ExecStart= line in the unit")


def add_hicache_flags(unit_text: str, flags: list[str] = HICACHE_FLAGS) -> str:
    """``unit_text`` with the ``flags`` it lacks appended to its ExecStart command (see :func:`hicache_edit`).

    :raises ValueError: no ExecStart line, or the unit already has every flag.
    """
    old, new = hicache_edit(unit_text, flags)
    return unit_text.replace(old, new, 1)


@dataclass(frozen=True)
class HicacheFit:
    """Whether the hicache host pool fits a node's RAM (see :func:`estimate_hicache`); bytes unless named.

    :param gpu_kv_bytes: the GPU KV pool of one rank.
    :param tp: tensor-parallel ranks (each has its own host pool).
    :param ratio: ``--hicache-ratio``.
    :param host_pool_bytes: ``gpu_kv_bytes * ratio * tp``.
    :param available_bytes: host RAM available (``free -b``).
    """

    gpu_kv_bytes: int
    tp: int
    ratio: float
    host_pool_bytes: int
    available_bytes: int

    @property
    def fits(self) -> bool:
        """SGLang starts only when the host pool fits in available RAM minus its 10 GiB reserve."""
        return self.host_pool_bytes <= self.available_bytes - TEN_GIB

    def summary(self) -> str:
        """One line: the estimate and whether it fits (sizes in GiB, as the 10 GiB reserve)."""
        return (f"GPU KV pool ≈ {self.gpu_kv_bytes / GIB:.1f} GiB per rank × tp {self.tp}; hicache ratio "
                f"{self.ratio:g} needs ≈ {self.host_pool_bytes / GIB:.1f} GiB host RAM; available "
                f"{self.available_bytes / GIB:.1f} GiB − 10 GiB reserve → "
                + ("fits" if self.fits else "does NOT fit: expect the server to refuse and a rollback"))


def estimate_hicache(gpu: dict[str, Any], mem: dict[str, Any], journal: str, unit_text: str,
                     flags: list[str] = HICACHE_FLAGS) -> HicacheFit:
    """The hicache host pool a node needs, from the results of ``gpu_memory``, ``host_memory``, the unit's journal
    (its "KV Cache is allocated" line) and the unit file: per rank, the GPU KV pool (the journal's "KV size: X GB",
    or "K size + V size"; else ``used - total * (1 - mem_fraction_static)`` from nvidia-smi) times
    ``--hicache-ratio`` (sglang/srt/mem_cache/memory_pool_host.py), times the tensor-parallel ranks."""
    gpus = gpu.get("gpus", [])
    tp = int(_flag(unit_text, "--tp", "") or _flag(unit_text, "--tp-size", "") or max(1, len(gpus)))
    mfs = float(_flag(unit_text, "--mem-fraction-static", "0.88"))
    m = re.search(r"KV size: ([0-9.]+) GB", journal)
    kv = re.search(r"K size: ([0-9.]+) GB, V size: ([0-9.]+) GB", journal)
    gpu_kv_bytes = 0
    if m:
        gpu_kv_bytes = int(float(m.group(1)) * 1e9)
    elif kv:
        gpu_kv_bytes = int((float(kv.group(1)) + float(kv.group(2))) * 1e9)
    elif gpus:  # fall back to the memory formula with what nvidia-smi shows
        total = gpus[0]["total_mib"] * 2**20
        used = gpus[0]["used_mib"] * 2**20
        gpu_kv_bytes = max(0, int(used - total * (1 - mfs)))
    ratio = float(flags[flags.index("--hicache-ratio") + 1]) if "--hicache-ratio" in flags else 2.0
    return HicacheFit(gpu_kv_bytes, tp, ratio, int(gpu_kv_bytes * ratio * tp), int(mem.get("available_bytes", 0)))


def port_of(unit_text: str) -> int:
    """The ``--port`` of the server's command line in a unit file (SGLang's default 30000 when absent)."""
    return _port_of(unit_text)


def _port_of(unit_text: str) -> int:
    m = re.search(r"--port[ =](\d+)", unit_text)
    return int(m.group(1)) if m else 30000


def _flag(unit_text: str, name: str, default: str) -> str:
    m = re.search(rf"{re.escape(name)}[ =](\S+)", unit_text)
    return m.group(1) if m else default


class _Transcript:
    def __init__(self, call: Caller, emit: Callable[[str], None], json_lines: bool) -> None:
        self._call = call
        self.emit = emit
        self.json_lines = json_lines
        self.steps: list[dict[str, Any]] = []

    def say(self, text: str) -> None:
        if self.json_lines:
            self.emit(json.dumps({"note": text}))
        else:
            self.emit(f"# {text}")

    async def call(self, name: str, **args: Any) -> dict[str, Any]:
        t0 = anyio.current_time()
        result = await self._call(name, args)
        step = {"tool": name, "arguments": args, "result": result,
                "elapsed_s": round(anyio.current_time() - t0, 3)}
        self.steps.append(step)
        if self.json_lines:
            self.emit(json.dumps(step))
        else:
            shown = {k: v for k, v in args.items() if k not in ("content", "old", "new")}
            self.emit(f"> {name}({', '.join(f'{k}={v!r}' for k, v in shown.items())})")
            self.emit("< " + _short(result))
        return result


def _short(result: dict[str, Any]) -> str:
    r = dict(result)
    for key in ("stdout", "stderr", "new_stdout", "new_stderr"):
        if isinstance(r.get(key), dict):
            text = r[key].get("text", "")
            r[key] = text if len(text) < 300 else text[:120] + " … " + text[-160:]
    for key in ("text", "body", "journal", "diff"):
        if isinstance(r.get(key), str) and len(r[key]) > 600:
            r[key] = r[key][:300] + " … " + r[key][-250:]
    return json.dumps(r, ensure_ascii=False)


async def _follow(t: _Transcript, job_id: str, deadline_s: float) -> dict[str, Any]:
    t0 = anyio.current_time()
    while True:
        st = await t.call("job_status", job_id=job_id, wait_s=min(30.0, max(1.0, deadline_s)))
        if st.get("outcome") == "error":
            if not st.get("retryable") or anyio.current_time() - t0 > deadline_s + 60:
                return st
            continue
        if st.get("readiness") in ("ready", "failed", "deadline_exceeded", "superseded"):
            return st


def _pick_host(listing: dict[str, Any]) -> str | None:
    """The GPU node among the hosts listed: not ``local``; a name with "gpu" first."""
    names = [str(h["host"]) for h in listing.get("hosts", []) if isinstance(h.get("host"), str) and
             h["host"] != "local"]
    gpu = [n for n in names if "gpu" in n.lower()]
    return (gpu or names)[0] if names else None


def _why_failed(st: dict[str, Any]) -> str:
    """The evidence that explains a failed readiness: a failed log probe's line, else the first line of why."""
    for p in st.get("probes", []):
        if p.get("state") == "failed" and p.get("kind") == "log" and p.get("evidence"):
            return str(p["evidence"]).splitlines()[-1]
    why = str(st.get("why", ""))
    return why.splitlines()[0] if why else "?"


async def run_walkthrough(tk: Toolkit | Caller, host: str | None, *, emit: Callable[[str], None] = print,
                          json_lines: bool = False) -> WalkthroughResult:
    """Drive the walkthrough on ``host`` (see the module docstring).

    :param tk: a :class:`Toolkit` (its ``dispatch`` is called) or any :data:`Caller`.
    :param host: the host alias; None: ask ``list_hosts`` and take the GPU node it lists.
    :param emit: where transcript lines go (one string per line).
    :returns: a :class:`WalkthroughResult`; never raises for host problems (they are reported).
    """
    call: Caller = tk.dispatch if isinstance(tk, Toolkit) else tk
    t = _Transcript(call, emit, json_lines)
    if host is None:
        host = _pick_host(await t.call("list_hosts"))
        if host is None:
            return WalkthroughResult("failed", t.steps, "list_hosts lists no host but local")
    t.say(f"step 1: memory analysis on {host}")
    gpu = await t.call("gpu_memory", host=host)
    mem = await t.call("host_memory", host=host)
    svc = await t.call("service_status", host=host, unit=UNIT, grep=KV_LINE_GREP, journal_lines=1)
    if svc.get("outcome") == "error" or svc.get("state") == "not-found" or not svc.get("unit_file"):
        return WalkthroughResult("failed", t.steps, f"cannot use {UNIT} on {host}: "
                                                    f"{svc.get('message') or svc.get('note') or svc}")
    path = str(svc["unit_file"])
    unit = await t.call("read_file", host=host, path=path)
    unit_text = unit.get("text", "")
    port = _port_of(unit_text)

    t.say("step 2: KV pool estimate")
    fit = estimate_hicache(gpu, mem, str(svc.get("journal", "")), unit_text)
    t.say(fit.summary())

    t.say("step 3: add the hicache flags to the unit (one exact edit: atomic, backup, diff)")
    try:
        old, new = hicache_edit(unit_text)
    except ValueError as exc:
        return WalkthroughResult("failed", t.steps, f"cannot edit the unit: {exc}")
    wrote = await t.call("edit_file", host=host, path=path, old=old, new=new)
    if wrote.get("outcome") in ("error", "denied", "needs_approval"):
        return WalkthroughResult("failed", t.steps, f"edit_file: {wrote.get('message') or wrote.get('reason')}")
    backup_id = wrote.get("backup_id")

    t.say("step 4: daemon-reload + restart (detached), follow readiness")
    probes = [{"kind": "http", "url": f"http://127.0.0.1:{port}/health"},
              {"kind": "log", "unit": UNIT, "pattern": "The server is fired up and ready to roll!",
               "fail_pattern": "Not enough host memory|Traceback"}]
    restart = await t.call("restart_service", host=host, unit=UNIT, probes=probes)
    if restart.get("outcome") != "detached":
        return WalkthroughResult("failed", t.steps, f"restart_service: {restart}")
    st = await _follow(t, restart["job_id"], float(restart.get("deadline_s") or 900))

    if st.get("readiness") == "ready":
        t.say("step 5: verify /get_server_info")
        info = await t.call("http_get", host=host, url=f"http://127.0.0.1:{port}/get_server_info",
                            fields=VERIFY_FIELDS)
        data = info.get("data")
        args: dict[str, Any] = data if isinstance(data, dict) else {}
        on = bool(args.get("enable_hierarchical_cache"))
        summary = (f"hicache verified on {host}: enable_hierarchical_cache={on}, hicache_ratio="
                   f"{args.get('hicache_ratio')}, write_policy={args.get('hicache_write_policy')}, io_backend="
                   f"{args.get('hicache_io_backend')}")
        t.say(summary)
        return WalkthroughResult("verified" if on else "failed", t.steps, summary)

    why = _why_failed(st)
    t.say(f"the restart did not become ready ({st.get('readiness')}): {why}; rolling back with backup {backup_id}")
    if backup_id:
        await t.call("restore_file", host=host, path=path, backup_id=backup_id)
    again = await t.call("restart_service", host=host, unit=UNIT, probes=probes[:1])
    st2 = await _follow(t, again["job_id"], float(again.get("deadline_s") or 900)) \
        if again.get("outcome") == "detached" else again
    state = "serving again without hicache" if st2.get("readiness") == "ready" else f"NOT serving ({st2})"
    summary = f"hicache NOT enabled on {host}: the restart failed ({why}); restored the previous unit; {state}"
    t.say(summary)
    return WalkthroughResult("rolled_back" if st2.get("readiness") == "ready" else "failed", t.steps, summary)
