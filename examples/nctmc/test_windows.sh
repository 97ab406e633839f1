#!/bin/sh
# The nctmc tool built for Windows, under Wine (scripts/windows.sh step 5):
# prepare the digits, train a tiny model for a few steps (saving it), sample
# it into a file, info; then the output directory of prepare replaced whole
# on a system without an atomic directory swap (cli_platform_win32.c): a
# second prepare over the first, an old directory left aside by a prepare
# killed after its second rename (removed), and one left aside by a prepare
# killed between its two renames (put back first, so the user's file in it
# survives). Kept small: every command starts a Wine process.
#
#   test_windows.sh PATH/TO/nctmc(-wrapped.sh) PATH/TO/digits.txt
set -u
nctmc=$1
digits=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

ok() { passed=$((passed + 1)); }
bad() {
    failed=$((failed + 1))
    echo "FAIL: $*"
}

# run NAME ARGS...: runs nctmc, keeping stdout/stderr (without Windows'
# carriage returns) in $tmp/NAME.out/.err
run() {
    name=$1
    shift
    "$nctmc" "$@" >"$tmp/$name.rawout" 2>"$tmp/$name.rawerr"
    rc=$?
    tr -d '\r' <"$tmp/$name.rawout" >"$tmp/$name.out"
    tr -d '\r' <"$tmp/$name.rawerr" >"$tmp/$name.err"
    if [ $rc -eq 0 ]; then
        ok
    else
        bad "nctmc $* (status $rc)"
        sed 's/^/  | /' "$tmp/$name.err" | tail -15
    fi
}

has() {
    if grep -q -- "$2" "$tmp/$1"; then ok; else bad "'$2' not in $1"; sed 's/^/  | /' "$tmp/$1" | tail -8; fi
}

# nothing but D itself beside D: no staging or old directory left
alone() {
    left=$(cd "$tmp" && ls -d "$1".* 2>/dev/null)
    if [ -z "$left" ]; then ok; else bad "left beside $1: $left"; fi
}

cp "$digits" "$tmp/digits.txt"
run prepare prepare --digits "$tmp/digits.txt" --out "$tmp/d"
for f in train.bin val.bin tokenizer.txt manifest.txt; do
    [ -s "$tmp/d/$f" ] && ok || bad "prepare wrote no $f"
done
has prepare.out "sequences of 64 tokens, labelled"
alone d

run train train --data "$tmp/d" --out "$tmp/m.safetensors" --layers 1 --d-model 32 --heads 2 \
    --cond-dim 16 --threads 2 --batch 8 --steps 4 --warmup 1 --lr 1e-3 --eval-every 4 \
    --eval-sequences 8 --eval-time-samples 2 --log-every 2
has train.err "finished at step 4 of 4"
has train.err "10 classes"
[ -s "$tmp/m.safetensors" ] && ok || bad "train saved no model"

run sample sample "$tmp/m.safetensors" --per-class 1 --steps 4 --threads 2 --seed 7 \
    --out "$tmp/s.txt"
has sample.err "sampled 10 sequences of 64 tokens"
[ "$(tr -d '\r' <"$tmp/s.txt" | grep -c .)" -ge 10 ] && ok || bad "s.txt: fewer than 10 lines"

run info info "$tmp/m.safetensors"
has info.out "10 classes"
has info.out "training     step 4 of 4"

# a second prepare replaces the first directory whole
cp "$tmp/d/train.bin" "$tmp/train.first"
run again prepare --digits "$tmp/digits.txt" --out "$tmp/d" --val-fraction 0.2
cmp -s "$tmp/d/train.bin" "$tmp/train.first" && bad "the second prepare left the old train.bin" || ok
alone d

# killed after its second rename: the old directory aside, the new in place
mkdir "$tmp/d.old-AbC123"
cp "$tmp/d/train.bin" "$tmp/d/tokenizer.txt" "$tmp/d.old-AbC123/"
run after prepare --digits "$tmp/digits.txt" --out "$tmp/d"
alone d

# killed between its two renames: no d, the old one aside holding a file of
# the user's (prepare never removes those); put back, then replaced, and
# the user's file is kept where the note says
rm -rf "$tmp/d"
mkdir "$tmp/d.old-XyZ789"
echo mine >"$tmp/d.old-XyZ789/notes.txt"
run between prepare --digits "$tmp/digits.txt" --out "$tmp/d"
has between.err "held files prepare did not write"
[ -s "$tmp/d/train.bin" ] && ok || bad "no d/train.bin after recovery"
kept=$(cd "$tmp" && ls d.old-*/notes.txt 2>/dev/null)
[ -n "$kept" ] && ok || bad "the user's notes.txt was not kept"

echo "windows cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
