#!/usr/bin/env python3
"""Writes the module-definition (.def) file of nctmc.dll: every function
include/nctmc.h declares with NCTMC_API, and nothing else, so the DLL
exports only nctmc_* (the Windows counterpart of lib/nctmc.map).

    windows_def.py NCTMC_H OUT.def
"""
import re
import sys


def main():
    header, out = sys.argv[1], sys.argv[2]
    with open(header, encoding="utf-8") as f:
        text = f.read()
    names = sorted(set(re.findall(r"\bNCTMC_API\b[^;{]*?\b(nctmc_\w+)\s*\(", text)))
    if not names:
        sys.exit(f"windows_def.py: no NCTMC_API functions in {header}")
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        f.write("LIBRARY nctmc.dll\nEXPORTS\n")
        for n in names:
            f.write(f"    {n}\n")


if __name__ == "__main__":
    main()
