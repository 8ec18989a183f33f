# SPDX-License-Identifier: MIT
"""A mount's plan: the tensors it selects, their files and their placement.

The daemon writes the plan twice (lib/model/plan.c; the keys are listed in
doc/placefs-plan.1): .placefs/plan.json, one object per tensor, and
.placefs/columns.json, the same entries as one array per field, which parses
several times faster and makes no object per tensor (a mixture of experts has
tens of thousands). Plan reads columns.json, or plan.json from a daemon older
than it. Each tensor names its source shard ("file"), dtype, shape, nbytes,
offset and placement, and the name of its file on the mount (FILE_NAME_KEY):
the daemon encodes names that cannot be file names (lib/common/name.h) and says the
result, so this module does not encode names itself.
"""

import errno as _errno
import json
import os
import re
from itertools import chain, repeat
from operator import itemgetter

from ._util import gc_paused

# The member of a tensor entry that holds its encoded file name on the mount.
FILE_NAME_KEY = "filename"

_FIELDS = ("name", "filename", "path", "source", "dtype", "shape", "nbytes", "offset",
           "placement", "index")


def _check_filename(name, fname):
    if fname is None:
        raise ValueError("plan.json: tensor %r has no %r member: the daemon that wrote it "
                         "is older than this loader, which takes file names from the plan "
                         "and never encodes them itself" % (name, FILE_NAME_KEY))
    if not isinstance(fname, str) or fname in ("", ".", "..") or "/" in fname or "\0" in fname:
        raise ValueError("plan.json: tensor %r has the file name %r, which is not one "
                         "name in the mount's directory" % (name, fname))


class TensorInfo(tuple):
    """One tensor of the plan: where its file is and how it is placed.

    Read-only fields: name, filename, path, source (its shard), dtype, shape
    (a tuple), nbytes, offset (in the shard), placement ("gpu" or "cpu") and
    index (its entry in the plan). A tuple underneath: a plan of tens of
    thousands of tensors makes them in one pass without per-field work.
    """

    __slots__ = ()

    def __new__(cls, mountpoint, index, entry, _dir=None):
        """From one entry of plan.json's "tensors" (checked)."""
        try:
            name = entry["name"]
            source = entry["file"]
            dtype = entry["dtype"]
            shape = tuple(map(int, entry["shape"]))
            nbytes = int(entry["nbytes"])
            offset = int(entry["offset"])
            placement = entry["placement"]
            fname = entry.get(FILE_NAME_KEY)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError("plan.json: tensor entry %d is malformed (%s)" % (index, e)) from None
        if placement != "gpu" and placement != "cpu":
            raise ValueError("plan.json: tensor %r has placement %r, neither gpu nor cpu"
                             % (name, placement))
        if nbytes < 0 or (shape and min(shape) < 0):
            raise ValueError("plan.json: tensor %r has a negative size" % (name,))
        _check_filename(name, fname)
        # _dir: mountpoint with its trailing separator (what os.path.join adds), from Plan.
        path = _dir + fname if _dir is not None else os.path.join(mountpoint, fname)
        return tuple.__new__(cls, (name, fname, path, source, dtype, shape, nbytes, offset,
                                   placement, index))

    def __repr__(self):
        return "TensorInfo(%r, %s, shape=%r, nbytes=%d, placement=%s)" % (
            self.name, self.dtype, self.shape, self.nbytes, self.placement)

    def __getnewargs__(self):
        raise TypeError("a TensorInfo is made by Plan, not copied or pickled")


for _i, _f in enumerate(_FIELDS):
    setattr(TensorInfo, _f, property(itemgetter(_i), doc="the tensor's %s" % _f))
del _i, _f


