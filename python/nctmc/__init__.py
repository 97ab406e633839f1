"""nctmc — Python binding for libnctmc (Neural CTMC discrete diffusion).

    import nctmc
    model = nctmc.Model.load("digits.safetensors")
    sampler = model.sampler(max_batch=4)
    tokens = sampler.sample(batch=4, steps=64, seed=1)      # int32 [4, L]
    print(model.tokenizer.decode(tokens[0]))

`pip install` puts the C library inside the package (nctmc/libnctmc.so.1),
which is loaded first; NCTMC_LIBRARY=<path> loads that file instead, and
NCTMC_LIBRARY=system the loader's libnctmc.so.1 (a distribution's). See
docs/python.md.
"""
from . import _native
from ._comm import Comm
from ._handles import Cancelled, Error
from ._model import Context, Dataset, DatasetWriter, Model, Tokenizer, write_file
from ._preset import presets
from ._sampler import Sampler
from ._trainer import Trainer

#: this binding's version (the C library's is library_version())
__version__ = "0.7.0"

__all__ = ["__version__", "Cancelled", "Comm", "Context", "Dataset", "DatasetWriter", "Error", "Model", "Sampler",
           "Tokenizer", "Trainer", "library_version", "presets", "write_file"]


def library_version():
    """The linked C library's version string."""
    return _native.nctmc_version().decode()

