#!/usr/bin/env python3
"""The gradient's noise under each time density the trainer offers,
measured on the trainer itself: the check of time_variance.py's proxy (the
loss's variance) against the thing it stands for.

  gradient_noise.py U.ckpt M.ckpt --source copychain [--rows 19200]
                    [--batch 128] [--out noise.json]

How. Each checkpoint's EMA weights get a trainer with learning rate 0 and
no weight decay, so every step computes the gradient of one batch at the
same weights and changes nothing (checked: the model's output is the same
before and after). For a batch of B fresh source sequences with times
drawn from density p (stratified over the batch as always),

  E |g_B|^2 = |mu|^2 + T_p / B,

mu the full gradient (the same for every density: each is unbiased) and
T_p the noise of one row, the figure a density changes. The trainer
reports |g| before clipping. E |g_B|^2 is averaged over `--rows` / B
steps at the budget's B for each density (eight times as many for the
uniform density, whose tail is the heaviest), and |mu|^2 comes from the
sqrt density at two batch sizes, B and B / 8:

  |mu|^2 = (B G(B) - b G(b)) / (B - b),   T_p = B (G_p(B) - |mu|^2),

an estimate of |mu|^2 below 0 taken as 0 (both reported, with the
estimate's standard error). On trained models |mu|^2 is small: in the
runs of research/2026-11-28-time-density-variance.md it was within its standard error of 0, and B
times that error was 3-8% of T.

Reported: T_p / T_sqrt for each density, beside time_variance.py's
stratified ratio where its JSON is given (--proxy). The standard errors
are those of the step means; the gradient norms are heavy-tailed at small
t, so the uniform density's are the widest.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_quality as BQ  # noqa: E402  (sets up the binding's path)
import nctmc  # noqa: E402
import sources as S  # noqa: E402

DENSITIES = ("sqrt", "logit", "uniform")


def mean_sq_norm(path, ctx, source, density, batch, steps, seed):
    """Mean and standard error of |g|^2 over `steps` steps at batch `batch`,
    and whether the weights stayed put."""
    model = nctmc.Model.load(path, ctx)
    probe = source.sample(4, np.random.default_rng(BQ.HELDOUT_SEED))   # held-out rows
    t_probe = np.linspace(0.05, 0.95, 4).astype(np.float32)
    before = model.forward(probe, t_probe)
    trainer = nctmc.Trainer(model, batch_size=batch, learning_rate=0.0, weight_decay=0.0,
                            warmup_steps=0, time_sampling=density, seed=seed)
    rng = np.random.default_rng(seed)
    g2 = np.array([trainer.step(source.sample(batch, rng))["grad_norm"] ** 2
                   for _ in range(steps)])
    after = model.forward(probe, t_probe)
    frozen = all(np.array_equal(a, b) for a, b in zip(before, after))
    return float(g2.mean()), float(g2.std(ddof=1) / math.sqrt(steps)), frozen


def decompose(big, g_big, small, g_small):
    """(|mu|^2, T) from E|g|^2 at two batch sizes."""
    mu2 = (big * g_big - small * g_small) / (big - small)
    return mu2, big * (g_big - mu2)


def analyse(path, args, source):
    ctx = nctmc.Context(backend="cpu", threads=args.threads)
    B, b = args.batch, max(2, args.batch // 8)
    runs, frozen = {}, True
    for density in DENSITIES:
        steps = max(2, (8 if density == "uniform" else 1) * args.rows // B)
        runs[density] = mean_sq_norm(path, ctx, source, density, B, steps, args.seed)
        frozen &= runs[density][2]
    small = mean_sq_norm(path, ctx, source, "sqrt", b, max(2, args.rows // b), args.seed + 1)
    frozen &= small[2]
    mu2_raw, _ = decompose(B, runs["sqrt"][0], b, small[0])
    mu2_se = math.hypot(B * runs["sqrt"][1], b * small[1]) / (B - b)
    mu2 = max(0.0, mu2_raw)     # a square: an estimate below 0 is noise about 0
    noise = {d: B * (runs[d][0] - mu2) for d in DENSITIES}
    return {"checkpoint": path, "batch": B, "small_batch": b, "mu2": mu2,
            "mu2_estimate": mu2_raw, "mu2_se": mu2_se,
            "weights_unchanged": frozen,
            "densities": [{"density": d, "mean_sq_norm": runs[d][0], "se": runs[d][1],
                           "noise": noise[d], "noise_vs_sqrt": noise[d] / noise["sqrt"],
                           "noise_vs_sqrt_se": B * runs[d][1] / noise["sqrt"]}
                          for d in DENSITIES],
            "small": {"mean_sq_norm": small[0], "se": small[1]}}


def proxy_ratios(path, checkpoint):
    """time_variance.py's stratified ratios for the same checkpoint."""
    for r in json.load(open(path))["results"]:
        if os.path.basename(r["checkpoint"]) == os.path.basename(checkpoint):
            return {d["density"]: d["stratified_vs_sqrt"] for d in r["densities"]}
    return {}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    BQ.add_analysis_args(ap)
    ap.add_argument("--rows", type=int, default=19200, help="sequences per density")
    ap.add_argument("--batch", type=int, default=128, help="the budget's batch")
    ap.add_argument("--proxy", help="time_variance.py's JSON for the same checkpoints")
    args = ap.parse_args(argv)
    if args.batch < 16 or args.rows < args.batch:
        ap.error("need --batch >= 16 and --rows >= --batch")
    source = S.make_source(args.source)
    cpu0 = time.process_time()
    results = []
    for path in args.checkpoints:
        r = analyse(path, args, source)
        proxy = proxy_ratios(args.proxy, path) if args.proxy else {}
        print("%s: |mu|^2 %.4g (estimate %.4g +- %.4g; B |mu|^2 against T_sqrt: %.3f), "
              "weights unchanged: %s" % (path, r["mu2"], r["mu2_estimate"], r["mu2_se"],
                                         r["batch"] * r["mu2"] / r["densities"][0]["noise"],
                                         r["weights_unchanged"]))
        print("| density | E|g|^2 at B %d | noise T | T / T_sqrt | loss proxy |" % r["batch"])
        print("|---|---|---|---|---|")
        for d in r["densities"]:
            d["proxy_vs_sqrt"] = proxy.get(d["density"])
            print("| %s | %.4f +- %.4f | %.3f | %.3f +- %.3f | %s |"
                  % (d["density"], d["mean_sq_norm"], d["se"], d["noise"], d["noise_vs_sqrt"],
                     d["noise_vs_sqrt_se"], "%.3f" % d["proxy_vs_sqrt"]
                     if d["proxy_vs_sqrt"] is not None else "-"))
        results.append(r)
    out = {"source": args.source, "rows": args.rows, "seed": args.seed, "results": results,
           "cpu_seconds": time.process_time() - cpu0}
    if args.out:
        BQ.write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
