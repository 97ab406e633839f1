#!/bin/sh
# backends/cuda/device_check.sh — every GPU check of the CUDA backend in one
# call of at most DEVICE_CHECK_BUDGET seconds (default 560: the device tool
# runs one command for at most 600 s, and a session has 15 minutes of device
# time with the machine's start), most urgent first:
#   (a) conformance of what no GPU has verified yet: test_cuda_conformance
#       (every operation, the whole model, the samplers, the 0.7.0 denoiser
#       link rows, activation recomputation), the NCCL module on one rank,
#       then this round's programs (the `tests` list below; a program this
#       tree lacks is skipped with a line saying so);
#   (b) the paper-small benchmark of libnctmc (batch 16 in TF32 and bf16
#       with sampling and the row kernels, bf16 at batch 64), PyTorch on the
#       same GPU (eager SDPA at batch 16, torch.compile at batch 16 and 64,
#       each in its own process), the comparison table; then the same
#       libnctmc benchmark with each new switch on (the `switches` list),
#       each compared with the same PyTorch logs, and CUDA graphs against
#       eager launches (bench_gpu_train --graphs 1).
# Every step has its own timeout (and none runs past the budget: a step
# that would is cut to what is left, a step with under 15 s left is skipped),
# writes its log to $OUT/NAME.log, and gets a line in the summary table
# printed at the end ($OUT/summary.txt). The exit status is 1 when a
# conformance step (or, with --curves, a training) failed, timed out or
# found no time left, else 77 when the conformance test found no device
# (it skipped), else 0.
#
#   sh backends/cuda/device_check.sh             on the GPU machine
#   sh backends/cuda/device_check.sh --dry-run   anywhere: the plan, each
#       step's timeout and expected time, and the budget; runs nothing
#   sh backends/cuda/device_check.sh --quick     conformance (a) only
#   sh backends/cuda/device_check.sh --prepare   on a machine with the CUDA
#       toolkit but no GPU: builds the programs into build-device-cuda/
#       with libnctmc's core linked in statically, the CUDA module
#       libnctmc-cuda.so beside them, where the core looks for it (the folder
#       of the program that holds it), and this machine's OpenBLAS (which the
#       CPU backend opens at run time; the GPU image may lack it) in lib/, to
#       be carried to the GPU machine (device tool: carry
#       ["build-device-cuda"]; at most 64 MiB, checked). The programs link no
#       CUDA library; the module links CUDA's, found through
#       LD_LIBRARY_PATH below, as is the carried OpenBLAS when the GPU
#       machine has none.
#   sh backends/cuda/device_check.sh --curves    item 6 of issue 38, a
#       session of its own (it does not fit beside (a) and (b)): the text
#       model at the paper-small shape on the fortunes corpus with a BPE,
#       uniform (the recommended recipe: the library's defaults) and masked,
#       at three budgets, by scripts/text_model_gpu.sh (carry
#       ["build-device-text"], made by --prepare-curves; the checkpoints stay
#       on the GPU machine, the samples and NELBO files come back in
#       $OUT/curves-STEPS/; each checkpoint sampled at 64 steps and
#       temperatures 0.7, 0.85, 1). Score them here afterwards with
#       `sh scripts/text_model_gpu.sh --score OUT/curves-STEPS` (with the
#       judge's perplexity at matched unigram entropy).
#   sh backends/cuda/device_check.sh --prepare-curves   = scripts/text_model_gpu.sh
#       --prepare (corpus, BPE, prepared data, the nctmc tool and module)
#   sh backends/cuda/device_check.sh --synthetic   item 6's second half, a
#       session of its own: the quality benchmark's synthetic sources
#       (bench/quality/bench_quality.py, the Python binding; python3 and
#       numpy on the GPU machine) at widths the CPU cannot train, d 512 and
#       d 768 (carry ["build-device-synth"], made by --prepare-synthetic:
#       libnctmc.so.1, libnctmc-cuda.so, OpenBLAS); JSON and table in
#       $OUT/synthetic/. --dry-run-synthetic prints the plan.
#
# Results go to $OUT (the device tool's folder) or /tmp/nctmc-device-check.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/nctmc-device-check}
mode=${1:-run}
carried=${NCTMC_CARRY_DIR:-$root/build-device-cuda}
budget=${DEVICE_CHECK_BUDGET:-560}

