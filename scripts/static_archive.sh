#!/bin/sh
# scripts/static_archive.sh LD OBJCOPY AR INPUT.a [MORE.a...] OUTPUT.a WORKDIR
#
# Makes the installed static library from the library's internal archive
# (meson.build runs it): every member is combined into one relocatable object
# (ld -r), whose hidden symbols (the library is compiled with hidden
# visibility; only NCTMC_API functions are default) are then made local
# (objcopy --localize-hidden), and that one object is archived. The archive
# then defines only nctmc_* globally, so its internal names (file_read_all,
# json_*, cpu_*, ...) cannot collide with a host program's own.
set -eu
ld=$1
objcopy=$2
ar=$3
shift 3
# the archives, then the output and the work folder
n=$#
output=$(eval echo "\${$((n - 1))}")
work=$(eval echo "\${$n}")
inputs=""
i=1
while [ $i -le $((n - 2)) ]; do
    inputs="$inputs $(eval echo "\${$i}")"
    i=$((i + 1))
done

mkdir -p "$work"
combined="$work/nctmc_static.o"
rm -f "$combined" "$output"
# shellcheck disable=SC2086
"$ld" -r -o "$combined" --whole-archive $inputs --no-whole-archive
"$objcopy" --localize-hidden "$combined"
"$ar" rcs "$output" "$combined"
