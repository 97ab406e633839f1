#!/bin/sh
# scripts/static_archive.sh LD OBJCOPY AR INPUT.a OUTPUT.a WORKDIR
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
input=$4
output=$5
work=$6

mkdir -p "$work"
combined="$work/nctmc_static.o"
rm -f "$combined" "$output"
"$ld" -r -o "$combined" --whole-archive "$input" --no-whole-archive
"$objcopy" --localize-hidden "$combined"
"$ar" rcs "$output" "$combined"
