# SPDX-License-Identifier: MIT
"""Small helpers shared by the modules of placefs."""

import warnings

_warned = set()


def warn_once(key, msg):
    """A RuntimeWarning, once per key per process, attributed to the caller's caller."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
