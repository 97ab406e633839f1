#!/usr/bin/env python3
"""The library's layer order, held against the code (docs/dev/architecture.md).

    check_layers.py SOURCE_ROOT [ARCHIVE.a ...]

1. Includes: every `#include "..."` in lib/ and backends/ names a header of
   its own folder (bare: "model.h"), of a folder below it in LAYERS
   ("base/abi.h", "cpu/cpu_backend.h"), or the public "nctmc.h". A header
   named bare must exist in the including file's folder, so that no include
   path can make a bare name reach across folders.
2. Calls: with the library's static archives (the objects the build made),
   each object's defined and undefined symbols (nm) give the file-level call
   graph. No two files may call each other in a loop, and no file may call a
   function defined in a higher layer.

Exits 1 listing every violation; prints "check_layers: ok" otherwise.
"""
import os
import re
import subprocess
import sys

# Lowest first. A folder may use itself and the folders before it; the two
# backends share a rank and may not use each other.
LAYERS = [
    ["lib/base"],
    ["lib/platform"],
    ["lib/math"],
    ["lib/backend"],
    ["backends/cpu", "backends/cuda"],
    ["lib/core"],
    ["lib/comm"],
    ["backends/mpi", "backends/nccl"],
    ["lib/io"],
    ["lib/text"],
    ["lib/data"],
    ["lib/model"],
    ["lib/dit"],
    ["lib/checkpoint"],
    ["lib/run"],
    ["lib/train"],
]
RANK = {folder: i for i, group in enumerate(LAYERS) for folder in group}
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of_include(path):
    """'base/abi.h' -> 'lib/base'; 'cpu/x.h' -> 'backends/cpu'."""
    head = path.split("/")[0]
    for folder in RANK:
        if folder.split("/")[1] == head:
            return folder
    return None


def source_files(root):
    for top in ("lib", "backends"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def check_includes(root, problems):
    n = 0
    for path in source_files(root):
        folder = os.path.dirname(path)
        if folder not in RANK:
            problems.append("%s: folder %s is not in the layer order (tests/check_layers.py)"
                            % (path, folder))
            continue
        text = open(os.path.join(root, path), encoding="utf-8").read()
        for inc in INCLUDE.findall(text):
            n += 1
            if inc == "nctmc.h":
                continue
            if "/" not in inc:
                if not os.path.exists(os.path.join(root, folder, inc)):
                    problems.append('%s: includes "%s" bare, which is not in %s/' %
                                    (path, inc, folder))
                continue
            target = folder_of_include(inc)
            if target is None or not os.path.exists(os.path.join(root, target,
                                                                 inc.split("/", 1)[1])):
                problems.append('%s: includes "%s", which is no header of a layer' %
                                (path, inc))
            elif target == folder:
                problems.append('%s: includes its own folder\'s "%s" by path; write it bare' %
                                (path, inc))
            elif RANK[target] >= RANK[folder]:
                problems.append('%s (%s) includes "%s" from %s, which is not below it' %
                                (path, folder, inc, target))
    return n


def object_sources(root):
    """Maps an object's name to its source: meson flattens the path
    (lib_model_model.c), a custom target may keep the file name alone
    (cuda_loss.cu)."""
    names = {}
    sources = list(source_files(root))
    for p in sources:
        names[p.replace("/", "_")] = p
    for p in sources:
        base = os.path.basename(p)
        if sum(os.path.basename(q) == base for q in sources) == 1:
            names.setdefault(base, p)
    return names


def symbols(archive):
    """{object: (defined, undefined)} from `nm` of a static archive."""
    out = subprocess.run(["nm", "-A", archive], capture_output=True, text=True, check=True)
    table = {}
    for line in out.stdout.splitlines():
        # archive:member:  [value] TYPE name
        parts = line.rsplit(":", 1)
        if len(parts) != 2:
            continue
        member = parts[0].split(":")[-1]
        fields = parts[1].split()
        if len(fields) < 2:
            continue
        kind, name = fields[-2], fields[-1]
        defined, undefined = table.setdefault(member, (set(), set()))
        if kind == "U":
            undefined.add(name)
        elif kind in ("T", "D", "R", "B", "V", "W"):
            defined.add(name)
    return table


def call_graph(root, archives):
    by_flat = object_sources(root)
    units = {}
    for archive in archives:
        for member, (defined, undefined) in symbols(archive).items():
            base = os.path.basename(member)
            flat = base[:-2] if base.endswith(".o") else base
            src = by_flat.get(flat)
            if src is None:
                continue
            d, u = units.setdefault(src, (set(), set()))
            d |= defined
            u |= undefined
    owner = {}
    for src, (defined, _) in units.items():
        for name in defined:
            owner[name] = src
    graph = {src: set() for src in units}
    for src, (_, undefined) in units.items():
        for name in undefined:
            callee = owner.get(name)
            if callee and callee != src:
                graph[src].add((callee, name))
    return graph


def cycles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w, _ in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check_calls(root, archives, problems):
    graph = call_graph(root, archives)
    if not graph:
        problems.append("no object of lib/ or backends/ found in %s" % " ".join(archives))
        return 0
    for comp in cycles(graph):
        inside = set(comp)
        ties = ["%s -> %s (%s)" % (a, b, name) for a in comp
                for b, name in sorted(graph[a]) if b in inside]
        problems.append("files that call each other in a loop: %s\n    %s" %
                        (", ".join(comp), "\n    ".join(ties)))
    for src in sorted(graph):
        for callee, name in sorted(graph[src]):
            a, b = os.path.dirname(src), os.path.dirname(callee)
            if a != b and RANK.get(b, -1) >= RANK.get(a, -1):
                problems.append("%s (%s) calls %s, defined in %s (%s), which is not below it"
                                % (src, a, name, callee, b))
    return len(graph)


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    root = sys.argv[1]
    problems = []
    n_includes = check_includes(root, problems)
    n_units = check_calls(root, sys.argv[2:], problems) if len(sys.argv) > 2 else 0
    for p in problems:
        print("check_layers: " + p)
    if problems:
        print("check_layers: %d problem(s)" % len(problems))
        return 1
    print("check_layers: ok (%d includes%s)" %
          (n_includes, ", %d files' calls" % n_units if n_units else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
