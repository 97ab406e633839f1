#!/usr/bin/env python3
"""Python's `safetensors` and libnctmc read each other's files.

Usage: check_safetensors.py WRITE_CHECKPOINT_EXE

1. The C program writes a checkpoint and a dump of what it should hold;
   safetensors.numpy.load_file / safe_open must see the same tensor names,
   shapes, float32 bits and metadata (strings full of JSON escapes included),
   and the header must have the documented layout and checksum.
2. Python writes a file (float32 of 0 to 4 dimensions, other dtypes, unicode
   metadata); libnctmc's reader must see the same.
3. Python rewrites the checkpoint, recomputing "nctmc.checksum" as
   docs/formats.md says; nctmc_model_load() must accept it and give the same
   weights. Rewritten without that, it must be refused.
4. An int8 checkpoint (format 3): NumPy reads its I8 weights and F32
   scales, and scale[o] * q[o, i] in float32 is, bit for bit, what
   nctmc_model_read_tensor() gives.

The interpreter is $NCTMC_PYTHON if set (this script re-runs itself with it),
else the one running it. Exits 77 (skipped) when safetensors or numpy cannot
be imported.
"""
import os
import struct
import subprocess
import sys
import tempfile
import zlib

SKIP = 77


def reexec_with_configured_python():
    want = os.environ.get("NCTMC_PYTHON")
    if want and os.environ.get("NCTMC_PYTHON_REEXEC") != "1":
        # not realpath: a venv's python is a symlink to the system one
        if os.path.abspath(want) != os.path.abspath(sys.executable):
            os.environ["NCTMC_PYTHON_REEXEC"] = "1"
            try:
                os.execv(want, [want, os.path.abspath(__file__)] + sys.argv[1:])
            except OSError as e:
                print(f"skipped: NCTMC_PYTHON={want} cannot be run: {e}")
                sys.exit(SKIP)


reexec_with_configured_python()
try:
    import numpy as np
    import safetensors
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file
except ImportError as e:
    print(f"skipped: {sys.executable} cannot import safetensors and numpy ({e}); "
          "pip install safetensors, or set NCTMC_PYTHON to an interpreter that can")
    sys.exit(SKIP)

passed = 0
failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}", file=sys.stderr)


def parse_dump(text):
    """meta and tensors of a write_checkpoint dump."""
    meta, tensors = {}, {}
    for line in text.splitlines():
        parts = line.split(" ")
        if parts[0] == "meta":
            unhex = lambda h: "" if h == "-" else bytes.fromhex(h).decode("utf-8")
            meta[unhex(parts[1])] = unhex(parts[2])
        elif parts[0] == "tensor":
            name, dtype, dims, values = parts[1], parts[2], parts[3], parts[4]
            shape = () if dims == "-" else tuple(int(d) for d in dims.split(","))
            bits = None if values == "-" else [int(v, 16) for v in values.split(",")]
            tensors[name] = (dtype, shape, bits)
    return meta, tensors


def run(exe, *args):
    return subprocess.run([exe, *args], capture_output=True, text=True)


