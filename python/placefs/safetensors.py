# SPDX-License-Identifier: MIT
"""A stdlib-only reader of safetensors files, with the reference reader's rules.

For the model-directory views of a mount (MNT/.placefs/views/{all,gpu,cpu}/,
doc/SEMANTICS.md "Views") and any other safetensors file, where the
`safetensors` package is not installed. The checks are the ones the reference
reader (huggingface/safetensors) makes before it hands out a tensor:

* the first 8 bytes are the header length N (little-endian); N is at most
  100,000,000 and 8 + N at most the file size;
* the header is UTF-8 JSON, an object, without duplicate keys, lone
  surrogates or NUL characters in strings; whitespace around it (the
  writer's padding) is allowed;
* `__metadata__`, when present, is null or an object of strings;
* every other member is a tensor: a known dtype, a shape of non-negative
  integers (no sign, no fraction), data_offsets [begin, end] with
  begin <= end; the payload bytes are elements x bits / 8 (whole bytes),
  the product taken left to right within 64 bits;
* sorted by offset, the tensors cover the data buffer exactly: the first
  starts at 0, each starts where the previous ended (no hole, no overlap),
  and the last ends at the end of the file.

placefs's own caps on top of those (doc/FORMAT.md "Caps": dimensions, JSON values
per header byte) are not enforced here.

header(path) -> Header (metadata, tensors in offset order with absolute
offsets); read(path, use_mmap=False) -> {name: (dtype, shape, bytes)}.
Errors are SafetensorsError (a ValueError) naming the file and the rule.
"""

import json
import mmap as _mmap
import os
import struct

HEADER_MAX = 100_000_000

# Bits per element of each dtype of the current specification (lib/common/dtype.c).
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
    "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}

__all__ = ["SafetensorsError", "Tensor", "Header", "header", "read", "DTYPE_BITS", "HEADER_MAX"]


class SafetensorsError(ValueError):
    """A file the reference reader would refuse; the message names the file and the rule."""


class Tensor:
    """One tensor entry: name, dtype, shape, begin/end (relative), offset (absolute), nbytes."""

    __slots__ = ("name", "dtype", "shape", "begin", "end", "offset", "nbytes")

    def __init__(self, name, dtype, shape, begin, end, data_start):
        self.name = name
        self.dtype = dtype
        self.shape = shape
        self.begin = begin
        self.end = end
        self.offset = data_start + begin
        self.nbytes = end - begin

    def __repr__(self):
        return "Tensor(%r, %s, %r, [%d, %d])" % (self.name, self.dtype, self.shape,
                                                 self.begin, self.end)


class Header:
    """A validated header: n (JSON bytes), data_start (8 + n), metadata (dict or None),
    tensors (in offset order), size (the file's)."""

    def __init__(self, n, metadata, tensors, size):
        self.n = n
        self.data_start = 8 + n
        self.metadata = metadata
        self.tensors = tensors
        self.size = size

    def names(self):
        return [t.name for t in self.tensors]


def _fail(path, msg):
    raise SafetensorsError("%s: %s" % (path, msg))


def _no_dups(path):
    def hook(pairs):
        d = {}
        for k, v in pairs:
            if k in d:
                _fail(path, "duplicate key %r in the header" % k)
            d[k] = v
        return d
    return hook


def _is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 64


def _no_sign(text):
    if text.startswith("-"):
        raise ValueError("negative integer %s" % text)
    return int(text)


def _bad_string(v):
    """Why a decoded string cannot be in a header (NUL, a lone surrogate), or None."""
    if "\0" in v:
        return "a NUL character"
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return "an unpaired surrogate"
    return None


