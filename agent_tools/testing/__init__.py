"""Test support for code that uses agent_tools: fake and in-process hosts, polling, SSH client files, and the
pytest plugin.

For your own tests as much as for this project's::

    FunctionHost      a Host whose commands a Python function answers (no process, no network)
    EmbeddedHost      an in-process SSH server on loopback that runs commands for real (asyncssh; no root)
    wait_until        poll a condition (sync or async) until it holds; WaitTimeout names what it waited for
    free_port         a free TCP port on 127.0.0.1
    ssh_config_block  a Host block of an OpenSSH client config for a test host (ssh -F and asyncssh alike)
    known_hosts_line  a known_hosts line for a host key ([127.0.0.1]:PORT form off port 22)

The pytest plugin (:mod:`agent_tools.testing.pytest_plugin`: record sessions once, replay them in tests) is
registered through the ``pytest11`` entry point ``agent_tools`` when agent-tools is installed; nothing to import.
"""

from .embedded import EmbeddedHost
from .function import FunctionHost
from .ports import free_port
from .ssh_files import known_hosts_line, ssh_config_block
from .waiting import WaitTimeout, wait_until

__all__ = ["EmbeddedHost", "FunctionHost", "WaitTimeout", "free_port", "known_hosts_line", "ssh_config_block",
           "wait_until"]
