#!/usr/bin/env bash
# The one definition of what is formatted and with which clang-format: `make format` runs
# `tools/format.sh fix` (rewrites the files in place); CI's format-clean row runs
# `tools/format.sh check` (changes nothing; names the files that are not formatted, exit 1).
# The files: the C, header and CUDA sources git tracks. Generated code is built into build/
# and never tracked, and nothing is vendored, so none is left out; what clang-format must not
# touch is fenced in the file itself (`// clang-format off: why` ... `// clang-format on`).
# The version: clang-format 19 (Debian 12's clang-format-19; `make deps` installs it). Another
# major version formats some constructs differently, so the check would fail on a clean tree:
# CLANG_FORMAT=... overrides the program, and the check then says which version it ran.
set -u
CLANG_FORMAT=${CLANG_FORMAT:-clang-format-19}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1

if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
    echo "format: $CLANG_FORMAT not found (make deps installs it)" >&2
    exit 1
fi
version=$("$CLANG_FORMAT" --version | head -n 1)
# Tracked files and new ones not yet added (but not ignored ones: build outputs): a new
# file is checked before its first commit, not after.
if ! files=$(git ls-files --cached --others --exclude-standard '*.c' '*.h' '*.cu' 2>/dev/null) ||
    [ -z "$files" ]; then
    echo "format: no files from git ls-files: run it in a git checkout of mpsshim" >&2
    exit 1
fi
mapfile -t FILES <<<"$files"

case ${1:-} in
fix)
    "$CLANG_FORMAT" -i "${FILES[@]}"
    ;;
check)
    # One clang-format per file, on the CPUs there are, so each unclean file is named once.
    bad=$(printf '%s\0' "${FILES[@]}" | xargs -0 -n 1 -P "$(nproc 2>/dev/null || echo 2)" \
        sh -c '"$0" --dry-run --Werror "$1" >/dev/null 2>&1 || echo "$1"' "$CLANG_FORMAT" | sort)
    if [ -z "$bad" ]; then
        echo "format: all ${#FILES[@]} files clean ($version)"
        exit 0
    fi
    n=$(echo "$bad" | wc -l)
    echo "format: $n of ${#FILES[@]} files not formatted ($version):"
    echo "$bad" | head -n 12 | sed 's/^/  /'
    [ "$n" -le 12 ] || echo "  ... and $((n - 12)) more"
    echo "format: run \`make format\` (it runs $CLANG_FORMAT; a different clang-format major version may format differently)"
    exit 1
    ;;
*)
    echo "usage: tools/format.sh fix|check" >&2
    exit 2
    ;;
esac
