# SPDX-License-Identifier: MIT
"""load_state_dict(), load() and iter_weights(): every tensor of a mount.

cpu-placed tensors are mapped from their source shards (private, populated
mappings of the shards the daemon validated, when this process may open them
and nobody else may shorten them: cpu="auto") or read by the daemon's reader
threads straight into a shm object of this process (PLACEFS_IOC_STAGE_READ),
beside the gpu-placed ones; gpu-placed ones travel through the daemon's staging ring, in copy mode
(into shm objects or CUDA allocations of this process) or in borrow mode
(leased, copied out or lent, released). Results are torch tensors when torch
is importable, else PlacedTensor objects. doc/PYTHON.md describes the paths
and their results.
"""

import errno as _errno
import mmap
import os
import secrets
import threading
import time
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from fnmatch import fnmatchcase
from itertools import accumulate, compress, islice, repeat
import operator
from operator import attrgetter

from . import _mapsrc, _torch
from ._ioctl import (BACKEND_CUDA, BACKEND_HOST, BACKEND_NONE, BATCH_MAX, PACK_ALIGN, PACK_RULE,
                     _IOC_ERRORS, Destination, ring_info, stage, stage_batch)
from ._util import gc_paused, warn_once
from .mount import Mount, _read_file, shard_slice, slice_nbytes, slice_shape
from .plan import read_layout
from .safetensors import DTYPE_BITS

# Tensor parallelism (shard=(rank, world, dims)): which dimension each weight
# of a Llama-style checkpoint (Llama, Mistral, Qwen2) is split along. Column-
# parallel layers (q/k/v, gate/up, the embedding and lm_head, by vocabulary)
# keep rows (dim 0), row-parallel ones (o_proj, down_proj) keep columns
# (dim 1); norms and everything unmatched are loaded whole on every rank.
# Patterns are fnmatch patterns, tried in order; the first match decides.
LLAMA_TP_DIMS = {
    "*.self_attn.q_proj.weight": 0, "*.self_attn.k_proj.weight": 0,
    "*.self_attn.v_proj.weight": 0, "*.self_attn.q_proj.bias": 0,
    "*.self_attn.k_proj.bias": 0, "*.self_attn.v_proj.bias": 0,
    "*.self_attn.o_proj.weight": 1,
    "*.mlp.gate_proj.weight": 0, "*.mlp.up_proj.weight": 0, "*.mlp.down_proj.weight": 1,
    "*embed_tokens.weight": 0, "lm_head.weight": 0,
}


def shard_dim(name, dims=None):
    """The dimension tensor `name` is split along for shard=: 0, 1 or None (whole).

    dims: an int (every tensor along that dimension), a dict of fnmatch
    pattern -> dimension or None (the first matching pattern decides;
    unmatched: whole), or None for LLAMA_TP_DIMS.
    """
    if dims is None:
        dims = LLAMA_TP_DIMS
    if isinstance(dims, int):
        return dims
    for pat, d in dims.items():
        if fnmatchcase(name, pat):
            return d
    return None


def _shard_plan(tensors, shard):
    """name -> (dim, start, len) for the tensors rank keeps a part of; others whole.

    shard: (rank, world) or (rank, world, dims). A tensor with fewer
    dimensions than its split dimension is whole (a 1-dimensional bias of a
    row-parallel layer); one whose dimension world does not divide is
    OSError(EINVAL): an uneven split is never guessed.
    """
    if shard is None:
        return {}
    if not isinstance(shard, (tuple, list)) or len(shard) not in (2, 3):
        raise ValueError("shard must be (rank, world) or (rank, world, dims), got %r"
                         % (shard,))
    rank, world = int(shard[0]), int(shard[1])
    dims = shard[2] if len(shard) == 3 else None
    if world < 1 or not 0 <= rank < world:
        raise ValueError("shard: rank %d of world %d" % (rank, world))
    out = {}
    for t in tensors:
        d = shard_dim(t.name, dims)
        if d is None or d >= len(t.shape):
            continue
        if d not in (0, 1):
            raise ValueError("shard: tensor %r: dimension %r (0 or 1 only)" % (t.name, d))
        if t.shape[d] % world:
            raise OSError(_errno.EINVAL, "shard: tensor %r: dimension %d of %d does not split "
                          "evenly in %d ranks" % (t.name, d, t.shape[d], world))
        if world == 1:
            continue
        start, n = shard_slice(t.shape[d], rank, world)
        out[t.name] = (d, start, n)
    return out


class _ShardView:
    """A tensor of the plan as one rank sees it: its slice's shape and bytes."""

    def __init__(self, t, sl):
        self._t = t
        self.slice = sl
        self.shape = slice_shape(t.shape, sl[0], sl[2])
        self.nbytes = slice_nbytes(t.dtype, t.shape, sl[0], sl[2])

    def __getattr__(self, k):
        return getattr(self._t, k)


def _cut_raw(raw, t, sl):
    """The slice's bytes out of t's whole flat bytes (bytes-like or a uint8 torch tensor)."""
    dim, start, n = sl
    if dim == 0:
        a = slice_nbytes(t.dtype, t.shape, 0, start) if start else 0
        return raw[a:a + slice_nbytes(t.dtype, t.shape, 0, n)]
    rows = t.shape[0]
    if rows == 0:
        return raw[:0]
    row = t.nbytes // rows
    a = (slice_nbytes(t.dtype, t.shape, 1, start) if start else 0) // rows
    seg = slice_nbytes(t.dtype, t.shape, 1, n) // rows
    if not isinstance(raw, (bytes, bytearray, memoryview)):  # a torch tensor
        return raw.view(rows, row)[:, a:a + seg].contiguous().view(-1)
    mv = memoryview(raw)
    return b"".join(mv[i * row + a:i * row + a + seg] for i in range(rows))

