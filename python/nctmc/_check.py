"""What the binding checks before a value crosses into C.

ctypes converts silently: a float array cast to int32, 2**32 + 3 stored as
3, -1 in a uint64_t as 2**64 - 1, bytes(5) as five NUL bytes, and an array
shorter than the count the C call is given is read past its end. Every
value the binding hands the library goes through one of these functions,
which return exactly what C is promised or raise TypeError (wrong kind of
value) or ValueError (right kind, out of range or of the wrong length).
"""
import ctypes
import numbers
import operator
import os

import numpy as np

INT32 = (-2**31, 2**31 - 1)
INT64 = (-2**63, 2**63 - 1)
UINT32 = (0, 2**32 - 1)
UINT64 = (0, 2**64 - 1)
SIZE = (0, 2**63 - 1)  # sizes and counts: int64_t in C, size_t on 64 bits

_RANGES = {ctypes.c_int32: INT32, ctypes.c_int64: INT64, ctypes.c_uint32: UINT32,
           ctypes.c_uint64: UINT64, ctypes.c_size_t: SIZE, ctypes.c_uint8: (0, 255)}


def integer(value, what, lo=INT32[0], hi=INT32[1]):
    """value as a Python int in [lo, hi]: an int, numpy integer or bool
    (anything with __index__); a float, even 2.0, is refused."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError("%s must be an integer, not %s" % (what, type(value).__name__)) from None
    if not lo <= v <= hi:
        raise ValueError("%s = %d is out of range [%d, %d]" % (what, v, lo, hi))
    return v


def int32(value, what):
    return integer(value, what, *INT32)


def real(value, what):
    """value as a Python float: an int or float (numpy's included)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError("%s must be a number, not %s" % (what, type(value).__name__))
    return float(value)


def set_field(struct, key, value):
    """struct.key = value, checked against the field's C type."""
    ctype = dict(type(struct)._fields_)[key]
    if ctype in _RANGES:
        value = integer(value, key, *_RANGES[ctype])
    elif ctype in (ctypes.c_float, ctypes.c_double):
        value = real(value, key)
    else:
        raise TypeError("%s cannot be set from Python" % key)
    setattr(struct, key, value)


def int32_array(values, what, count=None, shape=None):
    """values as a C-contiguous int32 array of its own (a view's elements
    copied out, never the buffer behind it): integers only — a float, bool,
    string or object array is refused — each in int32's range. count: the
    exact number of elements the C call reads; shape: reshaped to it (the
    element count must match)."""
    if isinstance(values, (str, bytes, bytearray, memoryview)):
        raise TypeError("%s must be integers, not %s" % (what, type(values).__name__))
    a = np.asarray(values)
    if a.dtype.kind not in "iu" and not (a.size == 0 and a.dtype.kind == "f"):
        raise TypeError("%s must be integers, not %s" % (what, a.dtype))
    if a.size and a.dtype.kind in "iu" and (a.min() < INT32[0] or a.max() > INT32[1]):
        raise ValueError("%s must be in int32's range [%d, %d]" % (what, INT32[0], INT32[1]))
    a = np.array(a, dtype=np.int32, order="C", copy=True)
    if count is not None and a.size != count:
        raise ValueError("%s holds %d values; the call reads exactly %d" % (what, a.size, count))
    if shape is not None:
        if a.size != int(np.prod(shape)):
            raise ValueError("%s holds %d values, not %s" % (what, a.size, "x".join(
                str(d) for d in shape)))
        a = a.reshape(shape)
    return a


def mask_array(values, what, shape):
    """A [shape] uint8 array of 0/1 from booleans or integers."""
    a = np.asarray(values)
    if a.dtype.kind not in "biu":
        raise TypeError("%s must be booleans or integers, not %s" % (what, a.dtype))
    if a.size != int(np.prod(shape)):
        raise ValueError("%s holds %d values, not %s" % (what, a.size,
                                                         "x".join(str(d) for d in shape)))
    return np.ascontiguousarray((a != 0).reshape(shape), dtype=np.uint8)


def float32_array(values, what):
    """values as a C-contiguous float32 array of its own (numbers only)."""
    if isinstance(values, (str, bytes, bytearray, memoryview)):
        raise TypeError("%s must be numbers, not %s" % (what, type(values).__name__))
    a = np.asarray(values)
    if a.dtype.kind not in "biuf":
        raise TypeError("%s must be numbers, not %s" % (what, a.dtype))
    return np.array(a, dtype=np.float32, order="C", copy=True)


def data(value, what):
    """Bytes from a bytes-like object (bytes, bytearray, memoryview, a
    contiguous buffer); an int (bytes(5) would be five NUL bytes), a str or
    anything else is refused."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError("%s must be bytes-like, not %s" % (what, type(value).__name__))


def text(value, what):
    """UTF-8 bytes of a str, or the bytes of a bytes-like object."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError("%s must be str or bytes, not %s" % (what, type(value).__name__))


def cstr(value, what):
    """A NUL-terminated string for C: str (UTF-8) or bytes without NUL."""
    b = text(value, what)
    if b"\0" in b:
        raise ValueError("%s contains a NUL byte" % what)
    return b


def path(value, what="path"):
    """A file path for C (str, bytes or os.PathLike) without NUL bytes
    (C would read a shorter path than the one given)."""
    try:
        b = os.fsencode(value)
    except TypeError:
        raise TypeError("%s must be a str, bytes or os.PathLike, not %s"
                        % (what, type(value).__name__)) from None
    if b"\0" in b:
        raise ValueError("%s contains a NUL byte" % what)
    return b
