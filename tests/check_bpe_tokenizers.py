#!/usr/bin/env python3
"""libnctmc's byte-level BPE gives the same ids as Hugging Face `tokenizers`.

Usage: check_bpe_tokenizers.py NCTMC_TOOL [--mb MB] [--fuzz N] [--keep DIR]

No registry package ships GPT-2's own vocab.json / merges.txt, so this trains
a GPT-2 style byte-level BPE with `tokenizers` (ByteLevel pre-tokenizer and
decoder, all 256 byte symbols, two added tokens) on text found on this
machine — licenses, package documentation, man pages in a dozen languages,
Python sources — and then, on held-out text of the same sources (MB
megabytes, documents separated by <|endoftext|>), on N fuzzed strings
(random Unicode with combining marks, emoji, digits, whitespace runs,
apostrophes, added-token fragments) and on 100 kB runs without spaces:

1. `nctmc tokenize --tokenizer tokenizer.json` prints exactly the ids of
   Tokenizer.encode();
2. the same through vocab.json + merges.txt (`--merges`), whose added tokens
   the library infers;
3. `nctmc tokenize --decode` gives back the exact bytes;
4. `nctmc prepare --tokenizer-file tokenizer.json` writes a shard of exactly
   those ids, each document ended by the <|endoftext|> id, and a tokenizer
   file that encodes the same.

Sources that are absent are skipped. The interpreter is $NCTMC_PYTHON if set
(the script re-runs itself with it); exits 77 (skipped) when `tokenizers`
cannot be imported or too little text is found.
"""
import argparse
import gzip
import os
import random
import struct
import subprocess
import sys
import tempfile

try:  # the version lib/text/unicode_tables.c was made from, if installed
    import unicodedata2 as unicodedata
except ImportError:
    import unicodedata

SKIP = 77
ADDED = ["<|endoftext|>", "<|pad|>"]


def reexec_with_configured_python():
    want = os.environ.get("NCTMC_PYTHON")
    if want and os.environ.get("NCTMC_PYTHON_REEXEC") != "1":
        if os.path.abspath(want) != os.path.abspath(sys.executable):
            os.environ["NCTMC_PYTHON_REEXEC"] = "1"
            try:
                os.execv(want, [want, os.path.abspath(__file__)] + sys.argv[1:])
            except OSError as e:
                print(f"skipped: NCTMC_PYTHON={want} cannot be run: {e}")
                sys.exit(SKIP)


reexec_with_configured_python()
try:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError as e:
    print(f"skipped: {sys.executable} cannot import tokenizers ({e}); run "
          "scripts/install-deps.sh, or set NCTMC_PYTHON to an interpreter that can")
    sys.exit(SKIP)


# ---- text found on this machine ------------------------------------------------

def read_text(path, limit=400_000):
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read(limit)
        else:
            with open(path, "rb") as f:
                data = f.read(limit)
    except OSError:
        return None
    if b"\0" in data:
        return None
    # man pages in legacy encodings come out with U+FFFD: still real text
    return data.decode("utf-8", errors="replace")


def files_under(root, accept, limit):
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if accept(name):
                out.append(os.path.join(dirpath, name))
                if len(out) >= limit:
                    return out
    return out


def sources():
    """Lists of files, one per kind of text."""
    groups = []
    groups.append(files_under("/usr/share/common-licenses", lambda n: True, 100))
    groups.append(files_under("/usr/share/doc", lambda n: n == "copyright" or
                              n.startswith("README") or n.startswith("changelog"), 4000))
    man = "/usr/share/man"
    if os.path.isdir(man):
        for lang in sorted(os.listdir(man)):
            if not lang.startswith("man"):  # translated pages
                groups.append(files_under(os.path.join(man, lang), lambda n: n.endswith(".gz"),
                                          400))
        groups.append(files_under(os.path.join(man, "man1"), lambda n: n.endswith(".gz"), 2000))
    for py in ("/usr/lib/python3.11", "/usr/lib/python3/dist-packages"):
        groups.append(files_under(py, lambda n: n.endswith(".py"), 4000))
    return [g for g in groups if g]


def documents(rng):
    """Documents round-robin over the groups, each group shuffled."""
    groups = sources()
    for g in groups:
        rng.shuffle(g)
    while any(groups):
        for g in groups:
            if g:
                text = read_text(g.pop())
                if text and text.strip():
                    yield text


