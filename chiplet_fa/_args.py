"""Checks of the Python API's arguments, shared by chiplet_fa.attention, the flash-attention
wrappers and chiplet_fa.explain.

Each bad argument raises a ValueError naming it before any op is called, where torch's argument
parser would raise a TypeError of its own (q=None, an int past int64) or convert the value
silently (a float window size or max_seqlen truncated to an int). What the ops check themselves
(shapes, dtypes, devices, ranges) is left to them, so their messages stay the only ones.
"""
import math
import numbers
import operator

import torch

_INT64 = (-(1 << 63), (1 << 63) - 1)


def _error(fn, name, what, value):
    shown = f"a {value.dtype} tensor" if isinstance(value, torch.Tensor) else repr(value)
    return ValueError(f"chiplet_fa.{fn}: {name} must be {what}, got {shown}")


def tensor(fn, name, value):
    if not isinstance(value, torch.Tensor):
        raise _error(fn, name, "a torch.Tensor", value)
    return value


def optional_tensor(fn, name, value):
    return None if value is None else tensor(fn, name, value)


def integer(fn, name, value):
    """An int in int64; a 0-d integer tensor is read once (transformers passes max_seqlen so)."""
    try:
        number = operator.index(value)  # ints and integer tensors of one element, never a float
    except TypeError:
        raise _error(fn, name, "an integer", value) from None
    if not _INT64[0] <= number <= _INT64[1]:
        raise _error(fn, name, "an integer in int64", number)
    return number


def optional_integer(fn, name, value):
    return None if value is None else integer(fn, name, value)


def real(fn, name, value):
    """A finite real number, as a float. (Compared with infinity rather than passed to
    math.isfinite, which torch.compile cannot trace.)"""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not -math.inf < value < math.inf:
        raise _error(fn, name, "a finite number", value)
    return float(value)


def optional_real(fn, name, value):
    return None if value is None else real(fn, name, value)


def window(fn, window_size):
    """flash-attention's window_size: a pair (left, right) of integers, any negative unbounded (-1)."""
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise _error(fn, "window_size", "a pair (left, right) of integers", window_size) from None
    return tuple(max(integer(fn, "window_size", side), -1) for side in (left, right))


def softcap(fn, value):
    """flash-attention's softcap: a finite number, <= 0 for none (0.0)."""
    value = real(fn, "softcap", value)
    return value if value > 0 else 0.0


def mapping(fn, value):
    if not isinstance(value, str):
        raise _error(fn, "mapping", "a string ('auto' or a policy name)", value)
    return value
