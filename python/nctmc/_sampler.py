"""Sampling: generate, infill (tokens or text), progress and cancel."""
import ctypes

import numpy as np

from . import _check as C
from . import _native as N
from ._handles import INVALID_ARGUMENT, Error, Handle, check
from ._interrupt import Interruptible
from ._model import _ptr

METHODS = {"tau": 0, "tau-leaping": 0, "euler": 1, "posterior": 2}
GRIDS = {"uniform": 0, "geometric": 1}
CFG_RULES = {"separate": 0, "rates": 1}
CORRECTION_MODES = {"greedy": 0, "gibbs": 1}


def _code(table, value, what):
    """A name of `table` or its integer value."""
    if isinstance(value, str):
        if value not in table:
            raise ValueError(f"{what} must be one of {sorted(table)}, not {value!r}")
        return table[value]
    return value


def _settings(p, stop, batch=1, method=None, steps=None, seed=0, labels=None, temperature=1.0,
              cfg_scale=1.0, grid=None, t_max=None, t_min=None, final_denoise=None,
              correction_steps=0, correction_temperature=None, first_sequence=0, progress=None,
              cfg_rule=None, correction_mode="greedy", correction_time=None):
    """Writes the sampling settings (Sampler.sample's keywords) into the
    SampleParams p, each checked against its C type; labels must hold
    exactly `batch` values. stop: the Interruptible of the call, whose
    Ctrl-C the callback turns into the library's cancel. Returns (keep,
    failure): the objects the C call reads, which must live until it
    returns, and the list that receives an exception raised by `progress`
    (to re-raise after the call)."""
    # None: the model's recommended setting, already in p
    if method is not None:
        C.set_field(p, "method", _code(METHODS, method, "method"))
    if grid is not None:
        C.set_field(p, "grid", _code(GRIDS, grid, "grid"))
    if steps is not None:
        C.set_field(p, "n_steps", steps)
    C.set_field(p, "seed", seed)
    C.set_field(p, "first_sequence", first_sequence)
    C.set_field(p, "temperature", temperature)
    C.set_field(p, "cfg_scale", cfg_scale)
    if final_denoise is not None:
        p.final_denoise = 1 if final_denoise else 0
    if cfg_rule is not None:
        C.set_field(p, "cfg_rule", _code(CFG_RULES, cfg_rule, "cfg_rule"))
    C.set_field(p, "correction_mode", _code(CORRECTION_MODES, correction_mode, "correction_mode"))
    C.set_field(p, "correction_steps", correction_steps)
    if correction_temperature is not None:
        C.set_field(p, "correction_temperature", correction_temperature)
    if correction_time is not None:
        C.set_field(p, "correction_time", correction_time)
    if t_max is not None:
        C.set_field(p, "t_max", t_max)
    if t_min is not None:
        C.set_field(p, "t_min", t_min)
    keep, failure = [], []
    if labels is not None:
        lab = C.int32_array(labels, "labels", count=batch)
        keep.append(lab)
        p.labels = _ptr(lab)

    def callback(step, n_steps, tokens, b, n, _user):
        # as in C: 0 stops; the user's None (no return value) goes on
        try:
            if progress is not None and not stop():
                r = progress(step, n_steps, np.ctypeslib.as_array(tokens, shape=(b, n)))
                if r is not None and not r:
                    return 0
            return 0 if stop() else 1
        except BaseException as e:  # stop sampling, re-raise below
            failure.append(e)
            return 0
    cb = N.SAMPLE_CALLBACK(callback)
    keep.append(cb)
    p.callback = cb
    return keep, failure


def _byte_offset(text, i):
    """The byte offset in text's UTF-8 of character index i (an index past
    the end stays past the end, for the library to refuse)."""
    i = C.integer(i, "range bound", 0, 2**62)
    if i < 0:
        raise ValueError("range bounds must be >= 0, not %d" % i)
    if i > len(text):
        return len(text.encode("utf-8")) + (i - len(text))
    return len(text[:i].encode("utf-8"))


def _slot_counts(tokens, n):
    """infill_text's `tokens` as nctmc_infill_params.range_tokens (None:
    NULL, the default count for every range)."""
    if tokens is None:
        return None
    if isinstance(tokens, (str, bytes)):
        raise TypeError("tokens must be None, an int or a list of them")
    counts = [tokens] * n if isinstance(tokens, (int, np.integer)) else list(tokens)
    if len(counts) != n:
        raise ValueError("tokens must give one count per range (%d), not %d"
                         % (n, len(counts)))
    return np.array([N.INFILL_AUTO_TOKENS if c is None else C.int32(c, "tokens")
                     for c in counts], np.int32)


