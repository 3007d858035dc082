#!/usr/bin/env bash
# A client must not be able to kill the server through the memory it registered (issue 34,
# S1). cuMemHostRegister moves the pages into a memfd that the server maps too; a stream wait
# on them is ended, when the client leaves, by a store of the server's into those pages (the
# CPU test driver also polls the word from the server's process). Had the client shrunk the
# memfd to 0 first, that load or store is SIGBUS: the server and every client gone.
# Here, on a server of its own: tests/unit/rawclient shrink (raw protocol: shared memory that
# can shrink, an unsealed memfd, one sealed against growing only, a file on tmpfs, is taken
# and guarded, and is shrunk to nothing under a wait; a file on disk is refused; a memfd
# sealed against shrinking is taken and cannot be shrunk; each taken one gets a hole punched
# and is left with a wait on it: the server's store ending the wait must not kill it),
# then tests/progs/hostreg_shrink through the shim (its memfd cannot be shrunk; a hole, then
# SIGKILL with the wait pending). After each, the same server process must have released the
# client and serve a bystander (tests/vecadd).
#   tests/hostreg_shrink.sh BUILD WORKDIR
set -u
B=$(cd "$1" && pwd)
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
own_server "$2/hostreg-shrink"

# still_serving WHAT: the server $S lives, has let every client go, and serves vecadd; a
# dead server ends the test (nothing later would run against it).
settled() { gone "$S" || no_clients 2>/dev/null; }
still_serving() {
    wait_for 20 settled
    if gone "$S"; then
        echo "FAIL: after $1: the server ($S) died:"
        grep -a 'died' "$W/log/server.log" | tail -n 1
        exit 1
    fi
    no_clients || fail "after $1: the server did not let the client go"
    [ "$(server_pid)" = "$S" ] || fail "after $1: another server took over"
    shim "$B/tests/vecadd" 100000 >"$W/bystander.out" 2>&1 ||
        fail "after $1: a bystander failed: $(tail -n 1 "$W/bystander.out")"
}

"$B/tests/unit/rawclient" shrink >"$W/raw.out" 2>&1 || fail "rawclient shrink"
cat "$W/raw.out"
still_serving "a raw client's registrations"
shim "$B/tests/hostreg_shrink" >"$W/shim.out" 2>&1
cat "$W/shim.out"
grep -q "cannot be shrunk" "$W/shim.out" || fail "hostreg_shrink: $(tail -n 1 "$W/shim.out")"
still_serving "a shim client's registration"
grep "Client process .*cuMemHostRegister" "$W/log/server.log"
if ! stop_server 10; then
    fail "the server did not quit"
    kill -9 "$S" 2>/dev/null
fi
[ $rc = 0 ] && echo "PASS the server survived clients that shrink or punch their registered memory"
exit $rc
