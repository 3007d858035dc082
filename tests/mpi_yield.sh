#!/usr/bin/env bash
# MPI ranks that yield while they poll (interpose/mpiyield.c): a process started as an MPI
# rank (Open MPI's OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, PMI's PMI_RANK) gets
# OMPI_MCA_mpi_yield_when_idle=1 in its environment before main, through the shim; a value
# the user set is kept; MPSSHIM_MPI_YIELD=0 leaves it unset; a process that is no rank is
# left alone. No server, no GPU: the shim's constructor alone.
#   tests/mpi_yield.sh BUILD
set -u
B=$(cd "$1" && pwd)
SHIM=$B/libmpsshim.so
rc=0
# case WANT VAR=VAL...: what printenv says of the variable through the shim with VAR=VAL.
case_is() {
    local want=$1 got
    shift
    got=$(env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_RANK -u OMPI_MCA_mpi_yield_when_idle \
        -u MPSSHIM_MPI_YIELD "$@" LD_PRELOAD="$SHIM" printenv OMPI_MCA_mpi_yield_when_idle)
    if [ "$got" = "$want" ]; then
        echo "ok: ${*:-(no rank variables)} -> '${got}'"
    else
        echo "FAIL: ${*:-(no rank variables)}: OMPI_MCA_mpi_yield_when_idle is '$got', want '$want'"
        rc=1
    fi
}
case_is 1 OMPI_COMM_WORLD_SIZE=4
case_is 1 PMIX_RANK=0
case_is 1 PMI_RANK=3
case_is 0 OMPI_COMM_WORLD_SIZE=4 OMPI_MCA_mpi_yield_when_idle=0
case_is "" OMPI_COMM_WORLD_SIZE=4 MPSSHIM_MPI_YIELD=0
case_is ""
# Loaded late, into a process with threads running (as the CUDA runtime may open the shim as
# libcuda.so.1 after MPI_Init started MPI's threads): nothing set (setenv beside another
# thread's getenv is not safe, and the variable would come too late anyway).
late=$(env -u OMPI_MCA_mpi_yield_when_idle OMPI_COMM_WORLD_SIZE=4 python3 -c '
import ctypes, sys, threading, time
t = threading.Thread(target=time.sleep, args=(2,)); t.start()
ctypes.CDLL(sys.argv[1])
libc = ctypes.CDLL(None); libc.getenv.restype = ctypes.c_char_p
v = libc.getenv(b"OMPI_MCA_mpi_yield_when_idle"); print(v.decode() if v else "")
t.join()' "$SHIM" 2>&1)
if [ -z "$late" ]; then
    echo "ok: loaded after a thread started -> ''"
else
    echo "FAIL: loaded after a thread started: '$late'"
    rc=1
fi
# Without the shim nothing is set (the variable comes from the shim, not from the test).
got=$(env -u OMPI_MCA_mpi_yield_when_idle OMPI_COMM_WORLD_SIZE=4 printenv OMPI_MCA_mpi_yield_when_idle)
[ -z "$got" ] || { echo "FAIL: set without the shim: '$got'"; rc=1; }
[ $rc = 0 ] && echo "PASS MPI ranks yield while they poll, unless told otherwise"
exit $rc
