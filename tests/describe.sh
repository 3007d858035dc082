#!/usr/bin/env bash
# `make describe NAME=...` for one call of each kind: each output has its parts (the row,
# the prototype, what the generator derives, the generated lines), a twin names its base,
# and a name the table does not list is refused with a message.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
fail=0
# Not the jobs or variables of a `make test` this may run under.
unset MAKEFLAGS MFLAGS MAKELEVEL
describe() { make -s --no-print-directory -C "$ROOT" describe NAME="$1" 2>&1; }

# expect NAME PATTERN...: make describe NAME succeeds and prints every PATTERN (grep -E).
expect() {
    local name=$1 out p
    shift
    if ! out=$(describe "$name"); then
        echo "FAIL $name: make describe failed"; echo "$out"; fail=1; return
    fi
    for p in "$@"; do
        if ! grep -qE -- "$p" <<<"$out"; then
            echo "FAIL $name: no line matching '$p'"; echo "$out"; fail=1; return
        fi
    done
    echo "ok $name"
}

parts=('^-- cuda_symbols.txt' '^-- cuda.h' '^-- derived by gen/gen.py' '^-- generated')
expect cuMemAlloc_v2 "^== cuMemAlloc_v2: sync" "${parts[@]}" '^[0-9]+: cuMemAlloc_v2 +sync' \
    '^param 0 .*CUdeviceptr \* dptr' 'SHIM_P_RANGE' 'SHIM_GENERIC\(cuMemAlloc_v2,' \
    'SHIM_CALL\(cuMemAlloc_v2, SHIM_SYNC' '^[0-9]+: %range device'
expect cuEventRecord "^== cuEventRecord: async" "${parts[@]}" '^stream +hStream' \
    'SHIM_CALL\(cuEventRecord, SHIM_ASYNC' '^client hook +interpose/[a-z_]+\.c:[0-9]+' \
    '^[0-9]+: cuEventRecord_ptsz +twin'
expect cuLaunchKernel "^== cuLaunchKernel: manual" "${parts[@]}" \
    'SHIM_ENTRY\(cuLaunchKernel,' 'shim_impl_cuLaunchKernel' \
    '^client implementation +interpose/[a-z_]+\.c:[0-9]+'
expect cuMemcpyHtoD_v2 "^== cuMemcpyHtoD_v2: copy" "${parts[@]}" \
    '^[0-9]+: cuMemcpyHtoD_v2 +copy +dst:dstDevice\[device\] src:srcHost\[host\] bytes:ByteCount' \
    '^copy +shim_copy\(shim_copy_host\(srcHost\), shim_copy_device\(dstDevice\), ByteCount, NULL, 0\)' \
    'SHIM_COPY_ENTRY\(cuMemcpyHtoD_v2,' 'shim_impl_cuMemcpyHtoD_v2' \
    'SHIM_CALL_NOPARAMS\(cuMemcpyHtoD_v2, SHIM_COPY' '^copy engine +interpose/memcpy\.c:[0-9]+'
expect cuMemcpyHtoD_v2_ptds "^== cuMemcpyHtoD_v2_ptds: twin of cuMemcpyHtoD_v2 \(copy\)" \
    "${parts[@]}" '^twin of +cuMemcpyHtoD_v2' 'make describe NAME=cuMemcpyHtoD_v2' \
    'SHIM_CALL_TWIN\(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2, SHIM_CF_PTDS\)'
expect cuMemAdvise "^== cuMemAdvise: local" "${parts[@]}" 'SHIM_ENTRY\(cuMemAdvise,' \
    '^client implementation +interpose/managed\.c:[0-9]+' '^its row says +interpose/managed\.c'
expect cuCtxAttach "^== cuCtxAttach: unsupported" 'CUDA_ERROR_NOT_SUPPORTED' \
    'SHIM_UNSUPPORTED\(cuCtxAttach,'
