#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Tensor-parallel slices on one device, end to end (tests/gpu/run.sh, step slices; issue #16).

    slices_gpu.py stage MNT SRC WORLD MODE PLACEFS_STAGE
    slices_gpu.py loader MNT SRC WORLD MODE DEVICE

MNT is a placefs mount of SRC (a directory of safetensors shards with Llama
names, placefs-mkckpt --llama) staging to one device (-o device=cuda:N; host
for a dry run without a GPU). For every rank r of WORLD:

  stage   placefs-stage --mode MODE --verify --device D --slice r/WORLD@0 on
          the gpu-placed tensors the Llama split keeps rows of, then --slice
          r/WORLD@1 on those it keeps columns of: every slice byte-exact
          (--verify compares it with the same slice of a read() of the file,
          and every file's read() is first compared with the source), the
          bytes staged 1/WORLD of the files', the ranks' bytes together the
          files' whole.
  loader  load_state_dict(MNT, device=DEVICE, mode=MODE, shard=(r, WORLD)):
          every tensor equal to r's part of the source (torch slicing of
          safetensors' load_file when torch and safetensors import, else the
          same cut of the file's bytes), gpu-placed ones on DEVICE ("cuda:N";
          "cpu" with a host ring), cpu-placed ones on the cpu; then the ranks'
          parts joined (torch.cat) equal to the whole tensor.

Every placefs-stage run and every load is checked against .placefs/stats: the
device's row (staging.devices[0]) and the totals grow by exactly the bytes of
the slices (plus the tensors sent whole): staged.MODE.bytes, nothing in the
other mode, slices.tensors and slices.bytes; staging.read.bytes by the
cpu-placed tensors (read whole, cut by the loader). The bytes the daemon moved
into its ring (read_bytes less strided_read_bytes, plus the strided slices'
compacted bytes and zero_copy.bytes) are compared with the bytes staged: for
placefs-stage, which sends slices only, they must be equal; for the loader a
surplus (whole tensors prefetched after the ones it sends whole) is printed as
a WARNING. Each run ends with a line "RESULT ... extra=BYTES" (that surplus).

The reference and comparison helpers (reference, part, equal, expect,
ring_moved) serve tests/bench/slices.py too. Exit 1 naming the first failed
check.
"""
import collections
import glob
import os
import re
import subprocess
import sys
import time

import placefs
from placefs import _torch
from placefs.loader import shard_dim
from shard_test import _tobytes, check, cut, source, stats

MODES = ("copy", "borrow")


def _torch_ref():
    """torch when the reference can be safetensors' load_file (torch and safetensors import)."""
    torch = _torch.get()
    if torch is None:
        return None
    try:
        import safetensors.torch  # noqa: F401
    except ImportError:
        return None
    return torch


def reference(src):
    """name -> the source tensor: load_file's torch tensor, or (dtype, shape, bytes)
    without torch."""
    if _torch_ref() is not None:
        from views_gpu import source_tensors
        return source_tensors(src)
    ref = {}
    for f in sorted(glob.glob(os.path.join(src, "*.safetensors"))):
        ref.update(source(f))
    return ref


def part(ref, name, sl):
    """The reference for one rank: sl = (dim, start, len), or None for the whole tensor.

    A torch tensor (t.narrow: torch's slicing) or, without torch, (shape, bytes)."""
    v = ref[name]
    if not isinstance(v, tuple):
        return v if sl is None else v.narrow(sl[0], sl[1], sl[2])
    dt, shape, data = v
    if sl is None:
        return shape, data
    d, s, n = sl
    return tuple(n if i == d else x for i, x in enumerate(shape)), cut(shape, data, d, s, n)


def keep(v):
    """A loaded value in the form part() gives: on the cpu (torch), or (shape, bytes)."""
    if _torch_ref() is not None and not isinstance(v, placefs.PlacedTensor):
        return v.cpu()
    return tuple(v.shape), _tobytes(v)


