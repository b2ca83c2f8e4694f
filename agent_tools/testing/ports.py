"""``free_port``: a loopback TCP port for a test server."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    """A TCP port on ``127.0.0.1`` that was free a moment ago: the kernel's pick for a bind to port 0, closed
    again before returning.

    Another process may take it before the caller binds it; a caller that can, retries with a new port when its
    server fails to bind (``EADDRINUSE``). Where the server itself can bind port 0 and report its port (asyncssh's
    ``listen``, :class:`~agent_tools.testing.EmbeddedHost`), let it: that has no race.

    :raises OSError: no port could be bound on 127.0.0.1.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
