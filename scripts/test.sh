#!/bin/sh
# Installs what is missing, builds libnctmc and runs every test:
#   1. gcc release build with the PyTorch parity tests (CI's main run), and
#      its thread-count determinism tests again with OpenBLAS forced to its
#      Haswell kernels (as some machines' environments do),
#   2. the same suite under AddressSanitizer + UndefinedBehaviorSanitizer
#      (without the end-to-end quality runs, which only train longer),
#   3. a clang build (-Werror) with its test suite, under clang's
#      sanitizers (which add checks gcc's lack, e.g. float-cast-overflow),
#      including 20 s of coverage-guided fuzzing of the public API,
#   4. a ThreadSanitizer build (gcc; the AVX2 clones are off there, see
#      meson_options.txt) running the tests that use threads,
#   5. an install into a scratch prefix, and a program built against the
#      installed library through pkg-config,
#   6. the Python binding (python/), pip-installed into the test environment,
#      with its pytest suite run on the installed library.
# Ends with one line "tests: N passed, N failed, N skipped".
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)

scripts/install-deps.sh
# the interpreter with `safetensors` (install-deps.sh made it)
NCTMC_PYTHON="$root/build-pyenv/bin/python"
export NCTMC_PYTHON

configure() { # dir, extra meson args...
    dir=$1
    shift
    if [ -d "$dir" ]; then
        meson setup --reconfigure "$dir" "$@" >/dev/null
    else
        meson setup "$dir" "$@" >/dev/null
    fi
}

results=""
run_suite() { # build dir, label, extra meson test args...
    dir=$1
    label=$2
    shift 2
    if meson test -C "$dir" --print-errorlogs --num-processes 2 --logbase "testlog-$label" "$@"; then
        :
    else
        echo "test suite '$label' failed" >&2
    fi
    results="$results $dir/meson-logs/testlog-$label.json"
}

echo "== gcc release build =="
configure build-ci -Dreference_tests=enabled
ninja -C build-ci
run_suite build-ci gcc

# Some machines set these for OpenBLAS (its kernels for newer processors
# misbehave there); results must not depend on the kernel it picks. The
# machine's own environment stays as it is for every other run.
echo "== gcc release, OpenBLAS forced to its Haswell kernels =="
OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512 \
    run_suite build-ci openblas-haswell cpu_dense thread_pool model_grad trainer sampler sampler_math \
    quant_kernels

echo "== gcc + ASan + UBSan =="
configure build-ci-asan -Dreference_tests=enabled -Db_sanitize=address,undefined \
    -Dbuildtype=debugoptimized -Db_lundef=false
ninja -C build-ci-asan
# huge-allocation tests expect NULL from the allocator, not an abort
ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    run_suite build-ci-asan asan --no-suite e2e

echo "== clang + ASan + UBSan =="
CC=clang configure build-ci-clang -Dreference_tests=enabled -Db_sanitize=address,undefined \
    -Dbuildtype=debugoptimized -Db_lundef=false -Dfuzzing=true
ninja -C build-ci-clang
ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    run_suite build-ci-clang clang --no-suite e2e

# The tests whose work runs on several threads: the pool itself, the API's
# several-threads test, and the thread-count determinism of the CPU
# operations, the samplers and training (about a minute under TSan on two
# cores; eval's enumerations take minutes there and add no thread use).
echo "== gcc + TSan: the thread tests =="
tsan_tests="thread_pool api cpu_dense sampler sampler_math trainer lifetimes errors cancel quant_kernels"
configure build-ci-tsan -Dreference_tests=disabled -Dcuda=disabled -Db_sanitize=thread \
    -Dbuildtype=debugoptimized -Db_lundef=false
ninja -C build-ci-tsan $(for t in $tsan_tests; do printf 'tests/test_%s ' "$t"; done)
# huge-allocation tests expect NULL from the allocator, not a report
TSAN_OPTIONS="allocator_may_return_null=1 halt_on_error=1 second_deadlock_stack=1" \
    run_suite build-ci-tsan tsan --no-rebuild $tsan_tests

echo "== install + pkg-config consumer =="
prefix="$root/build-ci/install-root"
rm -rf "$prefix"
meson install -C build-ci --destdir "$prefix" >/dev/null
/usr/bin/python3 scripts/check_install.py "$prefix" || echo "install check failed" >&2
results="$results $root/build-ci/install-check.json"

echo "== Python binding against the installed library =="
# pip-installs python/ into the test environment the way a user would, then
# runs its pytest suite on the library just installed into $prefix
"$NCTMC_PYTHON" -m pip install -q --disable-pip-version-check --no-build-isolation \
    --no-deps --force-reinstall ./python >/dev/null
installed_lib=$(find "$prefix" -name 'libnctmc.so.1' | head -n 1)
installed_inc=$(dirname "$(find "$prefix" -name nctmc.h | head -n 1)")
# run from python/tests so that the installed package, not the source tree's,
# is the one imported
(cd python/tests && NCTMC_LIBRARY="$installed_lib" NCTMC_INCLUDE="$installed_inc" \
    "$NCTMC_PYTHON" -m pytest -q -p no:cacheprovider --junitxml "$root/build-ci/pytest.xml" .) ||
    echo "python binding tests failed" >&2
results="$results $root/build-ci/pytest.xml"

# ==== 64-bit ARM: cross build, test subset under qemu-aarch64 ===========
# Debian's aarch64 gcc, an arm64 OpenBLAS sysroot (scripts/arm64-sysroot.sh,
# made once), tests under qemu's "max" CPU (BFDOT present: both linear
# kernels run) and quant_kernels + sampler again on a Cortex-A57 (no BF16:
# the baseline build runs there). Only the subset below: the rest is the
# same C code the native stages test, and qemu runs it 10-50x slower.
echo "== aarch64 cross build, tests under qemu =="
arm_start=$(date +%s)
scripts/install-deps.sh --arm64 >/dev/null
scripts/arm64-sysroot.sh
configure build-ci-arm64 -Dcuda=disabled -Dreference_tests=disabled \
    --cross-file build-arm64-sysroot/sysroot.ini --cross-file cross/aarch64-linux-gnu.txt
arm_tests="api abi abi_internal lifetimes errors cancel load_sources mmap legacy checkpoint
    tokenizer tokenizer_bpe sampler sampler_math trainer file_io thread_pool cpu_dense
    quant_kernels quant cli_help_sample cli_usage"
ninja -C build-ci-arm64
# shellcheck disable=SC2086
run_suite build-ci-arm64 arm64 --no-rebuild $arm_tests
# shellcheck disable=SC2086
QEMU_CPU=cortex-a57 run_suite build-ci-arm64 arm64-a57 --no-rebuild quant_kernels sampler
echo "aarch64 stage: $(($(date +%s) - arm_start)) s"
# ==== end of the 64-bit ARM stage =========================================

/usr/bin/python3 scripts/summarize_tests.py $results
