#!/usr/bin/env bash
# `make install` into a temporary DESTDIR, then the installed pieces on their own (CI runs
# it as install-uninstall: bash tests/install.sh BUILD_DIR): the installed mpsshim-control -d
# starts the installed server and a client runs through the installed shim; a client with
# no server starts the installed server itself (the shim finds it in ../../bin, or ../bin
# for a shim in PREFIX/lib); the installed mpsshim-run preloads the installed shim; `make
# uninstall` leaves nothing. The man pages and the docs are installed and removed with the
# rest. Servers of its own, on the CPU test driver.
# Each check prints "ok NAME" or "FAIL NAME: what was seen"; exits 1 if any failed.
set -u
B=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d /tmp/mpsshim-install.XXXXXX)
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY MPSSHIM_SERVER MPSSHIM_AUTOSTART
FAILED=0
ok() { echo "ok $1"; }
bad() { echo "FAIL $1: $2"; FAILED=1; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "got [$2], want [$3]"; fi; }

D=$W/dest
P=/usr/local
I=$D$P
# The installed programs from here on (lib.sh's ctl and stop_server use CTL).
SHIM=$I/lib/mpsshim/libmpsshim.so
CTL=$I/bin/mpsshim-control

cleanup() {
    for d in "$W"/*/pipe; do MPSSHIM_PIPE_DIRECTORY=$d "$B/mpsshim-control" >/dev/null 2>&1 <<<quit; done
    [ "$FAILED" = 0 ] && rm -rf "$W"
}
trap cleanup EXIT

# served_by NAME OUT: OUT is a passing vecadd that the server ran (no fallback)
served_by() {
    if printf '%s\n' "$2" | grep -q '^PASS vecadd' && ! printf '%s\n' "$2" | grep -q 'running directly'; then
        ok "$1"
    else
        bad "$1" "$2"
    fi
}
# exe_of PID: the program PID runs
exe_of() { readlink "/proc/$1/exe"; }

make -C "$ROOT" --no-print-directory B="$B" PREFIX="$P" DESTDIR="$D" install >"$W/install.log" 2>&1 &&
    ok make-install || { bad make-install "$(tail -n 20 "$W/install.log")"; exit 1; }
check installed-files "$(cd "$D" && find . -type f | sort)" "$( (printf '%s\n' \
    ./usr/local/bin/mpsshim-control ./usr/local/bin/mpsshim-run ./usr/local/bin/mpsshim-server \
    ./usr/local/lib/mpsshim/libmpsshim.so ./usr/local/lib/mpsshim/slurm/common.sh \
    ./usr/local/lib/mpsshim/slurm/epilog ./usr/local/lib/mpsshim/slurm/prolog \
    ./usr/local/lib/mpsshim/slurm/task-prolog ./usr/local/lib/systemd/system/mpsshim@.service \
    ./usr/local/lib/systemd/user/mpsshim.service ./usr/local/share/doc/mpsshim/LICENSE \
    ./usr/local/share/doc/mpsshim/README.md ./usr/local/share/man/man1/mpsshim-control.1 \
    ./usr/local/share/man/man1/mpsshim-run.1 ./usr/local/share/man/man1/mpsshim-server.1
    cd "$ROOT" && for f in docs/*.md; do echo "./usr/local/share/doc/mpsshim/$f"; done) | sort)"
# The units run the installed programs (the only installed files that name PREFIX).
check units-execstart "$(grep -h '^ExecStart=' "$I"/lib/systemd/*/mpsshim*.service | sort -u)" \
    "ExecStart=$P/bin/mpsshim-control -f"
for p in mpsshim-server mpsshim-control mpsshim-run; do
    check "$p-installed-version" "$("$I/bin/$p" --version)" "$("$B/$p" --version)"
