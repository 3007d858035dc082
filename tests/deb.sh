#!/usr/bin/env bash
# The Debian package (debian/; CI runs it as deb-package: bash tests/deb.sh BUILD_DIR):
# dpkg-buildpackage -us -uc -b in a temporary copy of the tree, the .deb unpacked into a
# temporary root (dpkg -x), its files as `make install PREFIX=/usr` lays them out, and its
# programs run from there: --version, and the demo (demo/run.sh) with the package's server,
# control program and shim on the CPU test driver. Lintian's findings, where lintian is
# installed, must be those debian/README lists. Skips (77) without dpkg-buildpackage or dh.
# Each check prints "ok NAME" or "FAIL NAME: what was seen"; exits 1 if any failed.
set -u
B=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
command -v dpkg-buildpackage >/dev/null && command -v dh >/dev/null ||
    { echo "SKIP: dpkg-buildpackage or debhelper missing (make test installs them)"; exit 77; }
W=$(mktemp -d /tmp/mpsshim-deb.XXXXXX)
FAILED=0
ok() { echo "ok $1"; }
bad() { echo "FAIL $1: $2"; FAILED=1; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "got [$2], want [$3]"; fi; }
trap '[ "$FAILED" = 0 ] && rm -rf "$W"' EXIT

# The copy: the working tree as it is, without its build outputs and .git. It is seeded
# with this build's objects and generated code (times kept, so make finds them current):
# this row checks the packaging, in seconds rather than the minutes of a build from
# scratch on CI's two CPUs; the link and install steps run for real.
T=$W/mpsshim
mkdir -p "$T/debian/build"
tar -C "$ROOT" --exclude=./.git --exclude=./build --exclude="./${B#"$ROOT"/}" \
    --exclude=./debian/build -cf - . | tar -C "$T" -xf -
cp -a "$B/obj" "$B/gen" "$T/debian/build/"
# -nc: no `debian/rules clean` first, which would remove the seed.
(cd "$T" && dpkg-buildpackage -us -uc -b -nc) >"$W/build.log" 2>&1 &&
    ok dpkg-buildpackage || { bad dpkg-buildpackage "$(tail -n 30 "$W/build.log")"; exit 1; }
DEB=$(ls "$W"/mpsshim_*_amd64.deb 2>/dev/null | head -n 1)
[ -n "$DEB" ] && ok deb-built || { bad deb-built "no mpsshim_*_amd64.deb in $W"; exit 1; }

R=$W/root
dpkg -x "$DEB" "$R" && ok dpkg-x || bad dpkg-x "dpkg -x $DEB failed"
for f in usr/bin/mpsshim-control usr/bin/mpsshim-server usr/bin/mpsshim-run \
    usr/lib/mpsshim/libmpsshim.so usr/lib/mpsshim/slurm/prolog usr/lib/mpsshim/slurm/epilog \
    usr/lib/mpsshim/slurm/task-prolog usr/lib/systemd/system/mpsshim@.service \
    usr/lib/systemd/user/mpsshim.service usr/share/man/man1/mpsshim-control.1.gz \
    usr/share/man/man1/mpsshim-server.1.gz usr/share/man/man1/mpsshim-run.1.gz \
    usr/share/doc/mpsshim/README.md usr/share/doc/mpsshim/docs/operations.md \
    usr/share/doc/mpsshim/copyright; do
    [ -e "$R/$f" ] || missing="${missing:-} $f"
done
check deb-files "${missing:-}" ""
check deb-units-execstart "$(grep -h '^ExecStart=' "$R"/usr/lib/systemd/*/mpsshim*.service | sort -u)" \
    "ExecStart=/usr/bin/mpsshim-control -f"
zcat "$R/usr/share/man/man1/mpsshim-control.1.gz" | grep -q '/usr/share/doc/mpsshim/docs/reference.md' &&
    ok deb-man-docdir || bad deb-man-docdir "the page does not name /usr/share/doc/mpsshim"
check deb-version "$("$R/usr/bin/mpsshim-control" --version | cut -d' ' -f1-2)" \
    "mpsshim-control $(cat "$ROOT/VERSION")"

# The demo, with the package's programs and shim in place of the build's: demo/run.sh takes
# a build directory, so it gets one whose programs are the package's (the control program
# starts the server beside its real path, the package's).
F=$W/demo-build
mkdir -p "$F"
ln -s "$R/usr/bin/mpsshim-control" "$R/usr/bin/mpsshim-server" "$F/"
ln -s "$R/usr/lib/mpsshim/libmpsshim.so" "$F/"
ln -s "$B/demo" "$B/cpudrv" "$B/tests" "$F/"
timeout 60 bash "$ROOT/demo/run.sh" "$F" >"$W/demo.log" 2>&1 </dev/null &&
    grep -q 'all results correct' "$W/demo.log" && ok deb-demo || bad deb-demo "$(tail -n 15 "$W/demo.log")"

# Lintian, where installed (CI does not install it: it is large): its findings are the
# ones debian/README lists and accepts, no other.
if command -v lintian >/dev/null; then
    tags=$(lintian "$DEB" 2>&1 | awk '/^[EWX]: / {print $3}' | sort -u)
    unlisted=$(for t in $tags; do grep -qw -- "$t" "$ROOT/debian/README" || echo "$t"; done)
    check lintian-findings-listed "$(echo $unlisted)" ""
fi

[ "$FAILED" = 0 ] && echo "deb: all passed" || echo "deb: FAILED (files in $W)"
exit "$FAILED"
