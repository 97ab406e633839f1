#!/usr/bin/python3
"""Measures the sampler's settings on a class-conditional digits model.

For a checkpoint trained on examples/data/digits.txt (docs/cli.md, "A
complete run"), draws --per-class samples of every digit under each setting
and scores them with an independent classifier — k nearest neighbours (k =
3, Euclidean on the 64 grey levels) over the 1797 real digits, whose own
leave-one-out accuracy is printed first — plus two figures that expose
over-sharpening and noise:

  acc      share of samples the classifier puts in the class they were drawn for
  div      mean distance between two samples of a class, over the same for the
           real digits of that class (1 = as diverse as the data; << 1: collapse)
  nn       mean distance from a sample to its nearest real digit, over the
           real digits' own leave-one-out figure (1 = as close to the data as
           the data itself; > 1: noisy or off the data)

Sections (--only picks some):
  denoise    the final denoising step at t_min: how many tokens it changes
             (and, for the masked process, how many masks it removes) and the
             scores with and without it, tau-leaping and posterior, 16/64/128
             steps
  cfg        the two guidance rules (cfg_rule) at scales 1, 2, 3, 5
  correct    self-correction: none, greedy and Gibbs-like, K updates

Run from the repository root after building (meson setup build; ninja -C build):

  NCTMC_LIBRARY=build/libnctmc.so.1 PYTHONPATH=python \\
      /usr/bin/python3 scripts/sampler_settings.py CHECKPOINT [--per-class N] [--threads N]
"""
import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import nctmc  # noqa: E402

BASE17 = "0123456789abcdefg"


def load_digits(path):
    images, labels = [], []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            label, pixels = line.strip().split(":")
            labels.append(int(label))
            images.append([BASE17.index(c) for c in pixels])
    return np.array(images, dtype=np.float64), np.array(labels)


class Scorer:
    """kNN classifier and distance figures over the real digits."""

    def __init__(self, images, labels, k=3):
        self.x, self.y, self.k = images, labels, k
        d = self._dist(images)
        np.fill_diagonal(d, np.inf)
        self.loo_acc = float(np.mean(self._vote(d) == labels))
        self.real_nn = float(np.mean(np.min(d, axis=1)))
        self.real_div = {c: self._pairwise(images[labels == c]) for c in range(10)}

    def _dist(self, a):
        sq = (a * a).sum(1)[:, None] + (self.x * self.x).sum(1)[None, :] - 2.0 * a @ self.x.T
        return np.sqrt(np.maximum(sq, 0.0))

    def _vote(self, d):
        nearest = np.argsort(d, axis=1)[:, :self.k]
        votes = self.y[nearest]
        return np.array([np.bincount(v, minlength=10).argmax() for v in votes])

    @staticmethod
    def _pairwise(a):
        if len(a) < 2:
            return 0.0
        sq = (a * a).sum(1)[:, None] + (a * a).sum(1)[None, :] - 2.0 * a @ a.T
        d = np.sqrt(np.maximum(sq, 0.0))
        n = len(a)
        return float(d.sum() / (n * (n - 1)))

    def score(self, samples, labels):
        d = self._dist(samples)
        acc = float(np.mean(self._vote(d) == labels))
        nn = float(np.mean(np.min(d, axis=1))) / self.real_nn
        div = np.mean([self._pairwise(samples[labels == c]) / self.real_div[c]
                       for c in range(10) if np.sum(labels == c) > 1])
        return acc, float(div), nn


def draw(sampler, labels, n_data, **kw):
    """Samples for `labels` in batches of the sampler's size; masks (token
    >= n_data) are counted and scored as blank pixels."""
    out = []
    for b0 in range(0, len(labels), sampler.max_batch):
        lab = labels[b0:b0 + sampler.max_batch]
        out.append(sampler.sample(batch=len(lab), labels=lab, first_sequence=b0, **kw))
    tokens = np.concatenate(out)
    masks = int(np.sum(tokens >= n_data))
    return tokens, np.where(tokens >= n_data, 0, tokens).astype(np.float64), masks


def line(name, scores, extra=""):
    acc, div, nn = scores
    print(f"  {name:<34} acc {acc:6.3f}  div {div:5.3f}  nn {nn:5.3f}{extra}", flush=True)


def section_denoise(sampler, labels, n_data, scorer, seed):
    print("final denoising step (same seed: the grid's state is the same with and without)")
    for method in ("tau", "posterior"):
        for steps in (16, 64, 128):
            kw = dict(method=method, steps=steps, seed=seed)
            raw_t, raw, masks = draw(sampler, labels, n_data, final_denoise=False, **kw)
            den_t, den, _ = draw(sampler, labels, n_data, final_denoise=True, **kw)
            changed = int(np.sum(raw_t != den_t))
            line(f"{method} {steps:3d} steps, no denoise", scorer.score(raw, labels),
                 f"  masks left {masks}")
            line(f"{method} {steps:3d} steps, denoise", scorer.score(den, labels),
                 f"  tokens changed {changed} of {raw_t.size}"
                 f" ({changed - masks} not masks)")


def section_cfg(sampler, labels, n_data, scorer, seed):
    print("classifier-free guidance: the rules (tau-leaping, 128 steps)")
    for w in (1.0, 2.0, 3.0, 5.0):
        for rule in ("separate", "rates"):
            if w == 1.0 and rule == "rates":
                continue  # no guidance: the rules coincide
            _, x, _ = draw(sampler, labels, n_data, steps=128, seed=seed, cfg_scale=w,
                           cfg_rule=rule)
            line(f"w {w:g}, {rule if w != 1.0 else 'none'}", scorer.score(x, labels))


def section_correct(sampler, labels, n_data, scorer, seed):
    print("self-correction after 64 tau-leaping steps (correction time 0.05)")
    base = dict(steps=64, seed=seed)
    _, x, _ = draw(sampler, labels, n_data, **base)
    line("none", scorer.score(x, labels))
    for mode, temp, k in (("greedy", 0.1, 8), ("greedy", 1.0, 24), ("gibbs", 1.0, 24),
                          ("gibbs", 1.0, 128), ("gibbs", 0.5, 128)):
        _, x, _ = draw(sampler, labels, n_data, correction_steps=k, correction_mode=mode,
                       correction_temperature=temp, **base)
        line(f"{mode} K {k} T {temp:g}", scorer.score(x, labels))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--per-class", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="denoise,cfg,correct")
    args = ap.parse_args()

    images, real_labels = load_digits(os.path.join(ROOT, "examples", "data", "digits.txt"))
    scorer = Scorer(images, real_labels)
    model = nctmc.Model.load(args.checkpoint, nctmc.Context(backend="cpu", threads=args.threads))
    n_data = model.vocab_size if model.mask_token is None else model.mask_token
    print(f"{args.checkpoint}: process {model.process}; classifier: {scorer.k}-NN, "
          f"leave-one-out accuracy on the real digits {scorer.loo_acc:.3f}")
    sampler = model.sampler(max_batch=50)
    labels = np.repeat(np.arange(10, dtype=np.int32), args.per_class)
    sections = {"denoise": section_denoise, "cfg": section_cfg, "correct": section_correct}
    for name in args.only.split(","):
        sections[name](sampler, labels, n_data, scorer, args.seed)


if __name__ == "__main__":
    main()
