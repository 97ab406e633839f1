#!/usr/bin/env python3
"""How much of the training loss's noise the time density could still
remove: the variance of the trainer's estimate of the loss under each time
density it offers, and under the best density there is, for trained models.

  time_variance.py U.ckpt M.ckpt --source copychain [--eval-seqs 1024]
                   [--grid 64] [--threads 1] [--out variance.json]

What is measured. The trainer's loss for a sequence is the integral over t
in (eps, 1 - eps) of l(x0, t), the per-token Poisson-KL integrand at a
noised x_t (natural units divided by ln 2: bits per token and unit time).
A step draws sequence b's time from a density p (its `time_sampling`),
stratified over the batch, and weights the integrand by 1 / p. With
s2(t) = Var[l | t], the spread over sequences and their noise at one
time, and m(t) = E[l | t], one row's estimate has the variance

  plain:      V_p = int m2(t) / p(t) dt - (int m(t) dt)^2,  m2 = m^2 + s2,
  stratified: V_p = int s2(t) / p(t) dt  (+ a term that falls like 1/B^2,
                                          left out: B = 128 here)

and a batch of B rows has V_p / B: a density with half the variance is
worth twice the batch. The best density for the stratified estimate is
p* proportional to sqrt(s2) (Cauchy-Schwarz), with V* = (int sqrt(s2) dt)^2;
for the plain one, sqrt(m2). Both are reported with the trainer's densities
(uniform, logit, sqrt) and the best power law p proportional to t^-a, each
as the ratio V_p / V_sqrt (the benchmark's recipe trains with sqrt).

The loss here is the loss's value, not its gradient, whose variance is
what slows training: the usual proxy (Nichol and Dhariwal's importance
sampling of the diffusion time uses the same one), not the thing itself.

How. m and s2 are estimated on `--grid` times evenly spaced in log t over
the trainer's (eps, 1 - eps), each from `--eval-seqs` held-out sequences
with fresh noise (the reference's q_t, the model's rates from the library),
and integrated by the midpoint rule in log t (dt = t d log t), which keeps
the small times, where a noise token's integrand grows like 1 / t, as well
resolved as the rest. Checks come with every run: both variances of the
sqrt density predicted this way against the same estimates drawn directly,
which share none of the grid's approximations: `--check-draws` independent
times from the sqrt density, one sequence each (plain), and
`--check-batches` batches drawn as the trainer draws them (stratified:
B times the variance of the batch means, with the 1/B^2 term the formula
leaves out).
"""
import argparse
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
import time_bands as TB  # noqa: E402

import torch  # noqa: E402

R = TB.R
LN2 = math.log(2.0)
POWERS = tuple(round(0.05 * i, 2) for i in range(21))   # a in p ~ t^-a, 0 (uniform) to 1


def integrand(cfg, model, x0, t, seed):
    """l(x0_i, t_i) per row, bits per token and unit time, at a fresh x_t."""
    tt = torch.from_numpy(t)
    x0t = torch.from_numpy(x0.astype(np.int64))
    x_t = R.sample_xt(cfg, tt, x0t, torch.Generator().manual_seed(seed))
    log_rate, jump = model.forward(x_t.numpy(), t.astype(np.float32))
    log_m = (torch.from_numpy(log_rate.astype(np.float64))[..., None]
             + torch.from_numpy(jump.astype(np.float64)))
    rhat = R.reverse_rates(cfg, x_t, x0t, tt)
    return R.poisson_kl(rhat, log_m).sum(-1).sum(-1).numpy() / (x0.shape[1] * LN2)


def grid_times(eps, n):
    """(t, dt): n midpoints evenly spaced in log t over (eps, 1 - eps)."""
    lo, hi = math.log(eps), math.log(1.0 - eps)
    du = (hi - lo) / n
    t = np.exp(lo + (np.arange(n) + 0.5) * du)
    return t, t * du


def density(kind, t, dt, a=0.0):
    """A density on the grid, normalised by the grid's own rule."""
    if kind == "logit":
        d = 1.0 / (t * (1.0 - t))
    else:
        d = t ** -a
    return d / (d * dt).sum()


def variances(m, s2, d, dt):
    """(plain, stratified) variance of one row's estimate under density d."""
    mean = (m * dt).sum()
    return float(((m * m + s2) / d * dt).sum() - mean * mean), float((s2 / d * dt).sum())


def compare(m, s2, t, dt):
    """Every density's variances, and the ratios to sqrt's."""
    rows = {"uniform": density("power", t, dt, 0.0), "logit": density("logit", t, dt),
            "sqrt": density("power", t, dt, 0.5)}
    power = {a: variances(m, s2, density("power", t, dt, a), dt) for a in POWERS}
    best_a = min(POWERS, key=lambda a: power[a][1])
    rows["power %.2f (best)" % best_a] = density("power", t, dt, best_a)
    sd = np.sqrt(s2)
    rows["optimal"] = sd / (sd * dt).sum()
    rm = np.sqrt(m * m + s2)
    rows["optimal (plain)"] = rm / (rm * dt).sum()
    out = {name: variances(m, s2, d, dt) for name, d in rows.items()}
    ref = out["sqrt"]
    table = [{"density": name, "plain": v[0], "stratified": v[1],
              "plain_vs_sqrt": v[0] / ref[0], "stratified_vs_sqrt": v[1] / ref[1]}
             for name, v in out.items()]
    return table, best_a, rows["optimal"]


