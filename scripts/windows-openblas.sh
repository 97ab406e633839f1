#!/bin/sh
# OpenBLAS for the Windows x86-64 build, from PyPI's scipy-openblas32 wheel
# for win_amd64 (a DLL built by the OpenBLAS project's own CI, 32-bit
# integers like Debian's libopenblas). Made once into DIR and reused:
#
#   scripts/windows-openblas.sh DIR
#
# DIR/bin/libscipy_openblas.dll   the DLL (ships next to nctmc.dll)
# DIR/include/cblas.h             the wheel's header, whose functions carry
#                                 the prefix scipy_, plus names without it
# DIR/pkgconfig/openblas.pc       what meson's dependency('openblas') reads
#
# The DLL exports every function twice, with and without the scipy_
# prefix; the header declares only the prefixed names, so the cblas.h made
# here maps the names the library calls onto them.
set -eu
dir=$1
version=0.3.34.481.3
if ! grep -q "^libdir=" "$dir/pkgconfig/openblas.pc" 2>/dev/null ||
   ! [ -f "$dir/bin/libscipy_openblas.dll" ]; then
rm -rf "$dir"
mkdir -p "$dir/download" "$dir/bin" "$dir/include" "$dir/pkgconfig"
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform win_amd64 --python-version 3.11 "scipy-openblas32==$version" -d "$dir/download"
python3 - "$dir" <<'PY'
import glob, os, sys, zipfile
d = sys.argv[1]
whl = glob.glob(os.path.join(d, "download", "*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if name.endswith(".dll"):
            open(os.path.join(d, "bin", os.path.basename(name)), "wb").write(z.read(name))
        elif "/include/" in name and name.endswith(".h"):
            out = os.path.join(d, "include", "scipy", os.path.basename(name))
            os.makedirs(os.path.dirname(out), exist_ok=True)
            open(out, "wb").write(z.read(name))
PY
cat > "$dir/pkgconfig/openblas.pc" <<PC
libdir=$dir/bin
Name: openblas
Description: OpenBLAS from the scipy-openblas32 wheel (win_amd64)
Version: $version
Libs: -L\${libdir} -lscipy_openblas
Cflags: -I$dir/include
PC
rm -rf "$dir/download"
echo "windows-openblas: OpenBLAS $version in $dir"
fi
# made every time, so that a cached DIR gets names added here (replaced
# only when it changes: its time stamp rebuilds the library)
cat > "$dir/include/cblas.h.new" <<'H'
/* cblas.h for the Windows build (scripts/windows-openblas.sh): the
 * scipy-openblas32 header, and the plain names mapped to its scipy_ ones. */
#ifndef NCTMC_WIN_CBLAS_H
#define NCTMC_WIN_CBLAS_H
#include "scipy/cblas.h"
#define cblas_sgemm scipy_cblas_sgemm
#define cblas_sbgemm scipy_cblas_sbgemm
#define openblas_set_num_threads scipy_openblas_set_num_threads
#define openblas_get_config scipy_openblas_get_config
#endif
H
if cmp -s "$dir/include/cblas.h.new" "$dir/include/cblas.h"; then
    rm "$dir/include/cblas.h.new"
else
    mv "$dir/include/cblas.h.new" "$dir/include/cblas.h"
fi
