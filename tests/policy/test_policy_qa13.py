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


# --------------------------------------------------------------------------------------------------------------
# qa13 report, round 3: command substitutions tree-sitter-bash leaves as text (finding 1)

HIDDEN_DENIED = [
    "echo ${x:-`rm -rf /`}",
    "echo ${x:-`reboot`}",
    "ls -l ${HOME:+`shutdown -h now`}",
    "journalctl -u ${x:-`reboot`}",
    "curl -s http://127.0.0.1:30000/${x:-`reboot`}",
    "echo ${x/a/`dd if=/dev/zero of=/dev/sda`}",
    "echo ${x/a/`cat /dev/watchdog`}",
    "cat < ${x:-`reboot`}",
    "for i in ${x:-`reboot`}; do :; done",
    "test ${x:-`reboot`}",
    "cd ${x:-`reboot`}",
    "printf %s ${x:-`reboot`}",
    "cat <<< ${y:-`reboot`}",
    "x=${y:-`rm -rf /`} ls",
    *(f"echo ${{x{op}`reboot`}}" for op in ("#", "##", "%", "%%", "^", "^^", ",", ",,", ":=", ":?", "-", ":+", "+",
                                            "/a/", "//a/", "/#a/", "/%a/", ":-~", ":-{a,")),
    "echo ${x:-${y:-`reboot`}}",
    'echo "${x:-\'`reboot`\'}"',  # single quotes are ordinary characters inside "${...}"
    "echo `echo \\`reboot\\``",
    "ls `echo \\`reboot\\``",
    "echo `echo \\`echo \\\\\\`reboot\\\\\\`\\``",
    "echo ${x:-<(reboot)}",
    "echo ${x:->(reboot)}",
    "cat <<EOF\n`rm -rf /`\nEOF",
    "cat <<-EOF\n\t`reboot`\n\tEOF",
    "grep x <<EOF\n`reboot`\nEOF",
    "tail <<EOF | head\n`reboot`\nEOF",
    "jq . <<EOF\n`reboot`\nEOF",
    "read x <<EOF\n`reboot`\nEOF",
    "cat <<EOF\n${x/a/`reboot`}\nEOF",
    "cat <<EOF\n`echo $(date); reboot`\nEOF",
    "bash -c 'echo ${x:-`reboot`}'",
]


@pytest.mark.parametrize("command", HIDDEN_DENIED)
def test_substitutions_the_parser_reads_as_text_are_decided(default: PolicySet, command: str) -> None:
    """bash 5.2 runs each of these inner commands (backquotes in ${...} words, nested backquotes, process
    substitution in ${...}, backquotes in an unquoted here-document); the inner command decides."""
    assert default.decide("local", command).decision == "deny", default.decide("local", command).reason


@pytest.mark.parametrize(
    "command", ["echo ${x:-`date`}", "cat <<EOF\n`date`\nEOF", "ls ${x:-<(date)}", "bash <<EOF\n`date`\nEOF"]
)
def test_a_hidden_substitution_of_a_harmless_command_still_asks(default: PolicySet, command: str) -> None:
    got = default.decide("local", command)
    assert got.decision == "ask" and "reads as plain text" in got.reason, got.reason


@pytest.mark.parametrize(
    "command",
    [
        "cat << \"EOF\"\n`reboot`\nEOF",  # a quoted delimiter: the body is literal
        "cat <<'EOF'\n`reboot` $(reboot)\nEOF",
        "cat <<E\\OF\n`reboot`\nEOF",
        "cat <<EOF\n\\`reboot\\`\nEOF",  # an escaped backquote in the body is a character
        "echo \\`reboot\\`",
        "echo ${x:-'`reboot`'}",  # single quotes quote inside an unquoted ${...}
        "echo $'`reboot`'",
        'echo "${x:-<(reboot)}"',  # no process substitution inside double quotes
        "grep -E 'a`b' /etc/hostname",
    ],
)
def test_literal_backquotes_stay_literal(default: PolicySet, command: str) -> None:
    assert default.decide("local", command).decision == "allow", default.decide("local", command).reason
