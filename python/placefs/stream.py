# SPDX-License-Identifier: MIT
"""iter_weights(): the tensors of a mount one by one, in checkpoint order, as they land.

The shape model loaders consume (vLLM's `weights_iterator`, transformers'
`load_state_dict` loops): `for name, tensor in iter_weights(mnt): ...`.
Memory in flight is bounded: at most `window_bytes` (default 2 GiB) of
tensors are being staged or read ahead of the consumer (one tensor larger
than that is read alone).

mode "copy" (the default, INSTANTTENSOR_COPY=1 or unset): every yielded
tensor is owned by the consumer. Consecutive tensors are gathered into
batches of at most window_bytes / 4 (a larger tensor is a batch alone; the
first batch holds at most 16 MiB and 256 tensors and each next twice the one
before, so the first item comes early); a batch is one destination, a CUDA
allocation for gpu-placed tensors on a CUDA mount, else a shm object, filled
by the daemon (STAGE copy through the ring for gpu-placed tensors,
STAGE_READ by its reader threads for cpu-placed ones, or for all of them on
a mount without staging) while the consumer works on the batch before.
Tensors of one batch are views of its destination, which lives as long as
any of them does.

On a fresh mount the first items come from the head of .placefs/plan.json
(placefs.plan.head) and the rest of the plan chunk by chunk from
.placefs/columns.jsonl (placefs.plan.column_chunks), each chunk parsed when
the iteration reaches it, so a plan of tens of thousands of tensors neither
delays the first item nor stops the stream later for the whole parse; copy
mode hands the first batch out before forming the next.

mode "borrow" (INSTANTTENSOR_COPY=0): a gpu-placed tensor is a view of the
daemon's ring, valid until the consumer asks for the next item, as vLLM's
ring views are; the lease ends then. One lease is taken ahead of the
consumer, in checkpoint order. cpu-placed tensors are read (owned), as in
copy mode.

cpu-placed tensors, in both modes, are mapped from their source shards or
read by the daemon as load_state_dict's cpu= says (batches of them are
mapped and populated on a pool of their own, beside the staging).
"""

import errno as _errno
import os
import threading
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from . import _mapsrc, _torch
from . import plan as _plan
from ._ioctl import BACKEND_CUDA, BACKEND_NONE, Destination, stage
from .loader import (PlacedTensor, _align, _batch_chunk, _chunks, _cpu_mode, _cut_raw,
                     _parse_device, _layout, _read_into, _shard_plan, _ShardView, _ShmDest,
                     copy_mode_from_env)
from .mount import Mount

DEFAULT_WINDOW = 2 << 30
# The first copy-mode batch at most, in bytes and in tensors (then each
# doubling, the bytes up to window_bytes / 4).
FIRST_BATCH = 16 << 20
FIRST_BATCH_COUNT = 256


class _Batch:
    """Consecutive tensors that go to one destination; their futures."""

    def __init__(self, kind, tensors):
        # "cuda" (staged into a CUDA buffer), "shm-stage", "shm-read", "map" (cpu-placed,
        # mapped from the source shards; those that cannot be are read into a shm buffer)
        self.kind = kind
        self.tensors = tensors
        self.offs, self.nbytes = _layout(tensors, 256)
        self.futures = []
        self.buf = None     # torch CUDA tensor or _ShmDest
        self.export = None  # the IPC export context of a CUDA buffer
        self.flat = None    # what views are cut from
        # "map": [(tensors, offsets, flat uint8 view of a shard's mapping)], and
        # [(tensors, offsets in buf)] for those read instead
        self.mapped = []
        self.read = []

    def wait(self):
        """Waits for every stage of the batch; raises the first error after all ended."""
        first = None
        for f in self.futures:
            try:
                f.result()
            except BaseException as e:  # noqa: BLE001 - re-raised below
                if first is None:
                    first = e
        if self.export is not None:
            self.export.__exit__(None, None, None)
            self.export = None
        if first is not None:
            raise first


