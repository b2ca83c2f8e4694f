#!/usr/bin/env python3
"""A simulated SGLang server for the hierarchical-KV-cache walkthrough (standard library only).

Copy this single file to a host and run it with ``python3 sglang_server.py --model-path ... --tp 8``; it
accepts the SGLang flags the walkthrough uses, spends a (scaled) start-up time with its HTTP port closed,
prints log lines shaped like SGLang's, then serves ``/health``, ``/health_generate``, ``/get_server_info``,
``/get_model_info``, ``/v1/models`` and ``/generate`` on ``--host:--port``.

Node description (the "profile", JSON): ``--sim-profile PATH``, else ``$SGLANG_SIM_PROFILE``, else
``/etc/sglang-sim/profile.json``, else ``profile_default.json`` next to this file.

Memory model (per GPU rank; GPU sizes in GiB and host sizes in 1e9 bytes, as SGLang prints them)
-----------------------------------------------------------------------------------------------
Sources: SGLang ``python/sglang/srt/model_executor/model_runner.py`` (``profile_max_num_token`` /
``_profile_available_bytes``) and ``python/sglang/srt/mem_cache/memory_pool_host.py`` (``HostKVCache``).

* ``weights = model.weights_bytes / tp``
* ``available_after_weights = gpu_total - weights - gpu_overhead_bytes`` (CUDA context, NCCL buffers)
* ``rest = available_after_weights - gpu_total * (1 - mem_fraction_static)``; ``rest <= 0`` fails with
  "Not enough memory. Please try to increase --mem-fraction-static." (real SGLang uses the free memory
  measured before loading as ``gpu_total``; the difference is the overhead term here).
* ``max_total_num_tokens = rest // kv_bytes_per_token``; the GPU KV pool is that many tokens.
* hierarchical cache, per rank: ``host_tokens = tokens * hicache_ratio`` (or ``hicache_size * 1e9 //
  kv_bytes_per_token`` when ``--hicache-size`` > 0), aligned up to the page size; SGLang asserts the host pool
  is larger than the device pool (so ratio must be > 1). Each rank checks its request against the host's
  available memory minus a 10 GiB reserve (``HICACHE_HOST_MEMORY_RESERVE_BYTES``); ranks allocate one after
  the other here, so all ranks fit exactly when ``tp * per_rank <= host_available - 10 GiB``. The first rank
  that does not fit raises "Not enough host memory available. Requesting X GB but only have Y GB free.
  Please reduce the size of the hierarchical cache." and the process exits 1.
* GPU memory reported to the fake ``nvidia-smi`` (via the state file): overhead + weights (growing while
  loading) + KV pool + ``cuda_graph_bytes`` once ready; nothing once stopped.

Readiness: the port stays closed (connection refused) while "loading"; then ``/health`` answers 503 for
``timing.warmup_s`` seconds and 200 afterwards, when "The server is fired up and ready to roll!" is printed
and, under systemd (``$NOTIFY_SOCKET``), ``READY=1`` is sent (sd_notify(3); real SGLang does not do this, it
lets Type=notify units work). SIGTERM/SIGINT stop the server with exit status 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

GIB = 1 << 30
HOST_RESERVE_BYTES = 10 * GIB
DEFAULT_PROFILE_PATH = "/etc/sglang-sim/profile.json"
SIM_VERSION = "0.4.9.post6-sim"


# ---------------------------------------------------------------------------------------------------------
# profile and state files (the same lookups are repeated in nvidia_smi.py and free.py: each file stands alone)


def find_profile(explicit: str | None = None) -> Path:
    """The profile: explicit path, $SGLANG_SIM_PROFILE, /etc/sglang-sim/profile.json, or the bundled one."""
    if explicit:
        return Path(explicit)
    env = os.environ.get("SGLANG_SIM_PROFILE")
    if env:
        return Path(env)
    if Path(DEFAULT_PROFILE_PATH).exists():
        return Path(DEFAULT_PROFILE_PATH)
    return Path(__file__).resolve().with_name("profile_default.json")


def load_profile(explicit: str | None = None) -> dict[str, Any]:
    path = find_profile(explicit)
    with open(path, encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def state_paths(profile: dict[str, Any]) -> list[Path]:
    """Candidate state files, preferred first: $SGLANG_SIM_STATE, the profile's, then one under $TMPDIR."""
    out: list[Path] = []
    env = os.environ.get("SGLANG_SIM_STATE")
    if env:
        out.append(Path(env))
    configured = profile.get("state_path")
    if configured:
        out.append(Path(str(configured)))
    out.append(Path(tempfile.gettempdir()) / "sglang-sim" / "state.json")
    return out


