# SPDX-License-Identifier: MIT
"""The command line: placefs-load (or python3 -m placefs) MOUNTPOINT [options].

It loads every tensor of a mount, prints the LoadReport summary and, with
--verify, compares every result with a plain read() of its file. On a
terminal, a progress bar (bytes, rate, ETA; _progress.py, the layout of the
C tools') runs on stderr while it loads; --no-progress turns it off.
"""

import argparse
import sys

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
                    help="cuda:N or cpu (default: the mount's own staging device, as "
                         "load_state_dict: its CUDA ring's GPU when torch sees it, else cpu)")
    ap.add_argument("--mode", choices=("copy", "borrow"), default=None,
                    help="copy or borrow (default: INSTANTTENSOR_COPY, else copy)")
    ap.add_argument("--workers", type=int, default=4, help="tensors in flight (default 4)")
    ap.add_argument("--cpu", choices=("auto", "map", "read"), default=None,
                    help="cpu-placed tensors mapped from the source shards (map; auto: where "
                         "nobody else may write the shard) or read by the daemon into new "
                         "memory (read); default: PLACEFS_CPU, else auto")
    ap.add_argument("--verify", action="store_true",
                    help="compare every tensor with a plain read() of its file")
    ap.add_argument("--no-progress", action="store_true",
                    help="no progress bar (there is none anyway when stderr is not a terminal)")
    a = ap.parse_args(argv)
    try:
        # The loader's own bar (bytes as they land), labelled with the program's name.
        ld = _Loader(a.mountpoint, a.device, a.mode, a.workers, 0,
                     progress=False if a.no_progress else PROG, cpu=a.cpu)
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

