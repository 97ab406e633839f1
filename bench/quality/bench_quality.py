#!/usr/bin/env python3
"""The quality benchmark (issue 9): train a Neural CTMC on a synthetic source
with an exact likelihood, then score it by its NELBO and by its samples.

  run    one (source, process) run at a fixed budget -> one JSON
  suite  every source x process of a budget, then the markdown table
  table  the markdown table of some JSON files

Every random choice has a fixed seed: the same command gives the same JSON
(times aside). research/quality-benchmark.md explains the sources, the figures and
the budget. The library is reached through the in-tree binding (python/nctmc):
set NCTMC_LIBRARY to the built libnctmc.so.1 (the default is build/'s).
"""
import argparse
import glob
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("NCTMC_LIBRARY", os.path.join(ROOT, "build", "libnctmc.so.1"))

import nctmc  # noqa: E402
import sources as S  # noqa: E402

# Seeds of the data the runs share: every run of a source is evaluated on the
# same held-out sequences and compared with the same source reference.
HELDOUT_SEED = 777
REFERENCE_SEED = 12345
SAMPLE_SEED = 4242

# The CPU budget of research/quality-benchmark.md (2 cores, <= 15 minutes per source for
# the uniform and the masked run together, evaluation included).
BUDGETS = {
    "cpu": dict(layers=4, d_model=128, heads=4, cond=64, batch=128, steps=2000, lr=1e-3,
                warmup=100, ema=0.999, eval_seqs=4096, eval_time_samples=16,
                samples=400, sample_steps="16,64,256", samplers="tau,euler,posterior",
                sample_batch=200, reference_samples=200000),
    # GPU widths the CPU cannot train (backends/cuda/device_check.sh
    # --synthetic): the same steps, batch and evaluation as "cpu", a wider
    # and deeper model (d 512, 8 layers; gpu_wide: d 768, 12 layers, the
    # paper-small trunk) at a lower peak learning rate, two samplers
    "gpu": dict(layers=8, d_model=512, heads=8, cond=128, batch=128, steps=2000, lr=5e-4,
                warmup=200, ema=0.999, eval_seqs=4096, eval_time_samples=16,
                samples=400, sample_steps="16,64", samplers="tau,posterior",
                sample_batch=400, reference_samples=200000),
    "gpu_wide": dict(layers=12, d_model=768, heads=12, cond=128, batch=128, steps=2000,
                     lr=3e-4, warmup=200, ema=0.999, eval_seqs=4096, eval_time_samples=16,
                     samples=400, sample_steps="16,64", samplers="tau,posterior",
                     sample_batch=400, reference_samples=200000),
    # a few seconds: the smoke test (tests/test_quality_smoke.py)
    "smoke": dict(layers=1, d_model=32, heads=2, cond=16, batch=8, steps=6, lr=1e-3,
                  warmup=2, ema=0.9, eval_seqs=16, eval_time_samples=2,
                  samples=16, sample_steps="4,8", samplers="tau,euler,posterior",
                  sample_batch=8, reference_samples=2000),
}


