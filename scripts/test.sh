#!/bin/sh
# Installs what is missing, builds libnctmc and runs every test:
#   1. gcc release build with the PyTorch parity tests (CI's main run), and
#      its thread-count determinism tests again with OpenBLAS forced to its
#      Haswell kernels (as some machines' environments do),
#   2. the same suite under AddressSanitizer + UndefinedBehaviorSanitizer
#      (without the end-to-end quality runs, which only train longer; some
#      numeric tests on smaller cases, docs/dev/testing.md),
#   3. a clang build (-Werror) with its test suite, under clang's
#      sanitizers (which add checks gcc's lack, e.g. float-cast-overflow),
#      including 20 s of coverage-guided fuzzing per libFuzzer target
#      (the public API, the loaders, and encoding against hostile added
#      tokens, where libFuzzer's -timeout bounds each input's time),
#   4. a ThreadSanitizer build (gcc; the AVX2 clones are off there, see
#      meson_options.txt) running the tests that use threads,
#   5. an install into a scratch prefix, and a program built against the
#      installed library through pkg-config,
#   6. the Python binding (python/), pip-installed into the test environment,
#      with its pytest suite run on the installed library,
#   7. the Windows x86-64 build (MinGW-w64) and its tests under Wine
#      (scripts/windows.sh).
# Ends with one line "tests: N passed, N failed, N skipped".
#
# The sanitizer stages build without the CUDA module (it cannot run without
# a GPU, and the gcc release build compiles it, -Werror, already) and run
# with their timeouts multiplied: a machine busy with other work slows a
# sanitized test several times over, and a timeout must catch a hang, not a
# slow machine. docs/dev/testing.md has each stage's time.
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
run_suite build-ci gcc --timeout-multiplier 2

# Some machines set these for OpenBLAS (its kernels for newer processors
# misbehave there); results must not depend on the kernel it picks. The
# machine's own environment stays as it is for every other run.
echo "== gcc release, OpenBLAS forced to its Haswell kernels =="
OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512 \
    run_suite build-ci openblas-haswell --timeout-multiplier 2 cpu_dense thread_pool model_grad trainer sampler sampler_math \
    quant_kernels

echo "== gcc + ASan + UBSan =="
configure build-ci-asan -Dreference_tests=enabled -Db_sanitize=address,undefined \
    -Dbuildtype=debugoptimized -Db_lundef=false -Dcuda=disabled
ninja -C build-ci-asan
# huge-allocation tests expect NULL from the allocator, not an abort
ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    run_suite build-ci-asan asan --no-suite e2e --timeout-multiplier 4

# The Python binding on this ASan library: the hostile-input test (every
# entry point, hypothesis, a bounded number of examples) and the regression
# tests of its memory safety. The ASan runtime is preloaded into Python;
# CPython's own allocations are never freed at exit by design, so leaks are
# not checked here. Any report ends the process: the suite's XML is then
# missing and counts as failed. (About a minute on two cores.)
echo "== Python binding on the ASan library: hostile inputs =="
rm -f "$root/build-ci-asan/pytest-asan.xml"
(cd python/tests && LD_PRELOAD="$(gcc -print-file-name=libasan.so)" \
    ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=0 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    NCTMC_LIBRARY="$root/build-ci-asan/libnctmc.so.1" PYTHONPATH="$root/python" \
    "$NCTMC_PYTHON" -m pytest -q -p no:cacheprovider --junitxml "$root/build-ci-asan/pytest-asan.xml" \
    test_hostile.py test_safety.py) || echo "python binding under ASan failed" >&2
results="$results $root/build-ci-asan/pytest-asan.xml"

echo "== clang + ASan + UBSan =="
CC=clang configure build-ci-clang -Dreference_tests=enabled -Db_sanitize=address,undefined \
    -Dbuildtype=debugoptimized -Db_lundef=false -Dfuzzing=true -Dcuda=disabled