def _read_json(path):
    """The parsed file, None when it does not exist; ValueError when it is not JSON."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError("%s: not valid JSON: %s" % (path, e)) from None


def _packed_column(c, path, n):
    """columns.json's "packed" list (each entry's offset in its placement's packed
    layout, lib/model/plan.h), checked at C speed; None where the daemon writes none."""
    packed = c.get("packed")
    if packed is None:
        return None
    if not isinstance(packed, list) or len(packed) != n or \
            (n and (set(map(type, packed)) != {int} or min(packed) < 0)):
        raise ValueError(path + ": \"packed\" must hold \"count\" integers >= 0")
    return packed


def _from_columns(c, path, d, first=None):
    """TensorInfo list of columns.json's object c (checked as a whole, not per field).

    first: c is a chunk of columns.jsonl whose entries begin at plan index
    `first` (its "first" member must say so; no "version", the header has it).
    """
    what = path + ": "
    if first is not None:
        what = "%s: the chunk at entry %d: " % (path, first)
    try:
        n = c["count"]
        names, files, dtypes = c["name"], c["files"], c["dtypes"]
        enc = c["filename"]
        cols = (c["file"], c["dtype"], c["shape"], c["nbytes"], c["offset"])
        place = c["placement"]
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise ValueError(what + "malformed (%s)" % e) from None
    if not isinstance(enc, dict):
        raise ValueError(what + "malformed (\"filename\" is not an object)")
    if first is None and c.get("version") != 1:
        raise ValueError(what + "version %r, this loader reads 1" % (c.get("version"),))
    if first is not None and c.get("first") != first:
        raise ValueError(what + "\"first\" is %r" % (c.get("first"),))
    if not isinstance(n, int) or n < 0 or not isinstance(place, str) or \
            any(not isinstance(a, list) or len(a) != n for a in (names,) + cols) or \
            len(place) != n:
        raise ValueError(what + "the columns do not all have \"count\" entries")
    if place.strip("gc"):
        raise ValueError(what + "placement %r is neither g(pu) nor c(pu)"
                         % place.strip("gc")[0])
    if not all(isinstance(x, str) for x in files) or not all(isinstance(x, str) for x in dtypes):
        raise ValueError(what + "\"files\" and \"dtypes\" must hold strings")
    fcol, dcol, shapes, nbytes, offsets = cols
    # Checked column by column at C speed (map, set, min, join): a generator
    # per field would cost as much as the parse.
    for col in (fcol, dcol, nbytes, offsets):
        if n and (set(map(type, col)) != {int} or min(col) < 0):
            raise ValueError(what + "file, dtype, nbytes and offset must be integers >= 0")
    if n and (max(fcol) >= len(files) or max(dcol) >= len(dtypes)):
        raise ValueError(what + "a file or dtype position is past its table")
    if n and set(map(type, shapes)) != {list}:
        raise ValueError(what + "every shape must be a list of integers >= 0")
    shapes = list(map(tuple, shapes))
    dims = list(chain.from_iterable(shapes))
    if dims and (set(map(type, dims)) != {int} or min(dims) < 0):
        raise ValueError(what + "every shape must be a list of integers >= 0")
    if n and set(map(type, names)) != {str}:
        raise ValueError(what + "every tensor name must be a string")
    if any(not k.isdigit() or not 0 <= int(k) < n for k in enc):
        raise ValueError(what + "\"filename\" has a key that is not an entry's index")
    fnames = list(names)
    for k, v in enc.items():
        fnames[int(k)] = v
    joined = "\n".join(fnames) if set(map(type, fnames)) == {str} else None
    if n and (joined is None or "/" in joined or "\0" in joined or
              not {"", ".", ".."}.isdisjoint(fnames)):
        for name, fname in zip(names, fnames):
            _check_filename(name, fname)
    place = list(map({"g": "gpu", "c": "cpu"}.__getitem__, place))
    rows = zip(names, fnames, map(d.__add__, fnames), map(files.__getitem__, fcol),
               map(dtypes.__getitem__, dcol), shapes, nbytes, offsets, place,
               range(first or 0, (first or 0) + n))
    return list(map(tuple.__new__, repeat(TensorInfo, n), rows))


# The tensor attributes lookup() reads, all of a TensorInfo's fields but the path.
_XATTRS = ("name", "source", "dtype", "shape", "nbytes", "offset", "placement", "index")


def _plain(name):
    """Whether the daemon's file name of `name` is `name` itself (lib/common/name.h)."""
    return (isinstance(name, str) and 0 < len(name) <= 255 and name[0] != "." and
            name.isascii() and name.isprintable() and "%" not in name and "/" not in name)


def lookup(mount_dir, name):
    """The TensorInfo of `name` from its file's user.placefs.* attributes, or None.

    mount_dir is the mountpoint with a trailing separator. Only for a name
    that is its own file name; None whenever this cannot say (another name,
    no such file, no attributes, a value that does not parse): the plan
    answers then. The file's user.placefs.name must be `name` itself.
    """
    if not _plain(name):
        return None
    path = mount_dir + name
    try:
        if os.getxattr(path, "user.placefs.name") != name.encode():
            return None
        v = {k: os.getxattr(path, "user.placefs." + k).decode() for k in _XATTRS[1:]}
        shape = json.loads(v["shape"])
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    # Stricter than a plan entry's int(): decimal digits and JSON integers only.
    nums = (v["nbytes"], v["offset"], v["index"])
    if not all(x.isascii() and x.isdigit() for x in nums) or not isinstance(shape, list) or \
            not all(type(d) is int for d in shape):
        return None
    nbytes, offset, index = map(int, nums)
    entry = {"name": name, "file": v["source"], "dtype": v["dtype"], "shape": shape,
             "nbytes": nbytes, "offset": offset, "placement": v["placement"],
             FILE_NAME_KEY: name}
    try:
        return TensorInfo(mount_dir, index, entry, mount_dir)  # a plan entry's checks
    except ValueError:
        return None


