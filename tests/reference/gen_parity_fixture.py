"""Writes the PyTorch-parity fixtures that tests/test_parity.c checks the C
library against (llm.c's method).

For each named configuration it draws every weight at random (fixed seed;
the normally zero-initialised adaLN, output and rate tensors too, so every
gradient is non-trivial), a batch (x0, t, x_t ~ q_{t|0}, labels), and computes
in float64 with nctmc_reference.py the model's outputs, the per-position and
mean L_cond loss, and the gradient of the mean loss for every tensor.

    /usr/bin/python3 gen_parity_fixture.py --config NAME --out FILE
    /usr/bin/python3 gen_parity_fixture.py --list
    /usr/bin/python3 gen_parity_fixture.py --check-float32 [NAME ...]

--check-float32 evaluates the same fixtures with the reference in float32 and
prints the error metric the C test uses: a yardstick for how much a correct
float32 implementation deviates from the float64 truth.

Fixture format (all little-endian), version 1:

    char     magic[8]      "NCTMCPAR"
    uint32   version       1
    uint32   n_ints        16, then int32 ints[n_ints]:
                             0 vocab_size S      1 vocab_pad_multiple  2 seq_len
                             3 n_layers          4 d_model             5 n_heads
                             6 cond_dim          7 n_classes           8 process (0 uniform,
                             1 masked, 2 mixture)                      9 schedule (0 linear,
                             1 cosine, 2 loglinear)                   10 batch B
                            11 length Lb (<= seq_len, the batch's)    12 has_labels
                            13 V (padded vocabulary; a consistency check)
                            14 time_input (0 t, 1 log_snr)            15 exit_link (0 sigma,
                               1 noise_posterior, 2 denoiser)
    uint32   n_floats      2, then float32 floats[n_floats]:
                             0 mixture_uniform p_u   1 schedule_eps
    uint32   n_arrays, then n_arrays records:
        uint32 name_len    1 .. 255
        char   name[name_len]          (no terminator)
        uint32 dtype       1 = float32, 2 = int32
        uint32 n_dims      0 .. 4
        int64  dims[n_dims]            (each >= 0)
        data               prod(dims) elements of 4 bytes
    end of file (no trailing bytes)

Arrays, in this order:
    input.x_t [B, Lb] i32, input.x_0 [B, Lb] i32, input.times [B] f32,
    input.labels [B] i32 (only when has_labels; n_classes is the null label),
    param.<name> f32 for every tensor in the model's order,
    output.logits [B, Lb, V], output.rate_h [B, Lb] (the denoiser link's outputs
    for that link), output.log_rate [B, Lb]
    (-inf where the rate is exactly 0), output.jump_logprobs [B, Lb, S] (-inf at
    x_t), output.loss [B, Lb], output.mean_loss [1]  (all f32),
    grad.<name> f32: d mean_loss / d param, same order and shapes as param.*.
Every input value is float32-representable and the float64 computation uses
exactly those values, so the float32 arrays differ from the truth only by the
final rounding.
"""

import argparse
import os
import struct
import sys

import numpy as np
import torch

sys.dont_write_bytecode = True   # keep the source tree clean when meson runs this
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nctmc_reference as ref  # noqa: E402

MAGIC = b"NCTMCPAR"
VERSION = 1
DT_F32, DT_I32 = 1, 2

