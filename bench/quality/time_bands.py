#!/usr/bin/env python3
"""Where a model loses its NELBO: the held-out bound split into time bands,
and in each band the model's excess over the best model of its process,
split into the exit rate's share ("when to jump") and the jump
distribution's ("where to").

  time_bands.py U.ckpt M.ckpt --source copychain [--eval-seqs 1024]
                [--samples 8] [--threads 2] [--out bands.json]

Why the split is exact. The NELBO is the prior term plus the integral over
t of E[l_t], l_t = sum_j f(Rhat_j(x0), lambda r_j) per position, f the
Poisson KL (docs/math.md). f is a Bregman divergence in its first argument,
so for the posterior mean R*_j = E[Rhat_j(x0) | x_t] (the exact reverse
rate of the process, what a perfect model outputs):

  E[f(Rhat, b) | x_t] = E[f(Rhat, R*) | x_t] + f(R*, b),

the first term the best any model of this process can do at x_t, the second
(>= 0) this model's excess. And with lambda* = sum_j R*_j, r* = R* / lambda*:

  sum_j f(R*_j, lambda r_j) = f(lambda*, lambda) + lambda* KL(r* || r):

the exit rate's excess plus the jump distribution's. R* needs
P(x0_p | x_t) for the whole sequence, which the sources give exactly: the
forward process is one more per-position channel on the hidden clean
sequence, so forward-backward over the source's hidden state
(`Source.clean_posterior`) is the posterior. The reverse rates Rhat and f
come from the PyTorch reference (tests/reference/nctmc_reference.py), the
model's rates from the library (nctmc_model_forward).

Two checks come with every run: the best possible NELBO (the prior term
plus the integral of the first term) must equal the source's exact entropy
on the same sequences, up to the prior's O(a_T) mismatch and Monte Carlo
error; and the model's own integrand, integrated the same way, must agree
with the library's nctmc_eval on the same sequences.

Bands are fixed intervals of t; within one, --samples times per sequence
are spread evenly in sqrt t (stratified, importance-weighted), so the small
t bands, where a noise token's loss grows like 1/t, are estimated as well as
the rest.
"""
import argparse
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))
import bench_quality as BQ  # noqa: E402  (sets up the binding's path)
import nctmc  # noqa: E402
import sources as S  # noqa: E402

import torch  # noqa: E402
import nctmc_reference as R  # noqa: E402

# the band edges in t; the last band ends at the evaluation's t_max
EDGES = (0.0, 1e-3, 1e-2, 0.05, 0.2, 0.5, 0.8)
LN2 = math.log(2.0)


def reference_config(model):
    """The reference's Config for a loaded model (only the process, its
    schedule and the state count matter here)."""
    c = model.config
    return R.Config(S=c["vocab_size"], L=c["seq_len"], n_layers=c["n_layers"],
                    d=c["d_model"], H=c["n_heads"], c=c["cond_dim"],
                    process=c["process"], schedule=c["schedule"],
                    mixture_uniform=float(c["mixture_uniform"]),
                    schedule_eps=float(c["schedule_eps"]))


def band_times(edges, n_seqs, samples, rng):
    """[(band, t [samples, n_seqs], weight [samples, n_seqs])]: within each
    band, sample k of a sequence at v = sqrt t stratified over [sqrt lo,
    sqrt hi], weighted by dt/dv over the samples (the band's integral is
    the sum over k of weight * integrand, averaged over sequences)."""
    out = []
    for b in range(len(edges) - 1):
        lo, hi = math.sqrt(edges[b]), math.sqrt(edges[b + 1])
        u = rng.random((samples, n_seqs))
        v = lo + (hi - lo) * (np.arange(samples)[:, None] + u) / samples
        out.append((b, v * v, 2.0 * v * (hi - lo) / samples))
    return out


def exact_rates(cfg, source, x_t, t):
    """Rhat(x_t -> j | x0 = k) [n, L, K, S] for every data token k, the
    posterior P(x0_p = k | x_t) [n, L, K] and the best model's rates
    R* = sum_k P(k | x_t) Rhat_k [n, L, S]."""
    tt = torch.from_numpy(t)
    xt = torch.from_numpy(x_t.astype(np.int64))
    tokens = range(source.vocab)
    rhat = torch.stack([R.reverse_rates(cfg, xt, torch.full_like(xt, k), tt)
                        for k in tokens], dim=2).numpy()
    q = torch.stack([R.q_t0(cfg, tt, torch.full_like(xt, k)).gather(-1, xt[..., None])[..., 0]
                     for k in tokens], dim=2).numpy()                      # q(x_t | x0 = k)
    channel = source.noise_matrix()                                         # [z, k]
    evidence = q @ channel.T                                                # P(x_t,p | z_p)
    post_z = source.clean_posterior(evidence)
    post = q * ((post_z / evidence) @ channel)
    return rhat, post, np.einsum("nlk,nlks->nls", post, rhat)


