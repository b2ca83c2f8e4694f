"""``run_on`` with input a command does not read: the command's own answer, not a lost connection.

Found by the full check under load: ``write_file`` as a user who may not write the path answered
``connection_lost during write (Channel not open for sending)`` instead of ``permission_denied``, because the
remote command failed and closed its channel before the content was written.
"""

from __future__ import annotations

from agent_tools.hosts.base import Host, run_on


async def test_input_a_failing_command_never_reads_gives_its_exit_status(any_host: Host) -> None:
    # 8 MiB: far past the SSH channel window and the pipe buffer, so the write is still going when the command
    # has exited and its channel closed
    res = await run_on(any_host, "echo refused >&2; exit 3", stdin=b"x" * (8 << 20))
    assert (res.exit_status, res.stderr) == (3, b"refused\n"), res
    # and the connection is still good for the next command
    again = await run_on(any_host, "cat | wc -c", stdin=b"abc")
    assert again.stdout.strip() == b"3", again
