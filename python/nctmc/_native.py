"""The C library, its structs and its function prototypes (ctypes).

Every struct here mirrors one in <nctmc.h> field for field; the test suite
compiles a C program that prints the header's sizes and offsets and compares
them with these
(python/tests/test_binding.py::test_struct_layouts_match_the_header).
"""
import ctypes
import ctypes.util
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_double, c_float,
                    c_int32, c_int64, c_size_t, c_uint8, c_uint32, c_uint64,
                    c_void_p)

#: the ABI this binding was written for: the library's soname major
ABI_MAJOR = 1
#: the oldest library version (MAJOR*10000 + MINOR*100 + PATCH) it accepts:
#: 0.5.0 — its functions are 0.4.0's (symbol node NCTMC_1.2), and its
#: TrainerParams carries 0.5.0's activation_recompute, which an older library
#: would not see (the field lies in what was the struct's padding)
MIN_VERSION = 500


#: the library inside the package, where `pip install` put it (absent when the
#: package was built with -Dbundle_library=false, or used from a checkout)
BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libnctmc.so.%d" % ABI_MAJOR)


def _candidates():
    """NCTMC_LIBRARY=<path>: that file. NCTMC_LIBRARY=system: the loader's
    libnctmc (the distribution's), even beside a bundled one. Unset: the
    library bundled in the package, else the loader's."""
    explicit = os.environ.get("NCTMC_LIBRARY")
    if explicit and explicit != "system":
        return [explicit]
    names = []
    if not explicit and os.path.exists(BUNDLED):
        names.append(BUNDLED)
    names.append("libnctmc.so.%d" % ABI_MAJOR)
    found = ctypes.util.find_library("nctmc")
    if found:
        names.append(found)
    return names


def _load():
    errors = []
    for name in _candidates():
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            errors.append("%s: %s" % (name, e))
    raise ImportError("nctmc: cannot load the C library libnctmc (set NCTMC_LIBRARY to its "
                      "path, or install it where the loader finds it): " + "; ".join(errors))


def _check_version(library):
    """Refuses, before any prototype is looked up, a library older than the
    functions declared below (an older one would lack some of them)."""
    library.nctmc_version_number.restype = c_int32
    library.nctmc_version.restype = c_char_p
    if library.nctmc_version_number() < MIN_VERSION:
        raise ImportError("nctmc: the C library is version %s; this binding needs %d.%d.%d or "
                          "newer" % (library.nctmc_version().decode(), MIN_VERSION // 10000,
                                     MIN_VERSION // 100 % 100, MIN_VERSION % 100))


lib, LIBRARY = _load()  # LIBRARY: the name or path it was loaded from
_check_version(lib)

# ---------------------------------------------------------------- callbacks
LOG_FN = CFUNCTYPE(None, c_int32, c_char_p, c_void_p)
SAMPLE_CALLBACK = CFUNCTYPE(c_int32, c_int32, c_int32, POINTER(c_int32), c_int32, c_int32,
                            c_void_p)
EVAL_PROGRESS = CFUNCTYPE(c_int32, c_int64, c_int64, c_void_p)
ALLOC_FN = CFUNCTYPE(c_void_p, c_size_t, c_size_t, c_void_p)
FREE_FN = CFUNCTYPE(None, c_void_p, c_void_p)
READ_AT_FN = CFUNCTYPE(c_int64, c_void_p, c_void_p, c_size_t, c_int64)


# ---------------------------------------------------------------- structs
class ContextParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("backend", c_char_p),
        ("n_threads", c_int32),
        ("log_fn", LOG_FN),
        ("log_user_data", c_void_p),
        ("log_level", c_int32),
        ("error_buffer", POINTER(c_char)),
        ("error_buffer_size", c_size_t),
        ("alloc_fn", ALLOC_FN),
        ("free_fn", FREE_FN),
        ("alloc_user_data", c_void_p),
    ]


class ModelConfig(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("vocab_size", c_int32),
        ("vocab_pad_multiple", c_int32),
        ("seq_len", c_int32),
        ("n_layers", c_int32),
        ("d_model", c_int32),
        ("n_heads", c_int32),
        ("cond_dim", c_int32),
        ("n_classes", c_int32),
        ("process", c_int32),
        ("schedule", c_int32),
        ("mixture_uniform", c_float),
        ("schedule_eps", c_float),
        ("seed", c_uint64),
        ("time_input", c_int32),
        ("exit_link", c_int32),
    ]


MAX_DIMS = 4


class TensorInfo(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("n_dims", c_int32),
        ("shape", c_int64 * MAX_DIMS),
        ("n_elements", c_int64),
    ]


class ForwardParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("batch", c_int32),
        ("length", c_int32),
        ("tokens", POINTER(c_int32)),
        ("times", POINTER(c_float)),
        ("labels", POINTER(c_int32)),
        ("log_rate", POINTER(c_float)),
        ("jump_logprobs", POINTER(c_float)),
    ]


