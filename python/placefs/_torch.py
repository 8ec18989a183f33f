# SPDX-License-Identifier: MIT
"""Everything of placefs that depends on torch, its version or its internals.

This is the one module that knows more about torch than its public tensor
API, and the one that talks to the CUDA runtime (through ctypes):

* get(): torch when importable, unless PLACEFS_NO_TORCH is set (read at
  every call, so a test can switch torch off at run time);
* dtype_of() and typed(): safetensors dtypes as torch dtypes, which depend
  on the torch version (uint16/32/64 since 2.3, the float8 variants later);
* CudaRT: cudaIpcOpenMemHandle, cudaIpcCloseMemHandle and cudaMemcpy from
  libcudart (the system's or the copy bundled with torch), for borrowing
  from a CUDA ring; cuda_view() wraps a span of it through
  __cuda_array_interface__;
* cuda_ipc_export(): the cudaIpcMemHandle_t of a torch CUDA allocation, taken
  with the internal Storage._share_cuda_(), and the reset of the consumer
  reference torch counts for that export (ipc_done()).

Checked on: torch 2.11 with CUDA 13.0 on an NVIDIA H200 (tests/py/gpu-smoke.sh,
tests/py/hf_parity.py; see tests/gpu/RESULTS.md). What is relied on there:
_share_cuda_() returns a tuple whose items 1 to 5 are the IPC handle (a
version byte, a kind byte, then the 64-byte cudaIpcMemHandle_t), the
storage's size and offset in bytes, and the name and slot of torch's
reference-counter shm file (int64 slots after a 64-byte header). The other
layouts accepted below (the bare 64-byte handle of torch before 2.5, dtypes
missing before 2.3) are those of older releases and were not rerun on a GPU.
On the host (no CUDA), torch 1.13 (Debian 12's python3-torch) runs the
loader's typed and bulk views and its host-mount results in
tests/python-torch.sh; get() refuses anything older (TORCH_MIN). Re-check
this module when moving to another torch: tests/py/gpu_smoke.py checks the
IPC copy and that the load buffer is freed.
"""

import contextlib
import ctypes
import glob
import mmap
import os
import struct

from ._ioctl import CUDA_IPC_HANDLE_BYTES
from ._util import warn_once

_torch_mod = None
_torch_tried = False


def get():
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
        if _torch_mod is not None and _version(_torch_mod) < TORCH_MIN:
            warn_once("old-torch", "torch %s is older than %d.%d, the oldest placefs was "
                      "checked with: results are PlacedTensor objects, not torch tensors"
                      % (_torch_mod.__version__, TORCH_MIN[0], TORCH_MIN[1]))
            _torch_mod = None
    return _torch_mod


# The oldest torch placefs was checked with (Debian 12's python3-torch, on the
# host: tests/python-torch.sh); an older one is not used.
TORCH_MIN = (1, 13)


def _version(torch):
    """(major, minor) of torch.__version__ ("2.11.0+cu130" -> (2, 11)); (0, 0) unparsable."""
    try:
        major, minor = str(torch.__version__).split(".")[:2]
        return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    except ValueError:
        return (0, 0)


# ---- dtypes -----------------------------------------------------------------------------

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


def dtype_of(torch, t):
    """(torch dtype, typed) for a tensor; typed False means a raw uint8 view of nbytes."""
    for attr in _TORCH_DTYPES.get(t.dtype, ()):
        dt = getattr(torch, attr, None)
        if dt is not None:
            return dt, True
    if t.dtype in ("U16", "U32", "U64"):
        warn_once(t.dtype, "torch %s has no %s dtype (needs torch >= 2.3): %s tensors are "
                  "returned as raw uint8 bytes" % (torch.__version__, t.dtype.lower(),
                                                   t.dtype))
    elif t.dtype.startswith("F8_"):
        warn_once(t.dtype, "torch %s has no dtype for %s: such tensors are returned as raw "
                  "uint8 bytes" % (torch.__version__, t.dtype))
    return torch.uint8, False


