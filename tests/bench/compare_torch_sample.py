#!/usr/bin/python3
"""Runs libnctmc's sampling benchmark and the PyTorch reference's sampling
step on the same machine in one go and reports them side by side.

    compare_torch_sample.py BENCH_SAMPLE_STEP BENCH_REFERENCE_PY
                            [--threads N] [--batches 1,8] [--reps R] [--config NAME]

Compares libnctmc's tau-leaping step (model evaluation + the fused sampling
operation) with the reference's (forward, rates, Bernoulli jumps, a
multinomial draw per position), per batch size:
    bench=sample_step compare=libnctmc/torch config=... threads=... batch=...
          libnctmc_ms=... torch_ms=... speedup=...
speedup = torch_ms / libnctmc_ms (above 1: libnctmc is faster).
"""
import argparse
import subprocess
import sys


def fields_of(line):
    return dict(f.split("=", 1) for f in line.split() if "=" in f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench")
    ap.add_argument("reference")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--reps", default="3")
    ap.add_argument("--config", default="cpu-small")
    a = ap.parse_args()
    c = subprocess.run([a.bench, "--threads", a.threads, "--batches", a.batches, "--steps", "8",
                        "--reps", a.reps, "--config", a.config], capture_output=True, text=True)
    sys.stdout.write(c.stdout)
    if c.returncode != 0:
        sys.stderr.write(c.stderr)
        return 1
    ours = {}
    for line in c.stdout.splitlines():
        f = fields_of(line)
        if f.get("bench") == "sample_step" and f.get("method") == "tau-leaping":
            ours[f["batch"]] = f
    for batch in a.batches.split(","):
        t = subprocess.run([sys.executable, a.reference, "--threads", a.threads, "--batch", batch,
                            "--reps", a.reps, "--config", a.config, "--measure", "sample_step"],
                           capture_output=True, text=True)
        sys.stdout.write(t.stdout)
        if t.returncode != 0:
            sys.stderr.write(t.stderr)
            return 1
        theirs = [fields_of(l) for l in t.stdout.splitlines() if "bench=sample_step" in l]
        if batch not in ours or not theirs:
            sys.stderr.write("compare_torch_sample: no batch %s measurement from both sides\n"
                             % batch)
            return 1
        mine, ref = ours[batch], theirs[0]
        print("bench=sample_step compare=libnctmc/torch config=%s threads=%s batch=%s "
              "libnctmc_ms=%s torch_ms=%s speedup=%.2f"
              % (mine["config"], mine["threads"], batch, mine["ms_per_step"], ref["ms"],
                 float(ref["ms"]) / float(mine["ms_per_step"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