def equal(got, want):
    """got (a loaded value, or keep()'s) is want (part()'s): shape and every byte (and the
    dtype when both are torch tensors)."""
    if isinstance(got, tuple) or isinstance(want, tuple):
        g = got if isinstance(got, tuple) else (tuple(got.shape), _tobytes(got))
        w = want if isinstance(want, tuple) else (tuple(want.shape), _tobytes(want))
        return g == w
    from views_gpu import same
    return same(got, want)


def joined(parts, dim):
    """The ranks' parts (keep()'s, in rank order) put together along dim."""
    if not isinstance(parts[0], tuple):
        return _torch.get().cat(parts, dim)
    shape = list(parts[0][0])
    shape[dim] = sum(p[0][dim] for p in parts)
    if dim == 0:
        return tuple(shape), b"".join(p[1] for p in parts)
    rows = shape[0]
    segs = [len(p[1]) // rows if rows else 0 for p in parts]
    return tuple(shape), b"".join(p[1][i * sg:(i + 1) * sg] for i in range(rows)
                                  for p, sg in zip(parts, segs))


Expect = collections.namedtuple("Expect", "plan staged slice_tensors slice_bytes strided cpu_read")


def expect(tensors, shard, only=None):
    """What a load of rank's part (shard = (rank, world), Llama dims; None: whole) stages.

    plan: name -> (dim, start, len) for the tensors split; staged: the bytes
    the ring stages (gpu-placed: the slice, or the whole tensor when not
    split); slice_*: the slices' count and bytes; strided: the bytes of the
    slices of dimension 1 (compacted by the daemon); cpu_read: the cpu-placed
    tensors' bytes (read whole). only: the tensors staged (placefs-stage's
    files), default all."""
    plan = {}
    staged = nsl = slb = strided = cpu = 0
    for t in tensors:
        if only is not None and t.name not in only:
            continue
        d = shard_dim(t.name) if shard is not None else None
        if d is not None and d < len(t.shape) and shard[1] > 1:
            world = shard[1]
            check(t.shape[d] % world == 0 and t.nbytes % world == 0,
                  "%s: %r does not split in %d" % (t.name, t.shape, world))
            n = t.shape[d] // world
            plan[t.name] = (d, shard[0] * n, n)
        if t.placement != "gpu":
            cpu += t.nbytes
            continue
        if t.name not in plan:
            staged += t.nbytes
            continue
        b = t.nbytes // shard[1]
        staged += b
        nsl += 1
        slb += b
        if plan[t.name][0] == 1 and t.shape[0] > 1:
            strided += b
    return Expect(plan, staged, nsl, slb, strided, cpu)


def _delta(after, before, path):
    v = after
    for k in path:
        v = v[k]
    if before is None:
        return v
    w = before
    for k in path:
        w = w[k]
    return v - w


def ring_moved(after, before, strided, pos=0):
    """Bytes device pos's stager moved into its ring between the two stats (before None: since
    the mount): what it read into bounce chunks for whole ranges (read_bytes less
    strided_read_bytes), the compacted bytes of its strided slices (strided, from
    expect()) and what zero-copy moved."""
    a = after["devices"][pos]
    b = before["devices"][pos] if before is not None else None
    return (_delta(a, b, ("read_bytes",)) - _delta(a, b, ("slices", "strided_read_bytes")) +
            strided + _delta(a, b, ("zero_copy", "bytes")))


def settle(mnt, secs=5.0):
    """Waits until the daemon's prefetch has stopped reading (read_bytes still for 0.3 s)."""
    last, t_end = None, time.monotonic() + secs
    while time.monotonic() < t_end:
        st = stats(mnt)
        now = [d["read_bytes"] for d in st["devices"]]
        if now == last:
            return st
        last = now
        time.sleep(0.3)
    return stats(mnt)


def check_stats(what, before, after, mode, exp, strict):
    """The counters of one run against exp (expect()'s); returns the ring surplus in bytes."""
    other = MODES[1 - MODES.index(mode)]
    for row, tag in ((("devices", 0), "devices[0]"), ((), "staging")):
        a, b = after, before
        for k in row:
            a, b = a[k], b[k]
        got = {
            "staged.%s.bytes" % mode: _delta(a, b, ("staged", mode, "bytes")),
            "staged.%s.bytes" % other: _delta(a, b, ("staged", other, "bytes")),
            "slices.tensors": _delta(a, b, ("slices", "tensors")),
            "slices.bytes": _delta(a, b, ("slices", "bytes")),
        }
        want = {
            "staged.%s.bytes" % mode: exp.staged, "staged.%s.bytes" % other: 0,
            "slices.tensors": exp.slice_tensors, "slices.bytes": exp.slice_bytes,
        }
        for k, v in want.items():
            check(got[k] == v, "%s: stats %s.%s grew by %d, the slices are %d" % (
                what, tag, k, got[k], v))
    got = _delta(after, before, ("read", "bytes"))
    check(got == exp.cpu_read, "%s: stats staging.read.bytes grew by %d, the cpu-placed tensors "
          "are %d bytes" % (what, got, exp.cpu_read))
    moved = ring_moved(after, before, exp.strided)
    extra = moved - exp.staged
    if extra:
        msg = ("%s: the daemon moved %d bytes into its ring, the slices and whole tensors staged "
               "are %d (%+d: prefetch %d issued, %d hits)" % (
                   what, moved, exp.staged, extra,
                   _delta(after["devices"][0], before["devices"][0], ("prefetch", "issued")),
                   _delta(after["devices"][0], before["devices"][0], ("prefetch", "hits"))))
        check(not strict, msg)
        print("WARNING: " + msg)
    return extra


def stage(mnt, src, world, mode, stage_bin):
    m = placefs.Mount(mnt)
    ref = reference(src)
    gpu = [t for t in m.tensors if t.placement == "gpu" and t.nbytes]
    files = {d: [t for t in gpu if shard_dim(t.name) == d and d < len(t.shape)] for d in (0, 1)}
    check(files[0] and files[1], "no gpu-placed tensors split by %s" % (
        "rows" if not files[0] else "columns"))
    # --verify's read() of each file is the source.
    for t in files[0] + files[1]:
        with open(t.path, "rb") as f:
            data = f.read()
        check(equal((tuple(t.shape), data), part(ref, t.name, None)),
              "%s: read() differs from the source" % t.name)
    dev = stats(mnt)["devices"][0]["index"]
    whole = {d: 0 for d in (0, 1)}
    extra = 0
    for r in range(world):
        for d in (0, 1):
            names = {t.name for t in files[d]}
            exp = expect(m.tensors, (r, world), names)
            what = "placefs-stage --mode %s --slice %d/%d@%d (%d files)" % (mode, r, world, d,
                                                                          len(names))
            before = settle(mnt)
            p = subprocess.run([stage_bin, "--mode", mode, "--verify", "-q", "--device", str(dev),
                                "--slice", "%d/%d@%d" % (r, world, d)] +
                               [t.path for t in files[d]], capture_output=True, text=True)
            after = stats(mnt)
            out = p.stdout + p.stderr
            check(p.returncode == 0, "%s: exit %d: %s" % (what, p.returncode, out.strip()))
            check("verify: %d of %d tensors byte-exact" % (len(names), len(names)) in out,
                  "%s: %s" % (what, out.strip()))
            got = re.search(r"(\d+) of (\d+) tensors staged \((\w+)\), (\d+) bytes", out)
            check(got and int(got.group(1)) == len(names) and got.group(3) == mode,
                  "%s: %s" % (what, out.strip()))
            nb = int(got.group(4))
            check(nb == exp.staged, "%s: %d bytes staged, the slices are %d" % (what, nb,
                                                                                exp.staged))
            extra += check_stats(what, before, after, mode, exp, strict=True)
            whole[d] += nb
    for d in (0, 1):
        total = sum(t.nbytes for t in files[d])
        check(whole[d] == total, "the %d ranks' slices of dimension %d are %d bytes, the "
              "tensors %d" % (world, d, whole[d], total))
    print("stage %s world %d: %d ranks x %d + %d tensors (dim 0 + dim 1) verified byte-exact; "
          "stats = slice bytes; ranks together = the whole %d bytes" % (
              mode, world, world, len(files[0]), len(files[1]), whole[0] + whole[1]))
    print("RESULT stage %s world=%d tensors=%d bytes=%d extra=%d" % (
        mode, world, world * (len(files[0]) + len(files[1])), whole[0] + whole[1], extra))


def loader(mnt, src, world, mode, device):
    m = placefs.Mount(mnt)
    ref = reference(src)
    torch = _torch.get()
    cuda = device.startswith("cuda")
    check(not cuda or _torch_ref() is not None, "device %s needs torch and safetensors" % device)
    names = [t.name for t in m.tensors]
    parts = collections.defaultdict(list)
    extra = nbytes = 0
    for r in range(world):
        exp = expect(m.tensors, (r, world))
        check(exp.slice_tensors, "rank %d: no gpu-placed tensor is split" % r)
        # The cpu-placed tensors: even ranks have the daemon read them (its
        # staging.read counter grows by their bytes), odd ranks map them from
        # the source shards (it does not grow; "map" fails if it cannot).
        cpu = "map" if r % 2 and torch is not None else "read"
        what = "load_state_dict(device=%r, mode=%r, shard=(%d, %d), cpu=%r)" % (
            device, mode, r, world, cpu)
        before = settle(mnt)
        sd = placefs.load_state_dict(mnt, device=device, mode=mode, shard=(r, world), cpu=cpu)
        if cuda:
            torch.cuda.synchronize()
        after = stats(mnt)
        check(list(sd) == names, "%s: names or order differ from the plan" % what)
        for t in m.tensors:
            v, sl = sd[t.name], exp.plan.get(t.name)
            check(equal(v, part(ref, t.name, sl)), "%s: %s %s differs from the source's %s" % (
                what, t.name, tuple(v.shape), "part %r" % (sl,) if sl else "tensor"))
            dev = str(getattr(v, "device", "cpu"))
            want = device if cuda and t.placement == "gpu" else "cpu"
            check(dev == want, "%s: %s (placed %s) is on %s, expected %s" % (
                what, t.name, t.placement, dev, want))
            if sl:
                parts[t.name].append(keep(v))
        extra += check_stats(what, before, after, mode,
                             exp if cpu == "read" else exp._replace(cpu_read=0), strict=False)
        nbytes += exp.staged + exp.cpu_read
        del sd
    # The ranks' parts put together are the whole tensor.
    for name, ps in parts.items():
        d = shard_dim(name)
        check(equal(joined(ps, d), part(ref, name, None)),
              "%s: the %d ranks' parts joined along dim %d differ from the source" % (
                  name, world, d))
    print("loader %s world %d: %d ranks x %d tensors byte-exact on %s (%d split, parts joined = "
          "the whole); stats = slice bytes" % (mode, world, world, len(names), device,
                                                len(parts)))
    print("RESULT loader %s world=%d tensors=%d bytes=%d extra=%d" % (
        mode, world, world * len(names), nbytes, extra))


def main():
    if len(sys.argv) != 7 or sys.argv[1] not in ("stage", "loader") or \
            sys.argv[5] not in MODES:
        sys.exit("usage: slices_gpu.py stage MNT SRC WORLD copy|borrow PLACEFS_STAGE\n"
                 "       slices_gpu.py loader MNT SRC WORLD copy|borrow DEVICE")
    what, mnt, src, world, mode, arg = sys.argv[1:]
    {"stage": stage, "loader": loader}[what](mnt, src, int(world), mode, arg)


if __name__ == "__main__":
    main()
