# SPDX-License-Identifier: MIT
"""A placefs mount from Python: its plan, its tensor files and its staging ring.

Mount(mountpoint) reads the plan (placefs.plan) when first needed, or finds
one tensor by name through its file's attributes, opens tensor files, asks the
ring's description once (PLACEFS_IOC_RING_INFO) and maps the ring for borrow
mode: the host backend's shm object read-only, or the CUDA backend's IPC
handle through the CUDA runtime (placefs._torch). Mount.borrow(name) stages one
tensor and returns a Borrowed lease; Mount.stage_into(name, dest) stages one
in copy mode. On a mount of several devices (-o device=cuda:0,cuda:1 or the
host:N stand-ins) each device has its own ring: ring_info(device=N) and
borrow(..., device=N) pick it. slice=(dim, start, len) stages part of a
tensor (rows of dim 0 or columns of dim 1); shard_slice() and slice_nbytes()
are the arithmetic of an even tensor-parallel split.
"""

import errno as _errno
import mmap
import os
import threading

from . import _torch
from ._ioctl import (BACKEND_CUDA, BACKEND_HOST, BACKEND_NONE, CUDA_IPC_HANDLE_BYTES,
                     HANDLE_CUDA_IPC, HANDLE_NONE, RingInfo, release, ring_info, stage)
from .plan import Plan, TensorInfo, lookup as _quick_lookup

# Bits per element of the dtypes whose elements are not whole bytes.
_SUBBYTE_BITS = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
_DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2,
                "I16": 2, "U16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1,
                "BOOL": 1, "C64": 8}


def shard_slice(size, rank, world):
    """(start, len) of rank's part of a dimension of `size` split evenly in `world`.

    ValueError (EINVAL in spirit) when world does not divide size, rank is
    out of range or world is not positive: an uneven split is never guessed.
    """
    if world < 1 or not 0 <= rank < world:
        raise ValueError("shard: rank %d of world %d" % (rank, world))
    if size % world:
        raise ValueError("shard: dimension of %d does not split evenly in %d" % (size, world))
    n = size // world
    return rank * n, n


def slice_shape(shape, dim, length):
    """The shape of a slice of `length` elements of dimension dim."""
    if dim not in (0, 1) or dim >= len(shape):
        raise ValueError("slice: dimension %d of a %d-dimensional tensor" % (dim, len(shape)))
    out = list(shape)
    out[dim] = length
    return tuple(out)


def slice_nbytes(dtype, shape, dim, length):
    """Bytes of a slice (its elements times the dtype's size; sub-byte dtypes exact)."""
    n = 1
    for d in slice_shape(shape, dim, length):
        n *= d
    if dtype in _SUBBYTE_BITS:
        bits = n * _SUBBYTE_BITS[dtype]
        if bits % 8:
            raise ValueError("slice: %d elements of %s are not whole bytes" % (n, dtype))
        return bits // 8
    if dtype not in _DTYPE_BYTES:
        raise ValueError("slice: unknown dtype %r" % (dtype,))
    return n * _DTYPE_BYTES[dtype]

def _read_exact_into(f, mv, what):
    """Fills memoryview mv from file f; raises OSError(EIO) on a short file."""
    pos, n = 0, len(mv)
    while pos < n:
        k = f.readinto(mv[pos:])
        if not k:
            raise OSError(_errno.EIO, "%s: short read: %d of %d bytes" % (what, pos, n))
        pos += k


def _read_file(path, n, what):
    """The n bytes of a tensor file as a bytearray, with plain read()s."""
    buf = bytearray(n)
    with open(path, "rb", buffering=0) as f:
        _read_exact_into(f, memoryview(buf), what)
        if f.read(1):
            raise OSError(_errno.EIO, "%s: the file is longer than its %d bytes" % (what, n))
    return buf


