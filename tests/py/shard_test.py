# SPDX-License-Identifier: MIT
"""Rings per device and tensor-parallel slices on a live mount (tests/mount-devices.sh).

The mount is `-o device=host:0,host:1`: two host rings standing in for two
GPUs of a node. Scenarios (argv[1]), each silent on success and exiting
non-zero naming the check that failed:

  daemon MNT SRC   RING_INFO per device and position (ENODEV past them);
                   slices of dim 0 and 1 in copy and borrow, on each ring,
                   equal to slicing the source bytes; the errors (a borrow
                   naming no device EINVAL, a device not served ENODEV, bad
                   slices EINVAL); the stats per device (bytes moved = slice
                   bytes, slices counted on the ring that moved them).
  rings MNT SRC    the rings are bounded and independent: a lease filling
                   ring 0 makes ring 0 time out while ring 1 stages at once.
  loader MNT SRC   load_state_dict and iter_weights with shard=(rank, world,
                   dims) for every rank: each rank's tensors are its slices of
                   the source, and the ranks' parts put together are the
                   whole; an uneven split is EINVAL.

Standard library only, with the installed placefs package.
"""
import errno
import json
import mmap
import os
import struct
import sys

import placefs
from placefs import Destination, stage
from placefs._ioctl import release, ring_info
from placefs.loader import shard_dim


def check(cond, msg):
    if not cond:
        sys.exit("shard_test: " + msg)


def expect_errno(fn, want, what):
    try:
        fn()
    except OSError as e:
        check(e.errno == want, "%s: errno %s (%s), expected %s" % (
            what, errno.errorcode.get(e.errno), e, errno.errorcode[want]))
        return
    sys.exit("shard_test: %s: no error, expected %s" % (what, errno.errorcode[want]))


