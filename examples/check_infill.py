#!/usr/bin/python3
"""Runs examples/infill.c and `nctmc sample --infill/--prefix/--suffix` on a
tiny untrained BPE model (written by `test_infill checkpoint`): every byte
outside the requested ranges comes back unchanged — including ranges that
start or end inside a word and inside a UTF-8 character — the reported
ranges tile the output, the same seed gives the same text, and bad ranges
fail with a message.

usage: check_infill.py TEST_INFILL INFILL NCTMC"""
import os
import random
import subprocess
import sys
import tempfile

failures = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL " + what)


def run(args):
    return subprocess.run(args, capture_output=True)


def infill(exe, ckpt, path, ranges, seed):
    args = [exe, ckpt, path] + ["%d:%d" % r if len(r) == 2 else "%d:%d:%d" % r
                                for r in ranges]
    return run(args + ["--seed", str(seed), "--steps", "3"])


def kept(text, ranges, out, where):
    """Each fixed segment of text at its place in out, by out's ranges."""
    prev_in = prev_out = 0
    for (r, w) in zip(ranges + [(len(text), len(text))], where + [(len(out), len(out))]):
        if text[prev_in:r[0]] != out[prev_out:w[0]]:
            return False
        prev_in, prev_out = r[1], w[1]
    return True


def main():
    test_infill, example, nctmc = sys.argv[1:4]
    rng = random.Random(5)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = os.path.join(tmp, "m.safetensors")
        check(run([test_infill, "checkpoint", ckpt]).returncode == 0, "write the checkpoint")
        words = ["the", " the", "aa", "é", "日本", "😀", " ", "\n", "in", "x", "."]
        for trial in range(25):
            text = "".join(rng.choice(words) for _ in range(rng.randint(1, 12))).encode()
            path = os.path.join(tmp, "f.txt")
            with open(path, "wb") as f:
                f.write(text)
            cuts = sorted(rng.randint(0, len(text)) for _ in range(2 * rng.randint(1, 3)))
            ranges = [(cuts[i], cuts[i + 1]) for i in range(0, len(cuts), 2)]
            if trial % 2:
                ranges = [r + (rng.randint(0, 3),) for r in ranges]
            p = infill(example, ckpt, path, ranges, trial)
            check(p.returncode == 0, "trial %d: %s" % (trial, p.stderr.decode(errors="replace")))
            if p.returncode != 0:
                continue
            where = [tuple(int(v) for v in line.split()[2:4])
                     for line in p.stderr.decode().splitlines() if line.startswith("range ")]
            check(len(where) == len(ranges), "trial %d: %d ranges reported" % (trial, len(where)))
            plain = [r[:2] for r in ranges]
            check(kept(text, plain, p.stdout, where),
                  "trial %d: bytes outside %s changed: %r -> %r" % (trial, plain, text, p.stdout))
            again = infill(example, ckpt, path, ranges, trial)
            check(again.stdout == p.stdout, "trial %d: same seed, another text" % trial)
        bad = infill(example, ckpt, path, [(3, 2)], 0)
        check(bad.returncode != 0 and b"not within" in bad.stderr, "a backwards range")
        bad = infill(example, ckpt, path, [(0, 2), (1, 3)], 0)
        check(bad.returncode != 0 and b"overlap" in bad.stderr, "overlapping ranges")

        # the tool on the same BPE model: blanks of a pattern, prefix and suffix
        p = run([nctmc, "sample", ckpt, "--infill", "Th___ é sat on the __.", "--steps", "3",
                 "--n", "3"])
        out = p.stdout.decode("utf-8", errors="surrogateescape")
        samples = [s for s in out.split("--- sample ")[1:]]
        check(p.returncode == 0 and len(samples) == 3, "nctmc --infill: %r" % p.stderr)
        for s in samples:
            body = s.split("---\n", 1)[1].encode("utf-8", errors="surrogateescape")
            check(body.startswith(b"Th") and b" \xc3\xa9 sat on the " in body
                  and body.endswith(b".\n"), "nctmc --infill kept the text: %r" % body)
        p = run([nctmc, "sample", ckpt, "--prefix", "Once é", "--suffix", "the end.",
                 "--length", "24", "--steps", "3"])
        check(p.returncode == 0 and p.stdout.startswith("Once é".encode())
              and p.stdout.endswith(b"the end.\n"), "nctmc --prefix/--suffix: %r" % p.stdout)
        check(b"of 24 tokens" in p.stderr, "nctmc --prefix/--suffix length: %r" % p.stderr)
        p = run([nctmc, "sample", ckpt, "--prefix", "x" * 30, "--length", "24"])
        check(p.returncode != 0 and b"more than the length" in p.stderr,
              "nctmc: a prefix longer than --length: %r" % p.stderr)
        # a masked model stopped early: the masks left show as '_' (as in
        # unconstrained samples), the fixed text is kept
        masked = os.path.join(tmp, "mm.safetensors")
        check(run([test_infill, "checkpoint", masked, "masked"]).returncode == 0,
              "write the masked checkpoint")
        p = run([nctmc, "sample", masked, "--infill", "ab___cd", "--no-denoise", "--steps", "1",
                 "--t-max", "0.5", "--t-min", "0.45", "--n", "3"])
        bodies = [s.split(b"---\n", 1)[1] for s in p.stdout.split(b"--- sample ")[1:]]
        check(p.returncode == 0 and len(bodies) == 3
              and all(b.startswith(b"ab") and b.endswith(b"cd\n") for b in bodies)
              and any(b"_" in b for b in bodies), "masked --no-denoise: %r" % p.stdout)
    print("infill example and tool: %s" % ("ok" if failures == 0 else "%d failures" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
