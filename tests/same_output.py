#!/usr/bin/python3
"""Runs two programs and passes when their standard outputs are identical
(and both exit 0). Prints 'vector_clones: N passed, N failed'."""
import subprocess
import sys

outs = []
for exe in sys.argv[1:3]:
    r = subprocess.run([exe], capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        print("vector_clones: 0 passed, 1 failed")
        sys.exit(1)
    outs.append(r.stdout.strip())
same = outs[0] == outs[1] and outs[0] != ""
print("shipped build: %s\nbaseline-only build: %s" % (outs[0], outs[1]))
print("vector_clones: %d passed, %d failed" % (1 if same else 0, 0 if same else 1))
sys.exit(0 if same else 1)