# name: (Config kwargs, batch, batch length, labels: "given" / "none" / None, seed)
CONFIGS = {
    # the paper's setting
    "uniform_linear": (dict(S=11, L=8, n_layers=2, d=32, H=4, c=16, process="uniform",
                            schedule="linear"), 3, 8, None, 1),
    # MDLM: exact exit rate, rate head unused
    "masked_cosine": (dict(S=13, L=6, n_layers=2, d=32, H=4, c=16, process="masked",
                           schedule="cosine"), 3, 6, None, 2),
    # GIDD-like mixture, class-conditional with labels (one of them the null
    # label), vocabulary padded 13 -> 16
    "mixture_loglinear_labels": (dict(S=13, L=7, n_layers=2, d=32, H=4, c=16, n_classes=3,
                                      vocab_pad_multiple=8, process="mixture",
                                      schedule="loglinear", mixture_uniform=0.3,
                                      schedule_eps=1e-3), 3, 7, "given", 3),
    # class-conditional model evaluated without labels (null label), padded
    # vocabulary, a batch shorter than seq_len
    "uniform_cosine_nolabels": (dict(S=10, L=8, n_layers=2, d=32, H=4, c=16, n_classes=2,
                                     vocab_pad_multiple=4, process="uniform",
                                     schedule="cosine"), 2, 7, "none", 4),
    # 0.3.0's defaults: log-SNR time input and the noise-posterior exit link
    "uniform_linear_logsnr_noise": (dict(S=11, L=8, n_layers=2, d=32, H=4, c=16,
                                         process="uniform", schedule="linear",
                                         time_input="log_snr",
                                         exit_link="noise_posterior"), 3, 8, None, 5),
    # the mixture under the noise-posterior link: learned at data tokens,
    # exact at the mask
    "mixture_cosine_noise_labels": (dict(S=9, L=6, n_layers=2, d=32, H=4, c=16, n_classes=2,
                                         process="mixture", schedule="cosine",
                                         mixture_uniform=0.4, time_input="log_snr",
                                         exit_link="noise_posterior"), 3, 6, "given", 6),
    # 0.7.0's denoiser link: rates from the logits alone, rate head unused
    "uniform_linear_logsnr_denoiser": (dict(S=11, L=8, n_layers=2, d=32, H=4, c=16,
                                            process="uniform", schedule="linear",
                                            time_input="log_snr",
                                            exit_link="denoiser"), 3, 8, None, 7),
    # ... and on the mixture, padded, with labels: the mask column is a jump
    # target but never an x0
    "mixture_cosine_denoiser_labels": (dict(S=9, L=6, n_layers=2, d=32, H=4, c=16, n_classes=2,
                                            vocab_pad_multiple=4, process="mixture",
                                            schedule="cosine", mixture_uniform=0.4,
                                            time_input="log_snr",
                                            exit_link="denoiser"), 3, 6, "given", 8),
}

# The metric of tests/test_parity.c: per quantity, the largest
# |got - want| / max(|want|, floor) with floor = max(REL_FLOOR * max|want|, ABS_FLOOR).
TOLERANCE = 1e-4
REL_FLOOR = 5e-2
ABS_FLOOR = 1e-6


def f32(x):
    return float(np.float32(x))


def make_case(name):
    kw, B, Lb, labels_mode, seed = CONFIGS[name]
    kw = dict(kw)
    for k in ("mixture_uniform", "schedule_eps"):
        if k in kw:
            kw[k] = f32(kw[k])   # the C config holds these as float
    cfg = ref.Config(**kw)
    g = torch.Generator().manual_seed(1000 + seed)
    params = ref.random_params(cfg, g)
    x_t, x0, t = ref.draw_batch(cfg, B, Lb, g)
    labels = None
    if labels_mode == "given":
        # distinct real classes and, last, the null label n_classes
        real = torch.randperm(cfg.n_classes, generator=g)[:B - 1]
        labels = torch.cat([real, torch.tensor([cfg.n_classes])])
    return cfg, (B, Lb, labels_mode == "given"), params, x_t, x0, t, labels


def compute(name, dtype=torch.float64):
    cfg, shape, params, x_t, x0, t, labels = make_case(name)
    p = {k: v.to(dtype) for k, v in params.items()}
    out, grads = ref.loss_and_grads(p, cfg, x_t, x0, t.to(dtype), labels)
    return cfg, shape, params, x_t, x0, t, labels, out, grads


def _record(f, name, dtype, arr):
    arr = np.ascontiguousarray(arr, dtype="<f4" if dtype == DT_F32 else "<i4")
    nb = name.encode()
    assert 1 <= len(nb) <= 255 and arr.ndim <= 4
    f.write(struct.pack("<I", len(nb)) + nb)
    f.write(struct.pack("<II", dtype, arr.ndim))
    f.write(struct.pack("<%dq" % arr.ndim, *arr.shape))
    f.write(arr.tobytes())


def write_fixture(name, path):
    cfg, (B, Lb, has_labels), params, x_t, x0, t, labels, out, grads = compute(name)
    ints = [cfg.S, cfg.vocab_pad_multiple, cfg.L, cfg.n_layers, cfg.d, cfg.H, cfg.c,
            cfg.n_classes, ref.PROCESSES.index(cfg.process),
            ref.SCHEDULES.index(cfg.schedule), B, Lb, int(has_labels), cfg.V,
            ref.TIME_INPUTS.index(cfg.time_input), ref.EXIT_LINKS.index(cfg.exit_link)]
    floats = [cfg.mixture_uniform, cfg.schedule_eps]
    arrays = [("input.x_t", DT_I32, x_t.numpy()), ("input.x_0", DT_I32, x0.numpy()),
              ("input.times", DT_F32, t.numpy())]
    if has_labels:
        arrays.append(("input.labels", DT_I32, labels.numpy()))
    arrays += [("param." + k, DT_F32, v.numpy()) for k, v in params.items()]
    for k in ("logits", "rate_h", "log_rate", "jump_logprobs", "loss"):
        arrays.append(("output." + k, DT_F32, out[k].numpy()))
    arrays.append(("output.mean_loss", DT_F32, out["mean_loss"].reshape(1).numpy()))
    arrays += [("grad." + k, DT_F32, v.numpy()) for k, v in grads.items()]

    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(MAGIC + struct.pack("<I", VERSION))
        f.write(struct.pack("<I%di" % len(ints), len(ints), *ints))
        f.write(struct.pack("<I%df" % len(floats), len(floats), *floats))
        f.write(struct.pack("<I", len(arrays)))
        for a in arrays:
            _record(f, *a)
    os.replace(tmp, path)