expect CHAN_OP_COPY "^== CHAN_OP_COPY: hand-written operation copy" '^-- cuda_symbols.txt' \
    '^[0-9]+: %op COPY ' 'wrong size +len < sizeof\(struct chan_copy\) -> protocol error' \
    '^srv_ops.def: \[CHAN_OP_COPY - CHAN_OP_BASE\] = \{srv_op_copy,' \
    '^handler +server/([a-z]+/)?copy\.c:[0-9]+'

# Every %op row names the file that defines its handler: custom:FAMILY.FN, FN in
# server/FAMILY.c (or server/*/FAMILY.c).
while read -r _ name custom _; do
    fam=${custom#custom:}
    fn=${fam#*.}
    fam=${fam%%.*}
    if grep -rlE "^void $fn\(" "$ROOT/server" | grep -qE "/server/([a-z]+/)?$fam\.c$"; then
        echo "ok %op $name in $fam.c"
    else
        echo "FAIL %op $name: $fn is not defined in server/$fam.c"; fail=1
    fi
done < <(grep '^%op ' "$ROOT/cuda_symbols.txt")

# refused SED PATTERN: the generator refuses cuda_symbols.txt edited by SED, with a message
# matching PATTERN (grep -E) that names the row: what a copy row's notes must say.
refused() {
    local tmp out
    tmp=$(mktemp -d)
    sed -E "$1" "$ROOT/cuda_symbols.txt" >"$tmp/cuda_symbols.txt"
    if out=$(python3 "$ROOT/gen/describe.py" --cuda-include "${CUDA:-/usr/local/cuda}/include" \
        --symbols "$tmp/cuda_symbols.txt" --procaddr "$ROOT/gen/data/procaddress-580.159.04.tsv" \
        --cc "${CC:-cc}" cuMemcpyHtoD_v2 2>&1); then
        echo "FAIL refused '$1': the generator took it"; fail=1
    elif ! grep -qE -- "$2" <<<"$out"; then
        echo "FAIL refused '$1': no message matching '$2'"; echo "$out"; fail=1
    else
        echo "ok refused '$1'"
    fi
    rm -rf "$tmp"
}
refused 's/(^cuMemcpyHtoD_v2 +copy +)dst:dstDevice\[device\]/\1dst:dstDevice[host]/' \
    'cuMemcpyHtoD_v2: dst: dstDevice is CUdeviceptr, not a host pointer'
refused 's/(^cuMemcpyHtoD_v2 +copy .*) bytes:ByteCount/\1/' \
    'cuMemcpyHtoD_v2: parameters the row does not name: ByteCount'
refused 's/(^cuMemcpyPeer +copy +)dst:dstDevice\[peer\+dstContext\]/\1dst:dstDevice[device] bytes:dstContext/' \
    'cuMemcpyPeer: (bytes: dstContext is CUcontext|parameter .* named twice)'
refused 's/(^cuMemcpy3D_v2 +copy +struct:pCopy)/\1[unaligned]/' \
    'cuMemcpy3D_v2: struct:pCopy\[unaligned\] is for a CUDA_MEMCPY2D'

# Every local or manual row that names its file (impl:FILE) has its SHIM_IMPL there.
while read -r name _ impl _; do
    fam=${impl#impl:}
    if grep -qE "^CUresult SHIM_IMPL\($name\)\(" "$ROOT/interpose/$fam.c" 2>/dev/null; then
        echo "ok $name in interpose/$fam.c"
    else
        echo "FAIL $name: SHIM_IMPL($name) is not defined in interpose/$fam.c"; fail=1
    fi
done < <(grep -E '^[a-zA-Z_0-9]+ +(local|manual) +impl:' "$ROOT/cuda_symbols.txt")

if out=$(describe cuMemAloc); then
    echo "FAIL cuMemAloc: make describe succeeded for a name the table does not list"; fail=1
elif ! grep -q "^cuMemAloc: not in cuda_symbols.txt.*did you mean cuMemAlloc" <<<"$out"; then
    echo "FAIL cuMemAloc: no message naming it"; echo "$out"; fail=1
else
    echo "ok cuMemAloc (refused)"
fi
exit $fail
