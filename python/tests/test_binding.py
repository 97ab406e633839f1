"""Tests of the Python binding against the installed C library.

Environment: NCTMC_LIBRARY (the library to load), NCTMC_INCLUDE (the
directory holding the matching nctmc.h) and CC (a C compiler, default cc);
the tests that compile C programs — the struct layouts and the C side of the
same-seed comparison — need the last two.
"""
import ctypes
import gc
import io
import os
import subprocess
import threading
import zipfile

import numpy as np
import pytest

import nctmc
from nctmc import _native as N

S_TOKENS = 6
SEQ_LEN = 12


def _compile(tmp_path, name, source):
    include = os.environ.get("NCTMC_INCLUDE")
    library = os.environ.get("NCTMC_LIBRARY")
    if not include or not library:
        pytest.fail("NCTMC_INCLUDE and NCTMC_LIBRARY must name the installed header and library")
    src = tmp_path / (name + ".c")
    src.write_text(source)
    exe = tmp_path / name
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", include, str(src), "-o", str(exe),
                    library, "-Wl,-rpath," + os.path.dirname(library)], check=True)
    return exe


def test_struct_layouts_match_the_header(tmp_path):
    """Every ctypes struct has the C struct's size and every field its offset."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <nctmc.h>",
             "int main(void) {"]
    for cname, struct in N.STRUCTS.items():
        lines.append('printf("%s %%zu\\n", sizeof(%s));' % (cname, cname))
        for field, _ in struct._fields_:
            lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));'
                         % (cname, field, cname, field))
    lines += ["return 0;", "}"]
    exe = _compile(tmp_path, "layouts", "\n".join(lines))
    c_values = dict(line.split() for line in subprocess.run(
        [str(exe)], check=True, capture_output=True, text=True).stdout.splitlines())
    for cname, struct in N.STRUCTS.items():
        assert int(c_values[cname]) == ctypes.sizeof(struct), cname
        for field, _ in struct._fields_:
            assert int(c_values[cname + "." + field]) == getattr(struct, field).offset, \
                cname + "." + field


def test_version():
    assert nctmc.library_version().count(".") == 2
    assert N.nctmc_version_number() >= N.MIN_VERSION


def test_an_older_library_is_refused_before_its_functions_are_looked_up():
    class Old:  # stands for a 0.4.0 library, which lacks activation_recompute
        pass
    old = Old()
    old.nctmc_version_number = lambda: 400
    old.nctmc_version = lambda: b"0.4.0"
    with pytest.raises(ImportError, match=r"version 0\.4\.0; this binding needs 0\.5\.0"):
        N._check_version(old)
    old.nctmc_version_number = lambda: 500
    N._check_version(old)


def test_context_creation_error_is_readable():
    with pytest.raises(nctmc.Error) as e:
        nctmc.Context(backend="no-such-backend")
    assert e.value.status == 4  # NCTMC_ERR_NOT_FOUND
    assert "no-such-backend" in e.value.message


def _markov_data(n_seq, seed):
    """Sequences of a deterministic-ish chain: token k+1 follows k mostly."""
    rng = np.random.default_rng(seed)
    x = np.empty((n_seq, SEQ_LEN), np.int32)
    x[:, 0] = rng.integers(0, S_TOKENS, n_seq)
    for i in range(1, SEQ_LEN):
        step = np.where(rng.random(n_seq) < 0.9, 1, 2)
        x[:, i] = (x[:, i - 1] + step) % S_TOKENS
    return x


@pytest.fixture(scope="module")
def ctx():
    return nctmc.Context(backend="cpu", threads=1)


def _tiny_model(ctx, process="uniform", seed=3):
    vocab = S_TOKENS + (1 if process != "uniform" else 0)
    return nctmc.Model.create(ctx, vocab_size=vocab, seq_len=SEQ_LEN, n_layers=1, d_model=32,
                              n_heads=2, cond_dim=16, process=process, seed=seed)


@pytest.fixture(scope="module")
def trained(ctx, tmp_path_factory):
    """A tiny model trained from Python, saved; returns its path."""
    d = tmp_path_factory.mktemp("trained")
    data = _markov_data(256, 0)
    nctmc.Dataset.write(d / "train.bin", data, vocab_size=S_TOKENS, seq_len=SEQ_LEN, ctx=ctx)
    model = _tiny_model(ctx)
    tok = nctmc.Tokenizer.chars("abcdef")
    model.tokenizer = tok
    trainer = nctmc.Trainer(model, batch_size=16, learning_rate=3e-3, warmup_steps=10,
                            total_steps=300, ema_decay=0.0, seed=1)
    losses = []
    trainer.train(d / "train.bin", 300, progress=True, callback=lambda s: losses.append(s["loss"]))
    path = d / "model.safetensors"
    model.save(path)
    return {"path": path, "losses": losses, "data": data}


def test_training_from_python_learns_the_data(ctx, trained):
    """Held-out NELBO of the trained model well below the untrained one's."""
    assert len(trained["losses"]) == 300
    held_out = _markov_data(64, 123)
    fresh = _tiny_model(ctx).eval(held_out, time_samples=8)["nelbo_bits_per_token"]
    learned = nctmc.Model.load(trained["path"], ctx).eval(held_out, time_samples=8)
    assert learned["nelbo_bits_per_token"] < 0.8 * fresh


