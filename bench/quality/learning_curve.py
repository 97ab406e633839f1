#!/usr/bin/env python3
"""Learning curves for issue 9: held-out NELBO of one process against
training tokens, from one run with a constant learning rate (after the
warm-up) evaluated at fixed steps, so that every point is what a run of
that length would give with the paper's constant-rate recipe.

  learning_curve.py run --source copychain --process uniform --out U.json
  learning_curve.py run ... --resume U.ckpt --previous U.json --points ... --out U2.json
  learning_curve.py run ... --time-sampling sqrt --out U_sqrt.json
  learning_curve.py run ... --d-model 256 --heads 8 --out U_d256.json
  learning_curve.py table U.json M.json [...]
  learning_curve.py paired U.ckpt M.ckpt --source copychain [--time-samples 256]
                    [--eval-time-sampling sqrt]

The size, batch, learning rate, warm-up and EMA are the quality benchmark's
CPU budget (research/quality-benchmark.md, "The budget (CPU)"), except that the rate stays
constant instead of decaying (a cosine that ends at the last step would make
each intermediate point a different schedule); the model's defaults are the
library's (log-SNR time input, noise-posterior link; --exit-link picks
another). Every step trains on
fresh source samples; every point evaluates the EMA weights on the same
held-out sequences (bench_quality.py's HELDOUT_SEED). The table sets the
processes of a source side by side with the gap and its ratio to the
source's entropy (one table per model size). Nothing is tuned to a process:
both get the same settings. --layers / --d-model / --heads / --cond-dim change
the model's size alone (everything else stays the budget's), for curves of
the gap against model size. --lr changes the constant learning rate alone,
for a sweep of the rate per process and size (each process at its own best
rate is still equal budget: the same steps, batch and model). --batch
changes the sequences per step alone (the rate stays), for curves against
training tokens at another batch: whether a process gains more from a
less noisy gradient than from more steps. --grad-clip changes the
gradient-norm limit alone (0 = off); every point records the norms (before
clipping) of the steps since the last one: median, 90th percentile, largest
and the share above the default limit of 1.

--cooldown N (with --resume) ends a constant-rate run the way a
warm-up / stable / decay schedule does: from the resumed step the rate
follows a cosine from the peak towards 0, reached at the resumed step + N
(the last step taken runs at peak·(1 + cos(π(N−1)/N))/2), so the points after it say
how much of a process's loss at the constant rate was the rate's noise.

`paired` measures the NELBO gaps between checkpoints (trainer or model
files: the EMA weights; each against the last) more tightly than separate
figures can: all evaluate the same held-out sequences with the same time
samples, in chunks,
and the gap's standard error comes from the spread of the per-chunk gaps, so
what a sequence's difficulty adds to both cancels; more time samples per
sequence shrink the rest (the uniform process's per-sequence estimates are
heavy-tailed at small t; --eval-time-sampling sqrt removes most of that
tail by spreading the time samples evenly in sqrt t, importance-weighted).

--resume continues a run from the trainer checkpoint its --checkpoint saved
(the trainer's next step is the one the run would have taken: same weights,
moments, EMA and constant rate), to the further --points, and writes the
--previous JSON's curve followed by the new points. Its training batches
come from a fresh stream (seeded by the step it resumes at), as every batch
is a fresh draw from the source anyway.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_quality as BQ  # noqa: E402  (sets up the binding's path)
import nctmc  # noqa: E402
import sources as S  # noqa: E402

DEFAULT_POINTS = "250,500,1000,2000,3000,4000"


def run(args):
    source = S.make_source(args.source)
    ctx = nctmc.Context(backend="cpu", threads=args.threads)
    budget = run_budget(args)
    cfg = dict(vocab_size=source.vocab + (0 if args.process == "uniform" else 1),
               seq_len=source.length, n_layers=args.layers or budget["layers"],
               d_model=args.d_model or budget["d_model"], n_heads=args.heads or budget["heads"],
               cond_dim=args.cond_dim or budget["cond"], process=args.process, seed=args.seed)
    if args.exit_link:
        cfg["exit_link"] = args.exit_link
    if args.mixture_uniform is not None:
        if args.process != "mixture":
            raise SystemExit("learning_curve: --mixture-uniform is for --process mixture")
        cfg["mixture_uniform"] = args.mixture_uniform
    points = sorted(int(p) for p in args.points.split(","))
    curve, step, cpu_before = [], 0, 0.0
    if args.resume:
        trainer, previous = resume(args, ctx, cfg, budget)
        curve, step = list(previous["curve"]), trainer.state["step"]
        cpu_before = curve[-1]["cpu_seconds"] if curve else 0.0
        points = [p for p in points if p > step]
        if args.cooldown and (not points or points[-1] > step + args.cooldown):
            raise SystemExit("learning_curve: with --cooldown %d the points must lie in "
                             "(%d, %d]" % (args.cooldown, step, step + args.cooldown))
    elif args.cooldown:
        raise SystemExit("learning_curve: --cooldown needs --resume")
    else:
        model = nctmc.Model.create(ctx, **cfg)
        trainer = nctmc.Trainer(model, batch_size=budget["batch"], learning_rate=budget["lr"],
                                warmup_steps=budget["warmup"], total_steps=points[-1],
                                min_lr_ratio=1.0, ema_decay=budget["ema"], seed=args.seed,
                                time_sampling=args.time_sampling, grad_clip=budget["grad_clip"])
    start_step = step
    heldout = source.sample(args.eval_seqs, np.random.default_rng(BQ.HELDOUT_SEED))
    data_rng = np.random.default_rng([args.seed, 1] + ([step] if args.resume else []))
    ema_model = nctmc.Model.create(ctx, **cfg)
    cpu0 = time.process_time() - cpu_before
    for point in points:
        norms = []
        while step < point:
            n = min(50, point - step)
            batch = source.sample(n * budget["batch"], data_rng).reshape(
                n, budget["batch"], source.length)
            for k in range(n):
                stats = trainer.step(batch[k])
                lr = stats["learning_rate"]
                norms.append(stats["grad_norm"])
            step += n
        trainer.copy_weights_to(ema_model, ema=True)
        ev = ema_model.eval(heldout, time_samples=args.eval_time_samples, batch_size=128, seed=0)
        curve.append({"step": step, "tokens": step * budget["batch"] * source.length,
                      "nelbo": ev["nelbo_bits_per_token"], "se": ev["std_error_bits"],
                      "cpu_seconds": time.process_time() - cpu0, "learning_rate": lr,
                      "grad_norm": grad_norm_record(norms)})
        print("%s %s step %d: NELBO %.4f +- %.4f (%.0f s CPU)"
              % (args.source, args.process, step, curve[-1]["nelbo"], curve[-1]["se"],
                 curve[-1]["cpu_seconds"]), file=sys.stderr, flush=True)
    if args.checkpoint:   # for bench_quality.py run --from-checkpoint (samples)
        trainer.save(args.checkpoint)
    ref, _ = S.source_reference(source, n=20000, seed=BQ.REFERENCE_SEED)
    out = {"source": args.source, "process": args.process, "config": cfg,
           "budget": budget_record(budget),
           "schedule": "constant after warm-up", "time_sampling": args.time_sampling,
           "cooldown": ({"from_step": start_step, "steps": args.cooldown, "to_ratio": 0.0}
                        if args.cooldown else None),
           "eval_seqs": args.eval_seqs,
           "eval_time_samples": args.eval_time_samples, "threads": args.threads,
           "entropy_bits_per_token": ref["entropy_bits_per_token"], "curve": curve}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


def grad_norm_record(norms):
    """The gradient norms (before clipping) of the steps since the last
    point: how often the budget's limit of 1 was in force, and how far."""
    g = np.asarray(norms, dtype=float)
    return {"median": float(np.median(g)), "p90": float(np.percentile(g, 90)),
            "max": float(g.max()), "share_over_1": float(np.mean(g > 1.0))}


