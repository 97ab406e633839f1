#!/usr/bin/env python3
"""Where (if anywhere) the uniform and masked curves cross: power laws
through each process's excess over the source's entropy, from time_bands.py
figures of pairs of models trained on the same number of sequences.

  excess_scaling.py SEQS:U_BANDS[@K]:M_BANDS[@K] [...] [--t-range LO HI]
                    [--boot 4000] [--seed 0] [--out fit.json]

SEQS is the training sequences each model of the pair saw (batch x steps);
U_BANDS is the time_bands.py JSON of the paper's-process model (uniform or
mixture), M_BANDS that of the masked model; @K picks the K-th model of a
file that holds several (0 when there is one). Several pairs may share a
SEQS (other seeds, or the same sequences in other batches). --t-range
fits the excess of the bands between two of their edges instead of the
whole excess (its standard error then treats the bands as independent,
which they are not quite: they share the sequences).

Two fits, both least squares in log-log with every pair weighted alike:
  1. each process's excess against sequences, E = A S^-b;
  2. the uniform excess against masked's, ln U = c + k ln M, which needs no
     notion of budget: along any path of scale that lowers masked's excess,
     U / M = e^c M^(k - 1), which falls as M does if k > 1 and grows if
     k < 1; U = M where M is M* = e^(c / (1 - k)).
Two kinds of error for each fitted figure: from the residuals (when there
are more pairs than parameters; this includes the spread between training
seeds and batches when the pairs have it) and from the evaluation's
standard errors alone (a parametric bootstrap: every excess redrawn from a
normal with its standard error, the fit repeated). A crossing "ahead" is at
a smaller masked excess (more training) than any pair measured; "behind",
at a larger one; where k is within two standard errors of 1 the trend of
the ratio is not resolved and the crossing means nothing. Three pairs on
one path are three points: the fit says which way the measured trend
points, not where it must go.
"""
import argparse
import json
import math
import sys

import numpy as np


def band_excess(r, t_range):
    """The excess of the bands that tile t_range, and its standard error as
    if the bands were independent (they share the sequences, so this is
    approximate; the whole range is the file's own total)."""
    edges = sorted({b["t_lo"] for b in r["bands"]} | {b["t_hi"] for b in r["bands"]})
    lo, hi = t_range
    hi = min(hi, edges[-1])  # the last band ends at t_max, which the process sets
    inside = [b for b in r["bands"] if b["t_lo"] >= lo and b["t_hi"] <= hi]
    if lo not in edges or hi not in edges or not inside:
        raise SystemExit("excess_scaling: --t-range %g %g does not fall on the bands' edges %s"
                         % (lo, hi, ", ".join("%g" % e for e in edges)))
    if len(inside) == len(r["bands"]):
        return r["total"]["excess"]["value"], r["total"]["excess"]["se"]
    value = sum(b["excess"] for b in inside)
    return value, math.sqrt(sum(b["excess_se"] ** 2 for b in inside))


def excess_of(spec, want_masked, t_range=None):
    """(excess, se, process, checkpoint) of one model in a time_bands JSON,
    over every t or over the bands of t_range."""
    path, _, index = spec.partition("@")
    with open(path) as f:
        results = json.load(f)["results"]
    k = int(index) if index else 0
    if not index and len(results) != 1:
        raise SystemExit("excess_scaling: %s holds %d models; name one as %s@K"
                         % (path, len(results), path))
    if not 0 <= k < len(results):
        raise SystemExit("excess_scaling: %s has no model %d" % (path, k))
    r = results[k]
    if (r["process"] == "masked") != want_masked:
        raise SystemExit("excess_scaling: %s is a %s model where a %s one belongs"
                         % (spec, r["process"], "masked" if want_masked else "uniform or mixture"))
    if t_range:
        value, se = band_excess(r, t_range)
    else:
        value, se = r["total"]["excess"]["value"], r["total"]["excess"]["se"]
    if not value > 0.0:
        raise SystemExit("excess_scaling: %s has an excess of %g; a power law needs it > 0"
                         % (spec, value))
    return value, se, r["process"], r["checkpoint"]


def parse_pair(arg, t_range):
    parts = arg.split(":")
    if len(parts) != 3:
        raise SystemExit("excess_scaling: a pair is SEQS:U_BANDS[@K]:M_BANDS[@K], not %r" % arg)
    seqs = float(parts[0])
    if not seqs > 0:
        raise SystemExit("excess_scaling: the sequences of %r must be > 0" % arg)
    u, m = excess_of(parts[1], False, t_range), excess_of(parts[2], True, t_range)
    return {"sequences": seqs, "u": u[0], "u_se": u[1], "u_process": u[2], "u_checkpoint": u[3],
            "m": m[0], "m_se": m[1], "m_checkpoint": m[3]}


