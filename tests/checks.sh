# shellcheck shell=bash
# Shared by tests/control.sh and tests/control_hostile.sh (sourced after tests/lib.sh, with
# W, their scratch directory, set): checks that print "ok NAME" or "FAIL NAME: what was
# seen" (FAILED becomes 1), clients started in the background, and the cleanup at exit that
# ends them and every server under W (W goes too when nothing failed).
FAILED=0
PIDS=()

ok() { echo "ok $1"; }
bad() { echo "FAIL $1: $2"; FAILED=1; }
# check NAME GOT WANT: exact comparison of a command's answer
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "got [$2], want [$3]"; fi; }
# has NAME TEXT EREGEX: some line of TEXT matches
has() { if printf '%s\n' "$2" | grep -Eq -- "$3"; then ok "$1"; else bad "$1" "no line matching /$3/ in [$2]"; fi; }
# until_true CMD...: polls CMD for up to 30 s
until_true() { wait_for 30 "$@"; }
# spawn VAR LOG [NAME=VALUE...] CMD...: CMD through the shim, in the background with the
# variables given, its output in LOG; VAR is its pid (the client's own: env execs it), which
# cleanup ends.
spawn() {
    local var=$1 log=$2
    shift 2
    env LD_PRELOAD="$SHIM" "$@" >"$log" 2>&1 &
    printf -v "$var" %s "$!"
    PIDS+=("$!")
}

cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for d in "$W"/*/pipe; do MPSSHIM_PIPE_DIRECTORY=$d "$CTL" >/dev/null 2>&1 <<<quit; done
    [ "$FAILED" = 0 ] && rm -rf "$W"
}
trap cleanup EXIT
