# SPDX-License-Identifier: MIT
"""The staging protocol of include/placefs/ioctl.h, mirrored with `struct` and `fcntl`.

Everything here follows the C header line by line: the constants, the three
request structs (packed with explicit formats, their sizes and the offsets
the header asserts checked at import), the _IOC command numbers of this
machine, and one function per ioctl: ring_info(fd), stage(fd, ...) and
release(fd, lease). tests/py/loader_test.py compares all of it with what
the C compiler makes of the header (tests/py/ioctl_probe.c); change both
together.
"""

import errno as _errno
import os
import platform
import struct

try:
    import fcntl
except ImportError:  # pragma: no cover - not Linux
    fcntl = None

IOC_MAGIC = 0xB9
IOC_VERSION = 1
HANDLE_MAX = 128
CUDA_IPC_HANDLE_BYTES = 64

BACKEND_NONE = 0
BACKEND_HOST = 1
BACKEND_CUDA = 2
_BACKEND_NAMES = {BACKEND_NONE: "none", BACKEND_HOST: "host", BACKEND_CUDA: "cuda"}

HANDLE_NONE = 0
HANDLE_CUDA_IPC = 1
HANDLE_HOST_SHM = 2

STAGE_BORROW = 0
STAGE_COPY = 1
STAGE_READ = 2
STAGED_PREFETCHED = 0x1
# stage.flags
STAGE_SLICE = 0x1  # slice_dim, slice_start, slice_len are valid
STAGE_DEVICE = 0x2  # device is valid
# ring_info.flags
RING_INFO_DEVICE = 0x1  # select is a device (CUDA ordinal, N of host:N)
RING_INFO_POSITION = 0x2  # select is a position in the mount's device list

# The structs have explicit padding and fixed-width fields only, so native
# byte order with standard sizes and no automatic alignment ("=") is exactly
# the C layout. Field order follows the header line by line.
#
# struct placefs_ioc_ring_info: version, size, backend, device (int32),
# ring_bytes, host_buffer_bytes, alignment, handle_kind, handle_bytes,
# handle[128], flags, select (int32), ndevices, position, reserved[8].
_RING_INFO_FMT = "=IIIiQQQII%dsIiII8Q" % HANDLE_MAX
# struct placefs_ioc_stage: version, size, mode, flags, dest_kind,
# dest_handle_bytes, dest_offset, dest_size, dest_handle[128], timeout_ns,
# nbytes, ring_offset, lease, wait_ns, read_ns, copy_ns, total_ns,
# out_flags, pad0, slice_dim, device (int32), slice_start, slice_len,
# reserved[7].
_STAGE_FMT = "=IIIIIIQQ%dsQQQQQQQQIIIiQQ7Q" % HANDLE_MAX
# struct placefs_ioc_release: version, size, lease, reserved[6].
_RELEASE_FMT = "=IIQ6Q"
# struct placefs_ioc_stage_batch: version, size, mode, count, dest_kind, dest_handle_bytes,
# dest_size, dest_handle, timeout_ns, total_ns, done, flags, reserved[9]; then
# BATCH_MAX entries of (tensor, dest_offset, nbytes, error, out_flags).
BATCH_MAX = 256
_BATCH_HEAD_FMT = "=IIIIIIQ%dsQQII9Q" % HANDLE_MAX
_BATCH_ENTRY_FMT = "=QQQiI"
# PLACEFS_IOC_BATCH_RANGES: entries are ranges of the plan (stage_batch(ranges=True)).
BATCH_RANGES = 1
# PLACEFS_PLAN_PACK_ALIGN: a placement's packed layout aligns each tensor to it.
PACK_ALIGN = 256
# layout.json's "pack": the rule of lib/model/plan.h (neighbours in a shard stay
# neighbours where their elements stay aligned; the rest at multiples of PACK_ALIGN).
PACK_RULE = "runs"
BATCH_SIZE = 256 + BATCH_MAX * 32

