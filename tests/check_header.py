#!/usr/bin/python3
"""Compiles tests/header_check.c, which uses all of nctmc.h, as every C
standard from C89 to C2x and every C++ standard from C++11 to C++20, with
-Wall -Wextra -pedantic -Werror: the public header must stay clean for host
programs and bindings of any of them.

Usage: check_header.py "C_COMPILER" "CXX_COMPILER or empty" SOURCE INCLUDE_DIR
(a compiler may be a command with arguments, e.g. "ccache cc").
"""
import shlex
import subprocess
import sys

cc, cxx, source, include = sys.argv[1:5]
FLAGS = ["-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only", "-I", include]
runs = [(cc, "c", std) for std in ("c89", "c99", "c11", "c17", "c2x")]
if cxx:
    runs += [(cxx, "c++", std) for std in ("c++11", "c++14", "c++17", "c++20")]
failed = 0
for compiler, language, std in runs:
    cmd = shlex.split(compiler) + ["-x", language, "-std=" + std] + FLAGS + [source]
    run = subprocess.run(cmd, capture_output=True, text=True)
    ok = run.returncode == 0
    failed += not ok
    print(("ok   " if ok else "FAIL ") + std + ("" if ok else ": " + run.stderr.strip()[:2000]))
if not cxx:
    print("no C++ compiler found: C++ not checked")
print("header: %d passed, %d failed" % (len(runs) - failed, failed))
sys.exit(1 if failed else 0)