def read_fixture(path):
    """(ints, floats, {name: array}) -- the format above, for round-trip checks."""
    data = open(path, "rb").read()
    assert data[:8] == MAGIC
    pos = 8
    (version,) = struct.unpack_from("<I", data, pos); pos += 4
    assert version == VERSION
    (ni,) = struct.unpack_from("<I", data, pos); pos += 4
    ints = struct.unpack_from("<%di" % ni, data, pos); pos += 4 * ni
    (nf,) = struct.unpack_from("<I", data, pos); pos += 4
    floats = struct.unpack_from("<%df" % nf, data, pos); pos += 4 * nf
    (na,) = struct.unpack_from("<I", data, pos); pos += 4
    arrays = {}
    for _ in range(na):
        (ln,) = struct.unpack_from("<I", data, pos); pos += 4
        name = data[pos:pos + ln].decode(); pos += ln
        dt, nd = struct.unpack_from("<II", data, pos); pos += 8
        dims = struct.unpack_from("<%dq" % nd, data, pos); pos += 8 * nd
        n = int(np.prod(dims)) if nd else 1
        arrays[name] = np.frombuffer(data, "<f4" if dt == DT_F32 else "<i4", n,
                                     pos).reshape(dims)
        pos += 4 * n
    assert pos == len(data)
    return ints, floats, arrays


def max_rel_err(got, want):
    """The C test's metric; -inf must match -inf exactly (else the error is inf)."""
    got = np.asarray(got, np.float64).ravel()
    want = np.asarray(want, np.float64).ravel()
    ninf = np.isneginf(want)
    if (np.isneginf(got) != ninf).any() or not np.isfinite(got[~ninf]).all():
        return float("inf")
    got, want = got[~ninf], want[~ninf]
    if want.size == 0:
        return 0.0
    floor = max(REL_FLOOR * np.abs(want).max(), ABS_FLOOR)
    return float((np.abs(got - want) / np.maximum(np.abs(want), floor)).max())


def check_float32(names):
    """How far the float32 reference is from the float64 fixture, in the C
    test's metric, plus what the metric would say with a smaller floor."""
    worst = 0.0
    for name in names:
        _, _, _, _, _, _, _, out64, g64 = compute(name, torch.float64)
        _, _, _, _, _, _, _, out32, g32 = compute(name, torch.float32)
        rows = [(k, out32[k], out64[k]) for k in
                ("logits", "rate_h", "log_rate", "jump_logprobs", "loss", "mean_loss")]
        rows += [("grad." + k, g32[k], g64[k]) for k in g64]
        print("== %s (float32 torch vs float64 torch)" % name)
        for k, a, b in rows:
            a32 = a.numpy().astype(np.float32)
            b32 = b.numpy().astype(np.float32)   # as stored in the fixture
            e = max_rel_err(a32, b32)
            worst = max(worst, e)
            print("  %-45s %.2e" % (k, e))
    print("worst %.2e (tolerance %.0e)" % (worst, TOLERANCE))
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS))
    ap.add_argument("--out")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--check-float32", nargs="*", metavar="NAME")
    args = ap.parse_args()
    torch.set_num_threads(1)   # results must not depend on the build machine
    if args.list:
        print("\n".join(CONFIGS))
    elif args.check_float32 is not None:
        worst = check_float32(args.check_float32 or list(CONFIGS))
        sys.exit(0 if worst <= TOLERANCE else 1)
    else:
        if not args.config or not args.out:
            ap.error("--config and --out are required")
        write_fixture(args.config, args.out)
        ints, floats, arrays = read_fixture(args.out)   # round trip
        assert ints[0] == CONFIGS[args.config][0]["S"]


if __name__ == "__main__":
    main()