# safetensors dtype -> numpy dtype name; missing: raw uint8.
_NUMPY_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "F16": "float16", "I32": "int32", "U32": "uint32", "F32": "float32", "C64": "complex64",
    "F64": "float64", "I64": "int64", "U64": "uint64",
}


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


def _parse_device(device):
    """('cpu', None), ('cuda', index) or ('auto', None) for a device argument.

    "cpu", "cuda", "cuda:N" or a torch.device; None or "auto": the mount's
    own staging device (its CUDA ring's GPU, else the host).
    """
    if device is None or device == "auto":
        return "auto", None
    s = str(device)
    if s == "cpu":
        return "cpu", None
    if s == "cuda":
        torch = _torch.get()
        idx = torch.cuda.current_device() if torch is not None and torch.cuda.is_available() \
            else 0
        return "cuda", idx
    if s.startswith("cuda:") and s[5:].isdigit() and s[5:].isascii():
        return "cuda", int(s[5:])
    raise ValueError("device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got %r" % (device,))


CPU_MODES = ("auto", "map", "read")


def cpu_mode_from_env():
    """How cpu-placed tensors land, from PLACEFS_CPU (unset: "auto")."""
    v = os.environ.get("PLACEFS_CPU")
    if v is None or v == "":
        return "auto"
    if v not in CPU_MODES:
        raise ValueError("PLACEFS_CPU must be auto, map or read, got '%s'" % v)
    return v


def _cpu_mode(cpu):
    """A loader's cpu= argument checked: the mode, or $PLACEFS_CPU's when None."""
    mode = cpu_mode_from_env() if cpu is None else cpu
    if mode not in CPU_MODES:
        raise ValueError("cpu must be 'auto', 'map' or 'read', got %r" % (mode,))
    return mode


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
            # Sparse: the daemon allocates the pages as it writes them, on its
            # reader threads and in parallel (reserving them here first was one
            # serial pass over every page). A full /dev/shm is then an errno of
            # the stage (ENOSPC), and this process reads only pages the daemon
            # wrote: a load that failed is never looked at, so no SIGBUS.
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


