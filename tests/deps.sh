#!/bin/sh
# Installs the build's system dependencies when they are missing (Debian/Ubuntu), and
# nothing else: when everything is there it neither asks for sudo nor runs apt-get.
# Headers and libraries are checked the way the build finds them: by compiling (and
# linking) a one-line program with the compiler the build uses. When apt-get fails, what it
# said is shown and the exit status is 1.
set -e
CUDA=${CUDA:-/usr/local/cuda}
CC=${CC:-cc}
if [ ! -f "$CUDA/include/cuda.h" ] || [ ! -x "$CUDA/bin/nvcc" ]; then
    echo "mpsshim: the CUDA toolkit (cuda.h and nvcc) is needed in $CUDA" >&2
    exit 1
fi
have() { command -v "$1" >/dev/null 2>&1; }

# compiles PROGRAM [LINK FLAGS...]: the program builds (and links) with $CC.
compiles() {
    src=$1
    shift
    printf '%s\n' "$src" | "$CC" -x c -o /dev/null - "$@" >/dev/null 2>&1
}

uthash_ok() { compiles '#include <uthash.h>
int main(void) { return 0; }'; }
ffi_ok() { compiles '#include <ffi.h>
int main(void) { return ffi_prep_cif == 0; }' -lffi; }

# libFuzzer's runtime comes apart from clang on Debian: libclang-rt-<version>-dev.
fuzzer_rt() {
    have clang && [ -f "$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)" ]
}
fuzzer_rt_package() {
    echo "libclang-rt-$(clang --version | sed -n 's/.*version \([0-9]*\).*/\1/p' | head -n 1)-dev"
}

# install PACKAGE...: apt-get install, after an update if the first try fails; on failure
# shows apt-get's output and exits 1.
install() {
    echo "mpsshim: installing $*"
    sudo=""
    if [ "$(id -u)" != 0 ]; then
        if ! have sudo; then
            echo "mpsshim: not root and no sudo: install $* yourself" >&2
            exit 1
        fi
        sudo="sudo"
    fi
    out=$(mktemp)
    export DEBIAN_FRONTEND=noninteractive
    if $sudo apt-get install -y "$@" >"$out" 2>&1 ||
        { $sudo apt-get update >>"$out" 2>&1 && $sudo apt-get install -y "$@" >>"$out" 2>&1; }; then
        rm -f "$out"
        return 0
    fi
    echo "mpsshim: could not install $*; apt-get said:" >&2
    cat "$out" >&2
    rm -f "$out"
    exit 1
}

# 1. Programs (the compiler first: the checks below need it).
need=""
have "$CC" || need="$need gcc"
have python3 || need="$need python3"
have clang || need="$need clang" # the fuzz targets (tests/fuzz)
have clang-format-19 || need="$need clang-format-19" # make format, CI's format-clean (tools/format.sh)
[ -z "$need" ] || install $need

# 2. Headers and libraries, as the build sees them.
need=""
uthash_ok || need="$need uthash-dev"
ffi_ok || need="$need libffi-dev"
fuzzer_rt || need="$need $(fuzzer_rt_package)"
[ -z "$need" ] || install $need

# 3. What an install did not bring is said, not left for the build to find.
missing=""
uthash_ok || missing="$missing uthash.h"
ffi_ok || missing="$missing libffi"
fuzzer_rt || missing="$missing libclang_rt.fuzzer"
if [ -n "$missing" ]; then
    echo "mpsshim: still missing after installing:$missing (compiler: $CC)" >&2
    exit 1
fi

# 4. For `make test` only (`sh tests/deps.sh test`): debhelper, with which CI's deb-package
# row builds the Debian package (debian/). Only that row needs it: a user who cannot install
# it (not root, no sudo) is told, and that row skips.
if [ "${1:-}" = test ] && ! have dh; then
    if [ "$(id -u)" = 0 ] || have sudo; then
        (install debhelper) || echo "mpsshim: no debhelper: the deb-package test will skip" >&2
    else
        echo "mpsshim: not root and no sudo: no debhelper, the deb-package test will skip" >&2
    fi
fi