RING_INFO_SIZE = 256
STAGE_SIZE = 320
RELEASE_SIZE = 64
assert struct.calcsize(_RING_INFO_FMT) == RING_INFO_SIZE
assert struct.calcsize(_STAGE_FMT) == STAGE_SIZE
assert struct.calcsize(_RELEASE_FMT) == RELEASE_SIZE
# The offsets the C header asserts, checked here too.
assert struct.calcsize("=IIIiQQQII") == 48  # ring_info.handle
assert struct.calcsize("=IIIIIIQQ") == 40  # stage.dest_handle
assert struct.calcsize("=IIIIIIQQ%dsQ" % HANDLE_MAX) == 176  # stage.nbytes
assert struct.calcsize("=IIIIIIQQ%dsQQQQQQQQ" % HANDLE_MAX) == 232  # stage.out_flags
assert struct.calcsize("=IIIIIIQQ%dsQQQQQQQQII" % HANDLE_MAX) == 240  # stage.slice_dim
assert struct.calcsize("=IIIiQQQII%ds" % HANDLE_MAX) == 176  # ring_info.flags
assert struct.calcsize("=IIIiQQQII%dsIiI" % HANDLE_MAX) == 188  # ring_info.position


def _ioc_layout():
    """(nrbits, typebits, sizebits, dirbits, NONE, WRITE, READ) for this machine."""
    m = platform.machine().lower()
    # powerpc, mips, sparc and alpha use 13 size bits and 3 direction bits
    # (linux/arch/*/include/uapi/asm/ioctl.h); everything else (x86, arm,
    # arm64, riscv, s390, loongarch) uses the generic encoding.
    if m.startswith(("ppc", "powerpc", "mips", "sparc", "alpha")):
        return 8, 8, 13, 3, 1, 4, 2
    return 8, 8, 14, 2, 0, 1, 2


def _ioc(direction, typ, nr, size):
    nrbits, typebits, sizebits, _dirbits, _n, _w, _r = _ioc_layout()
    if size >= 1 << sizebits:
        raise ValueError("ioctl argument of %d bytes is too large to encode" % size)
    return ((direction << (nrbits + typebits + sizebits)) | (size << (nrbits + typebits)) |
            (typ << nrbits) | nr)


def _iowr(typ, nr, size):
    _a, _b, _c, _d, _none, write, read = _ioc_layout()
    return _ioc(read | write, typ, nr, size)


def _iow(typ, nr, size):
    _a, _b, _c, _d, _none, write, _read = _ioc_layout()
    return _ioc(write, typ, nr, size)


IOC_RING_INFO = _iowr(IOC_MAGIC, 0x01, RING_INFO_SIZE)
IOC_STAGE = _iowr(IOC_MAGIC, 0x02, STAGE_SIZE)
IOC_RELEASE = _iow(IOC_MAGIC, 0x03, RELEASE_SIZE)
IOC_STAGE_BATCH = _iowr(IOC_MAGIC, 0x04, BATCH_SIZE)

_IOC_NAMES = {IOC_RING_INFO: "PLACEFS_IOC_RING_INFO", IOC_STAGE: "PLACEFS_IOC_STAGE",
              IOC_RELEASE: "PLACEFS_IOC_RELEASE", IOC_STAGE_BATCH: "PLACEFS_IOC_STAGE_BATCH"}

# What each errno means for a placefs ioctl (the list in ioctl.h).
_IOC_ERRORS = {
    _errno.EINVAL: "bad version, size, mode, flags, reserved field or destination",
    _errno.EFBIG: "the tensor is larger than the staging ring (cpu-placed tensors are "
                  "never staged)",
    _errno.ENODEV: "staging is disabled on this mount (-o device=none), or the device "
                   "named (or the destination's) is not one this mount stages to",
    _errno.EOPNOTSUPP: "this backend cannot serve the destination kind",
    _errno.EACCES: "the destination shared-memory object is not the caller's",
    _errno.ENOENT: "no such lease on this file descriptor, or no such destination shm object",
    _errno.ETIMEDOUT: "no ring space within the timeout",
    _errno.EINTR: "interrupted while waiting for ring space",
    _errno.EIO: "the tensor could not be read or copied completely (see the daemon log)",
    _errno.ENOMEM: "the daemon ran out of host memory",
    _errno.ENOTTY: "not a placefs tensor file (or a daemon without the staging ioctls)",
}


