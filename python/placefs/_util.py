# SPDX-License-Identifier: MIT
"""Small helpers shared by the modules of placefs."""

import gc
import warnings
from contextlib import contextmanager

_warned = set()


def warn_once(key, msg):
    """A RuntimeWarning, once per key per process, attributed to the caller's caller."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


@contextmanager
def gc_paused():
    """Python's cyclic collector off for the block, then on again unless the
    caller had turned it off (work that makes tens of thousands of objects and
    no cycles: each collection of the oldest generation walks every object of
    the process, torch's included)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
