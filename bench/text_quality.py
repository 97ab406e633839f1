#!/usr/bin/env python3
"""The text model's quality (research/2026-11-26-text-model-cpu.md):
held-out NELBO in bits per byte, and samples judged by an independent model.

    text_quality.py all    --nctmc BIN --corpus DIR --heldout-data DIR \\
                           --model uniform=U.safetensors --model masked=M.safetensors --out DIR
    text_quality.py sample --nctmc BIN --model NAME=CKPT ... --out DIR   (may run on a GPU)
    text_quality.py nelbo  --nctmc BIN --heldout-data DIR --model NAME=CKPT ... --out DIR
    text_quality.py score  --corpus DIR --out DIR                        (CPU only, reads files)

`sample` writes OUT/samples/NAME-steps{S}.txt with `nctmc sample` (the
tool's sampler defaults — tau-leaping, uniform time grid 0.999 -> 0.001,
temperature 1, final denoising — the same for every model; only --steps
varies), and OUT/samples/NAME-steps{S}-temp{T}.txt for each other
temperature of --temperatures (`nctmc sample --temperature T`); `nelbo` writes OUT/nelbo-NAME.txt with `nctmc eval` on the held-out
shard; `score` reads whatever of those files exist and prints the table
(also OUT/table.md and OUT/results.json). Nothing here depends on which
process made a checkpoint: every model gets the same commands.

The judge. A byte-level 5-gram language model with interpolated Kneser-Ney
smoothing (one absolute discount per order, D = n1 / (n1 + 2 n2) from that
order's count-of-counts; continuation counts below the top order; the
last level interpolates with the uniform distribution over 256 bytes, so
every byte string has a probability). It is trained on half of the
held-out documents (CORPUS/heldout.txt, documents with an even index) —
text neither model saw — and the other half (odd index) is the reference
row: real text the judge did not see either, cut into windows as long as
the samples. Each sample (and window) is scored on its own, from an empty
context. Reported per row:

- gen. perplexity: 2 ** (judge's bits / byte), pooled over all bytes of
  all samples of the row (lower = more like the corpus, as the judge sees
  it; a sample that repeats one likely string also scores low, hence the
  next column);
- unigram entropy: the entropy in bits of the byte histogram of each
  sample, averaged over samples (repetition lowers it; real text of the
  same length is the reference);
- NELBO: `nctmc eval`'s bits per token times tokens per byte of the
  held-out stream (below).

Perplexity at matched unigram entropy. A lower temperature lowers both
the judge's perplexity and the samples' unigram entropy, so models are
compared at one entropy: for each step count, each model's points
(entropy, judge bits/byte), one per temperature, are joined piecewise
linearly in entropy, and read at the common entropy: the held-out text's
(the reference row's) clamped into the range every model's curve covers
(the highest entropy all reach when the text's is above it, the lowest
when below); none when the ranges do not overlap. The perplexity there is
2 ** (the bits/byte read off). Printed as a second table, with each
model's curve; in results.json under "matched".

Yardsticks: when CORPUS/train.txt is there, rows for samples of byte 2- and
3-gram models counted from it (maximum likelihood, no smoothing; --n texts
as long as the samples, seeds --seed + i, each starting after a document
separator), scored the same way: what the simplest models of the training
text reach.

Bits per byte. The held-out shard is the held-out documents, each followed
by a separator; the bytes are counted as the documents' UTF-8 bytes plus 2
per document (the blank line, "\\n\\n", that separates documents in plain
text and is the byte tokenizer's separator). tokens per byte = the shard's
token count (its manifest) / those bytes: exactly 1 for the byte
tokenizer.
"""
import argparse
import bisect
import itertools
import json
import math
import os
import random
import re
import subprocess
import sys
import time

ORDER = 5
SEPARATOR = b"\n\n"
BASELINE_ORDERS = (2, 3)  # the byte n-gram samplers of the yardstick rows


# ---- the corpus ---------------------------------------------------------------

def read_docs(path):
    """Documents of a corpus file (fortunes separated by lines `%`), as
    bytes, each with its final newline (as `nctmc prepare --split-at %`
    keeps it)."""
    with open(path, "rb") as f:
        text = f.read()
    docs = []
    for chunk in re.split(rb"(?m)^%[ \t]*\r?\n?", text):
        if chunk.strip():
            docs.append(chunk if chunk.endswith(b"\n") else chunk + b"\n")
    return docs