def rows_figures(cfg, source, model, x0, x_t, t):
    """Per row and position (arrays [n, L], natural-log units): the loss at
    the true x0, the best model's expected loss, and this model's excess,
    all of it and the exit rate's part."""
    rhat, post, rstar = exact_rates(cfg, source, x_t, t)
    log_rate, jump = model.forward(x_t, t.astype(np.float32))
    log_rate = torch.from_numpy(log_rate.astype(np.float64))
    log_m = log_rate[..., None] + torch.from_numpy(jump.astype(np.float64))
    rs = torch.from_numpy(rstar)
    excess = R.poisson_kl(rs, log_m).sum(-1).numpy()
    rate_part = R.poisson_kl(rs.sum(-1), log_rate).numpy()
    log_rstar = torch.log(rs)
    best = np.zeros(x_t.shape)
    for k in range(source.vocab):   # E over x0 of f(Rhat, R*); a zero posterior adds nothing
        f = R.poisson_kl(torch.from_numpy(rhat[:, :, k]), log_rstar).sum(-1).numpy()
        with np.errstate(invalid="ignore"):
            best += np.where(post[..., k] > 0, post[..., k] * f, 0.0)
    true_rhat = np.take_along_axis(rhat, x0[:, :, None, None].astype(np.int64), axis=2)[:, :, 0]
    loss = R.poisson_kl(torch.from_numpy(true_rhat), log_m).sum(-1).numpy()
    return loss, best, excess, rate_part


FIGURES = ("loss", "best", "excess", "rate", "excess_noisy", "rate_noisy", "noisy",
           "excess_mask", "rate_mask", "mask")


def accumulate(cfg, source, model, heldout, edges, args):
    """Every figure per band and sequence, in bits/token ([band, sequence];
    "noisy" is the share of positions with x_t != x0, "mask" the share with
    x_t the mask token; "excess_mask" the excess at those, where the masked
    and mixture processes' exit rate is exact and only the jump can err)."""
    n, length = heldout.shape
    rng = np.random.default_rng(args.seed)
    per = {k: np.zeros((len(edges) - 1, n)) for k in FIGURES}
    for b, ts, ws in band_times(edges, n, args.samples, rng):
        for k in range(args.samples):
            for lo in range(0, n, args.batch):
                sl = slice(lo, min(lo + args.batch, n))
                x0, t = heldout[sl], ts[k, sl]
                x_t = R.sample_xt(cfg, torch.from_numpy(t), torch.from_numpy(x0.astype(np.int64)),
                                  torch.Generator().manual_seed(int(rng.integers(2 ** 62)))).numpy()
                loss, best, excess, rate = rows_figures(cfg, source, model, x0, x_t, t)
                noisy = x_t != x0   # a noise token (uniform), a mask (masked), either
                masks = x_t == cfg.mask if cfg.mask is not None else np.zeros_like(noisy)
                scale = ws[k, sl] / (length * LN2)
                for key, v in (("loss", loss), ("best", best), ("excess", excess),
                               ("rate", rate), ("excess_noisy", excess * noisy),
                               ("rate_noisy", rate * noisy), ("excess_mask", excess * masks),
                               ("rate_mask", rate * masks)):
                    per[key][b, sl] += scale * v.sum(axis=1)
                per["noisy"][b, sl] += noisy.mean(axis=1) / args.samples
                per["mask"][b, sl] += masks.mean(axis=1) / args.samples
    return per


