"""The simulated SGLang node: memory math, the fake server's lifecycle, nvidia-smi/free, and the
systemctl/journalctl shims end to end (real processes, real sockets; every wait polls a condition)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_tools.testing import free_port, wait_until
from gpusim import install, sglang_server, systemctl

SIM = Path(sglang_server.__file__).resolve().parent
PY = sys.executable
HICACHE_FLAGS = (
    "--enable-hierarchical-cache --hicache-ratio 2.0 --hicache-write-policy write_through --hicache-io-backend kernel"
)


# ------------------------------------------------------------------------------------------------- helpers


def http(port: int, path: str) -> tuple[int, bytes] | str:
    """(status, body), or the connection error's name ("refused")."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return "refused"
        return f"error: {exc.reason}"
    except (ConnectionResetError, ConnectionRefusedError):
        return "refused"


def load_profile(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SIM / f"profile_{name}.json").read_text())
    return data


def write_profile(tmp: Path, name: str, load_s: float, warmup_s: float = 0.3) -> Path:
    prof = load_profile(name)
    prof["timing"].update(load_s=load_s, warmup_s=warmup_s)
    prof["state_path"] = str(tmp / "run" / "sglang-sim" / "state.json")
    path = tmp / f"profile-{name}.json"
    path.write_text(json.dumps(prof))
    return path


def prog(name: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, str(SIM / name), *args], env=env, capture_output=True, text=True, timeout=60)


# ------------------------------------------------------------------------------------------------- the package


