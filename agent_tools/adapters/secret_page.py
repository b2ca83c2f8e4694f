"""A one-time page on loopback where a person types a secret a job waits on (MCP URL-mode elicitation).

MCP 2025-11-25 (elicitation): form mode must not be used for sensitive data; URL mode sends the user to a page
outside the client, so the secret never passes through the client or the model. :class:`SecretPage` listens on
``127.0.0.1`` (an ephemeral port) and serves, per offer, ``/secret/TOKEN``: ``GET`` shows a password form,
``POST`` (``application/x-www-form-urlencoded``, field ``secret``) hands the value to a callback (which writes it
to the job's pipe: :meth:`agent_tools.tools.toolkit.Toolkit.job_input` with ``secret=True``) and ends the offer.
``TOKEN`` is 32 random bytes (URL-safe base64), used once, and expires; a request whose ``Host`` header is not
this listener's address is refused (DNS rebinding). Nothing of the value is logged or echoed; responses carry
``Cache-Control: no-store`` and ``Referrer-Policy: no-referrer``.
"""

from __future__ import annotations

import html
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import anyio.abc
import structlog

__all__ = ["SecretPage"]

log = structlog.get_logger(__name__)

#: largest request accepted (headers + body), bytes
_MAX_REQUEST_BYTES = 70_000


@dataclass
class _Offer:
    job_id: str
    expires_at: float
    deliver: Callable[[str], Awaitable[None]]


class SecretPage:
    """The loopback listener and its open offers; :meth:`serve` runs it (in a task group), :meth:`offer` makes a URL.

    :param expiry_s: seconds an offer stays valid (float > 0).
    """

    def __init__(self, *, expiry_s: float = 600.0) -> None:
        self.expiry_s = expiry_s
        self._offers: dict[str, _Offer] = {}
        self._port: int | None = None
        self._ready = anyio.Event()

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 until cancelled."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self._port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
        self._ready.set()
        task_status.started()
        async with listener:
            await listener.serve(self._handle)

    async def offer(self, job_id: str, deliver: Callable[[str], Awaitable[None]]) -> str:
        """A one-time URL whose form hands what is typed to ``deliver`` (once), for job ``job_id``."""
        await self._ready.wait()
        now = anyio.current_time()
        self._offers = {t: o for t, o in self._offers.items() if o.expires_at > now}
        token = secrets.token_urlsafe(32)
        self._offers[token] = _Offer(job_id, now + self.expiry_s, deliver)
        return f"http://127.0.0.1:{self._port}/secret/{token}"

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            try:
                with anyio.fail_after(30):
                    status, body = await self._answer(stream)
            except Exception as exc:  # a broken or slow client: nothing to answer
                log.debug("secret_page.request_failed", error=type(exc).__name__)
                return
            page = (f"<!doctype html><meta charset=utf-8><title>agent-tools</title><body>{body}</body>").encode()
            head = (f"HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {len(page)}\r\n"
                    "Cache-Control: no-store\r\nReferrer-Policy: no-referrer\r\nX-Frame-Options: DENY\r\n"
                    "Connection: close\r\n\r\n").encode()
            await stream.send(head + page)

    async def _answer(self, stream: anyio.abc.SocketStream) -> tuple[str, str]:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive()
            data += chunk
            if len(data) > _MAX_REQUEST_BYTES:
                return "413 Payload Too Large", "too large"
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, *_ = [*lines[0].split(" "), "", ""]
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        if headers.get("host") != f"127.0.0.1:{self._port}":
            return "421 Misdirected Request", "wrong host"
        token = path.removeprefix("/secret/") if path.startswith("/secret/") else ""
        offer = self._offers.get(token)
        if offer is None or offer.expires_at < anyio.current_time():
            return "404 Not Found", "This page was used already or has expired."
        job = html.escape(offer.job_id)
        if method == "GET":
            return "200 OK", (f"<p>Job {job} waits on a password.</p><form method=post><input type=password "
                              "name=secret autofocus autocomplete=off><button>Send to the job</button></form>")
        if method != "POST":
            return "405 Method Not Allowed", "GET or POST"
        length = int(headers.get("content-length", "0") or 0)
        if length > _MAX_REQUEST_BYTES:
            return "413 Payload Too Large", "too large"
        while len(body) < length:
            body += await stream.receive()
        fields = urllib.parse.parse_qs(body[:length].decode("utf-8", "replace"), keep_blank_values=True)
        value = (fields.get("secret") or [""])[0]
        del self._offers[token]  # once, whatever happens next
        try:
            await offer.deliver(value)
        except Exception as exc:
            log.warning("secret_page.delivery_failed", job_id=offer.job_id, error=type(exc).__name__)
            return "502 Bad Gateway", f"It could not be written to job {job}; nothing was kept."
        log.info("secret_page.delivered", job_id=offer.job_id)
        return "200 OK", f"<p>Sent to job {job}. You can close this page.</p>"
