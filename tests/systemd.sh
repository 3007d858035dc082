#!/usr/bin/env bash
# The systemd units of ops/systemd as `make install` writes them, checked with
# `systemd-analyze verify` (system unit as an instance for root, user unit with a runtime
# directory of its own): syntax, settings, ExecStart executables, the man pages they name.
# Nothing is started (CI has no systemd running). bash tests/systemd.sh BUILD_DIR; exits 77
# when systemd-analyze is missing.
set -u
B=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
command -v systemd-analyze >/dev/null || { echo "SKIP: no systemd-analyze (apt-get install systemd)"; exit 77; }
W=$(mktemp -d /tmp/mpsshim-systemd.XXXXXX)
trap 'rm -rf "$W"' EXIT
# PREFIX is the temporary tree itself, so that ExecStart names files that exist.
make -C "$ROOT" --no-print-directory B="$B" PREFIX="$W/p" install >"$W/install.log" 2>&1 ||
    { cat "$W/install.log"; echo "FAIL: make install"; exit 1; }
cp "$W/p/lib/systemd/system/mpsshim@.service" "$W/mpsshim@root.service"
# verify runs `man` for the units' man: documentation: the pages installed with them.
export MANPATH=$W/p/share/man
rc=0
systemd-analyze verify "$W/mpsshim@root.service" || { echo "FAIL: system unit"; rc=1; }
mkdir -m 700 "$W/xdg"
XDG_RUNTIME_DIR=$W/xdg systemd-analyze --user verify "$W/p/lib/systemd/user/mpsshim.service" ||
    { echo "FAIL: user unit"; rc=1; }
[ $rc = 0 ] && echo "systemd units: verified"
exit $rc