class Reader(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("size", c_int64),
        ("read_at", READ_AT_FN),
        ("user_data", c_void_p),
    ]


class LoadParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("mapping", c_int32),
        ("reserved0", c_int32),
        ("progress", EVAL_PROGRESS),
        ("user_data", c_void_p),
    ]


class DatasetInfo(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("vocab_size", c_int32),
        ("seq_len", c_int32),
        ("n_classes", c_int32),
        ("n_tokens", c_int64),
        ("n_sequences", c_int64),
        ("checksum", c_uint32),
    ]


class TrainerParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("batch_size", c_int32),
        ("seq_len", c_int32),
        ("learning_rate", c_float),
        ("min_lr_ratio", c_float),
        ("warmup_steps", c_int64),
        ("total_steps", c_int64),
        ("beta1", c_float),
        ("beta2", c_float),
        ("adam_eps", c_float),
        ("weight_decay", c_float),
        ("grad_clip", c_float),
        ("ema_decay", c_float),
        ("time_eps", c_float),
        ("label_dropout", c_float),
        ("seed", c_uint64),
        ("time_sampling", c_int32),
        ("activation_recompute", c_int32),
        # appended after 0.7.0; an older library leaves it 0 and refuses a
        # non-zero value it cannot see
        ("accumulation", c_int32),
        # nctmc_comm * (data-parallel training): Trainer(comm=) sets it
        ("comm", c_void_p),
    ]


class TrainStats(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("step", c_int64),
        ("loss", c_double),
        ("grad_norm", c_double),
        ("learning_rate", c_double),
        ("mean_log_rate", c_double),
        ("skipped", c_int32),
        ("n_skipped", c_int64),
        # appended after 0.7.0, with the communicator (HAVE_COMM): the
        # seconds a data-parallel step spent summing the gradients
        ("comm_seconds", c_double),
    ]


class TrainerState(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("step", c_int64),
        ("optimizer_steps", c_int64),
        ("data_position", c_int64),
        ("n_skipped", c_int64),
        ("seed", c_uint64),
    ]


class RateBucket(Structure):
    _fields_ = [
        ("t_lo", c_double),
        ("t_hi", c_double),
        ("median_rate_clean", c_double),
        ("median_rate_noisy", c_double),
        ("true_rate_clean", c_double),
        ("true_rate_noisy", c_double),
        ("n_clean", c_int64),
        ("n_noisy", c_int64),
    ]


EVAL_BUCKETS = 8
EVAL_NU_BINS = 10


class ReliabilityCell(Structure):
    _fields_ = [
        ("count", c_int64),
        ("n_noisy", c_int64),
        ("mean_nu", c_double),
        ("observed_noisy", c_double),
    ]


class EvalParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("n_sequences", c_int64),
        ("length", c_int32),
        ("tokens", POINTER(c_int32)),
        ("labels", POINTER(c_int32)),
        ("batch_size", c_int32),
        ("n_time_samples", c_int32),
        ("t_max", c_float),
        ("seed", c_uint64),
        ("progress", EVAL_PROGRESS),
        ("user_data", c_void_p),
        ("time_sampling", c_int32),     # 0.6.0
        ("reserved0", c_int32),         # 0.8.0: what was padding, always 0
        # appended after 0.7.0: nctmc_comm * (evaluation over ranks):
        # Model.eval(comm=) sets it
        ("comm", c_void_p),
    ]


class EvalResult(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("nelbo_bits_per_token", c_double),
        ("std_error_bits", c_double),
        ("prior_bits_per_token", c_double),
        ("mean_loss", c_double),
        ("n_tokens", c_int64),
        ("t_max", c_double),
        ("buckets", RateBucket * EVAL_BUCKETS),
        ("reliability", (ReliabilityCell * EVAL_NU_BINS) * EVAL_BUCKETS),
        ("ece_bucket", c_double * EVAL_BUCKETS),
        ("ece", c_double),
        ("n_reliability", c_int64),
    ]


class SamplerParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("max_batch", c_int32),
        ("max_length", c_int32),
        ("ctx", c_void_p),
    ]


class SampleParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("batch", c_int32),
        ("length", c_int32),
        ("method", c_int32),
        ("n_steps", c_int32),
        ("grid", c_int32),
        ("t_max", c_float),
        ("t_min", c_float),
        ("temperature", c_float),
        ("final_denoise", c_int32),
        ("fixed_tokens", POINTER(c_int32)),
        ("fixed_mask", POINTER(c_uint8)),
        ("labels", POINTER(c_int32)),
        ("cfg_scale", c_float),
        ("correction_steps", c_int32),
        ("correction_temperature", c_float),
        ("correction_time", c_float),
        ("seed", c_uint64),
        ("first_sequence", c_int64),
        ("callback", SAMPLE_CALLBACK),
        ("user_data", c_void_p),
        ("tokens_out", POINTER(c_int32)),
        ("cfg_rule", c_int32),
        ("correction_mode", c_int32),
    ]


class TextRange(Structure):
    """nctmc_text_range: a half-open byte range (not versioned: fixed layout)."""
    _fields_ = [
        ("start", c_size_t),
        ("end", c_size_t),
    ]


#: nctmc_infill_params.range_tokens entry: the default number of slots
INFILL_AUTO_TOKENS = -1


class InfillParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("sample", POINTER(SampleParams)),
        ("range_tokens", POINTER(c_int32)),
        ("ranges_out", POINTER(TextRange)),
    ]


#: every struct, by its C name (the layout test walks this; all but
#: nctmc_text_range are versioned and have an *_init_sized)
STRUCTS = {
    "nctmc_context_params": ContextParams,
    "nctmc_model_config": ModelConfig,
    "nctmc_tensor_info": TensorInfo,
    "nctmc_forward_params": ForwardParams,
    "nctmc_reader": Reader,
    "nctmc_load_params": LoadParams,
    "nctmc_dataset_info": DatasetInfo,
    "nctmc_trainer_params": TrainerParams,
    "nctmc_train_stats": TrainStats,
    "nctmc_trainer_state": TrainerState,
    "nctmc_rate_bucket": RateBucket,
    "nctmc_reliability_cell": ReliabilityCell,
    "nctmc_eval_params": EvalParams,
    "nctmc_eval_result": EvalResult,
    "nctmc_sampler_params": SamplerParams,
    "nctmc_sample_params": SampleParams,
    "nctmc_infill_params": InfillParams,
    "nctmc_text_range": TextRange,
}

# ---------------------------------------------------------------- functions
H = c_void_p          # an opaque handle
PH = POINTER(c_void_p)
STATUS = c_int32


#: makes the exception a closed handle raises (nctmc.Error; set by _handles)
CLOSED_ERROR = ValueError


def _fn(name, restype, *argtypes):
    """Declares a C function: module attribute `name` calls it. ctypes wraps
    a failed argument conversion into ctypes.ArgumentError, which says
    little and is no TypeError: a closed handle becomes nctmc.Error, any
    other conversion failure TypeError."""
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)

    def call(*args):
        try:
            return f(*args)
        except ctypes.ArgumentError as e:
            closed = [a for a in args if getattr(a, "closed", False) is True]
            if closed:
                raise CLOSED_ERROR("%s is closed" % type(closed[0]).__name__) from None
            raise TypeError("%s: %s" % (name, e)) from None
    call.__name__ = name
    call.c_function = f
    globals()[name] = call


for _name, _struct in [("context_params", ContextParams), ("model_config", ModelConfig),
                       ("forward_params", ForwardParams), ("reader", Reader),
                       ("dataset_info", DatasetInfo), ("trainer_params", TrainerParams),
                       ("train_stats", TrainStats), ("trainer_state", TrainerState),
                       ("eval_params", EvalParams), ("eval_result", EvalResult),
                       ("sampler_params", SamplerParams), ("sample_params", SampleParams),
                       ("load_params", LoadParams), ("infill_params", InfillParams),
                       ("tensor_info", TensorInfo)]:
    _fn("nctmc_%s_init_sized" % _name, STATUS, POINTER(_struct), c_size_t)

_fn("nctmc_version", c_char_p)
_fn("nctmc_version_number", c_int32)
_fn("nctmc_status_string", c_char_p, STATUS)

_fn("nctmc_context_create", STATUS, POINTER(ContextParams), PH)
_fn("nctmc_context_free", None, H)
_fn("nctmc_context_backend", c_char_p, H)
_fn("nctmc_context_n_threads", c_int32, H)
_fn("nctmc_context_last_error", c_char_p, H)

