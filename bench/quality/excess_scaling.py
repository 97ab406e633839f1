#!/usr/bin/env python3
"""Where (if anywhere) the uniform and masked curves cross: power laws
through each process's excess over the source's entropy, from time_bands.py
figures of pairs of models trained on the same number of sequences.

  excess_scaling.py SEQS:U_BANDS[@K]:M_BANDS[@K][:GROUP] [...] [--t-range LO HI]
                    [--boot 4000] [--seed 0] [--out fit.json]

SEQS is the training sequences each model of the pair saw (batch x steps);
U_BANDS is the time_bands.py JSON of the paper's-process model (uniform or
mixture), M_BANDS that of the masked model; @K picks the K-th model of a
file that holds several (0 when there is one). Several pairs may share a
SEQS (other seeds, or the same sequences in other batches); pairs given
the same GROUP (a training seed, a batch) share an intercept, every group
its own, and all one slope, so that a seed's offset is not read as noise
in the slope (no GROUP: one group). --t-range fits the excess of the
bands between two of their edges instead of the whole excess (its
standard error then treats the bands as independent, which they are not
quite: they share the sequences).

Two fits, both least squares in log-log with every pair weighted alike:
  1. each process's excess against sequences, E = A S^-b;
  2. the uniform excess against masked's, ln U = c + k ln M, which needs no
     notion of budget: along any path of scale that lowers masked's excess,
     U / M = e^c M^(k - 1), which falls as M does if k > 1 and grows if
     k < 1; U = M where M is M* = e^(c / (1 - k)).
Two kinds of error for each fitted figure: from the residuals (when there
are more pairs than parameters; this includes the spread between training
seeds and batches that their groups' intercepts do not take up) and from
the evaluation's
standard errors alone (a parametric bootstrap: every excess redrawn from a
normal with its standard error, the fit repeated). A crossing "ahead" is at
a smaller masked excess (more training) than any pair measured; "behind",
at a larger one; where k is within two standard errors of 1 the trend of
the ratio is not resolved and the crossing means nothing. What is always
given is the most favourable reading for a change of sign: k moved two
standard errors towards it, from each group's largest budget, and how
much smaller masked's excess (and how many times the sequences) it would
take. Three pairs on
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
    try:
        with open(path) as f:
            results = json.load(f)["results"]
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit("excess_scaling: %s is not a time_bands.py JSON (%s)"
                         % (path, e)) from None
    try:
        k = int(index) if index else 0
    except ValueError:
        raise SystemExit("excess_scaling: %r: K in FILE@K is a model's index" % spec) from None
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
    if len(parts) not in (3, 4):
        raise SystemExit("excess_scaling: a pair is SEQS:U_BANDS[@K]:M_BANDS[@K][:GROUP], "
                         "not %r" % arg)
    try:
        seqs = float(parts[0])
    except ValueError:
        seqs = float("nan")
    if not seqs > 0 or math.isinf(seqs):
        raise SystemExit("excess_scaling: the sequences of %r must be a number > 0" % arg)
    u, m = excess_of(parts[1], False, t_range), excess_of(parts[2], True, t_range)
    return {"sequences": seqs, "group": parts[3] if len(parts) == 4 else "",
            "u": u[0], "u_se": u[1], "u_process": u[2], "u_checkpoint": u[3],
            "m": m[0], "m_se": m[1], "m_checkpoint": m[3]}


def group_rows(groups, g):
    """The mask of the pairs in group g."""
    return np.array([h == g for h in groups])


def place(value, lo, hi, ahead_is_above):
    """Where value lies against the measured [lo, hi]: ahead (more
    training), behind or within."""
    if lo <= value <= hi:
        return "within"
    return "ahead" if (value > hi) == ahead_is_above else "behind"


def line_fit(x, y, groups):
    """Least squares y = a_g + s x, one intercept per group and one slope:
    ({group: a_g}, s, se of s from the residuals or nan). Centring each
    group on its own means takes a seed's (or a batch's) offset out of the
    slope and out of its error."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    xc, yc, means = x.copy(), y.copy(), {}
    for g in sorted(set(groups)):
        rows = group_rows(groups, g)
        means[g] = (x[rows].mean(), y[rows].mean())
        xc[rows] -= means[g][0]
        yc[rows] -= means[g][1]
    sxx = (xc ** 2).sum()
    if sxx == 0.0:
        raise SystemExit("excess_scaling: the pairs do not spread along the fitted axis "
                         "within a group")
    s = (xc * yc).sum() / sxx
    dof = len(x) - len(means) - 1
    se = math.sqrt(((yc - s * xc) ** 2).sum() / dof / sxx) if dof > 0 else float("nan")
    return {g: ym - s * xm for g, (xm, ym) in means.items()}, s, se


