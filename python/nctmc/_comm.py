"""The communicator of a data-parallel job (nctmc_comm): its ranks, a
broadcast, a barrier, an abort; Trainer(..., comm=) and Model.eval(...,
comm=) take it (docs/python.md, "Several processes").

Lifetime. The C rule is "free the communicator after the trainers that use
it". A Trainer (and a running eval) registers itself as a user of its Comm
and holds a reference to it; Comm.close() while users remain closes the
Python object at once (every later call on it raises) and frees the C
handle when the last user lets go (Trainer.close(), or its collection), so
the C handle never goes before a trainer that holds it, in whatever order
the garbage collector finalises them.
"""
import ctypes
import os
import re

from . import _check as C
from . import _native as N
from ._handles import INVALID_ARGUMENT, UNSUPPORTED, Error, Handle, check

_ERROR_SIZE = 1024


def _available():
    if not N.HAVE_COMM:
        raise Error(UNSUPPORTED, "this libnctmc (%s, %s) has no communicator (nctmc_comm_*, "
                    "added after 0.7.0)" % (N.nctmc_version().decode(), N.LIBRARY))


class Comm(Handle):
    """The ranks of a data-parallel job and the engine they talk through
    ("mpi", or "none" for the world of one). Make it with `Comm.from_env()`
    or `Comm.from_mpi4py(comm)`; close it (or use it as a context manager)
    after the trainers. Creation and freeing are collective: every rank
    calls them."""

    def __init__(self, ptr):
        Handle.__init__(self, ptr)
        self._users = 0      # trainers (and running evals) that use it
        self._pending = None  # the C handle close() left to the last user

    @classmethod
    def _make(cls, create):
        _available()
        err = ctypes.create_string_buffer(_ERROR_SIZE)
        out = ctypes.c_void_p()
        status = create(ctypes.byref(out), err)
        check(status, lambda: err.value)
        return cls(out)

    @classmethod
    def from_env(cls):
        """The communicator of the job the launcher started (mpirun, srun,
        a torchrun-style launcher: nctmc_comm_from_env()); a process started
        alone is the world of one. Collective."""
        return cls._make(lambda out, err: N.nctmc_comm_from_env(out, err, len(err)))

    @classmethod
    def from_mpi4py(cls, comm):
        """A communicator over an mpi4py communicator (nctmc_comm_from_mpi(),
        which duplicates it; MPI stays initialised after close()). mpi4py
        must use the MPI library that libnctmc-mpi.so was built with:
        checked where the module can be found (it is loaded, and must bring
        no MPI library of its own beside mpi4py's). Collective over comm."""
        _available()
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise Error(UNSUPPORTED, "Comm.from_mpi4py needs mpi4py, which cannot be imported "
                        "(%s); Comm.from_env() needs nothing" % e) from None
        if not isinstance(comm, MPI.Comm):
            raise TypeError("comm must be an mpi4py MPI.Comm, not %s" % type(comm).__name__)
        if comm == MPI.COMM_NULL:
            raise ValueError("comm is MPI.COMM_NULL")
        if not MPI.Is_initialized() or MPI.Is_finalized():
            raise Error(INVALID_ARGUMENT, "MPI is not initialised (or already finalised)")
        _check_same_mpi(MPI)
        address = MPI._addressof(comm)
        return cls._make(lambda out, err: N.nctmc_comm_from_mpi(ctypes.c_void_p(address), out,
                                                                err, len(err)))

    def _error(self):
        return N.nctmc_comm_last_error(self)

    @property
    def rank(self):
        """This process's rank, 0 .. size - 1."""
        return N.nctmc_comm_rank(self)

    @property
    def size(self):
        """The number of ranks."""
        return N.nctmc_comm_size(self)

    @property
    def engine(self):
        """"mpi", or "none" for the world of one."""
        return N.nctmc_comm_engine(self).decode()

    def barrier(self):
        """Waits until every rank has called it."""
        check(N.nctmc_comm_barrier(self), self._error)

    def broadcast(self, buffer, root=0, nbytes=None):
        """Copies the first nbytes bytes (default: all) of rank root's buffer
        into buffer on every rank, in place, and returns buffer. buffer is
        a writable C-contiguous object with the buffer protocol (bytearray,
        numpy array, ...), as long on every rank. Collective."""
        try:
            view = memoryview(buffer)
        except TypeError:
            raise TypeError("buffer must support the buffer protocol (bytearray, numpy array), "
                            "not %s" % type(buffer).__name__) from None
        if view.readonly:
            raise TypeError("buffer is read-only: broadcast writes into it on every rank but "
                            "root")
        if not view.c_contiguous:
            raise ValueError("buffer must be C-contiguous")
        size = view.nbytes
        count = size if nbytes is None else C.integer(nbytes, "nbytes", 0, C.INT64[1])
        if count > size:
            raise ValueError("nbytes = %d is more than the buffer's %d bytes" % (count, size))
        root = C.int32(root, "root")
        n = self.size
        if not 0 <= root < n:
            raise ValueError("root = %d is not a rank of this communicator (0 .. %d)"
                             % (root, n - 1))
        # the bytes themselves (held until the call returns), never a copy
        target = (ctypes.c_char * size).from_buffer(view.cast("B")) if size else None
        check(N.nctmc_comm_broadcast(self, target, count, root), self._error)
        return buffer

    def abort(self, code=1):
        """Ends every rank's process with exit status code (MPI_Abort): for
        a failure the other ranks cannot see. Does nothing in the world of
        one (the caller exits on its own)."""
        N.nctmc_comm_abort(self, C.int32(code, "code"))

    # ---- lifetime: trainers and evals are users ---------------------------
    def _use(self):
        """Registers a user (a trainer, a running eval); returns the C
        handle for it. A closed Comm raises."""
        if self.closed:
            raise Error(INVALID_ARGUMENT, "Comm is closed")
        self._users += 1
        return self._ptr

    def _release(self):
        self._users -= 1
        if self._users == 0 and self._pending is not None:
            ptr, self._pending = self._pending, None
            N.nctmc_comm_free(ptr)

    def close(self):
        """Closes the communicator: every later call on this object raises.
        The C handle is freed now, or, while a Trainer (or an eval) still
        uses it, when the last of them is closed or collected. Collective
        when it frees (it may finalise MPI, see Comm.from_env)."""
        ptr, self._ptr = self._ptr, ctypes.c_void_p()
        if not ptr.value:
            return
        if self._users > 0:
            self._pending = ptr
        else:
            N.nctmc_comm_free(ptr)