class _PlanItems:
    """The plan's tensors in order: the head of plan.json first, then the rest,
    checked to begin with the head. The rest comes chunk by chunk from
    .placefs/columns.jsonl, each chunk parsed when the iteration reaches it, so
    a plan of tens of thousands of tensors never stops the stream for the
    whole parse; from the whole plan where the daemon writes no columns.jsonl.
    """

    def __init__(self, mount, head, complete):
        self.mount = mount
        self.head = head
        self.complete = complete

    def _mismatch(self):
        return OSError(_errno.EPROTO, "%s: .placefs/plan.json's first %d entries are not "
                       "the plan's" % (self.mount.mountpoint, len(self.head)))

    def __iter__(self):
        yield from self.head
        if self.complete:
            return
        n = len(self.head)
        try:
            cc = _plan.column_chunks(self.mount.mountpoint)
        except ValueError as e:
            raise OSError(_errno.EPROTO, str(e)) from None
        if cc is None:
            full = self.mount.tensors
            if full[:n] != self.head:
                raise self._mismatch()
            yield from full[n:]
            return
        count, chunks = cc
        if count <= n:
            raise self._mismatch()
        at = 0
        try:
            for ts in chunks:
                if at < n:
                    k = min(n - at, len(ts))
                    if ts[:k] != self.head[at:at + k]:
                        raise self._mismatch()
                    ts = ts[k:]
                    at += k
                at += len(ts)
                yield from ts
        except ValueError as e:
            raise OSError(_errno.EPROTO, str(e)) from None


