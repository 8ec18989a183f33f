# SPDX-License-Identifier: MIT
"""One-shot loads on fresh mounts (issue #13), for tests/bench/first-pass.sh.

    python3 oneshot.py PLACEFS OPTS SOURCE MNT [--what load,iter,cpu] [--device cuda:0|cpu]

Each measurement mounts SOURCE on MNT afresh (placefs -o OPTS), in this
process which already has CUDA, times from the return of the mount command
to the last tensor in place, and unmounts:

  load   placefs.load(mnt, device, mode="copy"): every gpu-placed tensor on the
         device, every cpu-placed one in host memory (the report's split too);
         once per value of $ONESHOT_CPU (a comma-separated list of the
         loader's cpu= modes; unset: the loader's default, $PLACEFS_CPU or
         "auto", mapped from the source shards where it may; "read": by the
         daemon into new memory)
  iter   placefs.iter_weights(mnt, device, mode="copy"), each tensor touched
         (torch.cuda.synchronize at the end)
  first  time to the first tensor: a small gpu-placed tensor (a norm), by name, borrowed
         and copied into a tensor of this process, from the return of the
         mount command (no process start in it, unlike first-pass.sh's 1stms)
  cpu    the cpu-placed tensors alone: STAGE_READ by the daemon (load(cpu="read"))
         and the populated private mappings of load(cpu="map"), each on a
         fresh mount, against the reference, a parallel pread() of the same
         byte ranges straight from the shard files (8 threads, 8 MiB pieces)
         into one fresh buffer (it runs before the mounts)

One line per measurement: "NAME: ... GB/s". $ONESHOT_WORKERS (default 4) is
the loaders' `workers`. torch is needed except for `--what first --device cpu`
(a host ring: scripts/test's bench layer runs it so on the machine that runs CI).
"""
import json
import mmap
import os
import struct
import subprocess
import sys
import threading
import time


def mount(placefs_bin, opts, src, mnt):
    t0 = time.perf_counter()
    subprocess.run([placefs_bin, "-o", opts, src, mnt], check=True)
    t1 = time.perf_counter()
    while True:
        try:
            open(os.path.join(mnt, ".placefs", "stats")).close()
            break
        except OSError:
            time.sleep(0.001)
    return t1, t1 - t0


def umount(mnt):
    subprocess.run(["fusermount3", "-u", mnt], check=True)


def shard_ranges(src, names):
    """(path, offset, nbytes) of each named tensor, from the shards' headers."""
    files = [os.path.join(src, f) for f in sorted(os.listdir(src)) if f.endswith(".safetensors")] \
        if os.path.isdir(src) else [src]
    out = {}
    for p in files:
        with open(p, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(n))
        for k, v in hdr.items():
            if k != "__metadata__" and k in names:
                a, b = v["data_offsets"]
                out[k] = (p, 8 + n + a, b - a)
    return [out[k] for k in names]


