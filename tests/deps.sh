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
[ -z "$need" ] && exit 0
echo "mpsshim: installing$need"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y $need >/dev/null 2>&1 || {
    $sudo apt-get update >/dev/null && $sudo apt-get install -y $need >/dev/null
}
