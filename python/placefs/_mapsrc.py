# SPDX-License-Identifier: MIT
"""cpu-placed tensors as views of their source shards (load(cpu="map")).

The daemon validated every shard at mount and wrote down what it found in
.placefs/shards.json (path, device, inode, size, mtime, ctime). A shard is
mapped here only when the file this process opens is that same file,
unchanged. The mapping is private (a write to a result is copy-on-write and
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

MADV_POPULATE_READ = 22  # Linux 5.14
_PIECE = 8 << 20  # one populate call; a thread takes the next piece after it
_IDENT = ("dev", "ino", "size", "mtime_ns", "ctime_ns")

_libc = None
_libc_lock = threading.Lock()


class Refused(Exception):
    """A shard that is not mapped, and why (for the load's report or error)."""


def _madvise():
    global _libc
    with _libc_lock:
        if _libc is None:
            lib = ctypes.CDLL(None, use_errno=True)
            lib.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            lib.madvise.restype = ctypes.c_int
            _libc = lib
    return _libc.madvise


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
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
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
        start = lo - lo % mmap.ALLOCATIONGRANULARITY
        try:
            mm = mmap.mmap(fd, hi - start, flags=mmap.MAP_PRIVATE,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=start)
        except (OSError, ValueError) as e:
            raise Refused("%s: cannot map bytes %d-%d: %s" % (path, start, hi, e)) from None
        return Mapped(file, path, mm, start)
    finally:
        os.close(fd)


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
    """Faults one piece in, readable (MADV_POPULATE_READ; the GIL is let go).
    Refused when the file no longer has those pages (EFAULT: it was
    shortened) or the kernel cannot populate (EINVAL: before Linux 5.14)."""
    m, off, n = piece
    if _madvise()(addrs[id(m)] + off, n, MADV_POPULATE_READ) == 0:
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
