"""Context, model, tokenizer and dataset."""
import ctypes
import os

import numpy as np

from . import _check as C
from . import _native as N
from . import _preset
from ._handles import INVALID_ARGUMENT, Error, Handle, check
from ._interrupt import Interruptible

PROCESSES = {"uniform": 0, "masked": 1, "mixture": 2}
SCHEDULES = {"linear": 0, "cosine": 1, "loglinear": 2}
TIME_INPUTS = {"t": 0, "log_snr": 1}
EXIT_LINKS = {"sigma": 0, "noise_posterior": 1, "denoiser": 2}
# config fields whose values may be given by name
_NAMED = {"process": PROCESSES, "schedule": SCHEDULES, "time_input": TIME_INPUTS,
          "exit_link": EXIT_LINKS}
TOKENIZER_KINDS = {0: "bytes", 1: "chars", 2: "image", 3: "bpe"}
LOAD_MAPPINGS = {"auto": 0, "lazy": 1, "copy": 2}
WEIGHT_TYPES = {"f32": 0, "bf16": 1, "int8": 2}


def _ptr(a, ctype=ctypes.c_int32):
    return None if a is None else a.ctypes.data_as(ctypes.POINTER(ctype))


class Context(Handle):
    """The compute backend ("cpu", "cuda", "cuda-bf16" or "auto") and its threads.

    `threads=0` uses every core. Creation errors raise `Error` with the
    library's reason."""

    _free = N.nctmc_context_free

    def __init__(self, backend="auto", threads=0):
        p = N.new(N.ContextParams)
        backend = C.cstr(backend, "backend")
        p.backend = backend
        C.set_field(p, "n_threads", threads)
        err = ctypes.create_string_buffer(512)
        p.error_buffer = ctypes.cast(err, ctypes.POINTER(ctypes.c_char))
        p.error_buffer_size = len(err)
        out = ctypes.c_void_p()
        status = N.nctmc_context_create(ctypes.byref(p), ctypes.byref(out))
        check(status, lambda: err.value)
        super().__init__(out)

    @property
    def backend(self):
        return N.nctmc_context_backend(self).decode()

    @property
    def threads(self):
        return N.nctmc_context_n_threads(self)

    def _error(self):
        return N.nctmc_context_last_error(self)


def _default_context(ctx):
    return ctx if ctx is not None else Context()


def write_file(path, data, ctx=None):
    """Writes bytes to path the way the library writes its own files
    (nctmc_write_file): atomically through a temporary file beside it, a
    symbolic link written through, anything but a regular file refused."""
    data = C.data(data, "data")
    path = C.path(path)
    ctx = _default_context(ctx)
    check(N.nctmc_write_file(ctx, path, data, len(data)), ctx._error)


