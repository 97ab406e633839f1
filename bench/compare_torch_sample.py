#!/usr/bin/python3
"""Runs libnctmc's sampling benchmark and the PyTorch reference's sampling
step on the same machine in one go and reports them side by side, on an idle
machine and while other processes keep cores busy.

    compare_torch_sample.py BENCH_SAMPLE_STEP BENCH_REFERENCE_PY
                            [--threads N] [--batches 1,4] [--steps 8,16,32]
                            [--reps R] [--config NAME] [--load 0,1]
                            [--rounds K] [--weights f32,bf16,int8]

Compares libnctmc's tau-leaping step (model evaluation + the fused sampling
operation) with the reference's (forward, rates, Bernoulli jumps, a
multinomial draw per position), per background load and batch size:
    bench=sample_step compare=libnctmc/torch load=L round=1 config=... threads=...
          batch=... libnctmc_ms=... torch_ms=... speedup=...
and the latency of a whole sampling call of each number of steps (the
reference chains the same steps, each one's tokens feeding the next):
    bench=sample compare=libnctmc/torch load=L round=1 ... batch=... steps=...
          libnctmc_ms=... torch_ms=... speedup=...
speedup = torch_ms / libnctmc_ms (above 1: libnctmc is faster).

--rounds K repeats each pair of measurements K times, the two sides taking
turns, so a change in the machine's other load hits both sides alike; every
round prints its own lines (round=i), and with K > 1 a summary per pair
gives the median speedup and its range:
    bench=... summary=1 ... speedup_median=... speedup_min=... speedup_max=...

--weights lists the weight types of libnctmc's model (f32 by default; bf16
and int8 are nctmc_model_convert() copies of the same random model): each is
measured in every round against the same reference measurements (the
reference is always float32), and its lines carry weights=W.

--load lists the background loads to measure under, in this one run: L
processes, each a busy loop that keeps one core busy the way a host
application would, run for the whole of both sides' measurements at that
load and stopped afterwards. The system's load average is printed before
each load level (other work on the machine shows there).
"""
import argparse
import os
import subprocess
import sys
import time

# a process that keeps one core busy and does nothing else
BUSY_LOOP = "while True:\n    pass\n"


def fields_of(line):
    return dict(f.split("=", 1) for f in line.split() if "=" in f)


def run(cmd):
    c = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(c.stdout)
    sys.stdout.flush()
    if c.returncode != 0:
        sys.stderr.write(c.stderr)
        raise SystemExit("compare_torch_sample: %s failed" % cmd[0])
    return [fields_of(l) for l in c.stdout.splitlines()]


def start_load(n):
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(n)]
    time.sleep(0.5)  # let them reach their loop before anything is timed
    return procs


def stop_load(procs):
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def ours_per_batch(a, steps, first, weights):
    """libnctmc's tau-leaping lines for every batch at `steps` steps."""
    cmd = [a.bench, "--threads", a.threads, "--batches", a.batches, "--steps", str(steps),
           "--reps", a.reps, "--config", a.config, "--method", "tau", "--weights", weights]
    if not first:
        cmd += ["--parts", "sample"]
    return {f["batch"]: f for f in run(cmd)
            if f.get("bench") == "sample_step" and f.get("method") == "tau-leaping"}


def theirs(a, batch, steps, first):
    """The reference's step (first round only) and its `steps`-step run."""
    measure = "sample_step,sample" if first else "sample"
    lines = run([sys.executable, a.reference, "--threads", a.threads, "--batch", batch,
                 "--reps", a.reps, "--config", a.config, "--measure", measure,
                 "--steps", str(steps)])
    return {f["bench"]: f for f in lines if f.get("impl") == "torch"}


def compare(kind, load, a, batch, extra, mine_ms, their_ms, rnd, speedups):
    speedup = float(their_ms) / float(mine_ms)
    speedups.setdefault((kind, batch, extra), []).append(speedup)
    print("bench=%s compare=libnctmc/torch load=%d round=%d config=%s threads=%s batch=%s%s "
          "libnctmc_ms=%s torch_ms=%s speedup=%.2f"
          % (kind, load, rnd, a.config, a.threads, batch, extra, mine_ms, their_ms, speedup),
          flush=True)


def summarise(a, load, speedups):
    for (kind, batch, extra), v in speedups.items():
        v = sorted(v)
        mid = v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])
        print("bench=%s compare=libnctmc/torch summary=1 load=%d rounds=%d config=%s "
              "threads=%s batch=%s%s speedup_median=%.2f speedup_min=%.2f speedup_max=%.2f"
              % (kind, load, len(v), a.config, a.threads, batch, extra, mid, v[0], v[-1]),
              flush=True)


def measure_round(a, load, rnd, speedups):
    for i, steps in enumerate(int(s) for s in a.steps.split(",")):
        ours = {w: ours_per_batch(a, steps, i == 0, w) for w in a.weights.split(",")}
        for batch in a.batches.split(","):
            ref = theirs(a, batch, steps, i == 0)
            for w, mine_w in ours.items():
                if batch not in mine_w or "sample" not in ref:
                    raise SystemExit("compare_torch_sample: no batch %s measurement from "
                                     "both sides" % batch)
                mine = mine_w[batch]
                if i == 0:
                    compare("sample_step", load, a, batch, " weights=%s" % w,
                            mine["ms_per_step"], ref["sample_step"]["ms"], rnd, speedups)
                compare("sample", load, a, batch, " steps=%d weights=%s" % (steps, w),
                        mine["sample_ms"], ref["sample"]["ms"], rnd, speedups)


def measure_at_load(a, load):
    print("# load=%d: %d busy process(es); load average before: %.2f %.2f %.2f"
          % ((load, load) + os.getloadavg()), flush=True)
    procs = start_load(load)
    speedups = {}
    try:
        for rnd in range(1, a.rounds + 1):
            measure_round(a, load, rnd, speedups)
    finally:
        stop_load(procs)
    if a.rounds > 1:
        summarise(a, load, speedups)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench")
    ap.add_argument("reference")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--steps", default="8",
                    help="comma-separated step counts of the whole-call latency")
    ap.add_argument("--reps", default="3")
    ap.add_argument("--config", default="cpu-small")
    ap.add_argument("--load", default="0",
                    help="comma-separated numbers of busy background processes")
    ap.add_argument("--weights", default="f32",
                    help="comma-separated weight types of libnctmc's model: f32, bf16, int8")
    ap.add_argument("--rounds", type=int, default=1,
                    help="times each pair is measured, the sides taking turns")
    a = ap.parse_args()
    for load in (int(l) for l in a.load.split(",")):
        measure_at_load(a, load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
