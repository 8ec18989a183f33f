# SPDX-License-Identifier: MIT
"""Checks python/placefs against the C header and against live placefs mounts.

Run by tests/python-loader.sh, one scenario per call:

  loader_test.py abi PROBE_OUTPUT           struct layouts, commands, packing
  loader_test.py offline                     what needs no mount (env, names, dtypes,
                                             file names from a hand-written plan.json)
  loader_test.py seed MNT SOURCE LIMIT       1 MiB staged + 9 MiB cpu, both modes
  loader_test.py wrap MNT SOURCE             five 4 MiB tensors through an 8 MiB ring
  loader_test.py wrapfull MNT SOURCE         the same ring full: timeout, then room
  loader_test.py mixed MNT SOURCE LIMIT      many dtypes/names: load == plain reads
  loader_test.py none MNT SOURCE             a mount with -o device=none
  loader_test.py cpuonly MNT SOURCE          a mount whose tensors are all cpu-placed

Every expectation about bytes comes from the source checkpoint, parsed here
with a reader of its own (not from the mount or the module). The module is
used with the standard library only unless PLACEFS_NO_TORCH is unset and
torch is importable; the checks accept both result kinds.
"""

import errno
import fcntl
import io
import json
import mmap
import os
import re
import stat
import struct
import sys
import tempfile
import time
import warnings

import placefs

FAILS = []
CHECKS = [0]


def check(cond, msg):
    CHECKS[0] += 1
    if not cond:
        FAILS.append(msg)
        print("FAIL: " + msg, file=sys.stderr)
    return cond


def expect_oserror(fn, want, what):
    try:
        fn()
    except OSError as e:
        return check(e.errno == want, "%s: errno %s, expected %s (%s)" % (
            what, errno.errorcode.get(e.errno), errno.errorcode[want], e))
    return check(False, "%s: succeeded, expected %s" % (what, errno.errorcode[want]))


def expect_raises(fn, exc, pattern, what):
    try:
        fn()
    except exc as e:
        return check(re.search(pattern, str(e)) is not None,
                     "%s: message %r does not match %r" % (what, str(e), pattern))
    except Exception as e:  # noqa: BLE001 - report any other failure as such
        return check(False, "%s: raised %r, expected %s" % (what, e, exc.__name__))
    return check(False, "%s: no exception, expected %s" % (what, exc.__name__))


def done(name):
    print("%s: %d checks, %d failures" % (name, CHECKS[0], len(FAILS)))
    sys.exit(1 if FAILS else 0)


# ---- an independent reader of the source checkpoint ----------------------------------

def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return {k: (8 + n + v["data_offsets"][0], v["data_offsets"][1] - v["data_offsets"][0],
                v["dtype"], tuple(v["shape"])) for k, v in h.items()}


def reference(source):
    """name -> (dtype, shape, bytes) from the checkpoint file(s) themselves."""
    if os.path.isdir(source):
        idx = os.path.join(source, "model.safetensors.index.json")
        files = sorted(x for x in os.listdir(source) if x.endswith(".safetensors"))
        wmap = json.load(open(idx))["weight_map"] if os.path.exists(idx) else None
    else:
        files, wmap = [os.path.basename(source)], None
        source = os.path.dirname(source) or "."
    ref = {}
    for fn in files:
        with open(os.path.join(source, fn), "rb") as f:
            data = f.read()
        for name, (off, n, dt, shape) in read_header(os.path.join(source, fn)).items():
            if wmap is not None and wmap.get(name) != fn:
                continue
            ref[name] = (dt, shape, data[off:off + n])
    return ref


def plain_read(path):
    with open(path, "rb", buffering=0) as f:
        out = []
        while True:
            c = f.read(1 << 20)
            if not c:
                return b"".join(out)
            out.append(c)


def same_bytes(v, want):
    """True when a load_state_dict value (PlacedTensor or torch tensor) holds exactly want."""
    if isinstance(v, placefs.PlacedTensor):
        return v.data == want
    import torch
    t = v.detach().to("cpu").contiguous().reshape(-1)
    if t.dtype != torch.uint8:
        t = t.view(torch.uint8)
    if t.numel() != len(want):
        return False
    return len(want) == 0 or torch.equal(t, torch.frombuffer(bytearray(want),
                                                             dtype=torch.uint8))


def check_state_dict(sd, mnt, ref, limit, what, device="cpu"):
    m = placefs.Mount(mnt)
    names = [t.name for t in m.tensors]
    # The plan came from columns.json; plan.json says the same, entry by entry.
    check(os.path.isfile(os.path.join(mnt, ".placefs", "columns.json")),
          "%s: the mount has no .placefs/columns.json" % what)
    from_json = [placefs.TensorInfo(mnt, i, e) for i, e in enumerate(m.plan["tensors"])]
    check(from_json == m.tensors, "%s: columns.json and plan.json disagree" % what)
    # Its "packed" column is the packed layout the loader computes, placement
    # by placement (the offsets the plan ranges write at), and layout.json's sizes.
    packed = m._read_plan().packed
    check(packed is not None, "%s: columns.json has no \"packed\"" % what)
    lay = placefs.plan.read_layout(mnt)
    for place in ("gpu", "cpu"):
        ts = [t for t in m.tensors if t.placement == place]
        offs, total = placefs.loader._layout(ts, placefs.loader.PACK_ALIGN)
        got = [packed[t.index] for t in ts]
        check(got == offs, "%s: %s: columns.json's packed %r, the loader's layout %r"
              % (what, place, got[:8], offs[:8]))
        check(lay[place]["packed"] == total, "%s: %s: layout.json packs %d bytes, the layout %d"
              % (what, place, lay[place]["packed"], total))
        check(placefs.loader._packed_offsets(m, ts, total) == (offs, total),
              "%s: %s: _packed_offsets disagrees" % (what, place))
    check(list(sd) == names, "%s: keys not in checkpoint order" % what)
    check(set(names) == set(ref), "%s: plan names differ from the checkpoint's" % what)
    # The quick way to one tensor (its file's attributes, no plan): the plan's
    # entry exactly for a name that is its own file name, None (the plan
    # answers) for one the daemon encodes.
    d = os.path.join(mnt, "")
    for t in m.tensors:
        q = placefs.plan.lookup(d, t.name)
        if t.filename == t.name:
            check(q == t, "%s: %r by its attributes is %r, the plan says %r" % (what, t.name, q,
                                                                              t))
        else:
            check(q is None, "%s: %r (file %r) found without the plan: %r" % (
                what, t.name, t.filename, q))
    for t in m.tensors:
        v = sd.get(t.name)
        if not check(v is not None, "%s: %r missing" % (what, t.name)):
            continue
        dt, shape, want = ref[t.name]
        check(same_bytes(v, want), "%s: %r (%s, %d bytes, %s): bytes differ from the "
              "checkpoint" % (what, t.name, dt, len(want), t.placement))
        check(same_bytes(v, plain_read(t.path)), "%s: %r differs from a plain read of %s" % (
            what, t.name, t.path))
        # The file name comes from the daemon (plan.json), and it is the file
        # that holds the tensor: the bytes above were read through t.path.
        check(m.plan["tensors"][t.index].get(placefs.plan.FILE_NAME_KEY) == t.filename,
              "%s: plan.json does not give %r its file name" % (what, t.name))
        check(t.path == os.path.join(mnt, t.filename) and os.path.isfile(t.path),
              "%s: %r has the file %r, which is not a file of the mount" % (what, t.name,
                                                                            t.filename))
        pl = "gpu" if limit is None or len(want) <= limit else "cpu"
        check(t.placement == pl, "%s: %r placed %s, expected %s" % (what, t.name, t.placement,
                                                                     pl))
        if isinstance(v, placefs.PlacedTensor):
            check(v.dtype == dt and v.shape == shape and v.placement == pl and v.name == t.name,
                  "%s: %r metadata %r" % (what, t.name, v))
            check(v.device == ("cpu" if pl == "cpu" else device), "%s: %r on %s" % (
                what, t.name, v.device))
        else:
            import torch
            want_dev = "cpu" if pl == "cpu" else device
            check(str(v.device) == want_dev, "%s: %r on %s, expected %s" % (
                what, t.name, v.device, want_dev))
            # Typed: the dtype and shape; a dtype torch lacks: flat uint8.
            want_dt, typed = placefs._torch.dtype_of(torch, t)
            check(v.dtype == want_dt and (not typed or tuple(v.shape) == shape),
                  "%s: %r is %s %r, expected %s %r" % (what, t.name, v.dtype, tuple(v.shape),
                                                       want_dt, shape))


# ---- abi: the module against the C header ----------------------------------------------

FIELDS = {
    "ring_info": ("_RING_INFO_FMT", ["version", "size", "backend", "device", "ring_bytes",
                                     "host_buffer_bytes", "alignment", "handle_kind",
                                     "handle_bytes", "handle", "flags", "select",
                                     "ndevices", "position", "reserved"]),
    "stage": ("_STAGE_FMT", ["version", "size", "mode", "flags", "dest_kind",
                             "dest_handle_bytes", "dest_offset", "dest_size", "dest_handle",
                             "timeout_ns", "nbytes", "ring_offset", "lease", "wait_ns",
                             "read_ns", "copy_ns", "total_ns", "out_flags", "pad0",
                             "slice_dim", "device", "slice_start", "slice_len", "reserved"]),
    "release": ("_RELEASE_FMT", ["version", "size", "lease", "reserved"]),
}