def analyse(path, args, source, heldout, entropy_per_seq):
    ctx = nctmc.Context(backend="cpu", threads=args.threads)
    model = nctmc.Model.load(path, ctx)
    cfg = reference_config(model)
    length = heldout.shape[1]
    if cfg.n_data != source.vocab or cfg.L < length or model.n_classes:
        raise SystemExit("time_bands: %s is not an unconditional model of the %s source "
                         "(%d data tokens, length %d)" % (path, source.name, source.vocab, length))
    lib = model.eval(heldout, time_samples=args.samples * (len(EDGES) - 1), batch_size=128,
                     seed=1, time_sampling="sqrt")
    edges = list(EDGES) + [lib["t_max"]]
    per = accumulate(cfg, source, model, heldout, edges, args)
    prior = lib["prior_bits_per_token"]
    bands = []
    for b in range(len(edges) - 1):
        row = {"t_lo": edges[b], "t_hi": edges[b + 1]}
        for key in FIGURES:
            row[key], row[key + "_se"] = S.mean_and_se(per[key][b])
        bands.append(row)
    total = {key: S.mean_and_se(per[key].sum(axis=0)) for key in FIGURES
             if key not in ("noisy", "mask")}
    best_nelbo = per["best"].sum(axis=0) + prior
    return {"checkpoint": path, "process": cfg.process, "t_max": lib["t_max"],
            "prior_bits_per_token": prior, "bands": bands,
            "total": {k: {"value": v[0], "se": v[1]} for k, v in total.items()},
            "nelbo": total["loss"][0] + prior, "nelbo_se": total["loss"][1],
            "library_nelbo": lib["nelbo_bits_per_token"], "library_se": lib["std_error_bits"],
            "best_nelbo": float(best_nelbo.mean()),
            "best_minus_entropy": S.mean_and_se(best_nelbo - entropy_per_seq)}


def report(r):
    print("%s (%s): NELBO %.4f +- %.4f here, %.4f +- %.4f by nctmc_eval; best possible %.4f "
          "(minus the exact entropy: %+.4f +- %.4f)"
          % (r["checkpoint"], r["process"], r["nelbo"], r["nelbo_se"], r["library_nelbo"],
             r["library_se"], r["best_nelbo"], *r["best_minus_entropy"]))
    print("| t | noisy share | integrand | best | excess | exit rate | jump | excess at noisy |")
    print("|---|---|---|---|---|---|---|---|")
    for b in r["bands"]:
        print("| %.3g-%.3g | %.3f | %.4f | %.4f | %.4f +- %.4f | %.4f | %.4f | %.4f |"
              % (b["t_lo"], b["t_hi"], b["noisy"], b["loss"], b["best"], b["excess"],
                 b["excess_se"], b["rate"], b["excess"] - b["rate"], b["excess_noisy"]))
    t = r["total"]
    print("| all | | %.4f | %.4f | %.4f +- %.4f | %.4f | %.4f | %.4f |"
          % (t["loss"]["value"], t["best"]["value"], t["excess"]["value"], t["excess"]["se"],
             t["rate"]["value"], t["excess"]["value"] - t["rate"]["value"],
             t["excess_noisy"]["value"]))
    if r["process"] == "mixture":
        report_mixture(r)


def report_mixture(r):
    """The mixture's excess by what a position holds: a mask (only the
    jump can err there), a data token that is noise, a clean token."""
    print("| t | mask share | excess at masks | at noise data tokens (exit rate) "
          "| at clean tokens (exit rate) |")
    print("|---|---|---|---|---|")

    def row(label, share, f):
        nd, nd_rate = f("excess_noisy") - f("excess_mask"), f("rate_noisy") - f("rate_mask")
        clean, clean_rate = f("excess") - f("excess_noisy"), f("rate") - f("rate_noisy")
        print("| %s | %s | %.4f | %.4f (%.4f) | %.4f (%.4f) |"
              % (label, share, f("excess_mask"), nd, nd_rate, clean, clean_rate))
    for b in r["bands"]:
        row("%.3g-%.3g" % (b["t_lo"], b["t_hi"]), "%.3f" % b["mask"], lambda k: b[k])
    row("all", "", lambda k: r["total"][k]["value"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    BQ.add_analysis_args(ap)
    ap.add_argument("--eval-seqs", type=int, default=1024)
    ap.add_argument("--samples", type=int, default=8, help="time samples per band and sequence")
    ap.add_argument("--batch", type=int, default=256, help="rows per forward pass")
    args = ap.parse_args(argv)
    source = S.make_source(args.source)
    heldout = source.sample(args.eval_seqs, np.random.default_rng(BQ.HELDOUT_SEED))
    entropy = -source.log_prob(heldout) / (LN2 * source.length)
    cpu0 = time.process_time()
    results = []
    for path in args.checkpoints:
        r = analyse(path, args, source, heldout, entropy)
        report(r)
        results.append(r)
    out = {"source": args.source, "eval_seqs": args.eval_seqs, "samples_per_band": args.samples,
           "seed": args.seed, "edges": list(EDGES), "entropy_of_these_sequences":
           float(entropy.mean()), "results": results,
           "cpu_seconds": time.process_time() - cpu0}
    if args.out:
        BQ.write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
