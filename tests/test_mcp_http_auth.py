"""MCP over streamable HTTP is authenticated: bearer token, 401 without it, Host/Origin checks, loopback only
without a token. Real ``agent-tools mcp --transport http`` processes, the official MCP client SDK, loopback only."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from .test_mcp_server import CORE_TOOLS, agent_tools_cmd, bearer_client, http_server, server_env, structured

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw-test", "version": "0"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def token_of(tmp_path: Path) -> str:
    return (tmp_path / "state" / "mcp-http.token").read_text().strip()


async def post_init(url: str, **headers: str) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=20.0) as client:
        return await client.post(url, json=INIT, headers={**MCP_HEADERS, **headers})


async def test_token_created_0600_and_the_sdk_client_works_with_it(tmp_path: Path) -> None:
    async with http_server(tmp_path) as url:
        path = tmp_path / "state" / "mcp-http.token"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        token = token_of(tmp_path)
        assert len(token) >= 40
        async with bearer_client(token) as client, streamable_http_client(url, http_client=client) as (r, w), \
                ClientSession(r, w) as session:
            with anyio.fail_after(20):
                await session.initialize()
                assert CORE_TOOLS <= {t.name for t in (await session.list_tools()).tools}
                out = structured(await session.call_tool("run_command", {"host": "local", "command": "echo authed"}))
        assert (out["outcome"], out["stdout"]["text"]) == ("finished", "authed\n"), out
        # the token is in no log the server wrote
        assert token not in (tmp_path / "http-stderr.log").read_text()


async def test_without_or_with_a_wrong_token_401_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    async with http_server(tmp_path) as url:
        assert (await post_init(url)).status_code == 401
        assert (await post_init(url, Authorization="Bearer " + "x" * 43)).status_code == 401
        assert (await post_init(url, Authorization=token_of(tmp_path))).status_code == 401  # no "Bearer"
        no_auth = await post_init(url)
        assert no_auth.headers["www-authenticate"].startswith("Bearer")
        # the SDK client without a token cannot start a session, let alone call a tool
        with pytest.raises(Exception):  # noqa: B017 - the SDK's error type for an HTTP 401 is not public API
            async with streamable_http_client(url) as (r, w), ClientSession(r, w) as session:
                with anyio.fail_after(20):
                    await session.initialize()
                    await session.call_tool("run_command", {"host": "local", "command": f"touch {marker}"})
        assert (await post_init(url, Authorization=f"Bearer {token_of(tmp_path)}")).status_code == 200
    assert not marker.exists()


async def test_a_401_says_whether_the_token_was_missing_or_wrong(tmp_path: Path) -> None:
    """qa15: the SDK's 401 read "invalid_token" / "Authentication required" for a missing and a wrong token alike,
    and gave no hint that this server has no OAuth (MCP Inspector 2.x then says only "Interactive OAuth requires a
    TTY"). RFC 6750 section 3: no error code without credentials, ``invalid_token`` with a wrong one."""
    async with http_server(tmp_path) as url:
        missing = await post_init(url)
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == 'Bearer realm="agent-tools"'
        assert "needs Authorization: Bearer TOKEN" in missing.json()["error_description"]
        assert "mcp-http.token" in missing.json()["error_description"]
        wrong_token = "w" * 43
        wrong = await post_init(url, Authorization=f"Bearer {wrong_token}")
        assert wrong.status_code == 401
        challenge = wrong.headers["www-authenticate"]
        assert challenge.startswith('Bearer realm="agent-tools", error="invalid_token", error_description="the bearer '
                                    "token is not this server's token")
        assert "does not do OAuth" in challenge and "resource_metadata" not in challenge
        assert wrong.json()["error"] == "invalid_token" and wrong_token not in wrong.text
        assert token_of(tmp_path) not in wrong.text + missing.text + challenge


async def test_host_and_origin_are_checked_against_dns_rebinding(tmp_path: Path) -> None:
    async with http_server(tmp_path) as url:
        auth = f"Bearer {token_of(tmp_path)}"
        port = url.split(":")[2].split("/")[0]
        assert (await post_init(url, Authorization=auth, Host=f"evil.example:{port}")).status_code == 421
        assert (await post_init(url, Authorization=auth, Origin="http://evil.example")).status_code == 403
        assert (await post_init(url, Authorization=auth, Origin=f"http://evil.example:{port}")).status_code == 403
        assert (await post_init(url, Authorization=auth, Origin="http://127.0.0.1.evil.example")).status_code == 403
        ok = await post_init(url, Authorization=auth, Origin=f"http://localhost:{port}", Host=f"localhost:{port}")
        assert ok.status_code == 200, ok.text


async def test_a_host_or_origin_that_only_starts_like_an_allowed_one_is_refused(tmp_path: Path) -> None:
    """qa13: the SDK matches ``localhost:*`` as a prefix, so ``Host: localhost:1@evil.example`` and ``Origin:
    http://localhost:1.evil.example`` passed; a header that is not host[:port] / scheme://host[:port] is refused."""
    async with http_server(tmp_path) as url:
        auth = f"Bearer {token_of(tmp_path)}"
        port = url.split(":")[2].split("/")[0]
        for host in ("localhost:1@evil.example", f"127.0.0.1:{port}.evil.example", f"localhost:{port} x"):
            assert (await post_init(url, Authorization=auth, Host=host)).status_code == 421, host
        for origin in ("http://localhost:1.evil.example", f"http://127.0.0.1:{port}.evil.example",
                       "http://localhost:80@evil.example", f"http://localhost:{port}/path", "null"):
            assert (await post_init(url, Authorization=auth, Origin=origin)).status_code == 403, origin
        ok = await post_init(url, Authorization=auth, Origin=f"https://127.0.0.1:{port}", Host=f"[::1]:{port}")
        assert ok.status_code == 200, ok.text


async def test_token_from_the_environment(tmp_path: Path) -> None:
    token = "env-given-token-" + "z" * 20
    async with http_server(tmp_path, env_extra={"AGENT_TOOLS_MCP_TOKEN": token}) as url:
        assert (await post_init(url, Authorization=f"Bearer {token}")).status_code == 200
        assert (await post_init(url)).status_code == 401
    assert not (tmp_path / "state" / "mcp-http.token").exists()


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**server_env(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    return subprocess.run(agent_tools_cmd("--transport", "http", *args), capture_output=True, text=True, env=env,
                          timeout=60, check=False, stdin=subprocess.DEVNULL)


def test_refuses_to_listen_beyond_loopback_without_a_token(tmp_path: Path) -> None:
    res = run_cli(tmp_path, "--host", "0.0.0.0", "--no-auth", "--port", "1")
    assert res.returncode == 2 and "loopback" in res.stderr, res.stderr
    # with a token, a wildcard address needs the names clients use (the Host check has nothing to check against)
    res = run_cli(tmp_path, "--host", "0.0.0.0", "--port", "1")
    assert res.returncode == 2 and "--allow-host" in res.stderr, res.stderr
    assert "MCP server on" not in res.stderr, res.stderr  # refused before the server line is printed


def test_a_token_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("a-token-that-others-can-read-0123456789\n")
    path.chmod(0o644)
    res = run_cli(tmp_path, "--token-file", str(path), "--port", "1")
    assert res.returncode == 2 and "chmod 600" in res.stderr, res.stderr


def test_the_library_refuses_an_unauthenticated_non_loopback_server(tmp_path: Path) -> None:
    code = ("import anyio\nfrom mcp.server import Server\nfrom agent_tools.adapters.mcp_http import serve_http, "
            "InsecureListen\ntry:\n    anyio.run(lambda: serve_http(Server('x'), host='0.0.0.0', port=1, token=None))\n"
            "except InsecureListen as e:\n    print('refused:', e)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
                         env={**server_env(tmp_path), "PATH": os.environ.get("PATH", "")})
    assert res.stdout.startswith("refused:"), res.stdout + res.stderr


async def test_an_ipv6_loopback_server_prints_a_url_clients_can_use(tmp_path: Path) -> None:
    """`--host ::1`: the startup line names `http://[::1]:PORT/mcp` (brackets, RFC 3986), and that URL works."""
    import socket

    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    errlog = tmp_path / "http-stderr.log"
    env = {**server_env(tmp_path), "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}
    with errlog.open("w") as log:
        proc = await anyio.open_process(agent_tools_cmd("--transport", "http", "--host", "::1", "--port", str(port)),
                                        stdin=None, stdout=log, stderr=log, env=env, cwd=str(tmp_path))
    try:
        url = f"http://[::1]:{port}/mcp"
        with anyio.fail_after(30):
            while url not in errlog.read_text():
                assert proc.returncode is None, errlog.read_text()
                await anyio.sleep(0.1)
            while True:
                try:
                    await (await anyio.connect_tcp("::1", port)).aclose()
                    break
                except OSError:
                    await anyio.sleep(0.1)
        async with bearer_client(token_of(tmp_path)) as client, \
                streamable_http_client(url, http_client=client) as (r, w), ClientSession(r, w) as session:
            with anyio.fail_after(20):
                await session.initialize()
                out = structured(await session.call_tool("run_command", {"host": "local", "command": "echo v6"}))
        assert out["stdout"]["text"] == "v6\n"
    finally:
        proc.terminate()
        with anyio.move_on_after(10):
            await proc.wait()


def test_a_wildcard_address_by_any_spelling_needs_allow_host(tmp_path: Path) -> None:
    """qa13 round 3: `--host 0` (and `0x0`, `00`, `::ffff:0.0.0.0`) is every address to the socket layer, so it
    listened on 0.0.0.0 without the --allow-host guard; the address is read as getaddrinfo reads it."""
    for host in ("0", "0x0", "00", "::ffff:0.0.0.0", "[::]"):
        res = run_cli(tmp_path, "--host", host, "--port", "1")
        assert res.returncode == 2 and "--allow-host" in res.stderr, (host, res.stderr)
        assert "MCP server on" not in res.stderr, (host, res.stderr)
        res = run_cli(tmp_path, "--host", host, "--no-auth", "--port", "1")
        assert res.returncode == 2 and "loopback" in res.stderr, (host, res.stderr)


async def test_127_1_is_loopback_and_serves_with_loopback_names(tmp_path: Path) -> None:
    async with http_server(tmp_path, "--host", "127.1") as url:
        port = url.split(":")[2].split("/")[0]
        auth = f"Bearer {token_of(tmp_path)}"
        ok = await post_init(url, Authorization=auth, Host=f"localhost:{port}")
        assert ok.status_code == 200, ok.text


async def test_two_host_or_origin_headers_are_refused(tmp_path: Path) -> None:
    """qa13 round 3: with two Origin (or Host) headers the middleware checked one and the SDK the other. HTTP
    clients send one of each, so the requests are written by hand."""
    async with http_server(tmp_path) as url:
        port = url.split(":")[2].split("/")[0]
        good_origin, good_host = f"http://localhost:{port}", f"localhost:{port}"

        async def status(hosts: tuple[str, ...], origins: tuple[str, ...]) -> bytes:
            body = json.dumps(INIT).encode()
            head = "".join(f"Host: {h}\r\n" for h in hosts) + "".join(f"Origin: {o}\r\n" for o in origins)
            head += "".join(f"{k}: {v}\r\n" for k, v in MCP_HEADERS.items())
            request = (f"POST /mcp HTTP/1.1\r\n{head}Authorization: Bearer {token_of(tmp_path)}\r\n"
                       f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
            stream = await anyio.connect_tcp("127.0.0.1", int(port))
            async with stream:
                await stream.send(request)
                reply = await stream.receive()
            return reply.split(b"\r\n", 1)[0].split()[1]

        with anyio.fail_after(30):
            for origins in ((good_origin, "http://evil.example"), ("http://evil.example", good_origin)):
                assert await status((good_host,), origins) == b"403", origins
            for hosts in ((good_host, "evil.example"), ("evil.example", good_host)):
                assert await status(hosts, (good_origin,)) in (b"400", b"421"), hosts
            assert await status((good_host,), (good_origin,)) == b"200"
