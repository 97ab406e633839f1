#!/usr/bin/python3
"""Checks an installed libnctmc (meson install --destdir DEST):

  check_install.py DEST [BUILD_DIR]     (BUILD_DIR: the build installed,
                                         default build-ci; scratch files go there)

- nctmc.h, the versioned shared library, the static library and nctmc.pc
  are installed;
- the shared library has the soname libnctmc.so.1 and exports only nctmc_*
  symbols, all versioned NCTMC_1 (tests/check_symbols.py);
- the shared library links
  no CUDA library (ldd): a program that calls nctmc_version() stays within
  10 MB RSS of one without libnctmc; the CUDA backend module
  libnctmc-cuda.so is installed beside it when the build made it, and
  exports only its entry;
- the static library defines only nctmc_* globally, and a program that
  defines functions named like the library's internal ones (file_read_all,
  json_parse, cpu_gemm: tests/install/collide.c) links against it and runs;
- tests/install/consumer.c builds against the installed copy through
  pkg-config, dynamically, and fully statically (cc -static with exactly
  what pkg-config --static --libs says), and runs;
- the installed `nctmc` tool runs from the DEST tree (a prefix other than
  the one it was configured for) with no LD_LIBRARY_PATH, through its
  $ORIGIN-relative run path, and finds the CUDA module beside the installed
  libnctmc (when built);
- examples/embed.c builds the same way and samples from a checkpoint that
  the installed tool trains (a few steps on the digits data).

Writes BUILD_DIR/install-check.json in meson's testlog format (one JSON
object per line) so the summary counts these checks with the tests.
"""
import glob
import json
import os
import re
import subprocess
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
dest = os.path.abspath(sys.argv[1])
build_dir = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "build-ci"))
scratch = os.path.join(build_dir, "install-check")
os.makedirs(scratch, exist_ok=True)
results = []
CUDA_LIBRARY = re.compile(r"lib(cuda|cudart|cublas|cublasLt|cudnn|nvrtc|nvJitLink)\b")


def record(name, ok, detail=""):
    results.append({"name": "install/" + name, "result": "OK" if ok else "FAIL"})
    if ok:  # the first line of what happened is enough
        detail = detail.strip().split("\n")[0][:160]
    print(("ok   " if ok else "FAIL ") + name + (": " + detail if detail else ""))


def find(pattern):
    hits = glob.glob(os.path.join(dest, "**", pattern), recursive=True)
    return hits[0] if hits else None


def run(cmd, env=None, cwd=None):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)


def clean_env():
    """The environment without LD_LIBRARY_PATH or NCTMC_CUDA_MODULE."""
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    env.pop("NCTMC_CUDA_MODULE", None)
    return env


def cuda_built():
    """Whether the installed build made the CUDA backend module."""
    try:
        with open(os.path.join(build_dir, "meson-info", "intro-targets.json")) as f:
            return any(t["name"] == "nctmc-cuda" for t in json.load(f))
    except OSError:
        return False


header = find("nctmc.h")
pc = find("nctmc.pc")
shared = [p for p in glob.glob(os.path.join(dest, "**", "libnctmc.so.*"), recursive=True)
          if not os.path.islink(p)]
static = find("libnctmc.a")
module = find("libnctmc-cuda.so")
tool = find("nctmc")
tool = tool if tool and os.access(tool, os.X_OK) and "bin" in tool else None
record("header installed", header is not None)
record("pkg-config file installed", pc is not None)
record("versioned shared library installed", len(shared) == 1)
record("static library installed", static is not None)
record("nctmc tool installed", tool is not None)
libdir = os.path.dirname(shared[0]) if shared else ""


def check_shared():
    soname = run(["objdump", "-p", shared[0]]).stdout
    record("soname is libnctmc.so.1", re.search(r"SONAME\s+libnctmc\.so\.1\b", soname) is not None)
    syms = run(["nm", "-D", "--defined-only", shared[0]]).stdout.split("\n")
    names = [line.split()[-1] for line in syms if line.strip() and line.split()[1] in "TDBR"]
    foreign = [n for n in names if not n.startswith("nctmc_")]
    record("only nctmc_* symbols exported", not foreign and len(names) > 10,
           ", ".join(foreign[:8]))
    sys.path.insert(0, os.path.join(root, "tests"))
    import check_symbols
    abi_problems = check_symbols.problems(shared[0], header)
    record("symbols versioned NCTMC_1 (0.3.0: NCTMC_1.1, 0.4.0: NCTMC_1.2, 0.8.0: NCTMC_1.3), every nctmc.h function exported", not abi_problems,
           "; ".join(abi_problems)[:400])
    ldd = run(["ldd", shared[0]], env=clean_env())
    cuda = [line.strip() for line in ldd.stdout.split("\n") if CUDA_LIBRARY.search(line)]
    record("the core links no CUDA library (ldd)", ldd.returncode == 0 and not cuda,
           "; ".join(cuda)[:400] or ldd.stderr.strip()[:400])