def fmt_fields(fmt):
    """(offset, size) of each field of a struct format ("=IIQ6Q": 4 fields)."""
    order, body = fmt[0], fmt[1:]
    toks = re.findall(r"(\d*)([a-zA-Z])", body)
    out, prefix = [], order
    for count, code in toks:
        off = struct.calcsize(prefix)
        prefix += count + code
        out.append((off, struct.calcsize(prefix) - off))
    return out


class FakeIoctl:
    """Stands in for fcntl.ioctl to capture requests and play C-built replies."""

    def __init__(self, reply=None):
        self.reply = reply
        self.calls = []

    def __call__(self, fd, cmd, buf, mutate):
        self.calls.append((fd, cmd, bytes(buf), mutate))
        if self.reply is not None:
            buf[:] = self.reply
        return 0


def abi(probe_path):
    probe = {}
    fields = {}
    with open(probe_path) as f:
        for line in f:
            p = line.split()
            if p[0] == "field":
                fields[p[1]] = (int(p[2]), int(p[3]))
            elif p[0] in ("req", "rsp"):
                probe[(p[0], p[1])] = bytes.fromhex(p[2])
            else:
                probe[(p[0], p[1])] = int(p[2])
    # Sizes, field by field.
    for s, (fmtname, names) in FIELDS.items():
        fmt = getattr(placefs, fmtname)
        check(struct.calcsize(fmt) == probe[("size", s)], "sizeof(struct placefs_ioc_%s) "
              "is %d, the module's format gives %d" % (s, probe[("size", s)],
                                                      struct.calcsize(fmt)))
        got = fmt_fields(fmt)
        check(len(got) == len(names), "%s: %d fields in the format, %d in C" % (
            s, len(got), len(names)))
        for name, (off, size) in zip(names, got):
            c = fields.get("%s.%s" % (s, name))
            check(c == (off, size), "%s.%s: C offset/size %r, module %r" % (s, name, c,
                                                                          (off, size)))
        check(len(fields_of(fields, s)) == len(names), "%s: the probe lists other fields" % s)
    # Sizes the module exports.
    for s, attr in (("ring_info", "RING_INFO_SIZE"), ("stage", "STAGE_SIZE"),
                    ("release", "RELEASE_SIZE")):
        check(getattr(placefs, attr) == probe[("size", s)], "placefs.%s" % attr)
        check(probe[("const", attr)] == probe[("size", s)], "C %s" % attr)
    # Command numbers.
    for c in ("RING_INFO", "STAGE", "RELEASE"):
        check(getattr(placefs, "IOC_" + c) == probe[("cmd", c)],
              "PLACEFS_IOC_%s: C 0x%x, module 0x%x" % (c, probe[("cmd", c)],
                                                      getattr(placefs, "IOC_" + c)))
    # Constants.
    for (kind, name), v in probe.items():
        if kind == "const" and not name.endswith("_SIZE"):
            check(getattr(placefs, name, None) == v, "constant %s: C %d, module %r" % (
                name, v, getattr(placefs, name, None)))

    real = fcntl.ioctl
    try:
        # ring_info(): the request C builds; the C reply decodes field by field.
        fake = FakeIoctl(probe[("rsp", "ring_info")])
        fcntl.ioctl = fake
        ri = placefs.ring_info(3)
        check(fake.calls[0][1] == probe[("cmd", "RING_INFO")] and fake.calls[0][3] is True,
              "ring_info: wrong command or not a mutable buffer")
        check(fake.calls[0][2] == probe[("req", "ring_info")], "ring_info request bytes differ "
              "from C's")
        check((ri.backend, ri.device, ri.ring_bytes, ri.host_buffer_bytes, ri.alignment,
               ri.handle_kind) == (placefs.BACKEND_CUDA, -1, 0x0102030405060708,
                                   0x1112131415161718, 4096, placefs.HANDLE_CUDA_IPC),
              "ring_info reply decoded as %r" % ri)
        check(ri.handle == bytes(0xA0 ^ i for i in range(64)), "ring_info handle bytes")

        # stage(): three requests and one reply.
        fake = FakeIoctl(probe[("rsp", "stage")])
        fcntl.ioctl = fake
        r = placefs.stage(3, "copy", placefs.Destination.shm("/probe-dest", 0x2000, 0x300000),
                          123456789)
        check(fake.calls[0][2] == probe[("req", "stage_copy_shm")],
              "stage(copy, shm) request bytes differ from C's")
        check(fake.calls[0][1] == probe[("cmd", "STAGE")], "stage: wrong command")
        placefs.stage(3, "copy", placefs.Destination.cuda_ipc(
            bytes(i ^ 0x5A for i in range(64)), 7, 1 << 40))
        check(fake.calls[1][2] == probe[("req", "stage_copy_ipc")],
              "stage(copy, cuda ipc) request bytes differ from C's")
        placefs.stage(3, "borrow")
        check(fake.calls[2][2] == probe[("req", "stage_borrow")],
              "stage(borrow) request bytes differ from C's")
        check((r.nbytes, r.ring_offset, r.lease, r.wait_ns, r.read_ns, r.copy_ns, r.total_ns,
               r.prefetched) == (0x2122232425262728, 0x3132333435363738, 0x4142434445464748,
                                 0x5152535455565758, 0x6162636465666768, 0x7172737475767778,
                                 0x8182838485868788, True), "stage reply decoded as %r" % r)
        check(r.timings["copy_ns"] == 0x7172737475767778, "stage timings")

        fake = FakeIoctl()
        fcntl.ioctl = fake
        placefs.release(3, 0x0123456789abcdef)
        check(fake.calls[0][1] == probe[("cmd", "RELEASE")], "release: wrong command")
        check(fake.calls[0][2] == probe[("req", "release")], "release request bytes differ")
    finally:
        fcntl.ioctl = real

    # Arguments the module refuses before any ioctl.
    expect_raises(lambda: placefs.stage(3, "copy"), ValueError, "copy mode needs a Destination",
                  "stage copy without a destination")
    expect_raises(lambda: placefs.stage(3, "borrow", placefs.Destination.shm("/x", 0, 1)),
                  ValueError, "borrow mode takes no destination", "borrow with a destination")
    expect_raises(lambda: placefs.stage(3, "lend"), ValueError, "'copy', 'borrow' or 'read'",
                  "unknown stage mode")
    expect_raises(lambda: placefs.Destination.shm("noslash", 0, 1), ValueError, "/name",
                  "shm name without '/'")
    expect_raises(lambda: placefs.Destination.shm("/" + "x" * 127, 0, 1), ValueError,
                  "longer than", "shm name too long")
    expect_raises(lambda: placefs.Destination.cuda_ipc(b"x" * 63, 0, 1), ValueError, "64",
                  "short CUDA IPC handle")
    # A descriptor that is not on a placefs mount: ENOTTY from the kernel.
    with open(probe_path, "rb") as f:
        expect_oserror(lambda: placefs.ring_info(f), errno.ENOTTY, "ring_info on a plain file")
    done("abi")


def fields_of(fields, s):
    return [k for k in fields if k.startswith(s + ".")]


# ---- offline: env, names, dtypes -----------------------------------------------------

def old_torch():
    """A torch older than placefs._torch.TORCH_MIN is not used: get() says so once
    and gives None (PlacedTensor results); a version at the minimum is used."""
    import types
    import warnings
    from placefs import _torch
    saved_mod, saved_env = sys.modules.get("torch"), os.environ.pop("PLACEFS_NO_TORCH", None)
    saved = (_torch._torch_mod, _torch._torch_tried)
    try:
        for version, used in (("1.8.1+cpu", False), ("1.12.1", False), ("1.13.0a0", True),
                              ("2.11.0+cu130", True)):
            fake = types.ModuleType("torch")
            fake.__version__ = version
            sys.modules["torch"] = fake
            _torch._torch_mod, _torch._torch_tried = None, False
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                got = _torch.get()
            check((got is fake) == used, "torch %s: used %r, expected %r" % (
                version, got is fake, used))
            if not used and version == "1.8.1+cpu":
                check(any("older than 1.13" in str(x.message) for x in w),
                      "torch %s: no warning %r" % (version, [str(x.message) for x in w]))
    finally:
        if saved_mod is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = saved_mod
        if saved_env is not None:
            os.environ["PLACEFS_NO_TORCH"] = saved_env
        _torch._torch_mod, _torch._torch_tried = saved


