"""Errors, and the owner of one C handle.

Every C call that fails raises an `Error` carrying the status code and the
message the library stored in the handle the call was made on. Handles are
reference counted inside the library, so a Python object may be collected
in any order (a sampler after its model, a model after its context).
"""
import ctypes

from . import _native as N

OK = 0
INVALID_ARGUMENT = 1
OUT_OF_MEMORY = 2
UNSUPPORTED = 3
NOT_FOUND = 4
BACKEND = 5
IO = 6
FORMAT = 7
CANCELLED = 8
NON_FINITE = 9


class Error(Exception):
    """A libnctmc call failed: `status` is the C status code, `message` the
    library's explanation."""

    def __init__(self, status, message):
        self.status = status
        self.message = message
        name = N.nctmc_status_string(status).decode()
        super().__init__("%s (%s)" % (message or name, name))


class Cancelled(Error):
    """A progress callback (or `Sampler.cancel`) stopped the call."""


def _closed(message):
    return Error(INVALID_ARGUMENT, message)


N.CLOSED_ERROR = _closed


def check(status, last_error=None):
    """Raises for a non-zero status, with the message last_error() gives."""
    if status == OK:
        return
    msg = last_error() if last_error else b""
    msg = msg.decode("utf-8", "replace") if isinstance(msg, bytes) else (msg or "")
    cls = Cancelled if status == CANCELLED else Error
    raise cls(status, msg)


class Handle:
    """Owns one C handle and frees it exactly once."""

    _free = None  # the nctmc_*_free function, set by each subclass

    def __init__(self, ptr):
        self._ptr = ctypes.c_void_p(ptr.value if isinstance(ptr, ctypes.c_void_p) else ptr)

    @property
    def closed(self):
        """True once close() ran: every call on the object then raises
        `Error` (status INVALID_ARGUMENT)."""
        return not self._ptr.value

    @property
    def _as_parameter_(self):
        if not self._ptr.value:  # _native's wrapper raises Error for it
            raise ValueError("%s is closed" % type(self).__name__)
        return self._ptr

    def close(self):
        """Releases the C handle now (also done when the object is collected)."""
        ptr, self._ptr = self._ptr, ctypes.c_void_p()
        if ptr.value and type(self)._free is not None:
            type(self)._free(ptr)

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
