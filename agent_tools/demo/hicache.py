"""The hicache walkthrough: from memory analysis to deploying SGLang's hierarchical KV cache, verified.

An agent-shaped script: every step is a Toolkit tool call (``dispatch(name, json)``) and its outcome is
printed as a transcript line (or a JSON line with ``json_lines=True``). Steps:

1. GPU and host memory (``gpu_memory``, ``host_memory``), the unit (``service_status``, ``read_file``), the
   running server's args (``http_get /get_server_info``).
2. KV pool estimate. SGLang sizes the GPU KV pool as ``rest = available_after_weights - total_gpu_memory *
   (1 - mem_fraction_static)``; the hicache host pool is the GPU pool × ``--hicache-ratio`` (or
   ``--hicache-size`` GB) per rank, and the server refuses to start when host RAM available minus 10 GiB is
   not enough (sglang/srt/mem_cache/memory_pool_host.py).
3. Add ``--enable-hierarchical-cache --hicache-ratio 2.0 --hicache-write-policy write_through
   --hicache-io-backend kernel`` to ExecStart (``write_file``: atomic, backup, diff).
4. ``restart_service`` (daemon-reload + restart --no-block → a detached job with unit/health/log probes),
   then ``job_status(wait_s=...)`` until readiness is ready / failed / deadline_exceeded.
5. Verify ``/get_server_info`` shows hicache on. On failure: ``restore_file``, restart again, follow it to
   ready, and report what happened (the journal lines say why).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from ..hosts.registry import HostRegistry
from ..hosts.ssh import SshHost, SshSettings
from ..tools.toolkit import Toolkit

__all__ = ["HICACHE_FLAGS", "WalkthroughResult", "add_hicache_flags", "embedded_node", "run_walkthrough"]

HICACHE_FLAGS = ["--enable-hierarchical-cache", "--hicache-ratio", "2.0", "--hicache-write-policy",
                 "write_through", "--hicache-io-backend", "kernel"]
UNIT = "sglang.service"
TEN_GIB = 10 * 2**30


@dataclass
class WalkthroughResult:
    """What happened: ``verified`` (hicache on), ``rolled_back`` (restored and serving again) or ``failed``."""

    result: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    summary: str = ""


def add_hicache_flags(unit_text: str, flags: list[str] = HICACHE_FLAGS) -> str:
    """Append ``flags`` to the ExecStart command of a unit file (handles ``\\`` continuation lines).

    :raises ValueError: no ExecStart line, or hicache already enabled.
    """
    if "--enable-hierarchical-cache" in unit_text:
        raise ValueError("hicache is already enabled in this unit")
    lines = unit_text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.lstrip().startswith("ExecStart="):
            j = i
            while lines[j].rstrip("\n").endswith("\\") and j + 1 < len(lines):
                j += 1
            last = lines[j].rstrip("\n")
            indent = re.match(r"\s*", lines[j]).group(0) if j > i else "    "  # type: ignore[union-attr]
            lines[j] = last + " \\\n" + indent + " ".join(flags) + "\n"
            return "".join(lines)
    raise ValueError("no ExecStart= line in the unit")


def _port_of(unit_text: str) -> int:
    m = re.search(r"--port[ =](\d+)", unit_text)
    return int(m.group(1)) if m else 30000


class _Transcript:
    def __init__(self, tk: Toolkit, emit: Callable[[str], None], json_lines: bool) -> None:
        self.tk = tk
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
        result = await self.tk.dispatch(name, args)
        step = {"tool": name, "arguments": args, "result": result,
                "elapsed_s": round(anyio.current_time() - t0, 3)}
        self.steps.append(step)
        if self.json_lines:
            self.emit(json.dumps(step))
        else:
            self.emit(f"> {name}({', '.join(f'{k}={v!r}' for k, v in args.items() if k != 'content')})")
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


async def _follow(t: _Transcript, host: str, job_id: str, deadline_s: float) -> dict[str, Any]:
    t0 = anyio.current_time()
    while True:
        st = await t.call("job_status", job_id=job_id, wait_s=min(30.0, max(1.0, deadline_s)))
        if st.get("outcome") == "error":
            if not st.get("retryable") or anyio.current_time() - t0 > deadline_s + 60:
                return st
            continue
        if st.get("readiness") in ("ready", "failed", "deadline_exceeded"):
            return st


async def run_walkthrough(tk: Toolkit, host: str, *, emit: Callable[[str], None] = print,
                          json_lines: bool = False) -> WalkthroughResult:
    """Drive the walkthrough on ``host`` through ``tk`` (see the module docstring).

    :param emit: where transcript lines go (one string per line).
    :returns: a :class:`WalkthroughResult`; never raises for host problems (they are reported).
    """
    t = _Transcript(tk, emit, json_lines)
    t.say(f"step 1: memory analysis on {host}")
    gpu = await t.call("gpu_memory", host=host)
    mem = await t.call("host_memory", host=host)
    svc = await t.call("service_status", host=host, unit=UNIT, journal_lines=60)
    if "props" not in svc:
        return WalkthroughResult("failed", t.steps, f"cannot read {UNIT} on {host}: {svc.get('message')}")
    path = svc["props"].get("FragmentPath") or "/etc/systemd/system/sglang.service"
    unit = await t.call("read_file", host=host, path=path)
    unit_text = unit.get("text", "")
    port = _port_of(unit_text)
    info = await t.call("http_get", host=host, url=f"http://127.0.0.1:{port}/get_server_info")
    server: dict[str, Any] = {}
    if info.get("status") == 200:
        server = json.loads(info["body"])

    t.say("step 2: KV pool estimate")
    gpus = gpu.get("gpus", [])
    tp = int(server.get("tp_size") or max(1, len(gpus)))
    mfs = float(server.get("mem_fraction_static") or 0.88)
    kv_tokens = int(server.get("max_total_num_tokens") or 0)
    kv_bytes_tok = int(server.get("kv_bytes_per_token") or 0)
    gpu_kv_bytes = kv_tokens * kv_bytes_tok if kv_tokens and kv_bytes_tok else 0
    # SGLang logs the pool it allocated: "KV Cache is allocated. #tokens: N, KV size: X GB" (MLA models) or
    # "..., K size: X GB, V size: Y GB" (MHA models)
    m = re.search(r"KV size: ([0-9.]+) GB", svc.get("journal", ""))
    kv = re.search(r"K size: ([0-9.]+) GB, V size: ([0-9.]+) GB", svc.get("journal", ""))
    if not gpu_kv_bytes and m:
        gpu_kv_bytes = int(float(m.group(1)) * 1e9)
    elif not gpu_kv_bytes and kv:
        gpu_kv_bytes = int((float(kv.group(1)) + float(kv.group(2))) * 1e9)
    if not gpu_kv_bytes and gpus:  # fall back to the memory formula with what nvidia-smi shows
        total = gpus[0]["total_mib"] * 2**20
        used = gpus[0]["used_mib"] * 2**20
        gpu_kv_bytes = max(0, int(used - total * (1 - mfs)))
    ratio = float(HICACHE_FLAGS[HICACHE_FLAGS.index("--hicache-ratio") + 1])
    host_pool = int(gpu_kv_bytes * ratio * tp)
    avail = int(mem.get("available_bytes", 0))
    fits = host_pool <= avail - TEN_GIB
    t.say(f"GPU KV pool ≈ {gpu_kv_bytes / 1e9:.1f} GB per rank × tp {tp}; hicache ratio {ratio:g} needs "
          f"≈ {host_pool / 1e9:.1f} GB host RAM; available {avail / 1e9:.1f} GB − 10 GiB reserve → "
          + ("fits" if fits else "does NOT fit: expect the server to refuse and a rollback"))

    t.say("step 3: add the hicache flags to the unit (atomic write, backup, diff)")
    try:
        new_text = add_hicache_flags(unit_text)
    except ValueError as exc:
        return WalkthroughResult("failed", t.steps, f"cannot edit the unit: {exc}")
    wrote = await t.call("write_file", host=host, path=path, content=new_text, backup=True)
    if wrote.get("outcome") in ("error", "denied", "needs_approval"):
        return WalkthroughResult("failed", t.steps, f"write_file: {wrote.get('message') or wrote.get('reason')}")
    backup_id = wrote.get("backup_id")

    t.say("step 4: daemon-reload + restart (detached), follow readiness")
    probes = [{"kind": "http", "url": f"http://127.0.0.1:{port}/health"},
              {"kind": "log", "unit": UNIT, "pattern": "The server is fired up and ready to roll!",
               "fail_pattern": "Not enough host memory|Traceback"}]
    restart = await t.call("restart_service", host=host, unit=UNIT, probes=probes)
    if restart.get("outcome") != "detached":
        return WalkthroughResult("failed", t.steps, f"restart_service: {restart}")
    st = await _follow(t, host, restart["job_id"], float(restart.get("deadline_s") or 900))

    if st.get("readiness") == "ready":
        t.say("step 5: verify /get_server_info")
        info = await t.call("http_get", host=host, url=f"http://127.0.0.1:{port}/get_server_info")
        args = json.loads(info.get("body") or "{}")
        on = bool(args.get("enable_hierarchical_cache"))
        summary = (f"hicache verified on {host}: enable_hierarchical_cache={on}, hicache_ratio="
                   f"{args.get('hicache_ratio')}, write_policy={args.get('hicache_write_policy')}, io_backend="
                   f"{args.get('hicache_io_backend')}, max_total_num_tokens={args.get('max_total_num_tokens')}")
        t.say(summary)
        return WalkthroughResult("verified" if on else "failed", t.steps, summary)

    why = st.get("why", "")
    t.say(f"the restart did not become ready ({st.get('readiness')}): rolling back with backup {backup_id}")
    if backup_id:
        await t.call("restore_file", host=host, path=path, backup_id=backup_id)
    again = await t.call("restart_service", host=host, unit=UNIT, probes=probes[:1])
    st2 = await _follow(t, host, again["job_id"], float(again.get("deadline_s") or 900)) \
        if again.get("outcome") == "detached" else again
    state = "serving again without hicache" if st2.get("readiness") == "ready" else f"NOT serving ({st2})"
    summary = f"hicache NOT enabled on {host}: the restart failed ({why.splitlines()[0] if why else '?'}); " \
              f"restored the previous unit; {state}"
    t.say(summary)
    return WalkthroughResult("rolled_back" if st2.get("readiness") == "ready" else "failed", t.steps, summary)


@asynccontextmanager
async def embedded_node(profile: str = "default", *, load_s: float = 8.0,
                        workdir: Path | None = None) -> AsyncIterator[tuple[str, HostRegistry]]:
    """A simulated GPU node on an in-process SSH server on loopback (no root, no network).

    The node runs the simulated SGLang server under a ``systemctl``/``journalctl`` shim, with simulated
    ``nvidia-smi`` and ``free``, as the current user. Yields ``(alias, registry)``.

    :param profile: ``default`` (2 TiB host RAM: hicache fits) or ``small_ram`` (it does not).
    :param load_s: the simulated model load time in seconds (a real node: ~11 minutes).
    """
    import tempfile

    from .embedded import EmbeddedHost
    from .sim import install as sim_install

    with tempfile.TemporaryDirectory(prefix="agent-tools-node-") as tmp:
        root = Path(workdir or tmp)
        port = _free_port()
        sim_install.install(root, profile, load_s, True, _python(), port)
        env = {
            "PATH": f"{root}/usr/local/bin:/usr/local/bin:/usr/bin:/bin",
            "SIM_SYSTEMD_ROOT": str(root),
            "SGLANG_SIM_PROFILE": str(root / "etc/sglang-sim/profile.json"),
            "XDG_STATE_HOME": str(root / "state"),
        }
        async with EmbeddedHost(root=root / "sshd", env=env, alias="gpu-node-1") as eh:
            host = SshHost(SshSettings(eh.alias, config_paths=[str(eh.config_path)]))
            registry = HostRegistry({eh.alias: host})
            try:
                # bring the service up once, as it was before the agent came (no hicache)
                tk = Toolkit(registry)
                await tk.dispatch("run_command", {"host": eh.alias, "budget_s": 60,
                                                  "command": f"systemctl start {shlex.quote(UNIT)}"})
                yield eh.alias, registry
            finally:
                with anyio.CancelScope(shield=True):
                    tk2 = Toolkit(registry)
                    await tk2.dispatch("run_command", {"host": eh.alias, "budget_s": 20,
                                                       "command": f"systemctl stop {shlex.quote(UNIT)}"})
                    await registry.aclose()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _python() -> str:
    import shutil
    import sys

    return shutil.which("python3") or sys.executable
