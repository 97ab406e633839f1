#!/bin/sh
# A C program using libnctmc (examples/nctmc/limit_client.c, no
# OPENBLAS_NUM_THREADS) under `ulimit -v` from 50 MB to 2 GB: each run exits
# 0, or 1 with the library's message, never a signal or a hang (issue 37
# item 3). Before the library loaded OpenBLAS itself
# (backends/cpu/cpu_blas.c), OpenBLAS's load-time constructor raised SIGINT
# at 50 MB (status 130) and its server threads hung the program at exit at
# 100-150 MB. Each run is killed after 60 s (status 137: a hang).
#
#   test_limit_client.sh PATH/TO/limit_client
set -u
client=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset OPENBLAS_NUM_THREADS
passed=0
failed=0
for limit in 50000 70000 100000 150000 200000 250000 300000 400000 600000 900000 \
             1400000 2000000; do
    (ulimit -v "$limit" && exec timeout -s KILL 60 "$client") >"$tmp/out" 2>"$tmp/err"
    status=$?
    if [ "$status" -eq 0 ] || { [ "$status" -eq 1 ] && grep -q "limit_client: " "$tmp/err"; }; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL: ulimit -v $limit: limit_client -> status $status (130 = SIGINT, 137 = hang)"
        sed 's/^/  | /' "$tmp/err" | tail -3
    fi
done
# room to spare: the context is made
(ulimit -v 2000000 && exec timeout -s KILL 60 "$client") >/dev/null 2>"$tmp/err" || {
    failed=$((failed + 1)); echo "FAIL: no context under 2 GB"; sed 's/^/  | /' "$tmp/err"; }
echo "limit_client sweep: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
