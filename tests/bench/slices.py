#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One rank's tensor-parallel part against the whole checkpoint, on fresh mounts
(tests/bench/slices.sh; issue #16).

    slices.py single PLACEFS OPTS SRC MNT [--device D] [--worlds 2,4,8] [--repeat N]
                     [--ceiling GBPS] [--no-verify]
    slices.py pair PLACEFS OPTS SRC MNT --devices D0,D1[,...] [--repeat N] [--no-verify]
    slices.py worker MNT SRC DEVICE RANK WORLD [--no-verify]      (one process of pair)

single: in this process (CUDA set up before any clock runs), per repetition:
the whole checkpoint, load_state_dict(MNT, device=D, mode="copy"), then rank
0's part, shard=(0, N), for each N; every load on a FRESH mount (placefs -o
OPTS SRC MNT right before it, fusermount3 -u right after, as
tests/bench/oneshot.py does), timed from the mount command's return to the
last tensor in place (torch.cuda.synchronize()). Printed per load: the bytes
moved (the stats' staged and read bytes: what reached the device or host
memory), seconds, GB/s, x the --ceiling, the time against the whole load of
the same repetition (ideal 1/N) and the bytes the daemon read into its ring
(more than moved: whole tensors prefetched beside the slices); then a table
of the best repetition of each. Each result is compared with the source
after the clock stops (tests/py/slices_gpu.py: torch slicing of load_file, or
without torch the file's bytes), unless --no-verify.

pair: one mount of every device in --devices (OPTS names them), one worker
process per device (device "cuda:R", not CUDA_VISIBLE_DEVICES; "cpu" for host
stand-ins), each with its CUDA context and reference ready before the first
mount; per repetition, on a fresh mount each: both load the whole checkpoint
at the same moment, then both their part shard=(R, len(devices)). Printed:
each worker's seconds and GB/s, the pair's wall time (the go to the last
result) and the bytes per device in the stats, which must be each worker's
own (a worker's ring is its device's; with host stand-ins a whole load goes
to the first ring, as the loader does). Every result is verified.

D "cuda:N" needs torch; "cpu" (host rings) runs without it. Exit 1 when a
result differs or a count is off.
"""
import os
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "py"))

import placefs  # noqa: E402
from oneshot import mount, umount  # noqa: E402  (fresh mounts timed as oneshot.py times them)
from slices_gpu import equal, expect, part, reference, ring_moved, stats  # noqa: E402


def fail(msg):
    sys.exit("slices.py: " + msg)


def options(argv, spec):
    """--name value / --flag parsing into a dict; spec: name -> default (False: a flag)."""
    out = dict(spec)
    while argv:
        k = argv.pop(0)
        name = k[2:] if k.startswith("--") else None
        if name not in spec:
            fail("unknown argument %r" % k)
        out[name] = True if spec[name] is False else argv.pop(0)
    return out


class Loads:
    """load_state_dict on a mount, verified afterwards against the source."""

    def __init__(self, src, device, verify):
        self.device = device
        self.cuda = device.startswith("cuda")
        self.torch = placefs._torch.get()
        if self.cuda:
            if self.torch is None:
                fail("device %s needs torch" % device)
            self.torch.empty(1, device=device)  # the CUDA context before any clock
            self.torch.cuda.synchronize()
        self.ref = reference(src) if verify else None

    def load(self, mnt, shard):
        """(state dict, perf_counter() when the last tensor was in place, expect() of it)."""
        sd = placefs.load_state_dict(mnt, device=self.device, mode="copy", shard=shard)
        if self.cuda:
            self.torch.cuda.synchronize()
        t_end = time.perf_counter()
        m = placefs.Mount(mnt)
        try:
            exp = expect(m.tensors, shard)
        finally:
            m.close()
        return sd, t_end, exp

    def verify(self, sd, exp, what):
        """Every tensor equal to its part of the source: "verified", or the first mismatches."""
        if self.ref is None:
            return "not verified"
        bad = [name for name, v in sd.items()
               if not equal(v, part(self.ref, name, exp.plan.get(name)))]
        if len(sd) != len(self.ref):
            bad.insert(0, "%d tensors, the source has %d" % (len(sd), len(self.ref)))
        return "verified" if not bad else "%s: MISMATCH %r" % (what, bad[:4])

    def free(self):
        if self.cuda:
            self.torch.cuda.empty_cache()


def moved(st, pos=None):
    """Bytes staged (copy and borrow) on device row pos (None: all) plus STAGE_READ's."""
    rows = st["devices"] if pos is None else [st["devices"][pos]]
    n = sum(d["staged"][k]["bytes"] for d in rows for k in ("copy", "borrow"))
    return n + (st["read"]["bytes"] if pos is None else 0)


def single(placefs_bin, opts, src, mnt, argv):
    o = options(argv, {"device": "cuda:0", "worlds": "2,4,8", "repeat": "2", "ceiling": "0",
                       "no-verify": False})
    worlds = [int(w) for w in o["worlds"].split(",") if w]
    ceil = float(o["ceiling"])
    loads = Loads(src, o["device"], not o["no-verify"])
    best = {}
    for rep in range(int(o["repeat"])):
        whole_s = None
        for world in [1] + worlds:
            shard = (0, world) if world > 1 else None
            what = "whole" if shard is None else "rank 0 of %d" % world
            t1, mt = mount(placefs_bin, opts, src, mnt)
            try:
                sd, t_end, exp = loads.load(mnt, shard)
                secs = t_end - t1
                st = stats(mnt)
            finally:
                umount(mnt)
            n = moved(st)
            ring = ring_moved(st, None, exp.strided)
            if n != exp.staged + exp.cpu_read:
                fail("%s: the stats count %d bytes moved, the load's tensors are %d" % (
                    what, n, exp.staged + exp.cpu_read))
            if shard is None:
                whole_s = secs
            gbps = n / secs / 1e9
            ok = loads.verify(sd, exp, what)
            ntensors = len(sd)
            del sd
            loads.free()
            print("%s (rep %d): %d tensors, %d bytes moved in %.3f s after the mount returned "
                  "(mount %.3f s): %.2f GB/s%s, %.2f x the whole's time (1/%d = %.2f); ring "
                  "reads %d bytes (%+d beside the loaded bytes); %s" % (
                      what, rep + 1, ntensors, n, secs, mt, gbps,
                      " (%.2f x ceiling)" % (gbps / ceil) if ceil else "",
                      secs / whole_s, world, 1.0 / world, ring, ring - exp.staged, ok))
            if not ok.startswith(("verified", "not verified")):
                fail(ok)
            if what not in best or secs < best[what][0]:
                best[what] = (secs, n, ring, world)
    print()
    print("best of %s, fresh mount each, load_state_dict(device=%r, mode='copy'); x whole: "
          "the best time against the best whole load's" % (o["repeat"], o["device"]))
    print("%-13s %14s %8s %7s %7s %8s %6s %14s" % ("load", "bytes moved", "seconds", "GB/s",
                                                   "x ceil", "x whole", "1/N", "ring reads"))
    for what, (secs, n, ring, world) in best.items():
        gbps = n / secs / 1e9
        print("%-13s %14d %8.3f %7.2f %7s %8.2f %6.2f %14d" % (
            what, n, secs, gbps, "%.2f" % (gbps / ceil) if ceil else "-",
            secs / best["whole"][0], 1.0 / world, ring))


def worker(mnt, src, device, rank, world, argv):
    """One loader process of pair(): commands on stdin, one result line each on stdout."""
    o = options(argv, {"no-verify": False})
    rank, world = int(rank), int(world)
    loads = Loads(src, device, not o["no-verify"])
    print("ready", flush=True)
    for line in sys.stdin:
        kind = line.strip()
        if kind == "quit":
            return
        shard = (rank, world) if kind == "shard" else None
        t0 = time.perf_counter()
        sd, t_end, exp = loads.load(mnt, shard)
        secs = t_end - t0
        ok = loads.verify(sd, exp, "%s on %s" % (kind, device))
        del sd
        loads.free()
        print("result %s %.6f %d %d %s" % (kind, secs, exp.staged + exp.cpu_read, exp.staged, ok),
              flush=True)


def pair(placefs_bin, opts, src, mnt, argv):
    o = options(argv, {"devices": "", "repeat": "2", "no-verify": False})
    devices = [d for d in o["devices"].split(",") if d]
    if len(devices) < 2:
        fail("pair needs --devices with two devices or more, got %r" % o["devices"])
    cuda = devices[0].startswith("cuda")
    world = len(devices)
    cmd = [sys.executable, "-u", os.path.abspath(__file__), "worker", mnt, src]
    procs = [subprocess.Popen(cmd + [d if cuda else "cpu", str(r), str(world)] +
                              (["--no-verify"] if o["no-verify"] else []),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for r, d in enumerate(devices)]
    try:
        for r, p in enumerate(procs):
            if p.stdout.readline().strip() != "ready":
                fail("worker %d (%s) did not start" % (r, devices[r]))
        bad = 0
        for rep in range(int(o["repeat"])):
            for kind in ("whole", "shard"):
                t1, mt = mount(placefs_bin, opts, src, mnt)
                try:
                    t_go = time.perf_counter()
                    for p in procs:
                        p.stdin.write(kind + "\n")
                        p.stdin.flush()
                    res = [p.stdout.readline().strip().split(None, 5) for p in procs]
                    wall = time.perf_counter() - t_go
                    st = stats(mnt)
                finally:
                    umount(mnt)
                want = [0] * len(st["devices"])
                total = cpu = 0
                for r, x in enumerate(res):
                    if len(x) < 6 or x[0] != "result" or x[1] != kind:
                        fail("worker %d (%s): %r" % (r, devices[r], x))
                    secs, n, staged = float(x[2]), int(x[3]), int(x[4])
                    # A worker's ring: its device's (cuda:R, or host:R for its part);
                    # a whole load on host stand-ins uses the first ring.
                    want[r if cuda or kind == "shard" else 0] += staged
                    total += n
                    cpu += n - staged
                    if x[5] != "verified" and x[5] != "not verified":
                        bad += 1
                    print("%s (rep %d) %s: %d bytes in %.3f s: %.2f GB/s; %s" % (
                        kind, rep + 1, devices[r], n, secs, n / secs / 1e9, x[5]))
                got = [moved(st, pos) for pos in range(len(st["devices"]))]
                if got != want or st["read"]["bytes"] != cpu:
                    bad += 1
                    print("MISMATCH: staged per device %r, the workers' %r; read %d, the "
                          "workers' %d" % (got, want, st["read"]["bytes"], cpu))
                print("%s (rep %d): %d workers at once on one mount (%s), %d bytes in %.3f s "
                      "(mount %.3f s): %.2f GB/s together; staged per device %r" % (
                          kind, rep + 1, world, st["device"], total, wall, mt,
                          total / wall / 1e9, got))
        if bad:
            fail("%d results differ or were miscounted" % bad)
    finally:
        for p in procs:
            try:
                p.stdin.write("quit\n")
                p.stdin.close()
            except (BrokenPipeError, ValueError):
                pass
        for p in procs:
            if p.wait() != 0:
                print("slices.py: worker exited with status %d" % p.returncode)


def main():
    a = sys.argv[1:]
    if len(a) >= 5 and a[0] in ("single", "pair"):
        return {"single": single, "pair": pair}[a[0]](a[1], a[2], a[3], a[4], a[5:])
    if len(a) >= 6 and a[0] == "worker":
        return worker(a[1], a[2], a[3], a[4], a[5], a[6:])
    fail("usage: slices.py single|pair PLACEFS OPTS SRC MNT [options] (see the docstring)")


if __name__ == "__main__":
    main()