def pread_reference(ranges, threads=8, piece=8 << 20, huge=False, touched=False):
    """Parallel pread() of (path, offset, nbytes) ranges into one fresh buffer.

    huge: the buffer is madvise(MADV_HUGEPAGE)d first (transparent huge pages
    where the system allows them). touched: every page of the buffer is
    written before the clock starts (memory the process already had: what the
    copy costs without the first touch of fresh pages)."""
    total = sum(r[2] for r in ranges)
    buf = mmap.mmap(-1, max(total, 1))
    if huge and hasattr(mmap, "MADV_HUGEPAGE"):
        buf.madvise(mmap.MADV_HUGEPAGE)
    if touched:
        for k in range(0, len(buf), 4096):
            buf[k] = 1
    mv = memoryview(buf)
    work, pos = [], 0
    for p, off, n in ranges:
        for k in range(0, n, piece):
            work.append((p, off + k, min(piece, n - k), pos + k))
        pos += n
    fds = {p: os.open(p, os.O_RDONLY) for p, _, _ in ranges}
    lock = threading.Lock()
    it = iter(work)

    def run():
        while True:
            with lock:
                w = next(it, None)
            if w is None:
                return
            p, off, n, dst = w
            got = os.preadv(fds[p], [mv[dst:dst + n]], off)
            if got != n:
                raise OSError("short read")

    t0 = time.perf_counter()
    ths = [threading.Thread(target=run) for _ in range(threads)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    dt = time.perf_counter() - t0
    for fd in fds.values():
        os.close(fd)
    mv.release()
    buf.close()
    return total, dt


def first_small(tensors):
    """The tensor whose time to first use is measured: the first gpu-placed one of
    at most 1 MiB in plan order (a norm), or None. first-pass.sh's 1stms uses it too."""
    return next((t for t in tensors if t.placement == "gpu" and 0 < t.nbytes <= 1 << 20), None)


def main():
    placefs_bin, opts, src, mnt = sys.argv[1:5]
    what = ["load", "iter", "cpu"]
    device = "cuda:0"
    workers = int(os.environ.get("ONESHOT_WORKERS", "4"))
    args = sys.argv[5:]
    while args:
        if args[0] == "--what":
            what = args[1].split(",")
        elif args[0] == "--device":
            device = args[1]
        else:
            sys.exit("usage: oneshot.py PLACEFS OPTS SOURCE MNT [--what load,iter,cpu] "
                     "[--device D]")
        args = args[2:]
    import placefs
    if device != "cpu" or what != ["first"]:
        import torch
        torch.empty(1, device=device)

    def sync():
        # --device cpu (a host mount, no GPU): nothing to wait for.
        if device != "cpu":
            torch.cuda.synchronize()

    sync()
    for w in what:
        if w == "load":
            for cpu_mode in (os.environ.get("ONESHOT_CPU") or "-").split(","):
                cpu_mode = None if cpu_mode == "-" else cpu_mode
                t1, mt = mount(placefs_bin, opts, src, mnt)
                sd, rep = placefs.load(mnt, device=device, mode="copy", workers=workers,
                                       cpu=cpu_mode)
                sync()
                t3 = time.perf_counter()
                gb = sum(t.numel() * t.element_size() for t in sd.values() if t.is_cuda)
                cb = sum(t.numel() * t.element_size() for t in sd.values() if not t.is_cuda)
                del sd
                umount(mnt)
                print("load: load_state_dict copy, cpu=%s, fresh mount: %d gpu + %d cpu bytes in "
                      "%.3f s after the mount returned (mount %.3f s; gpu part %.3f s, cpu part "
                      "%.3f s beside it, %s): %.2f GB/s" % (
                          cpu_mode or "default", gb, cb, t3 - t1, mt, rep.seconds["gpu"],
                          rep.seconds["cpu"],
                          rep.cpu_path or "no cpu part", (gb + cb) / (t3 - t1) / 1e9))
        elif w == "iter":
            t1, mt = mount(placefs_bin, opts, src, mnt)
            n = nb = 0
            keep = []
            t_first = None
            for name, t in placefs.iter_weights(mnt, device=device, mode="copy",
                                                workers=workers):
                if t_first is None:
                    t_first = time.perf_counter()
                n += 1
                nb += t.numel() * t.element_size()
                keep.append(t)
            sync()
            t3 = time.perf_counter()
            del keep
            umount(mnt)
            print("iter: iter_weights copy, fresh mount: %d tensors, %d bytes in %.3f s after "
                  "the mount returned: %.2f GB/s; the first item %.1f ms after it"
                  % (n, nb, t3 - t1, nb / (t3 - t1) / 1e9, ((t_first or t3) - t1) * 1e3))
        elif w == "first":
            # Time to the first tensor in a process that is already running:
            # from the return of the mount command to a small gpu-placed
            # tensor held as this process's own tensor on the device. The
            # tensor is named the way a model server names what it wants:
            # the first of at most 1 MiB in plan order (a norm), chosen on an
            # earlier mount, untimed. Timed: Mount() (no plan read: the name
            # is found through its file's attributes), borrow(), clone().
            t1, mt = mount(placefs_bin, opts, src, mnt)
            t = first_small(placefs.Mount(mnt).tensors)
            umount(mnt)
            if t is None:
                print("first: no gpu-placed tensor of at most 1 MiB")
                continue
            t1, mt = mount(placefs_bin, opts, src, mnt)
            m = placefs.Mount(mnt)
            with m.borrow(t.name) as b:
                own = b.view.clone() if device != "cpu" else bytes(b.view)
            sync()
            t3 = time.perf_counter()
            del own
            lazy = m._plan is None
            # What reading the whole plan costs, as its own figure: every loader reads it.
            t4 = time.perf_counter()
            n = len(m.tensors)
            t5 = time.perf_counter()
            m.close()
            umount(mnt)
            print("first: %s (%d bytes) on %s %.1f ms after the mount returned (%s; the "
                  "whole plan of %d tensors then read in %.1f ms; mount %.3f s)"
                  % (t.name, t.nbytes, device, (t3 - t1) * 1e3,
                     "without reading the plan" if lazy else "the plan was read first", n,
                     (t5 - t4) * 1e3, mt))
        elif w == "cpu":
            t1, mt = mount(placefs_bin, opts, src, mnt)
            m = placefs.Mount(mnt)
            cpu = [t for t in m.tensors if t.placement == "cpu" and t.nbytes]
            m.close()
            umount(mnt)
            if not cpu:
                print("cpu: no cpu-placed tensors with this limit")
                continue
            ranges = shard_ranges(src, [t.name for t in cpu])
            total, dt = pread_reference(ranges)
            ref = total / dt / 1e9
            if os.environ.get("ONESHOT_CPU_VARIANTS"):
                # What bounds the cpu part: the same parallel pread into huge
                # pages, and O_DIRECT reads of the mount's tensor files (the
                # daemon's FUSE replies straight into the reader's pages).
                _, dth = pread_reference(ranges, huge=True)
                _, dtw = pread_reference(ranges, touched=True)
                print("cpu-variant: parallel pread of the shards into memory touched before: "
                      "%.2f GB/s" % (total / dtw / 1e9))
                for huge in (False, True):
                    t1, mt = mount(placefs_bin, opts, src, mnt)
                    m = placefs.Mount(mnt)
                    fr = [(t.path, 0, t.nbytes) for t in m.tensors
                          if t.placement == "cpu" and t.nbytes]
                    m.close()
                    real_open = os.open
                    os.open = lambda p, fl, *a: real_open(p, fl | os.O_DIRECT, *a)
                    try:
                        _, dtd = pread_reference(fr, huge=huge)
                    finally:
                        os.open = real_open
                    umount(mnt)
                    print("cpu-variant: O_DIRECT reads of the mount's files into %s pages: "
                          "%.2f GB/s" % ("huge" if huge else "4 KiB", total / dtd / 1e9))
                print("cpu-variant: parallel pread of the shards into huge pages: %.2f GB/s; "
                      "into 4 KiB pages %.2f GB/s" % (total / dth / 1e9, ref))
            got = {}
            for cpu_mode in ("read", "map"):
                t1, mt = mount(placefs_bin, opts, src, mnt)
                ld = placefs.loader._Loader(mnt, "cpu", "copy", 4, 0, cpu=cpu_mode)
                from concurrent.futures import ThreadPoolExecutor
                ts = [ld.mount.tensor(t.name) for t in cpu]
                t2 = time.perf_counter()
                with ThreadPoolExecutor(max_workers=4) as pool:
                    ld._load_cpu(ts, pool)
                dt2 = time.perf_counter() - t2
                ld.mount.close()
                ld.raw.clear()
                ld.out.clear()
                umount(mnt)
                got[cpu_mode] = (total / dt2 / 1e9, ld.cpu_path)
            print("cpu: %d cpu-placed tensors, %d bytes: STAGE_READ into shm (fresh mount) "
                  "%.2f GB/s; parallel pread reference (8 threads, 8 MiB) %.2f GB/s; "
                  "%.2f x the reference" % (len(cpu), total, got["read"][0], ref,
                                            got["read"][0] / ref))
            print("cpu-map: the same, cpu=\"map\" (%s, fresh mount): %.2f GB/s, %.2f x the "
                  "reference" % (got["map"][1], got["map"][0], got["map"][0] / ref))
        elif w == "verify":
            # Not timed: every tensor of load() and of iter_weights (copy and borrow)
            # equals what safetensors reads from the shards.
            from safetensors import safe_open
            ref = {}
            files = [os.path.join(src, f) for f in sorted(os.listdir(src))
                     if f.endswith(".safetensors")] if os.path.isdir(src) else [src]
            for p in files:
                with safe_open(p, framework="pt") as f:
                    for k in f.keys():
                        ref[k] = p
            handles = {p: safe_open(p, framework="pt") for p in set(ref.values())}
            _, _ = mount(placefs_bin, opts, src, mnt)
            sd = placefs.load_state_dict(mnt, device=device, mode="copy")
            bad = [k for k, v in sd.items()
                   if not torch.equal(v.cpu(), handles[ref[k]].get_tensor(k))]
            places = {k: str(v.device) for k, v in sd.items()}
            del sd
            for mode in ("copy", "borrow"):
                names = []
                for k, v in placefs.iter_weights(mnt, device=device, mode=mode):
                    names.append(k)
                    if str(v.device) != places[k] or \
                            not torch.equal(v.cpu(), handles[ref[k]].get_tensor(k)):
                        bad.append("iter_weights/%s:%s" % (mode, k))
                if names != list(places):
                    bad.append("iter_weights/%s: order" % mode)
            umount(mnt)
            ndev = sum(1 for d in places.values() if d.startswith("cuda"))
            print("verify: load_state_dict and iter_weights (copy, borrow): %d tensors (%d on "
                  "%s, %d on cpu) %s" % (len(places), ndev, device, len(places) - ndev,
                                          "all equal to safetensors" if not bad else
                                          "MISMATCH: %r" % bad[:5]))
            if bad:
                sys.exit(1)
        else:
            sys.exit("oneshot.py: unknown measurement %r" % w)


if __name__ == "__main__":
    main()
