# SPDX-License-Identifier: MIT
"""Checks of a placefs mount stacked on a network file system (tests/remote-*.sh).

    python3 remote_check.py mmap   MNT SRC
    python3 remote_check.py loader MNT SRC
    python3 remote_check.py views  MNT SRC
    python3 remote_check.py read   MNT SRC [--shard FILE]... [--direct] [--expect R,R...]
                                           [--first N | --last N] [--measure]

SRC is the local copy of the checkpoint that was uploaded (a directory with
model.safetensors.index.json): every byte is compared with it, never with
what the mount or the network file system says. The tensors' places in SRC
come from SRC's own headers (placefs.safetensors, the package's stdlib
reader); the mount's plan.json gives only each tensor's file name there.

  mmap    every tensor file mapped (MAP_SHARED, read-only) equals its range
  loader  placefs.load_state_dict(MNT, device="cpu") with cpu="auto" and
          cpu="read", and placefs.iter_weights(MNT, device="cpu"): every
          tensor, in checkpoint order, byte-exact (torch tensors when torch
          imports, else PlacedTensor objects; said on the output line)
  views   every shard file of .placefs/views/{all,gpu,cpu}/ opens with the
          stdlib reader (placefs.safetensors.read, the reference reader's
          rules) and holds exactly the view's tensors, byte-exact; the other
          files there (config.json...) equal SRC's
  read    reads the tensors (of --shard FILEs only, the first or last N of
          them with --first or --last), each whole, O_DIRECT with --direct (so that every byte
          comes through the daemon, not the page cache); prints the count
          of each result ("OK", "WRONG" for bytes other than the source's,
          or the errno's name) as one JSON line. Fails on any WRONG, and on
          any result outside --expect (default: OK); with --measure, on
          nothing (a measurement the caller reports)

PYTHONPATH must reach the package (the caller sets it). Exit 0 or 1; read
exits 2 when any tensor came back with bytes other than the source's.
"""
import argparse
import collections
import errno
import json
import mmap
import os
import sys

import placefs
from placefs import safetensors as pst


def source(src):
    """name -> (file, absolute offset, nbytes, dtype, shape), as SRC's headers say."""
    with open(os.path.join(src, "model.safetensors.index.json")) as f:
        wmap = json.load(f)["weight_map"]
    out = {}
    for fname in sorted(set(wmap.values())):
        for t in pst.header(os.path.join(src, fname)).tensors:
            if wmap.get(t.name) == fname:
                out[t.name] = (fname, t.offset, t.nbytes, t.dtype, list(t.shape))
    return out


class Source:
    def __init__(self, src):
        self.dir = src
        self.t = source(src)
        self._data = {}

    def data(self, fname):
        if fname not in self._data:
            with open(os.path.join(self.dir, fname), "rb") as f:
                self._data[fname] = f.read()
        return self._data[fname]

    def bytes(self, name):
        fname, off, n, _, _ = self.t[name]
        return self.data(fname)[off:off + n]


def plan(mnt):
    with open(os.path.join(mnt, ".placefs", "plan.json")) as f:
        p = json.load(f)
    return [(placefs.TensorInfo(mnt, i, t), t) for i, t in enumerate(p["tensors"])]


def check_mmap(mnt, src):
    s = Source(src)
    bad, n, total = [], 0, 0
    for info, t in plan(mnt):
        want = s.bytes(t["name"])
        with open(info.path, "rb") as f:
            if len(want) == 0:
                ok = os.fstat(f.fileno()).st_size == 0
            else:
                with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                    ok = m[:] == want
        if not ok:
            bad.append(t["name"])
        n += 1
        total += len(want)
    if n != len(s.t):
        bad.append("the mount shows %d tensors, the source has %d" % (n, len(s.t)))
    print("mmap: %d tensors, %d bytes mapped%s" % (
        n, total, ": ok" if not bad else ", %d differ: %s" % (len(bad), bad[:5])))
    return not bad


def _tobytes(v):
    if isinstance(v, placefs.PlacedTensor):
        return bytes(v.data)
    t = v.contiguous().view(-1)
    return bytes(t.view(__import__("torch").uint8).cpu().numpy().tobytes())