def run_budget(args):
    """The CPU budget, with --lr in place of its learning rate and --batch in
    place of its batch when given (the JSON records both, so --resume refuses
    a run of another)."""
    budget = dict(BQ.BUDGETS["cpu"])
    if args.lr is not None:
        if not args.lr > 0:
            raise SystemExit("learning_curve: --lr must be positive")
        budget["lr"] = args.lr
    if args.batch is not None:
        if args.batch < 1:
            raise SystemExit("learning_curve: --batch must be at least 1")
        budget["batch"] = args.batch
    # the library's default limit unless --grad-clip says otherwise
    budget["grad_clip"] = 1.0 if args.grad_clip is None else args.grad_clip
    if not budget["grad_clip"] >= 0:
        raise SystemExit("learning_curve: --grad-clip must be >= 0 (0 = off)")
    return budget


def budget_record(budget):
    """The part of the budget a run's JSON records and --resume compares:
    one list, so that the record and the check cannot drift apart."""
    return {k: budget[k] for k in ("batch", "lr", "warmup", "ema", "grad_clip")}


def resume(args, ctx, cfg, budget):
    """The trainer of --resume, checked against the --previous run's record:
    the same source, process, model and budget, evaluated the same way."""
    if not args.previous:
        raise SystemExit("learning_curve: --resume needs --previous (the run's JSON)")
    previous = json.load(open(args.previous))
    same = (previous["source"] == args.source and previous["process"] == args.process and
            previous["config"] == cfg and previous["eval_seqs"] == args.eval_seqs and
            previous["eval_time_samples"] == args.eval_time_samples and
            previous.get("time_sampling", "uniform") == args.time_sampling and
            # runs recorded before --grad-clip existed clipped at 1
            dict({"grad_clip": 1.0}, **previous["budget"]) == budget_record(budget))
    if not same:
        raise SystemExit("learning_curve: %s is not a run of these settings" % args.previous)
    if previous.get("cooldown"):
        raise SystemExit("learning_curve: %s ended with a cooldown (its rate is 0 now)"
                         % args.previous)
    if args.cooldown:
        # the saved run's parameters with the warm-up's end moved to the
        # resumed step: the cosine then starts at the peak there and reaches
        # 0 at step + cooldown (warm-up, stable rate, decay)
        saved = nctmc.Trainer.inspect(args.resume, ctx)
        at = saved["state"]["step"]
        params = dict(saved["params"], warmup_steps=at, total_steps=at + args.cooldown,
                      min_lr_ratio=0.0)
        trainer = nctmc.Trainer.resume(args.resume, ctx, **params)
    else:
        trainer = nctmc.Trainer.resume(args.resume, ctx)
    step = trainer.state["step"]
    if not previous["curve"] or previous["curve"][-1]["step"] != step:
        raise SystemExit("learning_curve: %s is at step %d, %s ends elsewhere"
                         % (args.resume, step, args.previous))
    return trainer, previous