class Borrowed:
    """A leased, staged tensor: valid until release() (or leaving the `with` block).

    `view` is a read-only memoryview of the ring bytes on the host backend, a
    uint8 torch tensor on the device for the CUDA backend (with torch), or
    None (CUDA without torch: use copy_to()).
    """

    def __init__(self, mount, tensor, fd, result, view, ring=None):
        self.mount = mount
        self.ring = ring  # the _RingMap the bytes are in (None: the mount's first)
        self.tensor = tensor
        self.fd = fd
        self.result = result
        self.view = view
        self.released = False

    @property
    def nbytes(self):
        return self.result.nbytes

    @property
    def ring_offset(self):
        return self.result.ring_offset

    @property
    def lease(self):
        return self.result.lease

    def tobytes(self):
        """A host copy of the borrowed bytes."""
        self._check()
        buf = bytearray(self.nbytes)
        self.copy_to(buf)
        return bytes(buf)

    def copy_to(self, dst):
        """Copies the borrowed bytes into the writable buffer dst (>= nbytes)."""
        self._check()
        n = self.nbytes
        mv = memoryview(dst).cast("B")
        if len(mv) < n:
            raise ValueError("%s: destination holds %d bytes, the tensor %d"
                             % (self.tensor.name, len(mv), n))
        ring = self.ring if self.ring is not None else self.mount._ring_map()
        if ring.kind == "host":
            mv[:n] = ring.mem[self.ring_offset:self.ring_offset + n]
        else:
            ring.cudart.memcpy_dtoh(mv, ring.ptr + self.ring_offset, n)

    def _check(self):
        if self.released:
            raise RuntimeError("tensor %r: the lease was released; borrowed bytes are gone"
                               % self.tensor.name)

    def release(self):
        if self.released:
            return
        self.released = True
        if isinstance(self.view, memoryview):
            self.view.release()
        self.view = None
        try:
            release(self.fd, self.result.lease, what="tensor %r" % self.tensor.name)
        finally:
            os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class _RingMap:
    """The caller's mapping of the ring: host shm (mem) or CUDA IPC (ptr)."""

    def __init__(self, info):
        self.info = info
        self.kind = None
        self.mem = None
        self._mm = None
        self.ptr = None
        self.cudart = None
        if info.backend == BACKEND_HOST:
            name = info.shm_name
            if not name or not name.startswith("/"):
                raise RuntimeError("the host ring has no usable shm name (handle %r)"
                                   % (info.handle,))
            path = "/dev/shm" + name
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError as e:
                raise OSError(e.errno, "cannot open the staging ring %s: %s (the daemon must "
                              "run as the same user)" % (path, e.strerror)) from None
            try:
                size = os.fstat(fd).st_size
                if size < info.ring_bytes:
                    raise RuntimeError("staging ring %s has %d bytes, ring_info says %d"
                                       % (path, size, info.ring_bytes))
                self._mm = mmap.mmap(fd, info.ring_bytes, mmap.MAP_SHARED, mmap.PROT_READ)
            finally:
                os.close(fd)
            self.mem = memoryview(self._mm)
            self.kind = "host"
        elif info.backend == BACKEND_CUDA:
            if info.handle_kind != HANDLE_CUDA_IPC or len(info.handle) != CUDA_IPC_HANDLE_BYTES:
                raise RuntimeError("the CUDA ring is not exported as a CUDA IPC handle "
                                   "(kind %d, %d bytes)" % (info.handle_kind, len(info.handle)))
            self.cudart = _torch.CudaRT()
            self.ptr = self.cudart.ipc_open(info.handle, info.device)
            self.kind = "cuda"
        else:
            raise RuntimeError("staging is disabled on this mount (backend %s)"
                               % info.backend_name)

    def close(self):
        if self.mem is not None:
            self.mem.release()
            self.mem = None
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass  # a view is still exported; the map goes with its last user
            self._mm = None
        if self.ptr is not None:
            self.cudart.ipc_close(self.ptr)
            self.ptr = None


