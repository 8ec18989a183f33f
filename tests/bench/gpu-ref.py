#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Reference figures for the GPU staging benchmark, measured with torch.

    gpu-ref.py ceiling [--bytes N] [--chunk N] [--device cuda:0]
        Host-to-device ceiling: cudaMemcpyAsync (tensor.copy_(non_blocking))
        from one large pinned host buffer to the device, in chunks, 3 passes;
        prints the best pass.
    gpu-ref.py peer CKPT_DIR_OR_FILE [--device cuda:0]
        The peer: safetensors.torch.load_file(shard, device=...) for every
        shard, timed until torch.cuda.synchronize(); prints bytes and GB/s.

Each prints one line "name=... bytes=N seconds=S gbps=G".
"""
import argparse
import glob
import os
import sys
import time

import torch


def ceiling(args):
    dev = torch.device(args.device)
    n = args.bytes
    chunk = args.chunk
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    host.fill_(7)
    dst = torch.empty(n, dtype=torch.uint8, device=dev)
    streams = [torch.cuda.Stream(dev), torch.cuda.Stream(dev)]
    best = None
    for _ in range(3):
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for i, off in enumerate(range(0, n, chunk)):
            with torch.cuda.stream(streams[i % 2]):
                dst[off:off + chunk].copy_(host[off:off + chunk], non_blocking=True)
        torch.cuda.synchronize(dev)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    print("name=ceiling bytes=%d seconds=%.4f gbps=%.2f chunk=%d" % (n, best, n / best / 1e9, chunk))


def peer(args):
    from safetensors.torch import load_file

    src = args.ckpt
    files = sorted(glob.glob(os.path.join(src, "*.safetensors"))) if os.path.isdir(src) else [src]
    torch.cuda.init()
    torch.empty(1, device=args.device)  # CUDA context outside the timing
    torch.cuda.synchronize()
    total = 0
    t0 = time.perf_counter()
    keep = []
    for f in files:
        sd = load_file(f, device=args.device)
        total += sum(t.numel() * t.element_size() for t in sd.values())
        keep.append(sd)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print("name=peer bytes=%d seconds=%.4f gbps=%.2f files=%d" % (total, dt, total / dt / 1e9, len(files)))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("ceiling")
    c.add_argument("--bytes", type=int, default=4 << 30)
    c.add_argument("--chunk", type=int, default=64 << 20)
    c.add_argument("--device", default="cuda:0")
    p = sub.add_parser("peer")
    p.add_argument("ckpt")
    p.add_argument("--device", default="cuda:0")
    args = ap.parse_args()
    {"ceiling": ceiling, "peer": peer}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
