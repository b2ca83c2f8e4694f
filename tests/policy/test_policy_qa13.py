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


# --------------------------------------------------------------------------------------------------------------
# findings 2, 15, 16: names only the host resolves (~NAME, ~-, ~+, /proc/PID/cwd, /proc/PID/fd), globs, -t clusters,
# programs that write through their own scripts; 3: grep -D read; 4: date MMDDhhmm; 5: tree -R; 6: process bombs


@pytest.mark.parametrize(
    "command",
    [
        "cat ~sys/watchdog",  # Debian: sys's login directory is /dev
        "cd ~sys; cat watchdog",
        "cat ~root/../dev/watchdog",
        "head -c1 ~bin/../dev/watchdog",
        "cat /proc/1/cwd/dev/watchdog",  # PID 1's working directory is /
        "md5sum /proc/1/cwd/dev/watchdog",
        "cat /proc/self/cwd/../../dev/watchdog",
        "cat /proc/1/task/1/cwd/dev/watchdog",
        "cd /dev; cd /tmp; cat ~-/watchdog",
        "cd /dev; cat ~+/watchdog",
        "cat /proc/1/cwd/dev/char/10:130",
        "cat /proc/1/fd/3",  # whatever PID 1 holds open (systemd holds the watchdog)
        "grep -D read -r x /dev",
        "grep --devices=read -r x /dev",
        "grep --dev=read -r x /dev",
        "grep -rDread x /dev",
        "grep -d recurse -D read x /dev",
        "egrep -r -D read x /dev",
        "grep -D read -r x /",
        "cd / && grep -D read -r x dev",
    ],
)
def test_a_watchdog_by_a_name_the_host_resolves_is_denied(default: PolicySet, command: str) -> None:
    assert default.decide("local", command).decision == "deny", default.decide("local", command).reason


@pytest.mark.parametrize(
    "command",
    [
        "cp -vt /dev /tmp/sda", "cp -at /dev /tmp/sda", "cp -ft /dev /tmp/sda", "cp -rt /dev /tmp/sda",
        "cp -vt/dev /tmp/sda", "mv -vt /dev /tmp/sda", "install -vt /dev /tmp/sda", "install -Dt /dev /tmp/sda",
        "cp /dev/zero ~sys/sda", "cat /dev/zero > ~sys/sda", "tee ~sys/sda < /dev/zero", "dd if=/dev/zero of=~sys/sda",
        "shred ~sys/sda", "truncate -s0 ~sys/sda", "cp /dev/zero /proc/1/cwd/dev/sda",
        "cp /dev/zero /proc/self/cwd/../../dev/sda", "cd /dev; cp zero ~+/sda", "cd /dev; cd /tmp; cp zero ~-/sda",
        "cd ~root/../dev && cp zero sda", "OLDPWD=/dev; cd -; cp zero sda", "CDPATH=/ cd dev && cp zero sda",
        "cd /proc/1/root && cp /dev/zero dev/sda", "cd ~sys && cp zero sda",
        "sed -n 'w /dev/sda' f", "sed 's/a/b/gw /dev/sda' f", "awk 'BEGIN{print \"x\" > \"/dev/sda\"}'",
        "gawk -i inplace 1 /dev/sda", "vim -c 'w! /dev/sda' -c q", "ex -c 'w! /dev/sda' f", "ed -s /dev/sda <<< w",
        "script /dev/sda", "logsave /dev/sda ls", "dd_rescue /dev/zero /dev/sda", "bmaptool copy img /dev/sda",
        "sg_raw /dev/sg0 2a 00 00 00 00 00 00 00 01 00", "nvme admin-passthru /dev/nvme0",
        "nvme io-passthru /dev/nvme0n1", "nvme security-send /dev/nvme0", "nvme fw-activate /dev/nvme0",
        "nvme zns reset-zone /dev/nvme0n1", "hdparm --user-master u --security-set-pass p /dev/sda",
        "python3 -c 'open(\"/dev/sda\",\"wb\")'", "perl -e 'open(F,\">/dev/sda\")'", "perl -pi -e s/a/b/ /dev/sda",
        "tar xf x.tar -C /dev", "cd /dev && tar xf /tmp/x.tar", "unzip x.zip -d /dev",
    ],
)
def test_device_writes_by_other_names_and_programs_are_denied(default: PolicySet, command: str) -> None:
    assert default.decide("local", command).decision == "deny", default.decide("local", command).reason


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf ~sys", "rm -rf ~bin", "rm -rf ~daemon", "rm -rf ~sync", "rm -rf ~www-data", "rm -rf ~root",
        "rm -rf ~daemon/../../etc", "chmod -R 000 ~daemon", "chown -R nobody ~bin", "rm -rf $HOME/",
        "rm -rf ${HOME}/", 'rm -rf "$HOME/"', "rm -rf /[a-z]*", "rm -rf /?*", "rm -rf /**", "rm -rf /e?c",
        "cd / && rm -rf e*", "cd ~ && rm -rf *", "rm -rf *", "cd ~sys && rm -rf *", "rm -rf /proc/1/cwd/etc",
        "rsync -a --delete /tmp/empty/ /", "rsync -a --del /tmp/empty/ /etc/", "git -C / clean -fdx",
    ],
)
def test_recursive_deletes_of_system_directories_by_other_names_are_denied(default: PolicySet, command: str) -> None:
    assert default.decide("local", command).decision == "deny", default.decide("local", command).reason


@pytest.mark.parametrize(
    "command",
    ["rm -rf build", "rm -rf /tmp/build", "rm -rf ~alice/build", "find . -name '*.pyc' -delete",
     "rsync -a --delete /etc/ /backup/etc/", "cp x ~/notes"],
)
def test_their_neighbours_still_only_ask(default: PolicySet, command: str) -> None:
    assert default.decide("local", command).decision == "ask", default.decide("local", command).reason


@pytest.mark.parametrize(
    "command", ["grep -r x /dev", "grep -r x /var/log", "grep -D read x /etc/hostname", "ls -l ~sys/watchdog",
                "tree -L 2 /etc", "date +%s", "date -u", "head -c 16 /dev/urandom",
                "tr -dc a-z < /dev/urandom | head -c 8", "sleep 5 & wait", "for h in a b c; do sleep 1 & done; wait",
                "cat /dev/zero | head -c 4"],
)
def test_reads_that_stop_stay_allowed(default: PolicySet, command: str) -> None:
    assert default.decide("local", command).decision == "allow", default.decide("local", command).reason


@pytest.mark.parametrize(
    "command",
    [
        "date 010100002000", "date 0101000020", "date 12312359", "date -u 12312359.59",  # date(1) MMDDhhmm[[CC]YY][.ss]
        "tree -R -L 1 -H . /etc", "tree -RL1 /etc", "tree -R /",  # -R writes 00Tree.html into each directory
        "while :; do sleep 9999 & done", "until false; do sleep 999 & done", "for ((;;)); do sleep 999 & done",
        "seq 1000000 | while read i; do sleep 999 & done", "for i in {1..1000000}; do sleep 999 & done",
        "while :; do (sleep 999 &) ; done", "while :; do cat /dev/zero > /dev/null & done",
        "for f in $(ls); do sleep 9 & done", "sort /dev/zero", "echo $(cat /dev/zero)", "cat /dev/urandom | sort",
        "seq inf", "cat /dev/zero", "wc -c < /dev/zero",
    ],
)
def test_clock_sets_tree_writes_and_unbounded_processes_or_reads_ask(default: PolicySet, command: str) -> None:
    assert default.decide("local", command).decision == "ask", default.decide("local", command).reason