def _fileno(fd):
    return fd if isinstance(fd, int) else fd.fileno()


# fcntl.ioctl() keeps the GIL for the whole call when its buffer is longer
# than 1024 bytes (it hands the kernel the caller's own buffer, which another
# thread could resize meanwhile). A STAGE_BATCH request is 8 KiB: through
# fcntl, every batch would stop every other thread of the process until the
# daemon answered, and a loader's requests would run one at a time (measured
# on an H200: 1.0-1.5 of 4-16 in flight). Those go to libc's ioctl through
# ctypes, which lets go of the GIL while the call runs.
_FCNTL_BUF_MAX = 1024
_LIBC_IOCTL = []  # [(ctypes, ioctl)] once loaded; [None] when it cannot be


def _libc_ioctl():
    if not _LIBC_IOCTL:
        try:
            import ctypes
            f = ctypes.CDLL(None, use_errno=True).ioctl
            f.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)
            f.restype = ctypes.c_int
            _LIBC_IOCTL.append((ctypes, f))
        except (ImportError, OSError, AttributeError):  # pragma: no cover
            _LIBC_IOCTL.append(None)
    return _LIBC_IOCTL[0]


def _ioctl_nogil(fd, cmd, buf):
    """ioctl(fd, cmd, buf) without the GIL; False when libc's ioctl is not reachable."""
    lib = _libc_ioctl()
    if lib is None:  # pragma: no cover
        return False
    ctypes, f = lib
    c = (ctypes.c_char * len(buf)).from_buffer(buf)  # buf cannot be resized meanwhile
    try:
        if f(fd, cmd, ctypes.addressof(c)) < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    finally:
        del c
    return True


def _ioctl(fd, cmd, buf, what):
    if fcntl is None:  # pragma: no cover
        raise OSError(_errno.ENOSYS, "placefs ioctls need fcntl (Linux)")
    try:
        if len(buf) <= _FCNTL_BUF_MAX or not _ioctl_nogil(_fileno(fd), cmd, buf):
            fcntl.ioctl(_fileno(fd), cmd, buf, True)
    except OSError as e:
        rule = _IOC_ERRORS.get(e.errno, os.strerror(e.errno) if e.errno else str(e))
        raise OSError(e.errno, "%s: %s: %s" % (what, _IOC_NAMES.get(cmd, hex(cmd)), rule)) \
            from None


class RingInfo:
    """What PLACEFS_IOC_RING_INFO reports about a mount's staging ring."""

    __slots__ = ("backend", "device", "ring_bytes", "host_buffer_bytes", "alignment",
                 "handle_kind", "handle", "ndevices", "position")

    def __init__(self, backend, device, ring_bytes, host_buffer_bytes, alignment, handle_kind,
                 handle, ndevices=1, position=0):
        self.ndevices = ndevices  # rings of the mount: 0 (none), 1, or one per device
        self.position = position  # this ring's position in the mount's device list
        self.backend = backend
        self.device = device
        self.ring_bytes = ring_bytes
        self.host_buffer_bytes = host_buffer_bytes
        self.alignment = alignment
        self.handle_kind = handle_kind
        self.handle = handle  # bytes: the used part of the handle field

    @property
    def backend_name(self):
        return _BACKEND_NAMES.get(self.backend, "unknown(%d)" % self.backend)

    @property
    def shm_name(self):
        """The ring's POSIX shm name ("/placefs-...") for the host backend, else None."""
        if self.handle_kind != HANDLE_HOST_SHM:
            return None
        return self.handle.split(b"\0", 1)[0].decode()

    def __repr__(self):
        return ("RingInfo(backend=%s, device=%d, ring_bytes=%d, host_buffer_bytes=%d, "
                "alignment=%d, handle_kind=%d, handle=%d bytes, ndevices=%d, position=%d)" % (
                    self.backend_name, self.device, self.ring_bytes, self.host_buffer_bytes,
                    self.alignment, self.handle_kind, len(self.handle), self.ndevices,
                    self.position))