def stream_of(docs):
    """The documents as the model sees them: each followed by a blank line."""
    return b"".join(d + SEPARATOR for d in docs)


def judge_split(docs):
    """Held-out documents -> (judge's training documents, reference documents)."""
    return docs[0::2], docs[1::2]


# ---- the judge: interpolated Kneser-Ney byte n-grams ----------------------------

class KneserNey:
    """Interpolated Kneser-Ney over bytes, order `order` (see the module's
    docstring). tables[k] maps a context of k bytes to (counts by next byte,
    total, distinct next bytes); the top order holds plain counts, the lower
    ones continuation counts (how many distinct bytes precede ctx+w)."""

    def __init__(self, texts, order=ORDER):
        self.order = order
        raw = [dict() for _ in range(order)]
        # the top order: plain counts of the grams with a full context
        for text in texts:
            for i in range(order - 1, len(text)):
                nexts = raw[order - 1].setdefault(text[i - order + 1:i], {})
                nexts[text[i]] = nexts.get(text[i], 0) + 1
        # the lower orders: continuation counts, the distinct bytes v that
        # precede ctx+w (-1 for the start of a text, as KenLM's <s>)
        for k in range(order - 1):
            grams = set()
            for text in texts:
                for i in range(k, len(text)):
                    grams.add((text[i - k - 1] if i > k else -1, text[i - k:i + 1]))
            for _, gram in grams:
                nexts = raw[k].setdefault(gram[:-1], {})
                nexts[gram[-1]] = nexts.get(gram[-1], 0) + 1
        self.tables = []
        self.discounts = []
        for k in range(order):
            n1 = n2 = 0
            table = {}
            for ctx, nexts in raw[k].items():
                total = sum(nexts.values())
                table[ctx] = (nexts, total, len(nexts))
                for c in nexts.values():
                    n1 += c == 1
                    n2 += c == 2
            self.tables.append(table)
            self.discounts.append(n1 / (n1 + 2 * n2) if n1 + n2 > 0 else 0.5)

    def prob(self, ctx, w):
        """P(w | the last order-1 bytes of ctx)."""
        p = 1.0 / 256.0
        ctx = ctx[len(ctx) - (self.order - 1):] if len(ctx) > self.order - 1 else ctx
        for k in range(0, len(ctx) + 1):
            entry = self.tables[k].get(ctx[len(ctx) - k:] if k else b"")
            if entry is None:
                break  # a longer context is unseen too
            nexts, total, types = entry
            d = self.discounts[k]
            p = max(nexts.get(w, 0) - d, 0.0) / total + d * types / total * p
        return p

    def bits(self, text):
        """-log2 P(text), each byte given the bytes before it in text."""
        total = 0.0
        for i in range(len(text)):
            total -= math.log2(self.prob(text[max(0, i - self.order + 1):i], text[i]))
        return total


def ngram_samples(stream, k, length, n, seed):
    """n texts of `length` bytes drawn from the maximum-likelihood byte
    k-gram model of stream (no smoothing), text i with random.Random(seed +
    i), each starting after a document separator."""
    counts = {}
    for i in range(k - 1, len(stream)):
        nexts = counts.setdefault(stream[i - k + 1:i], {})
        nexts[stream[i]] = nexts.get(stream[i], 0) + 1
    tables = {ctx: (list(nx.keys()), list(itertools.accumulate(nx.values())))
              for ctx, nx in counts.items()}
    start = (SEPARATOR * k)[-(k - 1):] if k > 1 else b""
    out = []
    for j in range(n):
        rng = random.Random(seed + j)
        text = bytearray(start)
        while len(text) < len(start) + length:
            ctx = bytes(text[len(text) - (k - 1):]) if k > 1 else b""
            if ctx not in tables:  # only the stream's last context: restart
                ctx = start
            values, cum = tables[ctx]
            text.append(values[bisect.bisect_right(cum, rng.randrange(cum[-1]))])
        out.append(bytes(text[len(start):]))
    return out