def test_progress_bar_is_shown(ctx, tmp_path, capsys):
    data = _markov_data(32, 1)
    nctmc.Dataset.write(tmp_path / "d.bin", data, vocab_size=S_TOKENS, seq_len=SEQ_LEN, ctx=ctx)
    trainer = nctmc.Trainer(_tiny_model(ctx), batch_size=4, ema_decay=0.0)
    stats = trainer.train(tmp_path / "d.bin", 3)
    err = capsys.readouterr().err
    assert "3/3" in err and "loss" in err
    assert stats["step"] == 3 and trainer.state["step"] == 3


def test_presets_set_defaults_that_keywords_override(ctx):
    names = [p["name"] for p in nctmc.presets()]
    assert names == ["paper", "cpu-small"]
    assert {p["name"]: p["backend"] for p in nctmc.presets()} == {"paper": "cuda-bf16",
                                                                  "cpu-small": "cpu"}
    model = nctmc.Model.create(ctx, preset="cpu-small", vocab_size=S_TOKENS, seq_len=SEQ_LEN,
                               n_layers=1)
    config = model.config
    assert config["n_layers"] == 1 and config["d_model"] == 128 and config["cond_dim"] == 64
    trainer = nctmc.Trainer(model, preset="cpu-small", batch_size=4, time_sampling="logit")
    p = N.new(N.TrainerParams)
    assert N.nctmc_trainer_get_params(trainer, ctypes.byref(p)) == 0
    assert (p.batch_size, p.learning_rate, p.ema_decay, p.time_sampling) == \
        (4, pytest.approx(2e-3), pytest.approx(0.99), 1)
    tokens = _markov_data(4, 2)
    assert np.isfinite(trainer.step(tokens)["loss"])
    with pytest.raises(nctmc.Error) as e:
        nctmc.Model.create(ctx, preset="huge")
    assert e.value.status == 4 and "cpu-small" in e.value.message
    with pytest.raises(ValueError):
        nctmc.Trainer(model, time_sampling="gamma")


def test_getters(ctx, trained):
    m = nctmc.Model.load(trained["path"], ctx)
    assert (m.seq_len, m.vocab_size, m.n_classes, m.process, m.mask_token) == \
        (SEQ_LEN, S_TOKENS, 0, "uniform", None)
    masked = _tiny_model(ctx, "masked")
    assert masked.mask_token == S_TOKENS and masked.vocab_size == S_TOKENS + 1
    assert m.config["d_model"] == 32


def _c_samples(tmp_path, path, batch, steps, seed, method):
    src = r"""
#include <stdio.h>
#include <stdlib.h>
#include <nctmc.h>
int main(int argc, char **argv) {
    nctmc_context_params cp; nctmc_context_params_init(&cp);
    cp.backend = "cpu"; cp.n_threads = 1;
    nctmc_context *ctx; nctmc_model *m; nctmc_sampler *s;
    if (nctmc_context_create(&cp, &ctx) || nctmc_model_load(ctx, argv[1], &m)) return 1;
    nctmc_sampler_params sp; nctmc_sampler_params_init(&sp);
    sp.max_batch = atoi(argv[2]);
    if (nctmc_sampler_create(m, &sp, &s)) return 1;
    int32_t len = nctmc_model_seq_len(m), n = sp.max_batch * len;
    int32_t *out = malloc(sizeof *out * (size_t)n);
    nctmc_sample_params p; nctmc_sample_params_init(&p);
    p.batch = sp.max_batch; p.n_steps = atoi(argv[3]);
    p.seed = strtoull(argv[4], NULL, 10); p.method = atoi(argv[5]); p.tokens_out = out;
    if (nctmc_sample(s, &p)) { fprintf(stderr, "%s\n", nctmc_sampler_last_error(s)); return 1; }
    for (int32_t i = 0; i < n; i++) printf("%d\n", out[i]);
    nctmc_sampler_free(s); nctmc_model_free(m); nctmc_context_free(ctx); free(out);
    return 0;
}
"""
    exe = _compile(tmp_path, "c_sample", src)
    out = subprocess.run([str(exe), str(path), str(batch), str(steps), str(seed), str(method)],
                         check=True, capture_output=True, text=True).stdout
    return np.array(out.split(), dtype=np.int32).reshape(batch, -1)


@pytest.mark.parametrize("method", ["tau", "euler", "posterior"])
def test_same_seed_same_samples_as_the_c_api(ctx, trained, tmp_path, method):
    m = nctmc.Model.load(trained["path"], ctx)
    py = m.sampler(max_batch=4).sample(batch=4, steps=16, seed=77, method=method)
    c = _c_samples(tmp_path, trained["path"], 4, 16, 77,
                   nctmc._sampler.METHODS[method])
    assert np.array_equal(py, c)
    other = m.sampler(max_batch=4).sample(batch=4, steps=16, seed=78, method=method)
    assert not np.array_equal(py, other)


def test_guidance_and_correction_settings(ctx, trained):
    s = nctmc.Model.load(trained["path"], ctx).sampler(4)
    kw = dict(batch=4, steps=8, seed=3, correction_steps=12, correction_temperature=1.0)
    default = s.sample(**kw)
    assert np.array_equal(default, s.sample(correction_mode="greedy", **kw))
    gibbs = s.sample(correction_mode="gibbs", **kw)
    assert not np.array_equal(default, gibbs)
    assert np.array_equal(gibbs, s.sample(correction_mode=1, **kw))
    with pytest.raises(ValueError):
        s.sample(correction_mode="metropolis", **kw)
    with pytest.raises(ValueError):
        s.sample(cfg_rule="log-linear", **kw)
    # guidance needs classes: the names reach the library as its values
    m = nctmc.Model.create(ctx, vocab_size=S_TOKENS, seq_len=SEQ_LEN, n_layers=1, d_model=32,
                           n_heads=2, cond_dim=16, n_classes=3, seed=5)
    cs = m.sampler(4)
    g = dict(batch=4, steps=16, seed=2, labels=[0, 1, 2, 0], cfg_scale=4.0)
    rates, sep = cs.sample(cfg_rule="rates", **g), cs.sample(cfg_rule="separate", **g)
    assert np.array_equal(sep, cs.sample(**g))  # the default rule
    assert np.array_equal(rates, cs.sample(cfg_rule=1, **g))
    assert np.array_equal(cs.sample(cfg_rule="rates", **dict(g, cfg_scale=1.0)),
                          cs.sample(cfg_rule="separate", **dict(g, cfg_scale=1.0)))


