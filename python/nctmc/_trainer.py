"""Training from Python: one step at a time, or a loop with a progress bar."""
import ctypes
import os
import sys
import time

from . import _check as C
from . import _native as N
from . import _preset
from ._comm import as_comm
from ._handles import Handle, check
from ._model import Dataset, Model, _default_context, _ptr


def _trainer_params(preset, params):
    """A TrainerParams struct: the library's defaults, then the preset's,
    then the keyword arguments (time_sampling by name or value)."""
    p = N.new(N.TrainerParams)
    if preset is not None:
        _preset.apply(preset, params=p)
    for key, value in params.items():
        if key == "time_sampling" and isinstance(value, str):
            if value not in _preset.TIME_SAMPLINGS:
                raise ValueError("time_sampling must be one of %s"
                                 % ", ".join(_preset.TIME_SAMPLINGS))
            value = _preset.TIME_SAMPLINGS[value]
        elif key not in dict(N.TrainerParams._fields_) or key == "struct_size":
            raise TypeError("unknown trainer setting %r" % key)
        C.set_field(p, key, value)
    return p


def _as_dict(s):
    """The struct's settings as a dict: every field but struct_size and the
    pointers (the communicator: a Python trainer runs in one process), so
    that the dict can be passed back as keyword arguments."""
    return {f: getattr(s, f) for f, ctype in type(s)._fields_[1:]
            if ctype is not ctypes.c_void_p}


