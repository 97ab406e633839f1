#!/bin/sh
# scripts/text_model_gpu.sh — the text model's GPU variant (research/2026-11-26-text-model-gpu.md): the paper-small shape (`nctmc train --preset
# paper`: 12 layers, d 768, 12 heads, 512 tokens) on the fortunes corpus
# with a byte-level BPE trained on its training split, uniform and masked,
# for a short fixed budget each; then samples at 16 / 64 / 256 steps and
# the held-out NELBO, written to files that the CPU-side judge reads.
#
#   sh scripts/text_model_gpu.sh --prepare   on this (CPU) machine: the corpus
#       (scripts/text_corpus.py; apt package `fortunes`), the BPE
#       (scripts/text_bpe.py; build-pyenv from scripts/install-deps.sh), both
#       prepared directories, and — with the CUDA toolkit — the `nctmc` tool
#       built with -Dcuda=enabled, libnctmc's core and OpenBLAS linked in
#       statically, with the CUDA module libnctmc-cuda.so beside it (where the
#       core looks for it). All into build-device-text/ (about 60 MB), to be
#       carried to the GPU machine (device tool: carry ["build-device-text"]).
#   sh scripts/text_model_gpu.sh             on the GPU machine: train, sample,
#       evaluate. Results (samples/, nelbo-*.txt, train-*.log, time-*.txt) go
#       to $OUT (the device tool's folder) or build-device-text/run; the
#       checkpoints (2 GB each) stay in $TEXT_GPU_TMP (/tmp/nctmc-text-gpu).
#   sh scripts/text_model_gpu.sh --score DIR on the CPU machine: the judge's
#       table (bench/text_quality.py score) of a run's results in DIR.
#
# The tool is found as: $NCTMC if set; else build-device-text/nctmc (carried);
# else built here into /tmp/nctmc-text-build when meson and nvcc are here.
# Knobs (environment): TEXT_GPU_STEPS (default 800), TEXT_GPU_MINUTES (3, a
# cap on each training's wall time), TEXT_GPU_BATCH (64 sequences of 512
# tokens; the paper's 512 is 17 epochs of this corpus per 50 steps),
# TEXT_GPU_LR (3e-4), TEXT_GPU_WARMUP (100), TEXT_GPU_EMA (0.99: a short run),
# TEXT_GPU_BACKEND (cuda-bf16, the preset's), TEXT_GPU_PROCESSES ("uniform
# masked"), TEXT_GPU_SAMPLES (64), TEXT_GPU_SAMPLE_STEPS (16,64,256),
# TEXT_GPU_TEMPERATURES (1; a comma-separated list samples each step count at
# each temperature, for the judge's perplexity at matched unigram entropy,
# bench/text_quality.py), TEXT_GPU_METHOD (tau; auto = each checkpoint's recommended sampler: the
# posterior sampler for uniform, tau-leaping for masked, docs/quality.md),
# TEXT_GPU_TRAIN_FLAGS (more `nctmc train` flags, e.g. a tiny shape for a dry
# run on the CPU: TEXT_GPU_BACKEND=cpu TEXT_GPU_TRAIN_FLAGS="--layers 1
# --d-model 32 --heads 2 --cond-dim 16" NCTMC=build/examples/nctmc).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
carried=${NCTMC_CARRY_DIR:-$root/build-device-text}
mode=${1:-run}

steps=${TEXT_GPU_STEPS:-800}
minutes=${TEXT_GPU_MINUTES:-3}
batch=${TEXT_GPU_BATCH:-64}
lr=${TEXT_GPU_LR:-3e-4}
warmup=${TEXT_GPU_WARMUP:-100}
ema=${TEXT_GPU_EMA:-0.99}
backend=${TEXT_GPU_BACKEND:-cuda-bf16}
processes=${TEXT_GPU_PROCESSES:-uniform masked}
n_samples=${TEXT_GPU_SAMPLES:-64}
sample_steps=${TEXT_GPU_SAMPLE_STEPS:-16,64,256}
temperatures=${TEXT_GPU_TEMPERATURES:-1}
method=${TEXT_GPU_METHOD:-tau}

if [ "$mode" = "--score" ]; then
    dir=${2:?"--score DIR: the folder a GPU run wrote"}
    exec python3 "$root/bench/text_quality.py" score --corpus "$carried/corpus" \
        --out "$dir"
fi

