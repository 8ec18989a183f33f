# SPDX-License-Identifier: MIT
"""A mount's plan: .placefs/plan.json, the tensors it selects and their files.

The daemon writes plan.json (lib/plan.c, placefs_plan_format_json; the keys
are listed in doc/placefs-plan.1). Each tensor entry names the tensor, its
source shard ("file"), dtype, shape, nbytes, offset and placement, and the
name of its file on the mount (FILE_NAME_KEY): the daemon encodes names
that cannot be file names (lib/name.h) and says the result, so this module
does not encode names itself.
"""

import errno as _errno
import json
import os

# The member of a tensor entry that holds its encoded file name on the mount.
FILE_NAME_KEY = "filename"


class TensorInfo:
    """One tensor of the plan: where its file is and how it is placed."""

    __slots__ = ("name", "filename", "path", "source", "dtype", "shape", "nbytes", "offset",
                 "placement", "index")

    def __init__(self, mountpoint, index, entry, _dir=None):
        # Runs once per tensor of the plan (tens of thousands for a mixture of
        # experts), so it sticks to builtins called once each: no generators.
        try:
            self.name = entry["name"]
            self.source = entry["file"]
            self.dtype = entry["dtype"]
            self.shape = tuple(map(int, entry["shape"]))
            self.nbytes = int(entry["nbytes"])
            self.offset = int(entry["offset"])
            self.placement = entry["placement"]
            fname = entry.get(FILE_NAME_KEY)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError("plan.json: tensor entry %d is malformed (%s)" % (index, e)) from None
        if self.placement != "gpu" and self.placement != "cpu":
            raise ValueError("plan.json: tensor %r has placement %r, neither gpu nor cpu"
                             % (self.name, self.placement))
        if self.nbytes < 0 or (self.shape and min(self.shape) < 0):
            raise ValueError("plan.json: tensor %r has a negative size" % (self.name,))
        if fname is None:
            raise ValueError("plan.json: tensor %r has no %r member: the daemon that wrote it "
                             "is older than this loader, which takes file names from the plan "
                             "and never encodes them itself" % (self.name, FILE_NAME_KEY))
        if (not isinstance(fname, str) or fname in ("", ".", "..") or "/" in fname or
              "\0" in fname):
            raise ValueError("plan.json: tensor %r has the file name %r, which is not one "
                             "name in the mount's directory" % (self.name, fname))
        self.index = index
        self.filename = fname
        # _dir: mountpoint with its trailing separator (what os.path.join adds), from Plan.
        self.path = _dir + fname if _dir is not None else os.path.join(mountpoint, fname)

    def __repr__(self):
        return "TensorInfo(%r, %s, shape=%r, nbytes=%d, placement=%s)" % (
            self.name, self.dtype, self.shape, self.nbytes, self.placement)


class Plan:
    """The parsed .placefs/plan.json of a mount.

    `data` is the whole JSON object; `source`, `buffer_size` and `ring_bytes`
    its members of those names (None when absent); `tensors` the TensorInfo
    list in checkpoint order; `by_name` the same keyed by tensor name.
    """

    def __init__(self, mountpoint):
        mountpoint = os.fspath(mountpoint)
        self.path = os.path.join(mountpoint, ".placefs", "plan.json")
        try:
            with open(self.path, "rb") as f:
                data = json.loads(f.read().decode("utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(_errno.ENOENT, "%s is not a placefs mount (no "
                                    ".placefs/plan.json)" % mountpoint,
                                    self.path) from None
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError("%s: not valid JSON: %s" % (self.path, e)) from None
        if not isinstance(data, dict) or not isinstance(data.get("tensors"), list):
            raise ValueError("%s: no \"tensors\" list" % self.path)
        self.data = data
        self.source = data.get("source")
        self.buffer_size = data.get("buffer_size")
        self.ring_bytes = data.get("ring_bytes")
        d = os.path.join(mountpoint, "")
        self.tensors = [TensorInfo(mountpoint, i, e, d) for i, e in enumerate(data["tensors"])]
        self.by_name = {}
        for t in self.tensors:
            if t.name in self.by_name:
                raise ValueError("%s: tensor %r is listed twice" % (self.path, t.name))
            self.by_name[t.name] = t
