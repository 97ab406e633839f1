"""Regression tests of the binding's memory safety and argument checks
(issue 34, section 3): each one reproduces a defect of 0.7.0's binding —
a buffer written past its end, labels read past the array, a value cast
without a check, Ctrl-C swallowed, a closed handle's ctypes error.

Environment: as test_binding.py (NCTMC_LIBRARY names the library to load).
"""
import ctypes
import io
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nctmc
from nctmc import _native as N

S_TOKENS = 6
SEQ_LEN = 8


@pytest.fixture(scope="module")
def ctx():
    return nctmc.Context(backend="cpu", threads=1)


@pytest.fixture(scope="module")
def model(ctx):
    """An untrained conditional model (3 classes): labels are read."""
    m = nctmc.Model.create(ctx, vocab_size=S_TOKENS, seq_len=SEQ_LEN, n_layers=1, d_model=16,
                           n_heads=2, cond_dim=8, n_classes=3, process="uniform", seed=1)
    m.tokenizer = nctmc.Tokenizer.chars("abcdef")
    return m


@pytest.fixture(scope="module")
def checkpoint(model, tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "m.safetensors"
    model.save(path)
    return path


# ------------------------------------------------------------ from_file_object
class _Greedy(io.BytesIO):
    """A file object whose read(n) returns more than n bytes."""

    def read(self, n=-1):
        return super().read(n) + b"\0" * 4096


def test_a_read_longer_than_asked_is_refused_not_copied(checkpoint):
    data = pathlib.Path(checkpoint).read_bytes()
    with pytest.raises(nctmc.Error, match="more than"):
        nctmc.Model.from_file_object(_Greedy(data), len(data))


def test_a_read_that_is_not_bytes_is_refused(checkpoint):
    class Text(io.BytesIO):
        def read(self, n=-1):
            return "x" * n
    data = pathlib.Path(checkpoint).read_bytes()
    with pytest.raises(nctmc.Error, match="bytes"):
        nctmc.Model.from_file_object(Text(data), len(data))


def test_from_file_object_size_is_checked(checkpoint):
    data = pathlib.Path(checkpoint).read_bytes()
    for size in (-1, 2**63, 1.5, "12"):
        with pytest.raises((TypeError, ValueError)):
            nctmc.Model.from_file_object(io.BytesIO(data), size)


# ------------------------------------------------------------ labels
def test_sample_labels_must_match_the_batch(model):
    s = model.sampler(max_batch=2)
    with pytest.raises(ValueError, match="labels"):
        s.sample(batch=2, steps=2, labels=[1])
    with pytest.raises(ValueError, match="labels"):
        s.sample(batch=1, steps=2, labels=[1, 2])


def test_a_labels_view_is_its_own_values(model):
    """labels=np.array([3,7])[:1] is one label; it sampled as [3, 7]."""
    s = model.sampler(max_batch=2)
    parent = np.array([2, 0], np.int32)
    with pytest.raises(ValueError, match="labels"):
        s.sample(batch=2, steps=2, seed=3, labels=parent[:1])
    strided = np.array([1, 9, 2, 9], np.int32)[::2]            # [1, 2], not contiguous
    a = s.sample(batch=2, steps=3, seed=3, labels=strided)
    b = s.sample(batch=2, steps=3, seed=3, labels=[1, 2])
    assert np.array_equal(a, b)


def test_forward_eval_step_and_write_check_labels(model, ctx, tmp_path):
    x = np.zeros((2, SEQ_LEN), np.int32)
    with pytest.raises(ValueError, match="labels"):
        model.forward(x, [0.5, 0.5], labels=[1])
    with pytest.raises(ValueError, match="labels"):
        model.eval(x, labels=np.array([1, 2, 0], np.int32)[:1], time_samples=1)
    trainer = nctmc.Trainer(model, batch_size=2, total_steps=4)
    with pytest.raises(ValueError, match="labels"):
        trainer.step(x, labels=[0])
    with pytest.raises(ValueError, match="labels"):
        nctmc.Dataset.write(tmp_path / "d.bin", np.zeros((4, SEQ_LEN), np.int32),
                            vocab_size=S_TOKENS, seq_len=SEQ_LEN, labels=[0, 1], n_classes=3,
                            ctx=ctx)
    with pytest.raises(ValueError, match="labels"):
        nctmc.Dataset.write(tmp_path / "d.bin", np.zeros(16, np.int32), vocab_size=S_TOKENS,
                            labels=[0, 1], n_classes=3, ctx=ctx)


# ------------------------------------------------------------ unsafe casts
def test_float_tokens_are_refused(ctx, tmp_path):
    with pytest.raises(TypeError, match="must be integers"):
        nctmc.Dataset.write(tmp_path / "f.bin", np.full((2, SEQ_LEN), 1.5), vocab_size=S_TOKENS,
                            seq_len=SEQ_LEN, ctx=ctx)
    assert not (tmp_path / "f.bin").exists()


def test_integers_out_of_int32_are_refused(ctx, model, tmp_path):
    with pytest.raises(ValueError, match="int32"):
        nctmc.Dataset.write(tmp_path / "o.bin", [2**32 + 3] * SEQ_LEN, vocab_size=S_TOKENS,
                            ctx=ctx)
    with pytest.raises(ValueError, match="int32"):
        nctmc.Dataset.write(tmp_path / "o.bin", np.array([2**32 + 3] * 4, np.int64),
                            vocab_size=S_TOKENS, ctx=ctx)
    with pytest.raises(ValueError):
        model.tokenizer.decode([2**32 + 3])
    with pytest.raises(ValueError):
        model.sampler(max_batch=1).sample(steps=2**32 + 3)


def test_negative_seed_is_refused(model):
    s = model.sampler(max_batch=1)
    with pytest.raises(ValueError, match="seed"):
        s.sample(steps=2, seed=-1)
    with pytest.raises(ValueError, match="seed"):
        nctmc.Trainer(model, batch_size=2, seed=-1)
    with pytest.raises(TypeError):
        s.sample(steps=2, seed=1.5)


def test_encode_takes_text_only(model):
    tok = model.tokenizer
    for bad in (5, 3.0, None, [1, 2]):
        with pytest.raises(TypeError):
            tok.encode(bad)
    assert np.array_equal(tok.encode("abc"), tok.encode(b"abc"))
    with pytest.raises(TypeError):
        nctmc.write_file("/nonexistent/x", 5)


def test_the_integers_check_fires_for_any_non_integer_dtype(model):
    tok = model.tokenizer
    for bad in (np.array([1.0, 2.0]), np.array(["a"]), np.array([True]), [None], [1.5]):
        with pytest.raises(TypeError, match="must be integers"):
            tok.decode(bad)


# ------------------------------------------------------------ closed handles
def test_a_closed_handle_raises_nctmc_error(model, ctx):
    s = model.sampler(max_batch=1)
    s.close()
    with pytest.raises(nctmc.Error, match="closed"):
        s.sample(steps=2)
    tok = nctmc.Tokenizer.bytes()
    tok.close()
    with pytest.raises(nctmc.Error, match="closed"):
        tok.encode("x")
    c = nctmc.Context(backend="cpu", threads=1)
    c.close()
    with pytest.raises(nctmc.Error, match="closed"):
        c.backend


# ------------------------------------------------------------ progress return values
def test_progress_returning_zero_stops_as_in_c(model):
    s = model.sampler(max_batch=1)
    with pytest.raises(nctmc.Cancelled):
        s.sample(steps=5, progress=lambda k, n, t: 0)
    seen = []
    s.sample(steps=5, progress=lambda k, n, t: seen.append(k))      # None: go on
    assert seen == [1, 2, 3, 4, 5]
    assert s.sample(steps=5, progress=lambda k, n, t: 1).shape == (1, SEQ_LEN)


def test_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", nctmc.__version__)
    here = pathlib.Path(__file__).resolve().parents[1]
    pyproject = here / "pyproject.toml"
    if pyproject.exists():  # in a checkout: the three places that name it agree
        assert 'version = "%s"' % nctmc.__version__ in pyproject.read_text()
        assert "version : '%s'" % nctmc.__version__ in (here / "meson.build").read_text()


# ------------------------------------------------------------ Ctrl-C
_CHILD = textwrap.dedent("""
    import os, signal, sys, threading, time
    import nctmc
    ctx = nctmc.Context(backend="cpu", threads=1)
    m = nctmc.Model.create(ctx, vocab_size=6, seq_len=128, n_layers=2, d_model=64, n_heads=2,
                           cond_dim=16, process="uniform", seed=1)
    s = m.sampler(max_batch=1)
    mode = sys.argv[1]
    started = threading.Event()
    def interrupt():
        started.wait()
        time.sleep(0.5)  # into the C call (any moment would do for a working binding)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=interrupt, daemon=True).start()
    progress = None
    if mode == "callback":
        def progress(k, n, t):
            started.set()
    else:
        started.set()  # the call below starts at once; the kill lands inside it
    try:
        # hours of work: only an interruption ends it within the test
        s.sample(steps=10**6, correction_steps=10**6, progress=progress)
        print("RESULT finished")
    except KeyboardInterrupt:
        print("RESULT KeyboardInterrupt")
    except nctmc.Cancelled:
        print("RESULT Cancelled")
""")


@pytest.mark.parametrize("mode", ["plain", "callback"])
def test_ctrl_c_interrupts_a_long_sample(mode, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    # the timeout only keeps a broken binding from hanging the suite: a
    # working one returns a moment after the signal
    r = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True,
                       env=env, timeout=600)
    assert "RESULT KeyboardInterrupt" in r.stdout, r.stdout + r.stderr
    assert "Exception ignored" not in r.stderr, r.stderr
