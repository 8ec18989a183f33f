# SPDX-License-Identifier: MIT
"""PLACEFS_IOC_STAGE_READ against a live mount (tests/mount-read.sh drives it).

Each scenario prints nothing on success and exits non-zero naming the check
that failed. Standard library only, with the placefs package.
"""
import errno
import json
import mmap
import os
import struct
import sys
import threading
import time

import placefs
from placefs import Destination, stage


def check(cond, msg):
    if not cond:
        sys.exit("read_test: " + msg)


def expect_errno(fn, want, what):
    try:
        fn()
    except OSError as e:
        check(e.errno == want, "%s: errno %s (%s), expected %s" % (
            what, errno.errorcode.get(e.errno), e, errno.errorcode[want]))
        return
    sys.exit("read_test: %s: no error, expected %s" % (what, errno.errorcode[want]))


def source_bytes(path):
    """name -> payload bytes, straight from a safetensors file."""
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
            out[k] = f.read(b - a)
    return out


def _source_ref(source):
    """name -> payload bytes of a file source or of every shard of a directory source."""
    if not os.path.isdir(source):
        return source_bytes(source)
    ref = {}
    for f in sorted(os.listdir(source)):
        if f.endswith(".safetensors"):
            ref.update(source_bytes(os.path.join(source, f)))
    return ref


