#!/bin/sh
# The Windows x86-64 stage: cross-builds libnctmc with Debian's MinGW-w64
# and tests it under Wine. Run from anywhere; needs `scripts/install-deps.sh
# --windows` and the native build NATIVE (default build-ci) already built.
#
#   scripts/windows.sh [NATIVE_BUILD_DIR]
#
#   1. OpenBLAS for Windows (scripts/windows-openblas.sh, cached in
#      build-win-deps/);
#   2. meson setup + ninja with cross/x86_64-w64-mingw32.txt into build-win/:
#      nctmc.dll, nctmc.dll.a (MinGW) and nctmc.lib (MSVC) import libraries;
#   3. nctmc.dll exports exactly the functions of nctmc.def, all nctmc_*;
#   4. nctmc.h as MSVC sees it (clang --target=x86_64-pc-windows-msvc), C
#      and C++, with no GNU extension left after preprocessing;
#   5. the Wine subset of the tests (tests/windows/meson.build, and the
#      nctmc tool's in examples/meson.build) with meson test, Wine's
#      exe_wrapper from the cross file, WINEPREFIX in build-win/;
#   6. a model trained by the native build, sampled by a C and a C++ program
#      built with MinGW against nctmc.dll under Wine: the same tokens as the
#      native build for the same seed (and other tokens for another seed);
#   7. the zip layout of docs/install.md in build-win/nctmc-windows-x86_64/,
#      with the nctmc tool (nctmc.exe), run once from there.
# Each step prints its time. Exits non-zero on the first failure.
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
native=${1:-build-ci}
win=build-win
t0=$(date +%s)
step() { echo "== windows: $1 ($(( $(date +%s) - t0 )) s so far) =="; }

step "OpenBLAS"
scripts/windows-openblas.sh "$root/build-win-deps/openblas"

step "cross build"
args="--cross-file cross/x86_64-w64-mingw32.txt -Dcuda=disabled -Dmpi=disabled -Dvector_clones=disabled
      -Dreference_tests=disabled -Dpkg_config_path=$root/build-win-deps/openblas/pkgconfig"
if [ -d "$win/meson-info" ]; then
    meson setup --reconfigure "$win" $args >/dev/null
else
    meson setup "$win" $args >/dev/null
fi
ninja -C "$win"

step "exports"
x86_64-w64-mingw32-objdump -p "$win/nctmc.dll" |
    sed -n '/\[Ordinal\/Name Pointer\] Table/,/^$/p' | sed -n 's/^[[:space:]]*\[ *[0-9]*\] //p' | sort > "$win/exports.txt"
sed -n 's/^    //p' "$win/nctmc.def" | sort > "$win/def.txt"
if ! cmp -s "$win/exports.txt" "$win/def.txt" || grep -qv '^nctmc_' "$win/exports.txt"; then
    echo "windows: nctmc.dll exports other than nctmc.def's nctmc_* functions:" >&2
    diff "$win/def.txt" "$win/exports.txt" >&2 || true
    exit 1
fi
echo "nctmc.dll exports $(wc -l < "$win/exports.txt") functions, all nctmc_*"

step "nctmc.h for MSVC"
mkdir -p "$win/header"
printf '#include "nctmc.h"\nint main(void) { return nctmc_version() ? 0 : 1; }\n' > "$win/header/use.c"
cp "$win/header/use.c" "$win/header/use.cpp"
clang --target=x86_64-pc-windows-msvc -fms-compatibility -ffreestanding -fsyntax-only \
    -std=c11 -Wall -Wextra -pedantic -Werror -Iinclude "$win/header/use.c"
clang++ --target=x86_64-pc-windows-msvc -fms-compatibility -ffreestanding -fsyntax-only \
    -std=c++14 -Wall -Wextra -pedantic -Werror -Iinclude "$win/header/use.cpp"
# clang accepts GNU syntax on every target, MSVC does not: none may be left
if clang --target=x86_64-pc-windows-msvc -fms-compatibility -ffreestanding -E -Iinclude \
        "$win/header/use.c" | grep -E '__attribute__|__typeof|__extension__|__builtin_|\(\{'; then
    echo "windows: nctmc.h leaves GNU extensions for MSVC" >&2
    exit 1
fi

step "Wine prefix"
WINEPREFIX="$root/$win/wineprefix"
WINEDEBUG=-all
export WINEPREFIX WINEDEBUG
[ -f "$WINEPREFIX/system.reg" ] || wineboot -i >/dev/null 2>&1 || true

step "tests under Wine"
meson test -C "$win" --no-rebuild --print-errorlogs --num-processes 2 --logbase testlog-windows

step "a natively trained model sampled by MinGW programs under Wine"
c="$win/consumer"
mkdir -p "$c"
cc -std=c11 -Wall -Wextra -Werror -Iinclude tests/windows/train_tiny.c -L"$native" -lnctmc \
    -Wl,-rpath,"$root/$native" -o "$c/train_tiny"
cc -std=c11 -Wall -Wextra -Werror -Iinclude tests/windows/sample_tokens.c -L"$native" -lnctmc \
    -Wl,-rpath,"$root/$native" -o "$c/sample_tokens"
x86_64-w64-mingw32-gcc-posix -std=c11 -Wall -Wextra -Werror -Iinclude \
    tests/windows/sample_tokens.c -L"$win" -lnctmc -o "$c/sample_tokens_c.exe"
x86_64-w64-mingw32-g++-posix -std=c++11 -Wall -Wextra -Werror -Iinclude -Itests/windows \
    tests/windows/sample_tokens.cpp -L"$win" -lnctmc -static-libgcc -static-libstdc++ \
    -o "$c/sample_tokens_cpp.exe"
"$c/train_tiny" "$c/model.safetensors"
WINEPATH="$root/$win;$root/build-win-deps/openblas/bin"
export WINEPATH
for seed in 42 43; do
    "$c/sample_tokens" "$c/model.safetensors" $seed > "$c/native-$seed.txt"
    for lang in c cpp; do
        wine "$c/sample_tokens_$lang.exe" "$c/model.safetensors" $seed | tr -d '\r' \
            > "$c/win-$lang-$seed.txt"
        if ! cmp -s "$c/native-$seed.txt" "$c/win-$lang-$seed.txt"; then
            echo "windows: seed $seed: the $lang program under Wine sampled other tokens" >&2
            diff "$c/native-$seed.txt" "$c/win-$lang-$seed.txt" >&2 || true
            exit 1
        fi
    done
done
if cmp -s "$c/native-42.txt" "$c/native-43.txt"; then
    echo "windows: seeds 42 and 43 gave the same tokens: the comparison proves nothing" >&2
    exit 1
fi
echo "same tokens natively and from C and C++ under Wine (seeds 42, 43)"

step "zip layout"
z="$win/nctmc-windows-x86_64"
rm -rf "$z"
mkdir -p "$z/bin" "$z/lib" "$z/include"
cp "$win/nctmc.dll" build-win-deps/openblas/bin/libscipy_openblas.dll "$win/examples/nctmc.exe" \
    "$z/bin/"
cp "$win/nctmc.lib" "$z/lib/nctmc.lib"
cp "$win/nctmc.dll.a" "$z/lib/libnctmc.dll.a"
cp "$win/nctmc.def" "$z/lib/nctmc.def"
cp include/nctmc.h include/nctmc.hpp "$z/include/"
find "$z" -type f | sort
# the tool runs from bin/ as it is, without WINEPATH: everything it needs
# is beside it
WINEPATH= wine "$z/bin/nctmc.exe" --version
step "done"