# ---- what runs: one word or line per program or switch ---------------------------
# Conformance programs after test_cuda_conformance, in the order they run
# (each a C file of the tests folder, built only with CUDA); each developer
# adds one word.
tests="test_cuda_graphs test_cuda_sample_fast test_cuda_loss_fused test_cuda_fused test_cuda_bf16_logits"
# Benchmark runs with a new switch on: NAME:VARIABLE=VALUE (the backend reads
# the variable at creation); each developer adds one line.
switches=""   # (graphs: the bench_graphs_eager_vs_graph step)
switches="$switches fused:NCTMC_CUDA_FUSED=1"
# (NCTMC_CUDA_LCOND=split and NCTMC_CUDA_LCOND_LINK=fused are timed alone,
# beside the kernels they replace, by the bench_lcond_kernels step)

# A conformance program's timeout and expected time (seconds); a program
# that needs other limits than the default gets a line here.
test_limits() {
    case "$1" in
    test_cuda_conformance) echo "240 40" ;;
    test_cuda_graphs) echo "150 40" ;;
    test_cuda_fused) echo "180 60" ;;
    test_cuda_bf16_logits) echo "120 15" ;;
    *) echo "120 30" ;;
    esac
}

mkdir -p "$out"
. "$root/backends/cuda/cuda_libdirs.sh"

# ---- --prepare ------------------------------------------------------------------
# The object folder of program $1 in build $2 (tests/NAME.p or bench/NAME.p).
objects_of() {
    for d in "$2/tests/$1.p" "$2/bench/$1.p"; do
        [ -d "$d" ] && { echo "$d"; return 0; }
    done
    return 1
}

# This machine's OpenBLAS and what it needs, into folder $1.
copy_openblas() {
    mkdir -p "$1"
    for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
        path=$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')
        if [ -z "$path" ] || ! cp -L "$path" "$1/$lib"; then
            echo "device_check: --prepare: no $lib on this machine"
            return 1
        fi
    done
}

# Adds folder $1 (a carried OpenBLAS) to LD_LIBRARY_PATH when this machine
# has no OpenBLAS of its own.
use_carried_openblas() {
    if [ -d "$1" ] && ! ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so\.0 '; then
        LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$1
        export LD_LIBRARY_PATH
    fi
}

if [ "$mode" = "--prepare" ]; then
    b="$carried/meson"
    rm -rf "$carried"
    mkdir -p "$carried"
    log="$carried/prepare.log"
    meson setup "$b" "$root" -Dcuda=enabled -Dreference_tests=disabled >"$log" 2>&1 &&
        ninja -C "$b" tests/test_cuda_conformance bench/bench_gpu_train libnctmc-cuda.so \
            >>"$log" 2>&1 || { tail -n 30 "$log"; exit 1; }
    progs="test_cuda_conformance bench_gpu_train"
    for t in $tests; do
        if [ ! -f "$root/tests/$t.c" ]; then
            echo "device_check: --prepare: no tests/$t.c in this tree: skipped"
        elif ninja -C "$b" "tests/$t" >>"$log" 2>&1; then
            progs="$progs $t"
        else
            tail -n 30 "$log"
            echo "device_check: --prepare: tests/$t.c does not build"
            exit 1
        fi
    done
    if ninja -C "$b" tests/test_nccl_module libnctmc-nccl.so >>"$log" 2>&1; then
        progs="$progs test_nccl_module"
        cp "$b/libnctmc-nccl.so" "$carried/" &&
            strip --strip-unneeded "$carried/libnctmc-nccl.so" || exit 1
    else
        echo "device_check: --prepare: no NCCL in this build: test_nccl_module skipped"
    fi
    for prog in $progs; do
        objs=$(objects_of "$prog" "$b") || { echo "device_check: no objects of $prog"; exit 1; }
        cc -o "$carried/$prog" "$objs/"*.o "$b/libnctmc_internal.a" -lpthread -lm -ldl ||
            exit 1
        strip "$carried/$prog"
    done
    # the CPU backend (the conformance tests' reference) opens
    # libopenblas.so.0 at run time
    copy_openblas "$carried/lib" || exit 1
    cp "$b/libnctmc-cuda.so" "$carried/" && strip --strip-unneeded "$carried/libnctmc-cuda.so" ||
        exit 1
    rm -rf "$b"
    ls -la "$carried"
    bytes=$(du -sb "$carried" | cut -f1)
    echo "device_check: --prepare: $progs; $bytes bytes to carry (limit 67108864)"
    [ "$bytes" -le 67108864 ] || { echo "device_check: over the device tool's 64 MiB"; exit 1; }
    exit 0