class Mount:
    """A placefs mount: its plan, its tensor files and its staging ring.

    Mount() reads nothing but checks that mountpoint is a mount. The plan is
    read when first needed: `tensors`, `plan`, `source`, `buffer_size` and
    `ring_bytes`, the loaders, and a name not found the quick way. The quick
    way: tensor(name), path(name), borrow(name) and stage_into(name) of a
    name the daemon uses as its file name as it is (lib/common/name.h keeps printable
    ASCII without '%' and '/' and not starting with '.') read that file's
    user.placefs.* attributes, a few round trips to the daemon, instead of a
    plan of tens of thousands of tensors. A malformed plan is reported when it
    is read, not by Mount().
    """

    def __init__(self, mountpoint):
        self.mountpoint = os.fspath(mountpoint)
        self._dir = os.path.join(self.mountpoint, "")
        self._plan = None
        self._plan_lock = threading.Lock()
        ppath = os.path.join(self.mountpoint, ".placefs", "plan.json")
        if not os.path.exists(ppath):
            raise FileNotFoundError(_errno.ENOENT, "%s is not a placefs mount (no "
                                    ".placefs/plan.json)" % self.mountpoint, ppath)
        self._ring_info = {}  # device (None: the first ring) -> RingInfo
        self._ring = {}  # device -> _RingMap
        self._lock = threading.Lock()

    def __repr__(self):
        if self._plan is None:
            return "Mount(%r: plan not read yet)" % (self.mountpoint,)
        return "Mount(%r: %d tensors)" % (self.mountpoint, len(self.tensors))

    def _read_plan(self):
        """The Plan, read once (ValueError for a malformed one, each time asked)."""
        if self._plan is None:
            with self._plan_lock:
                if self._plan is None:
                    self._plan = Plan(self.mountpoint)
        return self._plan

    @property
    def tensors(self):
        """The TensorInfo list of the plan, in checkpoint order (reads the plan)."""
        return self._read_plan().tensors

    @property
    def source(self):
        return self._read_plan().source

    @property
    def buffer_size(self):
        return self._read_plan().buffer_size

    @property
    def ring_bytes(self):
        return self._read_plan().ring_bytes

    @property
    def plan(self):
        """The whole .placefs/plan.json object (read when first asked for)."""
        return self._read_plan().data

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Unmaps the ring if this object mapped it (borrow mode)."""
        with self._lock:
            for r in self._ring.values():
                r.close()
            self._ring = {}

    def tensor(self, name):
        """The TensorInfo of `name`; KeyError when the mount has no such tensor."""
        plan = self._plan
        if plan is None:
            t = _quick_lookup(self._dir, name)
            if t is not None:
                return t
            plan = self._read_plan()
        try:
            return plan.by_name[name]
        except KeyError:
            raise KeyError("tensor %r is not on the mount %s" % (name, self.mountpoint)) \
                from None

    def _info(self, name):
        """name's TensorInfo; a TensorInfo (from this mount's plan) as it is."""
        return name if isinstance(name, TensorInfo) else self.tensor(name)

    def path(self, name):
        """The path of a tensor's file on the mount."""
        return self.tensor(name).path

    def open(self, name):
        """An O_RDONLY descriptor of a tensor's file (the caller closes it).

        name: the tensor's name, or its TensorInfo."""
        return os.open(self._info(name).path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))

    def ring_info(self, device=None, via=None):
        """A ring (cached), asked through a tensor file; None without tensors.

        device None: the mount's first ring; else the ring of that device
        (CUDA ordinal, N of host:N), OSError(ENODEV) when the mount has none.
        via: the TensorInfo whose file to ask through (borrow() passes the
        tensor it stages, so the plan need not be read); by default the
        plan's first gpu-placed tensor.
        """
        if device not in self._ring_info:
            t = via
            if t is None:
                if not self.tensors:
                    return None
                t = next((x for x in self.tensors if x.placement == "gpu"), self.tensors[0])
            fd = self.open(t)
            try:
                self._ring_info[device] = ring_info(fd, device=device)
            except OSError as e:
                if e.errno != _errno.ENODEV or device is not None:
                    raise
                # A daemon may answer "staging disabled" to ring_info too.
                self._ring_info[device] = RingInfo(BACKEND_NONE, -1, 0, 0, 0, HANDLE_NONE, b"",
                                                   ndevices=0)
            finally:
                os.close(fd)
        return self._ring_info[device]

    @property
    def ndevices(self):
        """The rings of the mount: 0 without staging, 1, or one per -o device= item."""
        info = self.ring_info()
        return info.ndevices if info is not None else 0

    def _ring_map(self, device=None, via=None):
        with self._lock:
            if device not in self._ring:
                self._ring[device] = _RingMap(self.ring_info(device, via))
            return self._ring[device]

    def _slice_bytes(self, t, slice):
        if slice is None:
            return t.nbytes
        dim, _start, length = slice
        return slice_nbytes(t.dtype, t.shape, dim, length)

    def stage_into(self, name, dest, timeout_ns=0, slice=None, device=None):
        """Copy mode: stages one gpu-placed tensor (or its slice) into dest.

        name: the tensor's name, or its TensorInfo (from this mount's plan).

        Returns the StageResult (its nbytes: the slice's, its device: the
        ring's). device=None: the mount's only device, or the one a CUDA IPC
        destination lives on.
        """
        t = self._info(name)
        self._check_gpu(t)
        fd = self.open(t)
        try:
            return stage(fd, "copy", dest, timeout_ns, what="tensor %r" % t.name, slice=slice,
                         device=device)
        finally:
            os.close(fd)

    def borrow(self, name, timeout_ns=0, slice=None, device=None):
        """Borrow mode: stages one gpu-placed tensor and returns a Borrowed lease.

        name: the tensor's name, or its TensorInfo (from this mount's plan).

        Use it as a context manager so the lease ends when the block does:
        the ring space stays taken (and later stages wait) until then.
        slice=(dim, start, len): only that part, compacted. device=N: the
        ring of device N, which a mount of several devices needs.
        """
        t = self._info(name)
        self._check_gpu(t)
        want = self._slice_bytes(t, slice)
        ring = self._ring_map(device, t)
        fd = self.open(t)
        try:
            r = stage(fd, "borrow", None, timeout_ns, what="tensor %r" % t.name, slice=slice,
                      device=device)
        except BaseException:
            os.close(fd)
            raise
        try:
            if r.nbytes != want or r.ring_offset + r.nbytes > ring.info.ring_bytes:
                raise OSError(_errno.EPROTO, "tensor %r: the daemon staged %d bytes at ring "
                              "offset %d; the plan says %d bytes, the ring has %d"
                              % (t.name, r.nbytes, r.ring_offset, want,
                                 ring.info.ring_bytes))
            view = None
            if ring.kind == "host":
                view = ring.mem[r.ring_offset:r.ring_offset + r.nbytes].toreadonly()
            else:
                torch = _torch.get()
                if torch is not None:
                    view = _torch.cuda_view(torch, ring, r.ring_offset, r.nbytes)
            return Borrowed(self, t, fd, r, view, ring)
        except BaseException:
            try:
                release(fd, r.lease)
            finally:
                os.close(fd)
            raise

    def _check_gpu(self, t):
        # The daemon refuses to stage what does not fit the ring (EFBIG); the
        # module does not even ask for cpu-placed tensors.
        if t.placement != "gpu":
            raise ValueError("tensor %r is placed on the cpu (%d bytes > the staging limit "
                             "%s): read its file instead of staging it"
                             % (t.name, t.nbytes, self.buffer_size))

