#!/bin/sh
# The long fuzzing run of the file loaders, by hand (CI runs 20 s of it in
# the clang build and a seeded driver in every build; see tests/meson.build).
#
#   scripts/fuzz_long.sh [TARGET...]
#
# Builds tests/fuzz_loaders.c as a libFuzzer target with clang, ASan and
# UBSan (build-fuzz/; but see FUZZ_SANITIZE), then runs each loader in turn
# for FUZZ_RUNS executions (default 10,000,000): every file argument of the
# nctmc tool —
# safetensors (the container), model (nctmc_model_load), dataset (shards),
# tokenizer (tokenizer files), trainer (nctmc_trainer_inspect and
# nctmc_trainer_resume, a step, a save that must resume again), digits
# (the tool's digits.txt parser), jsonl (its JSON Lines extractor), hf_json
# (Hugging Face tokenizer.json) and bpe (a BPE tokenizer file). TARGETs pick
# some; default all nine.
#
# Environment:
#   FUZZ_RUNS=N        executions per loader (default 10000000)
#   FUZZ_SECONDS=S     also stop a loader after S seconds (default: no limit)
#   FUZZ_JOBS=J        loaders run at once (default 1)
#   FUZZ_WORKERS=W     libFuzzer processes per loader (default 1), sharing
#                      its corpus (each picks up the others' new inputs) and
#                      running FUZZ_RUNS/W executions each; the loader's
#                      line sums them. For one slow loader on several cores
#   FUZZ_SANITIZE=S    the sanitizers, as meson's b_sanitize (default
#                      address,undefined, in build-fuzz/). Any other value
#                      builds a release target in build-fuzz-S/ (commas as
#                      dashes): "undefined" is UBSan without ASan, about 1.5
#                      times as fast, for a loader (trainer) that ASan makes
#                      too slow for 10M executions in the time there is
# Inputs are written to a scratch directory in /dev/shm when it exists (the
# loaders take paths). Each loader keeps its corpus in build-fuzz/corpus/,
# so a later run continues from it; a crash leaves its input as
# build-fuzz/crash-* and the script exits non-zero. The executions reached
# go to build-fuzz/fuzz-long-results.txt (one line per loader); with
# FUZZ_SANITIZE, read build-fuzz-S/ for build-fuzz/ throughout.
#
# The last result is in docs/formats.md ("Fuzzing the loaders").
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
runs=${FUZZ_RUNS:-10000000}
seconds=${FUZZ_SECONDS:-0}
jobs=${FUZZ_JOBS:-1}
workers=${FUZZ_WORKERS:-1}
targets=${*:-safetensors model dataset tokenizer trainer digits jsonl hf_json bpe}

sanitize=${FUZZ_SANITIZE:-address,undefined}
build=build-fuzz buildtype=debugoptimized
if [ "$sanitize" != address,undefined ]; then
    build=build-fuzz-$(echo "$sanitize" | tr , -) buildtype=release
fi

if [ -d "$build" ]; then
    meson setup --reconfigure "$build" >/dev/null
else
    CC=clang meson setup "$build" -Dfuzzing=true -Dcuda=disabled -Dreference_tests=disabled \
        -Db_sanitize="$sanitize" -Dbuildtype=$buildtype -Db_lundef=false >/dev/null
fi
ninja -C "$build" tests/fuzz_loaders_libfuzzer
fuzzer="$root/$build/tests/fuzz_loaders_libfuzzer"
scratch_base=/tmp
[ -d /dev/shm ] && [ -w /dev/shm ] && scratch_base=/dev/shm
results="$root/$build/fuzz-long-results.txt"
: >"$results"

fuzz_worker() { # target log runs
    FUZZ_LOADERS_TARGET=$1 TMPDIR=$scratch_base \
    ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "$fuzzer" -runs="$3" $limit -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 \
        -artifact_prefix="$build/crash-$1-" "$build/corpus/$1" >"$2" 2>&1
}

run_one() { # target
    t=$1
    mkdir -p "$build/corpus/$t" "$build/logs"
    limit=""
    [ "$seconds" -gt 0 ] && limit="-max_total_time=$seconds"
    start=$(date +%s)
    status=0
    if [ "$workers" -le 1 ]; then
        fuzz_worker "$t" "$build/logs/$t.log" "$runs" || status=$?
        logs="$build/logs/$t.log"
    else
        wpids="" logs=""
        w=1
        while [ "$w" -le "$workers" ]; do
            fuzz_worker "$t" "$build/logs/$t.$w.log" $(((runs + workers - 1) / workers)) &
            wpids="$wpids $!" logs="$logs $build/logs/$t.$w.log"
            w=$((w + 1))
        done
        for pid in $wpids; do
            wait "$pid" || status=$?
        done
    fi
    done_runs=0
    for log in $logs; do
        n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        done_runs=$((done_runs + ${n:-0}))
    done
    echo "$t: $done_runs executions in $(($(date +%s) - start)) s ($workers process(es)), exit $status" |
        tee -a "$results"
    return "$status"
}

failed=0
pids=""
for t in $targets; do
    run_one "$t" &
    pids="$pids $!"
    set -- $pids
    if [ "$#" -ge "$jobs" ]; then
        for pid in $pids; do
            wait "$pid" || failed=1
        done
        pids=""
    fi
done
for pid in $pids; do
    wait "$pid" || failed=1
done
[ "$failed" -eq 0 ] || echo "fuzz_long: a loader failed; see $build/logs/ and $build/crash-*" >&2
exit "$failed"
