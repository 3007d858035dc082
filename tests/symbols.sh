#!/usr/bin/env bash
# The shim exports exactly the symbols cuda_symbols.txt lists (every class but `absent`),
# nothing more: checked against the built library with nm.
set -eu
lib=$1
symbols=$2
want=$(grep -v '^\s*#' "$symbols" | grep -v '^%' | awk 'NF >= 2 && $2 != "absent" {print $1}' | sort)
have=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
missing=$(comm -23 <(echo "$want") <(echo "$have"))
extra=$(comm -13 <(echo "$want") <(echo "$have"))
[ -z "$missing" ] || { echo "not exported:"; echo "$missing"; }
[ -z "$extra" ] || { echo "exported but not in cuda_symbols.txt:"; echo "$extra"; }
echo "$(echo "$have" | wc -l) symbols exported"
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
[ "$soname" = libcuda.so.1 ] || { echo "SONAME is $soname"; exit 1; }
[ -z "$missing" ] && [ -z "$extra" ]