class StageResult:
    """What PLACEFS_IOC_STAGE returned. Times are nanoseconds spent in the daemon."""

    __slots__ = ("nbytes", "ring_offset", "lease", "wait_ns", "read_ns", "copy_ns", "total_ns",
                 "out_flags", "device")

    def __init__(self, nbytes, ring_offset, lease, wait_ns, read_ns, copy_ns, total_ns,
                 out_flags, device=-1):
        self.device = device  # the device whose ring served it (copy and borrow)
        self.nbytes = nbytes
        self.ring_offset = ring_offset
        self.lease = lease
        self.wait_ns = wait_ns
        self.read_ns = read_ns
        self.copy_ns = copy_ns
        self.total_ns = total_ns
        self.out_flags = out_flags

    @property
    def prefetched(self):
        return bool(self.out_flags & STAGED_PREFETCHED)

    @property
    def timings(self):
        return {"wait_ns": self.wait_ns, "read_ns": self.read_ns, "copy_ns": self.copy_ns,
                "total_ns": self.total_ns}

    def __repr__(self):
        return ("StageResult(nbytes=%d, ring_offset=%d, lease=%d, wait_ns=%d, read_ns=%d, "
                "copy_ns=%d, total_ns=%d, prefetched=%s)" % (
                    self.nbytes, self.ring_offset, self.lease, self.wait_ns, self.read_ns,
                    self.copy_ns, self.total_ns, self.prefetched))


class Destination:
    """A copy-mode destination: a handle of the caller's memory, an offset and its size.

    Use Destination.shm("/name", offset, size) for a POSIX shared-memory object
    of the caller (host or CUDA backend) or Destination.cuda_ipc(handle64,
    offset, size) for a cudaIpcMemHandle_t of the base of a CUDA allocation
    (CUDA backend only). `size` is the size of the whole object or allocation;
    the tensor goes to bytes [offset, offset + nbytes).
    """

    __slots__ = ("kind", "handle", "offset", "size")

    def __init__(self, kind, handle, offset, size):
        handle = bytes(handle)
        if kind not in (HANDLE_CUDA_IPC, HANDLE_HOST_SHM):
            raise ValueError("destination kind %r is neither HANDLE_CUDA_IPC nor HANDLE_HOST_SHM"
                             % (kind,))
        if not 0 < len(handle) <= HANDLE_MAX:
            raise ValueError("a destination handle has 1 to %d bytes, not %d"
                             % (HANDLE_MAX, len(handle)))
        if offset < 0 or size < 0:
            raise ValueError("destination offset and size must not be negative")
        self.kind = kind
        self.handle = handle
        self.offset = offset
        self.size = size

    @classmethod
    def shm(cls, name, offset, size):
        if isinstance(name, str):
            name = name.encode()
        if not name.startswith(b"/") or b"/" in name[1:] or b"\0" in name or len(name) < 2:
            raise ValueError("a shm destination name is \"/name\" (one component), not %r"
                             % (name,))
        if len(name) + 1 > HANDLE_MAX:
            raise ValueError("shm name %r is longer than %d bytes" % (name, HANDLE_MAX - 1))
        return cls(HANDLE_HOST_SHM, name + b"\0", offset, size)

    @classmethod
    def cuda_ipc(cls, handle, offset, size):
        handle = bytes(handle)
        if len(handle) != CUDA_IPC_HANDLE_BYTES:
            raise ValueError("a CUDA IPC handle is %d bytes, not %d"
                             % (CUDA_IPC_HANDLE_BYTES, len(handle)))
        return cls(HANDLE_CUDA_IPC, handle, offset, size)

    def __repr__(self):
        return "Destination(kind=%d, handle=%r, offset=%d, size=%d)" % (
            self.kind, self.handle[:16], self.offset, self.size)