fi

text_carried=${NCTMC_TEXT_CARRY_DIR:-$root/build-device-text}
if [ "$mode" = "--prepare-curves" ]; then
    NCTMC_CARRY_DIR=$text_carried sh "$root/scripts/text_model_gpu.sh" --prepare &&
        copy_openblas "$text_carried/lib" || exit 1
    bytes=$(du -sb "$text_carried" | cut -f1)
    echo "device_check: --prepare-curves: $bytes bytes to carry (limit 67108864)"
    [ "$bytes" -le 67108864 ] || { echo "device_check: over the device tool's 64 MiB"; exit 1; }
    exit 0
fi

synth_carried=${NCTMC_SYNTH_CARRY_DIR:-$root/build-device-synth}
if [ "$mode" = "--prepare-synthetic" ]; then
    b="$synth_carried/meson"
    rm -rf "$synth_carried"
    mkdir -p "$synth_carried"
    log="$synth_carried/prepare.log"
    meson setup "$b" "$root" -Dcuda=enabled -Dreference_tests=disabled >"$log" 2>&1 &&
        ninja -C "$b" libnctmc.so.1 libnctmc-cuda.so >>"$log" 2>&1 || { tail -n 30 "$log"; exit 1; }
    # the module beside the library, where the core looks for it
    cp -L "$b/libnctmc.so.1" "$b/libnctmc-cuda.so" "$synth_carried/" &&
        strip --strip-unneeded "$synth_carried/libnctmc.so.1" "$synth_carried/libnctmc-cuda.so" &&
        copy_openblas "$synth_carried/lib" || exit 1
    rm -rf "$b"
    ls -la "$synth_carried"
    bytes=$(du -sb "$synth_carried" | cut -f1)
    echo "device_check: --prepare-synthetic: $bytes bytes to carry (limit 67108864)"
    [ "$bytes" -le 67108864 ] || { echo "device_check: over the device tool's 64 MiB"; exit 1; }
    exit 0
fi

# ---- steps ----------------------------------------------------------------------
dry=false
[ "$mode" = "--dry-run" ] && dry=true
start=$(date +%s)
deadline=$((start + budget))
summary="$out/summary.tsv"
: >"$summary"
planned_limit=0
planned_expect=0
failed=0