def test_the_simulator_stands_on_the_standard_library_alone(tmp_path: Path) -> None:
    """gpusim stands beside agent_tools, not on it: no import (lazy ones too) of anything but the standard
    library and gpusim itself, and every module imports from a copy outside the repository in a Python without
    site-packages (no agent_tools, no third-party package there)."""
    for path in sorted(SIM.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                tops = [] if node.level else [str(node.module).split(".")[0]]
            else:
                continue
            assert all(t in sys.stdlib_module_names or t == "gpusim" for t in tops), (path.name, node.lineno, tops)
    shutil.copytree(SIM, tmp_path / "gpusim", ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import importlib, pkgutil, sys; sys.path.insert(0, sys.argv[1]); import gpusim; "
            "names = sorted(m.name for m in pkgutil.iter_modules(gpusim.__path__)); "
            "[importlib.import_module('gpusim.' + n) for n in names]; "
            "assert gpusim.__file__.startswith(sys.argv[1]), gpusim.__file__; "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'agent_tools']; print(*names)")
    out = subprocess.run([PY, "-I", "-S", "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["free", "install", "journalctl", "nvidia_smi", "sglang_server", "systemctl"]


# ------------------------------------------------------------------------------------------------- memory math


def test_default_profile_fits_hicache_ratio_2() -> None:
    prof = load_profile("default")
    plan = sglang_server.gpu_plan(prof, tp=8, mem_fraction_static=0.88)
    assert plan["weights"] == 547_000_000_000 // 8
    assert plan["tokens"] == plan["rest"] // 70272 == 79616
    assert 5.2 < plan["kv_pool_bytes"] / 2**30 < 5.3
    host = sglang_server.host_plan(prof, plan, tp=8, ratio=2.0, size_gb=0)
    assert host["per_rank_bytes"] == host["host_tokens"] * 70272
    assert round(host["per_rank_bytes"] / 1e9, 2) == 11.19
    assert host["total_bytes"] == 8 * host["per_rank_bytes"]
    assert host["total_bytes"] < prof["host"]["mem_available_bytes"] - 10 * 2**30
    # --hicache-size (GB per rank) overrides the ratio
    sized = sglang_server.host_plan(prof, plan, tp=8, ratio=2.0, size_gb=20)
    assert 19.99e9 < sized["per_rank_bytes"] <= 20.0e9 + 70272


def test_small_ram_profile_refuses_ratio_2_but_not_1_5() -> None:
    prof = load_profile("small_ram")
    plan = sglang_server.gpu_plan(prof, tp=8, mem_fraction_static=0.88)
    with pytest.raises(sglang_server.SimError) as err:
        sglang_server.host_plan(prof, plan, tp=8, ratio=2.0, size_gb=0)
    assert err.value.kind == "ValueError"
    assert err.value.message == (
        "Not enough host memory available. Requesting 11.19 GB but only have 8.02 GB free. "
        "Please reduce the size of the hierarchical cache."
    )
    assert err.value.rank == 6
    assert sglang_server.host_plan(prof, plan, tp=8, ratio=1.5, size_gb=0)["total_bytes"] < 80 * 2**30


def test_gpu_and_ratio_refusals() -> None:
    prof = load_profile("default")
    with pytest.raises(sglang_server.SimError, match=r"Please try to increase --mem-fraction-static"):
        sglang_server.gpu_plan(prof, tp=8, mem_fraction_static=0.80)
    with pytest.raises(sglang_server.SimError, match="invalid device ordinal"):
        sglang_server.gpu_plan(prof, tp=16, mem_fraction_static=0.88)
    plan = sglang_server.gpu_plan(prof, tp=8, mem_fraction_static=0.88)
    with pytest.raises(sglang_server.SimError, match="host memory should be larger"):
        sglang_server.host_plan(prof, plan, tp=8, ratio=0.5, size_gb=0)


def test_timespans_and_unit_parsing() -> None:
    fmt, parse = systemctl.format_timespan, systemctl.parse_timespan
    assert [fmt(parse(s)) for s in ("900", "90s", "1min 30s", "5s", "500ms", "1h", "infinity")] == [
        "15min",
        "1min 30s",
        "1min 30s",
        "5s",
        "500ms",
        "1h",
        "infinity",
    ]
    sections = systemctl.parse_unit_texts(
        [
            "[Service]\nExecStart=/bin/echo a \\\n  # a comment inside a continuation\n  b\nEnvironment=A=1\n"
            'Environment=\nEnvironment="B=2 3" C=4\n'
        ]
    )
    assert sections["Service"]["ExecStart"] == ["/bin/echo a  b"]
    assert sections["Service"]["Environment"] == ['"B=2 3" C=4']
    assert systemctl.parse_env_assignments(sections["Service"]["Environment"][0]) == {"B": "2 3", "C": "4"}


# ------------------------------------------------------------------------------------------------- the server


@pytest.fixture
def server_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["SGLANG_SIM_PROFILE"] = str(write_profile(tmp_path, "default", load_s=1.0, warmup_s=0.6))
    env.pop("SGLANG_SIM_STATE", None)
    env.pop("NOTIFY_SOCKET", None)
    return env


def gpu_used_mib(env: dict[str, str]) -> list[int]:
    out = prog("nvidia_smi.py", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits", env=env)
    assert out.returncode == 0, out.stdout
    return [int(line.split(", ")[1]) for line in out.stdout.splitlines()]


def free_bytes(env: dict[str, str]) -> dict[str, int]:
    out = prog("free.py", "-b", env=env)
    header, mem = out.stdout.splitlines()[:2]
    return dict(zip(header.split(), (int(v) for v in mem.split()[1:]), strict=True))


def start_server(port: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """The simulated server with hicache on (DeepSeek-V3, tp 8), its stderr to ``log``."""
    return subprocess.Popen(
        [
            PY,
            str(SIM / "sglang_server.py"),
            "--model-path",
            "/models/DeepSeek-V3",
            "--tp",
            "8",
            "--mem-fraction-static",
            "0.88",
            "--port",
            str(port),
            *HICACHE_FLAGS.split(),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )


async def test_server_lifecycle_refused_then_503_then_200(server_env: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify_name = f"sim-test-{os.getpid()}-{port}"
    notify.bind("\0" + notify_name)
    notify.settimeout(5)
    server_env["NOTIFY_SOCKET"] = "@" + notify_name
    assert gpu_used_mib(server_env) == [0] * 8
    proc = start_server(port, server_env, tmp_path / "server.log")
    try:
        seen: list[Any] = []

        def ready() -> bool:
            r = http(port, "/health")
            seen.append(r if isinstance(r, str) else r[0])
            return seen[-1] == 200

        await wait_until(ready, "/health 200", timeout_s=10)
        assert seen[0] == "refused", seen[:3]
        phases = [s for i, s in enumerate(seen) if i == 0 or s != seen[i - 1]]
        assert phases == ["refused", 503, 200], phases
        assert http(port, "/health_generate") == (200, b"")

        got = http(port, "/get_server_info")
        assert not isinstance(got, str) and got[0] == 200
        info = json.loads(got[1])
        assert info["enable_hierarchical_cache"] is True
        assert (info["hicache_ratio"], info["hicache_size"]) == (2.0, 0)
        assert (info["hicache_write_policy"], info["hicache_io_backend"]) == ("write_through", "kernel")
        assert (info["tp_size"], info["mem_fraction_static"], info["max_total_num_tokens"]) == (8, 0.88, 79616)
        model = http(port, "/get_model_info")
        assert not isinstance(model, str) and json.loads(model[1])["model_path"] == "/models/DeepSeek-V3"

        msgs = []
        while not any("READY=1" in m for m in msgs):
            msgs.append(notify.recv(4096).decode())
        assert any(m.startswith("STATUS=Loading") for m in msgs)

        used = gpu_used_mib(server_env)
        assert all(70_000 < u < 81_559 for u in used), used
        mem = free_bytes(server_env)
        prof = load_profile("default")
        pinned = prof["host"]["mem_available_bytes"] - mem["available"]
        assert round(pinned / 1e9, 2) == 89.52
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        notify.close()
    err = (tmp_path / "server.log").read_text()
    for marker in (
        "Load weight begin",
        "Load weight end. type=DeepseekV3ForCausalLM",
        "KV Cache is allocated. #tokens: 79616, KV size: 5.21 GB",
        "Allocating 11.19 GB host memory for hierarchical KV cache.",
        "The server is fired up and ready to roll!",
    ):
        assert marker in err, marker
    assert gpu_used_mib(server_env) == [0] * 8
    assert free_bytes(server_env)["available"] == load_profile("default")["host"]["mem_available_bytes"]


def test_server_refuses_hicache_without_host_ram(tmp_path: Path) -> None:
    env = dict(os.environ, SGLANG_SIM_PROFILE=str(write_profile(tmp_path, "small_ram", load_s=0.2)))
    port = free_port()
    out = subprocess.run(
        [
            PY,
            str(SIM / "sglang_server.py"),
            "--model-path",
            "/models/DeepSeek-V3",
            "--tp",
            "8",
            "--port",
            str(port),
            *HICACHE_FLAGS.split(),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 1
    assert (
        "ValueError: Not enough host memory available. Requesting 11.19 GB but only have 8.02 GB free. "
        "Please reduce the size of the hierarchical cache."
    ) in out.stderr
    assert "fired up" not in out.stderr
    assert http(port, "/health") == "refused"
    bad = prog("sglang_server.py", "--model-path", "m", "--hicache-ratioo", "2", env=env)
    assert bad.returncode == 2 and "unrecognized arguments: --hicache-ratioo" in bad.stderr


# ------------------------------------------------------------------------------------------------- nvidia-smi, free


def test_nvidia_smi_and_free_output(tmp_path: Path) -> None:
    env = dict(os.environ, SGLANG_SIM_PROFILE=str(write_profile(tmp_path, "default", 1.0)))
    fields = "index,name,memory.used,memory.total,memory.free,utilization.gpu"
    out = prog("nvidia_smi.py", f"--query-gpu={fields}", "--format=csv,noheader,nounits", env=env)
    rows = [line.split(", ") for line in out.stdout.splitlines()]
    assert len(rows) == 8
    assert rows[3] == ["3", "NVIDIA H100 80GB HBM3", "0", "81559", "81559", "0"]
    out = prog("nvidia_smi.py", "--query-gpu=memory.total,index", "--format=csv", "-i", "1", env=env)
    assert out.stdout.splitlines() == ["memory.total [MiB], index", "81559 MiB, 1"]
    assert prog("nvidia_smi.py", "-L", env=env).stdout.startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    assert "No running processes found" in prog("nvidia_smi.py", env=env).stdout
    bad = prog("nvidia_smi.py", "--query-gpu=bogus", "--format=csv", env=env)
    assert bad.returncode != 0 and 'Field "bogus" is not a valid field to query.' in bad.stdout

    assert free_bytes(env) == {
        "total": 2 * 2**40,
        "used": 2 * 2**40 - 2089072092774,
        "free": 2089072092774 - (60 * 2**30 - 64 * 2**20),
        "shared": 64 * 2**20,
        "buff/cache": 60 * 2**30,
        "available": 2089072092774,
    }
    kib = prog("free.py", env=env).stdout.splitlines()
    assert kib[0].split() == ["total", "used", "free", "shared", "buff/cache", "available"]
    assert kib[1].split()[1] == str(2 * 2**30) and kib[2].split() == ["Swap:", "0", "0", "0"]
    small = dict(env, SGLANG_SIM_PROFILE=str(write_profile(tmp_path, "small_ram", 1.0)))
    assert free_bytes(small)["available"] == 80 * 2**30
    assert prog("free.py", "-g", env=small).stdout.splitlines()[1].split()[-1] == "80"


# ------------------------------------------------------------------------------------------------- the shims


class Node:
    """An "embedded" host root: units under etc/systemd/system, shims driven through SIM_SYSTEMD_ROOT."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = dict(os.environ, SIM_SYSTEMD_ROOT=str(root))
        for var in ("NOTIFY_SOCKET", "SGLANG_SIM_STATE", "SGLANG_SIM_PROFILE"):
            self.env.pop(var, None)
        self.units: list[str] = []

    def add_unit(self, name: str, profile: Path, port: int, extra: str = "", timeout: str | None = None) -> Path:
        template = (SIM / "sglang.service.in").read_text()
        text = install.render_unit(
            template,
            python=PY,
            server=str(SIM / "sglang_server.py"),
            profile=str(profile),
            port=port,
            extra_args=extra,
            timeout_start=timeout,
        )
        path = self.root / "etc/systemd/system" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.units.append(name)
        return path

    def systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return prog("systemctl.py", *args, env=self.env)

    def journalctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return prog("journalctl.py", *args, env=self.env)

    def show(self, unit: str) -> dict[str, str]:
        out = self.systemctl(
            "show",
            unit,
            "-p",
            "ActiveState,SubState,Result,ExecMainStatus,ExecMainPID,"
            "MainPID,NRestarts,InvocationID,TimeoutStartUSec,NeedDaemonReload,FragmentPath,"
            "ActiveEnterTimestamp",
        )
        assert out.returncode == 0, out.stderr
        return dict(line.split("=", 1) for line in out.stdout.splitlines())

    def state(self, unit: str) -> str:
        p = self.show(unit)
        return f"{p['ActiveState']}/{p['SubState']}"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path / "root")
    yield n
    for unit in n.units:
        n.systemctl("stop", unit)  # blocks until the unit's supervisor and service are gone


async def journal_follow(node: Node, unit: str, cursor: str | None, until: str,
                         timeout_s: float) -> list[dict[str, str]]:
    """Follow ``journalctl -u UNIT -o json --after-cursor`` until a MESSAGE contains ``until``."""
    got: list[dict[str, str]] = []
    state = {"cursor": cursor}

    def step() -> bool:
        args = ["-u", unit, "-o", "json", "--show-cursor", "--no-pager"]
        if state["cursor"]:
            args.append(f"--after-cursor={state['cursor']}")
        out = node.journalctl(*args)
        assert out.returncode == 0, out.stderr
        for line in out.stdout.splitlines():
            if line.startswith("-- cursor: "):
                state["cursor"] = line.removeprefix("-- cursor: ")
            else:
                got.append(json.loads(line))
        return any(until in e["MESSAGE"] for e in got)

    await wait_until(step, f"journal line {until!r}", timeout_s=timeout_s, interval_s=0.1)
    return got


async def test_shim_restart_no_block_then_active_and_daemon_reload(node: Node, tmp_path: Path) -> None:
    port = free_port()
    unit_path = node.add_unit("sglang.service", write_profile(tmp_path, "default", 1.0, 0.2), port)
    assert node.systemctl("start", "nope").returncode == 5
    assert node.show("sglang.service")["TimeoutStartUSec"] == "15min"

    cur = node.journalctl("-n", "1", "--show-cursor", "-o", "cat").stdout
    cursor = next((ln[11:] for ln in cur.splitlines() if ln.startswith("-- cursor: ")), None)
    t0 = time.monotonic()
    out = node.systemctl("restart", "--no-block", "sglang.service")
    assert out.returncode == 0 and time.monotonic() - t0 < 3.0
    await wait_until(lambda: node.state("sglang") == "activating/start", "activating/start", timeout_s=5)
    assert http(port, "/health") == "refused"
    await wait_until(lambda: node.state("sglang") == "active/running", "active/running", timeout_s=10)
    props = node.show("sglang")
    assert props["Result"] == "success" and props["MainPID"] != "0" and props["ActiveEnterTimestamp"]
    assert len(props["InvocationID"]) == 32
    assert http(port, "/health") == (200, b"")

    entries = await journal_follow(node, "sglang", cursor, "Started sglang.service", 5)
    seqs = [int(e["__CURSOR"].split(";i=")[1].split(";")[0], 16) for e in entries]
    assert seqs == sorted(set(seqs)), "the cursor follow must neither repeat nor reorder entries"
    messages = [e["MESSAGE"] for e in entries]
    assert messages[0] == "Starting sglang.service - SGLang server (simulated)..."
    fired = [e for e in entries if "fired up and ready to roll" in e["MESSAGE"]]
    assert fired and fired[0]["_SYSTEMD_INVOCATION_ID"] == props["InvocationID"]
    assert fired[0]["_SYSTEMD_UNIT"] == "sglang.service" and fired[0]["_PID"] == props["MainPID"]
    again = node.journalctl("-u", "sglang", "-o", "json", f"--after-cursor={entries[-1]['__CURSOR']}")
    assert all("Started sglang" not in line for line in again.stdout.splitlines())

    # edit without daemon-reload: restart keeps the loaded unit, like systemd
    unit_path.write_text(unit_path.read_text().replace(f"--port {port}", f"--port {port} {HICACHE_FLAGS}"))
    assert node.show("sglang")["NeedDaemonReload"] == "yes"
    out = node.systemctl("restart", "sglang")
    assert out.returncode == 0 and "Run 'systemctl daemon-reload'" in out.stderr
    first_inv = props["InvocationID"]
    props = node.show("sglang")
    assert props["InvocationID"] != first_inv and node.state("sglang") == "active/running"
    info = http(port, "/get_server_info")
    assert not isinstance(info, str) and json.loads(info[1])["enable_hierarchical_cache"] is False

    assert node.systemctl("daemon-reload").returncode == 0
    assert node.show("sglang")["NeedDaemonReload"] == "no"
    assert node.systemctl("restart", "sglang.service").returncode == 0
    info = http(port, "/get_server_info")
    assert not isinstance(info, str) and json.loads(info[1])["enable_hierarchical_cache"] is True
    status = node.systemctl("status", "sglang")
    assert status.returncode == 0 and "Active: active (running)" in status.stdout
    assert node.systemctl("is-active", "sglang").stdout.strip() == "active"

    assert node.systemctl("stop", "sglang").returncode == 0
    assert node.state("sglang") == "inactive/dead" and node.show("sglang")["MainPID"] == "0"
    assert http(port, "/health") == "refused"
    assert node.systemctl("is-active", "sglang").returncode == 3


def test_shim_timeout_start_sec_fails_with_result_timeout(node: Node, tmp_path: Path) -> None:
    port = free_port()
    node.add_unit("slow.service", write_profile(tmp_path, "default", 1.0), port, extra="--sim-load-s 30", timeout="2")
    assert node.show("slow")["TimeoutStartUSec"] == "2s"
    t0 = time.monotonic()
    out = node.systemctl("start", "slow")
    elapsed = time.monotonic() - t0
    assert out.returncode == 1 and 1.9 < elapsed < 10, elapsed
    assert "Job for slow.service failed because a timeout was exceeded." in out.stderr
    props = node.show("slow")
    assert (props["ActiveState"], props["SubState"], props["Result"]) == ("failed", "failed", "timeout")
    assert props["MainPID"] == "0"
    assert not systemctl.pid_alive(int(props["ExecMainPID"]))
    log = node.journalctl("-u", "slow", "-o", "cat").stdout
    assert "slow.service: start operation timed out. Terminating." in log
    assert "slow.service: Failed with result 'timeout'." in log
    assert node.systemctl("status", "slow").returncode == 3


def test_shim_failed_hicache_start_then_rollback(node: Node, tmp_path: Path) -> None:
    port = free_port()
    small = write_profile(tmp_path, "small_ram", 0.4, 0.2)
    unit = node.add_unit("sglang.service", small, port)
    backup = unit.read_text()
    unit.write_text(backup.replace(f"--port {port}", f"--port {port} {HICACHE_FLAGS}"))
    assert node.systemctl("daemon-reload").returncode == 0
    out = node.systemctl("restart", "sglang")
    assert out.returncode == 1 and "control process exited with error code" in out.stderr
    props = node.show("sglang")
    assert (props["ActiveState"], props["Result"], props["ExecMainStatus"]) == ("failed", "exit-code", "1")
    log = node.journalctl("-u", "sglang", "_SYSTEMD_INVOCATION_ID=" + props["InvocationID"], "-o", "cat").stdout
    assert "Not enough host memory available. Requesting 11.19 GB but only have 8.02 GB free." in log
    # roll back: restore the backup, reload, restart
    unit.write_text(backup)
    assert node.systemctl("daemon-reload").returncode == 0
    assert node.systemctl("restart", "sglang").returncode == 0
    assert node.state("sglang") == "active/running"
    assert http(port, "/health") == (200, b"")
