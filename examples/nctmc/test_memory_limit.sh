#!/bin/sh
# The nctmc tool under an address-space limit (ulimit -v; issue 10 item 8):
# every subcommand ends, either done or with an "out of ..." error, and never
# hangs. Before the fix, OpenBLAS's thread server (started when the library
# loads) retried its 128 MiB buffer forever, so even `nctmc --version` hung
# at exit, and a product on a pool thread spun the same way. A generous limit
# must still let training and sampling work.
#
#   test_memory_limit.sh PATH/TO/nctmc PATH/TO/digits.txt
set -u
nctmc=$1
digits=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

# run LIMIT_KB WANT ARGS...: nctmc ARGS under `ulimit -v LIMIT_KB`; WANT is
# "ok" (must succeed) or "any" (success, or status 1 saying "out of").
# A run still going after 60 s is killed and counts as a hang.
run() {
    limit=$1 want=$2
    shift 2
    (ulimit -v "$limit" && exec timeout -s KILL 60 "$nctmc" "$@") >"$tmp/out" 2>"$tmp/err"
    status=$?
    if [ "$status" -eq 0 ]; then
        verdict=ok
    elif [ "$status" -eq 1 ] && grep -q "out of" "$tmp/err" && [ "$want" = any ]; then
        verdict=ok
    else
        verdict=bad
    fi
    if [ "$verdict" = ok ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL: ulimit -v $limit: nctmc $* -> status $status (137 = killed: a hang)"
        sed 's/^/  | /' "$tmp/err" | tail -3
    fi
}

# a small model to sample from, made without a limit
"$nctmc" prepare --digits "$digits" --out "$tmp/digits" >/dev/null 2>&1 || {
    echo "FAIL: prepare"; exit 1; }
train_args="--data $tmp/digits --layers 1 --d-model 64 --heads 2 --cond-dim 32 --batch 16
    --steps 3 --eval-every 0 --eval-sequences 16"
# shellcheck disable=SC2086
"$nctmc" train $train_args --out "$tmp/m.safetensors" >/dev/null 2>&1 || {
    echo "FAIL: train without a limit"; exit 1; }

for blas_threads in unset 2; do
    if [ "$blas_threads" = unset ]; then
        unset OPENBLAS_NUM_THREADS
    else
        export OPENBLAS_NUM_THREADS=$blas_threads
    fi
    # 50 and 70 MB (issue 37, item 3): OpenBLAS's load-time constructor used
    # to raise SIGINT (status 130) there before main(), when it could not
    # start its server thread; the tool now loads it on one CPU
    # (examples/nctmc/blas_threads.c). Below about 45 MB the dynamic loader
    # itself cannot map libopenblas (status 127, its own message).
    for limit in 50000 70000 100000 150000 250000 400000 600000 900000; do
        run "$limit" ok --version
        run "$limit" any info "$tmp/m.safetensors"
        for threads in 1 2; do
            # shellcheck disable=SC2086
            run "$limit" any train $train_args --threads $threads --out "$tmp/t.safetensors"
            run "$limit" any sample "$tmp/m.safetensors" --n 2 --steps 4 --threads $threads \
                --no-preview --out "$tmp/s.txt"
        done
    done
    # room to spare: everything works under a limit
    # shellcheck disable=SC2086
    run 2000000 ok train $train_args --threads 2 --out "$tmp/t.safetensors"
    run 2000000 ok sample "$tmp/m.safetensors" --n 2 --steps 4 --threads 2 --no-preview \
        --out "$tmp/s.txt"
done

echo "cli_memory_limit: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
