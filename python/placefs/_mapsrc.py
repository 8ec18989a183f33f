# SPDX-License-Identifier: MIT
"""cpu-placed tensors as views of their source shards (load(cpu="map")).

The daemon validated every shard at mount and wrote down what it found in
.placefs/shards.json (path, device, inode, size, mtime, ctime). A shard is
mapped here only when the file this process opens is that same file,
unchanged, and its own safetensors header places each tensor where the
mount's plan has it. The mapping is private (a write to a result is copy-on-write and
never reaches the file) and populated before the load returns (every page of
every mapped tensor is resident and mapped: nothing is left to fault in on
first use). The results share the shard's page cache instead of taking new
memory: on a source in /dev/shm they cost no memory at all.

What a mapping cannot survive: a shard shortened after the load. Touching a
result whose pages the file no longer has raises SIGBUS, as with every
memory-mapped loader (safetensors' safe_open). So "auto" maps only shards
that nobody but this user or root may write (owned by this user or root, no
group or other write bit); cpu="map" asks for the mapping regardless of who
owns the file.
"""

import ctypes
import errno as _errno
import json
import mmap
import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor

from . import safetensors as _st
from .mount import _DTYPE_BYTES

MADV_WILLNEED = 3
MADV_POPULATE_READ = 22  # Linux 5.14
_PIECE = 8 << 20  # one populate call; a thread takes the next piece after it
_IDENT = ("dev", "ino", "size", "mtime_ns", "ctime_ns")

_libc = None
_lock = threading.Lock()  # guards _libc's loading and _HEADERS
# Parsed headers by file identity (dev, ino, size, mtime_ns, ctime_ns): a stream
# maps a shard once per batch of its cpu-placed tensors, and a header of tens of
# thousands of tensors takes milliseconds to parse. A write changes the ctime.
_HEADERS = {}
_HEADERS_MAX = 64


class Refused(Exception):
    """A shard that is not mapped, and why (for the load's report or error)."""


def _lib():
    global _libc
    with _lock:
        if _libc is None:
            lib = ctypes.CDLL(None, use_errno=True)
            lib.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            lib.madvise.restype = ctypes.c_int
            lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
            lib.mincore.restype = ctypes.c_int
            _libc = lib
    return _libc


def read_shards(mountpoint):
    """.placefs/shards.json as a dict, or Refused (a daemon older than it)."""
    p = os.path.join(mountpoint, ".placefs", "shards.json")
    try:
        with open(p, "rb") as f:
            d = json.loads(f.read())
    except FileNotFoundError:
        raise Refused("%s has no .placefs/shards.json (a daemon older than the mapping)"
                      % mountpoint) from None
    except (OSError, ValueError) as e:
        raise Refused("%s: %s" % (p, e)) from None
    if not isinstance(d, dict):
        raise Refused("%s: not a JSON object" % p)
    return d


class Mapped:
    """One shard's private mapping, from `start` (a page boundary) on."""

    def __init__(self, file, path, mm, start):
        self.file, self.path, self.mm, self.start = file, path, mm, start


