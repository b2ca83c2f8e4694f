"""Issue 13 (qa13): commands a fresh tester found decided too weakly under the shipped default policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_tools.policy import PolicySet, parse_command

POLICIES = Path(__file__).resolve().parents[2] / "policies"


@pytest.fixture(scope="module")
def default() -> PolicySet:
    return PolicySet.load([POLICIES / "default.yaml"])


@pytest.mark.parametrize(
    ("command", "program"),
    [
        # getopt_long optional_argument: the value is only taken after `=`, the next word is the program
        ("env --default-signal dd if=/dev/zero of=/dev/sda", "dd"),
        ("env --ignore-signal reboot", "reboot"),
        ("env --block-signal rm -rf /", "rm"),
        ("env --default-signal=INT reboot", "reboot"),
        ("env -u X reboot", "reboot"),
        ("env -C /tmp reboot", "reboot"),
        ("xargs --max-lines rm -rf /", "rm"),
        ("sudo -h reboot", "reboot"),
    ],
)
def test_optional_argument_long_options_do_not_hide_the_program(
    default: PolicySet, command: str, program: str
) -> None:
    assert any(c.argv[:1] == [program] for c in parse_command(command)), parse_command(command)
    assert default.decide("local", command).decision == "deny"


@pytest.mark.parametrize(
    "command", ["echo $(</dev/watchdog)", ": $(</dev/watchdog)", 'echo "$(< /dev/watchdog0)"', "x=$(</dev/watchdog)"]
)
def test_read_file_substitution_opens_the_file(default: PolicySet, command: str) -> None:
    opened = [r.target for c in parse_command(command) for r in c.redirects]
    assert any(t.startswith("/dev/watchdog") for t in opened), opened
    assert default.decide("local", command).decision == "deny"


@pytest.mark.parametrize(
    "command",
    [
        "cat /dev/zero > /dev/shm/../sda",
        "cat /dev/zero > /dev/pts/../../dev/sda",
        "cat /dev/zero > /dev/mqueue/../sda",
        "cat /dev/zero > /dev/hugepages/../sda",
        "cp /dev/zero /dev/shm/../nvme0n1",
        "tee /dev/fd/../sda",
        "cat /dev/shm/../watchdog",
        "dd if=/dev/zero of=~root/../dev/sda",
    ],
)
def test_dot_dot_is_normalised_before_the_harmless_device_list(default: PolicySet, command: str) -> None:
    assert default.decide("local", command).decision == "deny"


def test_harmless_device_directories_still_only_ask(default: PolicySet) -> None:
    assert default.decide("local", "echo x > /dev/shm/ok").decision == "ask"
    assert default.decide("local", "echo x > /dev/null").decision == "allow"


@pytest.mark.parametrize(
    "command",
    [
        "systemctl start runlevel6.target",
        "systemctl isolate runlevel0.target",
        "systemctl start systemd-reboot",
        "systemctl start systemd-poweroff",
        "systemctl start ctrl-alt-del",
        "systemctl start kexec",
        "systemctl kill --signal=SIGRTMIN+5 init.scope",
        "systemctl kill -s SIGINT init.scope",
        "kill -SIGRTMIN+5 1",
        "busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager"
        " KillUnit ss init.scope all SIGINT",
        "ipmitool power reset",
        "ipmitool chassis power cycle",
        "ipmitool -I lanplus -H bmc power off",
    ],
)
def test_reboot_by_other_names_is_denied(default: PolicySet, command: str) -> None:
    assert default.decide("local", command).decision == "deny"


def test_reading_power_state_is_not_denied(default: PolicySet) -> None:
    assert default.decide("local", "ipmitool power status").decision != "deny"
    assert default.decide("local", "systemctl status runlevel6.target").decision == "allow"


@pytest.mark.parametrize("command", ["file -Cm /tmp/x", "file -Cm/tmp/x", "file -bC -m /tmp/x", "tree -ao /tmp/t"])
def test_clustered_short_options_are_seen(default: PolicySet, command: str) -> None:
    assert default.decide("local", command).decision == "ask"


@pytest.mark.parametrize("command", ["ip -br addr", "ip -s link", "find /var/log -name x", "file -b /etc/hostname"])
def test_single_dash_words_are_not_clusters(default: PolicySet, command: str) -> None:
    assert default.decide("local", command).decision == "allow"


@pytest.mark.parametrize(
    "command", ["set -k", "set -ek", "set -o keyword", "systemctl -M box status", "systemctl --machine=box status x"]
)
def test_keyword_mode_and_machine_ask(default: PolicySet, command: str) -> None:
    assert default.decide("local", command).decision == "ask"


@pytest.mark.parametrize("command", ["set -e", "set +k", "set -o pipefail", "systemctl status sglang"])
def test_plain_set_and_local_systemctl_stay_allowed(default: PolicySet, command: str) -> None:
    assert default.decide("local", command).decision == "allow"
