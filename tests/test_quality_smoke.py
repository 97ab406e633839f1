#!/usr/bin/env python3
"""Checks of the quality benchmark (tests/meson.build: quality_bench_smoke).

1. Each source's forward-algorithm log-likelihood equals brute force on a
   tiny variant: every hidden clean sequence enumerated with its probability
   read off the generative definition, the noise channel applied exactly.
   The probabilities over all sequences sum to 1.
2. Each tiny source's sampler draws from that distribution (a chi-square
   test of 200k draws against the exact probabilities).
3. The statistics mean what they say on hand-made sequences.
4. The runner trains a tiny model for a few steps through the binding,
   evaluates and samples it, writes its JSON and the markdown table.
5. The learning-curve script trains at the model size it is given, records
   it, refuses to resume under another size, cools the rate down to 0 when
   asked, tables each size apart, passes the mixture's p_u and a learning
   rate to the run, and its paired evaluation gives a checkpoint against
   itself a gap of zero.
6. The power-law fits of excess_scaling.py recover known exponents and
   crossings, and it refuses pairs it cannot read unambiguously.
7. time_variance.py finds the best time density of curves whose best is
   known, and its grid predicts the variance of direct draws;
   gradient_noise.py splits the gradient's mean square exactly and leaves
   the weights alone.
8. The GPU mode's CPU path: `backends/cuda/device_check.sh --synthetic` on
   the cpu backend at the smoke width writes one JSON per planned run (at
   the planned budgets' labels) and the table; the runner's training time
   cap stops a 20000-step run early and says so in its JSON.

Usage: test_quality_smoke.py [LIBRARY]   (LIBRARY: libnctmc.so.1 to drive)
Exit 0 when every check passes, 1 otherwise, 77 when numpy is missing.
"""
import itertools
import json
import os
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("quality_bench_smoke: skipped (numpy is not installed)")
    sys.exit(77)

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "quality")
sys.path.insert(0, HERE)
if len(sys.argv) > 1:
    os.environ["NCTMC_LIBRARY"] = os.path.abspath(sys.argv[1])
import sources as S  # noqa: E402

FAILED = []