# step NAME TIMEOUT EXPECTED KIND COMMAND...: runs COMMAND with its output in
# $OUT/NAME.log under min(TIMEOUT, what the budget has left); a failure of a
# step whose KIND is not "bench" (conformance, curves) is the script's. In
# --dry-run: prints the plan.
step() {
    name=$1 limit=$2 expect=$3 kind=$4
    shift 4
    if $dry; then
        planned_limit=$((planned_limit + limit))
        planned_expect=$((planned_expect + expect))
        printf '%-28s timeout %4ss  expected %4ss  (total %4ss / %4ss)  %s\n' "$name" "$limit" \
            "$expect" "$planned_expect" "$planned_limit" "$*"
        return 0
    fi
    now=$(date +%s)
    left=$((deadline - now))
    if [ "$left" -lt 15 ]; then
        printf '%s\t%s\t%s\t%s\n' "$name" "skipped: budget spent" 0 "$limit" >>"$summary"
        echo "device_check: $name skipped: the budget is spent"
        [ "$kind" != bench ] && failed=1
        return 0
    fi
    # what is left, less the 10 s that timeout -k grants before its kill
    [ "$limit" -gt $((left - 12)) ] && limit=$((left - 12))
    echo "device_check: $name (timeout ${limit}s)"
    timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    took=$(($(date +%s) - now))
    case $rc in
    0) result=ok ;;
    77) result="$(grep -m1 -o 'skipped.*' "$out/$name.log" | cut -c1-60)" ;;
    124 | 137) result="TIMEOUT after ${limit}s" ;;
    *) result="FAILED (exit $rc)" ;;
    esac
    case $result in ok | skipped*) ;; *) [ "$kind" != bench ] && failed=1 ;; esac
    printf '%s\t%s\t%s\t%s\n' "$name" "$result" "$took" "$limit" >>"$summary"
    tail -n 5 "$out/$name.log"
    echo "device_check: $name: $result in ${took}s"
}

# A line in the summary for a step that could not run.
not_run() {
    printf '%s\t%s\t0\t0\n' "$1" "$2" >>"$summary"
    echo "device_check: $1: $2"
}

print_summary() {
    {
        printf '%-28s %-60s %6s %7s\n' step result "took s" "limit s"
        while IFS="$(printf '\t')" read -r n r t l; do
            printf '%-28s %-60.60s %6s %7s\n' "$n" "$r" "$t" "$l"
        done <"$summary"
        echo "total: $(($(date +%s) - start)) s of a budget of $budget s"
    } | tee "$out/summary.txt"
}

# ---- --curves (item 6): a session of its own --------------------------------------
if [ "$mode" = "--curves" ] || [ "$mode" = "--dry-run-curves" ]; then
    [ "$mode" = "--dry-run-curves" ] && dry=true
    use_carried_openblas "$text_carried/lib"
    # docs/performance.md: the paper-small bf16 train step at batch 64 on the
    # H200 took 169.49 ms; text_model_gpu.sh trains at batch 64. Per process
    # and budget a further 20 s for start and the 2 GB checkpoint (an
    # estimate), the held-out NELBO (4.0-4.7 s measured on the H200,
    # research/results/bench/text-gpu-h200-2026-11-26/run.log) and one
    # `nctmc sample` call per temperature, 5 s each (64 samples at 64 steps:
    # 5.1 s measured there, tool start and checkpoint load included). Each
    # checkpoint is sampled at 64 steps only (the 16-step row is dropped to
    # pay for the temperatures), 32 samples, at temperatures 0.7, 0.85 and 1
    # for the judge's perplexity at matched unigram entropy
    # (bench/text_quality.py score).
    temps=${CURVES_TEMPERATURES:-0.7,0.85,1}
    n_temps=$(echo "$temps" | tr ',' '\n' | wc -l)
    for steps in ${CURVES_STEPS:-120 240 480}; do
        train_s=$((steps * 170 / 1000))
        cap_min=$(((train_s + 59) / 60 + 1))
        expect=$((2 * (train_s + 20 + 5 * n_temps)))
        limit=$((expect * 3 / 2 + 30))
        step "curves-$steps" "$limit" "$expect" curves \
            env OUT="$out/curves-$steps" NCTMC_CARRY_DIR="$text_carried" \
            TEXT_GPU_STEPS="$steps" TEXT_GPU_MINUTES="$cap_min" \
            TEXT_GPU_WARMUP=$((steps / 10)) TEXT_GPU_SAMPLES=32 TEXT_GPU_SAMPLE_STEPS=64 \
            TEXT_GPU_TEMPERATURES="$temps" TEXT_GPU_METHOD=auto \
            sh "$root/scripts/text_model_gpu.sh"
    done
    if $dry; then
        echo "plan: expected ${planned_expect}s, at most ${planned_limit}s; budget ${budget}s"
        exit 0
    fi
    print_summary
    exit "$failed"
fi

