#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Load the tensors of a placefs mount, staging the GPU-placed ones.

A placefs mount shows one read-only file per selected tensor, annotated with
its placement: "gpu" tensors (payload <= the staging limit) travel through the
daemon's staging ring with the ioctls of include/placefs/ioctl.h, "cpu" tensors
are read through the mount like any file. This module speaks that protocol
from Python with the standard library alone; torch is used when it can be
imported (and numpy for PlacedTensor.numpy()).

Layers, from the bottom:

* ring_info(fd), stage(fd, ...), release(fd, lease): one ioctl each, on a
  descriptor of a tensor file; the structs are packed with `struct` exactly as
  the C header lays them out.
* Mount(mountpoint): the plan (.placefs/plan.json), file paths, the ring, and
  Mount.borrow(name): a leased view of one staged tensor.
* load_state_dict(mountpoint, device, mode): every tensor, in checkpoint order,
  as torch tensors (or PlacedTensor objects without torch).
* A command line: python3 tools/placefs.py MOUNTPOINT [--device D]
  [--mode copy|borrow] [--verify].

See doc/PYTHON.md for the details and the rules each error names.
"""

import argparse
import ctypes
import errno as _errno
import glob
import json
import mmap
import os
import platform
import secrets
import struct
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

try:
    import fcntl
except ImportError:  # pragma: no cover - not Linux
    fcntl = None

__all__ = [
    "BACKEND_NONE", "BACKEND_HOST", "BACKEND_CUDA",
    "HANDLE_NONE", "HANDLE_CUDA_IPC", "HANDLE_HOST_SHM",
    "STAGE_BORROW", "STAGE_COPY", "STAGED_PREFETCHED",
    "IOC_RING_INFO", "IOC_STAGE", "IOC_RELEASE",
    "RING_INFO_SIZE", "STAGE_SIZE", "RELEASE_SIZE",
    "RingInfo", "StageResult", "Destination", "TensorInfo", "PlacedTensor",
    "Mount", "Borrowed", "LoadReport",
    "ring_info", "stage", "release", "encode_name", "copy_mode_from_env",
    "load_state_dict", "load", "main",
]

# ---- the protocol of include/placefs/ioctl.h --------------------------------------------

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
STAGED_PREFETCHED = 0x1

# The structs have explicit padding and fixed-width fields only, so native
# byte order with standard sizes and no automatic alignment ("=") is exactly
# the C layout. Field order follows the header line by line.
#
# struct placefs_ioc_ring_info: version, size, backend, device (int32),
# ring_bytes, host_buffer_bytes, alignment, handle_kind, handle_bytes,
# handle[128], reserved[10].
_RING_INFO_FMT = "=IIIiQQQII%ds10Q" % HANDLE_MAX
# struct placefs_ioc_stage: version, size, mode, flags, dest_kind,
# dest_handle_bytes, dest_offset, dest_size, dest_handle[128], timeout_ns,
# nbytes, ring_offset, lease, wait_ns, read_ns, copy_ns, total_ns,
# out_flags, pad0, reserved[10].
_STAGE_FMT = "=IIIIIIQQ%dsQQQQQQQQII10Q" % HANDLE_MAX
# struct placefs_ioc_release: version, size, lease, reserved[6].
_RELEASE_FMT = "=IIQ6Q"

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

_IOC_NAMES = {IOC_RING_INFO: "PLACEFS_IOC_RING_INFO", IOC_STAGE: "PLACEFS_IOC_STAGE",
              IOC_RELEASE: "PLACEFS_IOC_RELEASE"}

# What each errno means for a placefs ioctl (the list in ioctl.h).
_IOC_ERRORS = {
    _errno.EINVAL: "bad version, size, mode, flags, reserved field or destination",
    _errno.EFBIG: "the tensor is larger than the staging ring (cpu-placed tensors are "
                  "never staged)",
    _errno.ENODEV: "staging is disabled on this mount (-o device=none)",
    _errno.EOPNOTSUPP: "this backend cannot serve the destination kind",
    _errno.EACCES: "the destination shared-memory object is not the caller's",
    _errno.ENOENT: "no such lease on this file descriptor",
    _errno.ETIMEDOUT: "no ring space within the timeout",
    _errno.EINTR: "interrupted while waiting for ring space",
    _errno.EIO: "the tensor could not be read or copied completely (see the daemon log)",
    _errno.ENOMEM: "the daemon ran out of host memory",
    _errno.ENOTTY: "not a placefs tensor file (or a daemon without the staging ioctls)",
}


def _fileno(fd):
    return fd if isinstance(fd, int) else fd.fileno()


def _ioctl(fd, cmd, buf, what):
    if fcntl is None:  # pragma: no cover
        raise OSError(_errno.ENOSYS, "placefs ioctls need fcntl (Linux)")
    try:
        fcntl.ioctl(_fileno(fd), cmd, buf, True)
    except OSError as e:
        rule = _IOC_ERRORS.get(e.errno, os.strerror(e.errno) if e.errno else str(e))
        raise OSError(e.errno, "%s: %s: %s" % (what, _IOC_NAMES.get(cmd, hex(cmd)), rule)) \
            from None


class RingInfo:
    """What PLACEFS_IOC_RING_INFO reports about a mount's staging ring."""

    __slots__ = ("backend", "device", "ring_bytes", "host_buffer_bytes", "alignment",
                 "handle_kind", "handle")

    def __init__(self, backend, device, ring_bytes, host_buffer_bytes, alignment, handle_kind,
                 handle):
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
                "alignment=%d, handle_kind=%d, handle=%d bytes)" % (
                    self.backend_name, self.device, self.ring_bytes, self.host_buffer_bytes,
                    self.alignment, self.handle_kind, len(self.handle)))