def unigram_entropy(data):
    """Entropy in bits of the byte histogram of data."""
    if not data:
        return 0.0
    counts = {}
    for b in data:
        counts[b] = counts.get(b, 0) + 1
    n = len(data)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def score_texts(judge, texts):
    """(gen. perplexity, judge bits/byte, mean unigram entropy, bytes)."""
    bits = sum(judge.bits(t) for t in texts)
    n = sum(len(t) for t in texts)
    bpb = bits / n if n else float("nan")
    ent = sum(unigram_entropy(t) for t in texts) / len(texts) if texts else float("nan")
    return 2.0 ** bpb, bpb, ent, n


# ---- files written by the tool --------------------------------------------------

HEADER = re.compile(rb"^--- sample (\d+)(?: \(label \d+\))? ---\n", re.M)


def read_samples(path):
    """Samples of an `nctmc sample --n N --out FILE` file, as bytes."""
    with open(path, "rb") as f:
        return read_samples_bytes(f.read())


def read_samples_bytes(data):
    """Samples from the tool's output: each after a line `--- sample K ---`
    (K = 0, 1, ... in order; a line like it inside a sample is text). The
    tool ends a sample with a newline when it has none, so one final newline
    of each sample is dropped (at most one byte of each)."""
    heads = list(HEADER.finditer(data))
    if not heads or heads[0].start() != 0:
        return [data[:-1] if data.endswith(b"\n") else data] if data else []
    out = []
    expect = 0
    for i, m in enumerate(heads):
        if int(m.group(1)) != expect:  # a header line inside a sample: not a header
            continue
        expect += 1
        end = len(data)
        for later in heads[i + 1:]:
            if int(later.group(1)) == expect:
                end = later.start()
                break
        text = data[m.end():end]
        out.append(text[:-1] if text.endswith(b"\n") else text)
    return out


def shard_tokens(data_dir):
    """The token count of DATA_DIR's train.bin, from its manifest."""
    with open(os.path.join(data_dir, "manifest.txt")) as f:
        for line in f:
            m = re.match(r"shard train\.bin tokens=(\d+)", line)
            if m:
                return int(m.group(1))
    raise SystemExit("text_quality: %s/manifest.txt names no train.bin" % data_dir)


def parse_eval(text):
    """(bits/token, +-, tokens) from `nctmc eval`'s summary line."""
    m = re.search(r"NELBO ([0-9.]+) \+- ([0-9.]+) bits/token.*?(\d+) tokens\)", text)
    if not m:
        return None
    return float(m.group(1)), float(m.group(2)), int(m.group(3))


# ---- the steps ----------------------------------------------------------------

def models_of(args):
    out = []
    for spec in args.model:
        if "=" not in spec:
            raise SystemExit("text_quality: --model wants NAME=CHECKPOINT, got %r" % spec)
        name, path = spec.split("=", 1)
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise SystemExit("text_quality: model name %r: letters, digits, _ . - only" % name)
        out.append((name, path))
    return out


def steps_of(args):
    return [int(s) for s in args.steps.split(",")]


def temperatures_of(args):
    out = [float(t) for t in args.temperatures.split(",")]
    if any(not (t > 0 and math.isfinite(t)) for t in out):
        raise SystemExit("text_quality: --temperatures wants positive numbers, got %r"
                         % args.temperatures)
    return out


SAMPLE_FILE = re.compile(r"(.+)-steps(\d+)(?:-temp([0-9.e+-]+))?\.txt")


def sample_file(name, steps, temp):
    """The samples' file name: NAME-steps{S}.txt at temperature 1 (as
    before temperatures), else NAME-steps{S}-temp{T}.txt."""
    return ("%s-steps%d.txt" % (name, steps) if temp == 1.0
            else "%s-steps%d-temp%s.txt" % (name, steps, repr(temp)))


# ---- perplexity at matched unigram entropy ----------------------------------------

