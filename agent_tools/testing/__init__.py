"""Test support for code that uses agent_tools: fake and in-process hosts, and the pytest plugin.

For your own tests as much as for this project's::

    FunctionHost      a Host whose commands a Python function answers (no process, no network)
"""

from .function import FunctionHost

__all__ = ["FunctionHost"]