_DTYPE_CACHE = {}
_ITEMSIZE = {}  # torch dtype -> element size
# typed_views(): distances tried for a run, to the next this many tensors of its kind.
RUN_TRIES = 4


def _dtype_cached(torch, t):
    """dtype_of(torch, t), looked up (and warned about) once per dtype name."""
    key = (id(torch), t.dtype)
    hit = _DTYPE_CACHE.get(key)
    if hit is None:
        hit = _DTYPE_CACHE[key] = dtype_of(torch, t)
    return hit


def typed(torch, t, raw):
    """Views a flat uint8 tensor of t.nbytes bytes as t's dtype and shape."""
    dt, is_typed = _dtype_cached(torch, t)
    if not is_typed:
        return raw
    try:
        if dt == torch.uint8:
            return raw.reshape(t.shape)
        return raw.view(dt).reshape(t.shape)
    except RuntimeError as e:
        raise ValueError("tensor %r: %d bytes do not form a %s tensor of shape %r (%s)"
                         % (t.name, t.nbytes, t.dtype, list(t.shape), e)) from None


def typed_views(torch, flat, tensors, offs):
    """typed(t, flat[o:o + t.nbytes]) for every t, o of tensors, offs, in bulk.

    flat: a 1-dimensional uint8 tensor holding every tensor at its byte
    offset (offs[i]); tensors of one dtype and shape may not overlap. A
    mixture of experts has tens of thousands of tensors, most of them in
    long runs of one shape at a constant distance (expert after expert):
    each such run becomes one strided view of flat, cut into its tensors by
    one unbind() in C++, instead of a slice, a dtype view and a reshape per
    tensor from Python. Tensors that share their dtype and shape with no
    neighbour at a constant distance are one slice and one view each; empty
    ones, those whose offset or size is not a multiple of the element size,
    whose size does not match their shape, or whose dtype torch lacks take
    typed() one by one (and its errors). Returns the views, in the order
    given; each equals typed()'s (same dtype, shape, strides and bytes).
    """
    out = [None] * len(tensors)
    groups = {}
    for i, t in enumerate(tensors):
        key = (t.dtype, tuple(t.shape))
        g = groups.get(key)
        if g is None:
            g = groups[key] = []
        g.append(i)
    bases = {}
    for (dname, shape), idx in groups.items():
        dt, is_typed = _dtype_cached(torch, tensors[idx[0]])
        size = _ITEMSIZE.get(dt) if is_typed else None
        if is_typed and size is None:
            size = _ITEMSIZE[dt] = torch.empty(0, dtype=dt).element_size()
        numel = 1
        for d in shape:
            numel *= d
        n = numel * size if is_typed else 0
        ok, ordered, prev = n > 0, True, -1
        if ok:
            for i in idx:
                o = offs[i]
                if o % size or tensors[i].nbytes != n:
                    ok = False
                    break
                if o < prev:
                    ordered = False
                prev = o
        if not ok:
            for i in idx:
                out[i] = typed(torch, tensors[i], flat[offs[i]:offs[i] + tensors[i].nbytes])
            continue
        if not ordered:  # a loader's requests come in buffer order already
            idx.sort(key=offs.__getitem__)
        base = bases.get(dt)
        if base is None:
            base = flat[:flat.numel() // size * size]
            base = bases[dt] = base if dt == torch.uint8 else base.view(dt)
        first = base.storage_offset()
        strides, acc = [], 1
        for d in reversed(shape):
            strides.append(acc)
            acc *= d
        strides = tuple(reversed(strides))
        # Overlap: within a dtype and shape, each tensor ends before the next begins.
        for a, b in zip(idx, idx[1:]):
            if offs[b] - offs[a] < n:
                raise ValueError("tensor %r overlaps tensor %r in the buffer"
                                 % (tensors[b].name, tensors[a].name))
        where = {offs[i]: i for i in idx}
        done = set()
        for j, i in enumerate(idx):
            o = offs[i]
            if o in done:
                continue
            # The longest run from o at one distance, among the distances to the
            # next few tensors (experts interleave: gate, up, gate, up, ...).
            best, step = 1, 0
            for c in idx[j + 1:j + 1 + RUN_TRIES]:
                d = offs[c] - o
                k = 1
                while o + k * d in where and o + k * d not in done:
                    k += 1
                if k > best:
                    best, step = k, d
            if best == 1:
                e = o // size
                out[i] = base[e:e + numel].view(shape)
                done.add(o)
                continue
            run = base.as_strided((best,) + shape, (step // size,) + strides,
                                  first + o // size)
            for k, v in enumerate(run.unbind(0)):
                out[where[o + k * step]] = v
                done.add(o + k * step)
    return out


# ---- the CUDA runtime, for borrowing from a CUDA ring -----------------------------------


class CudaRT:
    """The few CUDA runtime calls the module needs, through ctypes."""

    MEMCPY_DEVICE_TO_HOST = 2
    IPC_LAZY_ENABLE_PEER_ACCESS = 1

    class Handle(ctypes.Structure):
        _fields_ = [("reserved", ctypes.c_char * CUDA_IPC_HANDLE_BYTES)]

    def __init__(self):
        names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
        names += sorted(glob.glob("/usr/local/cuda/lib64/libcudart.so*"))
        torch = get()
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
        L.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), CudaRT.Handle,
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
            h = CudaRT.Handle()
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


class CudaSpan:
    """Exposes device bytes [ptr, ptr + n) through __cuda_array_interface__ (uint8, 1-D)."""

    def __init__(self, ptr, n, owner=None):
        self.owner = owner  # keeps the mapping's owner alive while a view exists
        self.__cuda_array_interface__ = {
            "shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3,
            "strides": None, "stream": None,
        }


def cuda_view(torch, ring, off, n):
    """Ring bytes [off, off + n) of a mapped CUDA ring as a uint8 torch tensor (no copy)."""
    dev = torch.device("cuda", ring.info.device)
    if n == 0:
        return torch.empty(0, dtype=torch.uint8, device=dev)
    return torch.as_tensor(CudaSpan(ring.ptr + off, n, ring), device=dev)


# ---- CUDA IPC export of a torch allocation ----------------------------------------------


@contextlib.contextmanager
def cuda_ipc_export(buf):
    """Exports the storage of the CUDA tensor buf for the daemon to write into.

    Yields (handle, storage_offset, storage_bytes): the 64-byte
    cudaIpcMemHandle_t of the base of the allocator's segment, and where the
    storage sits in it (the storage is bytes [storage_offset, storage_offset
    + storage_bytes) of the allocation). On leaving the block torch's
    consumer reference is dropped (ipc_done()), so the daemon must be done
    writing by then.
    """
    share = buf.untyped_storage()._share_cuda_()
    try:
        handle = ipc_handle(share[1])
        storage_bytes, storage_off = int(share[2]), int(share[3])
        yield handle, storage_off, storage_bytes
    finally:
        ipc_done(share)


def ipc_handle(h):
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


def ipc_done(share):
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
        warn_once("ipc-ref", "cannot release torch's IPC reference of the load buffer (%s): "
                  "it stays allocated until the process exits" % e)
        return
    try:
        mm = mmap.mmap(fd, 0)
    except (OSError, ValueError) as e:
        os.close(fd)
        warn_once("ipc-ref", "cannot map torch's IPC reference counters (%s)" % e)
        return
    os.close(fd)
    try:
        if len(mm) >= slot + 8 and struct.unpack_from("=q", mm, slot)[0] == 1:
            struct.pack_into("=q", mm, slot, 0)
        else:
            warn_once("ipc-ref", "torch's IPC reference counter of the load buffer is not where "
                      "it was expected: the buffer stays allocated until the process exits")
    finally:
        mm.close()

