"""MCP over streamable HTTP, authenticated: a bearer token, Host/Origin checks, loopback by default.

Every tool runs commands on every configured host as the user who started the server, so whoever can reach the
port must prove they may: each request carries ``Authorization: Bearer TOKEN`` or is answered ``401``
(:class:`BearerChallenge`, saying whether the token was missing or wrong, in front of the official SDK's own
``RequireAuthMiddleware`` and ``BearerAuthBackend``, fed by a :class:`StaticTokenVerifier`; both compare in
constant time). The token is random (32 bytes from :mod:`secrets`, URL-safe base64) and lives in
a file created ``0600`` in the state directory on first use (:func:`load_or_create_token`), or is given by the
user (``$AGENT_TOOLS_MCP_TOKEN``, ``--token-file``).

DNS rebinding: the MCP transport spec (2025-06-18, "Security Warning") says servers MUST validate the
``Origin`` header and SHOULD bind to localhost only. The SDK's ``TransportSecuritySettings`` is used for that:
the ``Host`` header must name the address listened on (a loopback name when listening on loopback, or a
name given with ``allowed_hosts``), else ``421``; an ``Origin`` that is present must be ``http(s)://`` one of
those, else ``403`` (a page from another site that a rebinding DNS answer pointed at this port says so in
both). The SDK lets requests without ``Origin`` through (non-browser clients send none); they still need the
token. The SDK compares a name with any port as a prefix (``localhost:`` also starts ``localhost:1@evil.example``
and ``http://localhost:1.evil.example``), so a ``Host`` or ``Origin`` that is not well formed (RFC 9110 7.2: a
host and an optional numeric port; RFC 6454: an origin is a scheme, a host and an optional numeric port, nothing
more) is refused first, with the same ``421``/``403``.

Listening beyond loopback without a token is refused (:class:`InsecureListen`), and a wildcard address
(``0.0.0.0``, ``::``, and what the socket layer reads as one: ``0``, ``0x0``) needs the names clients will use in
``Host`` (``allowed_hosts``). The address is read as the socket layer reads it (getaddrinfo(3)): ``127.1`` is
loopback, ``0`` is every address.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import re
import secrets
import socket
import stat
from pathlib import Path
from typing import Any

import structlog
from mcp.server import Server
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings

__all__ = ["TOKEN_ENV", "TOKEN_FILE_NAME", "BearerChallenge", "InsecureListen", "StaticTokenVerifier",
           "WellFormedHostOrigin", "http_url", "is_loopback", "load_or_create_token", "serve_http",
           "transport_security"]

log = structlog.get_logger(__name__)

TOKEN_ENV = "AGENT_TOOLS_MCP_TOKEN"
"""Environment variable that gives the bearer token (instead of the token file)."""

TOKEN_FILE_NAME = "mcp-http.token"
"""File name of the token in the state directory."""

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


class InsecureListen(ValueError):
    """The HTTP server would listen where it must not (beyond loopback without a token, or on a wildcard address
    without the host names clients use)."""


class StaticTokenVerifier:
    """An MCP SDK ``TokenVerifier`` that accepts exactly one bearer token (compared with
    :func:`hmac.compare_digest`, so timing says nothing about it)."""

    def __init__(self, token: str) -> None:
        if len(token) < 16:
            raise ValueError("the MCP bearer token must be at least 16 characters")
        self._token = token.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._token):
            return AccessToken(token="[REDACTED]", client_id="agent-tools-bearer", scopes=[])
        return None


def _addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses a server listening on ``host`` binds, read as the socket layer reads them
    (getaddrinfo(3) with ``AI_PASSIVE``: ``0`` and ``0x0`` are ``0.0.0.0``, ``127.1`` and ``2130706433`` are
    ``127.0.0.1``, a name is resolved); an IPv4-mapped IPv6 address as its IPv4 address. Empty when it does not
    resolve (the server cannot listen there either)."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError):
        return []
    out: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        out.append(address)
    return out


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` stands for is a loopback address (``127.0.0.0/8``, ``::1``): ``localhost``,
    ``127.0.0.1``, ``127.1``, ``[::1]``, ``::ffff:127.0.0.1`` (see :func:`_addresses`)."""
    addresses = _addresses(host)
    return bool(addresses) and all(a.is_loopback for a in addresses)