def parse_value(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_pairs(pairs):
    out = {}
    for item in pairs or []:
        if "=" not in item:
            raise SystemExit("expected key=value, got %r" % item)
        k, v = item.split("=", 1)
        out[k] = parse_value(v)
    return out


def model_config(args, source):
    """nctmc_model_config keys: the budget's size, the process, and every
    --config key=value (new fields pass straight through to the binding)."""
    extra = parse_pairs(args.config)
    process = extra.pop("process", args.process)
    # the masked and mixture processes add the mask token as the last state
    vocab = source.vocab + (0 if process == "uniform" else 1)
    cfg = dict(vocab_size=vocab, seq_len=source.length, n_layers=args.layers,
               d_model=args.d_model, n_heads=args.heads, cond_dim=args.cond,
               process=process, seed=args.seed)
    cfg.update(extra)
    return cfg


def train(args, source, ctx, log):
    cfg = model_config(args, source)
    model = nctmc.Model.create(ctx, **cfg)
    trainer = nctmc.Trainer(model, batch_size=args.batch, learning_rate=args.lr,
                            warmup_steps=args.warmup, total_steps=args.steps,
                            ema_decay=args.ema, seed=args.seed,
                            **parse_pairs(args.trainer))
    # fresh source samples every step: the model never sees a sequence twice
    data_rng = np.random.default_rng([args.seed, 1])
    chunk = 50
    curve, window = [], []
    every = max(1, args.steps // 20)
    start, cpu = time.monotonic(), time.process_time()
    stopped = None
    for first in range(0, args.steps, chunk):
        if args.max_train_seconds and time.monotonic() - start > args.max_train_seconds:
            stopped = first   # the cap: the schedule stays the full budget's
            log("  stopped at step %d: --max-train-seconds %g" % (first, args.max_train_seconds))
            break
        n_steps = min(chunk, args.steps - first)
        batch = source.sample(n_steps * args.batch, data_rng).reshape(
            n_steps, args.batch, source.length)
        for k in range(n_steps):
            stats = trainer.step(batch[k])
            window.append(stats["loss"])
            step = first + k + 1
            if step % every == 0 or step == args.steps:
                curve.append({"step": step, "mean_loss": float(np.mean(window))})
                log("  step %d/%d  loss %.4f  %.2f steps/s" % (
                    step, args.steps, curve[-1]["mean_loss"],
                    step / (time.monotonic() - start)))
                window = []
    seconds, cpu = time.monotonic() - start, time.process_time() - cpu
    if args.checkpoint:
        trainer.save(args.checkpoint)
    # evaluate and sample the EMA weights, as a saved checkpoint would
    ema_model = nctmc.Model.create(ctx, **cfg)
    trainer.copy_weights_to(ema_model, ema=True)
    done = stopped if stopped is not None else args.steps
    return ema_model, cfg, {"seconds": seconds, "cpu_seconds": cpu,
                            "steps_done": done, "stopped_by_time_cap": stopped is not None,
                            "steps_per_second": done / seconds,
                            "curve": curve, "n_params": model.n_params}


def score_samples(source, x, reference, ref_x, entropy):
    """gen-NLL, forbidden share, statistics and diversity ratios of samples."""
    mask_rows = (x >= source.vocab).any(axis=1)
    ok = x[~mask_rows]
    out = {"n": int(len(x)), "n_with_mask_token": int(mask_rows.sum())}
    nll = -source.log_prob_chunked(ok) / np.log(2.0) / source.length
    out["gen_nll_bits_per_token"], out["gen_nll_se"] = S.mean_and_se(nll)
    out["gen_nll_over_entropy"] = out["gen_nll_bits_per_token"] / entropy
    out["gen_nll_over_entropy_se"] = out["gen_nll_se"] / entropy
    out["forbidden_share"], out["forbidden_se"] = S.ratio_stat(*source.forbidden(ok))
    out["statistics"] = {k: dict(zip(("value", "se"), S.ratio_stat(*v)))
                         for k, v in source.statistics(ok).items()}
    out["bigram_entropy_ratio"], out["bigram_entropy_ratio_se"] = S.ratio_with_bootstrap(
        x, ref_x, S.bigram_entropy_bits)
    out["unigram_entropy_ratio"], out["unigram_entropy_ratio_se"] = S.ratio_with_bootstrap(
        x, ref_x, S.unigram_entropy_bits)
    return out


_REFERENCES = {}


def run(args, log=lambda s: print(s, file=sys.stderr, flush=True)):
    source = S.make_source(args.source)
    t_all, c_all = time.monotonic(), time.process_time()
    ctx = nctmc.Context(backend=args.backend, threads=args.threads)
    log("%s / %s: %s" % (args.source, args.process, " ".join(args.config or [])))
    key = (args.source, args.reference_samples)
    if key not in _REFERENCES:   # the suite's runs of a source share it
        _REFERENCES[key] = S.source_reference(source, n=args.reference_samples,
                                              seed=REFERENCE_SEED)
    reference, ref_x = _REFERENCES[key]
    entropy = reference["entropy_bits_per_token"]
    previous = json.load(open(args.previous)) if args.previous else None
    if args.from_checkpoint:
        model = nctmc.Model.load(args.from_checkpoint, ctx)
        cfg, training = model.config, {"from_checkpoint": args.from_checkpoint}
        if previous:   # the run that trained this checkpoint: keep its record
            training = dict(previous["training"], from_checkpoint=args.from_checkpoint)
    else:
        model, cfg, training = train(args, source, ctx, log)

    t0, c0 = time.monotonic(), time.process_time()
    heldout = source.sample(args.eval_seqs, np.random.default_rng(HELDOUT_SEED))
    ev = model.eval(heldout, time_samples=args.eval_time_samples, batch_size=128, seed=0)
    ev["seconds"], ev["cpu_seconds"] = time.monotonic() - t0, time.process_time() - c0
    log("  NELBO %.4f +- %.4f bits/token (source entropy %.4f)" % (
        ev["nelbo_bits_per_token"], ev["std_error_bits"], entropy))

    sample_kw = parse_pairs(args.sample_arg)
    sampler = model.sampler(max_batch=args.sample_batch)
    results = []
    for method in [m for m in args.samplers.split(",") if m]:
        for n_steps in [int(s) for s in args.sample_steps.split(",")]:
            t0, c0 = time.monotonic(), time.process_time()
            parts = []
            for first in range(0, args.samples, args.sample_batch):
                b = min(args.sample_batch, args.samples - first)
                parts.append(sampler.sample(batch=b, method=method, steps=n_steps,
                                            seed=SAMPLE_SEED, first_sequence=first,
                                            **sample_kw))
            x = np.concatenate(parts)
            seconds, cpu = time.monotonic() - t0, time.process_time() - c0
            r = score_samples(source, x, reference, ref_x, entropy)
            r.update(method=method, steps=n_steps, seconds=seconds, cpu_seconds=cpu)
            results.append(r)
            log("  %-9s %4d steps: gen-NLL/H %.3f  forbidden %.2f%%  bigram-H %.3f  (%.0f s)" % (
                method, n_steps, r["gen_nll_over_entropy"], 100 * r["forbidden_share"],
                r["bigram_entropy_ratio"], seconds))
    total, total_cpu = time.monotonic() - t_all, time.process_time() - c_all
    rescored = None
    if previous:
        rescored = {"previous": args.previous, "eval": True, "samples": bool(results),
                    "seconds_total": "the previous run's, its NELBO's time replaced by "
                                     "this one's"}
        rescored["previous_eval"] = previous["eval"]
        if not results:   # sampling is deterministic given the checkpoint: keep them
            results = previous["samples"]
            for k in ("samples", "sample_steps", "samplers", "sample_batch"):
                setattr(args, k, previous["budget"][k])
            sample_kw = previous["sample_args"]
        total = previous["seconds_total"] - previous["eval"]["seconds"] + ev["seconds"]
        total_cpu = previous["cpu_seconds_total"] - previous["eval"]["cpu_seconds"] + \
            ev["cpu_seconds"]
    return {
        "benchmark": "nctmc quality (issue 9)", "label": args.label or args.process,
        "source": source.describe(), "source_reference": reference,
        "process": cfg["process"], "model_config": cfg,
        "budget": {k: getattr(args, k) for k in BUDGETS["cpu"]},
        "threads": args.threads, "backend": args.backend, "seed": args.seed,
        "sample_args": sample_kw, "trainer_args": parse_pairs(args.trainer),
        "training": training, "eval": ev, "samples": results,
        "seconds_total": total, "cpu_seconds_total": total_cpu, "library_version": nctmc.library_version(),
        "command": " ".join(sys.argv), "rescored": rescored,
    }


def add_analysis_args(ap):
    """The arguments of every script that analyses trained checkpoints
    (time_bands.py, time_variance.py, gradient_noise.py)."""
    ap.add_argument("checkpoints", nargs="+", help="trainer or model files (the EMA weights)")
    ap.add_argument("--source", choices=sorted(S.SOURCES), required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="also write the figures here (JSON)")


def write_json(path, result):
    """numpy values (the eval's reliability table) as plain lists and numbers."""
    def plain(o):
        if isinstance(o, np.ndarray):
            return o.tolist()
        if isinstance(o, np.generic):
            return o.item()
        raise TypeError("cannot write %r as JSON" % type(o))
    with open(path, "w") as f:
        json.dump(result, f, indent=1, default=plain)


# ---------------------------------------------------------------- table

def fmt(v, se=None, digits=3, pct=False):
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "—"
    scale = 100.0 if pct else 1.0
    s = "%.*f" % (digits, v * scale)
    if se is not None and np.isfinite(se):
        s += " ± %.*f" % (digits, se * scale)
    return s


def table(paths):
    runs = [json.load(open(p)) for p in paths]
    lines = []
    for src in sorted({r["source"]["name"] for r in runs}):
        group = [r for r in runs if r["source"]["name"] == src]
        ref = group[0]["source_reference"]
        stat_names = list(ref["statistics"])
        steps = sorted({s["steps"] for r in group for s in r["samples"]})
        st = "/".join(str(s) for s in steps)
        lines.append("### %s (entropy %.4f ± %.4f bits/token; forbidden share %.2f%%; %s)\n" % (
            src, ref["entropy_bits_per_token"], ref["entropy_se"],
            100 * ref["forbidden_share"],
            "; ".join("%s %.3f" % (k, v["value"]) for k, v in ref["statistics"].items())))
        head = ["run", "NELBO bits/token", "sampler", "gen-NLL/H %s" % st,
                "forbidden %% %s" % st, "bigram-H ratio %s" % st]
        head += ["%s %s" % (k, st) for k in stat_names]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for r in group:
            by = {}
            for s in r["samples"]:
                by.setdefault(s["method"], {})[s["steps"]] = s
            first = True
            for method, d in by.items():
                row = [r["label"] if first else "",
                       fmt(r["eval"]["nelbo_bits_per_token"], r["eval"]["std_error_bits"])
                       if first else "", method]
                cells = [d.get(k) for k in steps]
                row.append(" / ".join(fmt(c["gen_nll_over_entropy"], digits=2) if c else "—"
                                      for c in cells))
                row.append(" / ".join(fmt(c["forbidden_share"], digits=1, pct=True)
                                      if c else "—" for c in cells))
                row.append(" / ".join(fmt(c["bigram_entropy_ratio"], digits=3)
                                      if c else "—" for c in cells))
                for k in stat_names:
                    row.append(" / ".join(fmt(c["statistics"][k]["value"], digits=3)
                                          if c else "—" for c in cells))
                lines.append("| " + " | ".join(row) + " |")
                first = False
        lines.append("")
        cells = [s for r in group for s in r["samples"]]

        def worst(key, scale=1.0):
            return scale * max((s[key] for s in cells), default=float("nan"))
        lines.append("Standard errors (largest over the cells): gen-NLL/H %.3f, forbidden %.2f "
                     "points, bigram-H ratio %.3f. Wall time (CPU time) per run: %s." % (
                         worst("gen_nll_over_entropy_se"), worst("forbidden_se", 100),
                         worst("bigram_entropy_ratio_se"),
                         ", ".join("%s %.0f s (%.0f s)" % (r["label"], r["seconds_total"],
                                                           r["cpu_seconds_total"])
                                   for r in group)))
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------- CLI

def add_run_options(p):
    p.add_argument("--budget", default="cpu", choices=sorted(BUDGETS),
                   help="the preset below options override (default cpu)")
    p.add_argument("--process", default="uniform", choices=["uniform", "masked", "mixture"])
    p.add_argument("--config", action="append", metavar="KEY=VALUE",
                   help="an nctmc_model_config field (schedule=loglinear, "
                        "mixture_uniform=0.1, ...); repeatable")
    p.add_argument("--trainer", action="append", metavar="KEY=VALUE",
                   help="an nctmc_trainer_params field beyond the budget's "
                        "(e.g. time_sampling=logit)")
    p.add_argument("--sample-arg", action="append", metavar="KEY=VALUE",
                   help="a keyword of Sampler.sample (temperature=0.8, "
                        "correction_steps=8, ...); repeatable")
    p.add_argument("--label", help="the run's name in the table (suite: a prefix of the "
                   "process's name)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--backend", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", help="also save the trainer checkpoint here")
    p.add_argument("--max-train-seconds", type=float, default=0,
                   help="stop training after this many seconds (checked every 50 steps; "
                        "the JSON says so; 0 = no cap)")
    p.add_argument("--from-checkpoint", help="skip training: evaluate this checkpoint")
    p.add_argument("--previous", help="with --from-checkpoint: the JSON of the run that "
                   "trained it; its training record is kept, and its samples too when "
                   "--samplers is empty (only the NELBO is measured again)")
    for k, v in BUDGETS["cpu"].items():
        p.add_argument("--" + k.replace("_", "-"), type=type(v), default=None)


def resolve_budget(args):
    for k, v in BUDGETS[args.budget].items():
        if getattr(args, k) is None:
            setattr(args, k, v)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_run = sub.add_parser("run", help="one run -> JSON")
    p_run.add_argument("--source", required=True, choices=sorted(S.SOURCES))
    p_run.add_argument("--out", required=True)
    add_run_options(p_run)
    p_suite = sub.add_parser("suite", help="every source x process, then the table")
    p_suite.add_argument("--out-dir", required=True)
    p_suite.add_argument("--sources", default="copychain,brackets")
    p_suite.add_argument("--processes", default="uniform,masked")
    p_suite.add_argument("--checkpoint-dir", help="save each run's trainer checkpoint here")
    add_run_options(p_suite)
    p_table = sub.add_parser("table", help="markdown table of JSON results")
    p_table.add_argument("files", nargs="+")
    args = ap.parse_args(argv)

    if args.cmd == "table":
        files = [f for pat in args.files for f in sorted(glob.glob(pat))]
        print(table(files))
        return 0
    resolve_budget(args)
    if args.cmd == "run":
        result = run(args)
        write_json(args.out, result)
        return 0
    if args.from_checkpoint or args.previous or args.checkpoint:
        ap.error("suite: use --checkpoint-dir; --checkpoint, --from-checkpoint and "
                 "--previous name one run's files (use run)")
    os.makedirs(args.out_dir, exist_ok=True)
    files, prefix = [], args.label
    for src in args.sources.split(","):
        for proc in args.processes.split(","):
            args.source, args.process = src, proc
            args.label = (prefix + " " if prefix else "") + proc + \
                (" " + " ".join(args.config) if args.config else "")
            if args.checkpoint_dir:
                os.makedirs(args.checkpoint_dir, exist_ok=True)
                args.checkpoint = os.path.join(args.checkpoint_dir,
                                               "%s_%s.safetensors" % (src, proc))
            result = run(args)
            path = os.path.join(args.out_dir, "%s_%s.json" % (src, proc))
            write_json(path, result)
            files.append(path)
    md = table(files)
    with open(os.path.join(args.out_dir, "table.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