def _read_into(t, dest, timeout_ns):
    """STAGE_READ of tensor t into the shm Destination dest; checks the byte count."""
    fd = os.open(t.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        r = stage(fd, "read", dest, timeout_ns, what="tensor %r" % t.name)
    finally:
        os.close(fd)
    if r.nbytes != t.nbytes:
        raise OSError(_errno.EPROTO, "tensor %r: the daemon read %d bytes, the plan says %d"
                      % (t.name, r.nbytes, t.nbytes))
    return r


# Result views built between two yields of the GIL (see _gpu_copy_cuda).
VIEW_SLICE = 256

# Tensors this large go one per STAGE request: their round trips cost nothing
# next to their bytes, and the ring overlaps a few large stages best.
BATCH_BELOW = 8 << 20


# Fields read once per tensor of a load (tens of thousands): C-level getters.
_NAME = attrgetter("name")
_INDEX = attrgetter("index")
_NBYTES = attrgetter("nbytes")
_PLACEMENT = attrgetter("placement")
_SOURCE_OFFSET = attrgetter("source", "offset")
_RUN_KEYS = attrgetter("source", "offset", "nbytes", "dtype")
# A dtype's element size in bytes, the alignment _layout keeps (sub-byte types: 1).
_ELEM_BYTES = {k: max(v // 8, 1) for k, v in DTYPE_BITS.items()}
_FIRST = operator.itemgetter(0)
_SECOND = operator.itemgetter(1)


def _source_order(tensors):
    """tensors sorted as they lie in the shards: the daemon moves neighbours as one range."""
    return sorted(tensors, key=_SOURCE_OFFSET)


def _layout(tensors, align):
    """Offsets of tensors (in their order) in one destination, laid out in shard order.

    The daemon's packed layout (lib/model/plan.h): a tensor that directly
    follows the one before it in the same shard starts where that one ends,
    when that keeps its elements aligned (a multiple of its element size);
    any other starts at the next multiple of align. Neighbours in a shard so
    stay neighbours in the destination, and the daemon moves a run of them
    as one range of the shard's bytes, one copy. Shard order: a plan lists
    its tensors so already (doc/SEMANTICS.md, checkpoint order), so they are
    sorted only when they are not. Returns (offsets, total bytes).
    """
    keys = list(map(_SOURCE_OFFSET, tensors))
    in_order = all(map(operator.le, keys, islice(keys, 1, None)))
    order = tensors if in_order else _source_order(tensors)
    starts = []
    add = starts.append
    end = 0
    prev_src = None
    prev_end = -1
    elem = _ELEM_BYTES
    for src, off, n, dt in map(_RUN_KEYS, order):
        if off == prev_end and src == prev_src and not end % elem.get(dt, 1):
            a = end
        else:
            a = -(-end // align) * align
        add(a)
        end = a + n
        prev_src = src
        prev_end = off + n
    if in_order:
        return starts, end
    where = dict(zip(map(id, order), starts))
    return list(map(where.__getitem__, map(id, tensors))), end


def _packed_offsets(mount, tensors, total):
    """(offsets, total) of tensors in their placement's packed layout, from the
    plan's "packed" column, when they all lie inside total bytes; (None, None)
    where the plan has no such column or the column says otherwise."""
    packed = mount._read_plan().packed
    if packed is None:
        return None, None
    offs = list(map(packed.__getitem__, map(_INDEX, tensors)))
    if offs and max(map(operator.add, offs, map(_NBYTES, tensors))) > total:
        return None, None
    return offs, total


def _chunks(items, workers):
    """[(tensor, off)] without empty tensors, cut into requests.

    Small tensors are gathered into STAGE_BATCH requests, in shard order (fewer
    than BATCH_MAX per request when that gives every worker two requests);
    each large one (BATCH_BELOW and up) is a request of its own, a list of
    one, sent as a plain STAGE.
    """
    items = list(items)
    nbytes = list(map(_NBYTES, map(_FIRST, items)))
    items = list(compress(items, nbytes))  # not the empty ones
    nbytes = list(compress(nbytes, nbytes))
    small = list(compress(items, map(BATCH_BELOW.__gt__, nbytes)))
    out = [[a] for a in compress(items, map(BATCH_BELOW.__le__, nbytes))]
    # In destination order, which _layout made shard order: the daemon moves
    # entries that are neighbours in both as one range.
    offs = list(map(_SECOND, small))
    if not all(map(operator.le, offs, islice(offs, 1, None))):
        small.sort(key=_SECOND)
    if small:
        per = max(1, min(BATCH_MAX, -(-len(small) // (2 * max(1, workers)))))
        out += [small[i:i + per] for i in range(0, len(small), per)]
    return out


def _batch_retrying(fd, mode, dest, entries, timeout_ns, what, ranges=False):
    """stage_batch(), retried briefly while the daemon answers EAGAIN (every
    worker it lends to batches is busy); any other error is raised."""
    for attempt in range(200):
        try:
            return stage_batch(fd, mode, dest, entries, timeout_ns, what=what, ranges=ranges)
        except OSError as e:
            if e.errno != _errno.EAGAIN or attempt == 199:
                raise
            time.sleep(0.001 * (1 + attempt % 10))


def _batch_chunk(chunk, dest, mode, timeout_ns, tick, single, state):
    """One STAGE_BATCH request for chunk ([(tensor, dest_offset)]) into dest.

    The daemon runs its entries in parallel, so tens of thousands of small
    tensors cost a few hundred round trips, not an open, an ioctl and a close
    each. EAGAIN (every worker the daemon lends to batches is busy) is retried
    briefly. A daemon without STAGE_BATCH (ENOTTY or EINVAL for the first
    request; state["batch"] then turns False) gets single(tensor, offset) per
    tensor. Raises the first entry's error, naming the tensor.
    """
    # Batch entries are whole tensors: slices (shard=) go one by one.
    if state.get("batch", True) and not any(getattr(t, "slice", None) for t, _ in chunk) and \
            (len(chunk) > 1 or chunk[0][0].nbytes < BATCH_BELOW):
        fd = os.open(chunk[0][0].path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        res = None
        try:
            res = _batch_retrying(fd, mode, dest, [(t.index, o) for t, o in chunk], timeout_ns,
                                  "batch of %d from tensor %r" % (len(chunk), chunk[0][0].name))
        except OSError as e:
            if e.errno not in (_errno.ENOTTY, _errno.EINVAL) or state.get("seen"):
                raise
            state["batch"] = False
        finally:
            os.close(fd)
        if res is not None:
            state["seen"] = True
            for (t, o), (nb, err, _flags) in zip(chunk, res):
                if err:
                    raise OSError(err, "tensor %r: PLACEFS_IOC_STAGE_BATCH (%s): %s"
                                  % (t.name, mode, _IOC_ERRORS.get(err, os.strerror(err))))
                if nb != t.nbytes:
                    raise OSError(_errno.EPROTO, "tensor %r: the daemon moved %d bytes, "
                                  "the plan says %d" % (t.name, nb, t.nbytes))
            tick(sum(t.nbytes for t, _ in chunk))
            return
    for t, o in chunk:
        single(t, o)


def _move_all(items, dest, mode, timeout_ns, pool, workers, tick, single, meanwhile=None):
    """Moves [(tensor, dest_offset)] into dest by STAGE_BATCH requests on pool.

    Batch entries are whole tensors: slices (shard=) go one by one.
    meanwhile: called on this thread once every request is submitted, while
    they run (see _run_all).
    """
    state = {}
    _run_all(pool, lambda c: _batch_chunk(c, dest, mode, timeout_ns, tick, single, state),
             _chunks(items, workers), meanwhile)


def _run_all(pool, fn, items, meanwhile=None):
    """fn over items on the pool; waits for every call before raising the first error.

    Memory handed to the daemon must not be freed or reused while any stage
    into it may still run, so an error never cuts the waiting short.
    meanwhile(): work of this thread that needs none of the results (building
    the result views of a destination), done while the pool's requests wait
    in the daemon; its exception is raised after the wait too.
    """
    futs = [pool.submit(fn, x) for x in items]
    out, first = [], None
    if meanwhile is not None:
        try:
            meanwhile()
        except BaseException as e:  # noqa: BLE001 - re-raised after the wait
            first = e
    for f in futs:
        try:
            out.append(f.result())
        except BaseException as e:  # noqa: BLE001 - re-raised below
            if first is None:
                first = e
    if first is not None:
        raise first
    return out


def _ranges_request(fd, dest, spans, timeout_ns):
    """One BATCH_RANGES request in copy mode; returns its [(nbytes, errno, index)]."""
    return _batch_retrying(fd, "copy", dest, spans, timeout_ns, "plan ranges %s" % ", ".join(
        "[%d, %d)" % (a, a + c) for a, c, _ in spans), ranges=True)


class _Early:
    """The gpu-placed tensors of a load, asked for before the plan is read.

    A fresh load of tens of thousands of tensors spends a good part of its
    time in Python before its first request: parsing the plan, laying the
    tensors out. .placefs/layout.json (a few hundred bytes) gives the size of
    the gpu placement's packed layout and a file to issue requests on, so
    the buffer is allocated and the whole plan requested by index ranges
    (STAGE_BATCH with BATCH_RANGES: the daemon puts each gpu-placed tensor at
    its packed offset) at once; the plan is parsed and the result views are
    built while the daemon moves the bytes. The buffer is CUDA memory of
    device dev_index (shared by IPC handle), or with dev_index None a shm
    object of this process (host results, device "cpu"); dev_index "auto"
    is the default device, which the ring decides as _Loader.run() does (a
    CUDA ring's GPU when torch has CUDA, else host memory). start() returns
    None where the mount cannot serve this (no layout.json: an older daemon;
    a mount of several rings; for a GPU, not a CUDA ring of that device; no
    gpu-placed tensor), and the load goes the usual way.
    """

    # Requests per worker: enough that a slow range does not leave the
    # daemon's threads idle at the end.
    PER_WORKER = 4

    def __init__(self):
        self.t0 = time.perf_counter()
        self.futures = []
        self.spans = []
        self.export = None
        self.pool = None
        self.buf = None
        self.shm = None
        self.fd = None

    @classmethod
    def start(cls, mountpoint, torch, dev_index, workers, timeout_ns):
        mountpoint = os.fspath(mountpoint)
        lay = read_layout(mountpoint)
        try:
            gpu, first = lay["gpu"], lay["first"]
            packed, count = int(gpu["packed"]), int(gpu["count"])
            n = count + int(lay["cpu"]["count"])
            if (lay["align"] != PACK_ALIGN or lay.get("pack") != PACK_RULE
                    or not isinstance(first, str) or "/" in first):
                return None
        except (ValueError, KeyError, TypeError):
            return None  # not this daemon's layout.json: the usual way reports what is wrong
        if count == 0 or packed <= 0:
            return None
        # Staging disabled (ENODEV), a file the caller may not open, a daemon
        # that refuses: the usual way meets it again and says so.
        try:
            fd = os.open(os.path.join(mountpoint, first),
                         os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            ri = ring_info(fd)
        except OSError:
            ri = None
        serves = ri is not None and ri.ndevices == 1
        if serves and dev_index == "auto":
            # The default device, as _Loader.run() takes it: the GPU of a CUDA
            # ring when torch can use CUDA, else host memory.
            dev_index = ri.device if ri.backend == BACKEND_CUDA and \
                torch.cuda.is_available() else None
        if serves and dev_index is None:
            serves = ri.backend in (BACKEND_HOST, BACKEND_CUDA)
        elif serves:
            serves = ri.backend == BACKEND_CUDA and ri.device == dev_index
        if not serves:
            os.close(fd)
            return None
        self = cls()
        try:
            if dev_index is None:
                # Host results: the daemon writes into a shm object of ours
                # (sparse: its reader threads allocate the pages).
                self.shm = _ShmDest(packed)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # a writable mapping: no copy is made
                    self.buf = torch.frombuffer(self.shm.mm, dtype=torch.uint8)
                dest, storage_off = self.shm.dest(0), 0
            else:
                dev = torch.device("cuda", dev_index)
                self.buf = torch.empty(packed, dtype=torch.uint8, device=dev)
                # The daemon writes through its own mapping: nothing of ours may
                # be pending on the buffer when it does.
                torch.cuda.synchronize(dev)
                self.export = _torch.cuda_ipc_export(self.buf)
                handle, storage_off, storage_bytes = self.export.__enter__()
                dest = Destination.cuda_ipc(handle, 0, storage_off + storage_bytes)
            k = max(1, min(n, workers * self.PER_WORKER))
            cuts = [n * i // k for i in range(k + 1)]
            self.spans = [(a, b - a, storage_off) for a, b in zip(cuts, cuts[1:]) if b > a]
            self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="placefs-early")
            self.futures = [self.pool.submit(_ranges_request, fd, dest, [sp], timeout_ns)
                            for sp in self.spans]
        except BaseException:
            self.finish()
            os.close(fd)
            raise
        self.fd = fd
        self.packed, self.count = packed, count
        return self

    def finish(self):
        """Waits for every request (the daemon may still write into buf), then
        lets go of the export; returns the requests' results or raises the
        first error of a request as a whole."""
        out, first = [], None
        for f in self.futures:
            try:
                out.append(f.result())
            except BaseException as e:  # noqa: BLE001 - re-raised below
                first = first or e
        self.futures = []
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None
        if self.export is not None:
            self.export.__exit__(None, None, None)
            self.export = None
        if self.shm is not None:
            # The name goes; the mapping lives on in the results' buffer.
            self.shm.unlink()
            self.shm = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if first is not None:
            raise first
        return out


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
        self.cpu_path = None  # how cpu-placed ones landed: mapped or read
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
            how = self.gpu_path if pl == "gpu" else \
                self.cpu_path and self.cpu_path + ", beside the gpu part"
            lines.append("  %s: %d tensors, %d bytes, %.3f s, %s (%s)" % (
                pl, self.count[pl], self.bytes[pl], self.seconds[pl],
                rate(self.bytes[pl], self.seconds[pl]), how or "none"))
        if self.count["gpu"] and self.stage_ns["total_ns"]:
            lines.append("  daemon: wait %.3f s, read %.3f s, copy %.3f s, total %.3f s; "
                         "%d prefetched" % tuple([self.stage_ns[k] / 1e9 for k in (
                             "wait_ns", "read_ns", "copy_ns", "total_ns")] + [self.prefetched]))
        return "\n".join(lines)


class _Raw(dict):
    """name -> a result's flat uint8 bytes (torch tensor, bytes or bytearray).

    Results made in bulk (_Loader._finish_bulk) record only the bulk, (flat,
    names, offsets, sizes), and a result's flat view is cut when asked for
    (--verify, shard cutting): most loads never ask, so a load of tens of
    thousands of tensors makes no object per tensor here.
    """

    def __init__(self):
        super().__init__()
        self.bulks = []
        self._where = None  # name -> (bulk, position), made at the first miss

    def add_bulk(self, flat, names, offs, sizes):
        self.bulks.append((flat, names, offs, sizes))
        self._where = None

    def __missing__(self, name):
        if self._where is None:
            self._where = {}
            for b, (_, names, _, _) in enumerate(self.bulks):
                self._where.update(zip(names, zip(repeat(b), range(len(names)))))
        b, i = self._where[name]
        flat, _, offs, sizes = self.bulks[b]
        return flat[offs[i]:offs[i] + sizes[i]]

    def clear(self):
        dict.clear(self)
        self.bulks = []
        self._where = None


class _Loader:
    """One load of a mount: results in checkpoint order plus the raw bytes for --verify."""

    def __init__(self, mountpoint, device, mode, workers, timeout_ns, progress=False,
                 shard=None, cpu=None):
        self.cpu = _cpu_mode(cpu)
        self.cpu_path = None  # how the cpu-placed tensors landed (the report's)
        self.mount = mountpoint if isinstance(mountpoint, Mount) else Mount(mountpoint)
        self.shard = _shard_plan(self.mount.tensors, shard)
        self.rank = int(shard[0]) if shard is not None else None
        self.ring_device = None  # the ring a mount of several devices stages through
        self.mode = copy_mode_from_env() if mode is None else mode
        if self.mode not in ("copy", "borrow"):
            raise ValueError("mode must be 'copy' or 'borrow', got %r" % (self.mode,))
        self.dev_kind, self.dev_index = _parse_device(device)
        self.workers = max(1, int(workers))
        self.timeout_ns = timeout_ns
        self.torch = _torch.get()
        self.raw = _Raw()  # name -> flat uint8 (torch tensor, bytes or bytearray)
        self.out = {}
        self.report = None
        self._lock = threading.Lock()
        self._want_progress = progress
        self.progress = None
        self.early = None  # an _Early of load(), for _gpu_copy_cuda

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
        self.out[t.name] = _torch.typed(torch, t, raw)

    def _finish_bulk(self, tensors, offs, flat):
        """_finish() for every tensor at its offset of flat (a uint8 torch tensor), in bulk."""
        views = _torch.typed_views(self.torch, flat, tensors, offs)
        names = list(map(_NAME, tensors))
        self.raw.add_bulk(flat, names, offs, list(map(_NBYTES, tensors)))
        self.out.update(zip(names, views))

    def _finish_sliced(self, tensors, offs, flat):
        """_finish_bulk() a slice at a time, letting go of the GIL between slices.

        Views only (no kernels, nothing touches the bytes), built while the
        daemon fills flat, so a checkpoint of many small tensors does not pay
        for them after its last byte landed. A request thread whose answer
        came back waits for the GIL, and with it its next request, until a
        slice ends (the interpreter's own switch comes only every 5 ms).
        """
        for a in range(0, len(tensors), VIEW_SLICE):
            self._finish_bulk(tensors[a:a + VIEW_SLICE], offs[a:a + VIEW_SLICE], flat)
            time.sleep(0)

    # CPU-placed ------------------------------------------------------------------------

    def _read_one(self, t):
        buf = _read_file(t.path, t.nbytes, "tensor %r (%s)" % (t.name, t.path))
        return t, buf

    def _map_cpu(self, tensors, pool):
        """Maps what it may of tensors from their source shards (_mapsrc.map_tensors);
        returns the rest, for STAGE_READ (cpu="map": an error instead)."""
        res = _mapsrc.map_tensors(self.mount.mountpoint, tensors, self.cpu, self.torch, pool,
                                  self._tick)
        for ts, offs, flat in res.mapped:
            self._finish_bulk(ts, offs, flat)
        self.cpu_path = res.path
        return res.left

    def _load_cpu(self, tensors, pool):
        """Maps them (cpu "auto" or "map"), else the daemon reads them into one shm
        object of ours (STAGE_READ), in parallel."""
        if self.cpu != "read":
            tensors = self._map_cpu(tensors, pool)
            if not tensors:
                return
        else:
            self.cpu_path = "read by the daemon into shared memory (cpu=\"read\")"
        offs, total = _layout(tensors, 64)
        jobs = [(t, o) for t, o in zip(tensors, offs) if t.nbytes]
        shm = _ShmDest(total)
        try:
            if jobs:
                # A file system without STAGE_READ (not placefs: ENOTTY) is read instead.
                try:
                    _move_all(jobs, shm.dest(0), "read", self.timeout_ns, pool, self.workers,
                              self._tick, lambda t, o: self._tick(
                                  _read_into(t, shm.dest(o), self.timeout_ns).nbytes))
                except OSError as e:
                    if e.errno not in (_errno.ENOTTY, _errno.EINVAL):
                        raise
                    if e.errno == _errno.EINVAL:
                        warn_once("read-mode", "%s: the daemon refused STAGE_READ (%s): "
                                  "reading cpu-placed tensors through the mount" %
                                  (self.mount.mountpoint, e))
                    shm.unlink()
                    shm.mm.close()
                    for t, buf in pool.map(self._read_one, tensors):
                        self._tick(t.nbytes)
                        self._finish(t, buf, "cpu")
                    return
        finally:
            shm.unlink()
        self._finish_shm(tensors, offs, shm, "cpu")

    def _finish_shm(self, tensors, offs, shm, device):
        """Results as views of shm's mapping (torch) or copies of it (no torch)."""
        mem = memoryview(shm.mm)
        if self.torch is not None:
            # The results are views of the mapping; torch keeps it alive.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                flat = self.torch.frombuffer(shm.mm, dtype=self.torch.uint8)
            self._finish_bulk(tensors, offs, flat)
            mem.release()
        else:
            for t, o in zip(tensors, offs):
                self._finish(t, bytes(mem[o:o + t.nbytes]), device)
            mem.release()
            shm.mm.close()

    # GPU-placed ------------------------------------------------------------------------

    def _tick(self, nbytes):
        if self.progress is not None:
            self.progress.update(nbytes)

    def _account(self, r):
        self._tick(r.nbytes)
        with self._lock:
            for k, v in r.timings.items():
                self.report.stage_ns[k] += v
            if r.prefetched:
                self.report.prefetched += 1

    def _stage_copy_one(self, t, dest):
        fd = os.open(t.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            r = stage(fd, "copy", dest, self.timeout_ns, what="tensor %r" % t.name,
                      slice=getattr(t, "slice", None), device=self.ring_device)
        finally:
            os.close(fd)
        if r.nbytes != t.nbytes:
            raise OSError(_errno.EPROTO, "tensor %r: the daemon staged %d bytes, the plan "
                          "says %d" % (t.name, r.nbytes, t.nbytes))
        self._account(r)
        return r

    def _gpu_copy_shm(self, tensors, pool, device):
        """Copy mode into one shm object of this process (host results)."""
        early, self.early = self.early, None
        if early is not None and early.shm is not None and self._gpu_copy_early(tensors, early):
            return
        offs, total = _layout(tensors, 256)
        shm = _ShmDest(total)
        try:
            _move_all(zip(tensors, offs), shm.dest(0), "copy", self.timeout_ns, pool,
                      self.workers, self._tick,
                      lambda t, o: self._stage_copy_one(t, shm.dest(o)))
        finally:
            shm.unlink()
        self._finish_shm(tensors, offs, shm, device)

    def _gpu_copy_early(self, tensors, early):
        """The requests of _Early are in flight: views meanwhile, then their results."""
        # The daemon's own packed offsets (columns.json) are where the plan
        # ranges put the bytes; computed here only from a daemon without them.
        offs, total = _packed_offsets(self.mount, tensors, early.packed)
        if offs is None:
            offs, total = _layout(tensors, PACK_ALIGN)
        if total != early.packed or len(tensors) != early.count:
            # The plan is not what layout.json said; start again the usual way.
            early.finish()
            return False
        self._finish_sliced(tensors, offs, early.buf)
        done = 0
        for (first, count, _), res in zip(early.spans, early.finish()):
            nb, err, index = res[0]
            if err:
                t = self.mount.tensors[index] if index < len(self.mount.tensors) else None
                raise OSError(err, "tensor %r: PLACEFS_IOC_STAGE_BATCH (copy, plan ranges): %s"
                              % (t.name if t is not None else "index %d" % index,
                                 _IOC_ERRORS.get(err, os.strerror(err))))
            done += nb
            self._tick(nb)
        want = sum(map(_NBYTES, tensors))
        if done != want:
            raise OSError(_errno.EPROTO, "%s: the daemon moved %d bytes of gpu-placed tensors, "
                          "the plan says %d" % (self.mount.mountpoint, done, want))
        return True

    def _gpu_copy_cuda(self, tensors, pool):
        """Copy mode into one flat CUDA buffer of this process, shared by IPC handle."""
        torch = self.torch
        early, self.early = self.early, None
        if early is not None and self._gpu_copy_early(tensors, early):
            return
        dev = torch.device("cuda", self.dev_index)
        offs, total = _layout(tensors, 256)
        buf = torch.empty(max(total, 1), dtype=torch.uint8, device=dev)
        # The daemon writes through its own mapping: nothing of ours may be
        # pending on the buffer when it does.
        torch.cuda.synchronize(dev)

        def views():
            # Built while the daemon fills buf (see _finish_sliced).
            self._finish_sliced(tensors, offs, buf)

        with _torch.cuda_ipc_export(buf) as (handle, storage_off, storage_bytes):
            # The handle is of the base of the allocator's segment; the
            # storage sits storage_off bytes into it.
            size = storage_off + storage_bytes
            _move_all([(t, storage_off + o) for t, o in zip(tensors, offs)],
                      Destination.cuda_ipc(handle, 0, size), "copy", self.timeout_ns, pool,
                      self.workers, self._tick,
                      lambda t, o: self._stage_copy_one(t, Destination.cuda_ipc(handle, o, size)),
                      meanwhile=views)

    def _gpu_borrow(self, tensors, pool, device):
        """Borrow mode: lease each tensor, copy it out of the ring, release."""
        torch = self.torch
        ring = self.mount._ring_map(self.ring_device)
        to_cuda = ring.kind == "cuda" and torch is not None and self.dev_kind == "cuda"
        if ring.kind == "host" or (ring.kind == "cuda" and not to_cuda):
            offs, total = _layout(tensors, 64)
            flat = bytearray(total)
            fmv = memoryview(flat)
        dev = torch.device("cuda", self.dev_index) if to_cuda else None

        def one(a):
            t, o = a
            if t.nbytes == 0:
                return t.name, None
            with self.mount.borrow(t.name, self.timeout_ns, slice=getattr(t, "slice", None),
                                   device=self.ring_device) as b:
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
        """Staging disabled (-o device=none): gpu-placed tensors come like cpu ones."""
        self._load_cpu(tensors, pool)
        if device != "cpu":
            for t in tensors:
                raw = self.raw[t.name].to(device)
                self._finish(t, raw, device)

    def run(self):
        m = self.mount
        on_gpu = list(map("gpu".__eq__, map(_PLACEMENT, m.tensors)))
        gpu = list(compress(m.tensors, on_gpu))
        cpu = list(compress(m.tensors, map(operator.not_, on_gpu)))
        ri = m.ring_info() if gpu else None
        if ri is not None and ri.ndevices > 1:
            # A mount of several rings: this process's device's, or the rank's.
            if self.dev_kind == "cuda":
                self.ring_device = self.dev_index
            elif self.rank is not None:
                self.ring_device = self.rank
            else:
                self.ring_device = ri.device
            ri = m.ring_info(self.ring_device)
        ring = "unused"
        if ri is not None:
            ring = "%s %d bytes" % (ri.backend_name if ri.backend != BACKEND_CUDA
                                    else "cuda:%d" % ri.device, ri.ring_bytes)
        # Where gpu-placed results live: a host ring (or device='cpu') gives
        # host memory; a CUDA ring with device cuda:N gives that device.
        if self.dev_kind == "auto":
            # The mount's own staging device: its CUDA ring's GPU when torch can use it.
            if ri is not None and ri.backend == BACKEND_CUDA and self.torch is not None and \
                    self.torch.cuda.is_available():
                self.dev_kind, self.dev_index = "cuda", ri.device
            else:
                self.dev_kind = "cpu"
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
        # Whole tensors, by placement (gpu may come to hold a rank's slices);
        # counted before the parts run, so that nothing of it follows the last byte.
        nbytes = list(map(_NBYTES, m.tensors))
        gpu_bytes, ngpu = sum(compress(nbytes, on_gpu)), sum(on_gpu)
        self.report.count["gpu"] += ngpu
        self.report.count["cpu"] += len(on_gpu) - ngpu
        self.report.bytes["gpu"] += gpu_bytes
        self.report.bytes["cpu"] += sum(nbytes) - gpu_bytes
        if self._want_progress:
            from ._progress import Progress
            # progress: True (labelled with the mount's name) or the label itself.
            label = self._want_progress if isinstance(self._want_progress, str) else \
                os.path.basename(m.mountpoint.rstrip("/")) or "load"
            self.progress = Progress(sum(t.nbytes for t in m.tensors), label=label)
        try:
            staged = {t.name for t in gpu if t.name in self.shard and ri.backend != BACKEND_NONE} \
                if self.shard else set()
            out = self._run(m, [_ShardView(t, self.shard[t.name]) if t.name in staged else t
                                for t in gpu] if staged else gpu, cpu, ri, gdev)
            return self._cut_whole(m, out, staged)
        finally:
            if self.progress is not None:
                self.progress.close()

    def _cut_whole(self, m, out, staged):
        """shard=: the rank's parts of the tensors that were read whole (not staged)."""
        if not self.shard:
            return out
        for t in m.tensors:
            sl = self.shard.get(t.name)
            if sl is None or t.name in staged:
                continue
            v = _ShardView(t, sl)
            dev = getattr(out[t.name], "device", "cpu")
            self._finish(v, _cut_raw(self.raw[t.name], t, sl), str(dev))
            out[t.name] = self.out[t.name]
        return out

    def _run(self, m, gpu, cpu, ri, gdev):
        t_all = time.perf_counter()
        cpu_done = {}

        def cpu_part():
            # Beside the gpu part: the daemon's reader threads, not the ring.
            c0 = time.perf_counter()
            try:
                with ThreadPoolExecutor(max_workers=max(2, min(self.workers, 8))) as cpool:
                    self._load_cpu(cpu, cpool)
            except BaseException as e:  # noqa: BLE001 - re-raised by the caller's thread
                cpu_done["error"] = e
            cpu_done["seconds"] = time.perf_counter() - c0

        cpu_thread = threading.Thread(target=cpu_part, name="placefs-cpu") if cpu else None
        if cpu_thread is not None:
            cpu_thread.start()
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            t0 = time.perf_counter()
            if gpu:
                if ri.backend == BACKEND_NONE:
                    warn_once("none", "%s: staging is disabled on this mount (-o device=none): "
                              "gpu-placed tensors are read by the daemon into host memory, not "
                              "staged" % m.mountpoint)
                    self.report.gpu_path = "staging disabled: read by the daemon (STAGE_READ)"
                    self._gpu_unstaged(gpu, pool, gdev)
                elif ri.backend not in (BACKEND_HOST, BACKEND_CUDA):
                    raise RuntimeError("%s: unknown staging backend %d" % (m.mountpoint,
                                                                           ri.backend))
                elif self.mode == "borrow":
                    self.report.gpu_path = "borrowed from the ring, copied, released"
                    self._gpu_borrow(gpu, pool, gdev)
                elif gdev == "cpu":
                    self.report.gpu_path = "staged into a shm destination" + (
                        ", asked for by plan ranges before the plan was read"
                        if self.early is not None else "")
                    if self.early is not None:
                        t0 = self.early.t0
                    self._gpu_copy_shm(gpu, pool, gdev)
                else:
                    self.report.gpu_path = "staged into a CUDA IPC destination" + (
                        ", asked for by plan ranges before the plan was read"
                        if self.early is not None else "")
                    if self.early is not None:
                        t0 = self.early.t0
                    self._gpu_copy_cuda(gpu, pool)
            t1 = time.perf_counter()
        if cpu_thread is not None:
            cpu_thread.join()
            if "error" in cpu_done:
                raise cpu_done["error"]
        self.report.seconds["gpu"] = t1 - t0
        self.report.seconds["cpu"] = cpu_done.get("seconds", 0.0)
        self.report.cpu_path = self.cpu_path
        self.report.total_seconds = time.perf_counter() - t_all
        # Checkpoint order: out itself when it was filled so (every tensor
        # gpu-placed, in plan order).
        names = list(map(_NAME, m.tensors))
        if len(self.out) == len(names) and all(map(operator.is_, self.out, names)):
            out, self.out = self.out, {}
            return out
        return dict(zip(names, map(self.out.__getitem__, names)))


def _start_early(mountpoint, device, mode, workers, timeout_ns, shard):
    """An _Early for a copy-mode load of a whole mount with torch: onto cuda:N,
    or into host memory (device "cpu"), or for the default device, the one
    the mount's ring gives (its GPU when torch has CUDA, else the host);
    else None."""
    if isinstance(mountpoint, Mount) or shard is not None or \
            (copy_mode_from_env() if mode is None else mode) != "copy" or \
            os.environ.get("PLACEFS_EARLY", "1") == "0":
        return None
    kind, index = _parse_device(device)
    torch = _torch.get()
    if torch is None:
        return None
    if kind == "cuda" and not torch.cuda.is_available():
        return None
    index = {"cuda": index, "cpu": None, "auto": "auto"}[kind]
    return _Early.start(mountpoint, torch, index, max(1, int(workers)), timeout_ns)


def load(mountpoint, device=None, mode=None, workers=4, timeout_ns=0, progress=False,
         shard=None, cpu=None):
    """Like load_state_dict(), but returns (state_dict, LoadReport).

    progress=True draws a progress bar (bytes, rate, ETA) on stderr when it
    is a terminal, nothing otherwise.
    """
    # The cyclic garbage collector pauses while the load makes its objects
    # (a mixture of experts: tens of thousands of plan entries, requests and
    # views, all alive until the end, so a collection frees none of them). In
    # a profile of two loads in one process on the H200 host, the first spent
    # 0.2 s longer parsing the plan and 0.17 s longer cutting requests than
    # the second; full collections over the new objects are the likely cause,
    # not measured apart. It runs again afterwards, as it did before (a caller
    # that had turned it off keeps it off).
    early = None
    with gc_paused():
        try:
            early = _start_early(mountpoint, device, mode, workers, timeout_ns, shard)
            ld = _Loader(mountpoint, device, mode, workers, timeout_ns, progress, shard, cpu)
            ld.early = early
            try:
                sd = ld.run()
            finally:
                if not isinstance(mountpoint, Mount):
                    ld.mount.close()
        finally:
            if early is not None:
                # Not used (an error, or a path that did not take it): the daemon
                # must be done with the buffer before it is freed.
                try:
                    early.finish()
                except OSError:
                    pass
    # Only the caller's dict may keep the results (and their buffers) alive.
    ld.raw.clear()
    ld.out.clear()
    return sd, ld.report


def load_state_dict(mountpoint, device=None, mode=None, workers=4, timeout_ns=0,
                    progress=False, shard=None, cpu=None):
    """Every tensor of a placefs mount, as a dict name -> tensor in checkpoint order.

    cpu-placed tensors land in host memory, beside the gpu part, as `cpu`
    says (None: $PLACEFS_CPU, else "auto"):
      "auto"  views of private mappings of their source shards, populated
              before the return (the shard's page cache, no new memory), for
              each shard that this process opens as the very file the daemon
              validated (.placefs/shards.json) and that nobody but this user
              or root may write; the others as "read";
      "map"   mapped as "auto" whoever owns the shard (a shard shortened
              later makes touching its results raise SIGBUS, as with any
              memory-mapped loader); RuntimeError naming the shard and the
              reason when one cannot be mapped;
      "read"  the daemon's reader threads read them straight into a shm
              object of this process (new memory, nothing shared).
    Without torch they are always read. LoadReport.cpu_path says which.
    gpu-placed ones are staged through the daemon's ring: onto `device`
    ("cuda:N") when the mount stages on CUDA and torch is importable, into
    host memory when the mount's backend is "host" or device is "cpu". The
    default device (None or "auto") is the mount's own: the GPU of its CUDA
    ring when torch can use it, else the host, as `placefs-load` does. mode is "copy" (the daemon
    writes into memory of this process) or "borrow" (each tensor is leased in
    the ring, copied out and released); None reads INSTANTTENSOR_COPY ("1" or
    unset: copy, "0": borrow, anything else: ValueError). Values are torch
    tensors when torch is importable, else PlacedTensor objects. `workers`
    tensors are in flight at once.

    shard=(rank, world, dims): tensor parallelism. Each tensor that dims
    (see shard_dim(): an int, {fnmatch pattern: dim or None}, or None for
    LLAMA_TP_DIMS) splits comes back as rank's even part of it, rows
    [rank * n, (rank + 1) * n) of dim 0 or those columns of dim 1 (n =
    shape[dim] / world; OSError EINVAL when world does not divide it); the
    others whole. gpu-placed parts are staged as slices, so only they cross
    PCIe and take ring space; cpu-placed ones are read whole and cut. On a
    mount of several devices (-o device=cuda:0,cuda:1,...) the ring is the
    one of `device` ("cuda:R"), else the rank's (host:R stand-ins).
    """
    return load(mountpoint, device, mode, workers, timeout_ns, progress, shard, cpu)[0]
