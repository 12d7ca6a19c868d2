#!/bin/sh
# Install the system programs the tests talk to as real peers, only where missing:
# Debian's sysstat (iostat), openssh-server (sshd on 127.0.0.1), tmux (TUI smoke test),
# systemd (systemd-analyze verify for contrib/'s unit file) and chromium (the HTML run report,
# rendered headless and screenshotted by tests/agent/core/test_runs.py) and faketime (libfaketime: the agent's
# clock stepped under a running agent, tests/faults/test_clock.py).
set -eu
need=""
command -v iostat >/dev/null 2>&1 || need="$need sysstat"
[ -x /usr/sbin/sshd ] || need="$need openssh-server"
command -v tmux >/dev/null 2>&1 || need="$need tmux"
command -v systemd-analyze >/dev/null 2>&1 || need="$need systemd"
command -v chromium >/dev/null 2>&1 || need="$need chromium"
command -v faketime >/dev/null 2>&1 || need="$need faketime"
if [ -n "$need" ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing Debian packages:$need"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # shellcheck disable=SC2086
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
fi
