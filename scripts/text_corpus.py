#!/usr/bin/env python3
"""Builds the text corpus of research/2026-11-26-text-model-cpu.md:
the fortune cookies of Debian's `fortunes` and `fortunes-min` packages
(source package fortune-mod 1:1.99.1-7.3 in Debian 12; install with
`apt-get install fortunes`), split into training and held-out documents.

    scripts/text_corpus.py OUTDIR

writes OUTDIR/train.txt and OUTDIR/heldout.txt: one fortune per document,
documents separated by a line `%` (read them with `nctmc prepare
--split-at %`), and OUTDIR/corpus.txt, a record of what was read.

The rule, fixed and independent of any model:
- the files are those the two packages install under
  /usr/share/games/fortunes (their `.dat` indexes and `.u8` links
  excluded), in byte order of their names; a file's fortunes are the texts
  between its `%` lines, in file order;
- overstrikes (`X<backspace>Y`, a few files' underlining) are resolved
  to what a terminal shows (Y, as `col -b` does); trailing spaces of each
  line are dropped; blank fortunes are skipped;
- fortune k (counted from 0 over the whole corpus) is held out when
  k % 10 == 9, so one in ten, spread over every file.

The output is byte-identical wherever the same package versions are
installed: the script checks the versions and refuses others unless
--any-version is given (then corpus.txt records what was used).
"""
import argparse
import hashlib
import os
import re
import subprocess
import sys

PACKAGES = ("fortunes", "fortunes-min")
VERSION = "1:1.99.1-7.3"
FORTUNE_DIR = "/usr/share/games/fortunes/"
HELD_OUT_EVERY = 10  # fortune k is held out when k % 10 == 9


def package_files(pkg):
    """The fortune files a package installs, from dpkg's own list."""
    out = subprocess.run(["dpkg-query", "-L", pkg], capture_output=True, text=True, check=True)
    files = []
    for line in out.stdout.splitlines():
        if not line.startswith(FORTUNE_DIR) or line.endswith((".dat", ".u8")):
            continue
        if os.path.isfile(line) and not os.path.islink(line):
            files.append(line)
    return files


def package_version(pkg):
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                         text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def strip_overstrikes(line):
    """What a terminal shows: a backspace moves back one character, which
    the next one overwrites (`_\bW` underlines W: W remains)."""
    out = []
    for ch in line:
        if ch == "\x08":
            if out:
                out.pop()
        else:
            out.append(ch)
    return "".join(out)


def fortunes_of(path):
    """The cleaned fortunes of one file, in order."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    docs = []
    for chunk in re.split(r"^%[ \t]*$", text, flags=re.M):
        lines = [strip_overstrikes(line).rstrip() for line in chunk.split("\n")]
        doc = "\n".join(lines).strip("\n")
        if doc.strip():
            docs.append(doc)
    return docs


def write_docs(path, docs):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n%\n".join(docs))
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--any-version", action="store_true",
                    help="accept other versions of the packages (the corpus then differs)")
    args = ap.parse_args()

    versions = {p: package_version(p) for p in PACKAGES}
    missing = [p for p, v in versions.items() if v is None or v == ""]
    if missing:
        sys.exit("text_corpus: not installed: %s (apt-get install fortunes)" % " ".join(missing))
    wrong = [p for p, v in versions.items() if v != VERSION]
    if wrong and not args.any_version:
        sys.exit("text_corpus: %s at %s, the corpus is defined on %s (--any-version to "
                 "accept)" % (wrong[0], versions[wrong[0]], VERSION))

    files = sorted({f for p in PACKAGES for f in package_files(p)},
                   key=lambda s: s.encode())
    train, held = [], []
    k = 0
    for path in files:
        for doc in fortunes_of(path):
            (held if k % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else train).append(doc)
            k += 1

    os.makedirs(args.outdir, exist_ok=True)
    outs = {"train.txt": train, "heldout.txt": held}
    record = ["packages: " + ", ".join("%s %s" % (p, versions[p]) for p in PACKAGES),
              "files: %d under %s" % (len(files), FORTUNE_DIR),
              "rule: fortune k held out when k %% %d == %d" % (HELD_OUT_EVERY,
                                                               HELD_OUT_EVERY - 1)]
    for name, docs in outs.items():
        path = os.path.join(args.outdir, name)
        write_docs(path, docs)
        with open(path, "rb") as f:
            data = f.read()
        record.append("%s: %d fortunes, %d bytes, sha256 %s" % (
            name, len(docs), len(data), hashlib.sha256(data).hexdigest()))
    with open(os.path.join(args.outdir, "corpus.txt"), "w") as f:
        f.write("\n".join(record) + "\n")
    print("\n".join(record))


if __name__ == "__main__":
    main()