# ---- --synthetic (item 6): the quality benchmark's sources at GPU widths ----------
# bench/quality/bench_quality.py through the Python binding (python3 and
# numpy on the GPU machine; the library, its CUDA module and OpenBLAS carried
# in build-device-synth/, made by --prepare-synthetic): both sources, uniform
# (the library's defaults, the recommended recipe) and masked, at the "gpu"
# budget (d 512, 8 layers) and brackets again at "gpu_wide" (d 768, 12
# layers), 2000 steps of batch 128 each, like the CPU's budget. Each run's
# JSON goes to $OUT/synthetic/; the table to $OUT/synthetic/table.md.
# Expected times are estimates, not measurements (no GPU has run these
# shapes): 2000 steps at ~12 ms (d 512) or ~20 ms (d 768) a step, launch-bound
# like the 6.7 ms a step of 6 layers d 256 (issue 38), plus ~25 s for the
# source reference, the held-out NELBO and the samples; each training is
# capped (--max-train-seconds) at twice its estimate so that a slow run still
# writes its JSON. SYNTHETIC_BACKEND (cuda) and SYNTHETIC_ARGS (more options,
# e.g. "--budget smoke" for a CPU check), SYNTHETIC_PYTHON (python3) and
# NCTMC_SYNTH_LIBRARY (the carried libnctmc.so.1, else build/'s) override.
if [ "$mode" = "--synthetic" ] || [ "$mode" = "--dry-run-synthetic" ]; then
    [ "$mode" = "--dry-run-synthetic" ] && dry=true
    lib=${NCTMC_SYNTH_LIBRARY:-$synth_carried/libnctmc.so.1}
    py=${SYNTHETIC_PYTHON:-python3}
    [ -f "$lib" ] || lib="$root/build/libnctmc.so.1"
    if ! $dry; then
        [ -f "$lib" ] || { echo "device_check: no $lib (run --prepare-synthetic)"; exit 1; }
        LD_LIBRARY_PATH=$(cuda_libdirs | tr '\n' ':')${LD_LIBRARY_PATH:-}
        export LD_LIBRARY_PATH
        use_carried_openblas "$synth_carried/lib"
        "$py" -c "import numpy" || { echo "device_check: no numpy in $py"; exit 1; }
    fi
    mkdir -p "$out/synthetic"
    for run in gpu:copychain:uniform:12 gpu:copychain:masked:12 gpu:brackets:uniform:12 \
        gpu:brackets:masked:12 gpu_wide:brackets:uniform:20 gpu_wide:brackets:masked:20; do
        IFS=: read -r bud src proc ms <<EOF_RUN