def split_corpus(train_bytes, test_bytes, seed=1):
    """Every third document trains, the rest is held out."""
    train, test, n_train, n_test = [], [], 0, 0
    for k, doc in enumerate(documents(random.Random(seed))):
        size = len(doc.encode())
        if k % 3 == 0 and n_train < train_bytes:
            train.append(doc)
            n_train += size
        elif k % 3 != 0 and n_test < test_bytes:
            test.append(doc)
            n_test += size
        if n_train >= train_bytes and n_test >= test_bytes:
            break
    return train, test, n_test


# ---- fuzzed strings ------------------------------------------------------------

SPACES = [" ", "  ", "\t", "\n", "\n\n", "\r\n", "\x0b", "\x0c", "\x85", "\u00a0", "\u1680",
          "\u2003", "\u2028", "\u2029", "\u202f", "\u3000", " \n ", "   \t"]
PIECES = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'", "''", " '", "'x",
          "<|endoftext|>", "<|endof", "|>", "<|", "<|pad|>", "<|pad", "don't", "I'm",
          "e\u0301", "\u0915\u094d\u0937", "\U0001F468\u200D\U0001F469\u200D\U0001F467",
          "\U0001F44D\U0001F3FD", "\U0001F1EF\U0001F1F5", "\uFE0F", "\u200B", "\u00AD",
          "123", "1,000.5", "\u0661\u0662", "\u2167", "\u00BD", "x\u0308"]


def random_char(rng):
    r = rng.random()
    if r < 0.3:
        return chr(rng.randrange(0x20, 0x7F))
    if r < 0.4:
        return chr(rng.randrange(0x300, 0x370))                  # combining marks
    if r < 0.5:
        return chr(rng.choice([rng.randrange(0x1F300, 0x1FAFF), rng.randrange(0x2600, 0x27C0)]))
    if r < 0.6:
        return chr(rng.choice([0x4E00, 0x3040, 0x0600, 0x0900, 0x0400, 0xAC00]) +
                   rng.randrange(0, 0x60))                       # scripts
    if r < 0.7:
        return rng.choice("0123456789\u0660\u06F0\u0966\uFF10\u2460\u00B2")
    # any code point: half of them assigned (in the Unicode version of
    # lib/text/unicode_tables.c when unicodedata2 is installed), half anything
    assigned = rng.random() < 0.5
    while True:
        cp = rng.randrange(0x80, 0x110000)
        if not 0xD800 <= cp <= 0xDFFF and (not assigned or
                                          unicodedata.category(chr(cp)) != "Cn"):
            return chr(cp)


def long_runs(seed=3):
    """Pre-tokens of 100 kB and more: letters, digits, symbols, CJK."""
    rng = random.Random(seed)
    alphabets = ["abcdefghijklmnopqrstuvwxyz", "0123456789", "!#$%&()*+-./:;<=>?@[]^_{|}~",
                 "".join(chr(0x4E00 + k) for k in range(300)), "a"]
    return [" " + "".join(rng.choice(a) for _ in range(100_000)) for a in alphabets]


def fuzz_strings(n, seed=7):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randrange(0, 40)):
            r = rng.random()
            if r < 0.25:
                parts.append(rng.choice(SPACES) * rng.randrange(1, 4))
            elif r < 0.45:
                parts.append(rng.choice(PIECES))
            else:
                parts.append("".join(random_char(rng) for _ in range(rng.randrange(1, 8))))
        out.append("".join(parts))
    return out


# ---- the comparison ----------------------------------------------------------------

