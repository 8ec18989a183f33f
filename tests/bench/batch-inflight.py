# SPDX-License-Identifier: MIT
"""The loader's copy-mode requests alone, on fresh mounts: throughput and requests in flight.

    python3 batch-inflight.py PLACEFS OPTS SOURCE MNT WORKERS[,WORKERS...] [--device cuda:0]

For each WORKERS count it mounts SOURCE on MNT afresh (placefs -o OPTS) in
this process, which already has CUDA, lays the gpu-placed tensors out in one
CUDA allocation as load_state_dict() does (placefs.loader._layout), cuts
them into the same requests (placefs.loader._chunks: STAGE_BATCH for the
small ones, one STAGE per large one) and sends them from a pool of WORKERS
threads into that allocation, with nothing else in the process: no result
views, no plan beyond the mount's. It prints one line per count: GB/s from
the first request to the last answer, the mean number of requests in flight
(the sum of the requests' own times over the wall time), the mean request
time, and the daemon's batch moves, direct copies and ring waits. Then, on another
fresh mount, the same bytes as the plan ranges load_state_dict sends before
it reads the plan (placefs.loader._Early, STAGE_BATCH with BATCH_RANGES).
Set beside load_state_dict on the same checkpoint, it separates the daemon's
part from the loader's Python (doc/PERFORMANCE.md 3.3).
"""
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The package of this tree, unless PYTHONPATH names one.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from oneshot import mount, umount  # noqa: E402


def main():
    if len(sys.argv) < 6:
        sys.exit("usage: batch-inflight.py PLACEFS OPTS SOURCE MNT WORKERS[,...] [--device D]")
    pb, opts, src, mnt, counts = sys.argv[1:6]
    device = sys.argv[7] if len(sys.argv) > 7 and sys.argv[6] == "--device" else "cuda:0"
    import torch
    import placefs
    from placefs import _torch, loader
    from placefs._ioctl import Destination

    torch.empty(1, device=device)
    torch.cuda.synchronize()
    for w in (int(x) for x in counts.split(",")):
        mount(pb, opts, src, mnt)
        m = placefs.Mount(mnt)
        try:
            gpu = [t for t in m.tensors if t.placement == "gpu"]
            offs, total = loader._layout(gpu, 256)
            buf = torch.empty(max(total, 1), dtype=torch.uint8, device=device)
            torch.cuda.synchronize()
            spans, lock = [], threading.Lock()
            with _torch.cuda_ipc_export(buf) as (handle, soff, sbytes):
                size = soff + sbytes
                chunks = loader._chunks([(t, soff + o) for t, o in zip(gpu, offs)], w)
                dest = Destination.cuda_ipc(handle, 0, size)

                def one(c):
                    fd = os.open(c[0][0].path, os.O_RDONLY | os.O_CLOEXEC)
                    try:
                        a = time.perf_counter()
                        if len(c) == 1 and c[0][0].nbytes >= loader.BATCH_BELOW:
                            r = placefs.stage(fd, "copy", Destination.cuda_ipc(handle, c[0][1],
                                                                                size))
                            ok = r.nbytes == c[0][0].nbytes
                        else:
                            # EAGAIN (every worker the daemon lends to batches
                            # busy) is retried briefly, as the loader does.
                            res = loader._batch_retrying(fd, "copy", dest,
                                                         [(t.index, o) for t, o in c], 0,
                                                         "batch of %d" % len(c))
                            ok = all(err == 0 and nb == t.nbytes
                                     for (t, _), (nb, err, _f) in zip(c, res))
                        b = time.perf_counter()
                    finally:
                        os.close(fd)
                    if not ok:
                        raise OSError("a request of %d tensors from %r did not land whole"
                                      % (len(c), c[0][0].name))
                    with lock:
                        spans.append((a, b))

                t0 = time.perf_counter()
                with ThreadPoolExecutor(w) as pool:
                    list(pool.map(one, chunks))
                t1 = time.perf_counter()
            with open(os.path.join(mnt, ".placefs", "stats")) as f:
                st = json.load(f)["staging"]
            busy = sum(b - a for a, b in spans)
            print("batch-inflight: %d workers, %d requests, %d bytes in %.3f s: %.2f GB/s; "
                  "%.2f requests in flight on average, %.2f ms each; batch moves %d, direct "
                  "copies %d, ring waits %d" % (
                      w, len(chunks), total, t1 - t0, total / (t1 - t0) / 1e9, busy / (t1 - t0),
                      1e3 * busy / max(len(spans), 1), st["batch"]["moves"],
                      st["direct"]["stages"], st["waits"]))
            del buf
        finally:
            m.close()
            umount(mnt)
        # The same bytes as plan ranges sent before anything of the plan is
        # read (what load_state_dict does first, loader._Early): the daemon's
        # part of such a load, with no Python beside it.
        mount(pb, opts, src, mnt)
        try:
            t0 = time.perf_counter()
            early = loader._Early.start(mnt, torch, torch.device(device).index or 0, w, 0)
            if early is None:
                print("batch-inflight: ranges: the mount has no layout.json or no CUDA ring")
                continue
            res = early.finish()
            t1 = time.perf_counter()
            moved = sum(r[0][0] for r in res)
            if any(r[0][1] for r in res) or moved != sum(t.nbytes for t in gpu):
                raise OSError("the plan ranges did not land whole: %r" % res)
            print("batch-inflight: ranges: %d workers, %d requests, %d bytes in %.3f s: "
                  "%.2f GB/s (buffer and IPC export included)" % (
                      w, len(early.spans), moved, t1 - t0, moved / (t1 - t0) / 1e9))
            del early
        finally:
            umount(mnt)


if __name__ == "__main__":
    main()