def source(path):
    """name -> (dtype, shape, payload bytes), straight from a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for k, v in hdr.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            f.seek(base + a)
            out[k] = (v["dtype"], tuple(v["shape"]), f.read(b - a))
    return out


def cut(shape, data, dim, start, length):
    """The bytes of t[start:start+len] (dim 0) or t[:, start:start+len] (dim 1), compacted."""
    if dim == 0:
        rb = len(data) // shape[0]
        return data[start * rb:(start + length) * rb]
    rowb = len(data) // shape[0]
    inner = rowb // shape[1]
    return b"".join(data[i * rowb + start * inner:i * rowb + (start + length) * inner]
                    for i in range(shape[0]))


class Shm:
    def __init__(self, size, tag="t"):
        self.name = "/placefs-shard-test-%d-%s" % (os.getpid(), tag)
        self.fd = os.open("/dev/shm" + self.name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.ftruncate(self.fd, size)
        self.size = size

    def dest(self, off=0):
        return Destination.shm(self.name, off, self.size)

    def read(self, off, n):
        return os.pread(self.fd, n, off)

    def write(self, off, data):
        os.pwrite(self.fd, data, off)

    def close(self):
        os.close(self.fd)
        try:
            os.unlink("/dev/shm" + self.name)
        except FileNotFoundError:
            pass


def stats(mnt):
    with open(os.path.join(mnt, ".placefs", "stats")) as f:
        return json.load(f)["staging"]


class Ring:
    """The host ring of one device, mapped read-only."""

    def __init__(self, info):
        fd = os.open("/dev/shm" + info.shm_name, os.O_RDONLY)
        try:
            self.mm = mmap.mmap(fd, info.ring_bytes, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def read(self, off, n):
        return self.mm[off:off + n]


def slices_of(shape):
    """(dim, start, len) slices to try: halves, quarters, a single index, all of it."""
    out = []
    for dim in (0, 1):
        if dim >= len(shape) or shape[dim] == 0:
            continue
        n = shape[dim]
        out.append((dim, 0, n))
        out.append((dim, n - 1, 1))
        for world in (2, 4):
            if n % world == 0:
                out += [(dim, r * (n // world), n // world) for r in range(world)]
        if n > 2:
            out.append((dim, 1, n - 2))
    return out


def daemon(mnt, src):
    m = placefs.Mount(mnt)
    ref = source(src)
    gpu = [t for t in m.tensors if t.placement == "gpu" and t.nbytes]
    check(len(gpu) >= 4, "the checkpoint has %d gpu-placed tensors" % len(gpu))
    fd = os.open(gpu[0].path, os.O_RDONLY)
    try:
        r0 = ring_info(fd)
        check(r0.ndevices == 2 and r0.position == 0 and r0.device == 0,
              "ring_info: %r, expected 2 devices, position 0, device 0" % (r0,))
        infos = [ring_info(fd, device=d) for d in (0, 1)]
        for d, ri in enumerate(infos):
            check(ri.device == d and ri.position == d and ri.ndevices == 2,
                  "ring_info(device=%d): %r" % (d, ri))
            check(ri.ring_bytes == m.ring_bytes, "ring %d has %d bytes, the plan says %d"
                  % (d, ri.ring_bytes, m.ring_bytes))
            byp = ring_info(fd, position=d)
            check(byp.device == d and byp.handle == ri.handle,
                  "ring_info(position=%d) is not ring_info(device=%d)" % (d, d))
        check(infos[0].shm_name != infos[1].shm_name, "the two devices share one ring")
        expect_errno(lambda: ring_info(fd, device=2), errno.ENODEV, "ring_info(device=2)")
        expect_errno(lambda: ring_info(fd, device=-1), errno.ENODEV, "ring_info(device=-1)")
        expect_errno(lambda: ring_info(fd, position=2), errno.ENODEV, "ring_info(position=2)")
    finally:
        os.close(fd)
    rings = [Ring(ri) for ri in infos]
    before = stats(mnt)
    moved = [0, 0]
    sliced = [0, 0]
    nslices = [0, 0]
    shm = Shm(max(t.nbytes for t in gpu) + 4096, "d")
    try:
        for t in gpu:
            dt, shape, data = ref[t.name]
            fd = os.open(t.path, os.O_RDONLY)
            try:
                # The whole tensor, on each ring: unchanged behaviour.
                for d in (0, 1):
                    r = stage(fd, "copy", shm.dest(0), device=d, what="whole %s" % t.name)
                    check(r.nbytes == t.nbytes and r.device == d, "whole copy of %s on %d: %r"
                          % (t.name, d, r))
                    check(shm.read(0, t.nbytes) == data, "whole copy of %s on %d: bytes differ"
                          % (t.name, d))
                    moved[d] += t.nbytes
                for k, (dim, start, n) in enumerate(slices_of(shape)):
                    want = cut(shape, data, dim, start, n)
                    d = k % 2
                    off = 256 * (k % 3)
                    r = stage(fd, "copy", shm.dest(off), slice=(dim, start, n), device=d,
                              what="copy %s %r" % (t.name, (dim, start, n)))
                    check(r.nbytes == len(want) and r.device == d and r.lease == 0,
                          "copy %s %r on %d: %r, expected %d bytes" % (
                              t.name, (dim, start, n), d, r, len(want)))
                    check(shm.read(off, len(want)) == want, "copy %s %r on %d: bytes differ"
                          % (t.name, (dim, start, n), d))
                    moved[d] += len(want)
                    # Borrow on the other ring.
                    b = 1 - d
                    r = stage(fd, "borrow", slice=(dim, start, n), device=b,
                              what="borrow %s %r" % (t.name, (dim, start, n)))
                    try:
                        check(r.nbytes == len(want) and r.device == b and r.lease,
                              "borrow %s %r on %d: %r" % (t.name, (dim, start, n), b, r))
                        check(rings[b].read(r.ring_offset, r.nbytes) == want,
                              "borrow %s %r on %d: ring bytes differ"
                              % (t.name, (dim, start, n), b))
                    finally:
                        release(fd, r.lease)
                    moved[b] += len(want)
                    # The counters count slices naming less than the whole tensor.
                    for dev in (d, b):
                        if len(want) < t.nbytes:
                            sliced[dev] += len(want)
                            nslices[dev] += 1
                # The errors.
                expect_errno(lambda: stage(fd, "borrow"), errno.EINVAL,
                             "borrow naming no device on a mount of two")
                expect_errno(lambda: stage(fd, "copy", shm.dest(0)), errno.EINVAL,
                             "shm copy naming no device on a mount of two")
                expect_errno(lambda: stage(fd, "copy", shm.dest(0), device=2), errno.ENODEV,
                             "copy on device 2")
                expect_errno(lambda: stage(fd, "borrow", device=-1), errno.ENODEV,
                             "borrow on device -1")
                expect_errno(lambda: stage(fd, "copy", shm.dest(0), device=0,
                                           slice=(0, 0, 0)), errno.EINVAL, "a slice of 0")
                expect_errno(lambda: stage(fd, "copy", shm.dest(0), device=0,
                                           slice=(0, shape[0], 1)), errno.EINVAL,
                             "a slice past dim 0")
                expect_errno(lambda: stage(fd, "copy", shm.dest(0), device=0,
                                           slice=(2, 0, 1)), errno.EINVAL, "a slice of dim 2")
                if len(shape) == 1:
                    expect_errno(lambda: stage(fd, "copy", shm.dest(0), device=0,
                                               slice=(1, 0, 1)), errno.EINVAL,
                                 "dim 1 of a 1-dimensional tensor")
                expect_errno(lambda: stage(fd, "read", shm.dest(0), slice=(0, 0, 1)),
                             errno.EINVAL, "read mode with a slice")
                # A destination too small for the slice, big enough for nothing more.
                dim, start, n = slices_of(shape)[0]
                small = Destination.shm(shm.name, shm.size - 1, shm.size)
                expect_errno(lambda: stage(fd, "copy", small, device=1,
                                           slice=(dim, start, n)),
                             errno.EINVAL, "a slice past the destination")
            finally:
                os.close(fd)
    finally:
        shm.close()
    after = stats(mnt)
    check(after["ndevices"] == 2 and len(after["devices"]) == 2,
          "stats: ndevices %r, %d device rows" % (after.get("ndevices"),
                                                 len(after.get("devices", []))))
    for d in (0, 1):
        a, b = after["devices"][d], before["devices"][d]
        check(a["device"] == "host:%d" % d and a["index"] == d and a["position"] == d,
              "stats device row %d: %r" % (d, {k: a[k] for k in ("device", "index",
                                                                 "position")}))
        got = (a["staged"]["copy"]["bytes"] + a["staged"]["borrow"]["bytes"] -
               b["staged"]["copy"]["bytes"] - b["staged"]["borrow"]["bytes"])
        check(got == moved[d], "stats: device %d moved %d bytes, the test %d" % (d, got,
                                                                                moved[d]))
        got = a["slices"]["bytes"] - b["slices"]["bytes"]
        check(got == sliced[d], "stats: device %d slices.bytes %d, the test staged %d" % (
            d, got, sliced[d]))
        got = a["slices"]["tensors"] - b["slices"]["tensors"]
        check(got == nslices[d], "stats: device %d slices.tensors %d, expected %d" % (
            d, got, nslices[d]))
        check(a["ring_bytes"] == m.ring_bytes and a["ring_used"] == 0 and a["leases"] == 0,
              "stats: device %d ring %d bytes, %d used, %d leases" % (
                  d, a["ring_bytes"], a["ring_used"], a["leases"]))
    # The totals are the sums of the devices.
    for key in ("copy", "borrow"):
        tot = sum(after["devices"][d]["staged"][key]["bytes"] for d in (0, 1))
        check(after["staged"][key]["bytes"] == tot, "stats: staged.%s.bytes %d, devices' "
              "sum %d" % (key, after["staged"][key]["bytes"], tot))
    check(after["slices"]["bytes"] == sum(after["devices"][d]["slices"]["bytes"]
                                          for d in (0, 1)), "stats: slices.bytes total")
    check(after["ring_bytes"] == 2 * m.ring_bytes, "stats: ring_bytes %d, two rings of %d"
          % (after["ring_bytes"], m.ring_bytes))
    print("daemon: %d tensors, %d + %d bytes moved on host:0/host:1, %d + %d in slices" % (
        len(gpu), moved[0], moved[1], sliced[0], sliced[1]))


def rings(mnt, src):
    m = placefs.Mount(mnt)
    ref = source(src)
    big = max((t for t in m.tensors if t.placement == "gpu"), key=lambda t: t.nbytes)
    check(big.nbytes * 2 > m.ring_bytes, "tensor %s (%d bytes) does not fill the ring (%d)"
          % (big.name, big.nbytes, m.ring_bytes))
    shm = Shm(big.nbytes, "r")
    fd = os.open(big.path, os.O_RDONLY)
    try:
        held = stage(fd, "borrow", device=0, what="fill ring 0")
        try:
            # Ring 0 is full for another one; ring 1 is not.
            expect_errno(lambda: stage(fd, "borrow", device=0, timeout_ns=300000000),
                         errno.ETIMEDOUT, "a second %s on the full ring 0" % big.name)
            r = stage(fd, "borrow", device=1, timeout_ns=5000000000)
            check(r.device == 1, "borrow on ring 1 beside a full ring 0: %r" % (r,))
            release(fd, r.lease)
            r = stage(fd, "copy", shm.dest(0), device=1, timeout_ns=5000000000)
            check(r.device == 1 and shm.read(0, big.nbytes) == ref[big.name][2],
                  "copy on ring 1 beside a full ring 0: %r" % (r,))
            # A copy needs no ring space while direct copies are on (the default):
            # it lands beside the full ring 0; through the ring it would time out.
            if stats(mnt)["direct"]["on"]:
                shm.write(0, bytes(big.nbytes))
                r = stage(fd, "copy", shm.dest(0), device=0, timeout_ns=5000000000)
                check(r.device == 0 and shm.read(0, big.nbytes) == ref[big.name][2],
                      "direct copy beside the full ring 0: %r" % (r,))
            else:
                expect_errno(lambda: stage(fd, "copy", shm.dest(0), device=0,
                                           timeout_ns=300000000),
                             errno.ETIMEDOUT, "a copy of %s on the full ring 0" % big.name)
            st = stats(mnt)
            used = [st["devices"][d]["ring_used"] for d in (0, 1)]
            # Ring 1 gave the copy's span back (prefetch may hold the small next ones).
            check(used[0] >= big.nbytes and used[1] < big.nbytes,
                  "ring_used %r while ring 0 holds %d bytes" % (used, big.nbytes))
            check(st["devices"][0]["leases"] == 1 and st["devices"][1]["leases"] == 0,
                  "leases per device %r" % ([st["devices"][d]["leases"] for d in (0, 1)],))
            # A slice of it fits beside the lease: the ring holds only the slice.
            dt, shape, data = ref[big.name]
            part = (0, 0, shape[0] // 8)
            want = cut(shape, data, *part)
            check(big.nbytes + len(want) + 512 <= m.ring_bytes,
                  "test: the slice does not fit beside the lease")
            got = bytearray(len(want))
            with m.borrow(big.name, 5000000000, slice=part, device=0) as b:
                check(b.result.nbytes == len(want), "a slice beside the lease on ring 0: %r"
                      % (b.result,))
                b.copy_to(memoryview(got))
            check(bytes(got) == want, "a slice beside the lease on ring 0: bytes differ")
            check(stats(mnt)["devices"][0]["ring_high_water"] <= m.ring_bytes,
                  "ring 0's high water exceeds its size")
        finally:
            release(fd, held.lease)
        r = stage(fd, "copy", shm.dest(0), device=0, timeout_ns=5000000000)
        check(shm.read(0, big.nbytes) == ref[big.name][2], "ring 0 after the release")
        # Ring 1's high water stayed one tensor: the rings are separate.
        st = stats(mnt)
        for d in (0, 1):
            check(st["devices"][d]["ring_high_water"] <= m.ring_bytes,
                  "ring %d's high water %d exceeds %d" % (d, st["devices"][d][
                      "ring_high_water"], m.ring_bytes))
    finally:
        os.close(fd)
        shm.close()
    print("rings: ring 0 full (ETIMEDOUT), ring 1 staged at once")


def _tobytes(v):
    if isinstance(v, placefs.PlacedTensor):
        return bytes(v.data)
    # torch
    import torch  # noqa: F401 - only when torch results came back
    t = v.contiguous().view(-1)
    return bytes(t.view(__import__("torch").uint8).cpu().numpy().tobytes())


def loader(mnt, src):
    ref = source(src)
    # 'big' is cpu-placed: read whole and cut; the others are staged as slices.
    dims = {"*.col": 0, "*.row": 1, "emb": 0, "big": 1, "*": None}
    m = placefs.Mount(mnt)
    world = 2
    for mode in ("copy", "borrow"):
        parts = {}
        for rank in range(world):
            sd = placefs.load_state_dict(mnt, device="cpu", mode=mode,
                                         shard=(rank, world, dims))
            check(list(sd) == [t.name for t in m.tensors], "%s rank %d: names or order" % (
                mode, rank))
            for name, v in sd.items():
                dt, shape, data = ref[name]
                dim = shard_dim(name, dims)
                if dim is None or dim >= len(shape):
                    want, wshape = data, shape
                else:
                    n = shape[dim] // world
                    want = cut(shape, data, dim, rank * n, n)
                    wshape = tuple(n if i == dim else s for i, s in enumerate(shape))
                check(tuple(v.shape) == wshape, "%s rank %d %s: shape %r, expected %r" % (
                    mode, rank, name, tuple(v.shape), wshape))
                got = _tobytes(v)
                check(got == want, "%s rank %d %s: bytes differ from the source's slice" % (
                    mode, rank, name))
                parts.setdefault(name, []).append(got)
            # iter_weights gives the same, one by one.
            seen = []
            for name, v in placefs.iter_weights(mnt, device="cpu", mode=mode,
                                                shard=(rank, world, dims)):
                got = _tobytes(v)
                check(got == parts[name][rank], "%s rank %d iter_weights %s differs from "
                      "load_state_dict" % (mode, rank, name))
                seen.append(name)
            check(seen == [t.name for t in m.tensors], "%s rank %d: iter_weights names" % (
                mode, rank))
        # The ranks' rows put together are the whole tensor (dim 0).
        for name, ps in parts.items():
            dim = shard_dim(name, dims)
            if dim == 0:
                check(b"".join(ps) == ref[name][2], "%s: the ranks' rows of %s are not the "
                      "whole" % (mode, name))
    # An uneven split is refused.
    try:
        placefs.load_state_dict(mnt, device="cpu", shard=(0, 7, 0))
    except (OSError, ValueError) as e:
        check(getattr(e, "errno", errno.EINVAL) == errno.EINVAL, "uneven split: %r" % (e,))
    else:
        sys.exit("shard_test: an uneven split (world 7) was not refused")
    print("loader: %d tensors, world %d, copy and borrow, load_state_dict and iter_weights"
          % (len(m.tensors), world))


def bench(mnt, world):
    """One rank's 1/world part (default Llama dims) against the whole load, same run.

    `shard_test.py bench MNT WORLD [DEVICE]`: not a test; prints seconds and
    GB/s of the bytes each load returned, and the stats' bytes moved per
    ring. DEVICE: the loader's device ("cpu" by default; "cuda:0" on a GPU
    mount). On a mount of several devices, rank 0's ring is used.
    """
    import time
    world = int(world)
    dev = sys.argv[4] if len(sys.argv) > 4 else "cpu"
    for what, shard in (("whole", None), ("rank 0 of %d" % world, (0, world, None))):
        before = stats(mnt)
        t0 = time.perf_counter()
        sd = placefs.load_state_dict(mnt, device=dev, shard=shard)
        dt = time.perf_counter() - t0
        n = sum(len(_tobytes(v)) for v in sd.values())
        after = stats(mnt)
        moved = [sum(a["staged"][k]["bytes"] - b["staged"][k]["bytes"]
                     for k in ("copy", "borrow"))
                 for a, b in zip(after.get("devices", []), before.get("devices", []))]
        print("bench %s: %d tensors, %d bytes in %.3f s (%.2f GB/s); staged per ring %r" % (
            what, len(sd), n, dt, n / dt / 1e9 if dt > 0 else 0.0, moved))
        del sd


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "bench":
        return bench(sys.argv[2], sys.argv[3])
    if len(sys.argv) != 4 or sys.argv[1] not in ("daemon", "rings", "loader"):
        sys.exit("usage: shard_test.py daemon|rings|loader MNT SRC | bench MNT WORLD [DEVICE]")
    {"daemon": daemon, "rings": rings, "loader": loader}[sys.argv[1]](sys.argv[2], sys.argv[3])


if __name__ == "__main__":
    main()
