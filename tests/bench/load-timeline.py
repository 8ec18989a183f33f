# SPDX-License-Identifier: MIT
"""When each request of one load_state_dict() was sent and answered, on fresh mounts.

    python3 load-timeline.py PLACEFS OPTS SOURCE MNT [MOUNTS] [--device cuda:0]

MOUNTS times (default 2) it mounts SOURCE on MNT afresh (placefs -o OPTS) in
this process, which already has CUDA, and calls placefs.load() on it, as a
model server would. It prints the load's time from the mount command's
return and its GB/s (the shards' bytes over that time), then, when the load
took the early path (plan ranges sent before the plan is read, doc/STAGING.md),
each range request: sent, answered (seconds after the mount returned), its
plan indexes and bytes, and the pace from the first request to the last
answer. After the last fresh mount it loads once more on the same mount:
if that second load is no faster, nothing in the first pass is left to win
(the daemon's page cache, registrations, CUDA handles are all warm by then).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The package of this tree, unless PYTHONPATH names one.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from oneshot import mount, umount  # noqa: E402


def shard_bytes(src):
    if os.path.isdir(src):
        return sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src)
                   if f.endswith(".safetensors"))
    return os.path.getsize(src)


def main():
    args = sys.argv[1:]
    device = "cuda:0"
    if len(args) >= 2 and args[-2] == "--device":
        device, args = args[-1], args[:-2]
    if len(args) not in (4, 5):
        sys.exit("usage: load-timeline.py PLACEFS OPTS SOURCE MNT [MOUNTS] [--device D]")
    pb, opts, src, mnt = args[:4]
    mounts = int(args[4]) if len(args) == 5 else 2
    import torch
    import placefs
    from placefs import loader

    cuda = device.startswith("cuda")
    if cuda:
        torch.empty(1, device=device)
        torch.cuda.synchronize()
    t_base = [0.0]
    calls = []
    orig = loader._ranges_request

    def timed(fd, dest, spans, timeout_ns):
        s = time.perf_counter()
        r = orig(fd, dest, spans, timeout_ns)
        calls.append((s - t_base[0], time.perf_counter() - t_base[0], spans[0][0],
                      sum(c for _, c, _ in spans), sum(x[0] for x in r)))
        return r

    loader._ranges_request = timed
    total = shard_bytes(src)

    def one(label):
        sd, rep = placefs.load(mnt, device=device, mode="copy")
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter() - t_base[0]
        print("%s: %.3f s after %s, %.2f GB/s of shard bytes (gpu part %.3f s, cpu part %.3f s)"
              % (label, t, "the mount returned" if label.startswith("fresh") else "the call",
                 total / t / 1e9, rep.seconds["gpu"], rep.seconds["cpu"]))
        if calls:
            a = min(c[0] for c in calls)
            z = max(c[1] for c in calls)
            moved = sum(c[4] for c in calls)
            print("  %d range requests: first sent %.4f s, first answered %.4f s, last answered "
                  "%.4f s; %d bytes, %.2f GB/s from the first request to the last answer"
                  % (len(calls), a, min(c[1] for c in calls), z, moved, moved / (z - a) / 1e9))
            for s, e, first, count, nbytes in sorted(calls):
                print("    %.4f-%.4f  plan [%d, %d)  %d bytes" % (s, e, first, first + count,
                                                                 nbytes))
        else:
            print("  no range requests (the early path was not taken: %s)" % rep.gpu_path)
        return sd

    for k in range(mounts):
        calls.clear()
        t_base[0], _ = mount(pb, opts, src, mnt)
        sd = one("fresh mount %d" % (k + 1))
        del sd
        if k == mounts - 1:
            calls.clear()
            t_base[0] = time.perf_counter()
            sd = one("the same mount again")
            del sd
        umount(mnt)


if __name__ == "__main__":
    main()