def offline():
    env = dict(os.environ)
    try:
        os.environ.pop("INSTANTTENSOR_COPY", None)
        check(placefs.copy_mode_from_env() == "copy", "INSTANTTENSOR_COPY unset -> copy")
        os.environ["INSTANTTENSOR_COPY"] = "1"
        check(placefs.copy_mode_from_env() == "copy", "INSTANTTENSOR_COPY=1 -> copy")
        os.environ["INSTANTTENSOR_COPY"] = "0"
        check(placefs.copy_mode_from_env() == "borrow", "INSTANTTENSOR_COPY=0 -> borrow")
        for bad in ("sometimes", "", " 1", "true", "01"):
            os.environ["INSTANTTENSOR_COPY"] = bad
            expect_raises(placefs.copy_mode_from_env, ValueError,
                          "^INSTANTTENSOR_COPY must be 0 or 1, got '%s'$" % re.escape(bad),
                          "INSTANTTENSOR_COPY=%r" % bad)
    finally:
        os.environ.clear()
        os.environ.update(env)
    old_torch()
    # PlacedTensor.numpy() where numpy exists.
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        pt = placefs.PlacedTensor("x", "F32", (2, 2), "gpu", "cpu",
                                  struct.pack("<4f", 1, 2, 3, 4))
        check(pt.numpy().tolist() == [[1, 2], [3, 4]], "PlacedTensor.numpy F32")
        pt = placefs.PlacedTensor("x", "BF16", (2,), "gpu", "cpu", b"\x80\x3f\x00\x40")
        check(pt.numpy().tolist() == [0x80, 0x3F, 0, 0x40], "PlacedTensor.numpy BF16 raw")
    expect_raises(lambda: placefs.Mount("/proc"), FileNotFoundError, "not a placefs mount",
                  "Mount of a directory that is not a mount")
    expect_raises(lambda: placefs.load_state_dict("/proc", device="cpu"), FileNotFoundError,
                  "not a placefs mount", "load_state_dict of a directory that is not a mount")
    expect_raises(lambda: placefs._parse_device("gpu0"), ValueError, "cuda:N",
                  "bad device")
    plan_file_names()
    plan_columns()
    plan_chunks()
    plan_lookup()
    plan_head()
    default_device()
    torch_isolated()
    done("offline")


def default_device():
    """placefs-load's default device is load_state_dict's (issue #15): the command line
    hands None to the loader, which picks the mount's own device, even where torch sees
    a GPU (it used to pick cuda:0 there by itself)."""
    import inspect
    import placefs.cli as cli
    from placefs import _torch
    defaults = {f.__name__: inspect.signature(f).parameters["device"].default
                for f in (placefs.load_state_dict, placefs.load, placefs.iter_weights)}
    check(set(defaults.values()) == {None}, "default devices of the API: %r" % defaults)

    class FakeCuda:
        @staticmethod
        def is_available():
            return True

        @staticmethod
        def current_device():
            return 0

        @staticmethod
        def device_count():
            return 1

    class FakeTorch:
        cuda = FakeCuda()
        __version__ = "0.0-fake"

    seen, cpus = [], []

    class Recorder:
        def __init__(self, mountpoint, device, *args, **kw):
            seen.append(device)
            cpus.append(kw.get("cpu", "absent"))
            raise RuntimeError("recorded")

    real_get, real_loader, real_err = _torch.get, cli._Loader, sys.stderr
    try:
        _torch.get = lambda: FakeTorch()
        cli._Loader = Recorder
        sys.stderr = io.StringIO()
        for argv in (["/nowhere"], ["/nowhere", "--device", "auto"],
                     ["/nowhere", "--cpu", "read"], ["/nowhere", "--cpu", "map"]):
            rc = cli.main(argv)
            check(rc == 1, "placefs-load with a recording loader returned %r" % rc)
    finally:
        _torch.get, cli._Loader, sys.stderr = real_get, real_loader, real_err
    # --cpu reaches the loader; without it the loader's own default (PLACEFS_CPU, auto).
    check(cpus == [None, None, "read", "map"], "placefs-load passed cpu= %r" % cpus)
    seen = seen[:2]
    check(len(seen) == 2 and seen[0] is None,
          "placefs-load passed device %r to the loader, load_state_dict passes None" % seen[:1])
    check([placefs._parse_device(d) for d in seen] == [("auto", None)] * 2,
          "placefs-load's default device resolves to %r" % [placefs._parse_device(d)
                                                             for d in seen])