class StateWriter:
    """Writes the server's state JSON atomically (tmp + rename) to the first writable candidate path."""

    def __init__(self, profile: dict[str, Any]) -> None:
        self.path: Path | None = None
        for cand in state_paths(profile):
            try:
                cand.parent.mkdir(parents=True, exist_ok=True)
                probe = cand.with_name(f".{cand.name}.probe.{os.getpid()}")
                probe.write_text("")
                probe.unlink()
            except OSError:
                continue
            self.path = cand
            break

    def write(self, state: dict[str, Any]) -> None:
        if self.path is None:
            return
        tmp = self.path.with_name(f".{self.path.name}.tmp.{os.getpid()}")
        try:
            tmp.write_text(json.dumps(state, indent=1, sort_keys=True), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()


def proc_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks), to tell a live process from a reused pid."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------------------
# memory model


class SimError(Exception):
    """A start-up failure: ``kind`` is the Python exception name SGLang would raise."""

    def __init__(self, kind: str, message: str, rank: int = 0) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.rank = rank


def gpu_plan(profile: dict[str, Any], tp: int, mem_fraction_static: float, kv_dtype: str = "auto") -> dict[str, Any]:
    """Per-rank GPU memory plan. Raises SimError when the KV pool does not fit."""
    gpu = profile["gpu"]
    model = profile["model"]
    if tp < 1:
        raise SimError("ValueError", f"tp_size must be >= 1, got {tp}")
    if tp > int(gpu["count"]):
        raise SimError("RuntimeError", "CUDA error: invalid device ordinal", rank=int(gpu["count"]))
    gpu_total = int(gpu["memory_total_mib"]) * (1 << 20)
    overhead = int(profile.get("gpu_overhead_bytes", 0))
    weights = int(model["weights_bytes"]) // tp
    available_after_weights = gpu_total - weights - overhead
    rest = available_after_weights - gpu_total * (1.0 - mem_fraction_static)
    kv_bytes = int(model["kv_bytes_per_token"])
    if kv_dtype.startswith("fp8"):
        kv_bytes //= 2
    tokens = int(rest // kv_bytes) if rest > 0 else 0
    if tokens <= 0:
        raise SimError("RuntimeError", "Not enough memory. Please try to increase --mem-fraction-static.")
    return {
        "gpu_total": gpu_total,
        "overhead": overhead,
        "weights": weights,
        "available_after_weights": available_after_weights,
        "rest": int(rest),
        "kv_bytes_per_token": kv_bytes,
        "tokens": tokens,
        "kv_pool_bytes": tokens * kv_bytes,
        "cuda_graph_bytes": int(profile.get("cuda_graph_bytes", 0)),
    }


def host_plan(
    profile: dict[str, Any],
    plan: dict[str, Any],
    tp: int,
    ratio: float,
    size_gb: int,
    page_size: int = 1,
) -> dict[str, Any]:
    """Per-rank host (hicache) pool. Raises SimError like SGLang's HostKVCache when it does not fit."""
    per_token = int(plan["kv_bytes_per_token"])
    device_tokens = int(plan["tokens"])
    if size_gb > 0:
        host_tokens = int(size_gb * 1e9 // per_token)
    else:
        host_tokens = int(device_tokens * ratio)
    host_tokens = (host_tokens // page_size + 1) * page_size
    if host_tokens <= device_tokens:
        raise SimError(
            "AssertionError",
            "The host memory should be larger than the device memory with the current protocol",
        )
    per_rank = host_tokens * per_token
    available = int(profile["host"]["mem_available_bytes"])
    allocated = 0
    for rank in range(tp):
        free_for_rank = available - allocated - HOST_RESERVE_BYTES
        if per_rank > free_for_rank:
            raise SimError(
                "ValueError",
                f"Not enough host memory available. Requesting {per_rank / 1e9:.2f} GB but only have "
                f"{free_for_rank / 1e9:.2f} GB free. Please reduce the size of the hierarchical cache.",
                rank=rank,
            )
        allocated += per_rank
    return {
        "host_tokens": host_tokens,
        "per_rank_bytes": per_rank,
        "total_bytes": per_rank * tp,
        "available_minus_reserve": available - HOST_RESERVE_BYTES,
    }


# ---------------------------------------------------------------------------------------------------------
# command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launch_server.py", description="Simulated SGLang server")
    p.add_argument("--model-path", required=True)
    p.add_argument("--tokenizer-path", default=None)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp", "--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument("--page-size", type=int, default=1)
    p.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "bf16", "fp8_e4m3", "fp8_e5m2"])
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--log-level", default="info")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--chunked-prefill-size", type=int, default=None)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--enable-hierarchical-cache", action="store_true")
    p.add_argument("--hicache-ratio", type=float, default=2.0)
    p.add_argument("--hicache-size", type=int, default=0)
    p.add_argument(
        "--hicache-write-policy",
        default="write_through",
        choices=["write_back", "write_through", "write_through_selective"],
    )
    p.add_argument("--hicache-io-backend", default="kernel", choices=["direct", "kernel"])
    p.add_argument(
        "--hicache-mem-layout",
        default="layer_first",
        choices=["layer_first", "page_first", "page_first_direct"],
    )
    p.add_argument("--sim-profile", default=None, help="simulated node description (JSON)")
    p.add_argument("--sim-load-s", type=float, default=None, help="start-up time, overrides the profile's")
    p.add_argument("--sim-warmup-s", type=float, default=None, help="503 warm-up time, overrides the profile's")
    return p