class Shm:
    def __init__(self, size, tag="t"):
        self.name = "/placefs-read-test-%d-%s" % (os.getpid(), tag)
        self.fd = os.open("/dev/shm" + self.name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.ftruncate(self.fd, size)
        self.size = size

    def read(self, off, n):
        return os.pread(self.fd, n, off)

    def close(self):
        os.close(self.fd)
        try:
            os.unlink("/dev/shm" + self.name)
        except FileNotFoundError:
            pass


def stats(mnt):
    with open(os.path.join(mnt, ".placefs", "stats")) as f:
        return json.load(f)["staging"]


def read_one(mnt, t, dest, **kw):
    fd = os.open(t.path, os.O_RDONLY)
    try:
        return stage(fd, "read", dest, what="read %r" % t.name, **kw)
    finally:
        os.close(fd)


def basic(mnt, source):
    """Every tensor (gpu- and cpu-placed) READ at an odd offset equals the source."""
    m = placefs.Mount(mnt)
    ref = source_bytes(source)
    before = stats(mnt)["read"]["tensors"]
    total = sum(t.nbytes for t in m.tensors) + 64 * len(m.tensors) + 3
    shm = Shm(total, "basic")
    off = 3
    places = set()
    for t in m.tensors:
        r = read_one(mnt, t, Destination.shm(shm.name, off, shm.size))
        check(r.nbytes == t.nbytes, "%s: nbytes %d, plan %d" % (t.name, r.nbytes, t.nbytes))
        check(r.lease == 0 and r.ring_offset == 0 and r.copy_ns == 0,
              "%s: read mode returned a lease/ring offset/copy time" % t.name)
        check(shm.read(off, t.nbytes) == ref[t.name], "%s: bytes differ" % t.name)
        places.add(t.placement)
        off += t.nbytes + 64
    s = stats(mnt)
    check(s["read"]["tensors"] - before == len(m.tensors),
          "stats read.tensors %d -> %d, %d reads" % (before, s["read"]["tensors"], len(m.tensors)))
    check(s["read"]["bytes"] >= sum(t.nbytes for t in m.tensors), "stats read.bytes")
    shm.close()
    m.close()
    print("basic: %d tensors (%s) read exact" % (len(m.tensors), "+".join(sorted(places))))


def errors(mnt, source):
    m = placefs.Mount(mnt)
    t = max(m.tensors, key=lambda x: x.nbytes)
    shm = Shm(t.nbytes, "err")
    # A destination that does not exist.
    expect_errno(lambda: read_one(mnt, t, Destination.shm("/placefs-read-test-none", 0,
                                                           t.nbytes)), errno.ENOENT,
                 "missing shm")
    # dest_size larger than the object.
    expect_errno(lambda: read_one(mnt, t, Destination.shm(shm.name, 0, t.nbytes + 1)),
                 errno.EINVAL, "dest_size past the object")
    # The tensor does not fit at the offset.
    expect_errno(lambda: read_one(mnt, t, Destination.shm(shm.name, 1, t.nbytes)),
                 errno.EINVAL, "offset + nbytes past dest_size")
    # A CUDA IPC destination: read mode takes shm only (the C side refuses it too).
    fd = os.open(t.path, os.O_RDONLY)
    buf = bytearray(placefs.STAGE_SIZE)
    struct.pack_into("=IIIIIIQQ", buf, 0, placefs.IOC_VERSION, placefs.STAGE_SIZE,
                     placefs.STAGE_READ, 0, placefs.HANDLE_CUDA_IPC, 64, 0, t.nbytes)
    import fcntl
    expect_errno(lambda: fcntl.ioctl(fd, placefs.IOC_STAGE, buf, True), errno.EINVAL,
                 "read mode with a CUDA IPC destination")
    # A non-zero reserved field.
    buf = bytearray(placefs.STAGE_SIZE)
    nm = shm.name.encode() + b"\0"
    struct.pack_into("=IIIIIIQQ%ds" % len(nm), buf, 0, placefs.IOC_VERSION, placefs.STAGE_SIZE,
                     placefs.STAGE_READ, 0, placefs.HANDLE_HOST_SHM, len(nm), 0, t.nbytes, nm)
    struct.pack_into("=Q", buf, placefs.STAGE_SIZE - 8, 1)
    expect_errno(lambda: fcntl.ioctl(fd, placefs.IOC_STAGE, buf, True), errno.EINVAL,
                 "non-zero reserved field")
    os.close(fd)
    # Not the caller's: as root, give the object to nobody.
    if os.geteuid() == 0:
        os.fchown(shm.fd, 65534, 65534)
        expect_errno(lambda: read_one(mnt, t, Destination.shm(shm.name, 0, t.nbytes)),
                     errno.EACCES, "shm of another user")
        os.fchown(shm.fd, 0, 0)
    r = read_one(mnt, t, Destination.shm(shm.name, 0, t.nbytes))
    check(shm.read(0, t.nbytes) == source_bytes(source)[t.name], "after the errors: bytes")
    shm.close()
    m.close()
    print("errors: ENOENT, EINVAL x4%s as documented" % (", EACCES" if os.geteuid() == 0 else ""))


def ring(mnt, source):
    """The staging ring itself is no destination."""
    m = placefs.Mount(mnt)
    ri = m.ring_info()
    t = m.tensors[0]
    expect_errno(lambda: read_one(mnt, t, Destination.shm(ri.shm_name, 0, ri.ring_bytes)),
                 errno.EINVAL, "the ring as destination")
    m.close()
    print("ring: refused as a destination")


def shrink(mnt, source):
    """A destination truncated while it is filled: errors, never a dead daemon or success
    with wrong bytes."""
    m = placefs.Mount(mnt)
    t = max(m.tensors, key=lambda x: x.nbytes)
    ref = source_bytes(source)[t.name]
    shm = Shm(t.nbytes, "shrink")
    stop = threading.Event()

    def shrinker():
        import time
        while not stop.is_set():
            time.sleep(0.002)
            os.ftruncate(shm.fd, 4096)
            time.sleep(0.0005)
            os.ftruncate(shm.fd, t.nbytes)

    th = threading.Thread(target=shrinker)
    th.start()
    ok = bad = 0
    for _ in range(100):
        try:
            read_one(mnt, t, Destination.shm(shm.name, 0, t.nbytes))
            ok += 1
        except OSError as e:
            check(e.errno in (errno.EINVAL, errno.ENOSPC, errno.EIO),
                  "shrinking destination: errno %s (%s)" % (errno.errorcode.get(e.errno), e))
            bad += 1
    stop.set()
    th.join()
    os.ftruncate(shm.fd, t.nbytes)
    read_one(mnt, t, Destination.shm(shm.name, 0, t.nbytes))
    check(shm.read(0, t.nbytes) == ref, "after the shrink race: bytes")
    shm.close()
    m.close()
    print("shrink: 100 reads under a truncation race: %d succeeded, %d refused; daemon alive"
          % (ok, bad))


def concurrent(mnt, source):
    """Eight threads read every tensor into one shm object at once."""
    m = placefs.Mount(mnt)
    ref = source_bytes(source)
    offs, pos = [], 0
    for t in m.tensors:
        offs.append(pos)
        pos += t.nbytes
    shm = Shm(max(pos, 1), "conc")
    errs = []

    def worker(k):
        try:
            for i, t in enumerate(m.tensors):
                if i % 8 == k:
                    read_one(mnt, t, Destination.shm(shm.name, offs[i], shm.size))
        except BaseException as e:  # noqa: BLE001
            errs.append(e)

    ths = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    check(not errs, "concurrent reads: %r" % errs[:1])
    for t, o in zip(m.tensors, offs):
        check(shm.read(o, t.nbytes) == ref[t.name], "concurrent: %s differs" % t.name)
    check(stats(mnt)["read"]["now"] == 0, "read.now not 0 after the reads")
    shm.close()
    m.close()
    print("concurrent: %d tensors by 8 threads into one object, exact" % len(m.tensors))


def loader(mnt, source):
    """load_state_dict brings cpu-placed tensors by STAGE_READ; iter_weights equals it."""
    m = placefs.Mount(mnt)
    ref = source_bytes(source)
    ncpu = sum(1 for t in m.tensors if t.placement == "cpu" and t.nbytes)
    staged = stats(mnt).get("backend") != "none"
    b0 = stats(mnt)["batch"]["requests"]
    for mode in ("copy", "borrow"):
        before = stats(mnt)["read"]["tensors"]
        sd, rep = placefs.load(mnt, device="cpu", mode=mode)
        got = stats(mnt)["read"]["tensors"] - before
        want = ncpu if staged else sum(1 for t in m.tensors if t.nbytes)
        check(got == want, "load (%s): %d STAGE_READs, expected %d" % (mode, got, want))
        check(list(sd) == [t.name for t in m.tensors], "load (%s): order" % mode)
        for name, v in sd.items():
            check(bytes(v.data) == ref[name], "load (%s): %s differs" % (mode, name))
        check("beside the gpu part" in rep.summary(), "report: %s" % rep.summary())
        # iter_weights: same names, order and bytes; small windows force many batches.
        for window in (None, 1 << 20, 1):
            names = []
            for name, v in placefs.iter_weights(mnt, device="cpu", mode=mode,
                                                window_bytes=window):
                check(bytes(v.data) == ref[name], "iter_weights (%s, window %r): %s differs"
                      % (mode, window, name))
                names.append(name)
            check(names == list(sd), "iter_weights (%s): order %r" % (mode, names))
    check(stats(mnt)["batch"]["requests"] > b0, "the loads sent no STAGE_BATCH request")
    # Stopping early leaves nothing held: no lease, no read in progress.
    it = placefs.iter_weights(mnt, device="cpu", mode="borrow")
    next(it)
    it.close()
    s = stats(mnt)
    check(s["read"]["now"] == 0, "after an early stop: a read in progress")
    if staged:
        check(s["leases"] == 0, "after an early stop: %d leases held" % s["leases"])
    for leftover in os.listdir("/dev/shm"):
        check(not leftover.startswith("placefs-py-%d-" % os.getpid()),
              "shm object %s left behind" % leftover)
    m.close()
    print("loader: load (copy, borrow) and iter_weights (3 windows) exact; cpu tensors by "
          "STAGE_READ")


def batch(mnt, source):
    """PLACEFS_IOC_STAGE_BATCH: many tensors per request, per-entry errors, malformed ones."""
    import fcntl
    from placefs import _ioctl as io
    m = placefs.Mount(mnt)
    ref = source_bytes(source)
    staged = stats(mnt).get("backend") != "none"
    ts = [t for t in m.tensors if t.nbytes]
    offs, pos = [], 0
    for t in ts:
        offs.append(pos)
        pos += t.nbytes + 8
    shm = Shm(pos, "batch")
    fd = os.open(ts[0].path, os.O_RDONLY)
    before = stats(mnt)["batch"]
    # Read mode: every tensor, any placement, one request.
    res = io.stage_batch(fd, "read", Destination.shm(shm.name, 0, shm.size),
                         [(t.index, o) for t, o in zip(ts, offs)])
    check([e for _, e, _ in res] == [0] * len(ts), "read batch errors %r" % res)
    for t, o, (nb, _, _) in zip(ts, offs, res):
        check(nb == t.nbytes and shm.read(o, t.nbytes) == ref[t.name],
              "read batch: %s differs" % t.name)
    # Copy mode: the gpu-placed ones through the ring; a cpu-placed one is EFBIG,
    # an index past the plan ERANGE, an entry past dest_size EINVAL; the rest land.
    gpu = [(t, o) for t, o in zip(ts, offs) if t.placement == "gpu"]
    cpu = [(t, o) for t, o in zip(ts, offs) if t.placement == "cpu"]
    os.ftruncate(shm.fd, 0)
    os.ftruncate(shm.fd, shm.size)
    entries = [(t.index, o) for t, o in gpu] + [(cpu[0][0].index, cpu[0][1])] + \
        [(len(m.tensors) + 5, 0), (gpu[0][0].index, shm.size - 1)]
    if staged:
        res = io.stage_batch(fd, "copy", Destination.shm(shm.name, 0, shm.size), entries)
        errs = [e for _, e, _ in res]
        want = [0] * len(gpu) + [errno.EFBIG, errno.ERANGE, errno.EINVAL]
        check(errs == want, "copy batch errors %r, expected %r" % (errs, want))
        for t, o in gpu:
            check(shm.read(o, t.nbytes) == ref[t.name], "copy batch: %s differs" % t.name)
    else:
        expect_errno(lambda: io.stage_batch(fd, "copy", Destination.shm(shm.name, 0, shm.size),
                                            entries), errno.ENODEV, "copy batch without staging")
    # Malformed requests fail as a whole.
    def raw(mutate):
        buf = bytearray(io.BATCH_SIZE)
        nm = shm.name.encode() + b"\0"
        struct.pack_into(io._BATCH_HEAD_FMT, buf, 0, placefs.IOC_VERSION, io.BATCH_SIZE,
                         placefs.STAGE_READ, 1, placefs.HANDLE_HOST_SHM, len(nm), shm.size,
                         nm, 0, 0, 0, 0, *([0] * 9))
        struct.pack_into(io._BATCH_ENTRY_FMT, buf, 256, ts[0].index, 0, 0, 0, 0)
        mutate(buf)
        fcntl.ioctl(fd, io.IOC_STAGE_BATCH, buf, True)
    raw(lambda b: None)
    for what, mut in (("count 0", lambda b: struct.pack_into("=I", b, 12, 0)),
                      ("count 257", lambda b: struct.pack_into("=I", b, 12, 257)),
                      ("borrow mode", lambda b: struct.pack_into("=I", b, 8, 0)),
                      ("reserved", lambda b: struct.pack_into("=Q", b, 248, 1)),
                      ("entry after count", lambda b: struct.pack_into("=Q", b, 256 + 32, 1)),
                      ("out field set", lambda b: struct.pack_into("=i", b, 256 + 24, 5)),
                      ("cuda dest in read mode", lambda b: struct.pack_into("=I", b, 16, 1))):
        expect_errno(lambda: raw(mut), errno.EINVAL, "batch with %s" % what)
    after = stats(mnt)["batch"]
    check(after["requests"] - before["requests"] >= 2, "stats batch.requests %r -> %r"
          % (before, after))
    os.close(fd)
    shm.close()
    m.close()
    print("batch: read (%d tensors) and copy (%d gpu, 3 refused entries) exact; "
          "7 malformed requests EINVAL" % (len(ts), len(gpu)))


def packed_layout(tensors, placement, align=256):
    """{index: offset} of the placement's packed layout, size (lib/model/plan.h, written
    out again here from its text): plan order; a tensor that directly follows the one
    before it in the same shard starts where that one ends when that offset is a
    multiple of its element size, any other at the next multiple of align."""
    elem = {"F64": 8, "I64": 8, "U64": 8, "C64": 8, "F32": 4, "I32": 4, "U32": 4,
            "F16": 2, "BF16": 2, "I16": 2, "U16": 2}
    where, end, prev = {}, 0, None
    for t in tensors:
        if t.placement == placement:
            if (prev is not None and prev.source == t.source
                    and prev.offset + prev.nbytes == t.offset and end % elem.get(t.dtype, 1) == 0):
                at = end
            else:
                at = -(-end // align) * align
            where[t.index] = at
            end = at + t.nbytes
            prev = t
    return where, end


def ranges(mnt, source):
    """STAGE_BATCH with BATCH_RANGES: plan ranges into the packed layouts of layout.json."""
    import fcntl
    from placefs import _ioctl as io
    m = placefs.Mount(mnt)
    staged = stats(mnt).get("backend") != "none"
    n = len(m.tensors)
    ref = _source_ref(source)
    with open(os.path.join(mnt, ".placefs", "layout.json")) as f:
        lay = json.load(f)
    check(lay["align"] == io.PACK_ALIGN == 256 and lay["pack"] == io.PACK_RULE == "runs"
          and lay["first"] == m.tensors[0].filename,
          "layout.json header %r" % lay)
    fd = os.open(os.path.join(mnt, lay["first"]), os.O_RDONLY)
    b0 = stats(mnt)["batch"]
    moved = 0
    for mode, pl in (("copy", "gpu"), ("read", "cpu")):
        where, size = packed_layout(m.tensors, pl)
        mine = [t for t in m.tensors if t.placement == pl]
        check(lay[pl] == {"count": len(mine), "bytes": sum(t.nbytes for t in mine),
                          "packed": size}, "layout.json %s: %r, expected packed %d"
              % (pl, lay[pl], size))
        base = 4096 + 64  # any base: every tensor lands at base + its packed offset
        shm = Shm(base + size + 1, "ranges-" + mode)
        dest = Destination.shm(shm.name, 0, shm.size)
        cuts = sorted({0, n, n // 3, (2 * n) // 3})
        spans = [(a, b - a, base) for a, b in zip(cuts, cuts[1:]) if b > a]
        if mode == "copy" and not staged:
            expect_errno(lambda: io.stage_batch(fd, mode, dest, spans, ranges=True),
                         errno.ENODEV, "ranges without staging")
            shm.close()
            continue
        res = io.stage_batch(fd, mode, dest, spans, ranges=True)
        for (a, c, _), (nb, err, _) in zip(spans, res):
            want = sum(t.nbytes for t in m.tensors[a:a + c] if t.placement == pl)
            check(err == 0 and nb == want, "%s ranges [%d, +%d): %r, expected %d bytes"
                  % (mode, a, c, (nb, err), want))
        for t in mine:
            check(shm.read(base + where[t.index], t.nbytes) == ref[t.name],
                  "%s ranges: %s differs at base + %d" % (mode, t.name, where[t.index]))
        moved += len(mine)
        if mine:
            # A base below the first tensor's packed offset wraps (modulo 2^64):
            # the last tensor alone lands at 0.
            t = mine[-1]
            os.ftruncate(shm.fd, 0)
            os.ftruncate(shm.fd, shm.size)
            res = io.stage_batch(fd, mode, dest, [(t.index, 1, (-where[t.index]) % (1 << 64))],
                                 ranges=True)
            check(res == [(t.nbytes, 0, t.index)] and shm.read(0, t.nbytes) == ref[t.name],
                  "%s range with a wrapping base: %r" % (mode, res))
            moved += 1
            # Past dest_size: EINVAL for the range, naming its first tensor that failed.
            res = io.stage_batch(fd, mode, dest, [(0, n, shm.size)], ranges=True)
            first = mine[0] if mine[0].nbytes else next((x for x in mine if x.nbytes), mine[0])
            check(res[0][1] == errno.EINVAL and res[0][2] == first.index,
                  "%s range past dest_size: %r, expected EINVAL at %d" % (mode, res, first.index))
        # A range with none of the placement's tensors moves nothing, and succeeds.
        other = [t for t in m.tensors if t.placement != pl]
        if other:
            res = io.stage_batch(fd, mode, dest, [(other[0].index, 1, 0)], ranges=True)
            check(res == [(0, 0, other[0].index)], "%s range of none: %r" % (mode, res))
        # Past the plan: ERANGE for that range alone.
        res = io.stage_batch(fd, mode, dest, [(n - 1, 2, base), (n + 3, 1, base)], ranges=True)
        check([e for _, e, _ in res] == [errno.ERANGE] * 2, "%s ranges past the plan: %r"
              % (mode, res))
        # Malformed: overlapping ranges, a range of 0 entries, an unknown flag.
        expect_errno(lambda: io.stage_batch(fd, mode, dest, [(0, 2, 0), (1, 1, 0)],
                                            ranges=True), errno.EINVAL, "overlapping ranges")
        expect_errno(lambda: io.stage_batch(fd, mode, dest, [(0, 0, 0)], ranges=True),
                     errno.EINVAL, "a range of no entries")

        def flag(bit):
            buf = bytearray(io.BATCH_SIZE)
            nm = shm.name.encode() + b"\0"
            struct.pack_into(io._BATCH_HEAD_FMT, buf, 0, placefs.IOC_VERSION, io.BATCH_SIZE,
                             io.STAGE_READ, 1, placefs.HANDLE_HOST_SHM, len(nm), shm.size,
                             nm, 0, 0, 0, bit, *([0] * 9))
            struct.pack_into(io._BATCH_ENTRY_FMT, buf, 256, 0, 0, 1, 0, 0)
            fcntl.ioctl(fd, io.IOC_STAGE_BATCH, buf, True)
        flag(io.BATCH_RANGES)
        expect_errno(lambda: flag(2), errno.EINVAL, "an unknown batch flag")
        shm.close()
    b1 = stats(mnt)["batch"]
    check(b1["entries"] - b0["entries"] >= moved, "stats batch.entries %r -> %r" % (b0, b1))
    os.close(fd)
    m.close()
    print("ranges: %d tensor moves over %d tensors, exact at their packed offsets; wrap, "
          "none, ERANGE, EINVAL checked" % (moved, n))


def runs(mnt, source):
    """Many small tensors, adjacent in the shards: a load moves them as a few ranges."""
    m = placefs.Mount(mnt)
    ref = _source_ref(source)
    b0 = stats(mnt)["batch"]
    for mode in ("copy", "borrow"):
        sd = placefs.load_state_dict(mnt, device="cpu", mode=mode)
        for name, v in sd.items():
            check(bytes(v.data) == ref[name], "runs (%s): %s differs" % (mode, name))
        for name, v in placefs.iter_weights(mnt, device="cpu", mode="copy",
                                            window_bytes=1 << 20):
            check(bytes(v.data) == ref[name], "runs, iter_weights: %s differs" % name)
    b1 = stats(mnt)["batch"]
    entries, moves = b1["entries"] - b0["entries"], b1["moves"] - b0["moves"]
    check(b1["failed"] == b0["failed"], "batch entries failed: %r" % b1)
    check(entries >= len(m.tensors) and moves * 4 <= entries,
          "%d batch entries in %d moves: neighbours were not moved together" % (entries, moves))
    m.close()
    print("runs: %d tensors exact; %d batch entries moved as %d ranges" % (len(m.tensors),
                                                                          entries, moves))


def stream(mnt, source):
    """iter_weights' contract (doc/PYTHON.md "Streaming"): copy mode yields owned
    tensors that stay right after the iteration moved on, and never has more than
    window_bytes of batches being filled ahead of the consumer (a batch larger than
    the window alone); borrow mode holds one lease ahead of the consumer's: at
    most two at any item, none at the end."""
    from placefs import stream as st
    m = placefs.Mount(mnt)
    ref = _source_ref(source)
    order = [t.name for t in m.tensors]
    staged = stats(mnt).get("backend") != "none"
    largest = max(t.nbytes for t in m.tensors)
    # The destinations of copy mode, counted as the stream creates and unlinks them.
    live, peak = [0], [0]
    orig = st._ShmDest

    class Counted(orig):
        def __init__(self, size):
            super().__init__(size)
            self.asked = size
            live[0] += size
            peak[0] = max(peak[0], live[0])

        def unlink(self):
            if self.name is not None:
                live[0] -= self.asked
            super().unlink()

    st._ShmDest = Counted
    try:
        for window in (1 << 16, 100000, 1 << 20, 1):
            peak[0] = 0
            kept = list(placefs.iter_weights(mnt, device="cpu", mode="copy",
                                             window_bytes=window))
            check([n for n, _ in kept] == order, "copy (window %d): order" % window)
            # Owned: every item still holds its bytes once the stream has moved on.
            for name, v in kept:
                check(bytes(v.data) == ref[name], "copy (window %d): %s changed after the "
                      "iteration moved on" % (window, name))
            # A batch of one tensor larger than the window is in flight alone.
            bound = max(window, largest if window < largest else 0)
            check(peak[0] <= bound, "copy (window %d): %d bytes in flight at the peak"
                  % (window, peak[0]))
            check(live[0] == 0, "copy (window %d): %d bytes of destinations left"
                  % (window, live[0]))
    finally:
        st._ShmDest = orig
    most, seen = 0, 0
    leased = [t.placement == "gpu" and t.nbytes > 0 for t in m.tensors]
    for name, v in placefs.iter_weights(mnt, device="cpu", mode="borrow"):
        check(bytes(v.data) == ref[name], "borrow: %s differs" % name)
        # A slow consumer: the leasing thread runs ahead all it may. When this item
        # and the next are both leased, wait (bounded) until the next one is held:
        # a busy machine may schedule the leasing thread late, but never lets it
        # take a third.
        ahead = seen + 1 < len(leased) and leased[seen] and leased[seen + 1]
        slow = seen < 100
        deadline = time.monotonic() + (0 if not slow else 5.0 if ahead and staged else 0.005)
        while True:
            n = stats(mnt).get("leases", 0)
            most = max(most, n)
            if (ahead and staged and n >= 2) or time.monotonic() >= deadline:
                break
            time.sleep(0.002)
        seen += 1
    check(seen == len(order), "borrow: %d items of %d" % (seen, len(order)))
    if staged and any(a and b for a, b in zip(leased, leased[1:])):
        check(most == 2, "borrow: %d leases at most, expected 2 (the consumer's and the "
              "next)" % most)
    elif not staged:
        check(most == 0, "borrow without staging: %d leases" % most)
    check(stats(mnt).get("leases", 0) == 0, "borrow: leases left after the end")
    m.close()
    print("stream: copy items owned, in flight within the window (4 windows); borrow: "
          "at most %d leases" % most)


if __name__ == "__main__":
    globals()[sys.argv[1]](*sys.argv[2:])