class Trainer(Handle):
    """Updates a model's weights in place with L_cond and AdamW.

    Keyword arguments set nctmc_trainer_params fields (batch_size, seq_len,
    learning_rate, warmup_steps, total_steps, ema_decay, seed, ...);
    time_sampling takes a name ("uniform", "logit", "sqrt"). preset names a
    recipe (nctmc.presets()) whose trainer parameters the keyword arguments
    then override. comm (a nctmc.Comm) trains data-parallel over its ranks:
    every rank creates its trainer alike (collective), and every step is
    collective (docs/python.md, "Several processes"); the trainer holds the
    Comm, whose C handle outlives it."""

    _free = N.nctmc_trainer_free
    comm = None

    def __init__(self, model, preset=None, comm=None, **params):
        p = _trainer_params(preset, params)
        comm = as_comm(comm)
        if comm is not None:
            p.comm = comm._use()
        out = ctypes.c_void_p()
        try:
            check(N.nctmc_trainer_create(model, ctypes.byref(p), ctypes.byref(out)),
                  model._error)
        except BaseException:
            if comm is not None:
                comm._release()
            raise
        self._attach(out, model, comm)

    def _attach(self, ptr, model, comm=None):
        Handle.__init__(self, ptr)
        #: the Comm the trainer uses (None: one process)
        self.comm = comm
        self.model = model
        p = self.params
        self.batch_size = p["batch_size"]
        #: sequences per step: batch_size x accumulation (0 from a library
        #: without accumulation means 1)
        self.step_rows = p["batch_size"] * (p["accumulation"] or 1)
        self.seq_len = p["seq_len"] or model.seq_len

    @classmethod
    def resume(cls, path, ctx=None, comm=None, **params):
        """Resumes from a `save()` checkpoint: a new model (the raw weights,
        as `trainer.model`) and a trainer whose next step is exactly the one
        the saved run would have taken next. No keywords: the saved
        parameters; keywords set nctmc_trainer_params fields on top of the
        library's defaults (batch_size and seq_len must match the saved
        ones). comm (a nctmc.Comm) resumes on its ranks (collective): with
        no keywords, the saved batch_size and the saved micro-batches
        (accumulation) split over the ranks, as `nctmc train --resume`
        does; the saved accumulation must then be a multiple of comm.size."""
        ctx = _default_context(ctx)
        comm = as_comm(comm)
        if comm is not None and not params:
            params = Trainer.inspect(path, ctx)["params"]
            saved, size = params["accumulation"] or 1, comm.size
            if saved % size:
                raise ValueError("the checkpoint's %d micro-batches per step do not split over "
                                 "%d ranks: pass batch_size and accumulation" % (saved, size))
            params["accumulation"] = saved // size
        p = _trainer_params(None, params) if params else None
        if comm is not None:
            p.comm = comm._use()
        m, t = ctypes.c_void_p(), ctypes.c_void_p()
        try:
            check(N.nctmc_trainer_resume(ctx, C.path(path), ctypes.byref(p) if p else None,
                                         ctypes.byref(m), ctypes.byref(t)), ctx._error)
        except BaseException:
            if comm is not None:
                comm._release()
            raise
        model = Model(m, ctx)
        self = cls.__new__(cls)
        self._attach(t, model, comm)
        return self

    @staticmethod
    def inspect(path, ctx=None):
        """The trainer parameters and state saved in a `save()` checkpoint,
        reading only its header: a dict with "params" and "state" (dicts).
        A model-only checkpoint raises (NOT_FOUND)."""
        ctx = _default_context(ctx)
        p, s = N.new(N.TrainerParams), N.new(N.TrainerState)
        check(N.nctmc_trainer_inspect(ctx, C.path(path), ctypes.byref(p), ctypes.byref(s)),
              ctx._error)
        return {"params": _as_dict(p), "state": _as_dict(s)}

    def _error(self):
        return N.nctmc_trainer_last_error(self)

    def close(self):
        """Frees the trainer now (also done when it is collected), then lets
        go of its Comm (freed then if it was closed meanwhile)."""
        Handle.close(self)
        comm, self.comm = self.comm, None
        if comm is not None:
            comm._release()

    @property
    def params(self):
        """The trainer's parameters (nctmc_trainer_params) as a dict."""
        p = N.new(N.TrainerParams)
        check(N.nctmc_trainer_get_params(self, ctypes.byref(p)), self._error)
        return _as_dict(p)

    @staticmethod
    def _stats(s):
        stats = {"step": s.step, "loss": s.loss, "grad_norm": s.grad_norm,
                 "learning_rate": s.learning_rate, "mean_log_rate": s.mean_log_rate,
                 "skipped": bool(s.skipped), "n_skipped": s.n_skipped}
        if N.HAVE_COMM:  # a library that appended it (older ones lack the key)
            stats["comm_seconds"] = s.comm_seconds
        return stats

    def step(self, tokens, labels=None):
        """One step on a batch [batch_size x accumulation, seq_len] of clean
        tokens; returns the step's statistics as a dict."""
        t = C.int32_array(tokens, "tokens")
        if t.size != self.step_rows * self.seq_len:
            raise ValueError("tokens must hold batch_size x accumulation x seq_len = %d x %d "
                             "values" % (self.step_rows, self.seq_len))
        lab = None if labels is None else C.int32_array(labels, "labels", count=self.step_rows)
        s = N.new(N.TrainStats)
        check(N.nctmc_trainer_step(self, _ptr(t), _ptr(lab), ctypes.byref(s)), self._error)
        return self._stats(s)

    def step_dataset(self, dataset):
        """One step on the next batch the trainer draws from `dataset`."""
        s = N.new(N.TrainStats)
        check(N.nctmc_trainer_step_dataset(self, dataset, ctypes.byref(s)), self._error)
        return self._stats(s)

    def train(self, data, steps, progress=True, callback=None):
        """Runs `steps` steps on a Dataset (or a shard's path). Shows a
        progress bar on stderr when progress is True; callback(stats) is
        called after every step (return False to stop early). Returns the
        last step's statistics."""
        ds = Dataset.open(data, ctx=self.model.context) if isinstance(data, (str, os.PathLike)) \
            else data
        bar = _ProgressBar(steps, sys.stderr) if progress else None
        stats = None
        for k in range(C.integer(steps, "steps", 0, C.INT64[1])):
            stats = self.step_dataset(ds)
            if bar:
                bar.update(k + 1, stats["loss"])
            if callback is not None and callback(stats) is False:
                break
        if bar:
            bar.close()
        return stats

    @property
    def state(self):
        s = N.new(N.TrainerState)
        check(N.nctmc_trainer_get_state(self, ctypes.byref(s)), self._error)
        return _as_dict(s)

    def copy_weights_to(self, model, ema=True):
        """Copies the EMA (or the raw) weights into another model of the same
        configuration."""
        check(N.nctmc_trainer_copy_weights(self, model, 1 if ema else 0), self._error)

    def save(self, path):
        """A resumable checkpoint; nctmc.Model.load reads its EMA weights."""
        check(N.nctmc_trainer_save(self, C.path(path)), self._error)


class _ProgressBar:
    """A one-line bar with steps/s, ETA and the loss (plain lines when the
    stream is not a terminal)."""

    def __init__(self, total, stream, width=30):
        self.total, self.stream, self.width = total, stream, width
        self.start = time.monotonic()
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.last_print = 0.0

    def update(self, done, loss):
        now = time.monotonic()
        if not self.tty and done != self.total and now - self.last_print < 5.0:
            return
        self.last_print = now
        elapsed = now - self.start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else 0.0
        filled = int(self.width * done / max(self.total, 1))
        line = "[%s%s] %d/%d  loss %.4f  %.1f steps/s  ETA %ds" % (
            "#" * filled, "." * (self.width - filled), done, self.total, loss, rate, eta)
        self.stream.write(("\r" + line) if self.tty else (line + "\n"))
        self.stream.flush()

    def close(self):
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