def server_args_dict(args: argparse.Namespace, profile: dict[str, Any]) -> dict[str, Any]:
    model = profile["model"]
    return {
        "model_path": args.model_path,
        "tokenizer_path": args.tokenizer_path or args.model_path,
        "served_model_name": args.served_model_name or args.model_path,
        "host": args.host,
        "port": args.port,
        "tp_size": args.tp_size,
        "dp_size": 1,
        "mem_fraction_static": args.mem_fraction_static,
        "context_length": args.context_length or int(model.get("context_length", 4096)),
        "page_size": args.page_size,
        "kv_cache_dtype": args.kv_cache_dtype,
        "trust_remote_code": args.trust_remote_code,
        "log_level": args.log_level,
        "enable_metrics": args.enable_metrics,
        "chunked_prefill_size": args.chunked_prefill_size or 8192,
        "max_running_requests": args.max_running_requests,
        "enable_hierarchical_cache": args.enable_hierarchical_cache,
        "hicache_ratio": args.hicache_ratio,
        "hicache_size": args.hicache_size,
        "hicache_write_policy": args.hicache_write_policy,
        "hicache_io_backend": args.hicache_io_backend,
        "hicache_mem_layout": args.hicache_mem_layout,
    }


# ---------------------------------------------------------------------------------------------------------
# logging, sd_notify


def log(msg: str, rank: int | None = 0) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    tag = f"{stamp} TP{rank}" if rank is not None else stamp
    sys.stderr.write(f"[{tag}] {msg}\n")
    sys.stderr.flush()


