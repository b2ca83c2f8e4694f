"""Test support for code that uses agent_tools: fake and in-process hosts, and the pytest plugin.

For your own tests as much as for this project's::

    FunctionHost      a Host whose commands a Python function answers (no process, no network)
    EmbeddedHost      an in-process SSH server on loopback that runs commands for real (asyncssh; no root)
"""

from .embedded import EmbeddedHost
from .function import FunctionHost

__all__ = ["EmbeddedHost", "FunctionHost"]
