"""Builds libnctmc.so.1 for the wheel: configures the repository's meson
project (its source folder, argv[1]) in argv[2], a folder of the Python
package's build, builds the shared library only — not the tool, tests or
benchmarks — and copies it to argv[3].

The build is the library's release build for the CPU backend (OpenBLAS,
found by pkg-config as for any build); the CUDA module is left to an
installed library (NCTMC_LIBRARY, docs/python.md). Rebuilding reuses the
folder: ninja redoes only what changed.
"""
import os
import shutil
import subprocess
import sys


def main(source, build, output):
    meson = [sys.executable, "-m", "mesonbuild.mesonmain"] if shutil.which("meson") is None \
        else ["meson"]
    if not os.path.exists(os.path.join(build, "build.ninja")):
        subprocess.run(meson + ["setup", build, source, "--buildtype=release",
                                "-Dcuda=disabled", "-Dreference_tests=disabled",
                                "-Db_ndebug=if-release"], check=True)
    subprocess.run(["ninja", "-C", build, "libnctmc.so.1"], check=True)
    # a copy, not the soname's link: the wheel holds one regular file
    shutil.copyfile(os.path.join(build, "libnctmc.so.1"), output)


if __name__ == "__main__":
    main(*sys.argv[1:4])