def exp_or_inf(x):
    """e^x, inf past the float range (a crossing of two near-parallel lines)."""
    return math.exp(x) if x < 700.0 else math.inf


def crossing(c, k, u_log_a, m_log_a, db, seqs, m):
    """Where U = M for one group: the masked excess M* there (from ln U =
    c + k ln M: (1 - k) ln M* = c), where that lies against the group's
    pairs, and the sequences where its two power laws meet."""
    out = {"c": c, "u_log_a": u_log_a, "m_log_a": m_log_a}
    if k != 1.0:
        out["m_cross"] = exp_or_inf(c / (1.0 - k))
        out["cross"] = place(out["m_cross"], m.min(), m.max(), ahead_is_above=False)
    else:
        out["m_cross"], out["cross"] = float("nan"), "none"
    if db != 0.0:
        out["seq_cross"] = exp_or_inf((u_log_a - m_log_a) / db)
        out["seq_cross_where"] = place(out["seq_cross"], seqs.min(), seqs.max(),
                                       ahead_is_above=True)
    else:
        out["seq_cross"], out["seq_cross_where"] = float("nan"), "none"
    return out


def toward_crossing(f, pairs):
    """The most favourable reading for a change of sign: k two standard
    errors (the larger kind) towards it, anchored at each group's largest
    budget, where U / M = r0 and M = M0; then U = M at
    M / M0 = r0^(-1 / (k - 1)), reached after (M0 / M)^(1 / b_M) times the
    sequences at masked's exponent. None where even that k keeps the sign."""
    err = max(e for e in (f["k_se"], f["k_boot_se"], 0.0) if math.isfinite(e))
    out = {}
    for g in f["groups"]:
        last = max((p for p in pairs if p["group"] == g), key=lambda p: p["sequences"])
        r0 = last["u"] / last["m"]
        k = f["k"] + 2.0 * err if r0 > 1.0 else f["k"] - 2.0 * err
        row = {"ratio": r0, "k": k, "m_factor": None, "seq_factor": None}
        if r0 != 1.0 and (k > 1.0) == (r0 > 1.0) and k != 1.0:
            row["m_factor"] = exp_or_inf(math.log(r0) / (k - 1.0))
            if f["m_exponent"] > 0.0:
                row["seq_factor"] = exp_or_inf(math.log(row["m_factor"]) / f["m_exponent"])
        out[g] = row
    return out


def fits(seqs, u, m, groups):
    """Every fitted figure of one set of excesses, as a dict."""
    ls, lu, lm = np.log(seqs), np.log(u), np.log(m)
    out = {}
    log_a = {}
    for name, ly in (("u", lu), ("m", lm)):
        log_a[name], s, se = line_fit(ls, ly, groups)
        out[name + "_exponent"], out[name + "_exponent_se"] = -s, se
    c, k, k_se = line_fit(lm, lu, groups)
    out.update({"k": k, "k_se": k_se})
    db = out["u_exponent"] - out["m_exponent"]
    out["groups"] = {}
    for g in sorted(c):
        rows = group_rows(groups, g)
        out["groups"][g] = crossing(c[g], k, log_a["u"][g], log_a["m"][g], db, seqs[rows],
                                    m[rows])
    return out


def bootstrap(pairs, n, rng):
    seqs = np.array([p["sequences"] for p in pairs])
    groups = [p["group"] for p in pairs]
    u, us = np.array([p["u"] for p in pairs]), np.array([p["u_se"] for p in pairs])
    m, ms = np.array([p["m"] for p in pairs]), np.array([p["m_se"] for p in pairs])
    draws = []
    for _ in range(n):
        ub = np.maximum(u + us * rng.standard_normal(len(u)), 1e-12)
        mb = np.maximum(m + ms * rng.standard_normal(len(m)), 1e-12)
        draws.append(fits(seqs, ub, mb, groups))
    return draws


