# SPDX-License-Identifier: MIT
"""Helpers for the reliability tests (tests/mount-reliability.sh, nested-eio.sh, mount-soak.sh).

  stutil.py manifest MNT SOURCE [--limit BYTES]
      One line per tensor file the mount must show, tab-separated:
      <MNT/fname> <gpu|cpu> <shard path> <payload offset> <nbytes>.
      Worked out from the safetensors headers alone (its own parser, the
      index rule and the name encoding), never from the mount, so that
      tests/reliab/soak compares the mount with the source independently.

  stutil.py wrap INNER OUTER NAME
      Writes OUTER: a valid safetensors file with one U8 tensor NAME whose
      payload is the whole file INNER (header padded to 8 bytes).

  stutil.py stats FILE KEY...
      Prints the values of dotted KEYs (e.g. bytes_read.gpu) of the JSON
      document in FILE (a .placefs/stats snapshot), one per line; a missing
      key prints "none".
"""
import json
import os
import struct
import sys


def encode(name):
    out = name.replace("%", "%25").replace("/", "%2F")
    return "%2E" + out[1:] if out.startswith(".") else out


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    out = []
    for name, v in h.items():
        b, e = v["data_offsets"]
        out.append((b, e, name, 8 + n + b, e - b))
    out.sort(key=lambda t: (t[0], t[1], t[2].encode()))
    return out


def manifest(mnt, source, limit):
    if os.path.isdir(source):
        idx = os.path.join(source, "model.safetensors.index.json")
        if os.path.exists(idx):
            with open(idx) as f:
                wmap = json.load(f)["weight_map"]
            files = sorted(set(wmap.values()), key=lambda s: s.encode())
        else:
            wmap = None
            files = sorted((x for x in os.listdir(source) if x.endswith(".safetensors")),
                           key=lambda s: s.encode())
        d = source
    else:
        d, files, wmap = os.path.dirname(source) or ".", [os.path.basename(source)], None
    for f in files:
        path = os.path.abspath(os.path.join(d, f))
        for _, _, name, off, nbytes in header(path):
            if wmap is not None and wmap.get(name) != f:
                continue
            pl = "gpu" if limit is None or nbytes <= limit else "cpu"
            print("%s\t%s\t%s\t%d\t%d" % (os.path.join(mnt, encode(name)), pl, path, off, nbytes))


def wrap(inner, outer, name):
    with open(inner, "rb") as f:
        data = f.read()
    n = len(data)
    h = json.dumps({name: {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}).encode()
    h += b" " * (-len(h) % 8)
    with open(outer, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def stats(path, keys):
    with open(path) as f:
        doc = json.load(f)
    for k in keys:
        v = doc
        for part in k.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        print("none" if v is None else v)


def main(argv):
    if len(argv) >= 3 and argv[0] == "manifest":
        limit = None
        if len(argv) == 5 and argv[3] == "--limit":
            limit = int(argv[4])
        elif len(argv) != 3:
            sys.exit("usage: stutil.py manifest MNT SOURCE [--limit BYTES]")
        manifest(argv[1], argv[2], limit)
    elif len(argv) == 4 and argv[0] == "wrap":
        wrap(argv[1], argv[2], argv[3])
    elif len(argv) >= 3 and argv[0] == "stats":
        stats(argv[1], argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
