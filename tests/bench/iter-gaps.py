# SPDX-License-Identifier: MIT
"""iter_weights on a fresh mount: where the stream pauses, with and without
.placefs/columns.jsonl (issue #13).

A fresh mount's iterator starts from the head of plan.json; the rest of the
plan comes chunk by chunk from columns.jsonl ("chunks"), or, as from a
daemon older than that file, all at once ("whole": placefs.plan.column_chunks
made to answer None, so the whole plan is parsed when the iteration first
needs it). Each round mounts afresh for each way, alternating, and times the
pass from the return of the mount command to the last item (each item kept,
as a loader keeps its state dict; torch.cuda.synchronize at the end on a
GPU), the first item, and the longest pause between two items with where it
came (item index). Where the daemon reports them (.placefs/stats), each line
ends with its CUDA IPC imports: how many, the time in them, and how many
requests waited for another's import.

  python3 tests/bench/iter-gaps.py PLACEFS_BIN OPTS SOURCE MOUNTPOINT
          [--rounds N] [--device D] [--window BYTES] [--against PLACEFS_BIN2]

OPTS: the mount's -o options (e.g. device=cuda:0, or device=host with
--device cpu on a machine without a GPU). --window: iter_weights'
window_bytes (default its own, 2 GiB: scale it with the checkpoint when the
checkpoint is small, so that as few batches are in flight as on a large one).
--against: a third way in each round, "against": the chunks way through
another build of the daemon (an A/B of two commits on one machine).
Prints one line per pass and the medians per way.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import placefs  # noqa: E402
from placefs import plan as _plan  # noqa: E402


def mount(args, binary=None):
    subprocess.run([binary or args.placefs, "-o", args.opts, args.source, args.mnt], check=True)


def umount(mnt):
    subprocess.run(["fusermount3", "-u", mnt], check=True)


def imports(mnt):
    """The daemon's destination imports so far, as text; "" when it does not say."""
    try:
        with open(os.path.join(mnt, ".placefs", "stats")) as f:
            st = json.load(f).get("staging", {})
    except (OSError, ValueError):
        return ""
    if "dest_imports" not in st:
        return ""
    return "; %d imports in %.1f ms, %d waited" % (
        st["dest_imports"], st["dest_import_ns"] / 1e6, st["dest_import_waits"])


def one(args, way, torch):
    real = _plan.column_chunks
    if way == "whole":
        _plan.column_chunks = lambda mountpoint: None
    try:
        mount(args, args.against if way == "against" else None)
        keep, nb = [], 0
        t0 = last = time.perf_counter()
        first, gap, at = None, 0.0, 0
        try:
            for i, (name, t) in enumerate(placefs.iter_weights(
                    args.mnt, device=args.device, mode="copy", window_bytes=args.window)):
                now = time.perf_counter()
                if first is None:
                    first = now - t0
                elif now - last > gap:
                    gap, at = now - last, i
                last = now
                keep.append(t)
                nb += t.numel() * t.element_size() if torch is not None else t.nbytes
            if torch is not None and args.device != "cpu":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            imp = imports(args.mnt)
        finally:
            del keep
            umount(args.mnt)
    finally:
        _plan.column_chunks = real
    print("%-7s %d items, %d bytes in %.3f s (%.2f GB/s); first item %.1f ms; longest pause "
          "%.1f ms, before item %d%s" % (way, i + 1, nb, dt, nb / dt / 1e9, first * 1e3,
                                         gap * 1e3, at, imp), flush=True)
    return dt, gap


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("placefs")
    ap.add_argument("opts")
    ap.add_argument("source")
    ap.add_argument("mnt")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--window", type=int, default=None)
    ap.add_argument("--against", default=None)
    args = ap.parse_args()
    try:
        import torch
        if args.device != "cpu":
            torch.empty(1, device=args.device)  # a process that already has CUDA
    except ImportError:
        torch = None
    ways = ("chunks", "whole") + (("against",) if args.against else ())
    res = {way: [] for way in ways}
    for _ in range(args.rounds):
        for way in ways:
            res[way].append(one(args, way, torch))
    for way, r in res.items():
        print("median %-7s pass %.3f s, longest pause %.1f ms" % (
            way, statistics.median(x[0] for x in r), statistics.median(x[1] for x in r) * 1e3))


if __name__ == "__main__":
    main()