def open_shard(shards, file, tensors, strict):
    """Maps the part of shard `file` that holds `tensors` (all of this shard,
    nbytes > 0). strict: the owner rule of "auto". Refused, naming the file
    and the rule, when it cannot be mapped as the daemon validated it."""
    ent = shards.get(file)
    if not isinstance(ent, dict) or not isinstance(ent.get("path"), str):
        raise Refused("shard %s is not in .placefs/shards.json" % file)
    path = ent["path"]
    try:
        # O_NONBLOCK: a path that names a FIFO must not hang the open (it is refused below).
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        raise Refused("%s: cannot open the shard here: %s" % (path, e.strerror)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused("%s is not a regular file" % path)
        got = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        want = tuple(ent.get(k) for k in _IDENT)
        if got != want:
            what = [k for k, a, b in zip(_IDENT, got, want) if a != b]
            raise Refused("%s is not the file the daemon validated at mount (%s differ%s): "
                          "another file at that path here, or the shard changed since"
                          % (path, ", ".join(what), "s" if len(what) == 1 else ""))
        if strict and st.st_uid not in (os.geteuid(), 0):
            raise Refused("%s is owned by uid %d: another user could shorten it under the "
                          "mapping (cpu=\"map\" maps it all the same)" % (path, st.st_uid))
        if strict and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise Refused("%s is writable by its group or others (mode %o): they could "
                          "shorten it under the mapping (cpu=\"map\" maps it all the same)"
                          % (path, stat.S_IMODE(st.st_mode)))
        lo = min(t.offset for t in tensors)
        hi = max(t.offset + t.nbytes for t in tensors)
        if hi > st.st_size:
            raise Refused("%s: a tensor ends at byte %d, past the file's %d" % (path, hi,
                                                                               st.st_size))
        _check_header(fd, path, st.st_size, got, tensors)
        start = lo - lo % mmap.ALLOCATIONGRANULARITY
        try:
            mm = mmap.mmap(fd, hi - start, flags=mmap.MAP_PRIVATE,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=start)
        except (OSError, ValueError) as e:
            raise Refused("%s: cannot map bytes %d-%d: %s" % (path, start, hi, e)) from None
        return Mapped(file, path, mm, start)
    finally:
        os.close(fd)


def _header(fd, path, size, ident):
    """The open shard's header, validated by placefs.safetensors (the reference
    reader's rules), as {name: Tensor}; cached by the file's identity."""
    with _lock:
        hit = _HEADERS.get(ident)
    if hit is not None:
        return hit
    prefix = os.pread(fd, 8, 0)
    if len(prefix) == 8:
        n = int.from_bytes(prefix, "little")
        if n <= _st.HEADER_MAX and 8 + n <= size:
            prefix += os.pread(fd, n, 8)
    try:
        hdr = {t.name: t for t in _st.parse(path, prefix, size).tensors}
    except _st.SafetensorsError as e:
        raise Refused("%s is not a safetensors file: %s" % (path, e)) from None
    with _lock:
        if len(_HEADERS) >= _HEADERS_MAX:
            _HEADERS.clear()
        _HEADERS[ident] = hdr
    return hdr


def _check_header(fd, path, size, ident, tensors):
    """Refused unless the file is a safetensors file whose header places every
    tensor (name, dtype, shape, offsets) exactly where the mount's plan has it.
    The identity check trusts .placefs/shards.json; this one trusts the file:
    a shards.json naming some other file the caller may read (a daemon that
    lies) maps nothing."""
    hdr = _header(fd, path, size, ident)
    for t in tensors:
        e = hdr.get(t.name)
        if not (e is not None and e.dtype == t.dtype and e.shape == list(t.shape) and
                e.offset == t.offset and e.nbytes == t.nbytes):
            raise Refused("%s: its header does not place tensor %r where the mount's plan "
                          "has it" % (path, t.name))


def populate_pieces(m, tensors):
    """(mapped, offset in the mapping, length) pieces covering every tensor."""
    out = []
    for t in tensors:
        a = t.offset - m.start
        b = a + t.nbytes
        a -= a % mmap.PAGESIZE  # madvise takes a page-aligned start
        while a < b:
            n = min(_PIECE, b - a)
            out.append((m, a, n))
            a += n
    return out


def populate(piece, addrs):
    """Faults one piece in, readable (MADV_WILLNEED, then MADV_POPULATE_READ; the
    GIL is let go).
    Refused when the file no longer has those pages (EFAULT: it was
    shortened) or the kernel cannot populate (EINVAL: before Linux 5.14)."""
    m, off, n = piece
    lib = _lib()
    addr = addrs[id(m)] + off
    # A piece whose first page is not in the page cache (a source on disk) is
    # asked for whole at once, not fault by fault (read-around of
    # read_ahead_kb); a cached one (tmpfs) is only mapped.
    vec = ctypes.create_string_buffer(1)
    if lib.mincore(addr, 1, vec) == 0 and not vec.raw[0] & 1:
        lib.madvise(addr, n, MADV_WILLNEED)
    if lib.madvise(addr, n, MADV_POPULATE_READ) == 0:
        return
    e = ctypes.get_errno()
    if e == _errno.EFAULT:
        raise Refused("%s: bytes %d-%d cannot be read through the mapping (the file was "
                      "shortened?)" % (m.path, m.start + off, m.start + off + n))
    if e in (_errno.EINVAL, _errno.ENOSYS):
        raise Refused("this kernel cannot populate a mapping (MADV_POPULATE_READ, Linux "
                      "5.14): %s" % os.strerror(e))
    raise OSError(e, "%s: madvise(MADV_POPULATE_READ): %s" % (m.path, os.strerror(e)))


def address(m):
    """The mapping's address (a ctypes view that the caller drops before closing)."""
    ref = ctypes.c_char.from_buffer(m.mm)
    return ctypes.addressof(ref), ref


class Result:
    """What map_tensors() did: mapped [(tensors, offsets, flat uint8 torch tensor)],
    left (the tensors to read instead, in the order given) and path (for reports)."""

    def __init__(self, mapped, left, path):
        self.mapped, self.left, self.path = mapped, left, path


def map_tensors(mountpoint, tensors, mode, torch, pool=None, tick=None, shards=None):
    """Maps what it may of `tensors` (cpu-placed TensorInfo) from their source
    shards, as cpu= `mode` ("auto" or "map") allows, and populates the mappings
    on `pool`'s threads (a pool of 4 of its own when None; never a pool whose
    worker calls this). tick(nbytes) is called as pieces land. shards: the
    mount's .placefs/shards.json as read_shards() gave it (None: read here).
    Without torch,
    nothing is mapped, in any mode (the results are copies). mode "map":
    RuntimeError naming each shard that cannot be mapped."""
    if torch is None:
        return Result([], list(tensors), "read by the daemon into shared memory (without "
                      "torch the results are copies)")
    why, maps, left, odd = [], [], [t for t in tensors if not t.nbytes], 0
    if shards is None:
        try:
            shards = read_shards(mountpoint)
        except Refused as e:
            why.append(str(e))
    if why:
        left = list(tensors)
    else:
        by_file = {}
        for t in tensors:
            if not t.nbytes:
                continue
            if t.offset % _DTYPE_BYTES.get(t.dtype, 1):
                # A view must start at a multiple of its element size;
                # safetensors does not align tensors in the file.
                odd += 1
                left.append(t)
                continue
            by_file.setdefault(t.source, []).append(t)
        for file, ts in by_file.items():
            try:
                maps.append((open_shard(shards, file, ts, mode == "auto"), ts))
            except Refused as e:
                why.append(str(e))
                left.extend(ts)
    mapped = []
    if maps:
        addrs, refs, bad = {}, [], {}
        for mp, _ in maps:
            a, r = address(mp)
            addrs[id(mp)] = a
            refs.append(r)
        del r

        def one(piece):
            try:
                populate(piece, addrs)
            except Refused as e:
                return piece[0], str(e)
            if tick is not None:
                tick(piece[2])
            return None

        pieces = [p for mp, ts in maps for p in populate_pieces(mp, ts)]
        try:
            if pool is None:
                with ThreadPoolExecutor(max_workers=4) as own:
                    results = list(own.map(one, pieces))
            else:
                results = list(pool.map(one, pieces))
        finally:
            del refs  # the mappings may be closed from here on
        for r in results:
            if r is not None:
                bad.setdefault(id(r[0]), r[1])
        for mp, ts in maps:
            if id(mp) in bad:
                why.append(bad[id(mp)])
                left.extend(ts)
                mp.mm.close()
                continue
            mapped.append((ts, [t.offset - mp.start for t in ts],
                           torch.frombuffer(mp.mm, dtype=torch.uint8)))
    if why and mode == "map":
        raise RuntimeError("%s: cpu=\"map\": %s" % (mountpoint, "; ".join(why)))
    if odd:
        why.append("%d at offsets that are not a multiple of their element size" % odd)
    nmap = len(tensors) - len(left)
    path = "mapped from the source shards (private, populated)" if not left else (
        "read by the daemon into shared memory (%s)" % "; ".join(why) if not nmap else
        "%d mapped from the source shards, %d read by the daemon (%s)" % (
            nmap, len(left), "; ".join(why)))
    return Result(mapped, left, path)