def torch_isolated():
    """torch internals and the CUDA runtime live in placefs/_torch.py alone (issue #15):
    no other module of the installed package imports torch, reaches a private torch
    attribute or names libcudart, and none but _ioctl.py (libc's ioctl, which releases the
    GIL for a batch request) and _mapsrc.py (libc's madvise, which populates mappings
    on several threads at once) imports ctypes; _torch.py's docstring names the versions
    it was checked on."""
    import ast
    pkg = os.path.dirname(os.path.abspath(placefs.__file__))
    private = {"_share_cuda_", "_new_shared_cuda", "untyped_storage", "_C", "_utils"}
    names = sorted(f for f in os.listdir(pkg) if f.endswith(".py"))
    check("_torch.py" in names and len(names) > 5, "package files %r" % names)
    for f in names:
        if f == "_torch.py":
            continue
        tree = ast.parse(open(os.path.join(pkg, f)).read(), f)
        # Docstrings (and other bare strings) may name anything.
        docs = {id(n.value) for n in ast.walk(tree)
                if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        for node in ast.walk(tree):
            where = "%s:%d" % (f, getattr(node, "lineno", 0))
            banned = ("torch",) if f in ("_ioctl.py", "_mapsrc.py") else ("ctypes", "torch")
            if isinstance(node, ast.Import):
                for a in node.names:
                    check(a.name.split(".")[0] not in banned,
                          "%s imports %s outside _torch.py" % (where, a.name))
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                check((node.module or "").split(".")[0] not in banned,
                      "%s imports from %s outside _torch.py" % (where, node.module))
            elif isinstance(node, ast.Attribute):
                check(node.attr not in private,
                      "%s uses the torch internal .%s outside _torch.py" % (where, node.attr))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    id(node) not in docs:
                check("libcudart" not in node.value and "cudaIpc" not in node.value,
                      "%s names the CUDA runtime outside _torch.py" % where)
    doc = ast.get_docstring(ast.parse(open(os.path.join(pkg, "_torch.py")).read()))
    check(re.search(r"Checked on: torch \d+\.\d+ with CUDA \d+\.\d+", doc or "") is not None,
          "_torch.py does not name the torch and CUDA versions it was checked on")


def write_plan(d, tensors):
    os.makedirs(os.path.join(d, ".placefs"), exist_ok=True)
    with open(os.path.join(d, ".placefs", "plan.json"), "w") as f:
        json.dump({"source": "hand-written", "buffer_size": 0, "ring_bytes": 4096,
                   "tensors": tensors}, f)


def write_columns(d, c):
    os.makedirs(os.path.join(d, ".placefs"), exist_ok=True)
    with open(os.path.join(d, ".placefs", "columns.json"), "w") as f:
        json.dump(c, f)


def plan_columns():
    """.placefs/columns.json is read before plan.json, checked as a whole."""
    with tempfile.TemporaryDirectory() as d:
        good = {"source": "cols", "buffer_size": 4, "ring_bytes": 4096, "version": 1,
                "count": 3, "files": ["s1", "s0"], "dtypes": ["U8", "BF16"],
                "name": ["a/b", "w", "x"], "filename": {"0": "a%2Fb"}, "file": [1, 0, 1],
                "dtype": [0, 1, 0], "shape": [[4], [2, 1], []], "nbytes": [4, 4, 1],
                "offset": [8, 12, 16], "placement": "gcg"}
        write_plan(d, [])  # an empty plan.json beside it: columns.json wins
        write_columns(d, good)
        p = placefs.plan.Plan(d)
        check([tuple(t) for t in p.tensors] == [
            ("a/b", "a%2Fb", os.path.join(d, "a%2Fb"), "s0", "U8", (4,), 4, 8, "gpu", 0),
            ("w", "w", os.path.join(d, "w"), "s1", "BF16", (2, 1), 4, 12, "cpu", 1),
            ("x", "x", os.path.join(d, "x"), "s0", "U8", (), 1, 16, "gpu", 2)],
            "columns.json: %r" % (p.tensors,))
        check((p.source, p.buffer_size, p.ring_bytes) == ("cols", 4, 4096),
              "columns.json header: %r" % ((p.source, p.buffer_size, p.ring_bytes),))
        check(p.by_name["w"].index == 1 and p.by_name["w"].placement == "cpu",
              "columns.json by_name: %r" % (p.by_name["w"],))
        check(p.data["tensors"] == [], "Plan.data is plan.json's object")
        bad = [({"count": 4}, "do not all have"), ({"placement": "gxg"}, "neither g"),
               ({"placement": "gc"}, "do not all have"), ({"nbytes": [4, -1, 1]}, ">= 0"),
               ({"nbytes": [4, 4.0, 1]}, ">= 0"), ({"file": [2, 0, 1]}, "past its table"),
               ({"dtype": [0, 0, 5]}, "past its table"), ({"shape": [[4], [2, -1], []]}, ">= 0"),
               ({"shape": [[4], 2, []]}, "list of integers"), ({"name": ["a/b", 3, "x"]},
                                                               "must be a string"),
               ({"filename": {"0": "../x"}}, "not one name"), ({"filename": {"7": "q"}},
                                                                "not an entry's index"),
               ({"name": ["a/b", "w", "w"]}, "listed twice"), ({"version": 2}, "reads 1"),
               ({"files": [1, "s0"]}, "hold strings")]
        for change, pattern in bad:
            c = dict(good)
            c.update(change)
            write_columns(d, c)
            expect_raises(lambda: placefs.plan.Plan(d), ValueError, pattern,
                          "columns.json with %r" % (change,))
        with open(os.path.join(d, ".placefs", "columns.json"), "w") as f:
            f.write("{\"count\": ")
        expect_raises(lambda: placefs.plan.Plan(d), ValueError, "not valid JSON",
                      "truncated columns.json")


def write_chunks(d, lines):
    os.makedirs(os.path.join(d, ".placefs"), exist_ok=True)
    with open(os.path.join(d, ".placefs", "columns.jsonl"), "w") as f:
        for x in lines:
            f.write((x if isinstance(x, str) else json.dumps(x)) + "\n")


def plan_chunks():
    """.placefs/columns.jsonl: the plan chunk by chunk, each parsed when reached and
    checked as columns.json is; what is not the daemon's is a ValueError naming
    the chunk, raised when the iteration gets there."""
    with tempfile.TemporaryDirectory() as d:
        check(placefs.plan.column_chunks(d) is None, "column_chunks without the file")
        c0 = {"first": 0, "count": 2, "files": ["s1", "s0"], "dtypes": ["U8", "BF16"],
              "name": ["a/b", "w"], "filename": {"0": "a%2Fb"}, "file": [1, 0],
              "dtype": [0, 1], "shape": [[4], [2, 1]], "nbytes": [4, 4], "offset": [8, 12],
              "placement": "gc"}
        c1 = {"first": 2, "count": 1, "files": ["s0"], "dtypes": ["U8"], "name": ["x/y"],
              "filename": {"0": "x%2Fy"}, "file": [0], "dtype": [0], "shape": [[]],
              "nbytes": [1], "offset": [16], "placement": "g"}
        head = {"version": 1, "count": 3, "chunk": 2, "chunks": 2}
        write_chunks(d, [head, c0, c1])
        count, it = placefs.plan.column_chunks(d)
        got = [[tuple(t) for t in ts] for ts in it]
        check(count == 3 and got == [
            [("a/b", "a%2Fb", os.path.join(d, "a%2Fb"), "s0", "U8", (4,), 4, 8, "gpu", 0),
             ("w", "w", os.path.join(d, "w"), "s1", "BF16", (2, 1), 4, 12, "cpu", 1)],
            [("x/y", "x%2Fy", os.path.join(d, "x%2Fy"), "s0", "U8", (), 1, 16, "gpu", 2)]],
            "columns.jsonl: %r %r" % (count, got))
        # The header is checked at once; each chunk when the iteration reaches it.
        for h, pattern in (("{", "not a columns.jsonl header"), ("[]", "header"),
                           (dict(head, version=2), "reads 1"),
                           (dict(head, count=-1), "integers >= 0")):
            write_chunks(d, [h, c0, c1])
            expect_raises(lambda: placefs.plan.column_chunks(d), ValueError, pattern,
                          "columns.jsonl header %r" % (h,))
        bad = [([head, c0, "{\"first\": 2"], "chunk at entry 2 is not JSON"),
               ([head, c0, "[1]"], "chunk at entry 2 is not an object"),
               ([head, c0, dict(c1, first=3)], "\"first\" is 3"),
               ([head, c1, c0], "\"first\" is 2"),
               ([head, c0, dict(c1, placement="q")], "neither g"),
               ([head, c0, dict(c1, filename={"1": "z"})], "not an entry's index"),
               ([dict(head, count=2), c0, c1], "more entries than the header's 2"),
               ([dict(head, count=4), c0, c1], "3 entries in 2 chunks, the header says 4"),
               ([head, c0, c1, c1], "3 entries in 2 chunks"),
               ([dict(head, chunks=3), c0, c1], "not JSON"),
               ([head, c0, dict(c1, count=0, name=[], file=[], dtype=[], shape=[],
                                nbytes=[], offset=[], placement="", filename={})],
                "chunk at entry 2 is empty")]
        for lines, pattern in bad:
            write_chunks(d, lines)
            count, it = placefs.plan.column_chunks(d)
            expect_raises(lambda: [t for ts in it for t in ts], ValueError, pattern,
                          "columns.jsonl %r" % (lines[1:],))
        # The iterator's rest of the plan: the chunks after its head, checked against the
        # head; what is not the daemon's is OSError(EPROTO) naming the file.
        write_plan(d, [])
        write_chunks(d, [head, c0, c1])
        full = [t for ts in placefs.plan.column_chunks(d)[1] for t in ts]
        m = placefs.Mount(d)
        got = list(placefs.stream._PlanItems(m, full[:1], False))
        check(got == full, "_PlanItems over columns.jsonl: %r" % (got,))
        check(m._plan is None, "_PlanItems read the whole plan beside columns.jsonl")
        for lines, head_items, pattern in (
                ([head, c0, "{\"first\": 2"], full[:1], "chunk at entry 2 is not JSON"),
                ([head, c0, c1], full[1:2], "first 1 entries are not the plan's"),
                ([head, c0, c1], full, "first 3 entries are not the plan's")):
            write_chunks(d, lines)
            items = placefs.stream._PlanItems(placefs.Mount(d), head_items, False)
            expect_oserror(lambda: list(items), errno.EPROTO, "_PlanItems: %s" % pattern)
            try:
                list(placefs.stream._PlanItems(placefs.Mount(d), head_items, False))
            except OSError as e:
                check(pattern in str(e), "_PlanItems: %r does not say %r" % (str(e), pattern))

def plan_head():
    """plan.head on every prefix of a hand-written plan.json: the entries that lie whole
    in the bytes read, in order, complete only when the list closed; None for what is not
    a plan; never an exception."""
    key = placefs.plan.FILE_NAME_KEY
    with tempfile.TemporaryDirectory() as d:
        ents = [{"name": n, key: f, "file": "s.safetensors", "dtype": "U8", "shape": [k],
                 "nbytes": k, "offset": 8 + k, "placement": "gpu" if k < 3 else "cpu"}
                for n, f, k in (("a", "a", 1), ("b/\u00e9", "b%2F\u00e9", 2), ("c", "c", 5))]
        write_plan(d, ents)
        path = os.path.join(d, ".placefs", "plan.json")
        with open(path, "rb") as f:
            data = f.read()
        full = [placefs.TensorInfo(d, i, e) for i, e in enumerate(ents)]
        check(placefs.plan.head(d) == (full, True), "head of a whole plan.json: %r"
              % (placefs.plan.head(d),))
        bad = []
        for n in range(1, len(data) + 1):
            try:
                h = placefs.plan.head(d, n)
            except Exception as e:  # noqa: BLE001 - the property under test
                bad.append("%d bytes: %r" % (n, e))
                continue
            if h is None:
                continue
            got, complete = h
            if got != full[:len(got)] or complete != (got == full and n >= data.rindex(b"]") + 1):
                bad.append("%d bytes: %r, complete=%r" % (n, got, complete))
        check(not bad, "plan.head on prefixes: %s" % "; ".join(bad[:3]))
        # Where the file is whole, an entry that does not parse or is malformed is None.
        for text in (b"", b"[]", b'{"tensors": {}}', b'{"tensors": [1]}', b'{"tensors": [}',
                     b'{"x": 1 "tensors": []}', b"\xff\xfe", b'{"tensors": [{"name": "a"}]}'):
            with open(path, "wb") as f:
                f.write(text)
            try:
                h = placefs.plan.head(d)
            except Exception as e:  # noqa: BLE001 - the property under test
                h = e
            check(h is None, "plan.head of %r: %r, not None" % (text, h))
        with open(path, "wb") as f:
            f.write(b'{"source": "x", "tensors": []}')
        check(placefs.plan.head(d) == ([], True), "plan.head of an empty plan")


def plan_lookup():
    """plan.lookup: a tensor from its file's attributes, or None whenever they cannot say.

    Files of a temporary directory carry hand-set user.placefs.* attributes (the
    daemon's are checked against the plan in check_state_dict); skipped where the
    file system has no user attributes.
    """
    good = {"name": b"w.0", "source": b"s.safetensors", "dtype": b"BF16", "shape": b"[2, 3]",
            "nbytes": b"12", "offset": b"80", "placement": b"gpu", "index": b"4"}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "w.0")

        def put(attrs):
            if os.path.exists(path):
                os.unlink(path)  # attributes outlive a truncation
            with open(path, "wb"):
                pass
            for k, v in attrs.items():
                os.setxattr(path, "user.placefs." + k, v)
        try:
            put(good)
        except OSError as e:
            if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
                print("plan_lookup: no user attributes on %s (%s); skipped" % (d, e))
                return
            raise
        dd = os.path.join(d, "")
        t = placefs.plan.lookup(dd, "w.0")
        check(tuple(t or ()) == ("w.0", "w.0", path, "s.safetensors", "BF16", (2, 3), 12, 80,
                                 "gpu", 4), "lookup of good attributes: %r" % (t,))
        check(isinstance(t, placefs.TensorInfo), "lookup gives a TensorInfo")
        # Each of these must leave the answer to the plan.
        for change in ({"name": b"w.1"}, {"shape": b"[2, -3]"}, {"shape": b"{}"},
                       {"shape": b"[2.0]"}, {"nbytes": b"-1"}, {"nbytes": b"1_2"},
                       {"offset": b" 8"}, {"index": b"x"}, {"placement": b"disk"},
                       {"dtype": b"\xff"}):
            a = dict(good)
            a.update(change)
            put(a)
            check(placefs.plan.lookup(dd, "w.0") is None, "lookup with %r: not None" % (change,))
        put({k: v for k, v in good.items() if k != "index"})
        check(placefs.plan.lookup(dd, "w.0") is None, "lookup without user.placefs.index")
        # Names the daemon encodes, and names with no file, are never looked up.
        for name in ("missing", ".w", "a/b", "100%", "tab\tname", "\u00e9", ""):
            check(placefs.plan.lookup(dd, name) is None, "lookup of %r: not None" % (name,))