def ring_info(fd, device=None, position=None):
    """PLACEFS_IOC_RING_INFO on a tensor file descriptor (int or file object).

    Without arguments: the mount's (first) ring. device=N: the ring of device
    N (CUDA ordinal, or N of host:N); position=i: the i-th ring of the
    mount's -o device= list. ENODEV for a ring the mount does not have.
    """
    if device is not None and position is not None:
        raise ValueError("ring_info: device or position, not both")
    flags, select = 0, 0
    if device is not None:
        flags, select = RING_INFO_DEVICE, int(device)
    elif position is not None:
        flags, select = RING_INFO_POSITION, int(position)
    if not -(1 << 31) <= select < (1 << 31):
        raise ValueError("ring_info: select %d does not fit 32 bits" % select)
    buf = bytearray(RING_INFO_SIZE)
    struct.pack_into("=II", buf, 0, IOC_VERSION, RING_INFO_SIZE)
    struct.pack_into("=Ii", buf, 176, flags, select)
    _ioctl(fd, IOC_RING_INFO, buf, "ring_info")
    f = struct.unpack(_RING_INFO_FMT, buf)
    (version, size, backend, device, ring_bytes, host_buffer_bytes, alignment, handle_kind,
     handle_bytes, handle) = f[:10]
    if version != IOC_VERSION or size != RING_INFO_SIZE:
        raise OSError(_errno.EPROTO, "ring_info: the daemon answered version %d size %d, "
                      "expected version %d size %d" % (version, size, IOC_VERSION,
                                                       RING_INFO_SIZE))
    if handle_bytes > HANDLE_MAX:
        raise OSError(_errno.EPROTO, "ring_info: handle_bytes %d exceeds %d"
                      % (handle_bytes, HANDLE_MAX))
    return RingInfo(backend, device, ring_bytes, host_buffer_bytes, alignment, handle_kind,
                    bytes(handle[:handle_bytes]), ndevices=f[12], position=f[13])


def _mode_number(mode):
    if mode in ("copy", STAGE_COPY):
        return STAGE_COPY
    if mode in ("borrow", STAGE_BORROW):
        return STAGE_BORROW
    if mode in ("read", STAGE_READ):
        return STAGE_READ
    raise ValueError("stage mode must be 'copy', 'borrow' or 'read', got %r" % (mode,))


def stage(fd, mode="copy", dest=None, timeout_ns=0, what="stage", slice=None, device=None):
    """PLACEFS_IOC_STAGE on a tensor file descriptor; returns a StageResult.

    mode "borrow" (or STAGE_BORROW) leases ring bytes [ring_offset, ring_offset
    + nbytes) until release(fd, lease) or close(fd); dest must be None. mode
    "copy" (STAGE_COPY) writes the tensor to `dest` (a Destination) and holds
    nothing. mode "read" (STAGE_READ) has the daemon's reader threads read
    the tensor from its shard straight into `dest`, a shm Destination, with
    no ring (any placement; also on a mount without staging). timeout_ns
    bounds the wait for ring space (0: no limit). slice=(dim, start, len)
    stages only elements [start, start + len) of dimension dim (0: rows,
    1: columns), compacted (copy and borrow; nbytes comes back as the
    slice's). device=N stages through the ring of device N (needed for a
    borrow on a mount of several devices). Errors are OSError with the
    ioctl's errno; `what` prefixes their message.
    """
    m = _mode_number(mode)
    if m in (STAGE_COPY, STAGE_READ):
        if not isinstance(dest, Destination):
            raise ValueError("%s: %s mode needs a Destination, got %r" % (what, mode, dest))
        if m == STAGE_READ and dest.kind != HANDLE_HOST_SHM:
            raise ValueError("%s: read mode needs a shm Destination" % what)
        kind, hb, handle, doff, dsize = (dest.kind, len(dest.handle), dest.handle, dest.offset,
                                         dest.size)
    else:
        if dest is not None:
            raise ValueError("%s: borrow mode takes no destination" % what)
        kind, hb, handle, doff, dsize = HANDLE_NONE, 0, b"", 0, 0
    if timeout_ns < 0:
        raise ValueError("%s: timeout_ns must not be negative" % what)
    flags, sdim, sstart, slen, dev = 0, 0, 0, 0, 0
    if slice is not None:
        sdim, sstart, slen = (int(v) for v in slice)
        if sdim < 0 or sstart < 0 or slen < 0:
            raise ValueError("%s: slice %r has a negative field" % (what, slice))
        flags |= STAGE_SLICE
    if device is not None:
        dev = int(device)
        if not -(1 << 31) <= dev < (1 << 31):
            raise ValueError("%s: device %d does not fit 32 bits" % (what, dev))
        flags |= STAGE_DEVICE
    buf = bytearray(STAGE_SIZE)
    struct.pack_into("=IIIIIIQQ%dsQ" % HANDLE_MAX, buf, 0, IOC_VERSION, STAGE_SIZE, m, flags,
                     kind, hb, doff, dsize, handle, timeout_ns)
    struct.pack_into("=IiQQ", buf, 240, sdim, dev, sstart, slen)
    _ioctl(fd, IOC_STAGE, buf, what)
    f = struct.unpack(_STAGE_FMT, buf)
    return StageResult(*f[10:18], device=f[20])