done
# The man pages: `man` finds each installed page and renders it without a warning, and each
# option and command the program's --help names is in its page (the page's source is
# docs/man/NAME.1.md, written by hand: this is what keeps it level with the program).
for p in mpsshim-server mpsshim-control mpsshim-run; do
    if command -v man >/dev/null; then
        page=$(MANPATH="$I/share/man" MANWIDTH=80 man --warnings "$p" 2>"$W/man-$p.err")
        if printf '%s\n' "$page" | grep -q "^NAME" && [ ! -s "$W/man-$p.err" ]; then
            ok "$p-man"
        else
            bad "$p-man" "$(head -n 5 "$W/man-$p.err")"
        fi
    fi
    missing=""
    # Options, command names (those with an underscore, and a word before its arguments).
    help=$("$I/bin/$p" --help)
    for w in $({ grep -oE '(^|[][ |(,])-{1,2}[a-z][a-z-]*|[a-z]+_[a-z_]+' <<<"$help"
        grep -oE '^  [a-z]+ \[' <<<"$help"; } | sed 's/^[][ |(,]*//; s/ \[$//' | sort -u); do
        grep -qE -- "(^|[^a-z_-])$w([^a-z_-]|\$)" "$ROOT/docs/man/$p.1.md" || missing="$missing $w"
    done
    check "$p-man-covers-help" "${missing# }" ""
done

# The installed mpsshim-control -d starts the installed server; a client through the
# installed shim is served by it.
use_dir "$W/daemon"
"$CTL" -d && ok installed-d || bad installed-d "mpsshim-control -d failed"
S=$(server_pid)
check installed-d-server "$(exe_of "$S")" "$I/bin/mpsshim-server"
out=$(MPSSHIM_AUTOSTART=0 shim "$B/tests/vecadd" 1000 2>&1)
served_by installed-shim-served "$out"
check installed-ctl-commands "$(ctl get_server_list)" "$S"
stop_server 30 && ok installed-quit || bad installed-quit "server $S still running"

# No server: the installed shim starts the installed server (../../bin from lib/mpsshim).
use_dir "$W/auto"
out=$(shim "$B/tests/vecadd" 1000 2>&1)
served_by installed-autostart-served "$out"
S=$(server_pid)
check installed-autostart-server "$(exe_of "$S")" "$I/bin/mpsshim-server"
# The installed mpsshim-run preloads the installed shim, and its client is served.
check installed-run-preload "$("$I/bin/mpsshim-run" -- sh -c 'echo "$LD_PRELOAD"' 2>&1)" "$SHIM"
out=$("$I/bin/mpsshim-run" -- "$B/tests/vecadd" 1000 2>&1)
served_by installed-run-served "$out"
stop_server 30 || bad installed-autostart-quit "server $S still running"

# A shim in PREFIX/lib finds the server in ../bin.
mkdir -p "$W/flat/lib" "$W/flat/bin"
cp "$B/libmpsshim.so" "$W/flat/lib/"
cp "$B/mpsshim-server" "$W/flat/bin/"
use_dir "$W/flat"
out=$(env LD_PRELOAD="$W/flat/lib/libmpsshim.so" "$B/tests/vecadd" 1000 2>&1)
served_by lib-bin-autostart-served "$out"
check lib-bin-autostart-server "$(exe_of "$(server_pid)")" "$W/flat/bin/mpsshim-server"
stop_server 30 || bad lib-bin-quit "server still running"

# No server anywhere near the shim: said, and the client runs on the driver.
mkdir -p "$W/alone"
cp "$B/libmpsshim.so" "$W/alone/"
use_dir "$W/alone"
out=$(env LD_PRELOAD="$W/alone/libmpsshim.so" "$B/tests/vecadd" 1000 2>&1)
printf '%s\n' "$out" | grep -q "no mpsshim-server at $W/alone/mpsshim-server, nor in ../../bin or ../bin" &&
    printf '%s\n' "$out" | grep -q '^PASS vecadd' && ok no-server-near-shim || bad no-server-near-shim "$out"

make -C "$ROOT" --no-print-directory B="$B" PREFIX="$P" DESTDIR="$D" uninstall >"$W/uninstall.log" 2>&1 &&
    ok make-uninstall || bad make-uninstall "$(tail -n 20 "$W/uninstall.log")"
check uninstalled "$(cd "$D" && find . -type f)" ""
check uninstalled-dirs "$(cd "$D" && find . -depth -type d -path '*mpsshim*' -o -depth -type d -path '*systemd*')" ""

[ "$FAILED" = 0 ] && echo "install: all passed" || echo "install: FAILED (files in $W)"
exit "$FAILED"
