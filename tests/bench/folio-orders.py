#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Counts the page-cache pages of FILE that belong to large folios.

Maps FILE read-only, touches every page, then looks each page up in
/proc/self/pagemap and /proc/kpageflags (root only): a page is either the head
or a tail of a compound (large) folio, or an order-0 page. A first read
through FUSE allocates a page-cache folio for every piece it fills; with
order-0 folios that is one allocation per 4 KiB, in the reader's thread
(doc/PERFORMANCE.md, section 3.6).

    tests/bench/folio-orders.py FILE
"""
import mmap
import os
import struct
import sys

KPF_COMPOUND_HEAD, KPF_COMPOUND_TAIL = 1 << 15, 1 << 16


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: folio-orders.py FILE")
    path = sys.argv[1]
    page = mmap.PAGESIZE
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            sys.exit("folio-orders: %s is empty" % path)
        m = mmap.mmap(f.fileno(), size, mmap.MAP_SHARED, mmap.PROT_READ)
    for off in range(0, size, page):  # fault every page in
        m[off]
    base = None
    ino = os.stat(path).st_ino
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and int(fields[4]) == ino and fields[5] == os.path.realpath(path):
                base = int(fields[0].split("-")[0], 16)
                break
    if base is None:
        sys.exit("folio-orders: %s: mapping not found in /proc/self/maps" % path)
    counts = {"head": 0, "tail": 0, "order-0": 0, "absent": 0}
    with open("/proc/self/pagemap", "rb") as pm, open("/proc/kpageflags", "rb") as kf:
        for i in range((size + page - 1) // page):
            pm.seek((base // page + i) * 8)
            entry = struct.unpack("Q", pm.read(8))[0]
            pfn = entry & ((1 << 55) - 1)
            if not entry >> 63 or pfn == 0:
                counts["absent"] += 1
                continue
            kf.seek(pfn * 8)
            flags = struct.unpack("Q", kf.read(8))[0]
            if flags & KPF_COMPOUND_HEAD:
                counts["head"] += 1
            elif flags & KPF_COMPOUND_TAIL:
                counts["tail"] += 1
            else:
                counts["order-0"] += 1
    m.close()
    print("%s: %d pages: %d in large folios (%d heads), %d order-0, %d not resident" % (
        path, sum(counts.values()), counts["head"] + counts["tail"], counts["head"],
        counts["order-0"], counts["absent"]))


if __name__ == "__main__":
    main()