def interpolate_at(points, x):
    """The piecewise-linear function through points [(entropy, value)],
    read at entropy x; None when x is outside the points' entropy range
    (or there are no points). Points of equal entropy are averaged."""
    by = {}
    for h, v in points:
        by.setdefault(h, []).append(v)
    pts = sorted((h, sum(vs) / len(vs)) for h, vs in by.items())
    if not pts or x < pts[0][0] or x > pts[-1][0]:
        return None
    for (h0, v0), (h1, v1) in zip(pts, pts[1:]):
        if h0 <= x <= h1:
            return v0 + (v1 - v0) * (x - h0) / (h1 - h0)
    return pts[0][1]  # a single point, x equal to its entropy


def matched_entropy(curves, target):
    """The entropy at which to compare models whose curves (name ->
    [(entropy, value)]) are given: target clamped into the range all
    curves cover; None when they do not overlap (or there are none)."""
    if not curves or any(not c for c in curves.values()):
        return None
    lo = max(min(h for h, _ in c) for c in curves.values())
    hi = min(max(h for h, _ in c) for c in curves.values())
    if lo > hi:
        return None
    return min(max(target, lo), hi)


def matched_rows(rows, target):
    """Per step count: the common entropy (matched_entropy of the models'
    (unigram entropy, judge bits/byte) curves, target = the held-out
    text's entropy) and each model's perplexity there, with its curve."""
    out = []
    model_rows = [r for r in rows if r.get("temperature") is not None]
    for steps in sorted({r["steps"] for r in model_rows}):
        curves = {}
        for r in model_rows:
            if r["steps"] == steps and not math.isnan(r["unigram_entropy"]):
                curves.setdefault(r["model"], []).append(
                    (r["unigram_entropy"], r["judge_bits_per_byte"], r["temperature"]))
        h = matched_entropy({m: [(e, b) for e, b, _ in c] for m, c in curves.items()}, target)
        for model in sorted(curves):
            pts = sorted(curves[model], key=lambda p: p[2])
            bpb = interpolate_at([(e, b) for e, b, _ in pts], h) if h is not None else None
            out.append({"steps": steps, "model": model, "entropy": h, "target": target,
                        "judge_bits_per_byte": bpb,
                        "gen_ppl": 2.0 ** bpb if bpb is not None else None,
                        "curve": [{"temperature": t, "unigram_entropy": e,
                                   "gen_ppl": 2.0 ** b} for e, b, t in pts]})
    return out


def tool_flags(args):
    flags = ["--threads", str(args.threads)]
    if args.backend:
        flags += ["--backend", args.backend]
    return flags


def run_logged(cmd, log_path):
    """Runs cmd, its stdout and stderr to log_path; the wall time."""
    t0 = time.time()
    with open(log_path, "wb") as log:
        log.write((" ".join(cmd) + "\n").encode())
        log.flush()
        r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        with open(log_path, "rb") as f:
            tail = f.read()[-2000:].decode(errors="replace")
        raise SystemExit("text_quality: %s failed (exit %d):\n%s" % (" ".join(cmd),
                                                                     r.returncode, tail))
    return time.time() - t0


def cmd_sample(args):
    os.makedirs(os.path.join(args.out, "samples"), exist_ok=True)
    for name, ckpt in models_of(args):
        for steps in steps_of(args):
            for temp in temperatures_of(args):
                path = os.path.join(args.out, "samples", sample_file(name, steps, temp))
                cmd = [args.nctmc, "sample", ckpt, "--n", str(args.n), "--steps", str(steps),
                       "--seed", str(args.seed), "--batch", str(args.batch), "--out", path,
                       "--method", args.method]
                if temp != 1.0:
                    cmd += ["--temperature", repr(temp)]
                wall = run_logged(cmd + tool_flags(args), path[:-4] + ".log")
                print("sampled %s, %d steps, temperature %g: %d samples in %.1f s -> %s" % (
                    name, steps, temp, args.n, wall, path), flush=True)