def check_loader(mnt, src):
    s = Source(src)
    order = [t["name"] for _, t in plan(mnt)]
    ok = True
    kind = None
    for cpu in ("auto", "read"):
        sd, rep = placefs.load(mnt, device="cpu", cpu=cpu)
        kind = type(next(iter(sd.values()))).__name__ if sd else "-"
        bad = [k for k, v in sd.items() if k not in s.t or _tobytes(v) != s.bytes(k)]
        if list(sd) != order:
            bad.append("keys not in checkpoint order")
        print("load_state_dict(device=cpu, cpu=%s): %d tensors (%s), cpu path %s%s" % (
            cpu, len(sd), kind, getattr(rep, "cpu_path", "?"),
            ": ok" if not bad else ", %d differ: %s" % (len(bad), bad[:5])))
        ok = ok and not bad
        del sd
    names, bad = [], []
    for k, v in placefs.iter_weights(mnt, device="cpu"):
        names.append(k)
        if _tobytes(v) != s.bytes(k):
            bad.append(k)
    if names != order:
        bad.append("names not in checkpoint order")
    print("iter_weights(device=cpu): %d tensors%s" % (
        len(names), ": ok" if not bad else ", %d differ: %s" % (len(bad), bad[:5])))
    print("loader values are %s (torch %s)" % (
        kind, "imported" if kind == "Tensor" else "not importable: PlacedTensor objects"))
    return ok and not bad


def check_views(mnt, src):
    s = Source(src)
    places = {t["name"]: t["placement"] for _, t in plan(mnt)}
    ok = True
    for view in ("all", "gpu", "cpu"):
        d = os.path.join(mnt, ".placefs", "views", view)
        seen, bad = {}, []
        for f in sorted(os.listdir(d)):
            if not f.endswith(".safetensors"):
                continue
            for name, (dtype, shape, data) in pst.read(os.path.join(d, f)).items():
                if name in seen:
                    bad.append("%s twice" % name)
                seen[name] = True
                fn, _, _, sdt, sshape = s.t.get(name, (None, 0, 0, None, None))
                if fn is None or dtype != sdt or list(shape) != sshape or data != s.bytes(name):
                    bad.append(name)
        want = {n for n, p in places.items() if view == "all" or p == view}
        if set(seen) != want:
            bad.append("holds %d tensors, expected %d" % (len(seen), len(want)))
        aux = 0
        for f in sorted(os.listdir(d)):
            if f.endswith(".safetensors") or f.endswith(".index.json"):
                continue
            with open(os.path.join(d, f), "rb") as x, open(os.path.join(src, f), "rb") as y:
                if x.read() != y.read():
                    bad.append(f)
            aux += 1
        print("views/%s: %d tensors read with placefs.safetensors, %d other files%s" % (
            view, len(seen), aux,
            ": ok" if not bad else ", %d wrong: %s" % (len(bad), bad[:5])))
        ok = ok and not bad
    return ok


def read_all(path, direct):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    try:
        buf = mmap.mmap(-1, 1 << 20)
        out = bytearray()
        while True:
            n = os.preadv(fd, [buf], len(out))
            if n <= 0:
                return bytes(out)
            out += buf[:n]
    finally:
        os.close(fd)


def check_read(mnt, src, shards, direct, expect, first, measure=False, last=None):
    s = Source(src)
    counts = collections.Counter()
    todo = [(info, t) for info, t in plan(mnt) if not shards or t["file"] in shards]
    if first is not None:
        todo = todo[:first]
    if last is not None:
        todo = todo[len(todo) - last:]
    for info, t in todo:
        try:
            got = read_all(info.path, direct)
            r = "OK" if got == s.bytes(t["name"]) else "WRONG"
        except OSError as e:
            r = errno.errorcode.get(e.errno, str(e.errno))
        counts[r] += 1
    print(json.dumps(dict(sorted(counts.items()))))
    if measure:
        return True
    if counts["WRONG"]:
        print("FAIL: %d tensors read with bytes other than the source's" % counts["WRONG"],
              file=sys.stderr)
        sys.exit(2)
    other = set(counts) - set(expect)
    if other:
        print("FAIL: results %s outside the expected %s" % (sorted(other), expect),
              file=sys.stderr)
        return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("mmap", "loader", "views", "read"))
    ap.add_argument("mnt")
    ap.add_argument("src")
    ap.add_argument("--shard", action="append", default=[])
    ap.add_argument("--last", type=int, help="read: only the last N tensors (of --shard's)")
    ap.add_argument("--direct", action="store_true")
    ap.add_argument("--expect", default="OK")
    ap.add_argument("--first", type=int)
    ap.add_argument("--measure", action="store_true",
                    help="read: print the counts, fail on nothing")
    a = ap.parse_args()
    if a.what == "mmap":
        ok = check_mmap(a.mnt, a.src)
    elif a.what == "loader":
        ok = check_loader(a.mnt, a.src)
    elif a.what == "views":
        ok = check_views(a.mnt, a.src)
    else:
        ok = check_read(a.mnt, a.src, a.shard, a.direct, a.expect.split(","), a.first,
                        a.measure, a.last)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