def as_comm(comm):
    """None, or a Comm (anything else is refused)."""
    if comm is not None and not isinstance(comm, Comm):
        raise TypeError("comm must be a nctmc.Comm or None, not %s" % type(comm).__name__)
    return comm


# ---- is mpi4py's MPI the module's? ------------------------------------------
_MPI_FILE = re.compile(r"/lib(mpi|mpich|open-pal|open-rte|pmi|pmix|impi|msmpi)[^/]*\.so[^/]*$")


def _mapped_files():
    try:
        with open("/proc/self/maps") as f:
            return {line.split(None, 5)[5].strip() for line in f
                    if len(line.split(None, 5)) == 6}
    except OSError:
        return None


def _library_folder():
    """The folder of the libnctmc this process loaded (where the library
    looks for its modules), or None."""
    address = ctypes.cast(N.lib.nctmc_version, ctypes.c_void_p).value
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if lo <= address < hi and len(parts) == 6:
                    return os.path.dirname(parts[5].strip())
    except (OSError, ValueError):
        pass
    return None


def mpi_module_path():
    """The file libnctmc loads as its MPI module: $NCTMC_MPI_MODULE, else
    libnctmc-mpi.so beside the library; None when neither exists."""
    env = os.environ.get("NCTMC_MPI_MODULE")
    if env:
        return env if os.path.exists(env) else None
    folder = _library_folder()
    if folder:
        path = os.path.join(folder, "libnctmc-mpi.so")
        if os.path.exists(path):
            return path
    return None


def _check_same_mpi(MPI):
    """Loads the MPI module and refuses when it brings an MPI library of its
    own: an MPI_Comm of mpi4py's MPI would then be read as another MPI's
    (a crash, not an error). Nothing to check without /proc or without the
    module (nctmc_comm_from_mpi() then reports the missing module)."""
    module = mpi_module_path()
    before = _mapped_files()
    if module is None or before is None:
        return
    try:
        ctypes.CDLL(module, mode=os.RTLD_LOCAL | os.RTLD_NOW)
    except OSError as e:
        raise Error(UNSUPPORTED, "the MPI module %s cannot be loaded: %s" % (module, e)) from None
    added = sorted(f for f in _mapped_files() - before if _MPI_FILE.search(f))
    if added:
        raise Error(UNSUPPORTED, "mpi4py uses another MPI library (%s) than the MPI module %s, "
                    "which loads %s: pass a communicator of the module's MPI, or use "
                    "Comm.from_env()" % (MPI.Get_library_version().splitlines()[0].strip(),
                                         module, ", ".join(added)))
