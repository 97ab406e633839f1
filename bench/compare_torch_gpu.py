#!/usr/bin/env python3
"""Sets the output of bench/bench_gpu_train.c (libnctmc, CUDA) beside
that of tests/reference/bench_reference_gpu.py (PyTorch: eager, and
torch.compile with --compile) from the same GPU.

    compare_torch_gpu.py LIBNCTMC_LOG TORCH_LOG [TORCH_LOG ...]

Prints, per measurement, precision, batch and PyTorch variant:
    bench=train_step compare=libnctmc/torch precision=bf16 batch=16
          torch_impl=torch-compile torch_attention=sdpa libnctmc_ms=...
          torch_ms=... speedup=... libnctmc_mfu=... torch_mfu=...
speedup = torch time / libnctmc time (above 1: libnctmc is faster); then
a Markdown table of the same with the fastest eager variant, torch.compile,
and the device memory of each, and the sampling-step and kernel lines.
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


def batch_of(r):
    return r.get("batch", "?")


def same_measurement(a, b):
    if b["bench"] != a["bench"] or b.get("precision") != a.get("precision"):
        return False
    if batch_of(a) != batch_of(b):
        return False
    return a["bench"] != "sample_step" or b.get("method") == a.get("method")


def pairs(ours, theirs):
    for a in ours:
        if a["bench"] not in ("forward", "train_step", "sample_step"):
            continue
        for b in theirs:
            if same_measurement(a, b):
                yield a, b


def table(ours, theirs):
    print("\n| measurement | libnctmc ms | eager PyTorch ms (best) | torch.compile ms | "
          "libnctmc vs compile | libnctmc MFU | compile MFU |")
    print("|---|---|---|---|---|---|---|")
    for a in ours:
        if a["bench"] not in ("forward", "train_step", "sample_step"):
            continue
        matches = [b for b in theirs if same_measurement(a, b)]
        eager = [time_of(b) for b in matches if b["impl"] == "torch"]
        comp = [b for b in matches if b["impl"] == "torch-compile"]
        name = "%s %s batch %s%s" % (a["bench"], a["precision"], batch_of(a),
                                     " " + a["method"] if "method" in a else "")
        e = "%.2f" % min(eager) if eager else "—"
        c = "%.2f" % time_of(comp[0]) if comp else "—"
        r = "%.2f×" % (time_of(comp[0]) / time_of(a)) if comp else "—"
        cm = comp[0].get("mfu_bf16", "—") if comp else "—"
        print("| %s | %.2f | %s | %s | %s | %s | %s |"
              % (name, time_of(a), e, c, r, a.get("mfu_bf16", "—"), cm))
    mem = [r for r in ours if r["bench"] == "memory"]
    tmem = [b for b in theirs if "device_used_mib" in b and b["bench"] == "train_step"]
    if mem or tmem:
        print("\n| device memory, train step | MiB in use at most (whole device) |")
        print("|---|---|")
        for r in mem:
            print("| libnctmc %s batch %s | %s |" % (r["precision"], batch_of(r),
                                                   r["peak_device_mib"]))
        for b in tmem:
            print("| %s %s %s batch %s | %s (tensors at most: %s) |"
                  % (b["impl"], b["precision"], b.get("attention", ""), batch_of(b),
                     b["device_used_mib"], b.get("peak_alloc_mib", "?")))
    for r in ours:
        if r["bench"] == "kernel":
            print("kernel %s %s: %s ms (%s GB/s%s)"
                  % (r["op"], r.get("method", ""), r["ms"], r["gb_per_s"],
                     ", moved " + r["moved"] if "moved" in r else ""))


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    ours = records(sys.argv[1])
    theirs = [r for path in sys.argv[2:] for r in records(path)]
    found = 0
    for a, b in pairs(ours, theirs):
        found += 1
        print("bench=%s compare=libnctmc/torch precision=%s batch=%s torch_impl=%s "
              "torch_attention=%s libnctmc_ms=%.3f torch_ms=%.3f speedup=%.2f "
              "libnctmc_mfu=%s torch_mfu=%s"
              % (a["bench"], a["precision"], batch_of(a), b["impl"], b.get("attention", "?"),
                 time_of(a), time_of(b), time_of(b) / time_of(a), a.get("mfu_bf16", "-"),
                 b.get("mfu_bf16", "-")))
    if not found:
        print("compare_torch_gpu: no measurement found in both logs")
        return 1
    table(ours, theirs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