def sqrt_draws(cfg, model, heldout, eps, v, rng):
    """The sqrt density's weighted estimate l / p at the times of the
    trainer's inverse CDF for uniforms v, one random held-out sequence each."""
    lo, hi = math.sqrt(eps), math.sqrt(1.0 - eps)
    s = lo + (hi - lo) * v
    t, weight = s * s, 2.0 * (hi - lo) * s            # 1 / p(t)
    rows = heldout[rng.integers(0, heldout.shape[0], v.size)]
    return np.concatenate([
        weight[i:i + 256] * integrand(cfg, model, rows[i:i + 256], t[i:i + 256],
                                      int(rng.integers(2 ** 62)))
        for i in range(0, v.size, 256)])


def direct_check(cfg, model, heldout, eps, draws, batches, batch, seed):
    """sqrt's two variances drawn directly: independent times (plain), and
    whole batches stratified the way the trainer draws them, one uniform
    offset u per batch and row b at (b + u) / B (stratified: B times the
    variance of the batch means)."""
    rng = np.random.default_rng(seed + 1)
    est = sqrt_draws(cfg, model, heldout, eps, rng.random(draws), rng)
    u = rng.random(batches)
    v = ((np.arange(batch)[None, :] + u[:, None]) / batch).ravel()
    means = sqrt_draws(cfg, model, heldout, eps, v, rng).reshape(batches, batch).mean(axis=1)
    return {"draws": draws, "mean": float(est.mean()),
            "mean_se": float(est.std(ddof=1) / math.sqrt(draws)),
            "plain": float(est.var(ddof=1)), "batches": batches, "batch": batch,
            "stratified": float(batch * means.var(ddof=1))}


def analyse(path, args, source, heldout):
    ctx = nctmc.Context(backend="cpu", threads=args.threads)
    model = nctmc.Model.load(path, ctx)
    cfg = TB.reference_config(model)
    if cfg.n_data != source.vocab or cfg.L < heldout.shape[1] or model.n_classes:
        raise SystemExit("time_variance: %s is not an unconditional model of the %s source"
                         % (path, source.name))
    eps = args.time_eps
    t, dt = grid_times(eps, args.grid)
    rng = np.random.default_rng(args.seed)
    m, s2 = np.zeros(args.grid), np.zeros(args.grid)
    for g in range(args.grid):
        vals = np.concatenate([
            integrand(cfg, model, heldout[i:i + args.batch],
                      np.full(min(args.batch, heldout.shape[0] - i), t[g]),
                      int(rng.integers(2 ** 62)))
            for i in range(0, heldout.shape[0], args.batch)])
        m[g], s2[g] = vals.mean(), vals.var(ddof=1)
    table, best_a, opt = compare(m, s2, t, dt)
    check = direct_check(cfg, model, heldout, eps, args.check_draws, args.check_batches,
                         args.check_batch, args.seed)
    return {"checkpoint": path, "process": cfg.process, "time_eps": eps,
            "loss": float((m * dt).sum()), "best_power": best_a, "densities": table,
            "curve": [{"t": float(t[g]), "mean": float(m[g]), "sd": float(math.sqrt(s2[g])),
                       "optimal_density": float(opt[g]),
                       "sqrt_density": float(1.0 / (2.0 * (math.sqrt(1 - eps) - math.sqrt(eps))
                                                    * math.sqrt(t[g])))}
                      for g in range(args.grid)],
            "direct_check": check}


def report(r):
    sqrt_row = next(d for d in r["densities"] if d["density"] == "sqrt")
    c = r["direct_check"]
    print("%s (%s): loss %.4f bits/token over (%g, %g), %.4f +- %.4f drawn directly; sqrt's "
          "variance on the grid / drawn: plain %.3f / %.3f (%d draws), stratified %.3f / %.3f "
          "(%d batches of %d)"
          % (r["checkpoint"], r["process"], r["loss"], r["time_eps"], 1 - r["time_eps"],
             c["mean"], c["mean_se"], sqrt_row["plain"], c["plain"], c["draws"],
             sqrt_row["stratified"], c["stratified"], c["batches"], c["batch"]))
    print("| density | variance, stratified | vs sqrt | variance, plain | vs sqrt |")
    print("|---|---|---|---|---|")
    for d in r["densities"]:
        print("| %s | %.4f | %.3f | %.4f | %.3f |" % (d["density"], d["stratified"],
              d["stratified_vs_sqrt"], d["plain"], d["plain_vs_sqrt"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    BQ.add_analysis_args(ap)
    ap.add_argument("--eval-seqs", type=int, default=1024, help="sequences per grid time")
    ap.add_argument("--grid", type=int, default=64, help="times, even in log t")
    ap.add_argument("--time-eps", type=float, default=1e-3,
                    help="the trainer's time_eps (its default)")
    ap.add_argument("--check-draws", type=int, default=8192, help="independent draws")
    ap.add_argument("--check-batches", type=int, default=128, help="stratified batches")
    ap.add_argument("--check-batch", type=int, default=128, help="their size (the budget's)")
    ap.add_argument("--batch", type=int, default=256, help="rows per forward pass")
    args = ap.parse_args(argv)
    if not 0.0 < args.time_eps < 0.5 or min(args.grid, args.eval_seqs, args.check_draws,
                                             args.check_batches, args.check_batch) < 2:
        ap.error("need 0 < --time-eps < 0.5 and --grid, --eval-seqs, --check-draws, "
                 "--check-batches, --check-batch >= 2")
    source = S.make_source(args.source)
    heldout = source.sample(args.eval_seqs, np.random.default_rng(BQ.HELDOUT_SEED))
    cpu0 = time.process_time()
    results = []
    for path in args.checkpoints:
        r = analyse(path, args, source, heldout)
        report(r)
        results.append(r)
    out = {"source": args.source, "eval_seqs": args.eval_seqs, "grid": args.grid,
           "seed": args.seed, "results": results, "cpu_seconds": time.process_time() - cpu0}
    if args.out:
        BQ.write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