ninja -C build-ci-clang
ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    run_suite build-ci-clang clang --no-suite e2e --timeout-multiplier 4

# The tests whose work runs on several threads: the pool itself, the API's
# several-threads test, and the thread-count determinism of the CPU
# operations, the samplers and training (about a minute under TSan on two
# cores; eval's enumerations take minutes there and add no thread use).
echo "== gcc + TSan: the thread tests =="
tsan_tests="thread_pool api cpu_dense sampler sampler_math trainer lifetimes errors cancel quant_kernels log_hook"
configure build-ci-tsan -Dreference_tests=disabled -Dcuda=disabled -Db_sanitize=thread \
    -Dbuildtype=debugoptimized -Db_lundef=false
ninja -C build-ci-tsan $(for t in $tsan_tests; do printf 'tests/test_%s ' "$t"; done)
# huge-allocation tests expect NULL from the allocator, not a report
TSAN_OPTIONS="allocator_may_return_null=1 halt_on_error=1 second_deadlock_stack=1" \
    run_suite build-ci-tsan tsan --no-rebuild --timeout-multiplier 4 $tsan_tests

echo "== install + pkg-config consumer =="
prefix="$root/build-ci/install-root"
rm -rf "$prefix"
meson install -C build-ci --destdir "$prefix" >/dev/null
/usr/bin/python3 scripts/check_install.py "$prefix" || echo "install check failed" >&2
results="$results $root/build-ci/install-check.json"

echo "== Python binding: pip install into a fresh venv, library bundled =="
# What docs/python.md tells a user: a fresh virtual environment and
# `pip install ./python`, which builds libnctmc with meson and bundles it in
# the package. Offline: the venv sees Debian's numpy and meson-python
# (install-deps.sh), so the build runs without build isolation, which would
# fetch meson-python from PyPI.
venv="$root/build-ci/pyvenv"
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation ./python >/dev/null
(cd / && "$venv/bin/python" -c '
import nctmc
from nctmc import _native
assert _native.LIBRARY == _native.BUNDLED, _native.LIBRARY
m = nctmc.Model.create(vocab_size=4, seq_len=4, n_layers=1, d_model=16, n_heads=2, cond_dim=8)
assert m.sampler(1).sample(steps=2).shape == (1, 4)
print("bundled install:", nctmc.__version__, _native.LIBRARY)') ||
    echo "bundled python install failed" >&2
rm -rf "$venv"

echo "== Python binding against the installed library =="
# pip-installs python/ into the test environment without a bundled library
# (the distributions' route), then runs its pytest suite on the library just
# installed into $prefix
"$NCTMC_PYTHON" -m pip install -q --disable-pip-version-check --no-build-isolation \
    --no-deps --force-reinstall --config-settings=setup-args=-Dbundle_library=false \
    ./python >/dev/null
installed_lib=$(find "$prefix" -name 'libnctmc.so.1' | head -n 1)
installed_inc=$(dirname "$(find "$prefix" -name nctmc.h | head -n 1)")
# run from python/tests so that the installed package, not the source tree's,
# is the one imported
(cd python/tests && NCTMC_LIBRARY="$installed_lib" NCTMC_INCLUDE="$installed_inc" \
    "$NCTMC_PYTHON" -m pytest -q -p no:cacheprovider --junitxml "$root/build-ci/pytest.xml" .) ||
    echo "python binding tests failed" >&2
results="$results $root/build-ci/pytest.xml"

# ---- Windows stage (scripts/windows.sh): cross-built with MinGW-w64, tested
# under Wine; its meson test log joins the summary ----
echo "== Windows x86-64 (MinGW-w64, Wine) =="
scripts/install-deps.sh --windows
if scripts/windows.sh build-ci; then
    :
else
    echo "windows stage failed" >&2
fi
[ -f build-win/meson-logs/testlog-windows.json ] &&
    results="$results $root/build-win/meson-logs/testlog-windows.json"
# ---- end of the Windows stage ----

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
