#!/usr/bin/env bash
# Real systemd + sshd test hosts for tests/CI (see tests/hosts/README.md). Needs root.
#   .ci/hosts.sh up --count 2 | down | status | partition NAME | heal NAME | reboot NAME | build-base
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 -m tests.hosts.nspawn "$@"