class StageResult:
    """What PLACEFS_IOC_STAGE returned. Times are nanoseconds spent in the daemon."""

    __slots__ = ("nbytes", "ring_offset", "lease", "wait_ns", "read_ns", "copy_ns", "total_ns",
                 "out_flags")

    def __init__(self, nbytes, ring_offset, lease, wait_ns, read_ns, copy_ns, total_ns,
                 out_flags):
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


def ring_info(fd):
    """PLACEFS_IOC_RING_INFO on a tensor file descriptor (int or file object)."""
    buf = bytearray(RING_INFO_SIZE)
    struct.pack_into("=II", buf, 0, IOC_VERSION, RING_INFO_SIZE)
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
                    bytes(handle[:handle_bytes]))


def _mode_number(mode):
    if mode in ("copy", STAGE_COPY):
        return STAGE_COPY
    if mode in ("borrow", STAGE_BORROW):
        return STAGE_BORROW
    raise ValueError("stage mode must be 'copy' or 'borrow', got %r" % (mode,))


def stage(fd, mode="copy", dest=None, timeout_ns=0, what="stage"):
    """PLACEFS_IOC_STAGE on a tensor file descriptor; returns a StageResult.

    mode "borrow" (or STAGE_BORROW) leases ring bytes [ring_offset, ring_offset
    + nbytes) until release(fd, lease) or close(fd); dest must be None. mode
    "copy" (STAGE_COPY) writes the tensor to `dest` (a Destination) and holds
    nothing. timeout_ns bounds the wait for ring space (0: no limit). Errors
    are OSError with the ioctl's errno; `what` prefixes their message.
    """
    m = _mode_number(mode)
    if m == STAGE_COPY:
        if not isinstance(dest, Destination):
            raise ValueError("%s: copy mode needs a Destination, got %r" % (what, dest))
        kind, hb, handle, doff, dsize = (dest.kind, len(dest.handle), dest.handle, dest.offset,
                                         dest.size)
    else:
        if dest is not None:
            raise ValueError("%s: borrow mode takes no destination" % what)
        kind, hb, handle, doff, dsize = HANDLE_NONE, 0, b"", 0, 0
    if timeout_ns < 0:
        raise ValueError("%s: timeout_ns must not be negative" % what)
    buf = bytearray(STAGE_SIZE)
    struct.pack_into("=IIIIIIQQ%dsQ" % HANDLE_MAX, buf, 0, IOC_VERSION, STAGE_SIZE, m, 0, kind,
                     hb, doff, dsize, handle, timeout_ns)
    _ioctl(fd, IOC_STAGE, buf, what)
    f = struct.unpack(_STAGE_FMT, buf)
    return StageResult(*f[10:18])


def release(fd, lease, what="release"):
    """PLACEFS_IOC_RELEASE: ends a borrow lease taken on the same descriptor."""
    buf = bytearray(RELEASE_SIZE)
    struct.pack_into("=IIQ", buf, 0, IOC_VERSION, RELEASE_SIZE, lease)
    _ioctl(fd, IOC_RELEASE, buf, what)


# ---- names, dtypes, the plan ------------------------------------------------------------


def encode_name(name):
    """The mount file name of a tensor: '%' -> %25, '/' -> %2F, leading '.' -> %2E."""
    out = name.replace("%", "%25").replace("/", "%2F")
    if out.startswith("."):
        out = "%2E" + out[1:]
    return out


# Bits per element of every safetensors dtype (lib/dtype.c).
_DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
    "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}

# safetensors dtype -> torch dtype attribute names, first present wins. None: raw uint8.
_TORCH_DTYPES = {
    "BOOL": ("bool",), "U8": ("uint8",), "I8": ("int8",), "I16": ("int16",),
    "U16": ("uint16",), "F16": ("float16",), "BF16": ("bfloat16",), "I32": ("int32",),
    "U32": ("uint32",), "F32": ("float32",), "C64": ("complex64",), "F64": ("float64",),
    "I64": ("int64",), "U64": ("uint64",),
    "F8_E4M3": ("float8_e4m3fn",), "F8_E5M2": ("float8_e5m2",),
    "F8_E4M3FNUZ": ("float8_e4m3fnuz",), "F8_E5M2FNUZ": ("float8_e5m2fnuz",),
    "F8_E8M0": ("float8_e8m0fnu",),
    "F4": (), "F6_E2M3": (), "F6_E3M2": (),
}

# safetensors dtype -> numpy dtype name; missing: raw uint8.
_NUMPY_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "F16": "float16", "I32": "int32", "U32": "uint32", "F32": "float32", "C64": "complex64",
    "F64": "float64", "I64": "int64", "U64": "uint64",
}