class Tokenizer(Handle):
    """Maps text (or images) to the model's data tokens and back."""

    _free = N.nctmc_tokenizer_free

    @classmethod
    def bytes(cls):
        out = ctypes.c_void_p()
        check(N.nctmc_tokenizer_create_bytes(ctypes.byref(out)))
        return cls(out)

    @classmethod
    def chars(cls, corpus):
        """A character tokenizer whose alphabet is every character of corpus."""
        data = C.text(corpus, "corpus")
        ctx = Context(backend="cpu", threads=1)
        out = ctypes.c_void_p()
        check(N.nctmc_tokenizer_create_chars(ctx, data, len(data), ctypes.byref(out)),
              ctx._error)
        return cls(out)

    @classmethod
    def image(cls, width, height, levels):
        """An image tokenizer: width x height pixels of `levels` grey levels,
        one token per pixel."""
        ctx = Context(backend="cpu", threads=1)
        out = ctypes.c_void_p()
        check(N.nctmc_tokenizer_create_image(ctx, C.int32(width, "width"),
                                             C.int32(height, "height"),
                                             C.int32(levels, "levels"), ctypes.byref(out)),
              ctx._error)
        return cls(out)

    @classmethod
    def load(cls, path):
        ctx = Context(backend="cpu", threads=1)
        out = ctypes.c_void_p()
        check(N.nctmc_tokenizer_load(ctx, C.path(path), ctypes.byref(out)), ctx._error)
        return cls(out)

    @classmethod
    def hf_json(cls, path):
        """A byte-level BPE from a Hugging Face tokenizer.json (GPT-2 style)."""
        ctx = Context(backend="cpu", threads=1)
        out = ctypes.c_void_p()
        check(N.nctmc_tokenizer_load_hf_json(ctx, C.path(path), ctypes.byref(out)),
              ctx._error)
        return cls(out)

    @classmethod
    def gpt2(cls, vocab_json, merges_txt):
        """A byte-level BPE from GPT-2's vocab.json and merges.txt."""
        ctx = Context(backend="cpu", threads=1)
        out = ctypes.c_void_p()
        check(N.nctmc_tokenizer_load_gpt2(ctx, C.path(vocab_json), C.path(merges_txt),
                                          ctypes.byref(out)), ctx._error)
        return cls(out)

    def pad_vocab(self, vocab_size):
        """Pads a BPE vocabulary to vocab_size ids (the extra ids have no text)."""
        check(N.nctmc_tokenizer_pad_vocab(self, C.int32(vocab_size, "vocab_size")), self._error)

    def _error(self):
        return N.nctmc_tokenizer_last_error(self)

    @property
    def kind(self):
        return TOKENIZER_KINDS[N.nctmc_tokenizer_get_kind(self)]

    @property
    def vocab_size(self):
        return N.nctmc_tokenizer_vocab_size(self)

    @property
    def image_shape(self):
        """An image tokenizer's (width, height, levels); raises for other kinds."""
        w, h, levels = ctypes.c_int32(), ctypes.c_int32(), ctypes.c_int32()
        check(N.nctmc_tokenizer_image_shape(self, ctypes.byref(w), ctypes.byref(h),
                                            ctypes.byref(levels)), self._error)
        return w.value, h.value, levels.value

    def save(self, path):
        check(N.nctmc_tokenizer_save(self, C.path(path)), self._error)

    def set_mask_placeholder(self, text):
        """Decode the mask token (id == vocab_size) as `text`; None: an error."""
        check(N.nctmc_tokenizer_set_mask_placeholder(
            self, None if text is None else C.cstr(text, "text")), self._error)

    def encode(self, text):
        """Text (str or bytes) to a 1-D int32 array of tokens."""
        data = C.text(text, "text")
        n = ctypes.c_size_t()
        status = N.nctmc_tokenizer_encode(self, data, len(data), None, 0, ctypes.byref(n))
        if status != 0 and n.value == 0:
            check(status, self._error)
        out = np.empty(n.value, dtype=np.int32)
        check(N.nctmc_tokenizer_encode(self, data, len(data), _ptr(out), out.size,
                                       ctypes.byref(n)), self._error)
        return out

    def decode(self, tokens):
        """A 1-D sequence of tokens to text (str; bytes that are not UTF-8
        are replaced)."""
        a = C.int32_array(tokens, "tokens").ravel()
        n = ctypes.c_size_t()
        status = N.nctmc_tokenizer_decode(self, _ptr(a), a.size, None, 0, ctypes.byref(n))
        if status != 0 and n.value == 0:
            check(status, self._error)
        buf = ctypes.create_string_buffer(n.value + 1)
        check(N.nctmc_tokenizer_decode(self, _ptr(a), a.size, buf, len(buf), ctypes.byref(n)),
              self._error)
        return buf.raw[:n.value].decode("utf-8", "replace")