# What head() reads of plan.json: about 500 entries of a typical checkpoint.
HEAD_BYTES = 128 << 10
_WS = re.compile(r"[ \t\n\r]*")


def head(mountpoint, nbytes=HEAD_BYTES):
    """The first entries of .placefs/plan.json, from its first `nbytes` only.

    Returns (tensors, complete): the TensorInfo records of every entry that
    lies whole in those bytes, in plan order, and whether that is all of the
    plan; None when the bytes are not the daemon's plan.json as expected (the
    whole plan then answers, and reports what is wrong). A streaming loader
    starts on these while the whole plan is still to be read.
    """
    mountpoint = os.fspath(mountpoint)
    path = os.path.join(mountpoint, ".placefs", "plan.json")
    d = os.path.join(mountpoint, "")
    try:
        with open(path, "rb", buffering=0) as f:
            raw = b""
            while len(raw) < nbytes:  # a short read is not the end of the file
                more = f.read(nbytes - len(raw))
                if not more:
                    break
                raw += more
    except OSError:
        return None
    # Cut a multibyte character the read split; anything else invalid is not ours.
    for cut in range(4):
        try:
            text = raw[:len(raw) - cut].decode("utf-8")
            break
        except UnicodeDecodeError:
            continue
    else:
        return None
    dec = json.JSONDecoder()
    out = []
    try:
        pos = _WS.match(text, 0).end()
        if text[pos:pos + 1] != "{":
            return None
        pos = _WS.match(text, pos + 1).end()
        while True:  # the members before "tensors"
            key, pos = dec.raw_decode(text, pos)
            pos = _WS.match(text, pos).end()
            if not isinstance(key, str) or text[pos:pos + 1] != ":":
                return None
            pos = _WS.match(text, pos + 1).end()
            if key == "tensors":
                break
            _, pos = dec.raw_decode(text, pos)
            pos = _WS.match(text, pos).end()
            if text[pos:pos + 1] != ",":
                return None
            pos = _WS.match(text, pos + 1).end()
        if text[pos:pos + 1] != "[":
            return None
        pos = _WS.match(text, pos + 1).end()
        if text[pos:pos + 1] == "]":
            return out, True
        while True:
            try:
                e, pos = dec.raw_decode(text, pos)
            except ValueError:
                if len(raw) < nbytes:
                    return None  # the whole file, yet an entry does not parse
                return out, False  # cut by the end of the bytes read
            out.append(TensorInfo(mountpoint, len(out), e, d))
            pos = _WS.match(text, pos).end()
            c = text[pos:pos + 1]
            if c == "]":
                return out, True
            if c != ",":
                if not c and len(raw) == nbytes:
                    return out, False
                return None
            pos = _WS.match(text, pos + 1).end()
    except ValueError:
        return None


# What column_chunks() reads of columns.jsonl at once.
_CHUNK_READ = 1 << 20


def column_chunks(mountpoint):
    """The plan chunk by chunk, from .placefs/columns.jsonl; None without that file.

    Returns (count, chunks): the plan's number of entries and an iterator of
    TensorInfo lists, the plan's entries in order, each chunk read and parsed
    only when the iteration reaches it (a plan of tens of thousands of
    tensors is about a thousand a chunk, a few milliseconds each). The
    iterator raises ValueError where a line is not the daemon's (malformed,
    out of order, more or fewer entries than the header says) and OSError
    where the file cannot be read.
    """
    mountpoint = os.fspath(mountpoint)
    path = os.path.join(mountpoint, ".placefs", "columns.jsonl")
    try:
        f = open(path, "rb", buffering=_CHUNK_READ)
    except FileNotFoundError:
        return None
    try:
        try:
            head = json.loads(f.readline())
            count, chunks = head["count"], head["chunks"]
        except (ValueError, UnicodeDecodeError, KeyError, TypeError) as e:
            raise ValueError("%s: not a columns.jsonl header (%s)" % (path, e)) from None
        if head.get("version") != 1:
            raise ValueError("%s: version %r, this loader reads 1" % (path, head.get("version")))
        if not all(type(x) is int and x >= 0 for x in (count, chunks)):
            raise ValueError("%s: \"count\" and \"chunks\" must be integers >= 0" % path)
    except BaseException:
        f.close()
        raise
    return count, _chunks(f, path, os.path.join(mountpoint, ""), count, chunks)


