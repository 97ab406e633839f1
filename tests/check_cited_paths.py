#!/usr/bin/python3
"""Every repository path cited in the source tree's text must exist.

Usage: check_cited_paths.py SOURCE_ROOT

Scans the text of the sources (include/, lib/, backends/, examples/,
scripts/, python/, bench/, tests/, .ci/, the top-level meson.build and
meson_options.txt: code comments, docstrings and strings alike),
docs/**/*.md, research/**/*.md and README.md for tokens such as
`lib/run/sampler.c` or `docs/dev/design.md` and fails, listing each one,
when a cited path is not a file or folder of the tree. JSON files are not
scanned: they are records of past runs and name the paths of their day.

Python 3 standard library only (run as /usr/bin/python3).
"""
import os
import re
import sys

# The folders a citation may start with, and the endings that mark a file.
TOP = r"(?:lib|include|backends|docs|tests|scripts|examples|python|bench|research|\.ci)"
EXT = r"(?:c|h|cu|cuh|md|py|sh|build|json|txt|map)"
# Not preceded by a path character (so `build/lib/x.c` or `python/tests/x.py`
# is read from its own start, not from an inner `lib/` or `tests/`), and not
# followed by one (so `x.c` is not the front of `x.cfg`).
CITED = re.compile(r"(?<![A-Za-z0-9_./-])(" + TOP + r"/[A-Za-z0-9_./-]+?\." + EXT +
                   r")(?![A-Za-z0-9_-])")

SOURCE_DIRS = ["include", "lib", "backends", "examples", "scripts", "python", "bench",
               "tests"]
SOURCE_EXTS = {".c", ".h", ".cu", ".cuh", ".py", ".sh", ".build", ".txt", ".map",
               ".toml", ".cfg", ".in", ".md"}
DOC_DIRS = ["docs", "research"]

# Paths that exist only once something has been built or run: a citation of
# one cannot be checked against the source tree. Keep this short; reword the
# text instead where that reads as well.
ALLOWED = {
}

SKIP_DIRS = {".git", "__pycache__", "node_modules", ".pytest_cache"}


def files_under(root, top, exts):
    base = os.path.join(root, top)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not d.startswith("build"))
        for name in sorted(filenames):
            if os.path.splitext(name)[1] in exts or name in ("meson.build",):
                yield os.path.join(dirpath, name)


def scanned_files(root):
    for top in SOURCE_DIRS:
        yield from files_under(root, top, SOURCE_EXTS)
    for top in DOC_DIRS:
        yield from files_under(root, top, {".md"})
    for name in ("README.md", "meson.build", "meson_options.txt"):
        path = os.path.join(root, name)
        if os.path.isfile(path):
            yield path
    ci = os.path.join(root, ".ci")
    if os.path.isdir(ci):
        for name in sorted(os.listdir(ci)):
            path = os.path.join(ci, name)
            if os.path.isfile(path):
                yield path


def cited_paths(text):
    for m in CITED.finditer(text):
        # the match ends at the file's extension, so a sentence's full stop,
        # a comma, a closing bracket or quote after it is never part of it
        yield m.group(1), text.count("\n", 0, m.start()) + 1


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: check_cited_paths.py SOURCE_ROOT\n")
        return 2
    root = os.path.abspath(argv[1])
    missing = []
    n_cited = 0
    this_file = os.path.abspath(__file__)
    for path in scanned_files(root):
        if os.path.abspath(path) == this_file:
            continue  # its docstring's examples are examples
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            missing.append((os.path.relpath(path, root), 0, "unreadable: %s" % e))
            continue
        for cited, line in cited_paths(text):
            n_cited += 1
            if cited in ALLOWED:
                continue
            if not os.path.exists(os.path.join(root, cited)):
                missing.append((os.path.relpath(path, root), line, cited))
    for where, line, cited in missing:
        print("%s:%d: cites %s, which does not exist" % (where, line, cited))
    print("cited_paths: %d citations, %d missing" % (n_cited, len(missing)))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