def paired(args):
    """Every checkpoint on the same sequences and time samples; each one's
    gap to the last (the reference), with the gap's standard error from the
    spread of the per-chunk gaps."""
    paths = args.checkpoints
    if len(paths) < 2:
        raise SystemExit("learning_curve paired: give two checkpoints or more")
    source = S.make_source(args.source)
    ctx = nctmc.Context(backend="cpu", threads=args.threads)
    models = [nctmc.Model.load(p, ctx) for p in paths]
    heldout = source.sample(args.eval_seqs, np.random.default_rng(BQ.HELDOUT_SEED))
    chunks = np.array_split(heldout, args.chunks)
    per = np.zeros((len(models), len(chunks)))
    cpu0 = time.process_time()
    for c, x in enumerate(chunks):
        for k, m in enumerate(models):
            per[k, c] = m.eval(x, time_samples=args.time_samples, batch_size=128, seed=c,
                               time_sampling=args.eval_time_sampling)["nelbo_bits_per_token"]
    sizes = np.array([len(x) for x in chunks], dtype=float)
    w = sizes / sizes.sum()
    mean = per @ w
    # the weighted mean's standard error from the spread of the chunks
    def se(v):
        m = v @ w
        return float(np.sqrt(np.sum(w ** 2 * (v - m) ** 2) * len(v) / (len(v) - 1)))
    ref, _ = S.source_reference(source, n=20000, seed=BQ.REFERENCE_SEED)
    out = {"source": args.source, "checkpoints": paths, "eval_seqs": args.eval_seqs,
           "time_samples": args.time_samples, "chunks": args.chunks,
           "eval_time_sampling": args.eval_time_sampling,
           "entropy_bits_per_token": ref["entropy_bits_per_token"],
           "nelbo": [float(v) for v in mean], "se": [se(v) for v in per],
           "gap_vs_last": [float((v - per[-1]) @ w) for v in per[:-1]],
           "se_gap_vs_last": [se(v - per[-1]) for v in per[:-1]],
           # [checkpoint][chunk], with the chunks' weights: any other pair's
           # gap and its error follow from these
           "per_chunk": per.tolist(), "chunk_weights": w.tolist()}
    if len(paths) == 2:   # the two-checkpoint record's keys, as before
        out.update({"a": paths[0], "b": paths[1], "nelbo_a": out["nelbo"][0],
                    "se_a": out["se"][0], "nelbo_b": out["nelbo"][1], "se_b": out["se"][1],
                    "gap_a_minus_b": out["gap_vs_last"][0],
                    "se_gap": out["se_gap_vs_last"][0]})
    out["cpu_seconds"] = time.process_time() - cpu0
    print("%s: %d sequences x %d time samples (%s in t), %d chunks; entropy %.4f"
          % (args.source, args.eval_seqs, args.time_samples, args.eval_time_sampling,
             args.chunks, out["entropy_bits_per_token"]))
    for k, p in enumerate(paths):
        gap = ("   - last %+.4f +- %.4f" % (out["gap_vs_last"][k], out["se_gap_vs_last"][k])
               if k < len(paths) - 1 else "   (the reference)")
        print("  %-50s %.4f +- %.4f%s" % (p, out["nelbo"][k], out["se"][k], gap))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


