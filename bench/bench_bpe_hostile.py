#!/usr/bin/env python3
"""Encoding time of a hostile tokenizer.json beside a plain one (issue 37).

Usage: bench_bpe_hostile.py NCTMC_EXE [--mb MB] [--added N] [--reps R]

Writes two byte-level BPE tokenizer.json files: "plain" (the 256 byte
symbols and one added token) and "hostile" (the same plus N nested added
tokens "<<", "<<a", "<<aa", ... of 2 .. N + 1 bytes), and MB megabytes of
'<' (every position starts every added token's first two bytes: the old
matcher compared each of the N tokens there). Times `nctmc tokenize` of the
text with each (best of R) and prints the seconds and their ratio; a
matcher linear in the text keeps the ratio near 1 whatever N is.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def byte_symbols():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(0x100 + n)
            n += 1
    return out


def tokenizer(added):
    sym = byte_symbols()
    vocab = {sym[b]: b for b in range(256)}
    tokens = [{"id": 256, "content": "<|endoftext|>", "single_word": False,
               "lstrip": False, "rstrip": False, "normalized": False, "special": True}]
    for k in range(added):
        tokens.append(dict(tokens[0], id=257 + k, content="<<" + "a" * k))
    for t in tokens:
        vocab[t["content"]] = t["id"]
    return {"version": "1.0", "added_tokens": tokens, "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": True, "use_regex": True},
            "post_processor": None, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "dropout": None, "vocab": vocab, "merges": []}}


def best_of(reps, cmd):
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("nctmc")
    ap.add_argument("--mb", type=float, default=1.0)
    ap.add_argument("--added", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        text = os.path.join(d, "text.txt")
        with open(text, "w") as f:
            f.write("<" * int(a.mb * (1 << 20)))
        secs = {}
        for name, n in (("plain", 0), ("hostile", a.added)):
            path = os.path.join(d, name + ".json")
            with open(path, "w") as f:
                json.dump(tokenizer(n), f)
            secs[name] = best_of(a.reps, [a.nctmc, "tokenize", "--tokenizer", path, text])
            print(f"{name}: {n} nested added tokens, {a.mb:g} MB: {secs[name]:.3f} s")
        print(f"hostile / plain: {secs['hostile'] / secs['plain']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
