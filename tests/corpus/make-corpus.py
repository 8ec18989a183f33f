#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Regenerates the placefs parser corpus next to this script.

    bad-safetensors/   files every safetensors reader must refuse, one per rule,
                       and EXPECTED.tsv: the message fragment each must produce
    good-safetensors/  valid files, including edge cases
    bad-index/         model.safetensors.index.json variants that must be refused
                       (with their own EXPECTED.tsv)
    good-index/        valid index files

Each file is named for the rule it breaks (or the case it covers). The Check
programs check_safetensors and check_index replay every file, and the files
double as fuzz seeds. Output is deterministic; run with no arguments:

    python3 tests/corpus/make-corpus.py
"""

import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def data(n):
    """n bytes of the same pattern the C test helpers use."""
    return bytes((i * 31 + 7) & 0xFF for i in range(n))


def image(header, data_len=0, n=None):
    """A safetensors image: u64 LE length, header bytes, data_len data bytes.

    `header` is a str (encoded as UTF-8) or bytes; `n` overrides the length.
    """
    if isinstance(header, str):
        header = header.encode("utf-8")
    if n is None:
        n = len(header)
    return struct.pack("<Q", n) + header + data(data_len)


def tensor(name, dtype, shape, begin, end):
    """One header member as JSON text (numbers kept exactly as given)."""
    return '%s:{"dtype":%s,"shape":[%s],"data_offsets":[%s,%s]}' % (
        json.dumps(name), json.dumps(dtype), ",".join(str(d) for d in shape), begin, end)


def header(*members):
    return "{" + ",".join(members) + "}"


def one(dtype, shape, begin, end, data_len=None):
    """A one-tensor file named "w"."""
    if data_len is None:
        data_len = int(end) if str(end).isdigit() else 0
    return image(header(tensor("w", dtype, shape, begin, end)), data_len)


def raw_one(fields, data_len=0):
    """A one-tensor file whose tensor object is the raw JSON text `fields`."""
    return image('{"w":%s}' % fields, data_len)


BIG = "18446744073709551616"  # 2^64
U64_MAX = "18446744073709551615"
W4 = tensor("w", "U8", [4], 0, 4)

BAD_SAFETENSORS = {
    # Checks 1-3: the 8-byte length prefix.
    "empty-file": b"",
    "header-too-small": b"\x02\x00\x00\x00\x00\x00\x00",
    "header-too-large": image("{}", n=100000001),
    "header-len-u64-max": image("{}", n=2**64 - 1),
    "header-len-u64-max-minus-7": image("{}", n=2**64 - 8),
    "header-len-past-eof": image("{}", n=3),
    "header-len-cap-short-file": image("{}", n=100000000),
    "header-cut-in-json": image(header(W4), 4)[:40],
    # Wrong kinds of files.
    "lfs-pointer": b"version https://git-lfs.github.com/spec/v1\n"
                   b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
                   b"size 4242\n",
    "html-page": b"<!DOCTYPE html>\n<html><head><title>404</title></head><body></body></html>\n",
    "html-page-lowercase-indented": b"\n  <html lang=\"en\"><body>rate limited</body></html>",
    # Check 4: UTF-8.
    "invalid-utf8": image(b'{"w\xff":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1),
    "invalid-utf8-overlong": image(b'{"\xc0\xaf":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1),
    "invalid-utf8-surrogate": image(b'{"\xed\xa0\x80":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1),
    # Check 5: JSON syntax the reference rejects and cJSON would accept.
    "bom": image(b"\xef\xbb\xbf" + header(W4).encode(), 4),
    "trailing-nul-padding": image(header(W4).encode() + b"\x00\x00\x00\x00", 4),
    "nul-before-header": image(b"\x00" + header(W4).encode(), 4),
    "control-byte-as-whitespace": image(b"\x0b" + header(W4).encode(), 4),
    "trailing-garbage-after-json": image(header(W4) + " x", 4),
    "two-json-objects": image(header(W4) + "{}", 4),
    "empty-json": image(""),
    "whitespace-only-json": image("        "),
    "syntax-error": image('{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}', 4),
    "trailing-comma": image('{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4],}}', 4),
    "unterminated-string": image('{"w', 0),
    "leading-zero-number": one("U8", ["04"], 0, 4, 4),
    "number-too-long": one("U8", ["1" + "0" * 70], 0, 0, 0),
    "invalid-escape": image('{"w\\x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}', 4),
    "invalid-u-escape": image('{"w\\u00zz":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}', 4),
    "lone-high-surrogate": image('{"w\\ud800":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}', 4),
    "lone-low-surrogate": image('{"w\\udc00":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}', 4),
    "nul-escape-in-name": image('{"a\\u0000b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}', 4),
    "raw-control-in-name": image(b'{"a\x01b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}', 4),
    "raw-newline-in-name": image(b'{"a\nb":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}', 4),
    "deep-nesting": image('{"w":{"x":' + "[" * 1100 + "]" * 1100 +
                          ',"dtype":"U8","shape":[4],"data_offsets":[0,4]}}', 4),
    # Check 5: duplicate keys (the reference keeps the last; placefs refuses).
    "dup-key": image(header(tensor("w", "U8", [4], 0, 4), tensor("w", "U8", [4], 4, 8)), 8),
    "dup-key-identical": image(header(W4, W4), 4),
    "dup-key-escaped": image("{" + W4 + ',"\\u0077":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}', 8),
    "dup-field-in-tensor": raw_one('{"dtype":"U8","dtype":"U8","shape":[4],"data_offsets":[0,4]}', 4),
    "dup-metadata": image('{"__metadata__":{},"__metadata__":{},' + W4 + "}", 4),
    "dup-metadata-key": image('{"__metadata__":{"k":"a","k":"b"},' + W4 + "}", 4),
    # Check 5: types and values.
    "top-level-array": image("[]"),
    "top-level-string": image('"safetensors"'),
    "tensor-not-object": image('{"w":[0,4]}', 4),
    "tensor-null": image('{"w":null}'),
    "missing-dtype": raw_one('{"shape":[4],"data_offsets":[0,4]}', 4),
    "missing-shape": raw_one('{"dtype":"U8","data_offsets":[0,4]}', 4),
    "missing-data-offsets": raw_one('{"dtype":"U8","shape":[4]}', 4),
    "dtype-not-string": raw_one('{"dtype":8,"shape":[4],"data_offsets":[0,4]}', 4),
    "dtype-lowercase": one("u8", [4], 0, 4),
    "dtype-unknown": one("F128", [1], 0, 16),
    "dtype-i4-does-not-exist": one("I4", [2], 0, 1),
    "shape-not-array": raw_one('{"dtype":"U8","shape":4,"data_offsets":[0,4]}', 4),
    "shape-null": raw_one('{"dtype":"U8","shape":null,"data_offsets":[0,4]}', 4),
    "shape-string-dim": raw_one('{"dtype":"U8","shape":["4"],"data_offsets":[0,4]}', 4),
    "shape-negative-dim": one("U8", [-1], 0, 0, 0),
    "shape-minus-zero-dim": one("U8", ["-0"], 0, 0, 0),
    "shape-float-dim": one("U8", ["1.5"], 0, 1, 1),
    "shape-float-integral-dim": one("U8", ["4.0"], 0, 4, 4),
    "shape-exponent-dim": one("U8", ["4e0"], 0, 4, 4),
    "shape-huge-float-dim": one("U8", ["1e300"], 0, 0, 0),
    "shape-dim-2p64": one("U8", [BIG], 0, 0, 0),
    "offsets-not-array": raw_one('{"dtype":"U8","shape":[4],"data_offsets":"0,4"}', 4),
    "offsets-arity-0": raw_one('{"dtype":"U8","shape":[4],"data_offsets":[]}', 4),
    "offsets-arity-1": raw_one('{"dtype":"U8","shape":[4],"data_offsets":[0]}', 4),
    "offsets-arity-3": raw_one('{"dtype":"U8","shape":[4],"data_offsets":[0,4,8]}', 4),
    "offsets-negative": one("U8", [4], -4, 0, 4),
    "offsets-float": one("U8", [8], 0, "8.0", 8),
    "offsets-exponent": one("U8", [8], 0, "8e0", 8),
    "offsets-2p64": one("U8", [8], 0, BIG, 8),
    "metadata-non-string-value": image('{"__metadata__":{"total":1},' + W4 + "}", 4),
    "metadata-null-value": image('{"__metadata__":{"k":null},' + W4 + "}", 4),
    "metadata-array": image('{"__metadata__":["pt"],' + W4 + "}", 4),
    "metadata-string": image('{"__metadata__":"pt",' + W4 + "}", 4),
    "metadata-as-tensor": image('{"__metadata__":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}', 4),
    # Check 6: offsets, in offset order.
    "offsets-first-not-at-zero": one("U8", [4], 4, 8, 8),
    "offsets-gap": image(header(tensor("a", "U8", [4], 0, 4), tensor("b", "U8", [4], 8, 12)), 12),
    "offsets-overlap": image(header(tensor("a", "U8", [8], 0, 8), tensor("b", "U8", [8], 4, 12)), 12),
    "offsets-same-range": image(header(tensor("a", "U8", [4], 0, 4), tensor("b", "U8", [4], 0, 4)), 4),
    "offsets-contained": image(header(tensor("a", "U8", [8], 0, 8), tensor("b", "U8", [2], 2, 4)), 8),
    "offsets-end-before-begin": one("U8", [0], 8, 4, 8),
    # Check 6: shape x dtype.
    "overflow-2p32-x-2p32": one("F32", [2**32, 2**32], 0, 0),
    "overflow-2p63-x-2": one("U8", [2**63, 2], 0, 0),
    "overflow-before-zero-dim": one("U8", [2**32, 2**32, 0], 0, 0),
    "overflow-bits-c64": one("C64", [2**61], 0, 0),
    "overflow-five-dims": one("U8", [65536] * 5, 0, 0),
    "misaligned-f4-3-elements": one("F4", [3], 0, 2),
    "misaligned-f6-1-element": one("F6_E2M3", [1], 0, 1),
    "size-short-by-one": one("F32", [3], 0, 11),
    "size-long-by-one": one("F32", [3], 0, 13),
    "size-scalar-empty-range": one("F32", [], 0, 0),
    "size-zero-elements-nonempty-range": one("BF16", [0, 4], 0, 2),
    "size-2p53-plus-1-elements": one("U8", [2**53 + 1], 0, 0),
    # Check 7: the tensors must end exactly at the end of the file.
    "trailing-byte": one("U8", [4], 0, 4, 5),
    "trailing-4k": one("U8", [4], 0, 4, 4 + 4096),
    "trailing-after-empty-header": image("{}", 1),
    "truncated-data-by-one": one("U8", [4], 0, 4, 3),
    "truncated-all-data": one("F32", [1024], 0, 4096, 0),
    "offsets-beyond-file-1tb": one("U8", [10**12], 0, 10**12, 16),
    # Caps on memory (doc/FORMAT.md 1.2): dimensions, array elements, values per byte.
    "cap-dims-1025": one("U8", [1] * 1025, 0, 1),
    "cap-array-in-ignored-field": raw_one(
        '{"dtype":"U8","shape":[1],"data_offsets":[0,1],"junk":[%s]}' % ",".join(["0"] * 1025), 1),
    "cap-values-per-byte": raw_one(
        '{"dtype":"U8","shape":[1],"data_offsets":[0,1],"junk":[%s]}'
        % ",".join(["[%s]" % ",".join(["0"] * 1000)] * 16), 1),
    # A text file (here /etc/shadow-like) in place of a shard.
    "not-safetensors-text": b"root:$6$saltsalt$hashhashhash:19000:0:99999:7:::\n",
    "offsets-end-past-2p64": image(header(*[
        tensor("t%d" % i, "U8", [2**61 - 1 if i < 8 else 7],
               i * (2**61 - 1), i * (2**61 - 1) + (2**61 - 1 if i < 8 else 7))
        for i in range(9)])),
}


# Why each bad file must be refused: a fragment of the expected message. The
# generator writes these to EXPECTED.tsv so the Check programs can tell a file
# refused for its intended rule from one refused by accident.
EXPECT_SAFETENSORS = {
    "empty-file": "header too small",
    "header-too-small": "header too small",
    "header-too-large": "header too large",
    "header-len-u64-max": "header too large",
    "cap-dims-1025": "has more than 1024 elements",
    "cap-array-in-ignored-field": "\"junk\" has more than 1024 elements",
    "cap-values-per-byte": "values and names (at most one per 4 bytes",
    "not-safetensors-text": "not a safetensors file",
    "header-len-u64-max-minus-7": "header too large",
    "header-len-past-eof": "invalid header length",
    "header-len-cap-short-file": "invalid header length",
    "header-cut-in-json": "invalid header length",
    "lfs-pointer": "a Git LFS pointer, not safetensors data",
    "html-page": "an HTML page, not safetensors data",
    "html-page-lowercase-indented": "an HTML page, not safetensors data",
    "invalid-utf8": "invalid UTF-8 in header",
    "invalid-utf8-overlong": "invalid UTF-8 in header",
    "invalid-utf8-surrogate": "invalid UTF-8 in header",
    "bom": "byte-order mark",
    "trailing-nul-padding": "NUL byte",
    "nul-before-header": "NUL byte at byte 0",
    "control-byte-as-whitespace": "control byte 0x0b outside a string",
    "trailing-garbage-after-json": "unexpected character 'x'",
    "two-json-objects": "unexpected data after the top-level value",
    "empty-json": "empty header",
    "whitespace-only-json": "empty header",
    "syntax-error": "syntax error",
    "trailing-comma": "syntax error",
    "unterminated-string": "unterminated string",
    "leading-zero-number": "leading zero",
    "number-too-long": "number longer than 63 characters",
    "invalid-escape": "invalid escape",
    "invalid-u-escape": "invalid \\u escape",
    "lone-high-surrogate": "unpaired high surrogate",
    "lone-low-surrogate": "unpaired low surrogate",
    "nul-escape-in-name": "\\u0000 in a string",
    "raw-control-in-name": "raw control byte 0x01",
    "raw-newline-in-name": "raw control byte 0x0a",
    "deep-nesting": "nested deeper than 1000 levels",
    "dup-key": 'duplicate key "w"',
    "dup-key-identical": 'duplicate key "w"',
    "dup-key-escaped": 'duplicate key "w"',
    "dup-field-in-tensor": 'duplicate key "dtype"',
    "dup-metadata": 'duplicate key "__metadata__"',
    "dup-metadata-key": 'duplicate key "k"',
    "top-level-array": "the top-level value is not an object",
    "top-level-string": "the top-level value is not an object",
    "tensor-not-object": 'tensor "w" is an array, not an object',
    "tensor-null": 'tensor "w" is null, not an object',
    "missing-dtype": 'missing field "dtype"',
    "missing-shape": 'missing field "shape"',
    "missing-data-offsets": 'missing field "data_offsets"',
    "dtype-not-string": "dtype is a number, not a string",
    "dtype-lowercase": 'unknown dtype "u8"',
    "dtype-unknown": 'unknown dtype "F128"',
    "dtype-i4-does-not-exist": 'unknown dtype "I4"',
    "shape-not-array": "shape is a number, not an array",
    "shape-null": "shape is null, not an array",
    "shape-string-dim": "shape[0] is a string",
    "shape-negative-dim": "shape[0] is a negative or fractional number",
    "shape-minus-zero-dim": "shape[0] is a negative or fractional number",
    "shape-float-dim": "shape[0] is a negative or fractional number",
    "shape-float-integral-dim": "shape[0] is a negative or fractional number",
    "shape-exponent-dim": "shape[0] is a negative or fractional number",
    "shape-huge-float-dim": "shape[0] is a negative or fractional number",
    "shape-dim-2p64": "shape[0] does not fit in 64 bits",
    "offsets-not-array": "data_offsets is a string, not an array",
    "offsets-arity-0": "data_offsets has 0 elements",
    "offsets-arity-1": "data_offsets has 1 element;",
    "offsets-arity-3": "data_offsets has 3 elements",
    "offsets-negative": "data_offsets[0] is a negative or fractional number",
    "offsets-float": "data_offsets[1] is a negative or fractional number",
    "offsets-exponent": "data_offsets[1] is a negative or fractional number",
    "offsets-2p64": "data_offsets[1] does not fit in 64 bits",
    "metadata-non-string-value": '"__metadata__" value of "total" is a number',
    "metadata-null-value": '"__metadata__" value of "k" is null',
    "metadata-array": '"__metadata__" is an array',
    "metadata-string": '"__metadata__" is a string',
    "metadata-as-tensor": '"__metadata__" value of "shape" is an array',
    "offsets-first-not-at-zero": "the first tensor must start at 0 (invalid offset for tensor)",
    "offsets-gap": 'leave a gap after tensor "a"',
    "offsets-overlap": 'overlap tensor "a"',
    "offsets-same-range": 'overlap tensor "a"',
    "offsets-contained": 'overlap tensor "a"',
    "offsets-end-before-begin": "end before they begin",
    "overflow-2p32-x-2p32": "overflow computing buffer size",
    "overflow-2p63-x-2": "overflow computing buffer size",
    "overflow-before-zero-dim": "overflow computing buffer size",
    "overflow-bits-c64": "overflow computing buffer size",
    "overflow-five-dims": "overflow computing buffer size",
    "misaligned-f4-3-elements": "(misaligned slice)",
    "misaligned-f6-1-element": "(misaligned slice)",
    "size-short-by-one": "hold 11 bytes but F32 [3] needs 12",
    "size-long-by-one": "hold 13 bytes but F32 [3] needs 12",
    "size-scalar-empty-range": "hold 0 bytes but F32 [] needs 4",
    "size-zero-elements-nonempty-range": "hold 2 bytes but BF16 [0, 4] needs 0",
    "size-2p53-plus-1-elements": "needs 9007199254740993",
    "trailing-byte": "1 trailing byte after the last tensor",
    "trailing-4k": "4096 trailing bytes after the last tensor",
    "trailing-after-empty-header": "1 trailing byte after the last tensor",
    "truncated-data-by-one": "truncated",
    "truncated-all-data": "truncated",
    "offsets-beyond-file-1tb": "truncated",
    "offsets-end-past-2p64": "the tensors end past 2^64 bytes",
}


def padded(hdr, data_len):
    """What writers emit: the header padded with spaces to a multiple of 8."""
    raw = hdr.encode("utf-8")
    raw += b" " * (-(8 + len(raw)) % 8)
    return image(raw, data_len)


DTYPES = [("BOOL", 8), ("U8", 8), ("I8", 8), ("F8_E5M2", 8), ("F8_E4M3", 8), ("F8_E8M0", 8),
          ("F8_E4M3FNUZ", 8), ("F8_E5M2FNUZ", 8), ("F4", 4), ("F6_E2M3", 6), ("F6_E3M2", 6),
          ("I16", 16), ("U16", 16), ("F16", 16), ("BF16", 16), ("I32", 32), ("U32", 32),
          ("F32", 32), ("C64", 64), ("F64", 64), ("I64", 64), ("U64", 64)]


def all_dtypes():
    members, off = [], 0
    for name, bits in DTYPES:
        nbytes = bits  # shape [2,4]: 8 elements of `bits` bits
        members.append(tensor(name.lower() + ".weight", name, [2, 4], off, off + nbytes))
        off += nbytes
    return padded(header(*members), off)


GOOD_SAFETENSORS = {
    "empty-header": image("{}"),
    "scalar": padded(header(tensor("s", "F32", [], 0, 4)), 4),
    "empty-tensor": padded(header(tensor("e", "F32", [0, 3], 0, 0),
                                  tensor("x", "U8", [2], 0, 2)), 2),
    "zero-dim-times-u64-max": image(header(tensor("z", "F32", [0, U64_MAX], 0, 0))),
    "metadata-null": padded('{"__metadata__":null,' + tensor("w", "I32", [2], 0, 8) + "}", 8),
    "metadata-empty": padded('{"__metadata__":{},' + tensor("w", "I32", [2], 0, 8) + "}", 8),
    "metadata-map": padded('{"__metadata__":{"format":"pt","note":"caf\\u00e9"},' +
                           tensor("w", "BF16", [2, 2], 0, 8) + "}", 8),
    "all-dtypes": all_dtypes(),
    "leading-whitespace": image(" \t\r\n" + header(tensor("w", "F16", [3], 0, 6)) + "  ", 6),
    "unknown-tensor-field": image('{"w":{"note":[1,{"x":null}],"dtype":"U8","shape":[3],'
                                  '"data_offsets":[0,3],"more":-1.5}}', 3),
    "unsorted-members": padded(header(tensor("b", "F32", [2], 8, 16),
                                      tensor("a", "F32", [2], 0, 8)), 16),
    "subbyte-whole-bytes": padded(header(tensor("f4", "F4", [2, 2], 0, 2),
                                         tensor("f6", "F6_E3M2", [4], 2, 5)), 5),
    "empty-and-unicode-names": image(header(tensor("", "U8", [1], 0, 1),
                                            tensor("\u6743\u91cd", "U8", [1], 1, 2)), 2),
}

TYPICAL_WM = {
    "lm_head.weight": "model-00002-of-00002.safetensors",
    "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
    "model.layers.0.mlp.weight": "model-00001-of-00002.safetensors",
}


def index(wm_text, extra=""):
    return ('{"metadata":{"total_size":1234},%s"weight_map":%s}' % (extra, wm_text)).encode()


BAD_INDEX = {
    "empty": b"",
    "bom": b"\xef\xbb\xbf" + index('{"a":"s.safetensors"}'),
    "invalid-utf8": b'{"weight_map":{"a\xff":"s.safetensors"}}',
    "syntax-error": b'{"weight_map":{"a":"s.safetensors"}',
    "trailing-garbage": index('{"a":"s.safetensors"}') + b" ]",
    "top-level-array": b'[{"weight_map":{}}]',
    "missing-weight-map": b'{"metadata":{"total_size":0}}',
    "weight-map-null": index("null"),
    "weight-map-array": index('["s.safetensors"]'),
    "weight-map-string": index('"s.safetensors"'),
    "metadata-number": b'{"metadata":5,"weight_map":{"a":"s.safetensors"}}',
    "metadata-array": b'{"metadata":[],"weight_map":{"a":"s.safetensors"}}',
    "non-string-shard": index('{"a":"s.safetensors","b":2}'),
    "null-shard": index('{"a":null}'),
    "absolute-path": index('{"a":"/etc/model.safetensors"}'),
    "dotdot-path": index('{"a":"../model.safetensors"}'),
    "dotdot-inner-path": index('{"a":"sub/../../model.safetensors"}'),
    "dot-component": index('{"a":"./model.safetensors"}'),
    "empty-shard": index('{"a":""}'),
    "empty-component": index('{"a":"sub//model.safetensors"}'),
    "trailing-slash": index('{"a":"sub/"}'),
    "control-char-shard": index('{"a":"model\\u0007.safetensors"}'),
    "nul-escape-shard": index('{"a":"model\\u0000.safetensors"}'),
    "raw-control-in-key": index('{"a\x01":"s.safetensors"}'),
    "dup-weight-map-key": index('{"a":"s1.safetensors","a":"s2.safetensors"}'),
    "dup-weight-map-key-identical": index('{"a":"s1.safetensors","a":"s1.safetensors"}'),
    "dup-weight-map": b'{"weight_map":{"a":"s1.safetensors"},"weight_map":{"b":"s2.safetensors"}}',
    "dup-metadata-key": b'{"metadata":{"total_size":1,"total_size":2},"weight_map":{}}',
}

EXPECT_INDEX = {
    "empty": "empty index",
    "bom": "byte-order mark",
    "invalid-utf8": "invalid UTF-8 in index",
    "syntax-error": "syntax error",
    "trailing-garbage": "unexpected data after the top-level value",
    "top-level-array": "the top-level value is not an object",
    "missing-weight-map": 'no "weight_map"',
    "weight-map-null": '"weight_map" is null',
    "weight-map-array": '"weight_map" is an array',
    "weight-map-string": '"weight_map" is a string',
    "metadata-number": '"metadata" is a number',
    "metadata-array": '"metadata" is an array',
    "non-string-shard": 'tensor "b": the shard is a number, not a string',
    "null-shard": 'tensor "a": the shard is null, not a string',
    "absolute-path": "is absolute",
    "dotdot-path": 'has a ".." component',
    "dotdot-inner-path": 'has a ".." component',
    "dot-component": 'has a "." component',
    "empty-shard": 'shard path "" is empty',
    "empty-component": "has an empty component",
    "trailing-slash": "ends with '/'",
    "control-char-shard": "contains a control character",
    "nul-escape-shard": "\\u0000 in a string",
    "raw-control-in-key": "raw control byte 0x01",
    "dup-weight-map-key": 'duplicate key "a"',
    "dup-weight-map-key-identical": 'duplicate key "a"',
    "dup-weight-map": 'duplicate key "weight_map"',
    "dup-metadata-key": 'duplicate key "total_size"',
}


GOOD_INDEX = {
    "typical": (json.dumps({"metadata": {"total_size": 1234, "total_parameters": 617},
                            "weight_map": TYPICAL_WM}, indent=2) + "\n").encode(),
    "metadata-absent": b'{"weight_map":{"a":"model.safetensors"}}',
    "metadata-null": b'{"metadata":null,"weight_map":{"a":"model.safetensors"}}',
    "unknown-keys": b'{"dtype":"bfloat16","extra":[1,{"weight_map":3}],'
                    b'"weight_map":{"a":"sub/dir/model.safetensors"},"zzz":null}',
}


def regenerate(sub, files, suffix, expect=None):
    d = os.path.join(HERE, sub)
    os.makedirs(d, exist_ok=True)
    for old in os.listdir(d):
        if old.endswith(suffix) or old == "EXPECTED.tsv":
            os.unlink(os.path.join(d, old))
    for name, content in sorted(files.items()):
        with open(os.path.join(d, name + suffix), "wb") as f:
            f.write(content)
    if expect is not None:
        if set(expect) != set(files):
            raise SystemExit("%s: expectations and files differ: %s" %
                             (sub, sorted(set(expect) ^ set(files))))
        with open(os.path.join(d, "EXPECTED.tsv"), "w", encoding="utf-8") as f:
            f.write("# file<TAB>fragment of the message it must be refused with\n")
            for name in sorted(expect):
                f.write("%s%s\t%s\n" % (name, suffix, expect[name]))
    return len(files)


def main():
    if len(sys.argv) > 1:
        sys.stderr.write(__doc__)
        return 2
    counts = [
        regenerate("bad-safetensors", BAD_SAFETENSORS, ".safetensors", EXPECT_SAFETENSORS),
        regenerate("good-safetensors", GOOD_SAFETENSORS, ".safetensors"),
        regenerate("bad-index", BAD_INDEX, ".json", EXPECT_INDEX),
        regenerate("good-index", GOOD_INDEX, ".json"),
    ]
    print("bad-safetensors %d, good-safetensors %d, bad-index %d, good-index %d" % tuple(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
