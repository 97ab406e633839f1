#!/usr/bin/env python3
"""How recognisable are the digits that `nctmc sample --out FILE` wrote?
Reads the samples of one or more files (a "--- sample i (label k) ---"
line, then the 64 grey levels of the 8x8 image as numbers: `--tokens`) and classifies them with a classifier
that knows nothing of libnctmc: scikit-learn's SVC (RBF kernel, the
scikit-learn digits example's setting) fitted on scikit-learn's own copy of
the digits (sklearn.datasets.load_digits(), shipped inside the package).
Prints the share of samples classified as the label they were drawn with,
overall and per class, beside the classifier's accuracy on held-out real
digits (its yardstick).

    nctmc sample build/demo/digits.safetensors --per-class 50 --tokens --out samples.txt
    /usr/bin/python3 scripts/digits_classify.py samples.txt [more.txt ...]

Needs numpy and scikit-learn (Debian: python3-numpy python3-sklearn;
scripts/install-deps.sh --demo installs them). It loads no part of libnctmc:
scripts/digits_accuracy.py draws and scores samples through the Python
binding instead.
"""
import argparse
import re
import sys

import numpy as np

HEADER = re.compile(r"^--- sample (\d+) \(label (\d+)\) ---$")


def read_samples(path):
    """(images [n, 64] as floats, labels [n]) from `nctmc sample --out`."""
    images, labels = [], []
    label = None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            m = HEADER.match(line)
            if m:
                label = int(m.group(2))
                continue
            if label is None or not line.strip():
                continue
            pixels = [int(v) for v in line.split()]
            if len(pixels) != 64:
                sys.exit("%s: a sample of %d values, not the 64 of an 8x8 digit"
                         % (path, len(pixels)))
            images.append(pixels)
            labels.append(label)
            label = None
    if not images:
        sys.exit("%s: no labelled samples (write them with nctmc sample --per-class N "
                 "--out FILE)" % path)
    return np.array(images, dtype=np.float64), np.array(labels)


def fit_classifier(seed):
    """An SVC scored on a held-out fifth of scikit-learn's digits, then
    refitted on all of them."""
    from sklearn.datasets import load_digits
    from sklearn.svm import SVC
    digits = load_digits()
    x, y = digits.data, digits.target
    order = np.random.default_rng(seed).permutation(len(y))
    cut = int(0.8 * len(y))
    clf = SVC(gamma=0.001, C=10.0)
    clf.fit(x[order[:cut]], y[order[:cut]])
    held_out = float(np.mean(clf.predict(x[order[cut:]]) == y[order[cut:]]))
    clf.fit(x, y)
    return clf, held_out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("samples", nargs="+",
                    help="--tokens --out files of nctmc sample on a digits model")
    ap.add_argument("--seed", type=int, default=1, help="the held-out split's seed")
    args = ap.parse_args()
    parts = [read_samples(path) for path in args.samples]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    if images.max() > 16 or images.min() < 0:
        sys.exit("values outside the grey levels 0..16 of the digits")
    clf, held_out = fit_classifier(args.seed)
    hits = clf.predict(images) == labels
    per_class = " ".join("%d:%.2f" % (k, hits[labels == k].mean())
                         for k in range(10) if np.any(labels == k))
    print("classifier: scikit-learn's SVC on scikit-learn's digits, %.3f on held-out real "
          "digits" % held_out)
    print("recognised: %.1f%% of %d samples (%d of %d classified as the digit they were "
          "drawn as)" % (100.0 * hits.mean(), len(hits), int(hits.sum()), len(hits)))
    print("per class   %s" % per_class)


if __name__ == "__main__":
    main()
