#!/bin/sh
# Installs the build's system dependencies when they are missing (Debian/Ubuntu).
set -e
CUDA=${CUDA:-/usr/local/cuda}
if [ ! -f "$CUDA/include/cuda.h" ] || [ ! -x "$CUDA/bin/nvcc" ]; then
    echo "mpsshim: the CUDA toolkit (cuda.h and nvcc) is needed in $CUDA" >&2
    exit 1
fi
need=""
[ -f /usr/include/uthash.h ] || need="$need uthash-dev"
ls /usr/include/ffi.h /usr/include/*-linux-gnu/ffi.h >/dev/null 2>&1 || need="$need libffi-dev"
command -v python3 >/dev/null 2>&1 || need="$need python3"
command -v gcc >/dev/null 2>&1 || need="$need gcc"
command -v clang >/dev/null 2>&1 || need="$need clang" # the fuzz targets (tests/fuzz)
# libFuzzer's runtime comes apart from clang on Debian: libclang-rt-<version>-dev.
fuzzer_rt() {
    command -v clang >/dev/null 2>&1 &&
        [ -f "$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)" ]
}
if command -v clang >/dev/null 2>&1 && ! fuzzer_rt; then
    need="$need libclang-rt-$(clang --version | sed -n 's/.*version \([0-9]*\).*/\1/p' | head -n 1)-dev"
fi
[ -z "$need" ] && exit 0
echo "mpsshim: installing$need"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y $need >/dev/null 2>&1 || {
    $sudo apt-get update >/dev/null && $sudo apt-get install -y $need >/dev/null
}
# clang installed just now: its fuzzer runtime may still be missing.
if ! fuzzer_rt && command -v clang >/dev/null 2>&1; then
    rt="libclang-rt-$(clang --version | sed -n 's/.*version \([0-9]*\).*/\1/p' | head -n 1)-dev"
    echo "mpsshim: installing $rt"
    $sudo apt-get install -y "$rt" >/dev/null 2>&1 || true
fi
