"""pytest fixtures for the real systemd test hosts (see tests/hosts/README.md).

Use from ``tests/conftest.py``::

    from tests.hosts.fixtures import systemd_hosts  # noqa: F401

Environment:
    AGENT_TOOLS_REQUIRE_SYSTEMD=1   fail (instead of skip) when the hosts cannot run; installs missing
                                    packages (systemd-container, mmdebstrap, ...) first when root
    AGENT_TOOLS_SYSTEMD_HOSTS=N     how many hosts to boot (default 2)
    AGENT_TOOLS_KEEP_HOSTS=1        reuse a healthy running pool and leave it running after the session
    AGENT_TOOLS_TESTHOSTS_POOL=K    which pool (0..29, default 0): pools run side by side, each with its own
                                    state dir, lock, bridge, subnet and netns names
    AGENT_TOOLS_TESTHOSTS_STATE=DIR state dir (default /run/agent-tools-testhosts, -K for pool K)
    AGENT_TOOLS_TESTHOSTS_WAIT=S    how long to wait for another session's pool (default 900 s)
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .nspawn import DEFAULT_STATE_DIR, HarnessError, HostPool, ensure_machine_packages, unavailable_reason

REQUIRE_ENV = "AGENT_TOOLS_REQUIRE_SYSTEMD"
COUNT_ENV = "AGENT_TOOLS_SYSTEMD_HOSTS"
KEEP_ENV = "AGENT_TOOLS_KEEP_HOSTS"
WAIT_ENV = "AGENT_TOOLS_TESTHOSTS_WAIT"


@pytest.fixture(scope="session")
def systemd_hosts() -> Iterator[HostPool]:
    """A booted pool of real systemd + sshd hosts (``at-h1``, ``at-h2``, ...), torn down after the session."""
    required = os.environ.get(REQUIRE_ENV) == "1"
    if required and os.geteuid() == 0:
        try:
            ensure_machine_packages()
        except HarnessError as exc:
            pytest.fail(f"{REQUIRE_ENV}=1 but installing the harness packages failed: {exc}", pytrace=False)
    reason = unavailable_reason()
    if reason is not None:
        if required:
            pytest.fail(f"{REQUIRE_ENV}=1 but {reason}", pytrace=False)
        pytest.skip(reason)

    keep = os.environ.get(KEEP_ENV) == "1"
    # Another pytest session on this machine may hold the pool: wait for it rather than break it.
    pool = HostPool(DEFAULT_STATE_DIR, lock_wait_s=float(os.environ.get(WAIT_ENV, "900")))
    try:
        pool.up(int(os.environ.get(COUNT_ENV, "2")), fresh=not keep)
    except HarnessError as exc:
        pytest.fail(f"could not boot the systemd test hosts: {exc}", pytrace=False)
    try:
        yield pool
    finally:
        if not keep:
            pool.down()