def check(cond, what):
    print("  %s %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        FAILED.append(what)


def tiny_copychain():
    succ = [[(1, 0.7), (2, 0.3)], [(0, 0.4), (2, 0.6)], [(0, 1.0)]]
    return S.CopyChain(successors=succ, length=5, copy=0.6, eps=0.1)


def tiny_brackets(length=6):
    content = {"top": {0: 0.5, 1: 0.5}, "(": {0: 0.8, 1: 0.2}, "[": {1: 1.0}}
    return S.Brackets(length=length, max_depth=2, alternate=0.7, eps=0.1, content=content)


def clean_prob_copychain(src, z):
    """P(z) straight from the definition of the clean sequence."""
    length = len(z)
    p = src.init[z[0]]
    for i in range(1, length - 1):
        p *= src.trans[z[i - 1], z[i]]
    return p * (src.copy * (z[-1] == z[0]) + (1 - src.copy) * src.trans[z[-2], z[-1]])


def clean_prob_brackets(src, z):
    """P(z) by walking the grammar's definition (clean_step) token by token."""
    stack, p = (), 1.0
    for i, tok in enumerate(z):
        step = {t: (pr, nxt) for t, pr, nxt in
                _merge(src.clean_step(stack, len(z) - i))}
        if tok not in step:
            return 0.0
        pr, stack = step[tok]
        p *= pr
    return p if stack == () else 0.0


def _merge(entries):
    out = {}
    for t, pr, nxt in entries:
        old = out.get(t, (0.0, nxt))
        out[t] = (old[0] + pr, nxt)
    return [(t, pr, nxt) for t, (pr, nxt) in out.items()]


def brute_force(src, clean_prob):
    """p(x) for every x in vocab^length: sum over clean z of P(z) P(x | z)."""
    v, n = src.vocab, src.length
    pz = np.array([clean_prob(src, z) for z in itertools.product(range(v), repeat=n)])
    pz = pz.reshape((v,) * n)
    channel = (1 - src.eps) * np.eye(v) + src.eps / v  # channel[z, x]
    px = pz
    for axis in range(n):   # apply the channel along every position
        px = np.moveaxis(np.tensordot(px, channel, axes=([axis], [0])), -1, axis)
    return pz, px.reshape(-1)


def check_likelihood(name, src, clean_prob):
    pz, px = brute_force(src, clean_prob)
    xs = np.array(list(itertools.product(range(src.vocab), repeat=src.length)))
    lp = src.log_prob(xs)
    check(abs(pz.sum() - 1.0) < 1e-12, "%s: clean probabilities sum to 1 (%.15f)"
          % (name, pz.sum()))
    check(abs(px.sum() - 1.0) < 1e-12, "%s: observed probabilities sum to 1" % name)
    err = np.max(np.abs(lp - np.log(px)))
    check(err < 1e-10, "%s: forward algorithm = brute force over %d sequences "
          "(max |log p diff| %.2e)" % (name, len(xs), err))
    return pz, px


def check_posterior(name, src, pz, n=3):
    """log_marginal and clean_posterior for arbitrary positive evidence
    against sums over every clean sequence (pz: their probabilities)."""
    zs = np.array(list(itertools.product(range(src.vocab), repeat=src.length)))
    e = np.random.default_rng(7).uniform(0.05, 1.0, (n, src.length, src.vocab))
    pos = np.arange(src.length)
    joint = pz.reshape(-1)[None, :] * np.prod(e[:, pos, zs], axis=2)   # [n, z]
    err = np.max(np.abs(src.log_marginal(e) - np.log(joint.sum(axis=1))))
    check(err < 1e-10, "%s: log_marginal of random evidence = brute force (%.1e)" % (name, err))
    want = np.stack([np.stack([joint[:, zs[:, p] == v].sum(axis=1) for v in range(src.vocab)], 1)
                     for p in pos], 1) / joint.sum(axis=1)[:, None, None]
    err = np.max(np.abs(src.clean_posterior(e) - want))
    check(err < 1e-12, "%s: clean_posterior (forward-backward) = brute force (%.1e)" % (name, err))


def check_sampler(name, src, px, n=200000):
    x = src.sample(n, np.random.default_rng(1))
    codes = np.zeros(n, np.int64)
    for p in range(src.length):
        codes = codes * src.vocab + x[:, p]
    counts = np.bincount(codes, minlength=len(px))
    expected = px * n
    big = expected >= 5
    chi2 = ((counts[big] - expected[big]) ** 2 / expected[big]).sum()
    rest_obs, rest_exp = counts[~big].sum(), expected[~big].sum()
    if rest_exp > 0:
        chi2 += (rest_obs - rest_exp) ** 2 / rest_exp
    df = int(big.sum()) + (1 if rest_exp > 0 else 0) - 1
    # mean df, sd sqrt(2 df): 5 sd above the mean fails
    check(chi2 < df + 5 * np.sqrt(2 * df), "%s: sampler matches the likelihood "
          "(chi2 %.0f, df %d)" % (name, chi2, df))


def check_statistics():
    src = S.make_source("copychain")
    x = np.array([[0, 10, 1, 6, 8, 2, 0], [0, 11, 5, 4, 5, 6, 3]])
    src.length = 7
    bad, checked = src.forbidden(x)
    # both rows follow the table at positions 1 .. L-2; in x2 the steps 0->1,
    # 1->2, 2->3 and 3->4 are not in it, 4->5 is (5->6, into the last position,
    # is not checked)
    x2 = np.array([[0, 1, 2, 3, 4, 5, 6]])
    bad2, checked2 = src.forbidden(x2)
    check(list(bad) == [0, 0] and list(checked) == [5, 5] and bad2[0] == 4,
          "copychain: forbidden transitions counted (%s, %s)" % (list(bad), bad2[0]))
    hits, trials = src.statistics(x)["copy_rate"]
    check(list(hits) == [1, 0] and list(trials) == [1, 1], "copychain: copy rate")

    b = S.make_source("brackets")
    b.length = 8
    b._build_tables()
    # ( [ e ] ) a b c: valid; ) ( ...: the first close is forbidden
    good = np.array([[0, 2, 8, 3, 1, 4, 5, 6]])
    bad_seq = np.array([[1, 0, 2, 3, 1, 4, 4, 4]])
    vb, _ = b.forbidden(np.concatenate([good, bad_seq]))
    check(list(vb) == [0, 1], "brackets: grammar violations counted (%s)" % list(vb))
    st = b.statistics(good)
    check(st["alternation_rate"][0][0] == 1 and st["alternation_rate"][1][0] == 1
          and st["bracket_share"][0][0] == 4, "brackets: alternation and bracket share")
    ent = S.bigram_entropy_bits(np.array([[0, 1, 0, 1], [1, 0, 1, 0]]))
    check(abs(ent - 1.0) < 1e-12, "bigram entropy of two equiprobable pairs is 1 bit")


def check_runner():
    import bench_quality as B
    with tempfile.TemporaryDirectory() as tmp:
        outs = []
        ckpt = os.path.join(tmp, "c.safetensors")
        for src, proc in [("copychain", "uniform"), ("brackets", "masked")]:
            out = os.path.join(tmp, "%s_%s.json" % (src, proc))
            rc = B.main(["run", "--budget", "smoke", "--source", src, "--process", proc,
                         "--threads", "1", "--out", out, "--checkpoint", ckpt])
            check(rc == 0 and os.path.exists(out), "runner: %s / %s writes its JSON" % (src, proc))
            outs.append(out)
        # the saved checkpoint (EMA) samples exactly as the trained model did
        again = os.path.join(tmp, "again.json")
        B.main(["run", "--budget", "smoke", "--source", "brackets", "--process", "masked",
                "--threads", "1", "--out", again, "--from-checkpoint", ckpt,
                "--previous", outs[1], "--eval-seqs", "32"])
        a, b = json.load(open(outs[1])), json.load(open(again))
        same = [(x["gen_nll_bits_per_token"], x["forbidden_share"]) for x in a["samples"]] == \
            [(x["gen_nll_bits_per_token"], x["forbidden_share"]) for x in b["samples"]]
        check(same and b["training"]["curve"] == a["training"]["curve"]
              and b["eval"]["n_tokens"] == 32 * 24,
              "runner: a rescored checkpoint gives the same samples, a new NELBO")
        r = json.load(open(outs[1]))
        cells = {(s["method"], s["steps"]) for s in r["samples"]}
        check(cells == {(m, k) for m in ("tau", "euler", "posterior") for k in (4, 8)},
              "runner: every sampler at every step count")
        check(r["model_config"]["vocab_size"] == 13 and r["process"] == "masked",
              "runner: the masked model has the mask token as a 13th state")
        fin = all(np.isfinite(s[k]) for s in r["samples"] for k in
                  ("gen_nll_over_entropy", "forbidden_share", "bigram_entropy_ratio"))
        check(fin and np.isfinite(r["eval"]["nelbo_bits_per_token"]),
              "runner: NELBO and every sample figure are finite")
        md = B.table(outs)
        check("### copychain" in md and "### brackets" in md and "| masked |" in md,
              "runner: markdown table of both runs")
        # unknown model settings reach the binding, which refuses them by name
        try:
            B.main(["run", "--budget", "smoke", "--source", "copychain", "--threads", "1",
                    "--config", "no_such_field=1", "--out", os.path.join(tmp, "x.json")])
            check(False, "runner: an unknown --config key is refused")
        except TypeError as e:
            check("no_such_field" in str(e), "runner: an unknown --config key is refused")


def check_learning_curve():
    import io
    import contextlib
    import learning_curve as LC
    size = ["--layers", "1", "--d-model", "16", "--heads", "2", "--cond-dim", "8"]
    common = ["--source", "copychain", "--eval-seqs", "16", "--eval-time-samples", "2"]
    with tempfile.TemporaryDirectory() as tmp:
        def path(name):
            return os.path.join(tmp, name)
        LC.main(["run", "--process", "uniform", "--points", "2,4", "--out", path("u.json"),
                 "--checkpoint", path("u.ckpt")] + common + size)
        u = json.load(open(path("u.json")))
        c = u["config"]
        check((c["n_layers"], c["d_model"], c["n_heads"], c["cond_dim"]) == (1, 16, 2, 8)
              and [p["step"] for p in u["curve"]] == [2, 4]
              and all(np.isfinite(p["nelbo"]) for p in u["curve"]),
              "learning curve: trains and records the size it is given")
        check_refused(LC, ["run", "--process", "uniform", "--points", "6", "--out",
                           path("x.json"), "--resume", path("u.ckpt"), "--previous",
                           path("u.json"), "--d-model", "32"] + common + size[:2] + size[4:],
                      "not a run of these settings",
                      "learning curve: resuming under another size is refused")
        LC.main(["run", "--process", "uniform", "--points", "6", "--out", path("u6.json"),
                 "--resume", path("u.ckpt"), "--previous", path("u.json")] + common + size)
        u6 = json.load(open(path("u6.json")))
        check([p["step"] for p in u6["curve"]] == [2, 4, 6] and u6["curve"][:2] == u["curve"],
              "learning curve: a resumed run keeps the curve and adds its points")
        LC.main(["run", "--process", "uniform", "--points", "8", "--cooldown", "4",
                 "--out", path("c.json"), "--resume", path("u.ckpt"),
                 "--previous", path("u.json")] + common + size)
        cd = json.load(open(path("c.json")))
        # steps 4..7 follow the cosine from the peak at 4 towards 0 at 8
        peak = cd["budget"]["lr"]
        last = peak * 0.5 * (1 + np.cos(np.pi * 3 / 4))
        check(cd["cooldown"] == {"from_step": 4, "steps": 4, "to_ratio": 0.0}
              and cd["curve"][-1]["step"] == 8
              and abs(cd["curve"][-1]["learning_rate"] - last) < 1e-6 * peak,
              "learning curve: a cooldown follows the cosine from the peak towards 0")
        LC.main(["run", "--process", "uniform", "--points", "2", "--out", path("w.json"),
                 "--layers", "1", "--d-model", "8", "--heads", "1", "--cond-dim", "8"] + common)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            LC.main(["table", path("u.json"), path("w.json")])
        check("d 16" in out.getvalue() and "d 8" in out.getvalue(),
              "learning curve: one table per model size")
        with contextlib.redirect_stdout(io.StringIO()):
            LC.main(["paired", path("u.ckpt"), path("u.ckpt"), "--source", "copychain",
                     "--eval-seqs", "16", "--time-samples", "2", "--chunks", "4",
                     "--out", path("p.json")])
        pr = json.load(open(path("p.json")))
        check(pr["gap_vs_last"] == [0.0] and np.isfinite(pr["nelbo"][0]),
              "learning curve: a checkpoint paired with itself has a gap of exactly 0")
        LC.main(["run", "--process", "masked", "--points", "2", "--out", path("m.json"),
                 "--checkpoint", path("m.ckpt")] + common + size)
        check_time_bands([path("u.ckpt"), path("m.ckpt")], path("bands.json"))
        check_time_variance([path("u.ckpt"), path("m.ckpt")], path("variance.json"))
        check_gradient_noise([path("u.ckpt"), path("m.ckpt")], path("variance.json"),
                             path("noise.json"))
        check_excess_scaling(path, path("bands.json"))
        check_mixture_share(LC, path, common + size)
        check_budget_flag(LC, path, common + size, "--lr", 3e-3, "learning_rate")
        check_batch(LC, path, common + size)
        check_grad_clip(LC, path, common + size)


def check_refused(script, argv, message, what):
    """The script's main (learning_curve.py's, excess_scaling.py's) stops on
    argv with an error that says message."""
    try:
        script.main(argv)
        check(False, what)
    except SystemExit as e:
        check(message in str(e), what)


def check_budget_flag(LC, path, args, flag, value, param):
    """A budget flag of learning_curve.py reaches the trainer (its saved
    parameter and the JSON's budget say the value given), and a run with it
    is not resumed without it. Returns the run's JSON."""
    import nctmc
    name = flag.lstrip("-").replace("-", "_")
    LC.main(["run", "--process", "uniform", flag, str(value), "--points", "2",
             "--out", path(name + ".json"), "--checkpoint", path(name + ".ckpt")] + args)
    saved = nctmc.Trainer.inspect(path(name + ".ckpt"), nctmc.Context(backend="cpu", threads=1))
    run = json.load(open(path(name + ".json")))
    check(abs(saved["params"][param] - value) < 1e-9 and run["budget"][name] == value,
          "learning curve: %s %g is the saved trainer's %s (%g)"
          % (flag, value, param, saved["params"][param]))
    check_refused(LC, ["run", "--process", "uniform", "--points", "4",
                       "--out", path(name + "4.json"), "--resume", path(name + ".ckpt"),
                       "--previous", path(name + ".json")] + args,
                  "not a run of these settings",
                  "learning curve: a run at %s %g is not resumed without it" % (flag, value))
    return run


def check_batch(LC, path, args):
    """--batch reaches the trainer (and the tokens counted), a run of one
    batch is not resumed under another, and a batch below 1 is refused."""
    run = check_budget_flag(LC, path, args, "--batch", 3, "batch_size")
    check(run["curve"][-1]["tokens"] == 2 * 3 * run["config"]["seq_len"],
          "learning curve: the tokens counted at --batch 3 are 2 steps x 3 sequences")
    check_refused(LC, ["run", "--process", "masked", "--batch", "0", "--points", "2",
                       "--out", path("b0.json")] + args,
                  "--batch must be at least 1", "learning curve: --batch 0 is refused")


def check_grad_clip(LC, path, args):
    """--grad-clip reaches the trainer (0 turns clipping off), every point
    records the gradient norms of the steps before it, a run recorded before
    the flag existed resumes as the default limit of 1, and a negative limit
    is refused."""
    run = check_budget_flag(LC, path, args, "--grad-clip", 0.0, "grad_clip")
    g = run["curve"][-1]["grad_norm"]
    check(0 < g["median"] <= g["p90"] <= g["max"] and 0 <= g["share_over_1"] <= 1,
          "learning curve: each point records its steps' gradient norms (median %.3g, "
          "p90 %.3g, max %.3g)" % (g["median"], g["p90"], g["max"]))
    # one step per point: each record is that step's norm alone (a record
    # that kept the earlier points' steps would have a median below its max)
    LC.main(["run", "--process", "uniform", "--grad-clip", "0", "--points", "1,2,3",
             "--out", path("g123.json")] + args)
    recs = [p["grad_norm"] for p in json.load(open(path("g123.json")))["curve"]]
    check(all(r["median"] == r["p90"] == r["max"] > 0 for r in recs)
          and len({r["max"] for r in recs}) == 3,
          "learning curve: each point's norms are its own steps' (%s)"
          % ", ".join("%.4g" % r["max"] for r in recs))
    LC.main(["run", "--process", "uniform", "--points", "2", "--out", path("g1.json"),
             "--checkpoint", path("g1.ckpt")] + args)
    old = json.load(open(path("g1.json")))
    del old["budget"]["grad_clip"]
    json.dump(old, open(path("g1.json"), "w"))
    LC.main(["run", "--process", "uniform", "--points", "4", "--out", path("g4.json"),
             "--resume", path("g1.ckpt"), "--previous", path("g1.json")] + args)
    check(json.load(open(path("g4.json")))["budget"]["grad_clip"] == 1.0,
          "learning curve: a run recorded without a limit resumes at the default 1")
    check_refused(LC, ["run", "--process", "uniform", "--grad-clip", "-1", "--points", "2",
                       "--out", path("gn.json")] + args,
                  "--grad-clip must be >= 0", "learning curve: a negative --grad-clip is refused")


def check_mixture_share(LC, path, args):
    """--mixture-uniform reaches the model (its saved configuration and the
    JSON say the p_u given) and is refused for a process without one."""
    import nctmc
    LC.main(["run", "--process", "mixture", "--mixture-uniform", "0.3", "--points", "2",
             "--out", path("x3.json"), "--checkpoint", path("x3.ckpt")] + args)
    saved = nctmc.Model.load(path("x3.ckpt"), nctmc.Context(backend="cpu", threads=1))
    recorded = json.load(open(path("x3.json")))["config"]["mixture_uniform"]
    check(abs(saved.config["mixture_uniform"] - 0.3) < 1e-7 and recorded == 0.3,
          "learning curve: --mixture-uniform 0.3 is the saved model's p_u (%.4g)"
          % saved.config["mixture_uniform"])
    check_refused(LC, ["run", "--process", "uniform", "--mixture-uniform", "0.3",
                       "--points", "2", "--out", path("x.json")] + args,
                  "--process mixture",
                  "learning curve: --mixture-uniform is refused for the uniform process")


def check_time_bands(checkpoints, out):
    """The NELBO split by time band on two barely trained models: whatever
    the model, the best possible NELBO of its process is the source's
    entropy, the excess splits into an exit-rate part and a non-negative
    jump part, and the masked model's exit rate is exact."""
    import io
    import contextlib
    import time_bands as TB
    with contextlib.redirect_stdout(io.StringIO()):
        TB.main(checkpoints + ["--source", "copychain", "--eval-seqs", "64", "--samples", "2",
                               "--out", out])
    for r in json.load(open(out))["results"]:
        name = "time bands (%s)" % r["process"]
        gap, se = r["best_minus_entropy"]
        check(abs(gap) < 4 * se, "%s: the best possible NELBO is the source's entropy "
              "(%+.4f +- %.4f)" % (name, gap, se))
        lib = abs(r["nelbo"] - r["library_nelbo"])
        check(lib < 4 * np.hypot(r["nelbo_se"], r["library_se"]),
              "%s: the bands' NELBO agrees with nctmc_eval (%.3f vs %.3f)"
              % (name, r["nelbo"], r["library_nelbo"]))
        parts = all(b["excess"] - b["rate"] >= -1e-9 and b["rate"] >= 0.0
                    for b in r["bands"]) and r["total"]["excess"]["value"] > 0
        check(parts, "%s: every band's excess = exit rate + jump, each >= 0" % name)
        # every noise position of the masked process is a mask; the uniform has none
        ex_mask, ex_noisy = r["total"]["excess_mask"]["value"], r["total"]["excess_noisy"]["value"]
        want = ex_noisy if r["process"] == "masked" else 0.0
        check(abs(ex_mask - want) < 1e-12 and (r["process"] != "masked" or ex_mask > 0),
              "%s: the excess at masks (%.4g) is %s" % (name, ex_mask,
              "all of the excess at noise" if r["process"] == "masked" else "0"))
        if r["process"] == "masked":
            # the library's rate is the exact one, rounded to float32
            rate = max(b["rate"] for b in r["bands"])
            check(rate < 1e-9, "%s: the masked exit rate is exact (excess %.1e)" % (name, rate))


def check_time_variance(checkpoints, out):
    """The variance algebra on curves with a known best density, then a run
    on two barely trained models whose grid prediction must agree with the
    same estimate drawn directly."""
    import io
    import contextlib
    import time_variance as TV
    t, dt = TV.grid_times(1e-3, 400)
    # sd(t) ~ t^-1/2: the best density is sqrt's, and no density beats it
    table, best_a, opt = TV.compare(np.zeros_like(t), 1.0 / t, t, dt)
    rows = {r["density"]: r for r in table}
    check(best_a == 0.5 and abs(rows["optimal"]["stratified_vs_sqrt"] - 1.0) < 1e-9
          and all(r["stratified_vs_sqrt"] > 1.0 + 1e-6 for name, r in rows.items()
                  if name not in ("sqrt", "optimal", "optimal (plain)", "power 0.50 (best)"))
          and all(abs(r["plain"] - r["stratified"]) < 1e-9 * r["plain"] for r in table),
          "time variance: sd ~ t^-1/2 makes sqrt the best density (best power %.2f)" % best_a)
    # sd(t) = 1 + 10 * [t < 0.01]: the optimum is (int sd dt)^2 and beats every other
    sd = 1.0 + 10.0 * (t < 0.01)
    table, _, opt = TV.compare(np.ones_like(t), sd * sd, t, dt)
    rows = {r["density"]: r for r in table}
    want = float((sd * dt).sum()) ** 2
    check(abs(rows["optimal"]["stratified"] - want) < 1e-9 * want
          and all(r["stratified"] >= want * (1 - 1e-12) for r in table)
          and all(r["plain"] >= rows["optimal (plain)"]["plain"] * (1 - 1e-12) for r in table)
          and abs((opt * dt).sum() - 1.0) < 1e-12,
          "time variance: the best density gives (int sd dt)^2 = %.4f and no other less" % want)
    with contextlib.redirect_stdout(io.StringIO()):
        TV.main(checkpoints + ["--source", "copychain", "--eval-seqs", "256", "--grid", "48",
                               "--check-draws", "4096", "--check-batches", "64",
                               "--check-batch", "64", "--out", out])
    for r in json.load(open(out))["results"]:
        sq = next(d for d in r["densities"] if d["density"] == "sqrt")
        c = r["direct_check"]
        check(abs(c["mean"] - r["loss"]) < 4 * c["mean_se"] + 0.02 * r["loss"]
              and abs(c["plain"] / sq["plain"] - 1.0) < 0.25,
              "time variance (%s): the grid's loss and sqrt's variance (%.4f, %.4f) agree "
              "with independent draws (%.4f +- %.4f, %.4f)"
              % (r["process"], r["loss"], sq["plain"], c["mean"], c["mean_se"], c["plain"]))
        # 64 batch means: their variance is known to about 18%
        check(abs(c["stratified"] / sq["stratified"] - 1.0) < 0.6
              and c["stratified"] < 0.6 * c["plain"],
              "time variance (%s): stratified batches drawn as the trainer draws them have "
              "the grid's stratified variance (%.4f against %.4f), well below the plain one"
              % (r["process"], c["stratified"], sq["stratified"]))


def check_gradient_noise(checkpoints, proxy, out):
    """The split of E|g|^2 into the full gradient and one row's noise is
    exact on made-up figures; on two tiny models the trainer at learning
    rate 0 leaves the weights as they were, and the proxy's ratios are
    matched to the same checkpoints."""
    import io
    import contextlib
    import gradient_noise as GN
    mu2, noise = GN.decompose(128, 0.3 + 5.0 / 128, 16, 0.3 + 5.0 / 16)
    check(abs(mu2 - 0.3) < 1e-12 and abs(noise - 5.0) < 1e-9,
          "gradient noise: E|g|^2 at two batches splits into |mu|^2 0.3 and T 5 (%.6g, %.6g)"
          % (mu2, noise))
    with contextlib.redirect_stdout(io.StringIO()):
        GN.main(checkpoints + ["--source", "copychain", "--rows", "64", "--batch", "16",
                               "--proxy", proxy, "--out", out])
    want = {r["checkpoint"]: {d["density"]: d["stratified_vs_sqrt"] for d in r["densities"]}
            for r in json.load(open(proxy))["results"]}
    for r in json.load(open(out))["results"]:
        ratios = {d["density"]: d["noise_vs_sqrt"] for d in r["densities"]}
        check(r["weights_unchanged"] and ratios["sqrt"] == 1.0
              and all(np.isfinite(v) for v in ratios.values())
              and all(d["proxy_vs_sqrt"] == want[r["checkpoint"]][d["density"]]
                      for d in r["densities"]),
              "gradient noise (%s): the weights stay put at learning rate 0, and each "
              "density's noise is set beside its own proxy" % os.path.basename(r["checkpoint"]))


def check_excess_scaling(path, bands):
    """The power-law fits recover the exponents, k and the crossing of
    excesses made to follow known power laws, on either side of k = 1, and
    in one band of t alone; a --t-range off the bands' edges, a file of
    several models without @K and a masked model in the uniform slot are
    refused."""
    import io
    import contextlib
    import excess_scaling as ES

    def bands_file(name, process, excess, rest, se):
        """excess in t < 0.5, rest above it (t_max 0.999 or 1, as the
        processes have it), the total's standard error se"""
        bands = [{"t_lo": 0.0, "t_hi": 0.5, "excess": excess, "excess_se": 0.0},
                 {"t_lo": 0.5, "t_hi": 1.0 if process == "masked" else 0.999,
                  "excess": rest, "excess_se": 0.0}]
        with open(path(name), "w") as f:
            json.dump({"results": [{"process": process, "checkpoint": name, "bands": bands,
                                    "total": {"excess": {"value": excess + rest,
                                                         "se": se}}}]}, f)
        return path(name)

    def pairs_of(name, u_of, m_of, rest=0.0, se=0.0, group=""):
        return ["%g:%s:%s%s" % (s, bands_file("%s_u%g.json" % (name, s), "uniform", u_of(s),
                                              rest, se * u_of(s)),
                                bands_file("%s_m%g.json" % (name, s), "masked", m_of(s), rest,
                                           se * m_of(s)), ":" + group if group else "")
                for s in (1.0, 4.0, 16.0)]

    def fit(name, u_of, m_of, rest=0.0, flags=(), se=0.0, more=()):
        pairs = pairs_of(name, u_of, m_of, rest, se) + list(more)
        with contextlib.redirect_stdout(io.StringIO()):
            ES.main(pairs + ["--boot", "8", "--out", path(name + ".json")] + list(flags))
        return json.load(open(path(name + ".json")))["fit"]

    # U = 2 S^-0.4, M = S^-0.5: ln U = ln 2 + 0.8 ln M, U = M at M = 2^5
    f = fit("behind", lambda s: 2 * s ** -0.4, lambda s: s ** -0.5)
    check(abs(f["u_exponent"] - 0.4) < 1e-9 and abs(f["m_exponent"] - 0.5) < 1e-9
          and abs(f["k"] - 0.8) < 1e-9 and abs(f["groups"][""]["m_cross"] - 32) < 1e-6
          and f["groups"][""]["cross"] == "behind" and f["boot_share_k_above_1"] == 0.0
          and f["k_resolved"],
          "excess scaling: exponents 0.4 / 0.5, k 0.8, U = M behind at M = 32 (%.4g, %.4g, "
          "%.4g, %s)" % (f["u_exponent"], f["m_exponent"], f["k"], f["groups"][""]["cross"]))
    # U = 2 S^-0.6, M = S^-0.5: k = 1.2, U = M at M = 1/32, S = 1024
    f = fit("ahead", lambda s: 2 * s ** -0.6, lambda s: s ** -0.5)
    g = f["groups"][""]
    check(abs(f["k"] - 1.2) < 1e-9 and abs(g["m_cross"] - 1 / 32) < 1e-9
          and abs(g["seq_cross"] - 1024) < 1e-6 and g["cross"] == "ahead"
          and g["boot_share_cross_ahead"] == 1.0,
          "excess scaling: k 1.2 puts U = M ahead, at M = 1/32 and 1024 sequences "
          "(%.4g, %.4g)" % (g["m_cross"], g["seq_cross"]))
    # two seeds of the same laws at other levels: one slope, an intercept each
    f = fit("seedA", lambda s: 2 * s ** -0.6, lambda s: s ** -0.5, more=pairs_of(
        "seedB", lambda s: 3 * s ** -0.6, lambda s: 1.2 * s ** -0.5, group="B"))
    pooled = fit("pooled", lambda s: 2 * s ** -0.6, lambda s: s ** -0.5, more=pairs_of(
        "seedB", lambda s: 3 * s ** -0.6, lambda s: 1.2 * s ** -0.5))
    check(abs(f["k"] - 1.2) < 1e-9 and f["k_se"] < 1e-6 and abs(pooled["k"] - 1.2) > 0.01
          and abs(f["groups"]["B"]["c"] - (np.log(3) - 1.2 * np.log(1.2))) < 1e-9,
          "excess scaling: two groups at other levels keep k = 1.2 (%.6g; pooled as one "
          "group: %.4g)" % (f["k"], pooled["k"]))
    # U = 1.5 M, each known to 1%: the ratio does not move, so the trend
    # is not resolved and there is no crossing to place
    f = fit("parallel", lambda s: 1.5 * s ** -0.5, lambda s: s ** -0.5, se=0.01)
    check(abs(f["k"] - 1.0) < 1e-9 and f["k_boot_se"] > 0.0 and not f["k_resolved"],
          "excess scaling: U = 1.5 M gives k = 1 (%.6g), a trend not resolved" % f["k"])
    # its most favourable reading: k two bootstrap errors up; 1.5 M^(k - 1)
    # = 1 once M is 1.5^(1 / (k - 1)) times smaller, S^-0.5 that many squared
    t = f["toward_crossing"][""]
    k_up = 1.0 + 2.0 * f["k_boot_se"]
    m_factor = 1.5 ** (1.0 / (k_up - 1.0))
    check(abs(t["k"] - k_up) < 1e-6 and abs(t["m_factor"] / m_factor - 1.0) < 1e-3
          and abs(t["seq_factor"] / m_factor ** 2 - 1.0) < 1e-3,
          "excess scaling: at k + 2 se = %.4f, U = M once M is %.4g times smaller (%.4g times "
          "the sequences)" % (t["k"], t["m_factor"], t["seq_factor"]))
    # the same power laws in t < 0.5 only, under a constant excess above it
    f = fit("band", lambda s: 2 * s ** -0.4, lambda s: s ** -0.5, 0.3, ["--t-range", "0", "0.5"])
    whole = fit("band_all", lambda s: 2 * s ** -0.4, lambda s: s ** -0.5, 0.3)
    check(abs(f["u_exponent"] - 0.4) < 1e-9 and abs(f["k"] - 0.8) < 1e-9
          and abs(whole["u_exponent"] - 0.4) > 0.05,
          "excess scaling: --t-range 0 0.5 fits that band's excess alone (k %.4g; the whole "
          "excess's exponent %.4g)" % (f["k"], whole["u_exponent"]))
    for argv, message, what in (
            (["1:%s:%s" % (path("band_u1.json"), path("band_m1.json")),
              "4:%s:%s" % (path("band_u4.json"), path("band_m4.json")), "--t-range", "0.1", "0.5"],
             "does not fall on the bands' edges", "a --t-range off the bands' edges"),
            (["1:%s:%s" % (bands, bands)] * 2, "name one as", "a file of two models without @K"),
            (["1:%s@1:%s@1" % (bands, bands)] * 2, "where a uniform or mixture one belongs",
             "a masked model in the uniform slot")):
        check_refused(ES, argv, message, "excess scaling: %s is refused" % what)


def check_synthetic_mode():
    import subprocess
    import bench_quality as B
    root = os.path.abspath(os.path.join(HERE, "..", ".."))
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, OUT=tmp, SYNTHETIC_BACKEND="cpu", SYNTHETIC_PYTHON=sys.executable,
                   SYNTHETIC_ARGS="--budget smoke --threads 1",
                   NCTMC_SYNTH_CARRY_DIR=os.path.join(tmp, "none"),
                   NCTMC_SYNTH_LIBRARY=os.environ["NCTMC_LIBRARY"])
        r = subprocess.run(["sh", os.path.join(root, "backends", "cuda", "device_check.sh"),
                            "--synthetic"], env=env, capture_output=True, text=True, timeout=600)
        files = sorted(f for f in os.listdir(os.path.join(tmp, "synthetic")) if f.endswith(".json"))
        want = sorted(["gpu_copychain_uniform.json", "gpu_copychain_masked.json",
                       "gpu_brackets_uniform.json", "gpu_brackets_masked.json",
                       "gpu_wide_brackets_uniform.json", "gpu_wide_brackets_masked.json"])
        labels = sorted(json.load(open(os.path.join(tmp, "synthetic", f)))["label"] for f in files)
        check(r.returncode == 0 and files == want and "gpu_wide masked" in labels
              and os.path.exists(os.path.join(tmp, "synthetic", "table.md")),
              "device_check.sh --synthetic (cpu, smoke width): every planned run's JSON and the "
              "table (exit %d, %s)%s" % (r.returncode, files,
                                         "" if r.returncode == 0 else "\n" + r.stdout[-2000:]))
        out = os.path.join(tmp, "cap.json")
        B.main(["run", "--budget", "smoke", "--steps", "20000", "--source", "copychain",
                "--threads", "1", "--max-train-seconds", "0.5", "--out", out])
        t = json.load(open(out))["training"]
        check(t["stopped_by_time_cap"] and 0 < t["steps_done"] < 20000
              and t["steps_done"] % 50 == 0,
              "runner: --max-train-seconds stops a 20000-step run early (at step %d)"
              % t["steps_done"])


def main():
    print("quality benchmark checks")
    pz, px = check_likelihood("copychain (S=3, L=5)", tiny_copychain(), clean_prob_copychain)
    check_sampler("copychain (S=3, L=5)", tiny_copychain(), px)
    check_posterior("copychain (S=3, L=5)", tiny_copychain(), pz)
    pz, px = check_likelihood("brackets (S=6, L=6)", tiny_brackets(), clean_prob_brackets)
    check_posterior("brackets (S=6, L=6)", tiny_brackets(), pz)
    src4 = tiny_brackets(length=4)
    _, px4 = brute_force(src4, clean_prob_brackets)
    check_sampler("brackets (S=6, L=4)", src4, px4)
    check_statistics()
    check_runner()
    check_synthetic_mode()
    check_learning_curve()
    print("quality_bench_smoke: %d failed" % len(FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