class _Stream:
    def __init__(self, mountpoint, device, mode, workers, timeout_ns, window_bytes, progress,
                 shard=None, cpu=None):
        self.cpu = _cpu_mode(cpu)
        self.own_mount = not isinstance(mountpoint, Mount)
        self.mount = Mount(mountpoint) if self.own_mount else mountpoint
        # A fresh mount's first entries come from the head of plan.json, so the
        # first items do not wait for the whole plan (tens of thousands of
        # entries); the rest of the plan is read when the items reach it.
        early = counts = None
        if shard is None and self.mount._plan is None:
            h, counts = _plan.head(self.mount.mountpoint), _plan.layout_counts(
                self.mount.mountpoint)
            if h is not None and counts is not None and h[0] and \
                    (not h[1] or len(h[0]) == counts[0] + counts[1]):
                early = _PlanItems(self.mount, h[0], h[1])
        self.shard = _shard_plan(self.mount.tensors, shard) if shard is not None else {}
        self.ring_device = None
        self.mode = copy_mode_from_env() if mode is None else mode
        if self.mode not in ("copy", "borrow"):
            raise ValueError("mode must be 'copy' or 'borrow', got %r" % (self.mode,))
        self.dev_kind, self.dev_index = _parse_device(device)
        self.workers = max(1, int(workers))
        self.timeout_ns = timeout_ns
        self.window = int(window_bytes) if window_bytes else DEFAULT_WINDOW
        if self.window <= 0:
            raise ValueError("window_bytes must be positive, got %r" % (window_bytes,))
        self.torch = _torch.get()
        # Whether the daemon serves STAGE_BATCH, per mode: a read batch that
        # landed says nothing of a copy batch, which a mount of several rings
        # refuses (a batch names no device), so copies there fall back to one
        # request each (loader._batch_chunk).
        self._state = {"copy": {}, "read": {}}
        self.progress = None
        if progress:
            from ._progress import Progress
            self.progress = Progress(counts[2] if early is not None else
                                     sum(t.nbytes for t in self.mount.tensors),
                                     label=os.path.basename(
                                         self.mount.mountpoint.rstrip("/")) or "load")
        via = None  # the tensor file ring_info asks through (None: the plan's first)
        if early is not None:
            via = next((t for t in early.head if t.placement == "gpu"), None)
            ri = self.mount.ring_info(via=via) if counts[0] else None
        else:
            ri = self.mount.ring_info() if any(
                t.placement == "gpu" for t in self.mount.tensors) else None
        self.staged = ri is not None and ri.backend != BACKEND_NONE
        if ri is not None and ri.ndevices > 1:
            # A mount of several rings: this process's device's, or the rank's.
            if self.dev_kind == "cuda":
                self.ring_device = self.dev_index
            elif shard is not None:
                self.ring_device = int(shard[0])
            else:
                self.ring_device = ri.device
            ri = self.mount.ring_info(self.ring_device, via=via)
        # What the consumer gets: gpu-placed parts are staged as slices, the
        # other parts (cpu-placed, or no staging) are read whole and cut.
        if early is not None:
            self.items = early
        else:
            self.items = [_ShardView(t, self.shard[t.name])
                          if t.name in self.shard and t.placement == "gpu" and self.staged else t
                          for t in self.mount.tensors]
        if self.dev_kind == "auto":
            if ri is not None and ri.backend == BACKEND_CUDA and self.torch is not None and \
                    self.torch.cuda.is_available():
                self.dev_kind, self.dev_index = "cuda", ri.device
            else:
                self.dev_kind = "cpu"
        if self.dev_kind == "cuda" and self.torch is None:
            raise RuntimeError("device cuda:%d needs torch; without torch pass device='cpu'"
                               % self.dev_index)
        # gpu-placed results land on the GPU only through a CUDA ring (or a copy
        # after the read on a mount without staging).
        self.to_cuda = self.dev_kind == "cuda"
        self.cuda_ring = ri is not None and ri.backend == BACKEND_CUDA
        self.map_cpu = self.cpu != "read" and self.torch is not None
        # .placefs/shards.json, read once for every batch to map (None: each batch
        # reads it again, and gets the same refusal or the file a later daemon wrote).
        self.shards = None
        if self.map_cpu and (counts[1] if early is not None else
                             any(t.placement == "cpu" for t in self.items)):
            try:
                self.shards = _mapsrc.read_shards(self.mount.mountpoint)
            except _mapsrc.Refused:
                pass

    # ---- results -------------------------------------------------------------------------

    def _result(self, t, raw, device):
        torch = self.torch
        sl = self.shard.get(t.name)
        if sl is not None and getattr(t, "slice", None) is None:
            # Read whole: the rank's part is cut out here.
            raw = _cut_raw(raw, t, sl)
            t = _ShardView(t, sl)
            if torch is None:
                raw = bytes(raw)
        if torch is None:
            return PlacedTensor(t.name, t.dtype, t.shape, t.placement, device, raw)
        if not isinstance(raw, torch.Tensor):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                raw = torch.frombuffer(raw, dtype=torch.uint8) if len(raw) else \
                    torch.empty(0, dtype=torch.uint8)
        return _torch.typed(torch, t, raw)

    def _views(self, flat, tensors, offs, device="cpu"):
        """The results of tensors at offs of flat (a uint8 torch tensor on device): in
        bulk (_torch.typed_views), or one by one when a rank's part is cut out."""
        if self.shard:
            return [self._result(t, flat[o:o + t.nbytes], device)
                    for t, o in zip(tensors, offs)]
        return _torch.typed_views(self.torch, flat, tensors, offs)

    def _tick(self, n):
        if self.progress is not None:
            self.progress.update(n)

    # ---- copy mode -----------------------------------------------------------------------

    def _kind(self, t):
        if t.placement == "gpu" and self.staged:
            return "cuda" if self.to_cuda and self.cuda_ring else "shm-stage"
        return "map" if self.map_cpu and t.placement == "cpu" else "shm-read"

    def _batches(self):
        # Several batches fit the window, so that gpu-placed batches are staged
        # while a large cpu-placed tensor before them is still being read. The
        # first batch is small (FIRST_BATCH) and each next one twice the one
        # before up to that cap, so the first item does not wait for a
        # quarter of the window to land.
        top = max(1, self.window // 4)
        cap, count = min(top, FIRST_BATCH), FIRST_BATCH_COUNT
        cur, kind, size = [], None, 0
        for t in self.items:
            k = self._kind(t)
            if cur and (k != kind or size + t.nbytes > cap or len(cur) >= count):
                yield _Batch(kind, cur)
                cur, size = [], 0
                cap, count = min(top, cap * 2), count * 2
            cur.append(t)
            kind = k
            size = _align(size, 256) + t.nbytes
        if cur:
            yield _Batch(kind, cur)

    def _stage_one(self, t, dest, how):
        fd = os.open(t.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            r = stage(fd, how, dest, self.timeout_ns, what="tensor %r" % t.name,
                      slice=getattr(t, "slice", None), device=self.ring_device)
        finally:
            os.close(fd)
        if r.nbytes != t.nbytes:
            raise OSError(_errno.EPROTO, "tensor %r: the daemon moved %d bytes, the plan says "
                          "%d" % (t.name, r.nbytes, t.nbytes))
        self._tick(t.nbytes)

    def _map_batch(self, b):
        """A "map" batch, on a worker: maps what it may (populated on a pool of its
        own), then reads the rest into a shm buffer of their own layout."""
        res = _mapsrc.map_tensors(self.mount.mountpoint, b.tensors, self.cpu, self.torch,
                                  None, self._tick, self.shards)
        b.mapped = res.mapped
        if res.left:
            offs, size = _layout(res.left, 256)
            b.buf = _ShmDest(size)
            for t, o in zip(res.left, offs):
                if t.nbytes:
                    self._read_one(t, b.buf.dest(o), "read")
            b.read = [(res.left, offs)]

    def _start(self, b, pool):
        """Allocates b's destination and submits its stages."""
        if b.kind == "map":
            b.futures.append(pool.submit(self._map_batch, b))
            return
        if b.kind == "cuda":
            torch = self.torch
            dev = torch.device("cuda", self.dev_index)
            b.buf = torch.empty(max(b.nbytes, 1), dtype=torch.uint8, device=dev)
            # The daemon writes through its own mapping: nothing of ours may be pending.
            torch.cuda.synchronize(dev)
            b.export = _torch.cuda_ipc_export(b.buf)
            handle, soff, sbytes = b.export.__enter__()
            size = soff + sbytes
            for c in _chunks([(t, soff + o) for t, o in zip(b.tensors, b.offs)], self.workers):
                b.futures.append(pool.submit(
                    _batch_chunk, c, Destination.cuda_ipc(handle, 0, size), "copy",
                    self.timeout_ns, self._tick, lambda t, o, h=handle, n=size:
                    self._stage_one(t, Destination.cuda_ipc(h, o, n), "copy"),
                    self._state["copy"]))
            b.flat = b.buf
            return
        b.buf = _ShmDest(b.nbytes)
        how = "copy" if b.kind == "shm-stage" else "read"
        shm = b.buf
        for c in _chunks(zip(b.tensors, b.offs), self.workers):
            b.futures.append(pool.submit(
                _batch_chunk, c, shm.dest(0), how, self.timeout_ns, self._tick,
                lambda t, o: (self._stage_one if how == "copy" else self._read_one)(
                    t, shm.dest(o), how), self._state[how]))

    def _read_one(self, t, dest, how):
        _read_into(t, dest, self.timeout_ns)
        self._tick(t.nbytes)

    def _finish(self, b):
        """Waits for b; returns [(name, tensor)]."""
        try:
            b.wait()
        finally:
            if isinstance(b.buf, _ShmDest):
                b.buf.unlink()
        out = []
        if b.kind == "cuda":
            views = self._views(b.buf, b.tensors, b.offs, "cuda:%d" % self.dev_index)
            return list(zip([t.name for t in b.tensors], views))
        shm = b.buf
        flat = None
        if shm is not None and self.torch is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                flat = self.torch.frombuffer(shm.mm, dtype=self.torch.uint8)
        if b.kind == "map":
            # Each shard's mapping, and the shm buffer of those read instead.
            groups = b.mapped + [(ts, offs, flat) for ts, offs in b.read]
            got = {}
            for ts, offs, f in groups:
                got.update(zip([t.name for t in ts], self._views(f, ts, offs)))
            return [(t.name, got[t.name]) for t in b.tensors]
        if self.torch is not None:
            views = self._views(flat, b.tensors, b.offs)
            if self.to_cuda:
                # No CUDA ring (host ring or no staging): gpu-placed bytes go up from here.
                dev = self.torch.device("cuda", self.dev_index)
                views = [v.to(dev) if t.placement == "gpu" else v
                         for t, v in zip(b.tensors, views)]
            out = list(zip([t.name for t in b.tensors], views))
        else:
            mem = memoryview(shm.mm)
            for t, o in zip(b.tensors, b.offs):
                out.append((t.name, self._result(t, bytes(mem[o:o + t.nbytes]), "cpu")))
            mem.release()
            shm.mm.close()
        return out

    def _copy(self):
        pending = deque()
        batches = self._batches()
        nxt = next(batches, None)
        ahead = 0
        # Items from the head of plan.json: the first batch is handed out before
        # the next is formed, as forming it may read the whole plan.
        hold = isinstance(self.items, _PlanItems) and not self.items.complete
        later = False  # the next batch is formed once the first is handed out
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            try:
                while True:
                    # Keep at most `window` bytes being filled ahead of the consumer: a
                    # batch starts when it fits beside those in flight, or alone.
                    while not later and nxt is not None and (
                            not pending or ahead + nxt.nbytes <= self.window):
                        self._start(nxt, pool)
                        pending.append(nxt)
                        ahead += nxt.nbytes
                        nxt = None
                        if hold:
                            hold, later = False, True
                            break
                        nxt = next(batches, None)
                    if not pending:
                        return
                    b = pending.popleft()
                    ahead -= b.nbytes
                    yield from self._finish(b)
                    if later:
                        later = False
                        nxt = next(batches, None)
            finally:
                # Memory handed to the daemon is freed only once no stage into it runs.
                for b in pending:
                    try:
                        b.wait()
                    except BaseException:  # noqa: BLE001 - the consumer stopped or failed
                        pass
                    if isinstance(b.buf, _ShmDest):
                        b.buf.unlink()

    # ---- borrow mode ---------------------------------------------------------------------

    def _borrow(self):
        m = self.mount
        q = deque()
        lock = threading.Condition()
        state = {"stop": False, "done": False}

        def leaser():
            # One lease ahead, in checkpoint order: the ring never holds more than
            # the consumer's tensor and the next (the queue holds that next one).
            try:
                for t in self.items:
                    with lock:
                        while q and not state["stop"]:
                            lock.wait()
                        if state["stop"]:
                            return
                    if t.placement == "gpu" and self.staged and t.nbytes:
                        try:
                            # The plan's record itself: no lookup by name.
                            who = t._t if isinstance(t, _ShardView) else t
                            item = ("lease", t, m.borrow(who, self.timeout_ns,
                                                         slice=getattr(t, "slice", None),
                                                         device=self.ring_device))
                        except BaseException as e:  # noqa: BLE001 - handed to the consumer
                            item = ("error", t, e)
                    else:
                        item = ("read", t, None)
                    with lock:
                        q.append(item)
                        lock.notify_all()
                        if item[0] == "error":
                            return
                with lock:
                    q.append(("end", None, None))
                    lock.notify_all()
            except BaseException as e:  # noqa: BLE001 - the plan's rest failed: the consumer's
                with lock:
                    q.append(("error", None, e))
                    lock.notify_all()
            finally:
                with lock:
                    state["done"] = True
                    lock.notify_all()

        th = threading.Thread(target=leaser, name="placefs-borrow", daemon=True)
        th.start()
        current = None
        try:
            while True:
                if current is not None:
                    current.release()
                    current = None
                with lock:
                    while not q and not state["done"]:
                        lock.wait()
                    if not q:
                        raise RuntimeError("placefs: the leasing thread ended early")
                    kind, t, val = q.popleft()
                    lock.notify_all()
                if kind == "end":
                    break
                if kind == "error":
                    raise val
                if kind == "lease":
                    current = val
                    self._tick(t.nbytes)
                    v = val.view
                    if v is None:
                        raise RuntimeError("tensor %r: borrowing from a CUDA ring needs torch"
                                           % t.name)
                    dev = "cuda:%d" % m.ring_info(self.ring_device).device if self.cuda_ring \
                        else "cpu"
                    if self.torch is None:
                        yield t.name, PlacedTensor(t.name, t.dtype, t.shape, t.placement, dev, v)
                    else:
                        raw = v if isinstance(v, self.torch.Tensor) else None
                        if raw is None:
                            with warnings.catch_warnings():
                                warnings.simplefilter("ignore")
                                raw = self.torch.frombuffer(v, dtype=self.torch.uint8) \
                                    if len(v) else self.torch.empty(0, dtype=self.torch.uint8)
                        yield t.name, _torch.typed(self.torch, t, raw)
                else:
                    b = _Batch(self._kind(t) if t.placement == "cpu" else "shm-read", [t])
                    with ThreadPoolExecutor(max_workers=1) as pool:
                        self._start(b, pool)
                        for item in self._finish(b):
                            yield item
        finally:
            if current is not None:
                current.release()
            with lock:
                state["stop"] = True
                lock.notify_all()
            th.join()
            with lock:
                for kind, _t, val in q:
                    if kind == "lease":
                        val.release()
                q.clear()

    def run(self):
        try:
            yield from self._copy() if self.mode == "copy" else self._borrow()
        finally:
            if self.progress is not None:
                self.progress.close()
            if self.own_mount:
                self.mount.close()


def iter_weights(mountpoint, device=None, mode=None, workers=4, timeout_ns=0,
                 window_bytes=None, progress=False, shard=None, cpu=None):
    """Yields (name, tensor) for every tensor of a mount, in checkpoint order.

    device: None/"auto" (the mount's own staging device: the GPU of its CUDA
    ring when torch can use it, else the host), "cpu", "cuda" or "cuda:N";
    gpu-placed tensors go there, cpu-placed ones stay in host memory. mode:
    "copy" (owned tensors; None reads INSTANTTENSOR_COPY) or "borrow" (a
    gpu-placed tensor is a view of the ring, valid until the next item is
    asked for). window_bytes (default 2 GiB) bounds what is in flight ahead
    of the consumer. progress=True draws a bar on a terminal's stderr.
    Without torch the values are PlacedTensor objects. shard=(rank, world,
    dims): each rank's part of the tensors dims splits, as load_state_dict's
    shard= (gpu-placed parts staged as slices; on a mount of several devices
    through the ring of `device`, else the rank's). cpu: where cpu-placed
    tensors land, as load_state_dict's cpu= ("auto", "map", "read"; None:
    $PLACEFS_CPU, else "auto").
    """
    return _Stream(mountpoint, device, mode, workers, timeout_ns, window_bytes,
                   progress, shard, cpu).run()
