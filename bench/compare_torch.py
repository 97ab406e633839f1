#!/usr/bin/python3
"""Runs libnctmc's benchmark and the PyTorch reference's on the same machine
in one go and reports each measurement side by side as a ratio.

    compare_torch.py BENCH_BINARY BENCH_REFERENCE_PY [--threads N] [--batch B]
                     [--reps R] [--config NAME]

Prints both tools' own key=value lines, then per measurement:
    bench=train_step compare=libnctmc/torch config=... threads=... batch=...
          libnctmc_ms=... torch_ms=... speedup=...
speedup = torch_ms / libnctmc_ms (above 1: libnctmc is faster).
"""
import subprocess
import sys


def parse(lines):
    out = {}
    for line in lines.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "bench" in fields:
            out[fields["bench"]] = fields
    return out


def main():
    binary, reference = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    c = subprocess.run([binary] + args, capture_output=True, text=True)
    sys.stdout.write(c.stdout)
    if c.returncode != 0:
        sys.stderr.write(c.stderr)
        return 1
    t = subprocess.run([sys.executable, reference] + args, capture_output=True, text=True)
    sys.stdout.write(t.stdout)
    if t.returncode != 0:
        sys.stderr.write(t.stderr)
        return 1
    ours, theirs = parse(c.stdout), parse(t.stdout)
    for what in ("forward", "train_step"):
        if what not in ours or what not in theirs:
            sys.stderr.write("compare_torch: no %s measurement from both sides\n" % what)
            return 1
        a, b = ours[what], theirs[what]
        print("bench=%s compare=libnctmc/torch config=%s threads=%s batch=%s libnctmc_ms=%s "
              "torch_ms=%s speedup=%.2f" % (what, a["config"], a["threads"], a["batch"],
                                           a["ms"], b["ms"], float(b["ms"]) / float(a["ms"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