_fn("nctmc_model_create", STATUS, H, POINTER(ModelConfig), PH)
_fn("nctmc_model_free", None, H)
_fn("nctmc_model_get_config", STATUS, H, POINTER(ModelConfig))
_fn("nctmc_model_last_error", c_char_p, H)
_fn("nctmc_model_n_params", c_int64, H)
_fn("nctmc_model_seq_len", c_int32, H)
_fn("nctmc_model_vocab_size", c_int32, H)
_fn("nctmc_model_mask_token", c_int32, H)
_fn("nctmc_model_n_classes", c_int32, H)
_fn("nctmc_model_process", c_int32, H)
_fn("nctmc_model_forward", STATUS, H, POINTER(ForwardParams))
_fn("nctmc_model_forward_ex", STATUS, H, H, POINTER(ForwardParams))
_fn("nctmc_model_n_tensors", c_int32, H)
_fn("nctmc_model_tensor_info", STATUS, H, c_int32, POINTER(TensorInfo))
_fn("nctmc_model_find_tensor", STATUS, H, c_char_p, POINTER(c_int32))
_fn("nctmc_model_read_tensor", STATUS, H, c_char_p, POINTER(c_float), c_int64)
_fn("nctmc_model_write_tensor", STATUS, H, c_char_p, POINTER(c_float), c_int64)
_fn("nctmc_model_save", STATUS, H, c_char_p)
_fn("nctmc_model_load", STATUS, H, c_char_p, PH)
_fn("nctmc_model_load_memory", STATUS, H, c_void_p, c_size_t, PH)
_fn("nctmc_model_load_reader", STATUS, H, POINTER(Reader), PH)
_fn("nctmc_model_load_ex", STATUS, H, c_char_p, POINTER(LoadParams), PH)
_fn("nctmc_model_is_mapped", c_int32, H)
_fn("nctmc_model_weight_type", c_int32, H)
_fn("nctmc_model_convert", STATUS, H, c_int32, PH)
_fn("nctmc_model_set_tokenizer", STATUS, H, H)
_fn("nctmc_model_get_tokenizer", H, H)

_fn("nctmc_tokenizer_create_bytes", STATUS, PH)
_fn("nctmc_tokenizer_create_chars", STATUS, H, c_char_p, c_size_t, PH)
_fn("nctmc_tokenizer_create_image", STATUS, H, c_int32, c_int32, c_int32, PH)
_fn("nctmc_tokenizer_clone", STATUS, H, PH)
_fn("nctmc_tokenizer_free", None, H)
_fn("nctmc_tokenizer_get_kind", c_int32, H)
_fn("nctmc_tokenizer_vocab_size", c_int32, H)
_fn("nctmc_tokenizer_image_shape", STATUS, H, POINTER(c_int32), POINTER(c_int32),
    POINTER(c_int32))
_fn("nctmc_tokenizer_encode", STATUS, H, c_char_p, c_size_t, POINTER(c_int32), c_size_t,
    POINTER(c_size_t))
_fn("nctmc_tokenizer_decode", STATUS, H, POINTER(c_int32), c_size_t, POINTER(c_char),
    c_size_t, POINTER(c_size_t))
_fn("nctmc_tokenizer_set_mask_placeholder", STATUS, H, c_char_p)
_fn("nctmc_tokenizer_last_error", c_char_p, H)
_fn("nctmc_tokenizer_load", STATUS, H, c_char_p, PH)
_fn("nctmc_tokenizer_save", STATUS, H, c_char_p)
_fn("nctmc_tokenizer_load_hf_json", STATUS, H, c_char_p, PH)
_fn("nctmc_tokenizer_load_gpt2", STATUS, H, c_char_p, c_char_p, PH)
_fn("nctmc_tokenizer_pad_vocab", STATUS, H, c_int32)

_fn("nctmc_dataset_write", STATUS, H, c_char_p, POINTER(c_int32), c_int64, c_int32, c_int32,
    POINTER(c_int32), c_int32)
