"""Sampling: generate, infill, progress and cancel."""
import ctypes

import numpy as np

from . import _native as N
from ._handles import Error, Handle, check
from ._model import _int32_array, _ptr

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


class Sampler(Handle):
    """Draws batches of up to max_batch sequences from a model.

    `cancel()` may be called from any thread while `sample()` runs on
    another; the running call then raises `Cancelled` at its next step."""

    _free = N.nctmc_sampler_free

    def __init__(self, model, max_batch=8, max_length=0):
        p = N.new(N.SamplerParams)
        p.max_batch, p.max_length = max_batch, max_length
        out = ctypes.c_void_p()
        check(N.nctmc_sampler_create(model, ctypes.byref(p), ctypes.byref(out)),
              model.context._error)
        super().__init__(out)
        self.model = model
        self.max_batch = max_batch
        self.max_length = max_length or model.seq_len

    def _error(self):
        return N.nctmc_sampler_last_error(self)

    def cancel(self):
        """Asks a running sample() (on another thread) to stop."""
        N.nctmc_sampler_cancel(self)

    def sample(self, batch=1, length=0, method="tau", steps=128, seed=0, labels=None,
               temperature=1.0, cfg_scale=1.0, grid="uniform", t_max=None, t_min=None,
               final_denoise=None, correction_steps=0, correction_temperature=None,
               fixed_tokens=None, fixed_mask=None, first_sequence=0, progress=None,
               cfg_rule=None, correction_mode="greedy", correction_time=None):
        """Draws `batch` sequences; returns an int32 array [batch, length].

        None leaves a setting at the library's default (docs/api.md):
        final_denoise (a bool), cfg_rule ("rates" or "separate": how
        cfg_scale combines the two passes), correction_temperature and
        correction_time. correction_mode is "greedy" (paper Alg. 3) or
        "gibbs" (a random position redrawn per update; keeps diversity).

        progress(step, n_steps, tokens) is called after every step with the
        current tokens as an array [batch, length] (valid during the call);
        returning False cancels (raises `Cancelled`, whose `tokens` holds the
        state reached). fixed_tokens / fixed_mask ([batch, length]) clamp
        positions — see `infill`."""
        length = length or self.max_length
        p = N.new(N.SampleParams)
        p.batch, p.length = batch, length
        p.method = _code(METHODS, method, "method")
        p.grid = _code(GRIDS, grid, "grid")
        p.n_steps, p.seed, p.first_sequence = steps, seed, first_sequence
        p.temperature, p.cfg_scale = temperature, cfg_scale
        if final_denoise is not None:
            p.final_denoise = 1 if final_denoise else 0
        if cfg_rule is not None:
            p.cfg_rule = _code(CFG_RULES, cfg_rule, "cfg_rule")
        p.correction_mode = _code(CORRECTION_MODES, correction_mode, "correction_mode")
        p.correction_steps = correction_steps
        if correction_temperature is not None:
            p.correction_temperature = correction_temperature
        if correction_time is not None:
            p.correction_time = correction_time
        if t_max is not None:
            p.t_max = t_max
        if t_min is not None:
            p.t_min = t_min
        keep = []  # arrays the C call reads must live until it returns
        if labels is not None:
            lab = _int32_array(labels, "labels").ravel()
            keep.append(lab)
            p.labels = _ptr(lab)
        if fixed_mask is not None:
            mask = np.ascontiguousarray(fixed_mask, dtype=np.uint8).reshape(batch, length)
            fixed = _int32_array(fixed_tokens, "fixed_tokens").reshape(batch, length)
            keep += [mask, fixed]
            p.fixed_mask = _ptr(mask, ctypes.c_uint8)
            p.fixed_tokens = _ptr(fixed)
        out = np.zeros((batch, length), dtype=np.int32)
        p.tokens_out = _ptr(out)
        failure = []
        if progress is not None:
            def callback(step, n_steps, tokens, b, n, _user):
                try:
                    view = np.ctypeslib.as_array(tokens, shape=(b, n))
                    return 0 if progress(step, n_steps, view) is False else 1
                except BaseException as e:  # stop sampling, re-raise below
                    failure.append(e)
                    return 0
            cb = N.SAMPLE_CALLBACK(callback)
            p.callback = cb
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
        t = _int32_array(tokens, "tokens")
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