def train_tokenizer(texts, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=ADDED,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def run_tool(tool, args, data):
    r = subprocess.run([tool, "tokenize"] + args, input=data, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("nctmc tokenize %s failed: %s" % (" ".join(args),
                                                            r.stderr.decode(errors="replace")))
    return r.stdout


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare(name, tok, text, ours):
    want = tok.encode(text).ids
    if ours == want:
        return True
    i = first_difference(ours, want)
    print(f"FAIL {name}: {len(ours)} ids vs tokenizers' {len(want)}; first difference at "
          f"token {i}: ours {ours[i:i + 6]} theirs {want[i:i + 6]}")
    print("  theirs spell: %r" % [tok.id_to_token(t) for t in want[max(0, i - 3):i + 6]])
    return False


def read_stream_shard(path):
    """The tokens of a stream shard (docs/formats.md, "Token shards")."""
    with open(path, "rb") as f:
        data = f.read()
    width, n = struct.unpack_from("<I", data, 12)[0], struct.unpack_from("<Q", data, 32)[0]
    code = {1: "B", 2: "H", 4: "I"}[width]
    return list(struct.unpack_from("<%d%s" % (n, code), data, 48))


def check_prepare(tool, tok, docs, d):
    """`nctmc prepare --tokenizer-file tokenizer.json`: the shard holds each
    document's ids from `tokenizers`, then the <|endoftext|> id; the
    tokenizer file it saves encodes like tokenizer.json."""
    docs = [x for x in docs[:300] if x]
    src = os.path.join(d, "prepare-docs")
    os.makedirs(src, exist_ok=True)
    for i, doc in enumerate(docs):  # a file is a document, read in name order
        with open(os.path.join(src, "%05d.txt" % i), "wb") as f:
            f.write(doc.encode())
    out = os.path.join(d, "prepared")
    r = subprocess.run([tool, "prepare", "--tokenizer-file", os.path.join(d, "tokenizer.json"),
                        "--val-fraction", "0", "--threads", "2", "--out", out, src],
                       capture_output=True)
    if r.returncode != 0:
        print("FAIL prepare --tokenizer-file tokenizer.json: " + r.stderr.decode(errors="replace"))
        return False
    eot = tok.token_to_id(ADDED[0])
    want = []
    for doc in docs:
        want += tok.encode(doc).ids + [eot]
    got = read_stream_shard(os.path.join(out, "train.bin"))
    if got != want:
        print("FAIL prepare --tokenizer-file tokenizer.json: the shard differs from tokenizers' "
              "ids at token %d of %d" % (first_difference(got, want), len(want)))
        return False
    text = "".join(docs).encode()
    saved = run_tool(tool, ["--tokenizer", os.path.join(out, "tokenizer.txt")], text)
    if [int(t) for t in saved.split()] != tok.encode("".join(docs)).ids:
        print("FAIL prepare's saved tokenizer.txt encodes differently from tokenizer.json")
        return False
    print(f"ok: prepare --tokenizer-file tokenizer.json: {len(docs)} documents, {len(got)} "
          "tokens as tokenizers gives them, each document ended by <|endoftext|>; its "
          "tokenizer.txt encodes the same")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tool")
    ap.add_argument("--mb", type=float, default=1.0, help="held-out megabytes")
    ap.add_argument("--train-mb", type=float, default=1.5)
    ap.add_argument("--vocab", type=int, default=12000)
    ap.add_argument("--fuzz", type=int, default=3000)
    ap.add_argument("--keep", help="write the tokenizer and texts into this directory")
    args = ap.parse_args()

    train, test, n_test = split_corpus(int(args.train_mb * 1e6), int(args.mb * 1e6))
    if n_test < 0.5 * args.mb * 1e6:
        print(f"skipped: found only {n_test} bytes of held-out text")
        return SKIP
    tok = train_tokenizer(train, args.vocab)
    n_merges = len(tok.get_vocab()) - 256 - len(ADDED)
    heldout = ADDED[0].join(test)
    fuzz = ADDED[0].join(fuzz_strings(args.fuzz))
    runs = ADDED[0].join(long_runs())

    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or tmp
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        tok.model.save(d)  # vocab.json, merges.txt
        vocab, merges = os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt")
        for name, text in (("held-out text", heldout), ("fuzzed strings", fuzz),
                           ("long runs without spaces", runs)):
            data = text.encode()
            if args.keep:
                with open(os.path.join(d, name.replace(" ", "_") + ".txt"), "wb") as f:
                    f.write(data)
            for how, flags in (("tokenizer.json", ["--tokenizer", os.path.join(d, "tokenizer.json")]),
                               ("vocab.json + merges.txt", ["--tokenizer", vocab, "--merges", merges])):
                out = run_tool(args.tool, flags, data)
                ours = [int(t) for t in out.split()]
                ok = compare(f"{name} via {how}", tok, text, ours)
                failed += not ok
                if ok:
                    print(f"ok: {name} ({len(data)} bytes, {len(ours)} tokens) via {how}: "
                          "0 mismatches")
                if how == "tokenizer.json":
                    back = run_tool(args.tool, flags + ["--decode"], out)
                    if back != data:
                        print(f"FAIL {name}: decoding our ids does not give the bytes back "
                              f"(first difference at byte {first_difference(back, data)})")
                        failed += 1
                    else:
                        print(f"ok: {name}: decode gives the {len(data)} bytes back")
        failed += not check_prepare(args.tool, tok, test, d)
    print(f"tokenizer: {len(tok.get_vocab())} tokens, {n_merges} merges; "
          f"{'FAILED' if failed else 'all identical'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
