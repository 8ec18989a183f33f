# SPDX-License-Identifier: MIT
"""python3 -m placefs MOUNTPOINT [...]: the same command as placefs-load."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