def plan_file_names():
    """Tensor files are found under the name plan.json gives, not by encoding the name.

    A directory with a hand-written .placefs/plan.json of cpu-placed tensors
    is enough: loading them is plain reads, no daemon is involved.
    """
    key = placefs.plan.FILE_NAME_KEY
    with tempfile.TemporaryDirectory() as d:
        data = {"f-0": b"\x01\x02\x03\x04", "f-1": b"\x05\x06", "%2Eodd": b"\x07\x08"}
        for fn, b in data.items():
            with open(os.path.join(d, fn), "wb") as f:
                f.write(b)

        def entry(name, nbytes, fname=None):
            e = {"name": name, "file": "shard.safetensors", "dtype": "U8", "shape": [nbytes],
                 "nbytes": nbytes, "offset": 8, "placement": "cpu"}
            if fname is not None:
                e[key] = fname
            return e
        # Names whose encoding is not the file: the loader must use the plan's.
        write_plan(d, [entry("a/b", 4, "f-0"), entry("zz", 2, "f-1"), entry(".odd", 2, "%2Eodd")])
        m = placefs.Mount(d)
        check([t.filename for t in m.tensors] == ["f-0", "f-1", "%2Eodd"],
              "file names from plan.json: %r" % [t.filename for t in m.tensors])
        check([t.source for t in m.tensors] == ["shard.safetensors"] * 3,
              "the source shard is still \"file\": %r" % [t.source for t in m.tensors])
        check(m.path("a/b") == os.path.join(d, "f-0"), "Mount.path: %r" % m.path("a/b"))
        for mode in ("copy", "borrow"):
            try:
                sd = placefs.load_state_dict(d, device="cpu", mode=mode)
            except OSError as e:
                check(False, "hand-written plan, mode %s: %s" % (mode, e))
                continue
            check(list(sd) == ["a/b", "zz", ".odd"], "hand-written plan: keys %r" % list(sd))
            for name, fn in (("a/b", "f-0"), ("zz", "f-1"), (".odd", "%2Eodd")):
                check(same_bytes(sd[name], data[fn]), "hand-written plan, mode %s: %r is not "
                      "the bytes of %s" % (mode, name, fn))
        # A plan without file names is refused: the loader never encodes names.
        write_plan(d, [entry("x", 4)])
        expect_raises(lambda: placefs.Mount(d).tensors, ValueError, "has no 'filename' member",
                      "plan.json without file names")
        # A file name that is not one name in the mount's directory is refused.
        for bad in ("../f-0", "", ".", "..", "a/b", 7):
            write_plan(d, [entry("x", 4, bad)])
            expect_raises(lambda: placefs.Mount(d).tensors, ValueError, "not one name",
                          "plan.json file name %r" % (bad,))


# ---- live mounts ---------------------------------------------------------------------

def check_no_leases(mnt, what):
    """The daemon's stats (when it reports staging) show no lease left behind."""
    with open(os.path.join(mnt, ".placefs", "stats")) as f:
        st = json.load(f).get("staging")
    if isinstance(st, dict) and "leases" in st:
        check(st["leases"] == 0, "%s: %r leases still held after the loads" % (what,
                                                                               st["leases"]))


def make_shm(size):
    name = "/placefs-test-%d-%d" % (os.getpid(), time.monotonic_ns())
    fd = os.open("/dev/shm" + name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, size)
    mm = mmap.mmap(fd, size)
    os.close(fd)
    return name, mm


def ring_map(ri):
    fd = os.open("/dev/shm" + ri.shm_name, os.O_RDONLY)
    try:
        return mmap.mmap(fd, ri.ring_bytes, mmap.MAP_SHARED, mmap.PROT_READ)
    finally:
        os.close(fd)


def check_host_ring(m, what):
    ri = m.ring_info()
    check(ri.backend == placefs.BACKEND_HOST, "%s: backend %s, expected host" % (what, ri))
    check(ri.device == -1, "%s: host ring device %d" % (what, ri.device))
    check(ri.handle_kind == placefs.HANDLE_HOST_SHM, "%s: handle kind %d" % (what,
                                                                           ri.handle_kind))
    check(ri.handle.endswith(b"\0") and ri.handle.count(b"\0") == 1,
          "%s: shm handle %r is not one NUL-terminated name" % (what, ri.handle))
    name = ri.shm_name
    check(name.startswith("/") and os.path.exists("/dev/shm" + name),
          "%s: ring shm %r does not exist" % (what, name))
    check(ri.alignment > 0 and ri.alignment & (ri.alignment - 1) == 0,
          "%s: alignment %d is not a power of two" % (what, ri.alignment))
    check(ri.ring_bytes >= (m.ring_bytes or 0), "%s: ring_info %d bytes < plan ring_bytes %r"
          % (what, ri.ring_bytes, m.ring_bytes))
    return ri


