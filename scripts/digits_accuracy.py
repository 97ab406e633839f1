#!/usr/bin/env python3
"""How recognisable are a digits model's samples? Draws `--per-class`
samples of every class from a class-conditional checkpoint trained on
examples/data/digits.txt and classifies them with a classifier that knows
nothing of the model: scikit-learn's SVC (RBF kernel) fitted on the digits
themselves. Prints the share of samples classified as the label they were
drawn with, per class and overall, beside the classifier's own accuracy on
held-out real digits (its yardstick), and a diversity figure: the mean
distance between two samples of a class over the same for the real digits.

    NCTMC_LIBRARY=build/libnctmc.so.1 /usr/bin/python3 scripts/digits_accuracy.py \\
        build/demo/digits.safetensors [--per-class 50] [--method tau] [--steps 128]

Needs numpy and scikit-learn (Debian: python3-numpy python3-sklearn); the
nctmc Python package is taken from python/ beside this script.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import nctmc  # noqa: E402

GREY = "0123456789abcdefg"   # base-17 grey levels of digits.txt


def load_digits_file(path):
    """(images [n, 64] of grey levels 0..16, labels [n]) from digits.txt."""
    images, labels = [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            label, pixels = line.split(":")
            images.append([GREY.index(c) for c in pixels])
            labels.append(int(label))
    return np.array(images, dtype=np.float64), np.array(labels)


def fit_classifier(images, labels, seed):
    """An SVC on a random 80% of the digits, scored on the other 20%."""
    from sklearn.svm import SVC
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    cut = int(0.8 * len(labels))
    train, test = order[:cut], order[cut:]
    clf = SVC(gamma=0.001, C=10.0)   # the scikit-learn digits example's setting
    clf.fit(images[train], labels[train])
    held_out = float(np.mean(clf.predict(images[test]) == labels[test]))
    clf.fit(images, labels)          # refit on everything for the samples
    return clf, held_out


def draw_samples(path, per_class, method, steps, seed, threads, cfg=1.0, temperature=1.0):
    ctx = nctmc.Context(backend="cpu", threads=threads)
    model = nctmc.Model.load(path, ctx)
    if model.n_classes != 10 or model.seq_len != 64:
        sys.exit("%s: not a digits model (classes %d, length %d)"
                 % (path, model.n_classes, model.seq_len))
    labels = np.repeat(np.arange(10, dtype=np.int32), per_class)
    batch = 50
    sampler = model.sampler(max_batch=batch)
    out = []
    for first in range(0, len(labels), batch):
        lab = labels[first:first + batch]
        out.append(sampler.sample(batch=len(lab), steps=steps, method=method,
                                  seed=seed, labels=lab, first_sequence=first,
                                  cfg_scale=cfg, temperature=temperature))
    tokens = np.concatenate(out).astype(np.float64)
    mask = model.mask_token
    if mask is not None:
        tokens[tokens == mask] = 0.0   # a mask left at the end: background
    return tokens, labels


def within_class_spread(images, labels):
    """Mean Euclidean distance between two different images of one class,
    averaged over the classes: how varied the images are (guidance and low
    temperatures shrink it; copies of one digit give 0)."""
    spreads = []
    for k in range(10):
        x = images[labels == k]
        if len(x) < 2:
            continue
        sq = (x * x).sum(1)
        d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * x @ x.T, 0.0)
        n = len(x)
        spreads.append(np.sqrt(d2).sum() / (n * (n - 1)))
    return float(np.mean(spreads))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--digits", default=os.path.join(HERE, "..", "examples", "data",
                                                     "digits.txt"))
    ap.add_argument("--per-class", type=int, default=50)
    ap.add_argument("--method", default="tau", choices=["tau", "euler", "posterior"])
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cfg", type=float, default=1.0,
                    help="classifier-free guidance weight (1 = conditional only)")
    ap.add_argument("--temperature", type=float, default=1.0)
    args = ap.parse_args()

    images, labels = load_digits_file(args.digits)
    clf, held_out = fit_classifier(images, labels, args.seed)
    samples, wanted = draw_samples(args.checkpoint, args.per_class, args.method, args.steps,
                                   args.seed, args.threads, args.cfg, args.temperature)
    got = clf.predict(samples)
    hits = got == wanted
    per_class = " ".join("%d:%.2f" % (k, hits[wanted == k].mean()) for k in range(10))
    print("classifier (SVC on the digits): %.3f on held-out real digits" % held_out)
    print("samples (%s, %d steps, cfg %g, temperature %g, %d per class): "
          "%.3f classified as their label"
          % (args.method, args.steps, args.cfg, args.temperature, args.per_class, hits.mean()))
    print("per class  %s" % per_class)
    ratio = within_class_spread(samples, wanted) / within_class_spread(images, labels)
    print("diversity: mean distance between two samples of a class / the same for "
          "real digits = %.3f" % ratio)


if __name__ == "__main__":
    main()