def _is_wildcard(host: str) -> bool:
    """Whether ``host`` stands for every address of the machine: ``0.0.0.0``, ``::``, and what the socket layer
    reads as them (``0``, ``0x0``, ``00``, ``::ffff:0.0.0.0``)."""
    return any(a.is_unspecified for a in _addresses(host))


def load_or_create_token(path: str | os.PathLike[str]) -> str:
    """The token in ``path``; the file is created first (mode ``0600``, directory ``0700``) with a random token
    when it does not exist. Two servers starting at once agree on one token (exclusive create).

    :raises PermissionError: the file is readable or writable by group/others, or owned by another user (like
        OpenSSH with private keys: fix with ``chmod 600 FILE``).
    :raises ValueError: the file holds no usable token (fewer than 16 characters).
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(32) + "\n")
        log.info("mcp.token_created", path=str(p))
    st = p.stat()
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PermissionError(f"{p} is accessible by other users (mode {stat.S_IMODE(st.st_mode):o}); "
                              f"run: chmod 600 {p}")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise PermissionError(f"{p} is owned by uid {st.st_uid}, not by this user")
    token = p.read_text(encoding="utf-8").strip()
    if len(token) < 16:
        raise ValueError(f"{p} holds no usable token (at least 16 characters); delete it to get a new one")
    return token


def transport_security(host: str, port: int,
                       allowed_hosts: list[str] | tuple[str, ...] = ()) -> TransportSecuritySettings:
    """Host/Origin checks (the SDK's DNS-rebinding protection) for a server listening on ``host:port``.

    Allowed ``Host`` values: ``host`` with any port, the loopback names (``127.0.0.1``, ``localhost``,
    ``[::1]``) with any port when ``host`` is loopback (as the SDK's own default), and each of
    ``allowed_hosts`` (a name, or ``name:port`` for one port only). Allowed ``Origin`` values: ``http://`` and
    ``https://`` of each of those.

    :raises InsecureListen: ``host`` is a wildcard address and ``allowed_hosts`` is empty.
    """
    names: list[str] = []
    if is_loopback(host):
        names += list(_LOOPBACK_NAMES)
    elif _is_wildcard(host):
        if not allowed_hosts:
            raise InsecureListen(f"listening on {host} (every address) needs the host names clients connect with "
                                 "(--allow-host NAME), which the Host header is checked against")
    else:
        names.append(f"[{host.strip('[]')}]" if ":" in host else host)
    patterns = [f"{name}:*" for name in names]
    for name in allowed_hosts:
        has_port = name.rsplit(":", 1)[-1].isdigit() and (not name.startswith("[") or "]:" in name)
        patterns.append(name if has_port else f"{name}:*")
    patterns = list(dict.fromkeys(patterns))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=patterns,
        allowed_origins=[f"{scheme}://{pattern}" for pattern in patterns for scheme in ("http", "https")],
    )


_AUTHORITY = r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)(?::[0-9]{1,5})?"
_HOST_HEADER_RE = re.compile(_AUTHORITY)
_ORIGIN_HEADER_RE = re.compile(rf"https?://{_AUTHORITY}")


class WellFormedHostOrigin:
    """ASGI middleware: an HTTP request whose ``Host`` header is not ``host[:port]`` (or that has two) gets
    ``421``, one whose ``Origin`` (when present) is not ``http(s)://host[:port]`` (or that has two) gets ``403``,
    before the SDK's own name checks (which match a name and any port by prefix)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            hosts = [v for k, v in scope.get("headers", []) if k.lower() == b"host"]
            origins = [v for k, v in scope.get("headers", []) if k.lower() == b"origin"]
            host = hosts[0].decode("latin-1") if hosts else ""
            status = None
            # one of each at most (RFC 9110 7.2: "more than one Host header" is a 400): the SDK reads the first and
            # a dict the last, so two could show each check a different one
            if len(hosts) > 1 or (host and not _HOST_HEADER_RE.fullmatch(host)):
                status, body = 421, b"Invalid Host header"
            elif len(origins) > 1 or (origins and not _ORIGIN_HEADER_RE.fullmatch(origins[0].decode("latin-1"))):
                status, body = 403, b"Invalid Origin header"
            if status is not None:
                log.warning("mcp.http_header_refused", status=status)
                await send({"type": "http.response.start", "status": status,
                            "headers": [(b"content-type", b"text/plain; charset=utf-8")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


#: where a client finds the token, for the text of a 401 (no path of this machine: the client may be elsewhere)
_TOKEN_WHERE = (f"the token is in the server's state directory ({TOKEN_FILE_NAME}), or the one given with "
                f"--token-file or ${TOKEN_ENV}")


class BearerChallenge:
    """ASGI middleware: a request without ``Authorization: Bearer TOKEN`` of this server's token is answered
    ``401`` here, saying which of the two it is, before the SDK's own check (kept behind it).

    RFC 6750 section 3: the challenge is ``WWW-Authenticate: Bearer realm="agent-tools"``; a request with no
    credentials gets no error code (3.1: the resource server "SHOULD NOT include an error code"), one with a
    token that is not valid gets ``error="invalid_token"`` and an ``error_description``. There is no
    ``resource_metadata`` (RFC 9728): the MCP authorization spec's OAuth discovery does not apply to a server
    whose one token is given out of band, and pointing at metadata would send clients to an authorization
    server that does not exist. The SDK answers both cases alike ("invalid_token", "Authentication
    required"); an MCP client that starts OAuth on any 401 (MCP Inspector 2.x) shows the description when
    told not to (``--stored-auth-only``).
    """

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        given = headers.get(b"authorization", b"")
        scheme, _, credential = given.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(credential.strip(), self._token):
            await self.app(scope, receive, send)
            return
        if scheme.lower() == b"bearer" and credential.strip():
            error = "invalid_token"
            said = f"the bearer token is not this server's token ({_TOKEN_WHERE}); this server does not do OAuth"
        else:
            error = None
            said = (f"this server needs Authorization: Bearer TOKEN on every request ({_TOKEN_WHERE}); it does not "
                    "do OAuth")
        challenge = 'Bearer realm="agent-tools"' + (f', error="{error}", error_description="{said}"' if error else "")
        body = json.dumps({"error": error or "unauthorized", "error_description": said}).encode()
        log.warning("mcp.http_unauthorized", why=error or "no bearer token")
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", challenge.encode())]})
        await send({"type": "http.response.body", "body": body})


def http_url(host: str, port: int, path: str = "/mcp") -> str:
    """The URL clients use for ``host`` and ``port`` (an IPv6 address in brackets, RFC 3986: ``http://[::1]:8765/mcp``)."""
    bare = host.strip("[]")
    return f"http://[{bare}]:{port}{path}" if ":" in bare else f"http://{bare}:{port}{path}"


async def serve_http(server: Server[Any], *, host: str = "127.0.0.1", port: int = 8765, path: str = "/mcp",
                     token: str | None, allowed_hosts: list[str] | tuple[str, ...] = ()) -> None:
    """Serve ``server`` over streamable HTTP at ``http://HOST:PORT/PATH`` (uvicorn) until cancelled or
    SIGINT/SIGTERM.

    :param token: the bearer token every request must carry (``Authorization: Bearer TOKEN``), or None for no
        authentication, which is only allowed on a loopback ``host``.
    :param allowed_hosts: more names clients may use in ``Host``/``Origin`` (see :func:`transport_security`).
    :raises InsecureListen: ``token`` is None and ``host`` is not loopback; or see :func:`transport_security`.
    """
    import uvicorn

    if token is None and not is_loopback(host):
        raise InsecureListen(f"refusing to serve MCP over HTTP on {host} without a bearer token: anyone who can "
                             "reach the port could run commands as this user")
    security = transport_security(host, port, allowed_hosts)
    auth: dict[str, Any] = {}
    if token is not None:
        listen = f"[{host.strip('[]')}]" if ":" in host else host
        auth = {"auth": AuthSettings(issuer_url=f"http://{listen}:{port}", resource_server_url=None),
                "token_verifier": StaticTokenVerifier(token)}
    app: Any = server.streamable_http_app(streamable_http_path=path, host=host, transport_security=security, **auth)
    if token is not None:
        app = BearerChallenge(app, token)
    config = uvicorn.Config(WellFormedHostOrigin(app), host=host.strip("[]"), port=port, log_level="warning",
                            lifespan="on")
    log.info("mcp.http_listening", url=http_url(host, port, path), auth="bearer" if token else "none",
             allowed_hosts=security.allowed_hosts)
    await uvicorn.Server(config).serve()