def seed(mnt, source, limit):
    limit = int(limit)
    ref = reference(source)
    m = placefs.Mount(mnt)
    check(m.buffer_size == limit, "plan buffer_size %r" % m.buffer_size)
    byname = {t.name: t for t in m.tensors}
    small, large = byname.get("small"), byname.get("large")
    if not check(small is not None and large is not None, "seed tensors missing"):
        done("seed")
    check(small.placement == "gpu" and small.nbytes == 1 << 20, "small: %r" % (small,))
    early_declines(mnt, (0, 1))  # a host ring: not for a GPU
    check(large.placement == "cpu" and large.nbytes == 9 << 20, "large: %r" % (large,))
    ri = check_host_ring(m, "seed")
    ring = ring_map(ri)
    # A fresh Mount borrows a tensor without reading the plan (#13: time to the first
    # tensor); what is not on the mount is a KeyError, after the plan says so.
    with placefs.Mount(mnt) as q:
        with q.borrow("small") as b:
            check(b.tobytes() == ref["small"][2], "Mount.borrow before the plan: bytes differ")
        check(q._plan is None, "Mount.borrow('small') read the whole plan")
        expect_raises(lambda: q.tensor("no-such-tensor"), KeyError, "not on the mount",
                      "Mount.tensor of a missing name")
        check(q._plan is not None and q.tensor("small") == small,
              "after the plan was read, tensor('small') is %r" % (q.tensor("small"),))

    # Low level, copy mode into a shm of the test, at an offset.
    name, mm = make_shm(3 << 20)
    try:
        fd = m.open("small")
        try:
            r = placefs.stage(fd, "copy", placefs.Destination.shm(name, 4096, 3 << 20))
            check(r.nbytes == small.nbytes and r.lease == 0, "copy stage result %r" % r)
            check(mm[4096:4096 + small.nbytes] == ref["small"][2], "copy: bytes in the "
                  "destination differ from the checkpoint")
            check(mm[:4096] == bytes(4096) and mm[4096 + small.nbytes:] ==
                  bytes((3 << 20) - 4096 - small.nbytes), "copy wrote outside its range")
            check(r.total_ns > 0 and r.total_ns >= r.read_ns, "copy timings %r" % r)
            # Destination bounds: offset + nbytes > dest_size.
            expect_oserror(lambda: placefs.stage(fd, "copy", placefs.Destination.shm(
                name, (3 << 20) - small.nbytes + 1, 3 << 20)), errno.EINVAL,
                "copy past the end of the destination")
            # dest_size larger than the shm object.
            expect_oserror(lambda: placefs.stage(fd, "copy", placefs.Destination.shm(
                name, 0, 4 << 20)), errno.EINVAL, "dest_size larger than the shm object")
            # No such shm object.
            expect_oserror(lambda: placefs.stage(fd, "copy", placefs.Destination.shm(
                "/placefs-test-missing-%d" % os.getpid(), 0, 1 << 20)), errno.ENOENT,
                "copy into a missing shm object")
            # Somebody else's shm object (root can make one).
            if os.geteuid() == 0:
                other, omm = make_shm(3 << 20)
                try:
                    os.chown("/dev/shm" + other, 65534, 65534)
                    expect_oserror(lambda: placefs.stage(fd, "copy", placefs.Destination.shm(
                        other, 0, 3 << 20)), errno.EACCES, "copy into another user's shm")
                    check(omm[:small.nbytes] == bytes(small.nbytes),
                          "the daemon wrote into another user's shm object")
                finally:
                    omm.close()
                    os.unlink("/dev/shm" + other)
            # A CUDA IPC destination on the host backend.
            expect_oserror(lambda: placefs.stage(fd, "copy", placefs.Destination.cuda_ipc(
                bytes(64), 0, 1 << 20)), errno.EOPNOTSUPP, "CUDA IPC destination on host")
            # Borrow: the leased span holds the tensor until released.
            r = placefs.stage(fd, "borrow")
            check(r.lease != 0 and r.nbytes == small.nbytes, "borrow result %r" % r)
            check(r.ring_offset % ri.alignment == 0 and r.ring_offset + r.nbytes <=
                  ri.ring_bytes, "borrow span %r outside the ring" % r)
            check(ring[r.ring_offset:r.ring_offset + r.nbytes] == ref["small"][2],
                  "borrow: ring bytes differ from the checkpoint")
            placefs.release(fd, r.lease)
            expect_oserror(lambda: placefs.release(fd, r.lease), errno.ENOENT,
                           "second release of a lease")
            expect_oserror(lambda: placefs.release(fd, 0xdeadbeef), errno.ENOENT,
                           "release of an unknown lease")
            # A lease belongs to its descriptor.
            r = placefs.stage(fd, "borrow")
            fd2 = m.open("small")
            try:
                expect_oserror(lambda: placefs.release(fd2, r.lease), errno.ENOENT,
                               "release through another descriptor")
            finally:
                os.close(fd2)
            placefs.release(fd, r.lease)
            # Malformed requests: version, size field, reserved, flags, mode.
            for off, val, what in ((0, 2, "version 2"), (4, 319, "size 319"),
                                   (12, 1, "flags 1"), (8, 7, "mode 7"),
                                   (240, 1, "reserved[0] 1")):
                buf = bytearray(placefs.STAGE_SIZE)
                struct.pack_into("=IIII", buf, 0, placefs.IOC_VERSION, placefs.STAGE_SIZE,
                                 placefs.STAGE_BORROW, 0)
                struct.pack_into("=I", buf, off, val)
                expect_oserror(lambda: fcntl.ioctl(fd, placefs.IOC_STAGE, buf, True),
                               errno.EINVAL, "stage with %s" % what)
            buf = bytearray(placefs.RING_INFO_SIZE)
            struct.pack_into("=II", buf, 0, 7, placefs.RING_INFO_SIZE)
            expect_oserror(lambda: fcntl.ioctl(fd, placefs.IOC_RING_INFO, buf, True),
                           errno.EINVAL, "ring_info with version 7")
            # An unknown command number with our magic.
            expect_oserror(lambda: fcntl.ioctl(fd, placefs._iowr(0xB9, 0x09, 64),
                                               bytearray(64), True),
                           errno.ENOTTY, "unknown placefs command")
        finally:
            os.close(fd)
        # The cpu-placed tensor: the daemon refuses to stage it, the module never asks.
        fd = m.open("large")
        try:
            expect_oserror(lambda: placefs.stage(fd, "borrow"), errno.EFBIG,
                           "borrow of the cpu-placed 9 MiB tensor")
            expect_oserror(lambda: placefs.stage(fd, "copy", placefs.Destination.shm(
                name, 0, 3 << 20)), errno.EFBIG, "copy of the cpu-placed 9 MiB tensor")
        finally:
            os.close(fd)
        expect_raises(lambda: m.borrow("large"), ValueError, "'large' is placed on the cpu",
                      "Mount.borrow of a cpu-placed tensor")
        # ioctls on what is not a tensor file.
        with open(os.path.join(mnt, ".placefs", "plan.json"), "rb") as f:
            expect_oserror(lambda: placefs.ring_info(f), errno.ENOTTY, "ring_info on plan.json")
    finally:
        mm.close()
        os.unlink("/dev/shm" + name)

    # Mount.borrow: a view valid until release.
    with m.borrow("small") as b:
        check(bytes(b.view) == ref["small"][2] and b.tobytes() == ref["small"][2],
              "Mount.borrow view differs from the checkpoint")
    check(b.view is None and b.released, "Borrowed not released after the with block")
    expect_raises(b.tobytes, RuntimeError, "released", "reading a released lease")

    # load_state_dict in both modes, explicitly and through INSTANTTENSOR_COPY.
    # With torch, a copy-mode load into host memory asks for the plan by
    # ranges into one shm object before it reads the plan (_Early); the
    # default device of a host mount too; PLACEFS_EARLY=0 the usual way.
    has_torch = placefs._torch.get() is not None
    for mode, device, env in (("copy", "cpu", None), ("borrow", "cpu", None),
                              ("copy", None, None), ("copy", "cpu", "0")):
        if env is not None:
            os.environ["PLACEFS_EARLY"] = env
        sd, rep = placefs.load(mnt, device=device, mode=mode)
        os.environ.pop("PLACEFS_EARLY", None)
        what = "seed load mode=%s device=%s PLACEFS_EARLY=%s" % (mode, device, env)
        check(rep.mode == mode, "report mode %s" % rep.mode)
        check(rep.count == {"gpu": 1, "cpu": 1} and rep.bytes == {"gpu": 1 << 20,
                                                                 "cpu": 9 << 20},
              "report counts %r %r" % (rep.count, rep.bytes))
        early = has_torch and mode == "copy" and env is None
        check(("plan ranges" in (rep.gpu_path or "")) == early,
              "%s: gpu path %r" % (what, rep.gpu_path))
        check_state_dict(sd, mnt, ref, limit, what)
    # cpu="map": mapped with torch; without torch read all the same, never an error.
    sd, rep = placefs.load(mnt, device="cpu", cpu="map")
    want_path = "mapped from the source shards (private, populated)" \
        if placefs._torch.get() is not None else \
        "read by the daemon into shared memory (without torch the results are copies)"
    check(rep.cpu_path == want_path, "seed cpu=map: %r, expected %r" % (rep.cpu_path,
                                                                       want_path))
    check_state_dict(sd, mnt, ref, limit, "seed load cpu=map")
    for env, want in ((None, "copy"), ("1", "copy"), ("0", "borrow")):
        if env is None:
            os.environ.pop("INSTANTTENSOR_COPY", None)
        else:
            os.environ["INSTANTTENSOR_COPY"] = env
        sd, rep = placefs.load(mnt, device="cpu")
        check(rep.mode == want, "INSTANTTENSOR_COPY=%r gave mode %s" % (env, rep.mode))
        check_state_dict(sd, mnt, ref, limit, "seed INSTANTTENSOR_COPY=%r" % env)
        # The default device (the mount's own) of a host mount is host memory.
        sd = placefs.load_state_dict(mnt)
        check_state_dict(sd, mnt, ref, limit, "seed default device, INSTANTTENSOR_COPY=%r"
                         % env)
    os.environ["INSTANTTENSOR_COPY"] = "yes"
    expect_raises(lambda: placefs.load_state_dict(mnt, device="cpu"), ValueError,
                  "^INSTANTTENSOR_COPY must be 0 or 1, got 'yes'$", "load with a bad "
                  "INSTANTTENSOR_COPY")
    os.environ.pop("INSTANTTENSOR_COPY")
    # Copy mode must not leave shm objects of its own behind.
    left = [x for x in os.listdir("/dev/shm") if x.startswith("placefs-py-%d-" % os.getpid())]
    check(not left, "copy mode left shm objects behind: %r" % left)
    check_no_leases(mnt, "seed")
    ring.close()
    done("seed")


