# SPDX-License-Identifier: MIT
"""The command line: placefs-load (or python3 -m placefs) MOUNTPOINT [options].

It loads every tensor of a mount, prints the LoadReport summary and, with
--verify, compares every result with a plain read() of its file.
"""

import argparse
import sys

from . import _torch
from .loader import _Loader
from .mount import _read_file

PROG = "placefs-load"

def _verify(ld, out):
    """Compares every result's bytes with a plain read() of its file; returns failures."""
    torch = ld.torch
    bad = []
    for t in ld.mount.tensors:
        ref = _read_file(t.path, t.nbytes, "tensor %r" % t.name)
        raw = ld.raw[t.name]
        if torch is not None:
            got = raw.detach().to("cpu")
            ok = got.numel() == len(ref) and (len(ref) == 0 or torch.equal(
                got, torch.frombuffer(ref, dtype=torch.uint8)))
        else:
            ok = bytes(raw) == bytes(ref)
        if not ok:
            bad.append(t.name)
            print("verify: tensor %r (%s, %s) differs from its file" % (t.name, t.placement,
                                                                          t.path),
                  file=out)
    return bad


def main(argv=None):
    """The command line; returns the exit status (0, or 1 on an error or a --verify failure)."""
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="Load every tensor of a placefs mount and print a summary.")
    ap.add_argument("mountpoint")
    ap.add_argument("--device", default=None,
                    help="cuda:N or cpu (default: cuda:0 when torch sees a GPU, else cpu)")
    ap.add_argument("--mode", choices=("copy", "borrow"), default=None,
                    help="copy or borrow (default: INSTANTTENSOR_COPY, else copy)")
    ap.add_argument("--workers", type=int, default=4, help="tensors in flight (default 4)")
    ap.add_argument("--verify", action="store_true",
                    help="compare every tensor with a plain read() of its file")
    a = ap.parse_args(argv)
    dev = a.device
    if dev is None:
        torch = _torch.get()
        dev = "cuda:0" if torch is not None and torch.cuda.is_available() else "cpu"
    try:
        ld = _Loader(a.mountpoint, dev, a.mode, a.workers, 0)
        try:
            sd = ld.run()
        finally:
            ld.mount.close()
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 1
    print(ld.report.summary())
    if a.verify:
        bad = _verify(ld, sys.stderr)
        print("verify: %d of %d tensors byte-exact" % (len(sd) - len(bad), len(sd)))
        if bad:
            return 1
    return 0