def test_load_from_bytes_and_from_an_archive(ctx, trained, tmp_path):
    data = trained["path"].read_bytes()
    ref = nctmc.Model.load(trained["path"], ctx).sampler(2).sample(batch=2, steps=8, seed=5)
    mem = nctmc.Model.from_bytes(data, ctx).sampler(2).sample(batch=2, steps=8, seed=5)
    assert np.array_equal(ref, mem)
    zpath = tmp_path / "assets.zip"
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_STORED) as z:
        z.writestr("models/tiny.safetensors", data)
    with zipfile.ZipFile(zpath) as z, z.open("models/tiny.safetensors") as f:
        size = z.getinfo("models/tiny.safetensors").file_size
        arc = nctmc.Model.from_file_object(f, size, ctx).sampler(2).sample(batch=2, steps=8,
                                                                          seed=5)
    assert np.array_equal(ref, arc)
    with pytest.raises(nctmc.Error) as e:
        nctmc.Model.from_bytes(data[:-100], ctx)
    assert e.value.status in (6, 7)


def test_mapped_lazy_and_copied_loads_sample_alike(ctx, trained):
    models = {how: nctmc.Model.load(trained["path"], ctx, mapping=how)
              for how in ("auto", "lazy", "copy")}
    assert models["auto"].mapped and models["lazy"].mapped and not models["copy"].mapped
    draws = [m.sampler(2).sample(batch=2, steps=8, seed=5) for m in models.values()]
    assert np.array_equal(draws[0], draws[1]) and np.array_equal(draws[0], draws[2])
    x = trained["data"][:3]
    outs = [m.forward(x, [0.2, 0.5, 0.9]) for m in models.values()]
    for rate, jump in outs[1:]:  # bit for bit: the same weights, read in place
        assert np.array_equal(rate, outs[0][0]) and np.array_equal(jump, outs[0][1])
    # writing the weights (a trainer) copies them out of the map
    nctmc.Trainer(models["auto"], batch_size=2)
    assert not models["auto"].mapped
    assert np.array_equal(models["auto"].forward(x, [0.2, 0.5, 0.9])[1], outs[0][1])
    with pytest.raises(ValueError):
        nctmc.Model.load(trained["path"], ctx, mapping="sometimes")


def test_progress_and_cancel_by_callback(ctx, trained):
    m = nctmc.Model.load(trained["path"], ctx)
    s = m.sampler(max_batch=2)
    seen = []
    s.sample(batch=2, steps=10, seed=1, progress=lambda k, n, t: seen.append((k, n, t.shape)))
    assert [k for k, _, _ in seen] == list(range(1, 11))
    assert all(n == 10 and shape == (2, SEQ_LEN) for _, n, shape in seen)
    with pytest.raises(nctmc.Cancelled) as e:
        s.sample(batch=2, steps=10, seed=1, progress=lambda k, n, t: k < 3)
    assert e.value.tokens.shape == (2, SEQ_LEN)
    assert ((e.value.tokens >= 0) & (e.value.tokens < S_TOKENS)).all()


def test_an_exception_in_the_callback_stops_sampling_and_propagates(ctx, trained):
    s = nctmc.Model.load(trained["path"], ctx).sampler(1)

    def boom(k, n, t):
        raise KeyError("from the callback")
    with pytest.raises(KeyError):
        s.sample(steps=10, progress=boom)


def test_cancel_from_another_thread(ctx, trained):
    m = nctmc.Model.load(trained["path"], ctx)
    s = m.sampler(max_batch=1)
    started = threading.Event()
    release = threading.Event()
    result = {}

    def progress(k, n, t):
        started.set()
        release.wait(5)  # hold the sampler inside step 1 until cancel() was called
        return True

    def run():
        try:
            s.sample(steps=1000, seed=2, progress=progress)
            result["status"] = "finished"
        except nctmc.Cancelled as e:
            result["status"] = "cancelled"
            result["tokens"] = e.tokens

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(30)
    s.cancel()
    release.set()
    t.join(60)
    assert result.get("status") == "cancelled"
    # a cancel does not stick: the next call runs to the end
    assert s.sample(steps=4, seed=2).shape == (1, SEQ_LEN)


def test_infill_keeps_the_rest(ctx, trained):
    m = nctmc.Model.load(trained["path"], ctx)
    s = m.sampler(max_batch=3)
    rng = np.random.default_rng(4)
    x = rng.integers(0, S_TOKENS, (3, SEQ_LEN)).astype(np.int32)
    mask = rng.random((3, SEQ_LEN)) < 0.5
    y = s.infill(x, mask, steps=12, seed=9)
    assert np.array_equal(y[~mask], x[~mask])
    assert ((y >= 0) & (y < S_TOKENS)).all()