def stage_batch(fd, mode, dest, entries, timeout_ns=0, what="batch", ranges=False):
    """PLACEFS_IOC_STAGE_BATCH: up to BATCH_MAX tensors into one Destination.

    mode "copy" (gpu-placed tensors through the ring) or "read" (any tensor,
    by the daemon's reader threads; dest must be shm). entries: a list of
    (tensor index in plan.json, dest_offset). fd: any tensor file of the
    mount. Returns [(nbytes, errno, out_flags)], one per entry (errno 0 when
    it landed); OSError only when the request as a whole fails.

    ranges=True (BATCH_RANGES): entries are (first index, count, base), each
    the plan entries [first, first + count), of which the tensors the mode
    places (copy: gpu, read: cpu) go to base + their offset in that
    placement's packed layout (include/placefs/ioctl.h). Returns [(nbytes,
    errno, index)]: the bytes moved, and the errno and plan index of the
    first tensor that failed (errno 0: all landed).
    """
    m = _mode_number(mode)
    if m not in (STAGE_COPY, STAGE_READ):
        raise ValueError("%s: a batch is in copy or read mode, not %r" % (what, mode))
    if not isinstance(dest, Destination):
        raise ValueError("%s: a batch needs a Destination, got %r" % (what, dest))
    if m == STAGE_READ and dest.kind != HANDLE_HOST_SHM:
        raise ValueError("%s: read mode needs a shm Destination" % what)
    if not 0 < len(entries) <= BATCH_MAX:
        raise ValueError("%s: %d entries, expected 1 to %d" % (what, len(entries), BATCH_MAX))
    buf = bytearray(BATCH_SIZE)
    struct.pack_into(_BATCH_HEAD_FMT, buf, 0, IOC_VERSION, BATCH_SIZE, m, len(entries),
                     dest.kind, len(dest.handle), dest.size, dest.handle, timeout_ns, 0, 0,
                     BATCH_RANGES if ranges else 0, *([0] * 9))
    if ranges:
        for i, (first, count, base) in enumerate(entries):
            struct.pack_into(_BATCH_ENTRY_FMT, buf, 256 + 32 * i, first, base, count, 0, 0)
    else:
        for i, (index, off) in enumerate(entries):
            struct.pack_into(_BATCH_ENTRY_FMT, buf, 256 + 32 * i, index, off, 0, 0, 0)
    _ioctl(fd, IOC_STAGE_BATCH, buf, what)
    out = []
    for i in range(len(entries)):
        index, _, nbytes, err, flags = struct.unpack_from(_BATCH_ENTRY_FMT, buf, 256 + 32 * i)
        out.append((nbytes, err, index if ranges else flags))
    return out


def release(fd, lease, what="release"):
    """PLACEFS_IOC_RELEASE: ends a borrow lease taken on the same descriptor."""
    buf = bytearray(RELEASE_SIZE)
    struct.pack_into("=IIQ", buf, 0, IOC_VERSION, RELEASE_SIZE, lease)
    _ioctl(fd, IOC_RELEASE, buf, what)