def _as_text(out, where):
    """The new text as str and its ranges in characters: the output decoded
    piece by piece (fixed segment, range, ...), so that each range is whole
    characters of exactly the returned string. A fixed segment is whole
    characters (the ranges were character indices), so the pieces decode as
    the whole output would — except bytes of one character sampled across
    two touching ranges, which here become U+FFFD in each, as do other
    bytes that are not UTF-8 (a BPE model may sample part of a character)."""
    pieces, ranges, at, chars = [], [], 0, 0
    for start, end in where:
        fixed = out[at:start].decode("utf-8", "replace")
        made = out[start:end].decode("utf-8", "replace")
        pieces += [fixed, made]
        ranges.append((chars + len(fixed), chars + len(fixed) + len(made)))
        chars += len(fixed) + len(made)
        at = end
    pieces.append(out[at:].decode("utf-8", "replace"))
    return "".join(pieces), ranges


class Sampler(Handle):
    """Draws batches of up to max_batch sequences from a model.

    `cancel()` may be called from any thread while `sample()` runs on
    another; the running call then raises `Cancelled` at its next step."""

    _free = N.nctmc_sampler_free

    def _recommended(self):
        """SampleParams with the library's defaults and the model's
        recommended method, grid and steps (read when the sampler was made:
        the sampler keeps its model alive in C, the Python Model may be
        closed since)."""
        p = N.new(N.SampleParams)
        p.method, p.grid, p.n_steps = self._recommendation
        return p
    # infill_text's first buffer: the text plus this many bytes per token
    # the sampler may generate (a BPE token longer than that costs a
    # second, identical call)
    _infill_bytes_per_token = 64

    def __init__(self, model, max_batch=8, max_length=0):
        p = N.new(N.SamplerParams)
        C.set_field(p, "max_batch", max_batch)
        C.set_field(p, "max_length", max_length)
        out = ctypes.c_void_p()
        check(N.nctmc_sampler_create(model, ctypes.byref(p), ctypes.byref(out)),
              model.context._error)
        super().__init__(out)
        rec = N.new(N.SampleParams)
        check(N.nctmc_sample_params_from_model(model, ctypes.byref(rec)), model._error)
        self._recommendation = (rec.method, rec.grid, rec.n_steps)
        self.model = model
        self.max_batch = max_batch
        self.max_length = max_length or model.seq_len

    def _error(self):
        return N.nctmc_sampler_last_error(self)

    def cancel(self):
        """Asks a running sample() (on another thread) to stop."""
        N.nctmc_sampler_cancel(self)

    def sample(self, batch=1, length=0, method=None, steps=None, seed=0, labels=None,
               temperature=1.0, cfg_scale=1.0, grid=None, t_max=None, t_min=None,
               final_denoise=None, correction_steps=0, correction_temperature=None,
               fixed_tokens=None, fixed_mask=None, first_sequence=0, progress=None,
               cfg_rule=None, correction_mode="greedy", correction_time=None):
        """Draws `batch` sequences; returns an int32 array [batch, length].

        method, steps and grid left None take the model's recommended
        sampler (nctmc_sample_params_from_model: what the checkpoint
        carries, else its process's default; docs/api.md). Other None
        settings stay at the library's default (docs/api.md):
        final_denoise (a bool), cfg_rule ("rates" or "separate": how
        cfg_scale combines the two passes), correction_temperature and
        correction_time. correction_mode is "greedy" (paper Alg. 3) or
        "gibbs" (a random position redrawn per update; keeps diversity).

        progress(step, n_steps, tokens) is called after every step with the
        current tokens as an array [batch, length] (valid during the call);
        returning False cancels (raises `Cancelled`, whose `tokens` holds the
        state reached). fixed_tokens / fixed_mask ([batch, length]) clamp
        positions — see `infill`."""
        batch = C.int32(batch, "batch")
        length = C.int32(length, "length") or self.max_length
        if batch < 1 or length < 1:
            raise ValueError("batch and length must be >= 1, not %d and %d" % (batch, length))
        p = self._recommended()
        p.batch, p.length = batch, length
        stop = Interruptible()
        keep, failure = _settings(
            p, stop, batch=batch, method=method, steps=steps, seed=seed, labels=labels,
            temperature=temperature, cfg_scale=cfg_scale, grid=grid, t_max=t_max, t_min=t_min,
            final_denoise=final_denoise, correction_steps=correction_steps,
            correction_temperature=correction_temperature, first_sequence=first_sequence,
            progress=progress, cfg_rule=cfg_rule, correction_mode=correction_mode,
            correction_time=correction_time)
        if fixed_mask is not None:
            mask = C.mask_array(fixed_mask, "fixed_mask", (batch, length))
            if fixed_tokens is None:
                raise ValueError("fixed_mask needs fixed_tokens")
            fixed = C.int32_array(fixed_tokens, "fixed_tokens", shape=(batch, length))
            keep += [mask, fixed]
            p.fixed_mask = _ptr(mask, ctypes.c_uint8)
            p.fixed_tokens = _ptr(fixed)
        out = np.zeros((batch, length), dtype=np.int32)
        p.tokens_out = _ptr(out)
        with stop:
            status = N.nctmc_sample(self, ctypes.byref(p))
        if failure:
            raise failure[0]
        try:
            check(status, self._error)
        except Error as e:
            e.tokens = out
            raise
        return out

    def infill(self, tokens, mask, **kwargs):
        """Regenerates the positions where mask is non-zero, keeping every
        other token of `tokens` ([batch, length] or [length]) as it is."""
        t = C.int32_array(tokens, "tokens")
        if t.ndim not in (1, 2):
            raise ValueError("tokens must be [length] or [batch, length]")
        single = t.ndim == 1
        if single:
            t = t[None, :]
        m = np.asarray(mask)
        if m.ndim == 1:
            m = np.broadcast_to(m, t.shape)
        keep = (m == 0).astype(np.uint8)
        out = self.sample(batch=t.shape[0], length=t.shape[1], fixed_tokens=t,
                          fixed_mask=keep, **kwargs)
        return out[0] if single else out

    def infill_text(self, text, ranges, tokens=None, tokenizer=None, **settings):
        """Regenerates parts of a text and keeps every other byte as it is
        (nctmc_infill; docs/api.md "Infilling"). Returns (new_text, new_ranges).

        text is bytes (ranges are byte offsets, the result is bytes) or str
        (ranges are character indices into it, the result is str: bytes of
        the sampled ranges that are not UTF-8 become U+FFFD; pass bytes to
        get them exactly). ranges: sorted, non-overlapping (start, end)
        pairs, half-open; start == end is an insertion point. tokens: the
        number of tokens to generate per range — None (as many as the
        range's text takes, at least 1), one int for every range, or a list
        with an int or None per range (0 deletes the range). tokenizer: a
        byte, character or BPE Tokenizer of the model's data tokens (None:
        the model's). The other keywords are sample()'s settings (method,
        steps, seed, labels — one entry —, temperature, cfg_scale,
        correction_*, first_sequence, progress, ...). new_ranges: where
        each range's new text lies in new_text. A bad range, too many
        tokens for the sampler's max_length, or a text the tokenizer cannot
        encode raises `Error` with the library's message."""
        is_str = isinstance(text, str)
        data = C.text(text, "text")
        pairs = [tuple(r) for r in ranges]
        if any(len(r) != 2 for r in pairs):
            raise ValueError("each range must be a (start, end) pair")
        if is_str:
            pairs = [(_byte_offset(text, a), _byte_offset(text, b)) for a, b in pairs]
        else:
            pairs = [(C.integer(a, "range bound", 0, 2**62), C.integer(b, "range bound", 0, 2**62))
                     for a, b in pairs]
        n = len(pairs)
        rs = (N.TextRange * max(n, 1))(*[N.TextRange(int(a), int(b)) for a, b in pairs])
        where = (N.TextRange * max(n, 1))()
        sp = self._recommended()
        stop = Interruptible()
        # keep: alive through the calls
        keep, failure = _settings(sp, stop, **settings)
        ip = N.new(N.InfillParams)
        ip.sample = ctypes.pointer(sp)
        counts = _slot_counts(tokens, n)
        ip.range_tokens = _ptr(counts)
        ip.ranges_out = where
        # one generous buffer so that the call samples once; a longer text
        # (BPE tokens of many bytes) is asked again: the result is
        # deterministic, the second call gives the same text
        cap = len(data) + self._infill_bytes_per_token * self.max_length + 1
        out_len = ctypes.c_size_t(0)
        for _ in range(2):
            buf = ctypes.create_string_buffer(cap)
            out_len.value = 0
            with stop:
                status = N.nctmc_infill(self, tokenizer, data, len(data), rs, n,
                                        ctypes.byref(ip), buf, cap, ctypes.byref(out_len))
            if failure:
                raise failure[0]
            if status != INVALID_ARGUMENT or out_len.value < cap:
                break
            cap = out_len.value + 1
        check(status, self._error)
        out = buf.raw[:out_len.value]
        spans = [(where[k].start, where[k].end) for k in range(n)]
        return _as_text(out, spans) if is_str else (out, spans)
