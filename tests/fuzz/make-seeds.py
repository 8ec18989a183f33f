#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the fuzz seed corpora next to this script (stdlib only).

    corpus/safetensors/  valid safetensors images (seed-*.safetensors)
    corpus/index/        valid model.safetensors.index.json texts (seed-*.json)
    corpus/size/         size strings, valid and not (seed-*.txt)
    corpus/name/         tensor names and encoded file names (seed-*.txt)

Only seed-* files are written; crash-* files (regression inputs that `make
fuzz` saved) are left alone. Output is deterministic; run with no arguments:

    python3 tests/fuzz/make-seeds.py
"""

import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
    "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}


def nbytes(dtype, shape):
    n = BITS[dtype]
    for d in shape:
        n *= d
    assert n % 8 == 0, (dtype, shape)
    return n // 8


def image(tensors, metadata=None, order=None, align=8):
    """A valid safetensors image. tensors: [(name, dtype, shape)] in data order."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    entries = []
    for name, dtype, shape in tensors:
        size = nbytes(dtype, shape)
        entries.append((name, {"dtype": dtype, "shape": list(shape),
                               "data_offsets": [off, off + size]}))
        off += size
    for i in order or range(len(entries)):
        header[entries[i][0]] = entries[i][1]
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    # Pad with spaces, as the reference writer does, so the data is aligned.
    text += b" " * (-len(text) % align)
    payload = bytes((i * 31 + 7) & 0xFF for i in range(off))
    return struct.pack("<Q", len(text)) + text + payload


def safetensors_seeds():
    yield "one-f32", image([("weight", "F32", (2, 2))])
    yield "typical-layer", image([
        ("model.embed_tokens.weight", "BF16", (8, 4)),
        ("model.layers.0.input_layernorm.weight", "BF16", (4,)),
        ("model.layers.0.self_attn.q_proj.weight", "BF16", (4, 4)),
        ("model.layers.0.self_attn.k_proj.bias", "F32", (4,)),
        ("lm_head.weight", "F16", (8, 4)),
    ], metadata={"format": "pt"})
    yield "all-dtypes", image([("t_" + d.lower(), d, (2, 4)) for d in BITS])
    yield "scalar", image([("s", "F64", ())], metadata=None)
    yield "empty-header", image([])
    yield "empty-metadata", image([], metadata={})
    yield "zero-size", image([("empty", "I64", (0, 3)), ("after", "U8", (3,)),
                              ("also-empty", "F32", (5, 0))])
    yield "odd-names", image([("a/b", "U8", (1,)), ("100%", "U8", (1,)),
                              (".hidden", "U8", (1,)), ("caf\u00e9", "U8", (1,)),
                              ("", "U8", (1,)), ("\u65e5\u672c", "U8", (1,))])
    yield "subbyte", image([("f4", "F4", (2,)), ("f6", "F6_E2M3", (4,)),
                            ("f6b", "F6_E3M2", (2, 2))])
    yield "unsorted-members", image([("x", "I32", (3,)), ("y", "I16", (2,)),
                                     ("z", "U64", (1,))], order=[2, 0, 1],
                                    metadata={"b": "2", "a": "1"})
    yield "unaligned", image([("u", "U8", (3,))], align=1)
    # Written by hand: null metadata and an ignored extra field.
    text = (b'{"__metadata__":null,"t":{"dtype":"U8","shape":[2],'
            b'"data_offsets":[0,2],"extra":[1,{"k":true}]}}')
    yield "metadata-null", struct.pack("<Q", len(text)) + text + b"\x01\x02"


def index_seeds():
    def index(weight_map, metadata=None, extra=None):
        doc = {}
        if metadata is not None:
            doc["metadata"] = metadata
        doc["weight_map"] = weight_map
        if extra:
            doc.update(extra)
        return json.dumps(doc, indent=2, ensure_ascii=False).encode() + b"\n"

    yield "typical", index({
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "model.layers.0.self_attn.q_proj.weight": "model-00001-of-00002.safetensors",
        "model.layers.1.mlp.down_proj.weight": "model-00002-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors",
    }, metadata={"total_size": 123456789})
    yield "subdirs", index({"a": "shards/part-1.safetensors", "b": "shards/part-2.safetensors",
                            "c/d": "x/y/z.safetensors", "caf\u00e9": "\u00e9.safetensors"})
    yield "empty-weight-map", index({})
    yield "metadata-null", b'{"metadata":null,"weight_map":{"w":"m.safetensors"}}'
    yield "unknown-keys", index({"w": "m.safetensors"}, metadata={"format": "pt"},
                                extra={"version": [1, 2, {"x": None}], "z": 1.5e3})
    yield "escapes", b'{"weight_map":{"a\\u00e9\\ud83d\\ude00":"s\\/1.safetensors",' \
        b'"\\"q\\"":"s.safetensors"}}'


SIZE_SEEDS = ["8", "8MiB", "1T", "18446744073709551615", "16K", "1G", "3GiB", "4TiB",
              "512M", "2KiB", "16777216", "0", "0K", "18446744073709551616", "16777216T",
              "-1", "1.5G", "0x10", "8 MiB", "8mib", "", "64MB", "5GB", "18446744TB",
              "18446745TB", "8kB"]

NAME_SEEDS = ["model.layers.0.self_attn.q_proj.weight", "a/b", ".hidden", "100%",
              "%2Fx", "%2E%25", "..", "caf\u00e9", "x" * 255, "%" * 85, "/" * 86,
              "tab\there", "%2f", "%2Ex"]


def write(directory, name, content):
    os.makedirs(directory, exist_ok=True)
    if isinstance(content, str):
        content = content.encode("utf-8")
    with open(os.path.join(directory, name), "wb") as f:
        f.write(content)


def main():
    corpus = os.path.join(HERE, "corpus")
    for sub in ("safetensors", "index", "size", "name"):
        d = os.path.join(corpus, sub)
        if os.path.isdir(d):
            for f in os.listdir(d):
                if f.startswith("seed-"):
                    os.unlink(os.path.join(d, f))
    for name, content in safetensors_seeds():
        write(os.path.join(corpus, "safetensors"), "seed-%s.safetensors" % name, content)
    for name, content in index_seeds():
        write(os.path.join(corpus, "index"), "seed-%s.json" % name, content)
    for i, s in enumerate(SIZE_SEEDS):
        write(os.path.join(corpus, "size"), "seed-%02d.txt" % i, s)
    for i, s in enumerate(NAME_SEEDS):
        write(os.path.join(corpus, "name"), "seed-%02d.txt" % i, s)


if __name__ == "__main__":
    main()