def _chunks(f, path, d, count, chunks):
    with f:
        done = 0
        for _ in range(chunks):
            line = f.readline()
            try:
                c = json.loads(line)
            except (ValueError, UnicodeDecodeError) as e:
                raise ValueError("%s: the chunk at entry %d is not JSON (%s)" % (path, done, e)
                                 ) from None
            if not isinstance(c, dict):
                raise ValueError("%s: the chunk at entry %d is not an object" % (path, done))
            with gc_paused():
                ts = _from_columns(c, path, d, done)
            if not ts:
                raise ValueError("%s: the chunk at entry %d is empty" % (path, done))
            done += len(ts)
            if done > count:
                raise ValueError("%s: more entries than the header's %d" % (path, count))
            yield ts
        if done != count or f.readline():
            raise ValueError("%s: %d entries in %d chunks, the header says %d in %d"
                             % (path, done, chunks, count, chunks))


def read_layout(mountpoint):
    """.placefs/layout.json's object (a few hundred bytes), or None when it cannot
    be read or is not JSON: the whole plan then answers, and says what is wrong."""
    try:
        with open(os.path.join(os.fspath(mountpoint), ".placefs", "layout.json"), "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def layout_counts(mountpoint):
    """(gpu count, cpu count, bytes of both) from .placefs/layout.json, or None.

    None when the file is missing or not as this daemon writes it.
    """
    lay = read_layout(mountpoint)
    try:
        g, c = lay["gpu"], lay["cpu"]
        out = (g["count"], c["count"], g["bytes"] + c["bytes"])
    except (KeyError, TypeError):
        return None
    if not all(type(x) is int and x >= 0 for x in out):
        return None
    return out


class Plan:
    """The parsed plan of a mount.

    `source`, `buffer_size` and `ring_bytes` are the plan's members of those
    names (None when absent); `tensors` the TensorInfo list in checkpoint
    order; `by_name` the same keyed by tensor name; `packed` each tensor's
    offset in its placement's packed layout, in plan order (None from a
    daemon whose columns.json has no "packed"); `data` the whole plan.json
    object (read when first asked for).
    """

    def __init__(self, mountpoint):
        # A few objects per tensor and no cycles: with torch imported, a plan
        # of 51,027 tensors took twice as long with the collector running.
        with gc_paused():
            self._parse(os.fspath(mountpoint))

    def _parse(self, mountpoint):
        self.mountpoint = mountpoint
        self.path = os.path.join(mountpoint, ".placefs", "plan.json")
        d = os.path.join(mountpoint, "")
        cpath = os.path.join(mountpoint, ".placefs", "columns.json")
        self._data = None
        top = _read_json(cpath)
        self.packed = None
        if top is not None:
            if not isinstance(top, dict):
                raise ValueError("%s: not a JSON object" % cpath)
            self.tensors = _from_columns(top, cpath, d)
            self.packed = _packed_column(top, cpath, len(self.tensors))
        else:
            # A daemon older than columns.json.
            top = self._read_plan_json()
            self.tensors = [TensorInfo(mountpoint, i, e, d) for i, e in enumerate(top["tensors"])]
        self.source = top.get("source")
        self.buffer_size = top.get("buffer_size")
        self.ring_bytes = top.get("ring_bytes")
        self.by_name = dict(zip(map(itemgetter(0), self.tensors), self.tensors))
        if len(self.by_name) != len(self.tensors):
            seen = set()
            for t in self.tensors:
                if t.name in seen:
                    raise ValueError("%s: tensor %r is listed twice" % (self.path, t.name))
                seen.add(t.name)

    def _read_plan_json(self):
        data = _read_json(self.path)
        if data is None:
            raise FileNotFoundError(_errno.ENOENT, "%s is not a placefs mount (no "
                                    ".placefs/plan.json)" % self.mountpoint, self.path)
        if not isinstance(data, dict) or not isinstance(data.get("tensors"), list):
            raise ValueError("%s: no \"tensors\" list" % self.path)
        self._data = data
        return data

    @property
    def data(self):
        """The whole .placefs/plan.json object."""
        return self._data if self._data is not None else self._read_plan_json()
