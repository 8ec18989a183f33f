# SPDX-License-Identifier: MIT
"""A placefs mount from Python: its plan, its tensor files and its staging ring.

Mount(mountpoint) reads the plan (placefs.plan), opens tensor files, asks the
ring's description once (PLACEFS_IOC_RING_INFO) and maps the ring for borrow
mode: the host backend's shm object read-only, or the CUDA backend's IPC
handle through the CUDA runtime (placefs._torch). Mount.borrow(name) stages one
tensor and returns a Borrowed lease; Mount.stage_into(name, dest) stages one
in copy mode.
"""

import errno as _errno
import mmap
import os
import threading

from . import _torch
from ._ioctl import (BACKEND_CUDA, BACKEND_HOST, BACKEND_NONE, CUDA_IPC_HANDLE_BYTES,
                     HANDLE_CUDA_IPC, HANDLE_NONE, RingInfo, release, ring_info, stage)
from .plan import Plan

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
    """A placefs mount: its plan, its tensor files and its staging ring."""

    def __init__(self, mountpoint):
        self.mountpoint = os.fspath(mountpoint)
        plan = Plan(self.mountpoint)
        self.plan = plan.data
        self.source = plan.source
        self.buffer_size = plan.buffer_size
        self.ring_bytes = plan.ring_bytes
        self.tensors = plan.tensors
        self._by_name = plan.by_name
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
                torch = _torch.get()
                if torch is not None:
                    view = _torch.cuda_view(torch, ring, r.ring_offset, r.nbytes)
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