if [ "$mode" = "--prepare" ]; then
    py="$root/build-pyenv/bin/python"
    [ -x "$py" ] || { echo "text_model_gpu: no $py (run scripts/install-deps.sh)"; exit 1; }
    cpu_tool=${NCTMC_CPU:-$root/build/examples/nctmc}
    [ -x "$cpu_tool" ] || { echo "text_model_gpu: no $cpu_tool (build first)"; exit 1; }
    rm -rf "$carried"
    mkdir -p "$carried"
    python3 "$root/scripts/text_corpus.py" "$carried/corpus" &&
        "$py" "$root/scripts/text_bpe.py" "$carried/corpus/train.txt" "$carried/bpe.json" &&
        "$cpu_tool" prepare --split-at % --val-fraction 0 --tokenizer-file "$carried/bpe.json" \
            --out "$carried/data-train" "$carried/corpus/train.txt" &&
        "$cpu_tool" prepare --split-at % --val-fraction 0 \
            --tokenizer-file "$carried/data-train/tokenizer.txt" \
            --out "$carried/data-heldout" "$carried/corpus/heldout.txt" || exit 1
    if ! command -v nvcc >/dev/null; then
        echo "text_model_gpu: no nvcc here: the data is ready; the GPU machine must build the tool"
        exit 0
    fi
    b="$carried/meson"
    meson setup "$b" "$root" -Dcuda=enabled -Dreference_tests=disabled >/dev/null &&
        ninja -C "$b" examples/nctmc libnctmc_internal.a libnctmc-cuda.so || exit 1
    cc -o "$carried/nctmc" "$b/examples/nctmc.p/"*.o "$b/libnctmc_internal.a" \
        -Wl,-Bstatic -lopenblas -lgfortran -lquadmath -Wl,-Bdynamic -lpthread -lm -ldl &&
        strip "$carried/nctmc" &&
        cp "$b/libnctmc-cuda.so" "$carried/" &&
        strip --strip-unneeded "$carried/libnctmc-cuda.so" || exit 1
    rm -rf "$b"
    ls -la "$carried"
    exit 0
fi

# ---- the GPU run ----------------------------------------------------------------
out=${OUT:-$carried/run}
tmp=${TEXT_GPU_TMP:-/tmp/nctmc-text-gpu}
mkdir -p "$out" "$tmp"
for need in "$carried/data-train/train.bin" "$carried/data-heldout/train.bin"; do
    [ -f "$need" ] || { echo "text_model_gpu: no $need (run --prepare first)"; exit 1; }
done

. "$root/backends/cuda/cuda_libdirs.sh"
LD_LIBRARY_PATH=$(cuda_libdirs | tr '\n' ':')${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH

tool=${NCTMC:-}
if [ -z "$tool" ] && [ -x "$carried/nctmc" ]; then
    tool="$carried/nctmc"
elif [ -z "$tool" ]; then
    build=/tmp/nctmc-text-build
    if command -v meson >/dev/null && command -v nvcc >/dev/null &&
        meson setup "$build" "$root" -Dcuda=enabled -Dreference_tests=disabled \
            >"$out/build.log" 2>&1 &&
        ninja -C "$build" examples/nctmc libnctmc-cuda.so >>"$out/build.log" 2>&1; then
        tool="$build/examples/nctmc"
        NCTMC_CUDA_MODULE="$build/libnctmc-cuda.so"
        export NCTMC_CUDA_MODULE
    else
        tail -n 30 "$out/build.log"
        echo "text_model_gpu: no tool (set NCTMC, carry build-device-text, or build here)"
        exit 1
    fi
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  echo "tool: $tool"; "$tool" --version; } >"$out/device.txt" 2>&1
cat "$out/device.txt"

status=0
models=""
for p in $processes; do
    echo "text_model_gpu: training $p ($steps steps, cap $minutes min, batch $batch)"
    timer=""
    [ -x /usr/bin/time ] && timer="/usr/bin/time -v -o $out/time-$p.txt"
    $timer "$tool" train --data "$carried/data-train" --out "$tmp/$p.safetensors" --preset paper \
        --process "$p" --backend "$backend" --batch "$batch" --lr "$lr" --warmup "$warmup" \
        --steps "$steps" --min-lr-ratio 0.1 --ema "$ema" --minutes "$minutes" \
        --eval-every 0 --log-every 50 --seed 0 ${TEXT_GPU_TRAIN_FLAGS:-} \
        >"$out/train-$p.log" 2>&1 || status=1
    tail -n 3 "$out/train-$p.log"
    models="$models --model $p=$tmp/$p.safetensors"
done
[ "$status" = 0 ] || { echo "text_model_gpu: a training failed"; exit 1; }
# shellcheck disable=SC2086
python3 "$root/bench/text_quality.py" sample $models --nctmc "$tool" --out "$out" \
    --backend "$backend" --threads 0 --n "$n_samples" --batch "$n_samples" \
    --steps "$sample_steps" --temperatures "$temperatures" --method "$method" &&
    python3 "$root/bench/text_quality.py" nelbo $models --nctmc "$tool" --out "$out" \
        --backend "$backend" --threads 0 --eval-batch 64 --corpus "$carried/corpus" \
        --heldout-data "$carried/data-heldout" || exit 1
echo "text_model_gpu: done; score on the CPU machine with: sh scripts/text_model_gpu.sh --score $out"
