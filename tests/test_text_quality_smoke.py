#!/usr/bin/env python3
"""Checks of bench/text_quality.py (tests/meson.build: text_quality_smoke).

1. The judge is a distribution: for any context its probabilities over the
   256 bytes sum to 1; text like its training text costs fewer bits than
   shuffled bytes of the same text; unigram entropy is 0 for one repeated
   byte and 8 for all 256 bytes once.
2. Documents and sample files are read back exactly: a corpus file's
   documents, the held-out byte count equal to the byte shard's tokens,
   and `nctmc sample --n` files split into the samples the tool drew.
3. Perplexity at matched unigram entropy: the piecewise-linear reading of
   a curve (exact on known lines, None outside the range, unsorted and
   repeated points), the common entropy (the target clamped into the range
   every curve covers), and matched_rows on made-up rows.
4. `all` end to end on a tiny corpus: two tiny models (uniform and masked,
   a few steps) are sampled at two temperatures, evaluated and scored; the
   table has one row per model, step count and temperature plus the
   reference, with the numbers filled in, and the matched-entropy rows.

Usage: test_text_quality_smoke.py NCTMC   (the nctmc tool to drive)
Exit 0 when every check passes, 1 otherwise.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
sys.path.insert(0, HERE)
import text_quality as Q  # noqa: E402

FAILED = []


def check(cond, what):
    print("  %s %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        FAILED.append(what)


def tiny_corpus(rng, n_docs):
    """Short English-like documents from a small grammar."""
    subj = ["the cat", "a dog", "my friend", "the old man", "every child"]
    verb = ["sees", "likes", "eats", "finds", "writes"]
    obj = ["the fish", "a letter", "some bread", "the moon", "a book"]
    docs = []
    for _ in range(n_docs):
        lines = ["%s %s %s." % (rng.choice(subj), rng.choice(verb), rng.choice(obj))
                 for _ in range(rng.randint(1, 3))]
        docs.append("\n".join(lines))
    return docs


def write_corpus(path, docs):
    with open(path, "w") as f:
        f.write("\n%\n".join(docs) + "\n")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
    return r.returncode == 0


def check_judge(rng):
    print("the judge")
    docs = [d.encode() for d in tiny_corpus(rng, 200)]
    judge = Q.KneserNey([Q.stream_of(docs)])
    sums = [sum(judge.prob(ctx, w) for w in range(256))
            for ctx in (b"", b"t", b"the c", b"zzzz", b"\xff\x00", b"a dog eats")]
    check(all(abs(s - 1.0) < 1e-9 for s in sums), "probabilities sum to 1 (%s)" %
          ", ".join("%.12f" % s for s in sums))
    text = Q.stream_of([d.encode() for d in tiny_corpus(rng, 20)])
    shuffled = bytearray(text)
    rng.shuffle(shuffled)
    real, noise = judge.bits(text), judge.bits(bytes(shuffled))
    check(real < 0.5 * noise, "text like the training text costs fewer bits than its bytes "
          "shuffled (%.0f < %.0f / 2)" % (real, noise))
    check(Q.unigram_entropy(b"a" * 100) == 0.0, "entropy of one repeated byte is 0")
    check(abs(Q.unigram_entropy(bytes(range(256))) - 8.0) < 1e-12,
          "entropy of all 256 bytes once is 8")


def check_ngram_sampler():
    print("the n-gram sampler")
    stream = b"abcabcabd\n\nabcab\n\n"
    texts = Q.ngram_samples(stream, 3, 40, 4, 0)
    seen = {stream[i:i + 3] for i in range(len(stream) - 2)}
    ok = all(len(t) == 40 for t in texts)
    for t in texts:
        full = b"\n\n" + t
        ok = ok and all(full[i:i + 3] in seen for i in range(len(full) - 2))
    check(ok, "3-gram samples: the asked length, every 3 bytes a 3-gram of the text")
    check(Q.ngram_samples(stream, 3, 40, 4, 0) == texts and len(set(texts)) > 1,
          "same seed, same samples; the samples differ")


def close(a, b):
    return a is not None and b is not None and abs(a - b) < 1e-12


def check_matched():
    print("perplexity at matched unigram entropy")
    # value = 2 h - 3 on [4, 4.5], then slope -1 to (5, 5.5): read exactly
    pts = [(5.0, 5.5), (4.0, 5.0), (4.5, 6.0)]
    check(close(Q.interpolate_at(pts, 4.25), 5.5) and close(Q.interpolate_at(pts, 4.75), 5.75)
          and close(Q.interpolate_at(pts, 4.0), 5.0) and close(Q.interpolate_at(pts, 5.0), 5.5),
          "unsorted points read piecewise linearly (%s, %s)" % (Q.interpolate_at(pts, 4.25),
                                                              Q.interpolate_at(pts, 4.75)))
    check(Q.interpolate_at(pts, 3.99) is None and Q.interpolate_at(pts, 5.01) is None
          and Q.interpolate_at([], 4.0) is None, "None outside the curve's range")
    check(close(Q.interpolate_at([(4.0, 1.0), (4.0, 3.0), (5.0, 4.0)], 4.5), 3.0)
          and close(Q.interpolate_at([(4.2, 7.0)], 4.2), 7.0),
          "points of equal entropy averaged; a single point read at its entropy")
    curves = {"a": [(4.0, 0), (4.8, 0)], "b": [(4.3, 0), (5.2, 0)]}
    check(close(Q.matched_entropy(curves, 4.6), 4.6) and close(Q.matched_entropy(curves, 5.0), 4.8)
          and close(Q.matched_entropy(curves, 3.0), 4.3),
          "the common entropy: the target, clamped into [4.3, 4.8]")
    check(Q.matched_entropy({"a": [(4.0, 0)], "b": [(4.5, 0), (5.0, 0)]}, 4.5) is None
          and Q.matched_entropy({}, 4.5) is None, "None when the ranges do not overlap")
    rows = [{"model": "m", "steps": 8, "temperature": t, "unigram_entropy": h,
             "judge_bits_per_byte": b} for t, h, b in ((1.0, 5.0, 4.0), (0.5, 4.0, 2.0))]
    rows += [{"model": "u", "steps": 8, "temperature": t, "unigram_entropy": h,
              "judge_bits_per_byte": b} for t, h, b in ((1.0, 4.8, 5.0), (0.7, 4.4, 3.0))]
    rows.append({"model": "held-out text", "steps": None, "unigram_entropy": 4.6,
                 "judge_bits_per_byte": 2.5})
    got = {m["model"]: m for m in Q.matched_rows(rows, 4.6)}
    check(sorted(got) == ["m", "u"] and close(got["m"]["entropy"], 4.6)
          and close(got["m"]["gen_ppl"], 2.0 ** 3.2) and close(got["u"]["gen_ppl"], 2.0 ** 4.0)
          and [c["temperature"] for c in got["u"]["curve"]] == [0.7, 1.0],
          "matched_rows: both models read at 4.6 bits (perplexity %s, %s)"
          % (got.get("m", {}).get("gen_ppl"), got.get("u", {}).get("gen_ppl")))


def check_end_to_end(tool, tmp, rng):
    print("end to end")
    corpus = os.path.join(tmp, "corpus")
    os.makedirs(corpus)
    docs = tiny_corpus(rng, 600)
    write_corpus(os.path.join(corpus, "train.txt"), [d for i, d in enumerate(docs) if i % 10 != 9])
    held = [d for i, d in enumerate(docs) if i % 10 == 9]
    write_corpus(os.path.join(corpus, "heldout.txt"), held)
    read = Q.read_docs(os.path.join(corpus, "heldout.txt"))
    check(read == [(d + "\n").encode() for d in held], "a corpus file's documents read back")

    data, heldout = os.path.join(tmp, "data"), os.path.join(tmp, "heldout")
    ok = run([tool, "prepare", "--split-at", "%", "--val-fraction", "0", "--threads", "1",
              "--out", data, os.path.join(corpus, "train.txt")])
    ok = ok and run([tool, "prepare", "--split-at", "%", "--val-fraction", "0", "--threads", "1",
                     "--tokenizer-file", os.path.join(data, "tokenizer.txt"), "--out", heldout,
                     os.path.join(corpus, "heldout.txt")])
    models = []
    for process in ("uniform", "masked"):
        ckpt = os.path.join(tmp, process + ".safetensors")
        ok = ok and run([tool, "train", "--data", data, "--out", ckpt, "--process", process,
                         "--layers", "1", "--d-model", "32", "--heads", "2", "--cond-dim", "16",
                         "--seq-len", "64", "--batch", "8", "--steps", "60", "--warmup", "5",
                         "--lr", "3e-3", "--ema", "0.5",
                         "--threads", "1", "--eval-every", "0"])
        models += ["--model", "%s=%s" % (process, ckpt)]
    check(ok, "prepare and train the two tiny models")
    if not ok:
        return
    out = os.path.join(tmp, "out")
    Q.main(["all", "--nctmc", tool, "--corpus", corpus, "--heldout-data", heldout, "--out", out,
            "--steps", "2,4", "--n", "3", "--batch", "2", "--time-samples", "2",
            "--temperatures", "1,0.05,0.01",
            # each checkpoint's own sampler: the uniform one's posterior draws
            # NUL bytes here, which the tool once cut its samples at
            "--method", "auto"] + models)

    counts = json.load(open(os.path.join(out, "heldout-counts.json")))
    check(counts["tokens"] == counts["bytes"],
          "byte tokenizer: held-out tokens = bytes (%d, %d)" % (counts["tokens"],
                                                               counts["bytes"]))
    # the sample file holds what the tool drew: the same command to stdout
    # without --out, one sample at a time, gives the same texts
    path = os.path.join(out, "samples", "masked-steps4.txt")
    samples = Q.read_samples(path)
    one = subprocess.run([tool, "sample", os.path.join(tmp, "masked.safetensors"), "--n", "3",
                          "--steps", "4", "--seed", "0", "--batch", "1", "--threads", "1"],
                         capture_output=True).stdout
    # (a sample that ends with a newline of its own reads back one byte short)
    check(len(samples) == 3 and all(63 <= len(s) <= 64 for s in samples),
          "3 samples of 64 bytes read from %s (%s)" % (os.path.basename(path),
                                                       [len(s) for s in samples]))
    check(Q.read_samples_bytes(one) == samples, "the file's samples equal the tool's on stdout")

    res = json.load(open(os.path.join(out, "results.json")))
    rows = res["rows"]
    keys = [(r["model"], r["steps"], r.get("temperature")) for r in rows]
    check(keys == [(m, s, t) for m in ("masked", "uniform") for s in (2, 4) for t in (0.01, 0.05, 1.0)]
          + [("byte 2-gram sampler", None, None), ("byte 3-gram sampler", None, None),
             ("held-out text", None, None)], "one row per model, step count and temperature, "
          "the n-gram samplers, then the reference (%s)" % keys)
    model_rows = rows[:12]
    grams = rows[12:14]
    cold = [r for r in model_rows if r["temperature"] == 0.01]
    check(all(c["unigram_entropy"] < w["unigram_entropy"]
              for c, w in zip(cold, [r for r in model_rows if r["temperature"] == 1.0])),
          "temperature 0.01 lowers every row's unigram entropy")
    matched = res["matched"]
    ok = [(m["steps"], m["model"]) for m in matched] == [(2, "masked"), (2, "uniform"),
                                                       (4, "masked"), (4, "uniform")]
    for m in matched:
        es = [c["unigram_entropy"] for c in m["curve"]]
        ps = [c["gen_ppl"] for c in m["curve"]]
        ok = ok and m["entropy"] is not None and min(es) <= m["entropy"] <= max(es)
        ok = ok and m["gen_ppl"] is not None and min(ps) - 1e-9 <= m["gen_ppl"] <= max(ps) + 1e-9
    check(ok, "matched rows: each model per step count, read inside its curve (%s)"
          % [(m["steps"], m["model"], m["entropy"], m["gen_ppl"]) for m in matched])
    check(all(r["n"] == 3 and r["bytes"] == 3 * 64 for r in grams)
          and grams[1]["gen_ppl"] < grams[0]["gen_ppl"],
          "the n-gram samplers: 3 texts of 64 bytes each; the 3-gram's more like the text "
          "(perplexity %.2f < %.2f)" % (grams[1]["gen_ppl"], grams[0]["gen_ppl"]))
    check(all(r["nelbo_bits_per_byte"] is not None and r["nelbo_bits_per_byte"] > 0
              for r in model_rows), "every model row has its NELBO in bits/byte")
    check(all(r["n"] == 3 and 189 <= r["bytes"] <= 192 and r["gen_ppl"] > 1
              and 0 <= r["unigram_entropy"] <= 8 for r in model_rows),
          "every model row scored 3 samples, 192 bytes (%s)"
          % [(r["n"], r["bytes"], r["gen_ppl"], r["unigram_entropy"]) for r in model_rows])
    ref = rows[-1]
    check(res["judge"]["window"] == 64 and ref["n"] > 0 and ref["gen_ppl"] < 8,
          "the reference: 64-byte windows of unseen held-out text, perplexity %.2f < 8"
          % ref["gen_ppl"])
    check(os.path.exists(os.path.join(out, "table.md")), "table.md written")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    rng = random.Random(7)
    check_judge(rng)
    check_ngram_sampler()
    check_matched()
    with tempfile.TemporaryDirectory() as tmp:
        check_end_to_end(os.path.abspath(sys.argv[1]), tmp, rng)
    print("text_quality_smoke: %s" % ("FAILED: " + "; ".join(FAILED) if FAILED else "ok"))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