class TensorInfo:
    """One tensor of the plan: where its file is and how it is placed."""

    __slots__ = ("name", "filename", "path", "source", "dtype", "shape", "nbytes", "offset",
                 "placement", "index")

    def __init__(self, mountpoint, index, entry):
        try:
            self.name = entry["name"]
            self.source = entry["file"]
            self.dtype = entry["dtype"]
            self.shape = tuple(int(d) for d in entry["shape"])
            self.nbytes = int(entry["nbytes"])
            self.offset = int(entry["offset"])
            self.placement = entry["placement"]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError("plan.json: tensor entry %d is malformed (%s)" % (index, e)) from None
        if self.placement not in ("gpu", "cpu"):
            raise ValueError("plan.json: tensor %r has placement %r, neither gpu nor cpu"
                             % (self.name, self.placement))
        if self.nbytes < 0 or any(d < 0 for d in self.shape):
            raise ValueError("plan.json: tensor %r has a negative size" % (self.name,))
        self.index = index
        self.filename = encode_name(self.name)
        self.path = os.path.join(mountpoint, self.filename)

    def __repr__(self):
        return "TensorInfo(%r, %s, shape=%r, nbytes=%d, placement=%s)" % (
            self.name, self.dtype, self.shape, self.nbytes, self.placement)


class PlacedTensor:
    """A loaded tensor without torch: metadata plus its bytes.

    `data` holds the payload bytes exactly as the checkpoint stores them
    (little-endian, row-major); numpy() views them as a numpy array of the
    right dtype and shape when numpy is importable (dtypes numpy lacks, such
    as BF16 and the F8/F6/F4 formats, come back as a flat uint8 array).
    """

    __slots__ = ("name", "dtype", "shape", "placement", "device", "data")

    def __init__(self, name, dtype, shape, placement, device, data):
        self.name = name
        self.dtype = dtype
        self.shape = tuple(shape)
        self.placement = placement
        self.device = device
        self.data = data

    @property
    def nbytes(self):
        return len(self.data)

    def numpy(self):
        import numpy as np
        npname = _NUMPY_DTYPES.get(self.dtype)
        if npname is None:
            return np.frombuffer(self.data, dtype=np.uint8)
        a = np.frombuffer(self.data, dtype=np.dtype(npname).newbyteorder("<"))
        return a.reshape(self.shape)

    def __repr__(self):
        return "PlacedTensor(%r, %s, shape=%r, placement=%s, device=%s, %d bytes)" % (
            self.name, self.dtype, self.shape, self.placement, self.device, len(self.data))


# ---- optional torch and CUDA runtime ----------------------------------------------------

_torch_mod = None
_torch_tried = False


def _torch():
    """torch when importable (and not disabled with PLACEFS_NO_TORCH=1), else None."""
    global _torch_mod, _torch_tried
    if os.environ.get("PLACEFS_NO_TORCH", "") not in ("", "0"):
        return None
    if not _torch_tried:
        _torch_tried = True
        try:
            import torch
            _torch_mod = torch
        except ImportError:
            _torch_mod = None
    return _torch_mod


_warned = set()


def _warn_once(key, msg):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


def _torch_dtype(torch, t):
    """(torch dtype, typed) for a tensor; typed False means a raw uint8 view of nbytes."""
    for attr in _TORCH_DTYPES.get(t.dtype, ()):
        dt = getattr(torch, attr, None)
        if dt is not None:
            return dt, True
    if t.dtype in ("U16", "U32", "U64"):
        _warn_once(t.dtype, "torch %s has no %s dtype (needs torch >= 2.3): %s tensors are "
                   "returned as raw uint8 bytes" % (torch.__version__, t.dtype.lower(),
                                                    t.dtype))
    elif t.dtype.startswith("F8_"):
        _warn_once(t.dtype, "torch %s has no dtype for %s: such tensors are returned as raw "
                   "uint8 bytes" % (torch.__version__, t.dtype))
    return torch.uint8, False


def _typed(torch, t, raw):
    """Views a flat uint8 tensor of t.nbytes bytes as t's dtype and shape."""
    dt, typed = _torch_dtype(torch, t)
    if not typed:
        return raw
    try:
        if dt == torch.uint8:
            return raw.reshape(t.shape)
        return raw.view(dt).reshape(t.shape)
    except RuntimeError as e:
        raise ValueError("tensor %r: %d bytes do not form a %s tensor of shape %r (%s)"
                         % (t.name, t.nbytes, t.dtype, list(t.shape), e)) from None


