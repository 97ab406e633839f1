#!/usr/bin/env python3
"""Encoding throughput of libnctmc's BPE beside Hugging Face `tokenizers`,
one thread each, on the same text and tokenizer.

Usage: bench_bpe.py BENCH_BPE_EXE [--mb MB] [--reps N]

Trains the tokenizer of tests/check_bpe_tokenizers.py (byte-level BPE,
12000 tokens) on text from this machine, then encodes MB megabytes of
held-out text (documents joined by <|endoftext|>) with
  ours:       bench_bpe (nctmc_tokenizer_encode on the whole text)
  tokenizers: Tokenizer.encode on the whole text, and encode_batch over its
              paragraphs (split at blank lines: `tokenizers` is slow on
              long strings, so this is its better case) with
              RAYON_NUM_THREADS=1 (single-threaded)
and prints MB/s of each and the ratios. Best of N runs each. Timings from
a shared machine vary; compare the ratio of one run.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

# run under $NCTMC_PYTHON (the test venv) like the check it borrows from
want = os.environ.get("NCTMC_PYTHON")
if want and os.environ.get("NCTMC_PYTHON_REEXEC") != "1" and \
        os.path.abspath(want) != os.path.abspath(sys.executable):
    os.environ["NCTMC_PYTHON_REEXEC"] = "1"
    os.execv(want, [want, os.path.abspath(__file__)] + sys.argv[1:])
os.environ["NCTMC_PYTHON_REEXEC"] = "1"
os.environ["RAYON_NUM_THREADS"] = "1"  # before tokenizers starts its pool
os.environ["TOKENIZERS_PARALLELISM"] = "false"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import check_bpe_tokenizers as cbt  # noqa: E402


def best_of(reps, fn):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench")
    ap.add_argument("--mb", type=float, default=5.0)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    train, test, n_test = cbt.split_corpus(int(1.5e6), int(args.mb * 1e6))
    tok = cbt.train_tokenizer(train, 12000)
    text = cbt.ADDED[0].join(test)
    data = text.encode()
    with tempfile.TemporaryDirectory() as d:
        path_tok, path_text = os.path.join(d, "tokenizer.json"), os.path.join(d, "text.txt")
        tok.save(path_tok)
        with open(path_text, "wb") as f:
            f.write(data)
        out = subprocess.run([args.bench, path_tok, path_text, str(args.reps)],
                             capture_output=True, text=True, check=True).stdout.split()
    ours = float(out[out.index("MB/s") + 1])
    mb = len(data) / 1e6
    whole = mb / best_of(args.reps, lambda: tok.encode(text))
    paragraphs = [p for doc in test for p in doc.split("\n\n")]
    batch = mb / best_of(args.reps, lambda: tok.encode_batch(paragraphs))
    print(f"text: {len(data)} bytes held out, {len(test)} documents")
    print(f"libnctmc (one thread)                  {ours:8.2f} MB/s")
    print(f"tokenizers encode(whole text)          {whole:8.2f} MB/s   ratio ours/theirs {ours / whole:.2f}")
    print(f"tokenizers encode_batch of {len(paragraphs)} paragraphs, 1 thread "
          f"{batch:8.2f} MB/s   ratio ours/theirs {ours / batch:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