def check_module():
    built = cuda_built()
    record("CUDA module installed beside libnctmc" if built else
           "no CUDA module installed (CUDA not built)",
           (module is not None and os.path.dirname(module) == libdir) if built
           else module is None, module or "")
    if not module:
        return
    syms = run(["nm", "-D", "--defined-only", module]).stdout.split("\n")
    names = [line.split()[-1] for line in syms if line.strip() and line.split()[1] in "TDBR"]
    record("the CUDA module exports only its entry point",
           names == ["nctmc_backend_module_entry"], ", ".join(names[:8]))


def check_static_symbols():
    nm = run(["nm", "-g", "--defined-only", static])
    names = [line.split()[-1] for line in nm.stdout.split("\n")
             if len(line.split()) == 3]
    foreign = [n for n in names if not n.startswith("nctmc_")]
    record("static library defines only nctmc_* globally",
           nm.returncode == 0 and not foreign and len(names) > 10,
           ("%d foreign, e.g. %s" % (len(foreign), ", ".join(foreign[:8]))) if foreign else "")


def pkg_env():
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = os.path.dirname(pc)
    env["PKG_CONFIG_SYSROOT_DIR"] = dest
    return env


def pkg_flags(env, *extra):
    flags = run(["pkg-config", "--cflags", "--libs"] + list(extra) + ["nctmc"], env=env)
    return flags.returncode == 0, flags.stdout.split(), flags.stderr


def build_and_run(name, src, link_args, run_args, env, run_env):
    """Compiles src with link_args into the scratch folder and runs it."""
    exe = os.path.join(scratch, name)
    build = run(["cc", "-std=c11", "-Wall", "-Werror", src, "-o", exe] + link_args, env=env)
    record(name + " builds", build.returncode == 0, build.stderr.strip()[:400])
    if build.returncode == 0:
        done = run([exe] + run_args, env=run_env)
        record(name + " runs", done.returncode == 0, (done.stdout + done.stderr).strip()[:400])


def check_rss(env, shared_flags, run_env):
    """A program that links libnctmc.so and calls nctmc_version() stays
    within 10 MB of the same program without libnctmc."""
    src = os.path.join(root, "tests", "install", "rss.c")
    rss = {}
    for kind, flags in (("without", []), ("with", ["-DWITH_NCTMC"] + shared_flags)):
        exe = os.path.join(scratch, "rss-" + kind)
        build = run(["cc", "-std=c11", "-O2", src, "-o", exe] + flags, env=env)
        done = run([exe], env=run_env) if build.returncode == 0 else None
        found = re.search(r"rss_kb (\d+)", done.stdout) if done else None
        rss[kind] = int(found.group(1)) if found else None
    ok = None not in rss.values() and rss["with"] - rss["without"] < 10 * 1024
    record("RSS with libnctmc within 10 MB of without", ok,
           "%s kB with, %s kB without" % (rss["with"], rss["without"]))


def check_pkg_config():
    env = pkg_env()
    text = open(pc).read()
    # the shared library loads OpenBLAS at run time (backends/cpu/cpu_blas.c);
    # a static link takes it from the program's link line
    record("nctmc.pc: openblas only in Requires.private",
           re.search(r"^Requires\.private:.*\bopenblas\b", text, re.M) is not None
           and re.search(r"^Requires:", text, re.M) is None)
    needed = run(["readelf", "-d", os.path.join(libdir, "libnctmc.so")]).stdout
    record("libnctmc.so has no DT_NEEDED on OpenBLAS", "openblas" not in needed,
           needed.strip()[:300])
    ok, shared_flags, err = pkg_flags(env)
    record("pkg-config --libs is -lnctmc alone",
           ok and [f for f in shared_flags if f.startswith("-l")] == ["-lnctmc"],
           " ".join(shared_flags) + err)
    run_env = dict(env)
    run_env["LD_LIBRARY_PATH"] = libdir
    consumer = os.path.join(root, "tests", "install", "consumer.c")
    build_and_run("consumer-shared", consumer, shared_flags + ["-lm"], [], env, run_env)
    check_rss(env, shared_flags, run_env)
    ok, static_flags, err = pkg_flags(env, "--static")
    record("pkg-config --static --libs", ok, err.strip())
    # exactly what pkg-config says, with -static: a program with no shared
    # library at all (glibc warns that dlopen, which the core uses for the
    # CUDA module, would need its shared libraries: the link succeeds)
    build_and_run("consumer-fully-static", consumer, ["-static"] + static_flags, [], env,
                  clean_env())
    collide = os.path.join(root, "tests", "install", "collide.c")
    build_and_run("collide-fully-static", collide, ["-static"] + static_flags,
                  [scratch, "--fully-static"], env, clean_env())
    # the archive itself in an ordinary (dynamically linked) program
    static_only = [static if f == "-lnctmc" else f for f in static_flags]
    build_and_run("collide-static-archive", collide, static_only, [scratch], env, clean_env())