def spread(draws, key):
    v = np.array([d[key] for d in draws])
    return float(v.std(ddof=1))


def report(f, seqs, m, groups, boot):
    def fig(key):
        return "%.3f (± %.3f residuals, ± %.3f evaluation)" % (
            f[key], f[key + "_se"], f[key + "_boot_se"])
    print()
    if len(f["groups"]) > 1:
        print("%d groups: one intercept each, one slope" % len(f["groups"]))
    print("excess ~ sequences^-b: uniform b = %s" % fig("u_exponent"))
    print("                        masked b = %s" % fig("m_exponent"))
    print("ln U = c + k ln M: k = %s" % fig("k"))
    print("k - 1 = %+.3f: %s two standard errors (the larger of the two kinds)"
          % (f["k"] - 1.0, "beyond" if f["k_resolved"] else "within"))
    if boot:
        print("bootstrap of the evaluation's errors (%d draws): k > 1 in %.1f%%"
              % (boot, 100 * f["boot_share_k_above_1"]))
    for g, row in f["toward_crossing"].items():
        name = "group %s: " % g if g else ""
        if row["m_factor"] is None:
            print("%sat k = %.3f (two standard errors towards U = M) U / M = %.2f keeps its side"
                  % (name, row["k"], row["ratio"]))
        else:
            print("%sat k = %.3f (two standard errors towards U = M) U / M = %.2f reaches 1 "
                  "once masked's excess is %.3g times smaller%s"
                  % (name, row["k"], row["ratio"], row["m_factor"],
                     ", after about %.3g times the sequences" % row["seq_factor"]
                     if row["seq_factor"] else ""))
    if not f["k_resolved"]:
        print("the trend of U / M is not resolved: no crossing placed (the JSON has the fits')")
        return
    # resolved, so k != 1 and every group has a crossing to place
    where = {"ahead": "ahead of", "behind": "behind", "within": "within"}
    for g, row in f["groups"].items():
        rows = group_rows(groups, g)
        name = "group %s: " % g if g else ""
        print("%sc = %.3f; U = M at a masked excess of %.3g: %s the pairs measured "
              "(masked's: %.4f-%.4f)%s"
              % (name, row["c"], row["m_cross"], where[row["cross"]], m[rows].min(),
                 m[rows].max(), ", ahead in %.1f%% of the draws"
                 % (100 * row["boot_share_cross_ahead"]) if boot else ""))
        if row["seq_cross_where"] != "none":
            print("%sthe two power laws meet at %.3g sequences: %s those measured (%.3g-%.3g)"
                  % (name, row["seq_cross"], where[row["seq_cross_where"]], seqs[rows].min(),
                     seqs[rows].max()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", nargs="+", metavar="SEQS:U_BANDS[@K]:M_BANDS[@K][:GROUP]")
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

    groups = [p["group"] for p in pairs]
    f = fits(seqs, u, m, groups)
    draws = bootstrap(pairs, args.boot, np.random.default_rng(args.seed)) if args.boot else []
    for key in ("u_exponent", "m_exponent", "k"):
        f[key + "_boot_se"] = spread(draws, key) if draws else float("nan")
    if draws:
        f["boot_share_k_above_1"] = float(np.mean([d["k"] > 1.0 for d in draws]))
        for g, row in f["groups"].items():
            row["boot_share_cross_ahead"] = float(
                np.mean([d["groups"][g]["cross"] == "ahead" for d in draws]))
    errors = [e for e in (f["k_se"], f["k_boot_se"]) if math.isfinite(e)]
    f["k_resolved"] = bool(errors and abs(f["k"] - 1.0) > 2.0 * max(errors))
    f["toward_crossing"] = toward_crossing(f, pairs)
    report(f, seqs, m, groups, args.boot if draws else 0)
    if args.out:
        with open(args.out, "w") as fo:
            json.dump({"pairs": pairs, "fit": f, "boot": args.boot, "seed": args.seed,
                       "t_range": args.t_range}, fo, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
