# SPDX-License-Identifier: MIT
"""python/placefs with torch on a CUDA mount (run by tests/py/gpu-smoke.sh).

  gpu_smoke.py MNT SOURCE LIMIT

It loads the mount with device cuda:0 and cpu, in copy and borrow modes, and
compares every value with the checkpoint's bytes. It also checks typed
values, borrowed CUDA views, a copy-mode stage into a torch allocation by
its IPC handle (placefs._torch.cuda_ipc_export, as the loader takes it),
and a stage into a shm destination from the CUDA backend.
"""

import json
import os
import sys
import time

import torch

import loader_test as lt
import placefs


def main(mnt, source, limit):
    limit = int(limit)
    ref = lt.reference(source)
    m = placefs.Mount(mnt)
    ri = m.ring_info()
    lt.check(ri.backend == placefs.BACKEND_CUDA and ri.device == 0, "ring_info %r" % ri)
    lt.check(ri.handle_kind == placefs.HANDLE_CUDA_IPC and len(ri.handle) == 64,
             "CUDA ring handle %r" % ri)
    # gpu-smoke.sh mounts without -o host_buffer: a CUDA ring's default, 128 MiB
    # (lib/staging/backend.h), as 32 chunks of 4 MiB.
    lt.check(ri.host_buffer_bytes == 128 << 20, "default host_buffer with cuda: %r" % ri)
    st = json.load(open(os.path.join(mnt, ".placefs", "stats")))["staging"]
    lt.check(st["chunk_bytes"] == 4 << 20 and st["host_buffer_bytes"] == 128 << 20,
             "default chunks with cuda: %r" % {k: st[k] for k in ("chunk_bytes",
                                                                   "host_buffer_bytes")})
    # The same load without the early requests (PLACEFS_EARLY=0), as the reference path.
    os.environ["PLACEFS_EARLY"] = "0"
    sd, rep = placefs.load(mnt, device="cuda:0", mode="copy")
    del os.environ["PLACEFS_EARLY"]
    lt.check("plan ranges" not in (rep.gpu_path or ""), "PLACEFS_EARLY=0: %r" % rep.gpu_path)
    lt.check_state_dict(sd, mnt, ref, limit, "cuda mount, PLACEFS_EARLY=0", device="cuda:0")
    del sd
    for device in ("cuda:0", "cpu"):
        for mode in ("copy", "borrow"):
            torch.cuda.synchronize()
            sd, rep = placefs.load(mnt, device=device, mode=mode)
            print(rep.summary().splitlines()[0])
            # A copy-mode load, onto the ring's GPU or into host memory, asks
            # for the plan by ranges before it reads it (_Early); the bytes
            # are checked below.
            early = mode == "copy" and rep.count["gpu"] > 0
            lt.check(("plan ranges" in (rep.gpu_path or "")) == early,
                     "device=%s mode=%s: gpu path %r" % (device, mode, rep.gpu_path))
            lt.check_state_dict(sd, mnt, ref, limit, "cuda mount device=%s mode=%s"
                                % (device, mode), device=device)
            # Typed values: an F32/BF16 tensor equals the checkpoint's bytes viewed so.
            for t in m.tensors:
                if t.dtype in ("F32", "BF16") and t.nbytes:
                    dt = torch.float32 if t.dtype == "F32" else torch.bfloat16
                    want = torch.frombuffer(bytearray(ref[t.name][2]), dtype=dt).reshape(
                        t.shape)
                    got = sd[t.name]
                    lt.check(got.dtype == dt and torch.equal(got.cpu(), want),
                             "%s: typed value differs (%s)" % (t.name, device))
            del sd
    # The default device of a CUDA mount is its ring's GPU, by the same early path.
    sd, rep = placefs.load(mnt, mode="copy")
    lt.check(("plan ranges" in (rep.gpu_path or "")) == (rep.count["gpu"] > 0) and
             rep.device == "cuda:0", "default device: %s, gpu path %r" % (rep.device,
                                                                         rep.gpu_path))
    lt.check_state_dict(sd, mnt, ref, limit, "cuda mount, default device", device="cuda:0")
    del sd
    gpu = [t for t in m.tensors if t.placement == "gpu" and t.nbytes]
    t = gpu[0]
    with m.borrow(t.name) as b:
        lt.check(b.view.is_cuda and b.view.numel() == t.nbytes, "borrowed view %r" % b.view)
        lt.check(lt.same_bytes(b.view, ref[t.name][2]), "borrowed CUDA view differs")
        lt.check(b.tobytes() == ref[t.name][2], "borrowed tobytes differs")
    # Copy mode into a torch allocation at an offset, by its IPC handle.
    buf = torch.zeros(t.nbytes + 8192, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    with placefs._torch.cuda_ipc_export(buf) as (h, off, size):
        r = m.stage_into(t.name, placefs.Destination.cuda_ipc(h, off + 4096, off + size))
    lt.check(r.lease == 0 and r.nbytes == t.nbytes, "ipc copy result %r" % r)
    lt.check(lt.same_bytes(buf[4096:4096 + t.nbytes], ref[t.name][2]),
             "ipc copy: bytes differ")
    lt.check(int(buf[:4096].count_nonzero()) == 0 and
             int(buf[4096 + t.nbytes:].count_nonzero()) == 0, "ipc copy wrote outside")
    # The load buffer is freed with its tensors (torch's IPC reference was dropped).
    del buf
    sd = None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(0)
    sd = placefs.load_state_dict(mnt, device="cuda:0", mode="copy")
    during = torch.cuda.memory_allocated(0)
    del sd
    torch.cuda.ipc_collect()
    after = torch.cuda.memory_allocated(0)
    lt.check(during > before and after == before, "load buffer not freed: allocated %d "
             "before, %d with the state dict, %d after it was dropped" % (before, during,
                                                                           after))
    # Timing of a bigger load, for the report.
    t0 = time.perf_counter()
    sd = placefs.load_state_dict(mnt, device="cuda:0", mode="copy")
    torch.cuda.synchronize()
    print("reload copy: %.3f s" % (time.perf_counter() - t0))
    m.close()
    lt.done("gpu")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(*sys.argv[1:])
