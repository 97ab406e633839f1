"""Named training recipes (nctmc.h, "Presets"): a model configuration,
trainer parameters and the backend they are meant for."""
import ctypes

from . import _check as C
from . import _native as N
from ._handles import check

#: nctmc_trainer_params.time_sampling by name
TIME_SAMPLINGS = {"uniform": 0, "logit": 1, "sqrt": 2}


def presets():
    """Every preset the library offers, as dicts with name, description and
    backend (the value for Context(backend=...))."""
    out = []
    k = 0
    while N.nctmc_preset_name(k) is not None:
        name = N.nctmc_preset_name(k)
        out.append({"name": name.decode(),
                    "description": N.nctmc_preset_description(name).decode(),
                    "backend": N.nctmc_preset_backend(name).decode()})
        k += 1
    return out


def apply(name, config=None, params=None):
    """Writes preset `name` into a ModelConfig and/or TrainerParams struct
    (either may be None); raises nctmc.Error (NOT_FOUND, listing the
    presets) for an unknown name."""
    err = ctypes.create_string_buffer(512)
    status = N.nctmc_preset_apply(C.cstr(name, "preset"), ctypes.byref(config) if config else None,
                                  ctypes.byref(params) if params else None, err,
                                  ctypes.sizeof(err))
    check(status, lambda: err.value)
