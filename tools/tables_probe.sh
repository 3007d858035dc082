#!/usr/bin/env bash
# Developer's probe for the GPU machine (issue 10, item 4): runs programs natively under
# tools/exptrace and keeps each one's use of the real driver's hidden tables in
# LOGDIR/trace-NAME.txt, then prints which tables and slots each asked for, and from where.
# Usage: tools/tables_probe.sh BUILD_DIR LOGDIR NAME=COMMAND...
set -u
B=$(cd "${1:-build}" && pwd)
LOGDIR=$2
shift 2
mkdir -p "$LOGDIR"
for spec in "$@"; do
    name=${spec%%=*}
    cmd=${spec#*=}
    EXPTRACE_MAX=${EXPTRACE_MAX:-4} LD_AUDIT=$B/tools/libexptrace.so timeout -k 5 300 \
        bash -c "$cmd" >"$LOGDIR/trace-$name.out" 2>"$LOGDIR/trace-$name.txt"
    echo "== $name: exit $?"
    grep -o 'cuGetExportTable [0-9a-f]* from [^ ]*' "$LOGDIR/trace-$name.txt" | sort | uniq -c
    grep -o '^exptrace: [0-9a-f]*\[[0-9]*\] call 1 from [^ ]*' "$LOGDIR/trace-$name.txt" |
        sed 's/ call 1//' | sort | uniq -c
done
