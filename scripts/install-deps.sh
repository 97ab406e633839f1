#!/bin/sh
# Installs what building and testing libnctmc needs on Debian 12, using
# apt-get, and only what is missing. Run as root (or with sudo available).
#
#   scripts/install-deps.sh          build + test dependencies
#   scripts/install-deps.sh --build  only what building needs
#   scripts/install-deps.sh --windows  the Windows cross build's tools: MinGW-w64
#                                      and Wine (scripts/windows.sh)
#   scripts/install-deps.sh --arm64  the aarch64 cross toolchain and qemu
#                                    too (then scripts/arm64-sysroot.sh;
#                                    docs/install.md, "64-bit ARM")
#   scripts/install-deps.sh --demo   what building and scripts/demo.sh need
#                                    (numpy and scikit-learn, whose SVC
#                                    scores the demo's digits)
#
# The test set also makes a Python virtual environment, build-pyenv/, that
# sees Debian's packages (torch, numpy) and adds the `safetensors` and
# `tokenizers` packages from PyPI (Debian 12 ships neither), used to check
# that Python reads our checkpoints and that our BPE tokenizer gives the
# same ids as Hugging Face's; and `unicodedata2` at the Unicode version
# `tokenizers` matches with (16.0), from which
# scripts/gen_unicode_tables.py made lib/text/unicode_tables.c. `fortunes` is the
# text corpus of research/2026-11-26-text-model-cpu.md
# (scripts/text_corpus.py). python3-mesonpy (with patchelf) builds the Python
# package offline, library bundled (python/meson.build), and
# python3-hypothesis drives its hostile-input test (python/tests/test_hostile.py).
# Open MPI (openmpi-bin, libopenmpi-dev) builds the MPI module
# libnctmc-mpi.so and runs the data-parallel tests (docs/distributed.md);
# python3-mpi4py (on that Open MPI) tests nctmc.Comm.from_mpi4py
# (python/tests/test_comm.py).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)

build_pkgs="gcc pkg-config meson ninja-build libopenblas-dev"
test_pkgs="clang libclang-rt-14-dev python3 python3-numpy python3-torch python3-venv python3-pytest
    python3-setuptools python3-wheel python3-mesonpy python3-hypothesis patchelf fortunes openmpi-bin libopenmpi-dev python3-mpi4py"

windows_pkgs="mingw-w64 wine wine64 clang python3-pip"

arm64_pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"

demo_pkgs="python3 python3-numpy python3-sklearn"

pkgs="$build_pkgs"
case "${1:-}" in
    --build) ;;
    --demo) pkgs="$build_pkgs $demo_pkgs" ;;
    --windows) pkgs="$windows_pkgs" ;;
    --arm64) pkgs="$pkgs $test_pkgs $arm64_pkgs" ;;
    *) pkgs="$pkgs $test_pkgs" ;;
esac

missing=""
for p in $pkgs; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$status" in
        *"install ok installed"*) ;;
        *) missing="$missing $p" ;;
    esac
done

python_env() { # the test venv with safetensors and tokenizers, made once
    case "${1:-}" in --build|--demo|--windows) return 0 ;; esac
    env_dir="$root/build-pyenv"
    if "$env_dir/bin/python" -c "import safetensors, tokenizers, unicodedata2" 2>/dev/null; then
        return 0
    fi
    echo "install-deps: making $env_dir with safetensors and tokenizers from PyPI"
    rm -rf "$env_dir"
    /usr/bin/python3 -m venv --system-site-packages "$env_dir"
    "$env_dir/bin/pip" install -q --disable-pip-version-check safetensors tokenizers \
        unicodedata2==16.0.0
}

if [ -z "$missing" ]; then
    echo "install-deps: every package is installed"
    python_env "${1:-}"
    exit 0
fi

echo "install-deps: installing$missing"
if [ "$(id -u)" -eq 0 ]; then
    as_root=""
elif command -v sudo >/dev/null 2>&1; then
    as_root="sudo"
else
    echo "install-deps: need root to install:$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$as_root apt-get update -q
# shellcheck disable=SC2086
$as_root apt-get install -y -q --no-install-recommends $missing
python_env "${1:-}"
