"""Hostile input at every entry point of the binding (property-based, with
hypothesis): wrong types, dtypes, shapes, views, huge and negative values.
Each call must either work or raise nctmc.Error, TypeError or ValueError —
never crash, never read or write outside a buffer. scripts/test.sh runs
this file under AddressSanitizer (an ASan build of libnctmc loaded with the
ASan runtime preloaded), where any such access is a report.

The number of examples is bounded (NCTMC_HYPOTHESIS_EXAMPLES, default 25
per test) and there are no deadlines: the run's length is the examples'
count, whatever the machine's speed.
"""
import io
import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import nctmc  # noqa: E402

ALLOWED = (nctmc.Error, TypeError, ValueError)
SETTINGS = settings(max_examples=int(os.environ.get("NCTMC_HYPOTHESIS_EXAMPLES", "25")),
                    deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))

S_TOKENS = 6
SEQ_LEN = 8
N_CLASSES = 3

# integers at and past every C type's edges, floats, and things that are no number
HUGE = [2**31 - 1, 2**31, 2**32 + 3, 2**63 - 1, 2**63, 2**64, 2**100]
scalars = st.one_of(
    st.integers(-3, 10),
    st.sampled_from(HUGE + [-v for v in HUGE] + [-1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([None, "", "x", b"\0", True, np.int64(2**40), np.uint64(2**64 - 1),
                     np.float32(1.5), [], [1], (1, 2), {}, object()]),
)


@st.composite
def arrays(draw):
    """Arrays of any dtype and shape, views (strided, sliced, transposed,
    offset) among them, and lists."""
    dtype = draw(st.sampled_from([np.int32, np.int64, np.uint64, np.int8, np.uint8, np.float32,
                                  np.float64, np.bool_, np.complex64, object, "U2"]))
    shape = draw(st.sampled_from([(0,), (1,), (3,), (2, 3), (2, SEQ_LEN), (1, SEQ_LEN),
                                  (4, SEQ_LEN), (2, 2, 2), (SEQ_LEN,), (16,)]))
    values = draw(st.sampled_from(["small", "edge", "zero"]))
    n = int(np.prod(shape))
    if values == "small":
        base = np.arange(n) % S_TOKENS
    elif values == "edge":
        base = np.array(draw(st.lists(st.sampled_from([-1, 0, S_TOKENS, 2**31 - 1, -2**31,
                                                       2**31, 2**33]),
                                      min_size=n, max_size=n)), dtype=object)
    else:
        base = np.zeros(n)
    try:
        a = np.array(base, dtype=object).astype(dtype).reshape(shape)
    except (OverflowError, ValueError, TypeError):
        a = np.zeros(shape, dtype=dtype)
    view = draw(st.sampled_from(["none", "stride", "slice", "transpose", "list"]))
    if view == "stride" and a.ndim >= 1:
        a = np.repeat(a, 2, axis=-1)[..., ::2]
    elif view == "slice" and a.shape[0] > 1:
        a = a[1:]
    elif view == "transpose":
        a = a.T
    elif view == "list":
        return a.tolist()
    return a


values = st.one_of(arrays(), scalars)


def attempt(fn, *args, **kwargs):
    """Calls fn; an allowed exception is a fine answer, anything else fails."""
    try:
        return fn(*args, **kwargs)
    except ALLOWED:
        return None


@pytest.fixture(scope="module")
def ctx():
    return nctmc.Context(backend="cpu", threads=1)


@pytest.fixture(scope="module")
def model(ctx):
    m = nctmc.Model.create(ctx, vocab_size=S_TOKENS, seq_len=SEQ_LEN, n_layers=1, d_model=16,
                           n_heads=2, cond_dim=8, n_classes=N_CLASSES, process="uniform",
                           seed=1)
    m.tokenizer = nctmc.Tokenizer.chars("abcdef")
    return m


@pytest.fixture(scope="module")
def sampler(model):
    return model.sampler(max_batch=4)


@pytest.fixture(scope="module")
def blob(model, tmp_path_factory):
    path = tmp_path_factory.mktemp("hostile") / "m.safetensors"
    model.save(path)
    return path.read_bytes()


@SETTINGS
@given(batch=st.one_of(st.integers(-1, 5), scalars), length=st.one_of(st.integers(-1, 9), scalars),
       steps=st.one_of(st.integers(1, 3), scalars), seed=scalars, labels=values,
       temperature=scalars, fixed=values, mask=values, other=scalars)
def test_sample(sampler, batch, length, steps, seed, labels, temperature, fixed, mask, other):
    def steps_ok(v):  # a valid-looking huge step count would only take long
        return v if not isinstance(v, int) or v < 10 else 3
    out = attempt(sampler.sample, batch=batch, length=length, steps=steps_ok(steps), seed=seed,
                  labels=labels, temperature=temperature)
    if out is not None:
        assert out.dtype == np.int32 and ((out >= 0) & (out < S_TOKENS)).all()
    attempt(sampler.sample, batch=2, steps=2, fixed_tokens=fixed, fixed_mask=mask)
    for key in ("first_sequence", "correction_steps", "cfg_scale", "t_max", "t_min",
                "correction_time", "correction_temperature", "method", "grid", "cfg_rule",
                "correction_mode"):
        attempt(sampler.sample, steps=2, **{key: steps_ok(other)})
    attempt(sampler.infill, fixed, mask, steps=2)


@SETTINGS
@given(text=st.one_of(st.text(max_size=20), st.binary(max_size=20), scalars),
       ranges=st.one_of(st.lists(st.tuples(scalars, scalars), max_size=3),
                        st.lists(st.tuples(st.integers(-2, 30), st.integers(-2, 30)),
                                 max_size=3), scalars),
       tokens=st.one_of(scalars, st.lists(scalars, max_size=3)), labels=values)
def test_infill_text(sampler, text, ranges, tokens, labels):
    attempt(sampler.infill_text, text, ranges, tokens=tokens, steps=2)
    attempt(sampler.infill_text, "abc", [(0, 1)], steps=2, labels=labels)


@SETTINGS
@given(tokens=values, times=values, labels=values, n=scalars)
def test_forward_and_eval(model, tokens, times, labels, n):
    attempt(model.forward, tokens, times, labels=labels)
    attempt(model.forward, np.zeros((2, SEQ_LEN), np.int32), [0.5, 0.5], labels=labels)
    attempt(model.eval, tokens, labels=labels, time_samples=1, batch_size=2)
    attempt(model.eval, np.zeros((2, SEQ_LEN), np.int32), labels=labels, time_samples=1,
            batch_size=2, seed=n)
    attempt(model.eval, np.zeros((2, SEQ_LEN), np.int32), time_samples=n if n != 2**31 - 1
            else 1, batch_size=2)


@SETTINGS
@given(text=st.one_of(st.text(max_size=20), st.binary(max_size=20), scalars, values),
       tokens=values, placeholder=st.one_of(st.text(max_size=4), scalars),
       width=scalars, vocab=scalars)
def test_tokenizer(model, text, tokens, placeholder, width, vocab):
    tok = model.tokenizer
    out = attempt(tok.encode, text)
    if out is not None:
        assert out.dtype == np.int32
    attempt(tok.decode, tokens)
    attempt(tok.set_mask_placeholder, placeholder)
    attempt(nctmc.Tokenizer.chars, text)
    attempt(nctmc.Tokenizer.image, width, 2, 2)
    bpe = attempt(nctmc.Tokenizer.bytes)
    attempt(bpe.pad_vocab, vocab)


@SETTINGS
@given(tokens=values, vocab=scalars, seq_len=scalars, labels=values, n_classes=scalars,
       first=scalars, count=scalars, index=scalars)
def test_dataset(ctx, tmp_path_factory, tokens, vocab, seq_len, labels, n_classes, first, count,
                 index):
    d = tmp_path_factory.mktemp("ds")
    attempt(nctmc.Dataset.write, d / "a.bin", tokens, vocab_size=vocab, seq_len=seq_len,
            labels=labels, n_classes=n_classes, ctx=ctx)
    attempt(nctmc.Dataset.write, d / "b.bin", np.zeros((4, SEQ_LEN), np.int32),
            vocab_size=S_TOKENS, seq_len=SEQ_LEN, labels=labels, n_classes=N_CLASSES, ctx=ctx)
    nctmc.Dataset.write(d / "c.bin", np.zeros((4, SEQ_LEN), np.int32), vocab_size=S_TOKENS,
                        seq_len=SEQ_LEN, labels=[0, 1, 2, 0], n_classes=N_CLASSES, ctx=ctx)
    ds = nctmc.Dataset.open(d / "c.bin", ctx=ctx)
    attempt(ds.read, first, count)
    attempt(ds.label, index)
    w = attempt(nctmc.DatasetWriter, d / "w.bin", vocab, seq_len, ctx=ctx)
    w = w or nctmc.DatasetWriter(d / "w.bin", S_TOKENS, ctx=ctx)
    attempt(w.append, tokens)
    attempt(w.commit)
    w.close()
    attempt(nctmc.Dataset.open, tokens, ctx=ctx)
    attempt(nctmc.write_file, d / "f.bin", tokens, ctx=ctx)


@SETTINGS
@given(tokens=values, labels=values, key=st.sampled_from(
    ["batch_size", "seq_len", "learning_rate", "warmup_steps", "total_steps", "seed",
     "ema_decay", "grad_clip", "time_sampling", "label_dropout", "no_such_key"]),
    value=scalars)
def test_trainer(model, tokens, labels, key, value):
    trainer = attempt(nctmc.Trainer, model, **{"batch_size": 2, key: value})
    if trainer is None or trainer.params["batch_size"] * trainer.seq_len > 64:
        trainer = nctmc.Trainer(model, batch_size=2)
    attempt(trainer.step, tokens, labels=labels)
    attempt(trainer.step, np.zeros((2, SEQ_LEN), np.int32), labels=labels)


@SETTINGS
@given(key=st.sampled_from(["vocab_size", "seq_len", "n_layers", "d_model", "n_heads",
                            "cond_dim", "n_classes", "process", "schedule", "seed",
                            "mixture_uniform", "time_input", "exit_link", "nope"]),
       value=scalars, backend=st.one_of(st.sampled_from(["cpu", "gpu", "cpu\0x"]), scalars),
       threads=scalars, preset=st.one_of(st.text(max_size=6), scalars))
def test_create(ctx, key, value, backend, threads, preset):
    config = dict(vocab_size=S_TOKENS, seq_len=SEQ_LEN, n_layers=1, d_model=16, n_heads=2,
                  cond_dim=8)
    # a size that is valid but enormous would only allocate for long
    if key in config and isinstance(value, int) and value > 64:
        value = -value
    config[key] = value
    attempt(nctmc.Model.create, ctx, **config)
    attempt(nctmc.Context, backend=backend, threads=threads if threads != 0 else 1)
    attempt(nctmc.Model.create, ctx, preset=preset, **dict(config, vocab_size=S_TOKENS))


class _Hostile(io.BytesIO):
    """A file object whose read returns what the test chose."""

    def __init__(self, data, mode):
        super().__init__(data)
        self.mode = mode

    def read(self, n=-1):
        chunk = super().read(n)
        if self.mode == "long":
            return chunk + b"\xff" * 100
        if self.mode == "short":
            return chunk[: max(0, len(chunk) - 1)]
        if self.mode == "str":
            return chunk.decode("latin-1")
        if self.mode == "none":
            return None
        if self.mode == "array":
            return np.frombuffer(chunk + b"\0" * (len(chunk) % 4), np.int32)
        return chunk


@SETTINGS
@given(mode=st.sampled_from(["ok", "long", "short", "str", "none", "array"]),
       size=st.one_of(st.just("exact"), scalars), cut=st.integers(0, 200),
       name=st.one_of(st.text(max_size=10), scalars), tensor=values)
def test_loading_and_tensors(ctx, model, blob, mode, size, cut, name, tensor):
    data = blob if cut == 0 else blob[:-cut]
    m = attempt(nctmc.Model.from_file_object, _Hostile(data, mode),
                len(data) if size == "exact" else size, ctx=ctx)
    if m is not None and mode == "ok" and cut == 0:
        assert m.n_params == model.n_params
    attempt(nctmc.Model.from_bytes, data if mode == "ok" else size, ctx=ctx)
    attempt(model.read_tensor, name)
    m2 = nctmc.Model.from_bytes(blob, ctx=ctx)
    attempt(m2.write_tensor, name, tensor)
    attempt(m2.write_tensor, "blocks.0.attn_qkv.weight", tensor)
    attempt(m2.convert, size)
