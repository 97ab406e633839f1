#!/bin/sh
# The nctmc tool's command line: --help of every subcommand succeeds and
# prints its usage on stdout; unknown flags, missing or bad values and
# unknown commands exit with status 2 and print the usage on stderr.
#
#   test_usage.sh PATH/TO/nctmc
set -u
nctmc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

# expect STATUS STREAM TEXT -- ARGS...: runs nctmc ARGS, checks its exit
# status and that TEXT occurs in STREAM (out or err)
expect() {
    want_status=$1 stream=$2 text=$3
    shift 4
    "$nctmc" "$@" >"$tmp/out" 2>"$tmp/err"
    status=$?
    if [ "$status" -eq "$want_status" ] && grep -q -- "$text" "$tmp/$stream"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL: nctmc $* -> status $status (want $want_status), '$text' not in std$stream?"
        sed 's/^/  | /' "$tmp/err" | head -5
    fi
}

for cmd in prepare train sample eval info; do
    expect 0 out "usage: nctmc $cmd" -- "$cmd" --help
    expect 0 out "usage: nctmc $cmd" -- "$cmd" -h
    expect 2 err "unknown flag '--no-such-flag'" -- "$cmd" --no-such-flag
    expect 2 err "usage: nctmc $cmd" -- "$cmd" --no-such-flag=3
done
expect 0 out "usage: nctmc COMMAND" -- --help
expect 0 out "nctmc " -- --version
expect 2 err "unknown command" -- frobnicate
expect 2 err "usage: nctmc COMMAND" --
expect 2 err "needs a value" -- train --data
expect 2 err "bad value 'many'" -- train --data d --steps many
expect 2 err "bad value '0'" -- train --data d --layers 0
expect 2 err "one of uniform, masked, mixture" -- train --data d --process gaussian
expect 2 err "--data DIR is required" -- train
expect 2 err "missing argument" -- sample
expect 2 err "unexpected argument" -- info a.safetensors b.safetensors
expect 2 err "either --data DIR or --shard FILE" -- eval model.safetensors
expect 2 err "no input files" -- prepare --out "$tmp/data"
expect 2 err "takes no value" -- sample m.safetensors --no-denoise=1
expect 2 err "cannot be combined" -- sample m.safetensors --infill "a__" --prefix x
expect 2 err "--t-min must be below" -- sample m.safetensors --t-min 0.5 --t-max 0.4
# a file that is not there is a runtime error (1), not a usage error
expect 1 err "prepare: cannot open" -- prepare --out "$tmp/data" "$tmp/missing.txt"

echo "cli_usage: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