class _CudaRT:
    """The few CUDA runtime calls the module needs, through ctypes."""

    MEMCPY_DEVICE_TO_HOST = 2
    IPC_LAZY_ENABLE_PEER_ACCESS = 1

    class Handle(ctypes.Structure):
        _fields_ = [("reserved", ctypes.c_char * CUDA_IPC_HANDLE_BYTES)]

    def __init__(self):
        names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
        names += sorted(glob.glob("/usr/local/cuda/lib64/libcudart.so*"))
        torch = _torch()
        if torch is not None:
            # torch wheels bundle the runtime in torch/lib or in nvidia/cuda_runtime/lib.
            tdir = os.path.dirname(torch.__file__)
            names += sorted(glob.glob(os.path.join(tdir, "lib", "libcudart*.so*")))
            site = os.path.dirname(tdir)
            names += sorted(glob.glob(os.path.join(site, "nvidia", "cuda_runtime", "lib",
                                                   "libcudart.so*")))
            names += sorted(glob.glob(os.path.join(site, "nvidia", "cu*", "lib",
                                                   "libcudart.so*")))
        errs = []
        self.lib = None
        for n in names:
            try:
                self.lib = ctypes.CDLL(n)
                self.path = n
                break
            except OSError as e:
                errs.append(str(e))
        if self.lib is None:
            raise RuntimeError("cannot load the CUDA runtime (tried %s): %s"
                               % (", ".join(names), "; ".join(errs[-2:])))
        L = self.lib
        L.cudaGetErrorString.restype = ctypes.c_char_p
        L.cudaGetErrorString.argtypes = [ctypes.c_int]
        L.cudaSetDevice.argtypes = [ctypes.c_int]
        L.cudaGetDevice.argtypes = [ctypes.POINTER(ctypes.c_int)]
        L.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), _CudaRT.Handle,
                                           ctypes.c_uint]
        L.cudaIpcCloseMemHandle.argtypes = [ctypes.c_void_p]
        L.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

    def _check(self, rc, what):
        if rc != 0:
            msg = self.lib.cudaGetErrorString(rc)
            raise RuntimeError("%s failed: CUDA error %d (%s)"
                               % (what, rc, msg.decode() if msg else "?"))

    def set_device(self, dev):
        self._check(self.lib.cudaSetDevice(dev), "cudaSetDevice(%d)" % dev)

    def get_device(self):
        d = ctypes.c_int(-1)
        self._check(self.lib.cudaGetDevice(ctypes.byref(d)), "cudaGetDevice")
        return d.value

    def ipc_open(self, handle, device):
        """Maps the allocation of a 64-byte IPC handle on `device`; returns its address."""
        prev = self.get_device()
        self.set_device(device)
        try:
            h = _CudaRT.Handle()
            ctypes.memmove(ctypes.addressof(h), bytes(handle), CUDA_IPC_HANDLE_BYTES)
            p = ctypes.c_void_p()
            self._check(self.lib.cudaIpcOpenMemHandle(ctypes.byref(p), h,
                                                      self.IPC_LAZY_ENABLE_PEER_ACCESS),
                        "cudaIpcOpenMemHandle of the placefs ring")
            return p.value
        finally:
            self.set_device(prev)

    def ipc_close(self, ptr):
        self._check(self.lib.cudaIpcCloseMemHandle(ctypes.c_void_p(ptr)),
                    "cudaIpcCloseMemHandle")

    def memcpy_dtoh(self, dst, src_ptr, n):
        """Copies n device bytes at src_ptr into the writable buffer dst."""
        if n == 0:
            return
        c = (ctypes.c_char * n).from_buffer(dst)
        self._check(self.lib.cudaMemcpy(ctypes.addressof(c), ctypes.c_void_p(src_ptr), n,
                                        self.MEMCPY_DEVICE_TO_HOST), "cudaMemcpy D2H")


class _CudaSpan:
    """Exposes device bytes [ptr, ptr + n) through __cuda_array_interface__ (uint8, 1-D)."""

    def __init__(self, ptr, n, owner=None):
        self.owner = owner  # keeps the mapping's owner alive while a view exists
        self.__cuda_array_interface__ = {
            "shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3,
            "strides": None, "stream": None,
        }


def _parse_device(device):
    """('cpu', None) or ('cuda', index) for "cpu", "cuda", "cuda:N" or a torch.device."""
    if device is None:
        return "cpu", None
    s = str(device)
    if s == "cpu":
        return "cpu", None
    if s == "cuda":
        torch = _torch()
        idx = torch.cuda.current_device() if torch is not None and torch.cuda.is_available() \
            else 0
        return "cuda", idx
    if s.startswith("cuda:") and s[5:].isdigit() and s[5:].isascii():
        return "cuda", int(s[5:])
    raise ValueError("device must be 'cpu', 'cuda' or 'cuda:N', got %r" % (device,))


