#!/usr/bin/env python3
"""Sets the output of tests/bench/bench_gpu_train.c (libnctmc, CUDA) beside
that of tests/reference/bench_reference_gpu.py (PyTorch) from the same GPU.

    compare_torch_gpu.py LIBNCTMC_LOG TORCH_LOG

Prints, per measurement, precision and PyTorch attention variant:
    bench=train_step compare=libnctmc/torch precision=bf16 torch_attention=sdpa
          libnctmc_ms=... torch_ms=... speedup=... libnctmc_mfu=... torch_mfu=...
speedup = torch time / libnctmc time (above 1: libnctmc is faster).
"""
import sys


def records(path):
    out = []
    with open(path) as f:
        for line in f:
            fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
            if "bench" in fields and "impl" in fields:
                out.append(fields)
    return out


def time_of(r):
    return float(r["ms"] if "ms" in r else r["ms_per_step"])


def main():
    ours, theirs = records(sys.argv[1]), records(sys.argv[2])
    found = 0
    for a in ours:
        if a["bench"] not in ("forward", "train_step", "sample_step"):
            continue
        for b in theirs:
            if b["bench"] != a["bench"] or b.get("precision") != a.get("precision"):
                continue
            if a["bench"] == "sample_step" and b.get("method") != a.get("method"):
                continue
            found += 1
            print("bench=%s compare=libnctmc/torch precision=%s torch_attention=%s "
                  "libnctmc_ms=%.3f torch_ms=%.3f speedup=%.2f libnctmc_mfu=%s torch_mfu=%s"
                  % (a["bench"], a["precision"], b.get("attention", "?"), time_of(a),
                     time_of(b), time_of(b) / time_of(a), a.get("mfu_bf16", "-"),
                     b.get("mfu_bf16", "-")))
    if not found:
        print("compare_torch_gpu: no measurement found in both logs")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
