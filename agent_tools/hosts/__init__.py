"""Hosts: how bytes reach a machine (local subprocesses, SSH, fakes and replays)."""

from .base import ExecResult, Host, HostProcess, run_on
from .local import LocalHost
from .ssh import SshHost, SshSettings

__all__ = ["ExecResult", "Host", "HostProcess", "LocalHost", "SshHost", "SshSettings", "run_on"]