def wrap(mnt, source):
    ref = reference(source)
    m = placefs.Mount(mnt)
    ri = check_host_ring(m, "wrap")
    check(ri.ring_bytes == 8 << 20, "ring of %d bytes, expected 8 MiB" % ri.ring_bytes)
    names = [t.name for t in m.tensors]
    check(len(names) == 5 and all(t.nbytes == 4 << 20 and t.placement == "gpu"
                                  for t in m.tensors), "wrap plan: %r" % m.tensors)
    # Twice round: 10 tensors of 4 MiB through 8 MiB, each checked before
    # release, first one at a time, then double-buffered (the previous lease
    # is held while the next tensor is staged, so the ring must wrap).
    for hold in (False, True):
        offsets, prev = [], None
        for name in names * 2:
            b = m.borrow(name, timeout_ns=10 * 1000 * 1000 * 1000)
            offsets.append(b.ring_offset)
            check(b.ring_offset + b.nbytes <= ri.ring_bytes, "%s: span %d+%d outside the "
                  "ring" % (name, b.ring_offset, b.nbytes))
            check(bytes(b.view) == ref[name][2], "%s: borrowed bytes differ (ring offset %d)"
                  % (name, b.ring_offset))
            if prev is not None:
                check(bytes(prev.view) == ref[prev.tensor.name][2], "%s: held lease changed "
                      "while %s was staged" % (prev.tensor.name, name))
                check(prev.ring_offset != b.ring_offset, "two live leases at ring offset %d"
                      % b.ring_offset)
                prev.release()
            prev = b
            if not hold:
                b.release()
                prev = None
        if prev is not None:
            prev.release()
        if hold:
            check(any(y < x for x, y in zip(offsets, offsets[1:])),
                  "the ring never wrapped: offsets %r" % offsets)
    # Closing the descriptor ends its leases: the ring is free again.
    fd = m.open(names[3])
    r1 = placefs.stage(fd, "borrow")
    fd2 = m.open(names[4])
    r2 = placefs.stage(fd2, "borrow")
    os.close(fd)
    os.close(fd2)
    with m.borrow(names[0], timeout_ns=5 * 1000 * 1000 * 1000) as b:
        check(bytes(b.view) == ref[names[0]][2], "stage after leases ended by close")
    check(r1.lease != r2.lease, "two leases with the same id")
    # The loaders, with several tensors in flight.
    for mode in ("borrow", "copy"):
        for workers in (1, 4):
            sd = placefs.load_state_dict(mnt, device="cpu", mode=mode, workers=workers)
            check_state_dict(sd, mnt, ref, 8 << 20, "wrap load mode=%s workers=%d" % (
                mode, workers))
    check_no_leases(mnt, "wrap")
    m.close()
    done("wrap")


def wrapfull(mnt, source):
    """A full ring: a stage times out, and fits once a lease is released.

    Run last on its mount: it also covers the daemon's promise that
    prefetched spans never keep a foreground stage waiting (lib/staging/stage.h).
    """
    ref = reference(source)
    m = placefs.Mount(mnt)
    names = [t.name for t in m.tensors]
    # Two leases fill the ring; a third stage waits and times out, then fits.
    b1 = m.borrow(names[0])
    b2 = m.borrow(names[1])
    t0 = time.monotonic()
    expect_oserror(lambda: m.borrow(names[2], timeout_ns=200 * 1000 * 1000), errno.ETIMEDOUT,
                   "third 4 MiB lease in a full 8 MiB ring")
    check(time.monotonic() - t0 >= 0.15, "the timed-out stage did not wait")
    check(bytes(b1.view) == ref[names[0]][2] and bytes(b2.view) == ref[names[1]][2],
          "held leases changed while another stage waited")
    b1.release()
    try:
        b3 = m.borrow(names[2], timeout_ns=5 * 1000 * 1000 * 1000)
    except OSError as e:
        check(False, "a 4 MiB stage with 4 MiB of the 8 MiB ring free (one lease released) "
              "failed: %s; lib/staging/stage.h promises that prefetched spans never keep a foreground "
              "stage waiting" % e)
    else:
        with b3:
            check(bytes(b3.view) == ref[names[2]][2], "third tensor after a release")
            check(bytes(b2.view) == ref[names[1]][2], "second lease overwritten by the third")
    b2.release()
    check_no_leases(mnt, "wrapfull")
    m.close()
    done("wrapfull")


def mixed(mnt, source, limit):
    limit = int(limit)
    ref = reference(source)
    m = placefs.Mount(mnt)
    check_host_ring(m, "mixed")
    check({t.placement for t in m.tensors} == {"gpu", "cpu"}, "mixed: expected both "
          "placements")
    for mode in ("copy", "borrow"):
        for workers in (1, 3):
            sd = placefs.load_state_dict(mnt, device="cpu", mode=mode, workers=workers)
            check_state_dict(sd, mnt, ref, limit, "mixed load mode=%s workers=%d" % (
                mode, workers))
    # A Mount object can be passed in and reused (its ring map is shared).
    with placefs.Mount(mnt) as mm:
        sd = placefs.load_state_dict(mm, device="cpu", mode="borrow")
        check_state_dict(sd, mnt, ref, limit, "mixed load through a Mount object")
        sd = placefs.load_state_dict(mm, device="cpu", mode="copy")
        check_state_dict(sd, mnt, ref, limit, "mixed load through a Mount object, copy")
    # iter_weights gives the same tensors (a borrowed view is cloned before the next item).
    for mode in ("copy", "borrow"):
        for cpu in (None, "read"):
            sd = {}
            for name, v in placefs.iter_weights(mnt, device="cpu", mode=mode, cpu=cpu):
                if mode == "borrow":  # a view of the ring, valid until the next item
                    v = placefs.PlacedTensor(v.name, v.dtype, v.shape, v.placement, v.device,
                                             bytes(v.data)) \
                        if isinstance(v, placefs.PlacedTensor) else v.clone()
                sd[name] = v
            check_state_dict(sd, mnt, ref, limit, "mixed iter_weights mode=%s cpu=%s" % (
                mode, cpu))
    check_no_leases(mnt, "mixed")
    done("mixed")


def bigplan(mnt, source):
    """iter_weights on a plan longer than the head of plan.json it starts from.

    The first item comes before the whole plan is read; every item, in plan
    order, holds the checkpoint's bytes, in copy and borrow mode.
    """
    ref = reference(source)
    full = placefs.Mount(mnt).tensors
    h = placefs.plan.head(mnt)
    if check(h is not None, "bigplan: plan.head gave None"):
        check(not h[1] and 0 < len(h[0]) < len(full), "bigplan: the head holds %d of %d "
              "entries, complete=%r" % (len(h[0]), len(full), h[1]))
        check(h[0] == full[:len(h[0])], "bigplan: the head's entries are not the plan's")
        check(placefs.plan.head(mnt, 1 << 30) == (full, True),
              "bigplan: a head of the whole file is not the whole plan")
    names = [t.name for t in full]
    cc = placefs.plan.column_chunks(mnt)
    if check(cc is not None, "bigplan: the mount has no .placefs/columns.jsonl"):
        chunks = list(cc[1])
        check(cc[0] == len(full) and len(chunks) == (len(full) + 1023) // 1024 and
              [t for ts in chunks for t in ts] == full,
              "bigplan: columns.jsonl's %d chunks are not the plan" % len(chunks))
    for mode in ("copy", "borrow"):
        for cpu in (None, "read"):
            what = "bigplan iter_weights mode=%s cpu=%s" % (mode, cpu)
            m = placefs.Mount(mnt)
            it = placefs.iter_weights(m, device="cpu", mode=mode, cpu=cpu)
            got = []
            for name, v in it:
                if not got:
                    check(m._plan is None, "%s: the whole plan was read before the first "
                          "item" % what)
                dt, shape, want = ref[name]
                check(same_bytes(v, want), "%s: %r differs from the checkpoint" % (what, name))
                got.append(name)
            check(got == names, "%s: %d items, not the plan's %d in order" % (
                what, len(got), len(names)))
            # The rest came chunk by chunk from columns.jsonl, never the whole plan.
            check(m._plan is None, "%s: the whole plan was read" % what)
            m.close()
    # The rest of the plan must begin with the head it followed.
    tail = placefs.stream._PlanItems(placefs.Mount(mnt), list(reversed(full[:3])), False)
    expect_raises(lambda: list(tail), OSError, "first 3 entries are not the plan's",
                  "a head that is not the plan's")
    check_no_leases(mnt, "bigplan")
    done("bigplan")


