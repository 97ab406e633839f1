#!/usr/bin/python3
"""Checks an installed libnctmc (meson install --destdir PREFIX):

- nctmc.h, the versioned shared library, the static library and nctmc.pc
  are installed;
- the shared library has the soname libnctmc.so.1 and exports only nctmc_*
  symbols, all versioned NCTMC_1 (tests/check_symbols.py);
- tests/install/consumer.c builds against the installed copy through
  pkg-config, dynamically and statically (pkg-config --static), and runs;
- examples/embed.c builds the same way and samples from a checkpoint that
  the installed `nctmc` tool trains (a few steps on the digits data).

Writes build-ci/install-check.json in meson's testlog format (one JSON
object per line) so the summary counts these checks with the tests.
"""
import glob
import json
import os
import subprocess
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
dest = sys.argv[1]
results = []


def record(name, ok, detail=""):
    results.append({"name": "install/" + name, "result": "OK" if ok else "FAIL"})
    print(("ok   " if ok else "FAIL ") + name + (": " + detail if detail else ""))


def find(pattern):
    hits = glob.glob(os.path.join(dest, "**", pattern), recursive=True)
    return hits[0] if hits else None


header = find("nctmc.h")
pc = find("nctmc.pc")
shared = [p for p in glob.glob(os.path.join(dest, "**", "libnctmc.so.*"), recursive=True)
          if not os.path.islink(p)]
static = find("libnctmc.a")
record("header installed", header is not None)
record("pkg-config file installed", pc is not None)
record("versioned shared library installed", len(shared) == 1)
record("static library installed", static is not None)

if shared:
    soname = subprocess.run(["objdump", "-p", shared[0]], capture_output=True, text=True).stdout
    record("soname is versioned", "SONAME               libnctmc.so.1" in soname)
    syms = subprocess.run(["nm", "-D", "--defined-only", shared[0]], capture_output=True,
                          text=True).stdout.split("\n")
    names = [line.split()[-1] for line in syms if line.strip() and line.split()[1] in "TDBR"]
    foreign = [n for n in names if not n.startswith("nctmc_")]
    record("only nctmc_* symbols exported", not foreign and len(names) > 10,
           ", ".join(foreign[:8]))
    sys.path.insert(0, os.path.join(root, "tests"))
    import check_symbols
    abi_problems = check_symbols.problems(shared[0], header)
    record("symbols versioned NCTMC_1, every nctmc.h function exported", not abi_problems,
           "; ".join(abi_problems)[:400])

if pc and header:
    env = dict(os.environ)
    pcdir = os.path.dirname(pc)
    env["PKG_CONFIG_PATH"] = pcdir
    env["PKG_CONFIG_SYSROOT_DIR"] = dest
    libdir = os.path.dirname(shared[0]) if shared else ""
    env["LD_LIBRARY_PATH"] = libdir
    src = os.path.join(root, "tests", "install", "consumer.c")
    for kind, static_flag in (("shared", []), ("static", ["--static"])):
        flags = subprocess.run(["pkg-config", "--cflags", "--libs"] + static_flag + ["nctmc"],
                               capture_output=True, text=True, env=env)
        exe = os.path.join(root, "build-ci", "consumer-" + kind)
        args = flags.stdout.split()
        if kind == "static":
            # the archive where -lnctmc stood, so that the libraries of
            # Libs.private (CUDA's, when built with it) come after it, as
            # the linker's --as-needed requires
            args = [static if a == "-lnctmc" else a for a in args] + ["-lopenblas", "-lpthread",
                                                                       "-lm"]
        build = subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", src, "-o", exe] + args + ["-lm"],
                               capture_output=True, text=True, env=env)
        ok = flags.returncode == 0 and build.returncode == 0
        record("consumer builds (%s)" % kind, ok, (flags.stderr + build.stderr).strip()[:400])
        if ok:
            run = subprocess.run([exe], capture_output=True, text=True, env=env)
            record("consumer runs (%s)" % kind, run.returncode == 0,
                   (run.stdout + run.stderr).strip()[:400])



def check_embed(env):
    """Builds examples/embed.c against the installed library and runs it on
    a checkpoint made by the installed tool."""
    tool = find("nctmc")
    tool = tool if tool and os.access(tool, os.X_OK) and "bin" in tool else None
    record("nctmc tool installed", tool is not None)
    if not tool:
        return
    work = os.path.join(root, "build-ci", "install-embed")
    os.makedirs(work, exist_ok=True)
    data, ckpt = os.path.join(work, "digits"), os.path.join(work, "tiny.safetensors")
    steps = [[tool, "prepare", "--digits", os.path.join(root, "examples", "data", "digits.txt"),
              "--out", data],
             [tool, "train", "--data", data, "--out", ckpt, "--layers", "1", "--d-model", "32",
              "--heads", "2", "--cond-dim", "16", "--batch", "4", "--steps", "3",
              "--eval-every", "0", "--eval-sequences", "8", "--threads", "1"]]
    for cmd in steps:
        run = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if run.returncode != 0:
            record("installed tool: " + cmd[1], False, (run.stdout + run.stderr).strip()[-400:])
            return
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "nctmc"], capture_output=True,
                           text=True, env=env)
    exe = os.path.join(work, "embed")
    build = subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror",
                            os.path.join(root, "examples", "embed.c"), "-o", exe]
                           + flags.stdout.split(), capture_output=True, text=True, env=env)
    ok = flags.returncode == 0 and build.returncode == 0
    record("examples/embed.c builds against the installed library", ok,
           (flags.stderr + build.stderr).strip()[:400])
    if ok:
        run = subprocess.run([exe, ckpt], capture_output=True, text=True, env=env)
        record("embed samples from a checkpoint", run.returncode == 0 and run.stdout.strip() != "",
               (run.stdout + run.stderr).strip()[:400])


if pc and header:
    check_embed(env)

with open(os.path.join(root, "build-ci", "install-check.json"), "w") as f:
    for r in results:
        f.write(json.dumps(r) + "\n")
sys.exit(0 if all(r["result"] == "OK" for r in results) else 1)