def table(paths):
    runs = [json.load(open(p)) for p in paths]
    def size(r):
        c = r["config"]
        return (c["n_layers"], c["d_model"], c["n_heads"], c["cond_dim"])
    for src, sz in sorted({(r["source"], size(r)) for r in runs}):
        group = [r for r in runs if r["source"] == src and size(r) == sz]
        by = {r["process"]: r for r in group}
        if len(by) < len(group):
            raise SystemExit("learning_curve table: one run per process, source and size")
        H = next(iter(by.values()))["entropy_bits_per_token"]
        names = sorted(by)
        sampling = sorted({r.get("time_sampling", "uniform") for r in by.values()})
        print("\n%s, %d layers, d %d, %d heads, cond %d (source entropy %.4f bits/token; "
              "training time sampling %s)\n" % ((src,) + sz + (H, " / ".join(sampling))))
        head = "| steps | tokens | " + " | ".join("%s NELBO" % n for n in names)
        if "uniform" in by and "masked" in by:
            head += " | uniform − masked | gap / entropy"
        print(head + " |")
        print("|" + "---|" * (head.count("|") - 0))
        steps = sorted({c["step"] for r in by.values() for c in r["curve"]})
        for s in steps:
            cells, vals = [], {}
            for n in names:
                c = [c for c in by[n]["curve"] if c["step"] == s]
                if c:
                    vals[n] = c[0]
                    cells.append("%.3f ± %.3f" % (c[0]["nelbo"], c[0]["se"]))
                else:
                    cells.append("—")
            tokens = next(iter(vals.values()))["tokens"] if vals else 0
            row = "| %d | %.2fM | %s" % (s, tokens / 1e6, " | ".join(cells))
            if "uniform" in vals and "masked" in vals:
                gap = vals["uniform"]["nelbo"] - vals["masked"]["nelbo"]
                row += " | %+.3f | %.1f%%" % (gap, 100.0 * gap / H)
            print(row + " |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--source", choices=["copychain", "brackets"], required=True)
    r.add_argument("--process", choices=["uniform", "masked", "mixture"], required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--points", default=DEFAULT_POINTS, help="steps to evaluate at")
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--eval-seqs", type=int, default=1024)
    r.add_argument("--eval-time-samples", type=int, default=16)
    r.add_argument("--time-sampling", choices=["uniform", "logit", "sqrt"], default="uniform",
                   help="how training draws t (the trainer's time_sampling; a resumed "
                        "checkpoint keeps its own)")
    r.add_argument("--layers", type=int, help="model size (default: the CPU budget's 4)")
    r.add_argument("--d-model", type=int, help="model width (default: the CPU budget's 128)")
    r.add_argument("--heads", type=int, help="attention heads (default: the CPU budget's 4)")
    r.add_argument("--cond-dim", type=int, help="time-conditioning width (default 64)")
    r.add_argument("--exit-link", choices=["sigma", "noise_posterior", "denoiser"],
                   help="the model's exit-rate link (default: the library's)")
    r.add_argument("--mixture-uniform", type=float,
                   help="p_u of the mixture process (the library's default 0.1 when absent)")
    r.add_argument("--lr", type=float,
                   help="the constant learning rate after the warm-up (default: the "
                        "CPU budget's 1e-3); recorded in the JSON's budget")
    r.add_argument("--batch", type=int,
                   help="sequences per training step (default: the CPU budget's 128); "
                        "recorded in the JSON's budget")
    r.add_argument("--grad-clip", type=float,
                   help="the global gradient-norm limit (default the library's 1; 0 = off)")
    r.add_argument("--checkpoint", help="save the trainer here at the last point")
    r.add_argument("--resume", help="continue from this --checkpoint of an earlier run")
    r.add_argument("--previous", help="with --resume: that run's JSON (its curve is kept)")
    r.add_argument("--cooldown", type=int, default=0,
                   help="with --resume: decay the rate from the peak towards 0 over this "
                        "many steps (a cosine), from the resumed step on")
    t = sub.add_parser("table")
    t.add_argument("paths", nargs="+")
    q = sub.add_parser("paired")
    q.add_argument("checkpoints", nargs="+",
                   help="two or more checkpoints; each is compared with the last")
    q.add_argument("--source", choices=["copychain", "brackets"], required=True)
    q.add_argument("--eval-seqs", type=int, default=4096)
    q.add_argument("--time-samples", type=int, default=256)
    q.add_argument("--chunks", type=int, default=64)
    q.add_argument("--eval-time-sampling", choices=["uniform", "sqrt"], default="uniform",
                   help="how the evaluation spreads its time samples (sqrt: evenly in "
                        "sqrt t, reweighted; same NELBO, a smaller error for trained models)")
    q.add_argument("--threads", type=int, default=1)
    q.add_argument("--out", help="also write the figures here (JSON)")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run(args)
    elif args.cmd == "paired":
        paired(args)
    else:
        table(args.paths)
    return 0


if __name__ == "__main__":
    sys.exit(main())