$run
EOF_RUN
        train_s=$((2000 * ms / 1000))
        expect=$((train_s + 25))
        step "synthetic-$bud-$src-$proc" $((2 * train_s + 60)) "$expect" synthetic \
            env NCTMC_LIBRARY="$lib" "$py" "$root/bench/quality/bench_quality.py" run \
            --budget "$bud" --source "$src" --process "$proc" \
            --backend "${SYNTHETIC_BACKEND:-cuda}" --threads 0 \
            --max-train-seconds $((2 * train_s)) --label "$bud $proc" \
            --out "$out/synthetic/${bud}_${src}_$proc.json" ${SYNTHETIC_ARGS:-}
    done
    if $dry; then
        echo "plan: expected ${planned_expect}s, at most ${planned_limit}s; budget ${budget}s"
        exit 0
    fi
    set -- "$out"/synthetic/*.json
    [ -f "$1" ] && "$py" "$root/bench/quality/bench_quality.py" table "$@" \
        >"$out/synthetic/table.md" && cat "$out/synthetic/table.md"
    print_summary
    exit "$failed"
fi

# ---- the device and the programs ----------------------------------------------------
LD_LIBRARY_PATH=$(cuda_libdirs | tr '\n' ':')${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH
use_carried_openblas "$carried/lib"
bin="$carried"
if ! $dry; then
    { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
      nvcc --version | tail -n 2; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; } >"$out/device.txt" 2>&1
    cat "$out/device.txt"
    # the carried binaries when there are some (device time is scarce), else
    # build here when the tools are here
    build="/tmp/nctmc-build-cuda"
    if [ -x "$carried/test_cuda_conformance" ] && [ -x "$carried/bench_gpu_train" ]; then
        echo "device_check: using the binaries in $carried"
    elif command -v meson >/dev/null && command -v nvcc >/dev/null &&
        meson setup "$build" "$root" -Dcuda=enabled -Dreference_tests=disabled >"$out/build.log" 2>&1 &&
        ninja -C "$build" tests/test_cuda_conformance bench/bench_gpu_train libnctmc-cuda.so \
            >>"$out/build.log" 2>&1; then
        bin="$build/tests"
        for t in $tests test_nccl_module; do
            ninja -C "$build" "tests/$t" >>"$out/build.log" 2>&1
        done
        ninja -C "$build" libnctmc-nccl.so >>"$out/build.log" 2>&1
        ln -sf "$build/bench/bench_gpu_train" "$bin/bench_gpu_train"
        # the programs link the core statically from tests/; the modules are
        # one folder up, so name them
        NCTMC_CUDA_MODULE="$build/libnctmc-cuda.so"
        NCTMC_NCCL_MODULE="$build/libnctmc-nccl.so"
        export NCTMC_CUDA_MODULE NCTMC_NCCL_MODULE
    else
        tail -n 30 "$out/build.log"
        echo "device_check: cannot build here and no carried binaries (run --prepare where the"
        echo "CUDA toolkit is, and carry build-device-cuda)"
        exit 1
    fi
    echo "device_check: programs from $bin, CUDA module ${NCTMC_CUDA_MODULE:-$bin/libnctmc-cuda.so}"
fi

# Whether program $1 is among the programs (in --dry-run without a carried
# folder: assumed).
have() {
    if $dry && [ ! -d "$carried" ]; then
        return 0
    fi
    [ -x "$bin/$1" ]
}

# ---- (a) conformance ------------------------------------------------------------------
# shellcheck disable=SC2046 # two numbers
set -- $(test_limits test_cuda_conformance)
step conformance "$1" "$2" conformance "$bin/test_cuda_conformance"
if have test_nccl_module; then
    # the NCCL engine on one rank (a world of one still runs NCCL's
    # send/receive, the rank-order sum, all-gather and broadcast)
    step nccl_module 90 10 conformance env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 \
        "$bin/test_nccl_module"
else
    not_run nccl_module "not run: no test_nccl_module (this build has no NCCL)"
fi
for t in $tests; do
    if have "$t"; then
        # shellcheck disable=SC2046 # two numbers
        set -- $(test_limits "$t")
        if [ "$t" = test_cuda_fused ]; then
            # with cuDNN's own log of the attention backward (cudnn.log)
            step "$t" "$1" "$2" conformance env CUDNN_LOGLEVEL_DBG=2 \
                CUDNN_LOGDEST_DBG="$out/cudnn.log" "$bin/$t"
        else
            step "$t" "$1" "$2" conformance "$bin/$t"
        fi
    else
        not_run "$t" "not run: not among the programs (not in this tree)"
    fi
done
# no device: the conformance test's own "skipped" (77), unless something failed
if [ "$failed" = 0 ] && grep -q '^conformance	skipped' "$summary" 2>/dev/null; then
    failed=77
fi
if [ "$mode" = "--quick" ]; then
    print_summary
    exit "$failed"
fi

# ---- (b) the benchmark beside torch.compile, then each switch ------------------------------
bench="$bin/bench_gpu_train"
step bench_libnctmc_b16 150 35 bench "$bench" --config paper-small --batch 16 --reps 5 \
    --warmup 2 --sample-batch 16 --sample-steps 16 --kernel-batch 16
step bench_libnctmc_b64 90 15 bench "$bench" --config paper-small --batch 64 --reps 3 \
    --warmup 1 --precision bf16 --sample-batch 0 --kernel-batch 0
ref="$root/tests/reference/bench_reference_gpu.py"
step torch_eager_b16 120 25 bench env PYTHONDONTWRITEBYTECODE=1 python3 "$ref" \
    --config paper-small --precision bf16 --reps 5 --warmup 2 --batch 16 --attention sdpa \
    --sample-batch 16 --sample-steps 16
step torch_compile_b16 150 55 bench env PYTHONDONTWRITEBYTECODE=1 python3 "$ref" \
    --config paper-small --precision bf16 --reps 5 --warmup 2 --batch 16 --compile only \
    --sample-batch 0
step torch_compile_b64 150 60 bench env PYTHONDONTWRITEBYTECODE=1 python3 "$ref" \
    --config paper-small --precision bf16 --reps 5 --warmup 2 --batch 64 --compile only \
    --sample-batch 0
compare() { # LIBNCTMC_LOGS... -> the table against the PyTorch logs there are
    theirs=""
    for t in torch_eager_b16 torch_compile_b16 torch_compile_b64; do
        [ -s "$out/$t.log" ] && theirs="$theirs $out/$t.log"
    done
    cat "$@" >"$out/.libnctmc.log" 2>/dev/null
    if [ -z "$theirs" ] || [ ! -s "$out/.libnctmc.log" ]; then
        echo "device_check: no comparison (a benchmark log is missing)"
        return 0
    fi
    # shellcheck disable=SC2086 # the logs' paths hold no blanks
    python3 "$root/bench/compare_torch_gpu.py" "$out/.libnctmc.log" $theirs
}
$dry || compare "$out/bench_libnctmc_b16.log" "$out/bench_libnctmc_b64.log" |
    tee "$out/compare.txt"
# the new loss kernels alone beside those they replace, at 16 x 512 x 50304
step bench_lcond_kernels 90 20 bench "$bench" --config paper-small --batch 1 --reps 10 \
    --warmup 0 --precision none --sample-batch 0 --kernel-batch 0 --lcond-split 16 \
    --lcond-link 16
# bf16 logits (NCTMC_CUDA_BF16_LOGITS=1): lcond on bf16 beside float32 logits
# at 16 x 512 x 50304, then the bf16 train step at batch 16 and 64 off and on
step bench_bf16_logits 60 10 bench "$bench" --config paper-small --reps 3 --warmup 1 \
    --bf16-logits 16
# the fast jump draw (exp_mode float) beside the double one, and its first
# 256 rows against the CPU's, at 16 x 512 x 50304
step bench_fast_sampling 90 20 bench "$bench" --config paper-small --kernel-batch 0 \
    --sample-batch 0 --fast-sample-batch 16 --precision tf32 --reps 5 --warmup 1
# the fused block kernels in the bf16 train step at batch 64 (batch 16: below)
step bench_fused_b64 90 20 bench "$bench" --config paper-small --batch 64 --reps 3 \
    --warmup 1 --precision bf16 --fused 1
step bench_graphs_eager_vs_graph 120 40 bench "$bench" --graphs 1 --precision bf16 \
    --batch 16 --reps 5 --warmup 2 --sample-steps 16 --config paper-small
for sw in $switches; do
    sw_name=${sw%%:*}
    sw_setting=${sw#*:}
    # the forward and the train step (the switches touch no sampling pass;
    # the fast draw has its own step above)
    step "bench_switch_$sw_name" 90 20 bench env "$sw_setting" "$bench" --config paper-small \
        --batch 16 --reps 3 --warmup 1 --precision bf16 --sample-batch 0 --kernel-batch 0
    $dry || compare "$out/bench_switch_$sw_name.log" | tee "$out/compare_switch_$sw_name.txt"
done

if $dry; then
    # expected times: the 2026-11-26 H200 run took about 4 minutes for the
    # steps it had (conformance, NCCL, the libnctmc and PyTorch benchmarks,
    # most of it torch.compile compiling); the new steps are estimates
    echo "plan: expected ${planned_expect}s, at most ${planned_limit}s of timeouts; budget" \
        "${budget}s for the call (the device tool's limit is 600 s a command; the machine's" \
        "start comes on top, within the session's 15 minutes): steps that would run past it" \
        "are cut short or skipped, the last ones first"
    exit 0
fi
print_summary
exit "$failed"