class Dataset(Handle):
    """A token shard written by `nctmc prepare` or `Dataset.write`."""

    _free = N.nctmc_dataset_free

    @staticmethod
    def write(path, tokens, vocab_size, seq_len=0, labels=None, n_classes=0, ctx=None):
        """Writes a shard: a stream (seq_len 0) or [n, seq_len] sequences."""
        t = C.int32_array(tokens, "tokens").ravel()
        vocab_size, seq_len = C.int32(vocab_size, "vocab_size"), C.int32(seq_len, "seq_len")
        n_classes = C.int32(n_classes, "n_classes")
        lab = None
        if labels is not None:  # one per sequence: seq_len must cut the tokens whole
            if seq_len <= 0 or t.size % seq_len:
                raise ValueError("labels need seq_len > 0 dividing the %d tokens (seq_len %d)"
                                 % (t.size, seq_len))
            lab = C.int32_array(labels, "labels", count=t.size // seq_len)
        path = C.path(path)
        ctx = _default_context(ctx)
        check(N.nctmc_dataset_write(ctx, path, _ptr(t), t.size, vocab_size, seq_len, _ptr(lab),
                                    n_classes), ctx._error)

    @classmethod
    def open(cls, path, ctx=None):
        ctx = _default_context(ctx)
        out = ctypes.c_void_p()
        check(N.nctmc_dataset_open(ctx, C.path(path), ctypes.byref(out)), ctx._error)
        return cls(out)

    def _error(self):
        return N.nctmc_dataset_last_error(self)

    @property
    def info(self):
        i = N.new(N.DatasetInfo)
        check(N.nctmc_dataset_get_info(self, ctypes.byref(i)), self._error)
        return {f: getattr(i, f) for f, _ in N.DatasetInfo._fields_[1:]}

    def read(self, first, count):
        """count tokens from token `first` (int32 array)."""
        first, count = C.integer(first, "first", *C.INT64), C.integer(count, "count", *C.INT64)
        if count < 0 or first < 0 or count > self.info["n_tokens"] - first:
            raise ValueError("tokens [%d, %d) are not within the shard's %d"
                             % (first, first + count, self.info["n_tokens"]))
        out = np.empty(count, dtype=np.int32)
        check(N.nctmc_dataset_read_tokens(self, first, count, _ptr(out)), self._error)
        return out

    def label(self, index):
        """The class label of sequence `index` (a shard written with labels)."""
        out = ctypes.c_int32()
        check(N.nctmc_dataset_read_label(self, C.integer(index, "index", *C.INT64),
                                         ctypes.byref(out)), self._error)
        return out.value


class DatasetWriter(Handle):
    """Writes a shard of any length in fixed memory (nctmc_dataset_writer_*):
    tokens are appended in pieces and the file appears at `path`, replaced
    atomically, only at `commit()`. Shards without labels.

    As a context manager it commits when the block ends normally; when the
    block raises, nothing is written (the partial shard is removed)::

        with nctmc.DatasetWriter("train.bin", vocab_size=256) as w:
            for chunk in chunks:
                w.append(chunk)
        print(w.info["n_tokens"])
    """

    _free = N.nctmc_dataset_writer_free

    def __init__(self, path, vocab_size, seq_len=0, ctx=None):
        ctx = _default_context(ctx)
        out = ctypes.c_void_p()
        check(N.nctmc_dataset_writer_create(ctx, C.path(path), C.int32(vocab_size, "vocab_size"),
                                            C.int32(seq_len, "seq_len"), ctypes.byref(out)),
              ctx._error)
        super().__init__(out)
        self.path = path
        #: what commit() wrote (the dict of Dataset.info), None before
        self.info = None

    def _error(self):
        return N.nctmc_dataset_writer_last_error(self)

    def append(self, tokens):
        """Appends tokens (any shape; read in C order) in [0, vocab_size); a
        token out of range appends nothing of this call and raises."""
        t = C.int32_array(tokens, "tokens").ravel()
        check(N.nctmc_dataset_writer_append(self, _ptr(t), t.size), self._error)

    def commit(self):
        """Completes the shard and renames it into place; returns (and keeps
        in `info`) what was written, the checksum included. Refused when no
        token was appended or the count is not whole sequences; after a
        commit, successful or not, the writer only closes."""
        i = N.new(N.DatasetInfo)
        check(N.nctmc_dataset_writer_commit(self, ctypes.byref(i)), self._error)
        self.info = {f: getattr(i, f) for f, _ in N.DatasetInfo._fields_[1:]}
        return self.info

    def __exit__(self, exc_type, *exc):
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.close()


def _reliability(r):
    """nctmc_eval_result's reliability table as arrays [bucket, nu bin]."""
    cells = [[r.reliability[b][k] for k in range(N.EVAL_NU_BINS)]
             for b in range(N.EVAL_BUCKETS)]

    def table(field, dtype):
        return np.array([[getattr(c, field) for c in row] for row in cells], dtype)

    return {"t_edges": np.array([r.buckets[0].t_lo] + [b.t_hi for b in r.buckets]),
            "count": table("count", np.int64), "n_noisy": table("n_noisy", np.int64),
            "mean_nu": table("mean_nu", np.float64),
            "observed_noisy": table("observed_noisy", np.float64),
            "ece_bucket": np.array(r.ece_bucket[:], np.float64)}


class Model(Handle):
    """A Neural CTMC: DiT weights, configuration and (optionally) tokenizer."""

    _free = N.nctmc_model_free

    def __init__(self, ptr, ctx):
        super().__init__(ptr)
        self.context = ctx

    @classmethod
    def create(cls, ctx=None, preset=None, **config):
        """A freshly initialised model. Keyword arguments set the fields of
        nctmc_model_config (vocab_size, seq_len, n_layers, d_model, n_heads,
        cond_dim, n_classes, seed, ...); process, schedule, time_input and
        exit_link take names ("uniform", "masked", "mixture"; "linear",
        "cosine", "loglinear"; "t", "log_snr"; "sigma", "noise_posterior",
        "denoiser").
        preset names a recipe (nctmc.presets()) whose configuration the
        keyword arguments then override."""
        ctx = _default_context(ctx)
        c = N.new(N.ModelConfig)
        if preset is not None:
            _preset.apply(preset, config=c)
        for key, value in config.items():
            if key not in dict(N.ModelConfig._fields_) or key == "struct_size":
                raise TypeError("unknown model setting %r" % key)
            if key in _NAMED and isinstance(value, str):
                if value not in _NAMED[key]:
                    raise ValueError("%s must be one of %s" % (key, ", ".join(_NAMED[key])))
                value = _NAMED[key][value]
            C.set_field(c, key, value)
        out = ctypes.c_void_p()
        check(N.nctmc_model_create(ctx, ctypes.byref(c), ctypes.byref(out)), ctx._error)
        return cls(out, ctx)

    @classmethod
    def load(cls, path, ctx=None, mapping="auto"):
        """Loads a checkpoint (nctmc_model_save / nctmc_trainer_save).
        mapping: "auto" (map the file on the CPU backend after checking it
        all), "lazy" (map without reading every value first) or "copy"
        (nctmc_model_load_ex, docs/formats.md "Memory-mapped loading")."""
        ctx = _default_context(ctx)
        p = N.LoadParams()
        N.nctmc_load_params_init_sized(ctypes.byref(p), ctypes.sizeof(p))
        if mapping not in LOAD_MAPPINGS:
            raise ValueError("mapping must be one of %s" % ", ".join(LOAD_MAPPINGS))
        p.mapping = LOAD_MAPPINGS[mapping]
        out = ctypes.c_void_p()
        check(N.nctmc_model_load_ex(ctx, C.path(path), ctypes.byref(p),
                                    ctypes.byref(out)), ctx._error)
        return cls(out, ctx)

    @property
    def mapped(self):
        """True when the weights are a read-only map of the checkpoint file."""
        return bool(N.nctmc_model_is_mapped(self))

    @property
    def weight_type(self):
        """How the linear layers hold their weights: "f32", "bf16" or "int8"."""
        return {v: k for k, v in WEIGHT_TYPES.items()}[N.nctmc_model_weight_type(self)]

    def convert(self, to):
        """A sampling-only copy whose linear layers hold `to` ("bf16" or
        "int8") weights (nctmc_model_convert; docs/model.md "Reduced-precision
        weights"). It samples, evaluates, runs forward and saves; training it
        is refused. The model itself is unchanged."""
        if isinstance(to, str):
            if to not in WEIGHT_TYPES:
                raise ValueError("to must be one of %s" % ", ".join(WEIGHT_TYPES))
            to = WEIGHT_TYPES[to]
        out = ctypes.c_void_p()
        check(N.nctmc_model_convert(self, C.int32(to, "to"), ctypes.byref(out)), self._error)
        return type(self)(out, self.context)

    @classmethod
    def from_bytes(cls, data, ctx=None):
        """Loads a checkpoint held in memory (bytes, bytearray, memoryview)."""
        data = C.data(data, "data")
        ctx = _default_context(ctx)
        buf = (ctypes.c_char * len(data)).from_buffer_copy(data)
        out = ctypes.c_void_p()
        check(N.nctmc_model_load_memory(ctx, buf, len(data), ctypes.byref(out)), ctx._error)
        return cls(out, ctx)

    @classmethod
    def from_file_object(cls, f, size, ctx=None):
        """Loads a checkpoint through a seekable binary file object (for
        example a member of a zip archive), reading it piece by piece. A
        read(n) must return bytes, at most n of them: anything else stops
        the load with `Error` (never more than n bytes are copied)."""
        size = C.integer(size, "size", 0, C.INT64[1])
        ctx = _default_context(ctx)
        failure = []

        def read_at(_user, dst, n, offset):
            try:
                f.seek(offset)
                chunk = f.read(n)
                if not isinstance(chunk, (bytes, bytearray, memoryview)):
                    raise TypeError("read(%d) returned %s, not bytes" % (n, type(chunk).__name__))
                chunk = bytes(chunk)
                if len(chunk) > n:  # the library's buffer holds n: copy nothing
                    raise ValueError("read(%d) returned %d bytes, more than asked"
                                     % (n, len(chunk)))
                ctypes.memmove(dst, chunk, len(chunk))
                return len(chunk)
            except Exception as e:  # reported after the call, as an IO error
                failure.append(e)
                return -1

        r = N.new(N.Reader)
        r.size = size
        r.read_at = N.READ_AT_FN(read_at)
        out = ctypes.c_void_p()
        status = N.nctmc_model_load_reader(ctx, ctypes.byref(r), ctypes.byref(out))
        if failure:
            if status == 0:  # the library did not need what failed: a model leaked otherwise
                N.nctmc_model_free(out)
            raise Error(status or INVALID_ARGUMENT,
                        "reading the file object failed: %s" % failure[0])
        check(status, ctx._error)
        return cls(out, ctx)

    def _error(self):
        return N.nctmc_model_last_error(self)

    def save(self, path):
        check(N.nctmc_model_save(self, C.path(path)), self._error)

    @property
    def config(self):
        c = N.new(N.ModelConfig)
        check(N.nctmc_model_get_config(self, ctypes.byref(c)), self._error)
        d = {f: getattr(c, f) for f, _ in N.ModelConfig._fields_[1:]}
        for key, names in _NAMED.items():
            d[key] = {v: k for k, v in names.items()}[d[key]]
        return d

    seq_len = property(lambda self: N.nctmc_model_seq_len(self))
    vocab_size = property(lambda self: N.nctmc_model_vocab_size(self))
    n_classes = property(lambda self: N.nctmc_model_n_classes(self))
    n_params = property(lambda self: N.nctmc_model_n_params(self))

    @property
    def mask_token(self):
        """The mask token's id, or None for the uniform process."""
        m = N.nctmc_model_mask_token(self)
        return None if m < 0 else m

    @property
    def process(self):
        return {v: k for k, v in PROCESSES.items()}[N.nctmc_model_process(self)]

    @property
    def tokenizer(self):
        """A copy of the model's tokenizer (None when it has none). For a
        masked model the mask token decodes as "_"."""
        t = N.nctmc_model_get_tokenizer(self)
        if not t:
            return None
        out = ctypes.c_void_p()
        check(N.nctmc_tokenizer_clone(t, ctypes.byref(out)))
        tok = Tokenizer(out)
        if self.mask_token is not None:
            tok.set_mask_placeholder("_")
        return tok

    @tokenizer.setter
    def tokenizer(self, tok):
        check(N.nctmc_model_set_tokenizer(self, tok), self._error)

    @property
    def tensors(self):
        """The named parameter tensors (float32), in the model's fixed order:
        a dict name -> shape, as SEDD / MDLM / GIDD checkpoints name them."""
        out = {}
        for k in range(N.nctmc_model_n_tensors(self)):
            i = N.new(N.TensorInfo)
            check(N.nctmc_model_tensor_info(self, k, ctypes.byref(i)), self._error)
            out[i.name.decode()] = tuple(i.shape[:i.n_dims])
        return out

    def _tensor_shape(self, name):
        index = ctypes.c_int32()
        check(N.nctmc_model_find_tensor(self, C.cstr(name, "name"), ctypes.byref(index)),
              self._error)
        i = N.new(N.TensorInfo)
        check(N.nctmc_model_tensor_info(self, index.value, ctypes.byref(i)), self._error)
        return tuple(i.shape[:i.n_dims])

    def read_tensor(self, name):
        """A copy of the named tensor as a float32 array of its shape (a
        converted model's reduced weights dequantised)."""
        out = np.empty(self._tensor_shape(name), np.float32)
        check(N.nctmc_model_read_tensor(self, C.cstr(name, "name"), _ptr(out, ctypes.c_float),
                                        out.size), self._error)
        return out

    def write_tensor(self, name, values):
        """Overwrites the named tensor with values (its element count, read
        in C order). Non-finite values, a wrong count, or a converted
        model's reduced weight raise and leave the tensor unchanged."""
        v = C.float32_array(values, "values").ravel()
        check(N.nctmc_model_write_tensor(self, C.cstr(name, "name"), _ptr(v, ctypes.c_float),
                                         v.size),
              self._error)

    def forward(self, tokens, times, labels=None, ctx=None):
        """Evaluates the model at (x_t, t): returns (log_rate [B, L],
        jump_logprobs [B, L, S]). With ctx (a Context of the model's
        backend) the call computes on it and stores its errors there
        (nctmc_model_forward_ex): threads may then run forward on one model
        at once, each with its own context."""
        x = C.int32_array(tokens, "tokens")
        if x.ndim == 1:
            x = x[None, :]
        if x.ndim != 2:
            raise ValueError("tokens must be [length] or [batch, length]")
        b, length = x.shape
        t = np.ascontiguousarray(np.broadcast_to(C.float32_array(times, "times"), (b,)))
        lab = None if labels is None else C.int32_array(labels, "labels", count=b)
        log_rate = np.empty((b, length), np.float32)
        jump = np.empty((b, length, self.vocab_size), np.float32)
        p = N.new(N.ForwardParams)
        p.batch, p.length = b, length
        p.tokens, p.times, p.labels = _ptr(x), _ptr(t, ctypes.c_float), _ptr(lab)
        p.log_rate, p.jump_logprobs = _ptr(log_rate, ctypes.c_float), _ptr(jump, ctypes.c_float)
        if ctx is None:
            check(N.nctmc_model_forward(self, ctypes.byref(p)), self._error)
        else:
            check(N.nctmc_model_forward_ex(self, ctx, ctypes.byref(p)), ctx._error)
        return log_rate, jump

    def sampler(self, max_batch=8, max_length=0):
        """A sampler for batches of up to max_batch sequences."""
        from ._sampler import Sampler
        return Sampler(self, max_batch, max_length)

    def eval(self, tokens, labels=None, time_samples=16, batch_size=8, seed=0,
             time_sampling="uniform", comm=None):
        """The NELBO of held-out sequences [n, L] in bits per token, with its
        standard error, and the exit-rate reliability table: returns a dict
        (see docs/python.md). time_sampling "sqrt" spreads the time samples
        evenly in sqrt(t), importance-weighted (same NELBO, another
        variance; library 0.6.0 or later). comm (a nctmc.Comm) shares the
        forward passes over its ranks: every rank calls eval with the same
        model, sequences and parameters (collective) and gets one process's
        result bit for bit."""
        from ._comm import as_comm
        comm = as_comm(comm)
        if time_sampling not in _preset.TIME_SAMPLINGS:
            raise ValueError("time_sampling must be uniform or sqrt")
        x = C.int32_array(tokens, "tokens")
        if x.ndim == 1:
            x = x[None, :]
        if x.ndim != 2:
            raise ValueError("tokens must be [length] or [n, length]")
        lab = None if labels is None else C.int32_array(labels, "labels", count=x.shape[0])
        p = N.new(N.EvalParams)
        p.n_sequences, p.length = x.shape
        p.tokens, p.labels = _ptr(x), _ptr(lab)
        C.set_field(p, "n_time_samples", time_samples)
        C.set_field(p, "batch_size", batch_size)
        C.set_field(p, "seed", seed)
        p.time_sampling = _preset.TIME_SAMPLINGS[time_sampling]
        r = N.new(N.EvalResult)
        stop = Interruptible()
        # the library's cancel (0 from the callback) once Ctrl-C arrived
        progress = N.EVAL_PROGRESS(lambda done, total, user: 0 if stop() else 1)
        p.progress = progress
        if comm is not None:
            p.comm = comm._use()  # not freed while the call runs
        try:
            with stop:
                status = N.nctmc_eval(self, ctypes.byref(p), ctypes.byref(r))
        finally:
            if comm is not None:
                comm._release()
        check(status, self._error)
        return {"nelbo_bits_per_token": r.nelbo_bits_per_token,
                "std_error_bits": r.std_error_bits,
                "prior_bits_per_token": r.prior_bits_per_token,
                "mean_loss": r.mean_loss, "n_tokens": r.n_tokens, "t_max": r.t_max,
                "ece": r.ece, "reliability": _reliability(r)}