def raw(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def sd_notify(message: str) -> bool:
    """Send one datagram to $NOTIFY_SOCKET (sd_notify(3)); '@' means the abstract namespace."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr or addr[0] not in "/@":
        return False
    target = "\0" + addr[1:] if addr[0] == "@" else addr
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(target)
            sock.sendall(message.encode())
    except OSError as exc:
        log(f"sd_notify failed: {exc}", rank=None)
        return False
    return True


def gib(n: float) -> str:
    return f"{n / GIB:.2f}"


# ---------------------------------------------------------------------------------------------------------
# HTTP


class Server:
    """State shared by the HTTP handler and the start-up sequence."""

    def __init__(self, args: argparse.Namespace, profile: dict[str, Any]) -> None:
        self.args = args
        self.profile = profile
        self.server_args = server_args_dict(args, profile)
        self.phase = "loading"
        self.max_total_num_tokens = 0
        self.ready_at: float | None = None
        self.lock = threading.Lock()

    def is_ready(self) -> bool:
        with self.lock:
            return self.phase == "ready"

    def server_info(self) -> dict[str, Any]:
        info = dict(self.server_args)
        info["max_total_num_tokens"] = self.max_total_num_tokens
        info["internal_states"] = [
            {
                "max_total_num_tokens": self.max_total_num_tokens,
                "last_gen_throughput": 0.0,
                "phase": self.phase,
            }
        ]
        info["version"] = SIM_VERSION
        return info

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.server_args["model_path"],
            "tokenizer_path": self.server_args["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "architectures": [self.profile["model"].get("architecture", "LlamaForCausalLM")],
        }


def make_handler(srv: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "uvicorn"
        sys_version = ""
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            reason = self.responses.get(status, ("",))[0]
            raw(
                f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.command} {self.path} '
                f'HTTP/1.1" {status} {reason}'
            )

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj).encode())

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            ready = srv.is_ready()
            if path in ("/health", "/health_generate"):
                self._send(200 if ready else 503, b"", "text/plain")
            elif path in ("/get_server_info", "/server_info"):
                self._json(200, srv.server_info())
            elif path in ("/get_model_info", "/model_info"):
                self._json(200, srv.model_info())
            elif path == "/v1/models":
                name = srv.server_args["served_model_name"]
                self._json(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": name,
                                "object": "model",
                                "owned_by": "sglang",
                                "root": name,
                                "max_model_len": srv.server_args["context_length"],
                            }
                        ],
                    },
                )
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            path = self.path.split("?", 1)[0]
            if path != "/generate":
                self._json(404, {"detail": "Not Found"})
                return
            if not srv.is_ready():
                self._json(503, {"error": {"message": "The server is not ready yet"}})
                return
            try:
                req = json.loads(body or b"{}")
            except ValueError:
                self._json(400, {"error": {"message": "invalid JSON"}})
                return
            prompt = str(req.get("text", ""))
            self._json(
                200,
                {
                    "text": " simulated completion",
                    "meta_info": {
                        "prompt_tokens": max(1, len(prompt.split())),
                        "completion_tokens": 2,
                        "finish_reason": {"type": "length", "length": 2},
                    },
                },
            )

    return Handler


# ---------------------------------------------------------------------------------------------------------
# the start-up sequence


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        profile = load_profile(args.sim_profile)
    except (OSError, ValueError) as exc:
        raw(f"error: cannot read the simulation profile: {exc}")
        return 2
    timing = profile.get("timing", {})
    load_s = float(args.sim_load_s if args.sim_load_s is not None else timing.get("load_s", 20.0))
    warmup_s = float(args.sim_warmup_s if args.sim_warmup_s is not None else timing.get("warmup_s", 1.0))
    if args.mem_fraction_static is None:
        args.mem_fraction_static = 0.88 if args.tp_size >= 8 else 0.85

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    srv = Server(args, profile)
    state = StateWriter(profile)
    gpu_count = int(profile["gpu"]["count"])
    pid = os.getpid()
    started = time.time()
    host_pool_bytes = 0

    def write_state(phase: str, per_gpu: int, tp: int) -> None:
        gpus = [{"index": i, "used_bytes": per_gpu if i < tp else 0} for i in range(gpu_count)]
        state.write(
            {
                "pid": pid,
                "start_ticks": proc_start_ticks(pid),
                "phase": phase,
                "started": started,
                "updated": time.time(),
                "port": args.port,
                "host": args.host,
                "model_path": args.model_path,
                "tp_size": tp,
                "gpus": gpus,
                "host_pool_bytes": host_pool_bytes,
                "max_total_num_tokens": srv.max_total_num_tokens,
                "enable_hierarchical_cache": args.enable_hierarchical_cache,
            }
        )

    def stopped(code: int, phase: str = "stopped") -> int:
        state.write(
            {
                "pid": pid,
                "phase": phase,
                "updated": time.time(),
                "gpus": [],
                "host_pool_bytes": 0,
                "exit_status": code,
            }
        )
        return code

    def wait_until(t_rel: float) -> bool:
        """Sleep until ``started + t_rel``; True when a stop signal arrived meanwhile."""
        return stop.wait(max(0.0, started + t_rel - time.time()))

    def fail(err: SimError) -> int:
        raw(
            f"[{time.strftime('%Y-%m-%d %H:%M:%S')} TP{err.rank}] Scheduler hit an exception: "
            "Traceback (most recent call last):"
        )
        raw(
            '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2914, in '
            "run_scheduler_process"
        )
        raw(f"{err.kind}: {err.message}")
        raw("")
        log("Received sigquit from a child process. It usually means the child failed.", rank=None)
        sd_notify(f"STATUS=failed: {err.message}")
        return stopped(1, "failed")

    tp = args.tp_size
    sargs = srv.server_args
    log("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in sargs.items()) + ")", rank=None)
    sd_notify("STATUS=Loading weights")

    try:
        plan = gpu_plan(profile, tp, args.mem_fraction_static, args.kv_cache_dtype)
    except SimError as err:
        if err.message.startswith("CUDA error"):
            return fail(err)
        plan = None
        plan_error: SimError | None = err
    else:
        plan_error = None

    gpu_total = int(profile["gpu"]["memory_total_mib"]) * (1 << 20)
    overhead = int(profile.get("gpu_overhead_bytes", 0))
    weights = int(profile["model"]["weights_bytes"]) // max(tp, 1)
    write_state("loading", overhead, tp)
    log(f"Load weight begin. avail mem={gib(gpu_total - overhead)} GB")

    # weights: 0 .. 70 % of the load time, with a progress bar like safetensors loading
    shards = int(profile["model"].get("checkpoint_shards", 100))
    steps = 10
    for step in range(1, steps + 1):
        if wait_until(0.70 * load_s * step / steps):
            return stopped(0)
        done = shards * step // steps
        elapsed = time.time() - started
        raw(
            f"Loading safetensors checkpoint shards: {100 * step // steps:3d}% Completed | {done}/{shards} "
            f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}<?, ?it/s]"
        )
        write_state("loading", overhead + weights * step // steps, tp)
    after_weights = gpu_total - overhead - weights
    log(
        f"Load weight end. type={profile['model'].get('architecture', 'LlamaForCausalLM')}, "
        f"dtype={profile['model'].get('dtype', 'torch.bfloat16')}, avail mem={gib(after_weights)} GB, "
        f"mem usage={gib(weights)} GB."
    )

    if plan is None:
        assert plan_error is not None
        return fail(plan_error)
    kv_dtype = "torch.float8_e4m3fn" if args.kv_cache_dtype.startswith("fp8") else "torch.bfloat16"
    log(f"Using KV cache dtype: {kv_dtype}")
    tokens = int(plan["tokens"])
    kv_bytes = int(plan["kv_pool_bytes"])
    if profile["model"].get("attention", "mha") == "mla":
        log(f"KV Cache is allocated. #tokens: {tokens}, KV size: {gib(kv_bytes)} GB")
    else:
        log(f"KV Cache is allocated. #tokens: {tokens}, K size: {gib(kv_bytes / 2)} GB, V size: {gib(kv_bytes / 2)} GB")
    after_pool = after_weights - kv_bytes
    log(f"Memory pool end. avail mem={gib(after_pool)} GB")
    write_state("loading", overhead + weights + kv_bytes, tp)

    if wait_until(0.72 * load_s):
        return stopped(0)
    graph = int(plan["cuda_graph_bytes"])
    log(f"Capture cuda graph begin. This can take up to several minutes. avail mem={gib(after_pool)} GB")
    sd_notify("STATUS=Capturing CUDA graphs")
    if wait_until(0.90 * load_s):
        return stopped(0)
    log(
        f"Capture cuda graph end. Time elapsed: {0.18 * load_s:.2f} s. mem usage={gib(graph)} GB. "
        f"avail mem={gib(after_pool - graph)} GB."
    )
    used = overhead + weights + kv_bytes + graph
    write_state("loading", used, tp)

    if args.enable_hierarchical_cache:
        if wait_until(0.92 * load_s):
            return stopped(0)
        try:
            hp = host_plan(profile, plan, tp, args.hicache_ratio, args.hicache_size, args.page_size)
        except SimError as err:
            return fail(err)
        for rank in range(tp):
            log(
                f"Allocating {hp['per_rank_bytes'] / 1e9:.2f} GB host memory for hierarchical KV cache.",
                rank=rank,
            )
        host_pool_bytes = int(hp["total_bytes"])
        write_state("loading", used, tp)

    if wait_until(0.95 * load_s):
        return stopped(0)
    srv.max_total_num_tokens = tokens
    max_running = args.max_running_requests or max(1, min(4096, tokens // 64))
    log(
        f"max_total_num_tokens={tokens}, chunked_prefill_size={sargs['chunked_prefill_size']}, "
        f"max_prefill_tokens=16384, max_running_requests={max_running}, "
        f"context_len={sargs['context_length']}, "
        f"available_gpu_mem={gib(after_pool - graph)} GB"
    )
    if wait_until(load_s):
        return stopped(0)

    try:
        httpd = ThreadingHTTPServer((args.host, args.port), make_handler(srv))
    except OSError as exc:
        log(
            f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
            f"('{args.host}', {args.port}): {exc.strerror}",
            rank=None,
        )
        return stopped(1, "failed")
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="http", daemon=True)
    thread.start()
    with srv.lock:
        srv.phase = "warmup"
    write_state("warmup", used, tp)
    raw(f"INFO:     Started server process [{pid}]")
    raw("INFO:     Waiting for application startup.")
    raw("INFO:     Application startup complete.")
    raw(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    sd_notify("STATUS=Warming up")
    if stop.wait(warmup_s):
        httpd.shutdown()
        return stopped(0)
    with srv.lock:
        srv.phase = "ready"
        srv.ready_at = time.time()
    write_state("ready", used, tp)
    log("The server is fired up and ready to roll!", rank=None)
    sd_notify(
        f"READY=1\nSTATUS=Ready: {tokens} KV tokens per rank, hicache "
        f"{'on' if args.enable_hierarchical_cache else 'off'}"
    )

    stop.wait()
    sd_notify("STOPPING=1")
    httpd.shutdown()
    httpd.server_close()
    return stopped(0)


if __name__ == "__main__":
    sys.exit(main())
