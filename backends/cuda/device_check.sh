#!/bin/sh
# backends/cuda/device_check.sh — every GPU check of the CUDA backend in one
# go, on a machine with an NVIDIA GPU (about 5 minutes on an H100):
#   1. use the binaries carried in build-device-cuda/ (see --prepare), or
#      build the CUDA backend's conformance test and benchmark (and the
#      module libnctmc-cuda.so they load) here;
#   2. the conformance test: every operation against the CPU backend, the
#      whole model's outputs and gradients, the samplers, determinism;
#   3. the paper-small benchmark of libnctmc (training, forward and sampling
#      at batch 16 in TF32 and bf16, the sampling and loss kernels alone, bf16
#      training at batch 64, peak device memory), then the PyTorch reference
#      (tests/reference/bench_reference_gpu.py) on the same GPU: eager bf16
#      with SDPA at batch 16 (with sampling), and torch.compile bf16 at
#      batch 16 and 64, each in its own process so that its memory is its
#      own; then the comparison table.
# Results go to $OUT (the device tool's folder) or /tmp/nctmc-device-check:
# device.txt, build.log, conformance.log, bench_libnctmc.log,
# bench_torch.log, compare.txt, nccl.log. The exit status is the
# conformance test's, or the NCCL test's when that fails.
#
#   sh backends/cuda/device_check.sh            on the GPU machine
#   sh backends/cuda/device_check.sh --prepare  on a machine with the CUDA
#       toolkit but no GPU: builds the two programs into build-device-cuda/
#       with libnctmc's core and OpenBLAS linked in statically (the GPU image
#       may lack OpenBLAS), and the CUDA backend module libnctmc-cuda.so
#       beside them, where the core looks for it (the folder of the program
#       that holds it), to be carried to the GPU machine (device tool:
#       carry ["build-device-cuda"]). The programs link no CUDA library;
#       the module links CUDA's, found through LD_LIBRARY_PATH below.
#   sh backends/cuda/device_check.sh --quick    the conformance test only
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/nctmc-device-check}
mkdir -p "$out"
mode=${1:-run}
carried=${NCTMC_CARRY_DIR:-$root/build-device-cuda}

. "$root/backends/cuda/cuda_libdirs.sh"