# ---- the mount --------------------------------------------------------------------------


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

    def __init__(self, mount, tensor, fd, result, view):
        self.mount = mount
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
        ring = self.mount._ring_map()
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
            self.cudart = _CudaRT()
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
    """A placefs mount: its plan, its tensor files and its staging ring."""

    def __init__(self, mountpoint):
        self.mountpoint = os.fspath(mountpoint)
        plan_path = os.path.join(self.mountpoint, ".placefs", "plan.json")
        try:
            with open(plan_path, "rb") as f:
                plan = json.loads(f.read().decode("utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(_errno.ENOENT, "%s is not a placefs mount (no "
                                    ".placefs/plan.json)" % self.mountpoint,
                                    plan_path) from None
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError("%s: not valid JSON: %s" % (plan_path, e)) from None
        if not isinstance(plan, dict) or not isinstance(plan.get("tensors"), list):
            raise ValueError("%s: no \"tensors\" list" % plan_path)
        self.plan = plan
        self.source = plan.get("source")
        self.buffer_size = plan.get("buffer_size")
        self.ring_bytes = plan.get("ring_bytes")
        self.tensors = [TensorInfo(self.mountpoint, i, e) for i, e in enumerate(plan["tensors"])]
        self._by_name = {}
        for t in self.tensors:
            if t.name in self._by_name:
                raise ValueError("%s: tensor %r is listed twice" % (plan_path, t.name))
            self._by_name[t.name] = t
        self._ring_info = None
        self._ring = None
        self._lock = threading.Lock()

    def __repr__(self):
        return "Mount(%r: %d tensors)" % (self.mountpoint, len(self.tensors))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Unmaps the ring if this object mapped it (borrow mode)."""
        with self._lock:
            if self._ring is not None:
                self._ring.close()
                self._ring = None

    def tensor(self, name):
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError("tensor %r is not on the mount %s" % (name, self.mountpoint)) \
                from None

    def path(self, name):
        """The path of a tensor's file on the mount."""
        return self.tensor(name).path

    def open(self, name):
        """An O_RDONLY descriptor of a tensor's file (the caller closes it)."""
        return os.open(self.path(name), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))

    def ring_info(self):
        """The ring (cached), asked through the first tensor file; None without tensors."""
        if self._ring_info is None:
            if not self.tensors:
                return None
            t = next((x for x in self.tensors if x.placement == "gpu"), self.tensors[0])
            fd = self.open(t.name)
            try:
                self._ring_info = ring_info(fd)
            except OSError as e:
                if e.errno != _errno.ENODEV:
                    raise
                # A daemon may answer "staging disabled" to ring_info too.
                self._ring_info = RingInfo(BACKEND_NONE, -1, 0, 0, 0, HANDLE_NONE, b"")
            finally:
                os.close(fd)
        return self._ring_info

    def _ring_map(self):
        with self._lock:
            if self._ring is None:
                self._ring = _RingMap(self.ring_info())
            return self._ring

    def stage_into(self, name, dest, timeout_ns=0):
        """Copy mode: stages one gpu-placed tensor into dest; returns the StageResult."""
        t = self.tensor(name)
        self._check_gpu(t)
        fd = self.open(name)
        try:
            return stage(fd, "copy", dest, timeout_ns, what="tensor %r" % t.name)
        finally:
            os.close(fd)

    def borrow(self, name, timeout_ns=0):
        """Borrow mode: stages one gpu-placed tensor and returns a Borrowed lease.

        Use it as a context manager so the lease ends when the block does:
        the ring space stays taken (and later stages wait) until then.
        """
        t = self.tensor(name)
        self._check_gpu(t)
        ring = self._ring_map()
        fd = self.open(name)
        try:
            r = stage(fd, "borrow", None, timeout_ns, what="tensor %r" % t.name)
        except BaseException:
            os.close(fd)
            raise
        try:
            if r.nbytes != t.nbytes or r.ring_offset + r.nbytes > ring.info.ring_bytes:
                raise OSError(_errno.EPROTO, "tensor %r: the daemon staged %d bytes at ring "
                              "offset %d; the plan says %d bytes, the ring has %d"
                              % (t.name, r.nbytes, r.ring_offset, t.nbytes,
                                 ring.info.ring_bytes))
            view = None
            if ring.kind == "host":
                view = ring.mem[r.ring_offset:r.ring_offset + r.nbytes].toreadonly()
            else:
                torch = _torch()
                if torch is not None:
                    view = _cuda_view(torch, ring, r.ring_offset, r.nbytes)
            return Borrowed(self, t, fd, r, view)
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


def _cuda_view(torch, ring, off, n):
    dev = torch.device("cuda", ring.info.device)
    if n == 0:
        return torch.empty(0, dtype=torch.uint8, device=dev)
    return torch.as_tensor(_CudaSpan(ring.ptr + off, n, ring), device=dev)


# ---- loading ----------------------------------------------------------------------------


def copy_mode_from_env():
    """'copy' or 'borrow' from INSTANTTENSOR_COPY ("1"/unset: copy, "0": borrow)."""
    v = os.environ.get("INSTANTTENSOR_COPY")
    if v is None or v == "1":
        return "copy"
    if v == "0":
        return "borrow"
    raise ValueError("INSTANTTENSOR_COPY must be 0 or 1, got '%s'" % v)


def _align(n, a):
    return (n + a - 1) // a * a


class _ShmDest:
    """A POSIX shm object of this process, mapped read-write: a copy-mode destination."""

    def __init__(self, size):
        self.size = max(size, mmap.PAGESIZE)
        self.name = None
        for _ in range(16):
            name = "/placefs-py-%d-%s" % (os.getpid(), secrets.token_hex(6))
            try:
                fd = os.open("/dev/shm" + name, os.O_RDWR | os.O_CREAT | os.O_EXCL |
                             getattr(os, "O_CLOEXEC", 0), 0o600)
            except FileExistsError:
                continue
            self.name = name
            break
        else:
            raise OSError(_errno.EEXIST, "cannot create a unique shm name in /dev/shm")
        try:
            os.ftruncate(fd, self.size)
            self.mm = mmap.mmap(fd, self.size, mmap.MAP_SHARED,
                                mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            self.unlink()
            raise
        os.close(fd)

    def dest(self, offset):
        return Destination.shm(self.name, offset, self.size)

    def unlink(self):
        """Removes the name; the memory lives on while mapped (here and in the daemon)."""
        if self.name is not None:
            try:
                os.unlink("/dev/shm" + self.name)
            except FileNotFoundError:
                pass
            self.name = None


def _run_all(pool, fn, items):
    """fn over items on the pool; waits for every call before raising the first error.

    Memory handed to the daemon must not be freed or reused while any stage
    into it may still run, so an error never cuts the waiting short.
    """
    futs = [pool.submit(fn, x) for x in items]
    out, first = [], None
    for f in futs:
        try:
            out.append(f.result())
        except BaseException as e:  # noqa: BLE001 - re-raised below
            if first is None:
                first = e
    if first is not None:
        raise first
    return out


def _torch_ipc_handle(h):
    """The 64-byte cudaIpcMemHandle_t inside what _share_cuda_() returned."""
    h = bytes(h)
    if len(h) == CUDA_IPC_HANDLE_BYTES:
        return h  # torch < 2.5: the bare handle
    # Newer torch: a version byte, a kind byte ('c': cudaMalloc block, 'e':
    # expandable segment), then the handle.
    if len(h) == CUDA_IPC_HANDLE_BYTES + 2 and h[1:2] == b"c":
        return h[2:]
    if len(h) >= 2 and h[1:2] == b"e":
        raise RuntimeError("torch allocated the load buffer in an expandable segment, which has "
                           "no cudaIpcMemHandle_t; set PYTORCH_CUDA_ALLOC_CONF="
                           "expandable_segments:False or use mode='borrow'")
    raise RuntimeError("torch's CUDA IPC handle has an unknown format (%d bytes, %r...)"
                       % (len(h), h[:2]))


def _torch_ipc_done(share):
    """Drops the consumer reference torch counts for a _share_cuda_() export.

    torch keeps a shared buffer alive (in its "limbo") until every consumer
    has decremented a counter in a shm file; the daemon is not a torch
    consumer, so the module does it once the daemon is done writing.
    Otherwise the buffer would never be freed. The counter is slot
    share[5] (int64) after the 64-byte header of the file share[4]; it is
    only changed when it holds exactly 1.
    """
    try:
        name = share[4].decode() if isinstance(share[4], bytes) else str(share[4])
        slot = 64 + 8 * int(share[5])
        fd = os.open("/dev/shm/" + name.lstrip("/"), os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except (OSError, IndexError, ValueError, TypeError, UnicodeDecodeError) as e:
        _warn_once("ipc-ref", "cannot release torch's IPC reference of the load buffer (%s): "
                   "it stays allocated until the process exits" % e)
        return
    try:
        mm = mmap.mmap(fd, 0)
    except (OSError, ValueError) as e:
        os.close(fd)
        _warn_once("ipc-ref", "cannot map torch's IPC reference counters (%s)" % e)
        return
    os.close(fd)
    try:
        if len(mm) >= slot + 8 and struct.unpack_from("=q", mm, slot)[0] == 1:
            struct.pack_into("=q", mm, slot, 0)
        else:
            _warn_once("ipc-ref", "torch's IPC reference counter of the load buffer is not where "
                       "it was expected: the buffer stays allocated until the process exits")
    finally:
        mm.close()


class LoadReport:
    """Counts, bytes and seconds of one load, per placement ("gpu", "cpu")."""

    def __init__(self, mountpoint, mode, device, ring):
        self.mountpoint = mountpoint
        self.mode = mode
        self.device = device
        self.ring = ring
        self.count = {"gpu": 0, "cpu": 0}
        self.bytes = {"gpu": 0, "cpu": 0}
        self.seconds = {"gpu": 0.0, "cpu": 0.0}
        self.stage_ns = {"wait_ns": 0, "read_ns": 0, "copy_ns": 0, "total_ns": 0}
        self.prefetched = 0
        self.gpu_path = None  # how gpu-placed tensors travelled
        self.total_seconds = 0.0

    def summary(self):
        def rate(b, s):
            return "%.2f GB/s" % (b / s / 1e9) if s > 0 else "- GB/s"
        tb = self.bytes["gpu"] + self.bytes["cpu"]
        tc = self.count["gpu"] + self.count["cpu"]
        lines = ["%s: %d tensors, %d bytes in %.3f s (%s); mode %s, device %s, ring %s" % (
            self.mountpoint, tc, tb, self.total_seconds, rate(tb, self.total_seconds),
            self.mode, self.device, self.ring)]
        for pl in ("gpu", "cpu"):
            how = self.gpu_path if pl == "gpu" else "read through the mount"
            lines.append("  %s: %d tensors, %d bytes, %.3f s, %s (%s)" % (
                pl, self.count[pl], self.bytes[pl], self.seconds[pl],
                rate(self.bytes[pl], self.seconds[pl]), how or "none"))
        if self.count["gpu"] and self.stage_ns["total_ns"]:
            lines.append("  daemon: wait %.3f s, read %.3f s, copy %.3f s, total %.3f s; "
                         "%d prefetched" % tuple([self.stage_ns[k] / 1e9 for k in (
                             "wait_ns", "read_ns", "copy_ns", "total_ns")] + [self.prefetched]))
        return "\n".join(lines)


class _Loader:
    """One load of a mount: results in checkpoint order plus the raw bytes for --verify."""

    def __init__(self, mountpoint, device, mode, workers, timeout_ns):
        self.mount = mountpoint if isinstance(mountpoint, Mount) else Mount(mountpoint)
        self.mode = copy_mode_from_env() if mode is None else mode
        if self.mode not in ("copy", "borrow"):
            raise ValueError("mode must be 'copy' or 'borrow', got %r" % (self.mode,))
        self.dev_kind, self.dev_index = _parse_device(device)
        self.workers = max(1, int(workers))
        self.timeout_ns = timeout_ns
        self.torch = _torch()
        self.raw = {}  # name -> flat uint8 (torch tensor, bytes or bytearray)
        self.out = {}
        self.report = None
        self._lock = threading.Lock()

    # Results ---------------------------------------------------------------------------

    def _finish(self, t, raw, device):
        """Turns t's flat bytes (bytes-like or a uint8 torch tensor) into the result."""
        torch = self.torch
        if torch is None:
            data = raw if isinstance(raw, bytes) else bytes(raw)
            self.raw[t.name] = data
            self.out[t.name] = PlacedTensor(t.name, t.dtype, t.shape, t.placement, device, data)
            return
        if not isinstance(raw, torch.Tensor):
            if len(raw) == 0:
                raw = torch.empty(0, dtype=torch.uint8)
            else:
                with warnings.catch_warnings():
                    # A read-only buffer (bytes) draws a warning; results are ours alone.
                    warnings.simplefilter("ignore")
                    raw = torch.frombuffer(raw, dtype=torch.uint8)
        self.raw[t.name] = raw
        self.out[t.name] = _typed(torch, t, raw)

    # CPU-placed ------------------------------------------------------------------------

    def _read_one(self, t):
        buf = _read_file(t.path, t.nbytes, "tensor %r (%s)" % (t.name, t.path))
        return t, buf

    def _load_cpu(self, tensors, pool):
        for t, buf in pool.map(self._read_one, tensors):
            self._finish(t, buf, "cpu")

    # GPU-placed ------------------------------------------------------------------------

    def _account(self, r):
        with self._lock:
            for k, v in r.timings.items():
                self.report.stage_ns[k] += v
            if r.prefetched:
                self.report.prefetched += 1

    def _stage_copy_one(self, t, dest):
        fd = os.open(t.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            r = stage(fd, "copy", dest, self.timeout_ns, what="tensor %r" % t.name)
        finally:
            os.close(fd)
        if r.nbytes != t.nbytes:
            raise OSError(_errno.EPROTO, "tensor %r: the daemon staged %d bytes, the plan "
                          "says %d" % (t.name, r.nbytes, t.nbytes))
        self._account(r)
        return r

    def _layout(self, tensors, align):
        offs, pos = [], 0
        for t in tensors:
            pos = _align(pos, align)
            offs.append(pos)
            pos += t.nbytes
        return offs, pos

    def _gpu_copy_shm(self, tensors, pool, device):
        """Copy mode into one shm object of this process (host results)."""
        offs, total = self._layout(tensors, 256)
        shm = _ShmDest(total)
        try:
            _run_all(pool, lambda a: self._stage_copy_one(a[0], shm.dest(a[1])),
                     [(t, o) for t, o in zip(tensors, offs) if t.nbytes])
        finally:
            shm.unlink()
        mem = memoryview(shm.mm)
        if self.torch is not None:
            # The results are views of the mapping; torch keeps it alive.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                flat = self.torch.frombuffer(shm.mm, dtype=self.torch.uint8)
            for t, o in zip(tensors, offs):
                self._finish(t, flat[o:o + t.nbytes], device)
            mem.release()
        else:
            for t, o in zip(tensors, offs):
                self._finish(t, bytes(mem[o:o + t.nbytes]), device)
            mem.release()
            shm.mm.close()

    def _gpu_copy_cuda(self, tensors, pool):
        """Copy mode into one flat CUDA buffer of this process, shared by IPC handle."""
        torch = self.torch
        dev = torch.device("cuda", self.dev_index)
        offs, total = self._layout(tensors, 256)
        buf = torch.empty(max(total, 1), dtype=torch.uint8, device=dev)
        # The daemon writes through its own mapping: nothing of ours may be
        # pending on the buffer when it does.
        torch.cuda.synchronize(dev)
        share = buf.untyped_storage()._share_cuda_()
        try:
            handle = _torch_ipc_handle(share[1])
            # The handle is of the base of the allocator's segment; the
            # storage sits storage_off bytes into it.
            storage_bytes, storage_off = int(share[2]), int(share[3])
            size = storage_off + storage_bytes
            _run_all(pool, lambda a: self._stage_copy_one(
                a[0], Destination.cuda_ipc(handle, storage_off + a[1], size)),
                [(t, o) for t, o in zip(tensors, offs) if t.nbytes])
        finally:
            _torch_ipc_done(share)
        for t, o in zip(tensors, offs):
            self._finish(t, buf[o:o + t.nbytes], str(dev))

    def _gpu_borrow(self, tensors, pool, device):
        """Borrow mode: lease each tensor, copy it out of the ring, release."""
        torch = self.torch
        ring = self.mount._ring_map()
        to_cuda = ring.kind == "cuda" and torch is not None and self.dev_kind == "cuda"
        if ring.kind == "host" or (ring.kind == "cuda" and not to_cuda):
            offs, total = self._layout(tensors, 64)
            flat = bytearray(total)
            fmv = memoryview(flat)
        dev = torch.device("cuda", self.dev_index) if to_cuda else None

        def one(a):
            t, o = a
            if t.nbytes == 0:
                return t.name, None
            with self.mount.borrow(t.name, self.timeout_ns) as b:
                self._account(b.result)
                if to_cuda:
                    # Clone while the lease holds, and wait for the copy: the
                    # ring span is reused as soon as it is released.
                    with torch.cuda.device(dev):
                        owned = b.view.to(dev, copy=True)
                        torch.cuda.current_stream(dev).synchronize()
                    return t.name, owned
                b.copy_to(fmv[o:o + t.nbytes])
                return t.name, None

        args = list(zip(tensors, offs)) if not to_cuda else [(t, 0) for t in tensors]
        got = dict(_run_all(pool, one, args))
        if to_cuda:
            for t in tensors:
                v = got[t.name]
                if v is None:
                    v = torch.empty(0, dtype=torch.uint8, device=dev)
                self._finish(t, v, str(dev))
            return
        if torch is not None:
            base = torch.frombuffer(flat, dtype=torch.uint8) if len(flat) else None
            for t, o in zip(tensors, offs):
                self._finish(t, base[o:o + t.nbytes] if base is not None else b"", device)
        else:
            for t, o in zip(tensors, offs):
                self._finish(t, bytes(fmv[o:o + t.nbytes]), device)
        fmv.release()

    def _gpu_unstaged(self, tensors, pool, device):
        """Staging disabled (-o device=none): read gpu-placed tensors like cpu ones."""
        torch = self.torch
        for t, buf in pool.map(self._read_one, tensors):
            if device != "cpu":
                raw = torch.frombuffer(buf, dtype=torch.uint8) if len(buf) else \
                    torch.empty(0, dtype=torch.uint8)
                buf = raw.to(device)
            self._finish(t, buf, device)

    def run(self):
        m = self.mount
        gpu = [t for t in m.tensors if t.placement == "gpu"]
        cpu = [t for t in m.tensors if t.placement == "cpu"]
        ri = m.ring_info() if gpu else None
        ring = "unused"
        if ri is not None:
            ring = "%s %d bytes" % (ri.backend_name if ri.backend != BACKEND_CUDA
                                    else "cuda:%d" % ri.device, ri.ring_bytes)
        # Where gpu-placed results live: a host ring (or device='cpu') gives
        # host memory; a CUDA ring with device cuda:N gives that device.
        cuda_ok = self.torch is not None and self.dev_kind == "cuda"
        if ri is None or ri.backend == BACKEND_HOST or self.dev_kind == "cpu":
            gdev = "cpu"
        elif ri.backend == BACKEND_CUDA:
            if self.torch is None:
                raise RuntimeError("%s stages on cuda:%d: device cuda:%d needs torch; without "
                                   "torch pass device='cpu'" % (m.mountpoint, ri.device,
                                                                 self.dev_index))
            gdev = "cuda:%d" % self.dev_index
        else:
            gdev = "cuda:%d" % self.dev_index if cuda_ok and self.torch.cuda.is_available() \
                else "cpu"
        self.report = LoadReport(m.mountpoint, self.mode, gdev, ring)
        t_all = time.perf_counter()
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            t0 = time.perf_counter()
            if gpu:
                if ri.backend == BACKEND_NONE:
                    _warn_once("none", "%s: staging is disabled on this mount (-o device=none): "
                               "gpu-placed tensors are read through the mount" % m.mountpoint)
                    self.report.gpu_path = "staging disabled: read through the mount"
                    self._gpu_unstaged(gpu, pool, gdev)
                elif ri.backend not in (BACKEND_HOST, BACKEND_CUDA):
                    raise RuntimeError("%s: unknown staging backend %d" % (m.mountpoint,
                                                                           ri.backend))
                elif self.mode == "borrow":
                    self.report.gpu_path = "borrowed from the ring, copied, released"
                    self._gpu_borrow(gpu, pool, gdev)
                elif gdev == "cpu":
                    self.report.gpu_path = "staged into a shm destination"
                    self._gpu_copy_shm(gpu, pool, gdev)
                else:
                    self.report.gpu_path = "staged into a CUDA IPC destination"
                    self._gpu_copy_cuda(gpu, pool)
            t1 = time.perf_counter()
            if cpu:
                self._load_cpu(cpu, pool)
            t2 = time.perf_counter()
        self.report.seconds["gpu"] = t1 - t0
        self.report.seconds["cpu"] = t2 - t1
        self.report.total_seconds = time.perf_counter() - t_all
        for t in m.tensors:
            self.report.count[t.placement] += 1
            self.report.bytes[t.placement] += t.nbytes
        # Checkpoint order.
        return {t.name: self.out[t.name] for t in m.tensors}


def load(mountpoint, device="cuda:0", mode=None, workers=4, timeout_ns=0):
    """Like load_state_dict(), but returns (state_dict, LoadReport)."""
    ld = _Loader(mountpoint, device, mode, workers, timeout_ns)
    try:
        sd = ld.run()
    finally:
        if not isinstance(mountpoint, Mount):
            ld.mount.close()
    # Only the caller's dict may keep the results (and their buffers) alive.
    ld.raw.clear()
    ld.out.clear()
    return sd, ld.report


def load_state_dict(mountpoint, device="cuda:0", mode=None, workers=4, timeout_ns=0):
    """Every tensor of a placefs mount, as a dict name -> tensor in checkpoint order.

    cpu-placed tensors are read through the mount on the CPU. gpu-placed ones
    are staged through the daemon's ring: onto `device` ("cuda:N") when the
    mount stages on CUDA and torch is importable, into host memory when the
    mount's backend is "host" or device is "cpu". mode is "copy" (the daemon
    writes into memory of this process) or "borrow" (each tensor is leased in
    the ring, copied out and released); None reads INSTANTTENSOR_COPY ("1" or
    unset: copy, "0": borrow, anything else: ValueError). Values are torch
    tensors when torch is importable, else PlacedTensor objects. `workers`
    tensors are in flight at once.
    """
    return load(mountpoint, device, mode, workers, timeout_ns)[0]


# ---- command line -----------------------------------------------------------------------


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
    ap = argparse.ArgumentParser(
        prog="placefs.py",
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
        torch = _torch()
        dev = "cuda:0" if torch is not None and torch.cuda.is_available() else "cpu"
    try:
        ld = _Loader(a.mountpoint, dev, a.mode, a.workers, 0)
        try:
            sd = ld.run()
        finally:
            ld.mount.close()
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        print("placefs.py: %s" % e, file=sys.stderr)
        return 1
    print(ld.report.summary())
    if a.verify:
        bad = _verify(ld, sys.stderr)
        print("verify: %d of %d tensors byte-exact" % (len(sd) - len(bad), len(sd)))
        if bad:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