def header_of(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    return data, n


def checksum_ok(data):
    """The checksum as docs/formats.md defines it: CRC-32 of the file with the
    8 digits of the "nctmc.checksum" value read as '0'."""
    (n,) = struct.unpack("<Q", data[:8])
    header = data[8:8 + n]
    key = b'"nctmc.checksum":"'
    at = header.find(key)
    if at < 0:
        return False
    start = 8 + at + len(key)
    digits = data[start:start + 8]
    zeroed = data[:start] + b"00000000" + data[start + 8:]
    return digits.decode() == format(zlib.crc32(zeroed) & 0xFFFFFFFF, "08x")


TRICKY = {
    "user.quote": 'say "hi"',
    "user.backslash": "C:\\path\\to\\file",
    "user.controls": "line1\nline2\ttab\r\x01\x1f end",
    "user.unicode": "café € 😀 中",
    "user.slash": "</script> / \\/",
    "user.empty": "",
    'user.kéy "quoted"': "key with escapes",
}


def check_c_written(exe, tmp):
    path = os.path.join(tmp, "c.safetensors")
    dump = os.path.join(tmp, "c.txt")
    r = run(exe, "write", path, dump)
    check(r.returncode == 0, f"write_checkpoint write: {r.stderr}")
    if r.returncode != 0:
        return None
    with open(dump) as f:
        meta, tensors = parse_dump(f.read())

    data, n = header_of(path)
    check(data[8:9] == b"{", "header starts with '{'")
    check((8 + n) % 64 == 0, "data section 64-byte aligned (docs/formats.md)")
    check(data[8:8 + n].rstrip(b" ").endswith(b"}"), "header padded with spaces")
    check(checksum_ok(data), "nctmc.checksum is the documented CRC-32")

    loaded = load_file(path)
    check(sorted(loaded) == sorted(tensors), "same tensor names")
    for name, (dtype, shape, bits) in tensors.items():
        arr = loaded.get(name)
        if arr is None:
            continue
        check(arr.dtype == np.float32, f"{name}: float32")
        check(arr.shape == shape, f"{name}: shape {arr.shape} vs {shape}")
        got = arr.reshape(-1).view(np.uint32).tolist()
        check(got == bits, f"{name}: values bit for bit")
    with safe_open(path, framework="numpy") as f:
        py_meta = f.metadata()
        check(sorted(f.keys()) == sorted(tensors), "safe_open sees the same tensors")
    check(py_meta == meta, "metadata identical in Python and C")
    for k, v in TRICKY.items():
        check(py_meta.get(k) == v, f"escaped metadata {k!r}")
    # a model with 0.3.0's defaults (log-SNR time input, noise-posterior
    # link) is format 2 and records both
    check(py_meta.get("nctmc.format") == "2", "format version")
    check(py_meta.get("nctmc.config.time_input") == "log_snr", "time input by name")
    check(py_meta.get("nctmc.config.exit_link") == "noise_posterior", "exit link by name")
    check(py_meta.get("nctmc.config.process") == "masked", "process by name")
    check(py_meta.get("nctmc.config.vocab_size") == "6", "vocab_size")
    check(py_meta.get("nctmc.tokenizer.kind") == "chars", "tokenizer kind")
    check(py_meta.get("nctmc.tokenizer.alphabet") == "20 21 74 e9 1f600",
          f"tokenizer alphabet {py_meta.get('nctmc.tokenizer.alphabet')!r}")
    return path, tensors, py_meta


def check_python_written(exe, tmp):
    path = os.path.join(tmp, "py.safetensors")
    rng = np.random.default_rng(5)
    arrays = {
        "scalar": np.array(3.5, dtype=np.float32),
        "vector": rng.standard_normal(7).astype(np.float32),
        "matrix": rng.standard_normal((3, 5)).astype(np.float32),
        "cube.é": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "four": rng.standard_normal((1, 2, 1, 3)).astype(np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "half": rng.standard_normal((2, 2)).astype(np.float16),
        "ints": np.arange(6, dtype=np.int64).reshape(2, 3),
        "bytes": np.arange(5, dtype=np.uint8),
    }
    metadata = {"note": "written by Python ✓", "quote": '"', "nl": "a\nb"}
    save_file(arrays, path, metadata=metadata)
    r = run(exe, "dump", path)
    check(r.returncode == 0, f"our reader reads Python's file: {r.stderr}")
    if r.returncode != 0:
        return
    meta, tensors = parse_dump(r.stdout)
    check(meta == metadata, f"metadata from Python: {meta}")
    check(sorted(tensors) == sorted(arrays), "tensor names from Python")
    dtypes = {np.float32: "F32", np.float16: "F16", np.int64: "I64", np.uint8: "U8"}
    for name, arr in arrays.items():
        if name not in tensors:
            continue
        dtype, shape, bits = tensors[name]
        check(dtype == dtypes[arr.dtype.type], f"{name}: dtype {dtype}")
        check(shape == arr.shape, f"{name}: shape {shape} vs {arr.shape}")
        if arr.dtype == np.float32:
            want = arr.reshape(-1).view(np.uint32).tolist()
            check((bits or []) == want, f"{name}: values")


def check_rewritten(exe, tmp, c_path, tensors, meta):
    """Python rewrites the checkpoint, with and without a fresh checksum."""
    arrays = load_file(c_path)
    for fresh in (True, False):
        path = os.path.join(tmp, f"rewritten-{fresh}.safetensors")
        m = dict(meta)
        if fresh:
            m["nctmc.checksum"] = "00000000"
        save_file(arrays, path, metadata=m)
        if fresh:
            with open(path, "rb") as f:
                data = bytearray(f.read())
            (n,) = struct.unpack("<Q", data[:8])
            key = b'"nctmc.checksum":"00000000"'
            at = bytes(data[8:8 + n]).find(key)
            start = 8 + at + len(key) - 9
            data[start:start + 8] = format(zlib.crc32(bytes(data)) & 0xFFFFFFFF, "08x").encode()
            with open(path, "wb") as f:
                f.write(data)
        r = run(exe, "load", path)
        if fresh:
            check(r.returncode == 0, f"rewritten with a fresh checksum loads: {r.stderr}")
            _, loaded = parse_dump(r.stdout)
            check(loaded == tensors, "the same weights after Python's rewrite")
            check("tokenizer 5" in r.stdout, "the tokenizer survives the rewrite")
        else:
            check(r.returncode != 0 and "checksum" in r.stderr,
                  f"a stale checksum is refused: {r.stderr.strip()}")


LINEAR = (".attn_qkv.weight", ".attn_out.weight", ".mlp.0.weight", ".mlp.2.weight")


def check_int8(exe, tmp):
    path = os.path.join(tmp, "int8.safetensors")
    dump = os.path.join(tmp, "int8.txt")
    r = run(exe, "write-int8", path, dump)
    check(r.returncode == 0, f"write_checkpoint write-int8: {r.stderr}")
    if r.returncode != 0:
        return
    with open(dump) as f:
        _, tensors = parse_dump(f.read())
    check(checksum_ok(header_of(path)[0]), "int8 file: nctmc.checksum")
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
        check(meta.get("nctmc.format") == "3", "int8 file is format 3")
        check(meta.get("nctmc.weights") == "int8", "int8 file records its weights")
        for name, (_, shape, bits) in tensors.items():
            linear = name == "output_layer.linear.weight" or (
                name.startswith("blocks.") and name.endswith(LINEAR))
            arr = f.get_tensor(name)
            check(arr.shape == shape, f"int8 file {name}: shape")
            if linear:
                scale = f.get_tensor(name + ".scale")
                check(arr.dtype == np.int8 and scale.dtype == np.float32,
                      f"{name}: I8 with an F32 scale")
                check(int(np.abs(arr.astype(np.int32)).max()) <= 127, f"{name}: in -127..127")
                check(bool((scale > 0).all()), f"{name}: scales > 0")
                arr = scale[:, None] * arr.astype(np.float32)
            else:
                check(arr.dtype == np.float32, f"{name}: F32")
            got = arr.astype(np.float32).reshape(-1).view(np.uint32).tolist()
            check(got == bits, f"{name}: the library's values bit for bit")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    exe = os.path.abspath(sys.argv[1])
    print(f"python {sys.executable}, safetensors {safetensors.__version__}, "
          f"numpy {np.__version__}")
    with tempfile.TemporaryDirectory(prefix="nctmc-st-") as tmp:
        got = check_c_written(exe, tmp)
        check_python_written(exe, tmp)
        if got:
            check_rewritten(exe, tmp, *got)
        check_int8(exe, tmp)
    print(f"safetensors_python: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