if [ "$mode" = "--prepare" ]; then
    b="$carried/meson"
    rm -rf "$carried"
    meson setup "$b" "$root" -Dcuda=enabled -Dreference_tests=disabled >/dev/null &&
        ninja -C "$b" tests/test_cuda_conformance bench/bench_gpu_train libnctmc-cuda.so ||
        exit 1
    progs="test_cuda_conformance bench_gpu_train"
    ninja -C "$b" tests/test_cuda_sample_fast >/dev/null && progs="$progs test_cuda_sample_fast"
    if ninja -C "$b" tests/test_nccl_module libnctmc-nccl.so >/dev/null 2>&1; then
        progs="$progs test_nccl_module"
        cp "$b/libnctmc-nccl.so" "$carried/" &&
            strip --strip-unneeded "$carried/libnctmc-nccl.so" || exit 1
    fi
    for prog in $progs; do
        # tests/ or bench/ (bench_gpu_train)
        cc -o "$carried/$prog" $(ls "$b"/tests/$prog.p/*.o "$b"/bench/$prog.p/*.o 2>/dev/null) \
            "$b/libnctmc_internal.a" \
            -Wl,-Bstatic -lopenblas -lgfortran -lquadmath -Wl,-Bdynamic \
            -lpthread -lm -ldl || exit 1
        strip "$carried/$prog"
    done
    cp "$b/libnctmc-cuda.so" "$carried/" && strip --strip-unneeded "$carried/libnctmc-cuda.so" ||
        exit 1
    rm -rf "$b"
    ls -la "$carried"
    exit 0
fi

LD_LIBRARY_PATH=$(cuda_libdirs | tr '\n' ':')${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nvcc --version | tail -n 2; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; } >"$out/device.txt" 2>&1
cat "$out/device.txt"

# 1. the carried binaries when there are some (device time is scarce), else
#    build here when the tools are here
bin=""
build="/tmp/nctmc-build-cuda"
if [ -x "$carried/test_cuda_conformance" ] && [ -x "$carried/bench_gpu_train" ]; then
    echo "device_check: using the binaries in $carried"
    bin="$carried"
elif command -v meson >/dev/null && command -v nvcc >/dev/null &&
    meson setup "$build" "$root" -Dcuda=enabled -Dreference_tests=disabled >"$out/build.log" 2>&1 &&
    ninja -C "$build" tests/test_cuda_conformance bench/bench_gpu_train libnctmc-cuda.so \
        >>"$out/build.log" 2>&1; then
    bin="$build/tests"
    ln -sf ../bench/bench_gpu_train "$bin/bench_gpu_train"
    # the programs link the core statically from tests/; the modules are one
    # folder up, so name them
    ninja -C "$build" tests/test_nccl_module libnctmc-nccl.so >>"$out/build.log" 2>&1
    ninja -C "$build" tests/test_cuda_sample_fast >>"$out/build.log" 2>&1
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

# 2. conformance
timeout 420 "$bin/test_cuda_conformance" >"$out/conformance.log" 2>&1
status=$?
grep -E '^FAIL|^device|attention B|sample_step|sampler|model .*gradients|cuda_conformance' \
    "$out/conformance.log" | head -n 120
echo "device_check: conformance exit status $status"

# 2a. the fast jump draw (exp_mode float): the GPU's tokens must be the CPU's
if [ -x "$bin/test_cuda_sample_fast" ]; then
    timeout 120 "$bin/test_cuda_sample_fast" >"$out/sample_fast.log" 2>&1
    fast_status=$?
    grep -E '^FAIL|sample_fast' "$out/sample_fast.log" | head -n 40
    echo "device_check: cuda_sample_fast exit status $fast_status"
    [ "$status" -eq 0 ] && [ "$fast_status" -ne 0 ] && status=$fast_status
fi

# 2b. the NCCL engine on one rank (a world of one still runs NCCL's
#     send/receive, the rank-order sum, all-gather and broadcast)
if [ -x "$bin/test_nccl_module" ]; then
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 timeout 120 "$bin/test_nccl_module" >"$out/nccl.log" 2>&1
    nccl_status=$?
    cat "$out/nccl.log"
    echo "device_check: NCCL module exit status $nccl_status"
    [ "$status" -eq 0 ] && [ "$nccl_status" -ne 0 ] && [ "$nccl_status" -ne 77 ] &&
        status=$nccl_status
else
    echo "device_check: no test_nccl_module (this build has no NCCL)" | tee "$out/nccl.log"
fi
[ "$mode" = "--quick" ] && exit "$status"

# 3. the benchmark, libnctmc then PyTorch on the same GPU
{
    timeout 240 "$bin/bench_gpu_train" --config paper-small --batch 16 --reps 5 --warmup 2 \
        --sample-batch 16 --sample-steps 16 --kernel-batch 16 --fast-sample-batch 16
    timeout 90 "$bin/bench_gpu_train" --config paper-small --batch 64 --reps 3 --warmup 1 \
        --precision bf16 --sample-batch 0 --kernel-batch 0
} >"$out/bench_libnctmc.log" 2>&1
cat "$out/bench_libnctmc.log"
torch_bench() { # extra arguments; appends to bench_torch.log
    PYTHONDONTWRITEBYTECODE=1 timeout 200 python3 "$root/tests/reference/bench_reference_gpu.py" \
        --config paper-small --precision bf16 --reps 5 --warmup 2 "$@" \
        >>"$out/bench_torch.log" 2>&1
}
: >"$out/bench_torch.log"
torch_bench --batch 16 --attention sdpa --sample-batch 16 --sample-steps 16
torch_bench --batch 16 --compile only --sample-batch 0
torch_bench --batch 64 --compile only --sample-batch 0
cat "$out/bench_torch.log"
python3 "$root/bench/compare_torch_gpu.py" "$out/bench_libnctmc.log" \
    "$out/bench_torch.log" | tee "$out/compare.txt"
exit "$status"