def parse(path, prefix, size):
    """Validates the header bytes `prefix` (at least 8 + N bytes of the file) of a file of
    `size` bytes; returns a Header."""
    if size < 8 or len(prefix) < 8:
        _fail(path, "shorter than the 8-byte header length")
    n = struct.unpack_from("<Q", prefix, 0)[0]
    if n > HEADER_MAX:
        _fail(path, "header length %d is over the limit of %d" % (n, HEADER_MAX))
    if 8 + n > size:
        _fail(path, "header length %d runs past the end of the file (%d bytes)" % (n, size))
    if len(prefix) < 8 + n:
        _fail(path, "header cut short")
    raw = bytes(prefix[8:8 + n])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        _fail(path, "header is not UTF-8 (%s)" % e)
    try:
        obj = json.loads(text, object_pairs_hook=_no_dups(path), parse_int=_no_sign)
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        _fail(path, "header is not JSON (%s)" % e)
    if not isinstance(obj, dict):
        _fail(path, "header is not a JSON object")
    meta = obj.pop("__metadata__", None)
    if meta is not None:
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            _fail(path, "__metadata__ is not an object of strings")
        for k, v in meta.items():
            why = _bad_string(k) or _bad_string(v)
            if why:
                _fail(path, "__metadata__ %r holds %s" % (k, why))
    data_start = 8 + n
    tensors = []
    for name, e in obj.items():
        if _bad_string(name):
            _fail(path, "tensor name %r holds %s" % (name, _bad_string(name)))
        if not isinstance(e, dict):
            _fail(path, "tensor %r: entry is not an object" % name)
        dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if dtype not in DTYPE_BITS:
            _fail(path, "tensor %r: unknown dtype %r" % (name, dtype))
        if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
            _fail(path, "tensor %r: shape is not a list of non-negative integers" % name)
        if (not isinstance(offs, list) or len(offs) != 2 or not all(_is_uint(o) for o in offs)
                or offs[0] > offs[1]):
            _fail(path, "tensor %r: data_offsets is not [begin, end] with begin <= end" % name)
        elems = 1
        for d in shape:
            elems *= d
            if elems >= 1 << 64:
                _fail(path, "tensor %r: shape %r overflows 64 bits" % (name, shape))
        bits = elems * DTYPE_BITS[dtype]
        if bits % 8 or bits // 8 != offs[1] - offs[0]:
            _fail(path, "tensor %r: %s %r takes %s bytes, data_offsets give %d"
                  % (name, dtype, shape, bits / 8, offs[1] - offs[0]))
        tensors.append(Tensor(name, dtype, shape, offs[0], offs[1], data_start))
    tensors.sort(key=lambda t: (t.begin, t.end))
    at = 0
    for t in tensors:
        if t.begin != at:
            _fail(path, "tensor %r starts at %d, not at %d: %s" % (
                t.name, t.begin, at, "a hole" if t.begin > at else "an overlap"))
        at = t.end
    if data_start + at != size:
        _fail(path, "the tensors end at byte %d of the data buffer, which has %d"
              % (at, size - data_start))
    return Header(n, meta, tensors, size)


def header(path):
    """The validated header of the file at `path`."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        first = f.read(8)
        if len(first) == 8:
            n = struct.unpack("<Q", first)[0]
            if n <= HEADER_MAX and 8 + n <= size:
                first += f.read(n)
        return parse(path, first, size)


def read(path, use_mmap=False):
    """Every tensor of the file: {name: (dtype, shape, payload bytes)}. With use_mmap the
    payload comes from a read-only shared mapping (as safe_open reads it), else from read()."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if use_mmap:
            if size == 0:
                _fail(path, "shorter than the 8-byte header length")
            m = _mmap.mmap(f.fileno(), size, flags=_mmap.MAP_SHARED, prot=_mmap.PROT_READ)
            try:
                n = struct.unpack_from("<Q", m, 0)[0] if size >= 8 else 0
                h = parse(path, m[:8 + min(n, size)], size)
                return {t.name: (t.dtype, t.shape, m[t.offset:t.offset + t.nbytes])
                        for t in h.tensors}
            finally:
                m.close()
        data = f.read()
    h = parse(path, data, size)
    return {t.name: (t.dtype, t.shape, data[t.offset:t.offset + t.nbytes]) for t in h.tensors}