def test_decode_and_mask_placeholder(ctx, trained):
    m = nctmc.Model.load(trained["path"], ctx)
    tok = m.tokenizer
    assert tok.decode(tok.encode("abcfed")) == "abcfed"
    masked = _tiny_model(ctx, "masked")
    masked.tokenizer = nctmc.Tokenizer.chars("abcdef")
    t = masked.tokenizer  # the mask token decodes as "_"
    assert t.decode([0, S_TOKENS, 1]) == "a_b"
    t.set_mask_placeholder(None)
    with pytest.raises(nctmc.Error):
        t.decode([0, S_TOKENS, 1])


def _gpt2_byte_symbols():
    """GPT-2's byte-to-unicode map: byte -> the character vocab files use."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
                 list(range(0xAE, 0x100)))
    extra = [b for b in range(256) if b not in printable]
    table = {b: chr(b) for b in printable}
    table.update({b: chr(0x100 + k) for k, b in enumerate(extra)})
    return table


def test_bpe_tokenizer_from_hugging_face_and_gpt2_files(tmp_path):
    import json
    sym = _gpt2_byte_symbols()
    sp = sym[ord(" ")]
    vocab = {sym[b]: b for b in range(256)}
    vocab.update({sp + "t": 256, "he": 257, sp + "the": 258, "<|endoftext|>": 259})
    merges = [sp + " t", "h e", sp + "t he"]
    (tmp_path / "tokenizer.json").write_text(json.dumps({
        "added_tokens": [{"id": 259, "content": "<|endoftext|>", "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges}}))
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    tok = nctmc.Tokenizer.hf_json(tmp_path / "tokenizer.json")
    assert tok.kind == "bpe" and tok.vocab_size == 260
    assert list(tok.encode("the the<|endoftext|>")) == [ord("t"), 257, 258, 259]
    pair = nctmc.Tokenizer.gpt2(tmp_path / "vocab.json", tmp_path / "merges.txt")
    assert list(pair.encode("the the<|endoftext|>")) == [ord("t"), 257, 258, 259]
    tok.pad_vocab(264)
    tok.save(tmp_path / "bpe.tok")
    back = nctmc.Tokenizer.load(tmp_path / "bpe.tok")
    assert back.vocab_size == 264 and back.decode(back.encode("x the")) == "x the"


def test_handles_can_be_collected_in_any_order(trained):
    ctx = nctmc.Context(backend="cpu", threads=1)
    m = nctmc.Model.load(trained["path"], ctx)
    s = m.sampler(1)
    ctx.close()
    m.close()  # the sampler keeps what it needs alive
    gc.collect()
    assert s.sample(steps=4, seed=3).shape == (1, SEQ_LEN)
    s.close()


def test_forward_and_eval(ctx, trained):
    m = nctmc.Model.load(trained["path"], ctx)
    x = trained["data"][:2]
    log_rate, jump = m.forward(x, [0.3, 0.6])
    assert log_rate.shape == (2, SEQ_LEN) and jump.shape == (2, SEQ_LEN, S_TOKENS)
    p = np.exp(jump).sum(axis=-1)
    assert np.allclose(p, 1.0, atol=1e-4)
    r = m.eval(trained["data"][:16], time_samples=4)
    assert 0 < r["nelbo_bits_per_token"] < np.log2(S_TOKENS) + 1
    rel = r["reliability"]
    assert rel["count"].shape == (N.EVAL_BUCKETS, N.EVAL_NU_BINS)
    assert rel["count"].sum() == r["n_tokens"] * 4  # uniform: every position, 4 times
    filled = rel["count"] > 0
    weights = rel["count"][filled]
    gap = np.abs(rel["mean_nu"][filled] - rel["observed_noisy"][filled])
    assert np.isclose(r["ece"], (weights * gap).sum() / weights.sum())
    assert np.array_equal(rel["observed_noisy"][filled],
                          rel["n_noisy"][filled] / rel["count"][filled])
    with pytest.raises(nctmc.Error):
        m.forward(np.full((1, SEQ_LEN), 99), [0.5])


def test_eval_time_sampling(ctx, trained):
    """The sqrt spread of the time samples estimates the same NELBO; logit
    is refused by the library with its reason."""
    m = nctmc.Model.load(trained["path"], ctx)
    x = trained["data"][:64]
    even = m.eval(x, time_samples=8, seed=1)
    sqrt = m.eval(x, time_samples=8, seed=1, time_sampling="sqrt")
    assert sqrt["nelbo_bits_per_token"] != even["nelbo_bits_per_token"]  # other times
    se = np.hypot(even["std_error_bits"], sqrt["std_error_bits"])
    assert abs(sqrt["nelbo_bits_per_token"] - even["nelbo_bits_per_token"]) < 4 * se
    assert sqrt["reliability"]["count"].sum() == sqrt["n_tokens"] * 8
    with pytest.raises(nctmc.Error, match="logit"):
        m.eval(x, time_samples=8, time_sampling="logit")
    with pytest.raises(ValueError):
        m.eval(x, time_samples=8, time_sampling="cubic")


def test_constants_match_the_header(tmp_path):
    """The binding's tables of enum values are the header's."""
    from nctmc import _model
    consts = {"NCTMC_INFILL_AUTO_TOKENS": N.INFILL_AUTO_TOKENS}
    consts.update({"NCTMC_WEIGHT_" + k.upper(): v for k, v in _model.WEIGHT_TYPES.items()})
    consts.update({"NCTMC_EXIT_LINK_" + k.upper(): v for k, v in _model.EXIT_LINKS.items()})
    consts.update({"NCTMC_LOAD_MAP_AUTO": _model.LOAD_MAPPINGS["auto"],
                   "NCTMC_LOAD_MAP_LAZY": _model.LOAD_MAPPINGS["lazy"],
                   "NCTMC_LOAD_COPY": _model.LOAD_MAPPINGS["copy"]})
    lines = ["#include <stdio.h>", "#include <nctmc.h>", "int main(void) {"]
    lines += ['printf("%s %%d\\n", (int)(%s));' % (c, c) for c in consts]
    lines += ["return 0;", "}"]
    exe = _compile(tmp_path, "constants", "\n".join(lines))
    c_values = dict(line.split() for line in subprocess.run(
        [str(exe)], check=True, capture_output=True, text=True).stdout.splitlines())
    assert {k: int(v) for k, v in c_values.items()} == consts


# ---------------------------------------------------------------- text infill

INFILL_SEQ = 48


@pytest.fixture(scope="module")
def byte_sampler(ctx):
    """An untrained byte-tokenizer model (what is sampled does not matter:
    the property is about the bytes that are kept) and a sampler for it."""
    m = nctmc.Model.create(ctx, vocab_size=256, seq_len=INFILL_SEQ, n_layers=1, d_model=32,
                           n_heads=2, cond_dim=16, seed=7)
    m.tokenizer = nctmc.Tokenizer.bytes()
    return m.sampler(1)


def _random_ranges(rng, size, n):
    """n sorted, non-overlapping (possibly empty, touching) ranges in [0, size]."""
    cuts = sorted(int(c) for c in rng.integers(0, size + 1, 2 * n))
    return [(cuts[2 * k], cuts[2 * k + 1]) for k in range(n)]


def _kept(text, ranges, out, where):
    """Every fixed piece of text lies unchanged between out's new ranges, and
    the new ranges are sorted within out."""
    prev_in = prev_out = 0
    for r, w in zip(ranges + [(len(text), len(text))], where + [(len(out), len(out))]):
        if not prev_out <= w[0] <= w[1] <= len(out):
            return False
        if text[prev_in:r[0]] != out[prev_out:w[0]]:
            return False
        prev_in, prev_out = r[1], w[1]
    return True


def test_infill_text_keeps_every_byte_outside_random_ranges(byte_sampler):
    rng = np.random.default_rng(11)
    for trial in range(30):
        text = rng.integers(0, 256, int(rng.integers(0, 30))).astype(np.uint8).tobytes()
        n = int(rng.integers(1, 4))
        ranges = _random_ranges(rng, len(text), n)
        tokens = [None if rng.random() < 0.4 else int(rng.integers(0, 5)) for _ in range(n)]
        out, where = byte_sampler.infill_text(text, ranges, tokens=tokens, steps=4, seed=trial)
        assert isinstance(out, bytes) and len(where) == n
        assert _kept(text, ranges, out, where), (trial, text, ranges, out, where)
        # one byte per token: the slots asked for, or the range's own length
        # (at least 1) for the default count
        for r, w, t in zip(ranges, where, tokens):
            assert w[1] - w[0] == (max(1, r[1] - r[0]) if t is None else t)
        again = byte_sampler.infill_text(text, ranges, tokens=tokens, steps=4, seed=trial)
        assert again == (out, where)


def test_infill_text_draws_new_text_for_the_ranges(byte_sampler):
    """Different seeds give different fillings; the fixed text stays."""
    text, ranges = b"The quick brown fox jumps", [(4, 9), (20, 20)]
    draws = [byte_sampler.infill_text(text, ranges, tokens=[None, 4], steps=4, seed=s)
             for s in range(4)]
    assert len({out for out, _ in draws}) > 1
    for out, (w0, w1) in draws:
        assert (w1[0] - w0[1], w1[1] - w1[0]) == (11, 4)
        assert (out[:w0[0]], out[w0[1]:w1[0]], out[w1[1]:]) == (b"The ", b" brown fox ", b"jumps")


def test_infill_text_on_str_counts_characters(byte_sampler):
    """str in, str out: the ranges are character indices of the input and
    of the returned string, which is the bytes result decoded."""
    rng = np.random.default_rng(12)
    alphabet = ["a", "b", " ", "é", "日", "😀"]
    for trial in range(15):
        text = "".join(rng.choice(alphabet) for _ in range(int(rng.integers(1, 10))))
        ranges = _random_ranges(rng, len(text), int(rng.integers(1, 3)))
        out, where = byte_sampler.infill_text(text, ranges, tokens=2, steps=4, seed=trial)
        assert isinstance(out, str)
        assert _kept(text, ranges, out, where), (trial, text, ranges, out, where)
        byte_ranges = [(len(text[:a].encode()), len(text[:b].encode())) for a, b in ranges]
        raw, raw_where = byte_sampler.infill_text(text.encode(), byte_ranges, tokens=2,
                                                  steps=4, seed=trial)
        for w, rw in zip(where, raw_where):  # the same draw, range by range
            assert out[w[0]:w[1]] == raw[rw[0]:rw[1]].decode("utf-8", "replace")
        if all(a[1] < b[0] for a, b in zip(ranges, ranges[1:])):  # none touching
            assert out == raw.decode("utf-8", "replace")


def test_infill_text_retries_a_too_small_buffer(byte_sampler):
    """With no room for the sampled bytes the first call is refused; the
    binding asks again and gets the text a roomy buffer gives."""
    text, ranges = b"0123456789", [(2, 5), (7, 7)]
    roomy = byte_sampler.infill_text(text, ranges, tokens=[6, 9], steps=4, seed=3)
    byte_sampler._infill_bytes_per_token = 0
    try:
        tight = byte_sampler.infill_text(text, ranges, tokens=[6, 9], steps=4, seed=3)
    finally:
        del byte_sampler._infill_bytes_per_token
    assert tight == roomy and len(roomy[0]) == 10 - 3 + 6 + 9


def test_infill_text_errors_carry_the_library_message(byte_sampler, ctx):
    s = byte_sampler
    cases = [([(3, 2)], None, "not within"), ([(0, 99)], None, "not within"),
             ([(0, 4), (2, 6)], None, "overlap"), ([(4, 6), (0, 2)], None, "starts before"),
             ([(0, 2)], [INFILL_SEQ], "max_length"), ([(0, 2)], [-5], "range_tokens[0]"),
             ([], None, "")]
    for ranges, tokens, words in cases:
        with pytest.raises(nctmc.Error) as e:
            s.infill_text(b"abcdefgh", ranges, tokens=tokens, steps=2)
        assert e.value.status == 1 and words in e.value.message, (ranges, e.value.message)
        assert e.value.message.startswith("nctmc_infill")
    with pytest.raises(nctmc.Error) as e:  # a character boundary inside a character
        s.infill_text(b"ab", [(0, 1)], tokenizer=nctmc.Tokenizer.chars("ab\u00e9"), steps=2)
    assert "tokenizer" in e.value.message
    chars = nctmc.Model.create(ctx, vocab_size=3, seq_len=16, n_layers=1, d_model=32,
                               n_heads=2, cond_dim=16, seed=1)
    chars.tokenizer = nctmc.Tokenizer.chars("ab\u00e9")
    with pytest.raises(nctmc.Error) as e:
        chars.sampler(1).infill_text("\u00e9ab".encode()[1:], [(2, 3)], steps=2)
    assert "invalid UTF-8 at byte 0" in e.value.message
    with pytest.raises(ValueError):
        s.infill_text(b"abc", [(0, 1), (2, 3)], tokens=[1])
    with pytest.raises(ValueError):
        s.infill_text("abc", [(-1, 1)])
    with pytest.raises(TypeError):  # set by the call, not by the caller
        s.infill_text(b"abc", [(0, 1)], length=8)
    # the sampler still works after the errors
    assert s.infill_text(b"abc", [(1, 2)], steps=2, seed=1)[0][::2] == b"ac"


def test_infill_text_progress_and_cancel(byte_sampler):
    seen = []
    byte_sampler.infill_text(b"abcdef", [(1, 3)], steps=5, seed=2,
                             progress=lambda k, n, t: seen.append((k, n, t.shape)))
    assert seen == [(k, 5, (1, 6)) for k in range(1, 6)]
    with pytest.raises(nctmc.Cancelled):
        byte_sampler.infill_text(b"abcdef", [(1, 3)], steps=5, progress=lambda k, n, t: False)


# ---------------------------------------------------------------- reduced precision

def test_convert_to_bf16_and_int8(ctx, trained, tmp_path):
    m = nctmc.Model.load(trained["path"], ctx, mapping="copy")
    assert m.weight_type == "f32"
    x = trained["data"][:4]
    times = [0.1, 0.4, 0.7, 0.95]
    ref_rate, ref_jump = m.forward(x, times)
    ref_samples = m.sampler(4).sample(batch=4, steps=8, seed=5)
    for to, tol in (("bf16", 0.05), ("int8", 0.05)):  # measured: 0.013 both
        c = m.convert(to)
        assert c.weight_type == to and m.weight_type == "f32"
        assert c.config == m.config and c.tokenizer.decode([0, 1]) == "ab"
        rate, jump = c.forward(x, times)
        # close to float32's, and not float32's itself
        assert np.abs(rate - ref_rate).max() < tol, to
        finite = np.isfinite(ref_jump)  # -inf: the jump to the current token
        assert np.array_equal(np.isfinite(jump), finite), to
        assert np.abs(jump[finite] - ref_jump[finite]).max() < tol, to
        assert not np.array_equal(jump, ref_jump), to
        s = c.sampler(4).sample(batch=4, steps=8, seed=5)
        assert s.shape == ref_samples.shape and ((s >= 0) & (s < S_TOKENS)).all()
        # format 3 reads back bit for bit
        c.save(tmp_path / (to + ".safetensors"))
        back = nctmc.Model.load(tmp_path / (to + ".safetensors"), ctx)
        assert back.weight_type == to
        assert np.array_equal(back.forward(x, times)[1], jump)
        with pytest.raises(nctmc.Error) as e:  # sampling only
            nctmc.Trainer(c, batch_size=4)
        assert e.value.status == 1
        with pytest.raises(nctmc.Error) as e:
            c.convert("int8")
        assert "already holds" in e.value.message
    with pytest.raises(nctmc.Error) as e:
        m.convert("f32")
    assert e.value.status == 1 and "NCTMC_WEIGHT_BF16" in e.value.message
    with pytest.raises(ValueError):
        m.convert("fp16")


# ---------------------------------------------------------------- streaming dataset writer

def test_dataset_writer_output_is_a_shard_the_library_reads(ctx, tmp_path):
    rng = np.random.default_rng(5)
    data = rng.integers(0, S_TOKENS, (40, SEQ_LEN)).astype(np.int32)
    path = tmp_path / "stream.bin"
    with nctmc.DatasetWriter(path, vocab_size=S_TOKENS, seq_len=SEQ_LEN, ctx=ctx) as w:
        flat = data.ravel()
        for a, b in [(0, 7), (7, 100), (100, 100), (100, flat.size)]:  # pieces, not sequences
            w.append(flat[a:b])
        assert not path.exists()  # nothing until the commit
    assert w.info["n_tokens"] == data.size and w.info["n_sequences"] == 40
    ds = nctmc.Dataset.open(path, ctx)
    info = ds.info
    assert info == w.info
    assert (info["vocab_size"], info["seq_len"]) == (S_TOKENS, SEQ_LEN)
    assert np.array_equal(ds.read(0, data.size), flat)
    # the same tokens through nctmc_dataset_write give the same file
    nctmc.Dataset.write(tmp_path / "whole.bin", data, vocab_size=S_TOKENS, seq_len=SEQ_LEN,
                        ctx=ctx)
    assert (tmp_path / "whole.bin").read_bytes() == path.read_bytes()
    # a trainer reads it
    trainer = nctmc.Trainer(_tiny_model(ctx), batch_size=4, ema_decay=0.0)
    assert np.isfinite(trainer.train(ds, 2, progress=False)["loss"])


def test_dataset_writer_errors(ctx, tmp_path):
    path = tmp_path / "d.bin"
    w = nctmc.DatasetWriter(path, vocab_size=S_TOKENS, ctx=ctx)  # a stream
    w.append([1, 2, 3])
    with pytest.raises(nctmc.Error) as e:  # nothing of this call is appended
        w.append([4, S_TOKENS, 5])
    assert e.value.status == 1 and "nctmc_dataset_writer_append" in e.value.message
    w.append([0])
    assert w.commit()["n_tokens"] == 4
    assert list(nctmc.Dataset.open(path, ctx).read(0, 4)) == [1, 2, 3, 0]
    with pytest.raises(nctmc.Error) as e:  # after a commit only close is allowed
        w.append([1])
    assert "committed" in e.value.message
    w.close()
    # whole sequences only; nothing appears
    bad = tmp_path / "bad.bin"
    with pytest.raises(nctmc.Error) as e:
        with nctmc.DatasetWriter(bad, vocab_size=S_TOKENS, seq_len=SEQ_LEN, ctx=ctx) as w:
            w.append(np.zeros(SEQ_LEN + 1, np.int32))
    assert e.value.status == 1 and not bad.exists()
    # an exception in the block writes nothing
    with pytest.raises(KeyError):
        with nctmc.DatasetWriter(bad, vocab_size=S_TOKENS, ctx=ctx) as w:
            w.append([1, 2])
            raise KeyError("stop")
    assert not bad.exists() and w.info is None
    with pytest.raises(nctmc.Error) as e:
        nctmc.DatasetWriter(bad, vocab_size=0, ctx=ctx)
    assert e.value.status == 1 and e.value.message


# ---------------------------------------------------------------- tensors, contexts, resume

def test_tensors_read_and_write(ctx, trained):
    m = nctmc.Model.load(trained["path"], ctx)
    shapes = m.tensors
    assert "blocks.0.attn_qkv.weight" in shapes
    assert sum(int(np.prod(s)) for s in shapes.values()) == m.n_params
    name = "output_layer.linear.weight"
    w = m.read_tensor(name)
    assert w.shape == shapes[name] and w.dtype == np.float32 and np.abs(w).max() > 0
    x = trained["data"][:2]
    before = m.forward(x, [0.5, 0.5])[1]
    m.write_tensor(name, np.zeros_like(w))  # a mapped model copies out of the map first
    assert not m.mapped and np.array_equal(m.read_tensor(name), np.zeros_like(w))
    assert not np.array_equal(m.forward(x, [0.5, 0.5])[1], before)
    m.write_tensor(name, w)
    assert np.array_equal(m.forward(x, [0.5, 0.5])[1], before)
    bad = w.copy()
    bad.flat[3] = np.nan
    with pytest.raises(nctmc.Error) as e:
        m.write_tensor(name, bad)
    assert e.value.status == 1 and np.array_equal(m.read_tensor(name), w)
    with pytest.raises(nctmc.Error) as e:
        m.write_tensor(name, w.ravel()[:-1])
    assert e.value.status == 1 and np.array_equal(m.read_tensor(name), w)
    with pytest.raises(nctmc.Error) as e:
        m.read_tensor("no.such.tensor")
    assert e.value.status == 4 and "no.such.tensor" in e.value.message
    # a converted model reads its weights dequantised: within half a step
    q = m.convert("int8")
    step = np.abs(w).max(axis=1, keepdims=True) / 127
    assert np.all(np.abs(q.read_tensor(name) - w) <= step / 2 + 1e-6)
    with pytest.raises(nctmc.Error):
        q.write_tensor(name, w)


def test_forward_on_another_context(ctx, trained):
    m = nctmc.Model.load(trained["path"], ctx)
    x = trained["data"][:3]
    own = m.forward(x, [0.1, 0.5, 0.9])
    other = nctmc.Context(backend="cpu", threads=2)
    on_other = m.forward(x, [0.1, 0.5, 0.9], ctx=other)
    assert np.array_equal(own[0], on_other[0]) and np.array_equal(own[1], on_other[1])
    with pytest.raises(nctmc.Error) as e:  # the error is the context's
        m.forward(np.full((1, SEQ_LEN), 99), [0.5], ctx=other)
    assert e.value.status == 1 and e.value.message


def test_resume_takes_the_step_the_saved_run_would_have_taken(ctx, tmp_path):
    batches = [_markov_data(4, 20 + k) for k in range(5)]
    t = nctmc.Trainer(_tiny_model(ctx), batch_size=4, learning_rate=3e-3, seed=9)
    for b in batches[:3]:
        t.step(b)
    t.save(tmp_path / "run.safetensors")
    rest = [t.step(b) for b in batches[3:]]
    seen = nctmc.Trainer.inspect(tmp_path / "run.safetensors", ctx)
    assert seen["state"]["step"] == 3 and seen["params"]["batch_size"] == 4
    assert seen["params"]["learning_rate"] == pytest.approx(3e-3)
    r = nctmc.Trainer.resume(tmp_path / "run.safetensors", ctx)
    assert r.state["step"] == 3 and r.batch_size == 4 and r.model.seq_len == SEQ_LEN
    again = [r.step(b) for b in batches[3:]]
    assert [s["loss"] for s in again] == [s["loss"] for s in rest]
    assert r.state == t.state
    with pytest.raises(nctmc.Error) as e:  # batch_size must match the saved one
        nctmc.Trainer.resume(tmp_path / "run.safetensors", ctx, batch_size=8)
    assert e.value.status == 1 and e.value.message
    _tiny_model(ctx).save(tmp_path / "plain.safetensors")
    with pytest.raises(nctmc.Error) as e:
        nctmc.Trainer.inspect(tmp_path / "plain.safetensors", ctx)
    assert e.value.status == 4


def test_activation_recompute_gives_the_same_training(ctx):
    """Trainer(activation_recompute=1): the same losses and weights, bit for
    bit, on a 3-block model; the parameter is reported back."""
    batches = [_markov_data(4, 40 + k) for k in range(4)]
    runs = []
    for recompute in (0, 1):
        model = nctmc.Model.create(ctx, vocab_size=S_TOKENS, seq_len=SEQ_LEN, n_layers=3,
                                   d_model=32, n_heads=2, cond_dim=16, seed=5)
        t = nctmc.Trainer(model, batch_size=4, learning_rate=3e-3, seed=2,
                          activation_recompute=recompute)
        assert t.params["activation_recompute"] == recompute
        losses = [t.step(b)["loss"] for b in batches]
        runs.append((losses, {n: model.read_tensor(n).tobytes() for n in model.tensors}))
    assert runs[0][0] == runs[1][0]
    assert runs[0][1] == runs[1][1]


def test_accumulation_draws_the_global_batch(ctx):
    """Trainer(accumulation=2): a step takes batch_size x 2 sequences and
    draws what one batch of that size draws (the first loss agrees to float
    rounding); the parameter is reported back."""
    batch = _markov_data(4, 77)
    losses = []
    for batch_size, accumulation in ((4, 1), (2, 2)):
        model = nctmc.Model.create(ctx, vocab_size=S_TOKENS, seq_len=SEQ_LEN, n_layers=1,
                                   d_model=32, n_heads=2, cond_dim=16, seed=5)
        t = nctmc.Trainer(model, batch_size=batch_size, accumulation=accumulation, seed=2)
        assert t.params["accumulation"] == accumulation
        losses.append(t.step(batch)["loss"])
    assert losses[1] == pytest.approx(losses[0], rel=1e-6)
    with pytest.raises(ValueError):
        t.step(batch[:2])


def test_labels_image_tokenizer_and_write_file(ctx, tmp_path):
    data = _markov_data(6, 3)
    nctmc.Dataset.write(tmp_path / "l.bin", data, vocab_size=S_TOKENS, seq_len=SEQ_LEN,
                        labels=[2, 0, 1, 1, 0, 2], n_classes=3, ctx=ctx)
    ds = nctmc.Dataset.open(tmp_path / "l.bin", ctx)
    assert [ds.label(k) for k in range(6)] == [2, 0, 1, 1, 0, 2]
    with pytest.raises(nctmc.Error) as e:
        ds.label(6)
    assert e.value.status == 1
    img = nctmc.Tokenizer.image(8, 4, 16)
    assert img.kind == "image" and img.image_shape == (8, 4, 16) and img.vocab_size == 16
    with pytest.raises(nctmc.Error):
        nctmc.Tokenizer.bytes().image_shape
    nctmc.write_file(tmp_path / "out.bin", b"\x00abc\xff", ctx)
    assert (tmp_path / "out.bin").read_bytes() == b"\x00abc\xff"
    (tmp_path / "adir").mkdir()
    with pytest.raises(nctmc.Error) as e:
        nctmc.write_file(tmp_path / "adir", b"x", ctx)
    assert e.value.status == 6 and e.value.message


def test_samples_follow_the_models_recommended_sampler(ctx, trained):
    # no method, grid or steps: the checkpoint's recommendation
    # (nctmc_sample_params_from_model), the same draws as asking for it
    m = nctmc.Model.load(trained["path"], ctx)
    p = nctmc._native.new(nctmc._native.SampleParams)
    assert nctmc._native.nctmc_sample_params_from_model(m, ctypes.byref(p)) == 0
    names = {v: k for k, v in nctmc._sampler.METHODS.items()}
    grids = {v: k for k, v in nctmc._sampler.GRIDS.items()}
    s = m.sampler(max_batch=2)
    default = s.sample(batch=2, seed=5)
    asked = s.sample(batch=2, seed=5, method=names[p.method], grid=grids[p.grid],
                     steps=p.n_steps)
    assert np.array_equal(default, asked)
    other = s.sample(batch=2, seed=5, method="euler" if names[p.method] != "euler" else "tau",
                     grid=grids[p.grid], steps=p.n_steps)
    assert not np.array_equal(default, other)