def line_fit(x, y):
    """Least squares y = a + s x: (a, s, se of s from the residuals or nan)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    xm, ym = x.mean(), y.mean()
    sxx = ((x - xm) ** 2).sum()
    if sxx == 0.0:
        raise SystemExit("excess_scaling: the pairs do not spread along the fitted axis")
    s = ((x - xm) * (y - ym)).sum() / sxx
    a = ym - s * xm
    dof = len(x) - 2
    se = math.sqrt(((y - a - s * x) ** 2).sum() / dof / sxx) if dof > 0 else float("nan")
    return a, s, se


def exp_or_inf(x):
    """e^x, inf past the float range (a crossing of two near-parallel lines)."""
    return math.exp(x) if x < 700.0 else math.inf


def fits(seqs, u, m):
    """Every fitted figure of one set of excesses, as a dict."""
    ls, lu, lm = np.log(seqs), np.log(u), np.log(m)
    out = {}
    for name, ly in (("u", lu), ("m", lm)):
        a, s, se = line_fit(ls, ly)
        out[name + "_exponent"], out[name + "_exponent_se"], out[name + "_log_a"] = -s, se, a
    c, k, k_se = line_fit(lm, lu)
    out.update({"k": k, "k_se": k_se, "c": c})
    # U = M where (1 - k) ln M = c; the masked excess there, and where that
    # lies against the pairs measured
    out["m_cross"] = exp_or_inf(c / (1.0 - k)) if k != 1.0 else float("nan")
    if k != 1.0:
        out["cross"] = "ahead" if out["m_cross"] < m.min() else (
            "behind" if out["m_cross"] > m.max() else "within")
    else:
        out["cross"] = "none"
    # the same in sequences, from the two power laws
    db = out["u_exponent"] - out["m_exponent"]
    if db != 0.0:
        out["seq_cross"] = exp_or_inf((out["u_log_a"] - out["m_log_a"]) / db)
    else:
        out["seq_cross"] = float("nan")
    return out


def bootstrap(pairs, n, rng):
    seqs = np.array([p["sequences"] for p in pairs])
    u, us = np.array([p["u"] for p in pairs]), np.array([p["u_se"] for p in pairs])
    m, ms = np.array([p["m"] for p in pairs]), np.array([p["m_se"] for p in pairs])
    draws = []
    for _ in range(n):
        ub = np.maximum(u + us * rng.standard_normal(len(u)), 1e-12)
        mb = np.maximum(m + ms * rng.standard_normal(len(m)), 1e-12)
        draws.append(fits(seqs, ub, mb))
    return draws


def spread(draws, key):
    v = np.array([d[key] for d in draws])
    return float(v.std(ddof=1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", nargs="+", metavar="SEQS:U_BANDS[@K]:M_BANDS[@K]")
    ap.add_argument("--boot", type=int, default=4000, help="bootstrap draws (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--t-range", type=float, nargs=2, metavar=("LO", "HI"),
                    help="only the excess of the bands between these two of their edges "
                    "(the last band ends at the model's t_max; 1 reaches it)")
    ap.add_argument("--out", help="also write the figures here (JSON)")
    args = ap.parse_args(argv)
    if args.boot == 1 or args.boot < 0:
        raise SystemExit("excess_scaling: --boot is 0 (none) or at least 2 draws")
    pairs = [parse_pair(a, args.t_range) for a in args.pairs]
    if len(pairs) < 2:
        raise SystemExit("excess_scaling: a fit needs at least two pairs")
    seqs = np.array([p["sequences"] for p in pairs])
    u, m = np.array([p["u"] for p in pairs]), np.array([p["m"] for p in pairs])

    print("| sequences | uniform excess | masked excess | gap | uniform / masked |")
    print("|---|---|---|---|---|")
    for p in sorted(pairs, key=lambda p: p["sequences"]):
        print("| %.4g | %.4f ± %.4f | %.4f ± %.4f | %+.4f ± %.4f | %.2f |"
              % (p["sequences"], p["u"], p["u_se"], p["m"], p["m_se"], p["u"] - p["m"],
                 math.hypot(p["u_se"], p["m_se"]), p["u"] / p["m"]))

    f = fits(seqs, u, m)
    draws = bootstrap(pairs, args.boot, np.random.default_rng(args.seed)) if args.boot else []
    for key in ("u_exponent", "m_exponent", "k"):
        f[key + "_boot_se"] = spread(draws, key) if draws else float("nan")
    if draws:
        f["boot_share_k_above_1"] = float(np.mean([d["k"] > 1.0 for d in draws]))
        f["boot_share_cross_ahead"] = float(np.mean([d["cross"] == "ahead" for d in draws]))

    def fig(key):
        return "%.3f (± %.3f residuals, ± %.3f evaluation)" % (
            f[key], f[key + "_se"], f[key + "_boot_se"])
    print()
    print("excess ~ sequences^-b: uniform b = %s" % fig("u_exponent"))
    print("                        masked b = %s" % fig("m_exponent"))
    print("ln U = c + k ln M: k = %s, c = %.3f" % (fig("k"), f["c"]))
    errors = [e for e in (f["k_se"], f["k_boot_se"]) if math.isfinite(e)]
    f["k_resolved"] = bool(errors and abs(f["k"] - 1.0) > 2.0 * max(errors))
    print("k - 1 = %+.3f: %s two standard errors (the larger of the two kinds)"
          % (f["k"] - 1.0, "beyond" if f["k_resolved"] else "within"))
    if f["cross"] == "none":
        print("k = 1: the ratio U / M does not change with scale; no crossing")
    else:
        where = {"ahead": "ahead of", "behind": "behind", "within": "within"}[f["cross"]]
        print("U = M at a masked excess of %.3g: %s the pairs measured (masked's: %.4f-%.4f)"
              % (f["m_cross"], where, m.min(), m.max()))
        at = f["seq_cross"]
        where = "ahead of" if at > seqs.max() else "behind" if at < seqs.min() else "within"
        print("the two power laws meet at %.3g sequences: %s those measured (%.3g-%.3g)"
              % (at, where, seqs.min(), seqs.max()))
    if draws:
        print("bootstrap of the evaluation's errors (%d draws): k > 1 in %.1f%%, "
              "a crossing ahead in %.1f%%" % (args.boot, 100 * f["boot_share_k_above_1"],
                                               100 * f["boot_share_cross_ahead"]))
    if args.out:
        with open(args.out, "w") as fo:
            json.dump({"pairs": pairs, "fit": f, "boot": args.boot, "seed": args.seed,
                       "t_range": args.t_range}, fo, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