def check_tool_relocated():
    """The tool in DEST was configured for another prefix: it must start
    through its run path alone, load DEST's libnctmc, and find the CUDA
    module beside it."""
    env = clean_env()
    dyn = run(["readelf", "-d", tool]).stdout
    runpath = re.search(r"R(?:UN)?PATH.*\[(.*)\]", dyn)
    record("nctmc tool's run path is $ORIGIN-relative",
           runpath is not None and runpath.group(1).startswith("$ORIGIN"),
           runpath.group(1) if runpath else "none")
    ldd = run(["ldd", tool], env=env).stdout
    lib = re.search(r"libnctmc\.so\.\d+ => (\S+)", ldd)
    record("nctmc tool loads the relocated libnctmc",
           lib is not None and os.path.realpath(lib.group(1)).startswith(os.path.realpath(dest)),
           lib.group(1) if lib else ldd.strip()[:300])
    version = run([tool, "--help"], env=env)
    record("nctmc tool runs from a relocated prefix without LD_LIBRARY_PATH",
           version.returncode == 0 and "libnctmc" in version.stdout,
           (version.stdout + version.stderr).strip()[:300])
    return env


def check_tool_cuda(env, ckpt):
    """With the module beside the installed core, "cuda" gets past loading
    it: a context on a GPU, "no CUDA device" without one; never "not
    installed"."""
    if not module or not ckpt:
        return
    info = run([tool, "info", ckpt, "--backend", "cuda"], env=env)
    out = info.stdout + info.stderr
    record("installed tool finds the CUDA module beside libnctmc",
           "CUDA backend module" not in out and
           (info.returncode == 0 or "no CUDA device" in out),
           out.strip()[-400:])


def check_embed(env):
    """Trains a tiny checkpoint with the installed tool (from DEST, no
    LD_LIBRARY_PATH), then builds examples/embed.c against the installed
    library and samples from it. Returns the checkpoint's path."""
    work = os.path.join(scratch, "embed")
    os.makedirs(work, exist_ok=True)
    data, ckpt = os.path.join(work, "digits"), os.path.join(work, "tiny.safetensors")
    steps = [[tool, "prepare", "--digits", os.path.join(root, "examples", "data", "digits.txt"),
              "--out", data],
             [tool, "train", "--data", data, "--out", ckpt, "--layers", "1", "--d-model", "32",
              "--heads", "2", "--cond-dim", "16", "--batch", "4", "--steps", "3",
              "--eval-every", "0", "--eval-sequences", "8", "--threads", "1"]]
    for cmd in steps:
        done = run(cmd, env=env)
        record("installed tool (relocated): " + cmd[1], done.returncode == 0,
               (done.stdout + done.stderr).strip()[-400:])
        if done.returncode != 0:
            return None
    penv = pkg_env()
    ok, flags, err = pkg_flags(penv)
    exe = os.path.join(work, "embed")
    build = run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror",
                 os.path.join(root, "examples", "embed.c"), "-o", exe] + flags, env=penv)
    ok = ok and build.returncode == 0
    record("examples/embed.c builds against the installed library", ok,
           (err + build.stderr).strip()[:400])
    if ok:
        penv["LD_LIBRARY_PATH"] = libdir
        done = run([exe, ckpt], env=penv)
        record("embed samples from a checkpoint", done.returncode == 0 and done.stdout.strip() != "",
               (done.stdout + done.stderr).strip()[:400])
    return ckpt


if shared:
    check_shared()
    check_module()
if static:
    check_static_symbols()
if pc and header and shared and static:
    check_pkg_config()
if tool and shared and pc and header:
    tool_env = check_tool_relocated()
    checkpoint = check_embed(tool_env)
    check_tool_cuda(tool_env, checkpoint)

with open(os.path.join(build_dir, "install-check.json"), "w") as f:
    for r in results:
        f.write(json.dumps(r) + "\n")
sys.exit(0 if all(r["result"] == "OK" for r in results) else 1)