def cmd_nelbo(args):
    os.makedirs(args.out, exist_ok=True)
    shard = os.path.join(args.heldout_data, "train.bin")
    for name, ckpt in models_of(args):
        path = os.path.join(args.out, "nelbo-%s.txt" % name)
        cmd = [args.nctmc, "eval", ckpt, "--shard", shard, "--time-samples",
               str(args.time_samples), "--seed", str(args.seed), "--batch", str(args.eval_batch)]
        if args.eval_sequences:
            cmd += ["--sequences", str(args.eval_sequences)]
        wall = run_logged(cmd + tool_flags(args), path)
        with open(path) as f:
            got = parse_eval(f.read())
        print("evaluated %s on %s in %.1f s: %s" % (name, shard, wall, got), flush=True)
    # what bits per byte needs, kept beside the logs so `score` can run alone
    docs = read_docs(os.path.join(args.corpus, "heldout.txt"))
    n_bytes = sum(len(d) + len(SEPARATOR) for d in docs)
    with open(os.path.join(args.out, "heldout-counts.json"), "w") as f:
        json.dump({"tokens": shard_tokens(args.heldout_data), "bytes": n_bytes}, f)


def fmt(x, digits=3):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else "%.*f" % (digits, x)


def cmd_score(args):
    docs = read_docs(os.path.join(args.corpus, "heldout.txt"))
    judge_docs, ref_docs = judge_split(docs)
    t0 = time.time()
    judge = KneserNey([stream_of(judge_docs)])
    counts_path = os.path.join(args.out, "heldout-counts.json")
    counts = json.load(open(counts_path)) if os.path.exists(counts_path) else None

    rows = []
    sample_dir = os.path.join(args.out, "samples")
    files = {}
    for f in (os.listdir(sample_dir) if os.path.isdir(sample_dir) else []):
        m = SAMPLE_FILE.fullmatch(f)
        if m:
            temp = float(m.group(3)) if m.group(3) else 1.0
            files.setdefault(m.group(1), []).append((int(m.group(2)), temp, f))
    names = sorted(files)
    lengths = []
    for name in names:
        nelbo = None
        log = os.path.join(args.out, "nelbo-%s.txt" % name)
        if os.path.exists(log) and counts:
            got = parse_eval(open(log).read())
            if got:
                ratio = counts["tokens"] / counts["bytes"]
                nelbo = (got[0] * ratio, got[1] * ratio)
        for steps, temp, f in sorted(files[name]):
            texts = read_samples(os.path.join(sample_dir, f))
            lengths += [len(t) for t in texts]
            ppl, bpb, ent, n = score_texts(judge, texts)
            rows.append({"model": name, "steps": steps, "temperature": temp,
                         "n": len(texts), "bytes": n,
                         "nelbo_bits_per_byte": nelbo[0] if nelbo else None,
                         "nelbo_se": nelbo[1] if nelbo else None,
                         "gen_ppl": ppl, "judge_bits_per_byte": bpb, "unigram_entropy": ent})
    # yardsticks: byte n-gram samplers counted from the training split
    train_path = os.path.join(args.corpus, "train.txt")
    width = sorted(lengths)[len(lengths) // 2] if lengths else 256
    if os.path.exists(train_path):
        train_stream = stream_of(read_docs(train_path))
        for k in BASELINE_ORDERS:
            texts = ngram_samples(train_stream, k, width, args.n, args.seed)
            ppl, bpb, ent, n = score_texts(judge, texts)
            rows.append({"model": "byte %d-gram sampler" % k, "steps": None, "n": len(texts),
                         "bytes": n, "nelbo_bits_per_byte": None, "nelbo_se": None,
                         "gen_ppl": ppl, "judge_bits_per_byte": bpb, "unigram_entropy": ent})
    # the reference: real held-out text the judge did not see, in windows
    # as long as the samples (the median sample length; 256 without samples)
    ref_stream = stream_of(ref_docs)
    windows = [ref_stream[i:i + width] for i in range(0, len(ref_stream) - width + 1, width)]
    ppl, bpb, ent, n = score_texts(judge, windows)
    rows.append({"model": "held-out text", "steps": None, "n": len(windows), "bytes": n,
                 "nelbo_bits_per_byte": None, "nelbo_se": None, "gen_ppl": ppl,
                 "judge_bits_per_byte": bpb, "unigram_entropy": ent})

    matched = matched_rows(rows, rows[-1]["unigram_entropy"])

    head = ("| model | steps | temp. | samples | NELBO bits/byte (held-out) | gen. perplexity "
            "(judge bits/byte) | unigram entropy, bits |")
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        nelbo = ("%s +- %s" % (fmt(r["nelbo_bits_per_byte"]), fmt(r["nelbo_se"]))
                 if r["nelbo_bits_per_byte"] is not None else "-")
        lines.append("| %s | %s | %s | %d | %s | %s (%s) | %s |" % (
            r["model"], r["steps"] if r["steps"] is not None else "-",
            "%g" % r["temperature"] if r.get("temperature") is not None else "-", r["n"], nelbo,
            fmt(r["gen_ppl"], 2), fmt(r["judge_bits_per_byte"]), fmt(r["unigram_entropy"])))
    note = ("judge: interpolated Kneser-Ney byte %d-gram on %d held-out documents (%d bytes), "
            "D = %s; reference: %d other held-out documents in %d-byte windows; scored in "
            "%.1f s" % (ORDER, len(judge_docs), len(stream_of(judge_docs)),
                        ", ".join("%.3f" % d for d in judge.discounts), len(ref_docs), width,
                        time.time() - t0))
    if matched:
        lines += ["", "Perplexity at matched unigram entropy (the held-out text's, %.3f bits, "
                  "clamped into the range every model's curve covers):" % rows[-1]["unigram_entropy"],
                  "", "| steps | model | entropy, bits | gen. perplexity there | curve: "
                  "temperature: entropy, perplexity |", "|---|---|---|---|---|"]
        for m in matched:
            lines.append("| %d | %s | %s | %s | %s |" % (
                m["steps"], m["model"], fmt(m["entropy"]), fmt(m["gen_ppl"], 2),
                "; ".join("%g: %.3f, %.2f" % (c["temperature"], c["unigram_entropy"],
                                              c["gen_ppl"]) for c in m["curve"])))
    table = "\n".join(lines)
    print(table)
    print(note)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table + "\n\n" + note + "\n")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"rows": rows, "matched": matched, "judge": {"order": ORDER, "discounts": judge.discounts,
                                           "train_docs": len(judge_docs),
                                           "reference_docs": len(ref_docs),
                                           "window": width}}, f, indent=1)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=["all", "sample", "nelbo", "score"])
    ap.add_argument("--nctmc", default="nctmc", help="the nctmc tool")
    ap.add_argument("--corpus", help="directory with heldout.txt (scripts/text_corpus.py)")
    ap.add_argument("--heldout-data", help="`nctmc prepare` directory of the held-out text")
    ap.add_argument("--model", action="append", default=[], help="NAME=CHECKPOINT (repeat)")
    ap.add_argument("--out", required=True, help="directory for samples, logs and the table")
    ap.add_argument("--steps", default="16,64,256", help="sampling steps, comma-separated")
    ap.add_argument("--temperatures", default="1",
                    help="sampling temperatures, comma-separated (each step count is sampled "
                         "at each; score compares the models at matched unigram entropy)")
    ap.add_argument("--method", default="tau", choices=["tau", "euler", "posterior", "auto"],
                    help="the sampler (default tau, the one the recorded text-model results "
                         "used; auto = each checkpoint's recommendation)")
    ap.add_argument("--n", type=int, default=64, help="samples per model and step count")
    ap.add_argument("--batch", type=int, default=16, help="samples drawn at once")
    ap.add_argument("--seed", type=int, default=0, help="sampling and evaluation seed")
    ap.add_argument("--time-samples", type=int, default=16, help="nctmc eval --time-samples")
    ap.add_argument("--eval-batch", type=int, default=8,
                    help="nctmc eval --batch (speed and memory only)")
    ap.add_argument("--eval-sequences", type=int, default=0,
                    help="nctmc eval --sequences (0 = the whole held-out shard)")
    ap.add_argument("--threads", type=int, default=1, help="the tool's --threads")
    ap.add_argument("--backend", default="", help="the tool's --backend (default: its own)")
    args = ap.parse_args(argv)
    need = {"sample": ["model"], "nelbo": ["model", "heldout_data", "corpus"],
            "score": ["corpus"], "all": ["model", "heldout_data", "corpus"]}[args.step]
    for k in need:
        if not getattr(args, k):
            ap.error("%s needs --%s" % (args.step, k.replace("_", "-")))
    if args.step in ("all", "sample"):
        cmd_sample(args)
    if args.step in ("all", "nelbo"):
        cmd_nelbo(args)
    if args.step in ("all", "score"):
        cmd_score(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