def cpumap(mnt, source, limit, loose):
    """cpu="auto" / "map" / "read" with torch: the mapped results are the source's bytes,
    private (a write stays in this process), and a shard that is not the file the daemon
    validated, or that others may write ("auto"), is read by the daemon instead."""
    import torch
    limit = int(limit)
    ref = reference(source)
    m = placefs.Mount(mnt)
    shards = json.load(open(os.path.join(mnt, ".placefs", "shards.json")))
    files = sorted({t.source for t in m.tensors})
    check(sorted(shards) == files, "shards.json lists %r, the plan's shards are %r"
          % (sorted(shards), files))
    for f, e in shards.items():
        st = os.stat(e["path"])
        check((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) ==
              (e["dev"], e["ino"], e["size"], e["mtime_ns"], e["ctime_ns"]) and
              os.path.samefile(e["path"], os.path.join(source, f)),
              "shards.json %s: %r is not the shard as it is" % (f, e))
    # Mapped: cpu-placed, not empty, at an offset that is a multiple of the
    # element size (safetensors does not align; the others are read).
    ncpu = sum(1 for t in m.tensors if t.placement == "cpu")
    cpu = [t for t in m.tensors if t.placement == "cpu" and t.nbytes and
           t.offset % placefs.mount._DTYPE_BYTES.get(t.dtype, 1) == 0]
    odd = sum(1 for t in m.tensors if t.placement == "cpu" and t.nbytes) - len(cpu)
    loose_n = sum(1 for t in cpu if t.source == loose)
    check(cpu and 0 < loose_n < len(cpu) and odd > 0, "cpumap: needs aligned cpu-placed "
          "tensors in %s and in other shards, and a misaligned one" % loose)

    # "map": every aligned cpu-placed tensor mapped, whoever may write the shard.
    sd, rep = placefs.load(mnt, device="cpu", cpu="map")
    check(rep.cpu_path == "%d mapped from the source shards, %d read by the daemon (%d at "
          "offsets that are not a multiple of their element size)" % (len(cpu), ncpu - len(cpu),
                                                                      odd),
          "cpu=map: %r" % rep.cpu_path)
    check_state_dict(sd, mnt, ref, limit, "cpu=map")
    with open("/proc/self/maps") as f:
        mapped = {ln.split(None, 5)[5].strip() for ln in f if len(ln.split(None, 5)) == 6}
    for f in {t.source for t in cpu}:
        check(shards[f]["path"] in mapped, "cpu=map: %s is not mapped in this process"
              % shards[f]["path"])
    # Private: a write to a result stays in this process.
    t = max(cpu, key=lambda x: x.nbytes)
    v = sd[t.name].reshape(-1).view(torch.uint8)
    v[0] ^= 0xFF
    v[-1] ^= 0x0F
    with open(os.path.join(source, t.source), "rb") as f:
        f.seek(t.offset)
        check(f.read(t.nbytes) == ref[t.name][2], "cpu=map: a write to the result of %r "
              "reached the shard" % t.name)
    check(plain_read(t.path) == ref[t.name][2], "cpu=map: a write to %r shows on the mount"
          % t.name)
    sd2 = placefs.load_state_dict(mnt, device="cpu", cpu="map")
    check(same_bytes(sd2[t.name], ref[t.name][2]), "cpu=map: a later load saw the write")
    del sd, sd2, v

    # shards.json is the daemon's word; the shard's own header must agree. A shards.json
    # naming another file (a daemon that lies) maps nothing, whatever that file's stat.
    from placefs import _mapsrc
    f0 = cpu[0].source
    ts0 = [t for t in cpu if t.source == f0]
    others = [f for f in files if f != f0]
    fake = os.path.join(os.path.dirname(shards[f0]["path"]), "not-a-shard.bin")
    with open(fake, "wb") as fh:
        fh.write(b"\xff" * (max(t.offset + t.nbytes for t in ts0) + 16))
    fifo = fake + ".fifo"
    os.mkfifo(fifo)
    for target, want in ((fake, "is not a safetensors file"),
                         (shards[others[0]]["path"], "its header does not place tensor"),
                         (fifo, "is not a regular file")):
        st = os.stat(target)
        forged = dict(shards)
        forged[f0] = {"path": target, "dev": st.st_dev, "ino": st.st_ino, "size": st.st_size,
                      "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}
        try:
            _mapsrc.open_shard(forged, f0, ts0, False)
            check(False, "a forged shards.json entry (%s) was mapped" % target)
        except _mapsrc.Refused as e:
            check(want in str(e) and target in str(e), "forged entry %s: %s" % (target, e))
    os.unlink(fake)
    os.unlink(fifo)

    # iter_weights maps them the same way, in both modes, and "auto" reads the loose shard.
    for cpu_mode in ("map", "auto", "read"):
        for mode in ("copy", "borrow"):
            got = {n: v.clone() for n, v in placefs.iter_weights(
                mnt, device="cpu", mode=mode, cpu=cpu_mode, window_bytes=1 << 16)}
            check_state_dict(got, mnt, ref, limit, "iter_weights cpu=%s mode=%s" % (cpu_mode,
                                                                                   mode))
    expect_raises(lambda: list(placefs.iter_weights(mnt, device="cpu", cpu="mapped")),
                  ValueError, "^cpu must be 'auto', 'map' or 'read', got 'mapped'$",
                  "iter_weights cpu='mapped'")

    # "auto": the shard others may write is read by the daemon, the rest mapped.
    sd, rep = placefs.load(mnt, device="cpu")
    want = "%d mapped from the source shards, %d read by the daemon (" % (
        len(cpu) - loose_n, ncpu - len(cpu) + loose_n)
    check(rep.cpu_path.startswith(want) and loose in rep.cpu_path and
          "writable by its group or others (mode 664)" in rep.cpu_path,
          "cpu=auto: %r, expected %r... naming %s" % (rep.cpu_path, want, loose))
    check_state_dict(sd, mnt, ref, limit, "cpu=auto")
    del sd

    # "read", by argument and by PLACEFS_CPU; bad values.
    for kw, env in (({"cpu": "read"}, None), ({}, "read")):
        if env:
            os.environ["PLACEFS_CPU"] = env
        try:
            sd, rep = placefs.load(mnt, device="cpu", **kw)
        finally:
            os.environ.pop("PLACEFS_CPU", None)
        check(rep.cpu_path == 'read by the daemon into shared memory (cpu="read")',
              "cpu=read (%r, PLACEFS_CPU=%r): %r" % (kw, env, rep.cpu_path))
        check_state_dict(sd, mnt, ref, limit, "cpu=read")
        del sd
    expect_raises(lambda: placefs.load(mnt, device="cpu", cpu="mmap"), ValueError,
                  "^cpu must be 'auto', 'map' or 'read', got 'mmap'$", "cpu='mmap'")
    os.environ["PLACEFS_CPU"] = "map"
    check(placefs.cpu_mode_from_env() == "map", "PLACEFS_CPU=map: %r"
          % placefs.cpu_mode_from_env())
    os.environ["PLACEFS_CPU"] = "yes"
    expect_raises(lambda: placefs.load(mnt, device="cpu"), ValueError,
                  "^PLACEFS_CPU must be auto, map or read, got 'yes'$", "PLACEFS_CPU=yes")
    os.environ.pop("PLACEFS_CPU")

    # A shard changed since the mount (here its ctime, by a chmod; the daemon
    # checks the header again and serves it): not mapped, by any mode.
    other = next(f for f in files if f != loose and any(x.source == f for x in cpu))
    p = shards[other]["path"]
    os.chmod(p, stat.S_IMODE(os.stat(p).st_mode))
    expect_raises(lambda: placefs.load(mnt, device="cpu", cpu="map"), RuntimeError,
                  "cpu=\"map\": %s is not the file the daemon validated at mount \\(ctime_ns "
                  "differs\\)" % re.escape(p), "cpu=map of a changed shard")
    sd, rep = placefs.load(mnt, device="cpu")
    check("%s is not the file the daemon validated at mount (ctime_ns differs)" % p
          in rep.cpu_path, "cpu=auto, a changed shard: %r" % rep.cpu_path)
    check_state_dict(sd, mnt, ref, limit, "cpu=auto, a changed shard")
    expect_raises(lambda: list(placefs.iter_weights(mnt, device="cpu", cpu="map")),
                  RuntimeError, "is not the file the daemon validated at mount",
                  "iter_weights cpu=map of a changed shard")
    check_no_leases(mnt, "cpumap")
    done("cpumap")


def early_declines(mnt, devices=(0, 1, None)):
    """The early path (plan ranges before the plan) is for a CUDA ring of the
    device asked for, or for host results from a host or CUDA ring of one
    device; on any other mount it steps aside before it touches torch or
    sends a request, and the load goes the usual way."""
    sentinel = object()  # not torch: touching it would raise AttributeError
    for dev in devices:
        check(placefs.loader._Early.start(mnt, sentinel, dev, 4, 0) is None,
              "%s: the early path did not step aside for %s" % (mnt, dev))


def none(mnt, source):
    ref = reference(source)
    m = placefs.Mount(mnt)
    ri = m.ring_info()
    check(ri.backend == placefs.BACKEND_NONE, "device=none mount reports %r" % ri)
    early_declines(mnt)
    gpu = [t for t in m.tensors if t.placement == "gpu"]
    if check(gpu, "device=none test needs a gpu-placed tensor"):
        fd = m.open(gpu[0].name)
        try:
            expect_oserror(lambda: placefs.stage(fd, "borrow"), errno.ENODEV,
                           "borrow with -o device=none")
        finally:
            os.close(fd)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        sd = placefs.load_state_dict(mnt, device="cpu")
    check(any("staging is disabled" in str(x.message) for x in w),
          "no warning about disabled staging")
    check_state_dict(sd, mnt, ref, None if m.buffer_size is None else m.buffer_size,
                     "device=none load")
    done("none")


def cpuonly(mnt, source):
    ref = reference(source)
    m = placefs.Mount(mnt)
    check(all(t.placement == "cpu" for t in m.tensors), "cpuonly: a gpu-placed tensor")
    # No gpu tensor: no ioctl is needed at all.
    for mode in ("copy", "borrow"):
        sd = placefs.load_state_dict(mnt, device="cpu", mode=mode)
        check_state_dict(sd, mnt, ref, m.buffer_size, "cpu-only load mode=%s" % mode)
    done("cpuonly")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"abi": abi, "offline": offline, "seed": seed, "wrap": wrap, "wrapfull": wrapfull,
     "mixed": mixed, "none": none, "cpuonly": cpuonly, "cpumap": cpumap,
     "bigplan": bigplan}[cmd](*args)