_fn("nctmc_dataset_open", STATUS, H, c_char_p, PH)
_fn("nctmc_dataset_free", None, H)
_fn("nctmc_dataset_get_info", STATUS, H, POINTER(DatasetInfo))
_fn("nctmc_dataset_read_tokens", STATUS, H, c_int64, c_int64, POINTER(c_int32))
_fn("nctmc_dataset_read_label", STATUS, H, c_int64, POINTER(c_int32))
_fn("nctmc_dataset_last_error", c_char_p, H)
_fn("nctmc_dataset_writer_create", STATUS, H, c_char_p, c_int32, c_int32, PH)
_fn("nctmc_dataset_writer_append", STATUS, H, POINTER(c_int32), c_int64)
_fn("nctmc_dataset_writer_commit", STATUS, H, POINTER(DatasetInfo))
_fn("nctmc_dataset_writer_free", None, H)
_fn("nctmc_dataset_writer_last_error", c_char_p, H)

_fn("nctmc_trainer_create", STATUS, H, POINTER(TrainerParams), PH)
_fn("nctmc_trainer_free", None, H)
_fn("nctmc_trainer_step", STATUS, H, POINTER(c_int32), POINTER(c_int32), POINTER(TrainStats))
_fn("nctmc_trainer_step_dataset", STATUS, H, H, POINTER(TrainStats))
_fn("nctmc_trainer_get_state", STATUS, H, POINTER(TrainerState))
_fn("nctmc_trainer_get_params", STATUS, H, POINTER(TrainerParams))
_fn("nctmc_trainer_copy_weights", STATUS, H, H, c_int32)
_fn("nctmc_trainer_save", STATUS, H, c_char_p)
_fn("nctmc_trainer_resume", STATUS, H, c_char_p, POINTER(TrainerParams), PH, PH)
_fn("nctmc_trainer_inspect", STATUS, H, c_char_p, POINTER(TrainerParams),
    POINTER(TrainerState))
_fn("nctmc_trainer_last_error", c_char_p, H)

_fn("nctmc_preset_name", c_char_p, c_int32)
_fn("nctmc_preset_description", c_char_p, c_char_p)
_fn("nctmc_preset_backend", c_char_p, c_char_p)
_fn("nctmc_preset_apply", STATUS, c_char_p, POINTER(ModelConfig), POINTER(TrainerParams),
    POINTER(c_char), c_size_t)

_fn("nctmc_write_file", STATUS, H, c_char_p, c_void_p, c_size_t)

_fn("nctmc_eval", STATUS, H, POINTER(EvalParams), POINTER(EvalResult))

_fn("nctmc_sampler_create", STATUS, H, POINTER(SamplerParams), PH)
_fn("nctmc_sampler_free", None, H)
_fn("nctmc_sample", STATUS, H, POINTER(SampleParams))
_fn("nctmc_sample_params_from_model", STATUS, H, POINTER(SampleParams))
_fn("nctmc_sampler_cancel", None, H)
_fn("nctmc_sampler_last_error", c_char_p, H)
_fn("nctmc_infill", STATUS, H, H, c_char_p, c_size_t, POINTER(TextRange), c_int32,
    POINTER(InfillParams), POINTER(c_char), c_size_t, POINTER(c_size_t))

#: the communicator (symbol node NCTMC_1.3, after 0.7.0, which also appended
#: nctmc_trainer_params.comm, nctmc_eval_params.comm and
#: nctmc_train_stats.comm_seconds): declared only when the library has it,
#: so that an older library still loads (nctmc.Comm then raises UNSUPPORTED)
HAVE_COMM = hasattr(lib, "nctmc_comm_from_env")
if HAVE_COMM:
    _fn("nctmc_comm_from_env", STATUS, PH, POINTER(c_char), c_size_t)
    _fn("nctmc_comm_from_mpi", STATUS, c_void_p, PH, POINTER(c_char), c_size_t)
    _fn("nctmc_comm_rank", c_int32, H)
    _fn("nctmc_comm_size", c_int32, H)
    _fn("nctmc_comm_engine", c_char_p, H)
    _fn("nctmc_comm_broadcast", STATUS, H, c_void_p, c_int64, c_int32)
    _fn("nctmc_comm_barrier", STATUS, H)
    _fn("nctmc_comm_abort", None, H, c_int32)
    _fn("nctmc_comm_last_error", c_char_p, H)
    _fn("nctmc_comm_free", None, H)


def new(struct_type):
    """A struct filled with the library's defaults (its *_init_sized)."""
    s = struct_type()
    name = {v: k for k, v in STRUCTS.items()}[struct_type]
    init = globals()["%s_init_sized" % name]
    status = init(ctypes.byref(s), ctypes.sizeof(s))
    if status != 0:
        raise RuntimeError("%s_init_sized failed with status %d" % (name, status))
    return s
