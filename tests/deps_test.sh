#!/usr/bin/env bash
# tests/deps.sh against stand-ins for apt-get and sudo (which log their calls): nothing
# missing, no apt-get at all; a missing library (a compiler that cannot find ffi.h), only
# its package asked for; apt-get failing, its words shown and exit 1. CI runs it as deps-check.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d /tmp/mpsshim-deps.XXXXXX)
FAILED=0
ok() { echo "ok $1"; }
bad() { echo "FAIL $1: $2"; FAILED=1; }

mkdir -p "$W/bin"
cat >"$W/bin/apt-get" <<'STUB'
#!/bin/sh
echo "apt-get $*" >>"$APT_LOG"
[ "$APT_FAIL" = 1 ] || exit 0
echo "E: Unable to locate package $3" >&2
exit 100
STUB
printf '#!/bin/sh\necho "sudo $*" >>"$APT_LOG"\nexec "$@"\n' >"$W/bin/sudo"
# A compiler that finds everything but ffi.h (it reads the program from stdin, as deps.sh
# gives it).
printf '#!/bin/sh\nsrc=$(cat)\ncase "$src" in *ffi.h*) exit 1 ;; esac\nprintf "%%s\\n" "$src" | exec cc "$@"\n' \
    >"$W/bin/cc-noffi"
chmod +x "$W/bin/"*
export PATH=$W/bin:$PATH APT_LOG=$W/apt.log

out=$(APT_FAIL=0 sh "$ROOT/tests/deps.sh" 2>&1)
rc=$?
[ $rc = 0 ] && ok nothing-missing-exit || bad nothing-missing-exit "exit $rc: $out"
[ ! -e "$APT_LOG" ] && ok nothing-missing-no-apt || bad nothing-missing-no-apt "$(cat "$APT_LOG")"

rm -f "$APT_LOG"
out=$(CC=$W/bin/cc-noffi APT_FAIL=0 sh "$ROOT/tests/deps.sh" 2>&1)
rc=$?
[ $rc = 1 ] && ok still-missing-exit || bad still-missing-exit "exit $rc: $out"
grep -q "^apt-get install -y libffi-dev$" "$APT_LOG" && ok only-missing-asked ||
    bad only-missing-asked "$(cat "$APT_LOG" 2>/dev/null)"
grep -v "libffi-dev\|^sudo" "$APT_LOG" | grep -q . && bad nothing-else-asked "$(cat "$APT_LOG")" ||
    ok nothing-else-asked
echo "$out" | grep -q "still missing after installing: libffi" && ok still-missing-said ||
    bad still-missing-said "$out"

rm -f "$APT_LOG"
out=$(CC=$W/bin/cc-noffi APT_FAIL=1 sh "$ROOT/tests/deps.sh" 2>&1)
rc=$?
[ $rc = 1 ] && ok apt-fails-exit || bad apt-fails-exit "exit $rc: $out"
echo "$out" | grep -q "could not install libffi-dev; apt-get said:" && ok apt-fails-said ||
    bad apt-fails-said "$out"
echo "$out" | grep -q "E: Unable to locate package libffi-dev" && ok apt-output-shown ||
    bad apt-output-shown "$out"
grep -q "^apt-get update$" "$APT_LOG" && ok apt-update-tried || bad apt-update-tried "$(cat "$APT_LOG")"

[ "$FAILED" = 0 ] && rm -rf "$W" && echo "deps: all passed" || echo "deps: FAILED (files in $W)"
exit "$FAILED"
