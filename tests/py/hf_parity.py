#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""HF parity on a GPU: a checkpoint written by safetensors.torch.save_file,
mounted with a staging limit, loaded with placefs.load_state_dict, equals
safetensors.torch.load_file tensor by tensor, with gpu-placed tensors on the
CUDA device and cpu-placed ones on the CPU, in both modes.

    hf_parity.py BUILDDIR        (needs torch with CUDA, safetensors, /dev/fuse)
"""
import glob
import os
import subprocess
import sys
import tempfile
import time

import torch
from safetensors.torch import load_file, save_file

placefs = None  # the installed package, imported by main()


def installed_placefs(build, dest):
    """The package as `make install-python` installs it from BUILD into DESTDIR dest
    (tests/pyinstall.sh's way): the test imports that copy, never python/."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    subprocess.run(["make", "-s", "-C", build, "install-python", "DESTDIR=" + dest,
                    "prefix=/usr/local", "PYTHON3=" + sys.executable], check=True, env=env)
    inits = glob.glob(os.path.join(dest, "**", "placefs", "__init__.py"), recursive=True)
    if len(inits) != 1:
        sys.exit("hf_parity: make install-python gave %r" % inits)
    sys.path.insert(0, os.path.dirname(os.path.dirname(inits[0])))
    import placefs
    if not os.path.abspath(placefs.__file__).startswith(os.path.abspath(dest) + os.sep):
        sys.exit("hf_parity: import placefs found %s, not the installed copy" % placefs.__file__)
    return placefs


def make_state_dict():
    g = torch.Generator().manual_seed(11)
    sd = {
        "model.embed_tokens.weight": torch.randn(4096, 1024, generator=g).to(torch.bfloat16),
        "model.layers.0.q.weight": torch.randn(512, 512, generator=g).to(torch.float16),
        "model.layers.0.norm.weight": torch.randn(512, generator=g),
        "model.layers.0.ids": torch.randint(0, 1 << 40, (1000,), generator=g),
        "model.layers.0.mask": torch.rand(333, generator=g) > 0.5,
        "model.layers.0.scalar": torch.tensor(3.5, dtype=torch.float64),
        "model.layers.0.empty": torch.empty(0, 7),
        "model.layers.0.i8": torch.randint(-128, 127, (77,), dtype=torch.int8, generator=g),
        "lm_head.weight": torch.randn(4096, 1024, generator=g).to(torch.bfloat16),
    }
    if hasattr(torch, "float8_e4m3fn"):
        sd["model.layers.0.fp8"] = torch.randn(256, 64, generator=g).to(torch.float8_e4m3fn)
    return sd


def main():
    global placefs
    build = os.path.abspath(sys.argv[1])
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        placefs = installed_placefs(build, os.path.join(tmp, "pyinst"))
        path = os.path.join(tmp, "model.safetensors")
        save_file(make_state_dict(), path, metadata={"format": "pt"})
        ref = load_file(path)
        mnt = os.path.join(tmp, "mnt")
        os.mkdir(mnt)
        # 4 MiB limit: the 8 MiB embedding and head go to the cpu.
        subprocess.run([os.path.join(build, "fs", "placefs"), "-o",
                        "device=cuda:0,buffer_size=4M", path, mnt], check=True)
        try:
            m = placefs.Mount(mnt)
            placement = {t.name: t.placement for t in m.tensors}
            for mode in ("copy", "borrow"):
                t0 = time.perf_counter()
                sd = placefs.load_state_dict(mnt, device="cuda:0", mode=mode)
                torch.cuda.synchronize()
                dt = time.perf_counter() - t0
                if set(sd) != set(ref):
                    print("FAIL %s: names differ: %s" % (mode, sorted(set(sd) ^ set(ref))))
                    failures += 1
                for name, want in ref.items():
                    got = sd[name]
                    dev = "cuda" if placement[name] == "gpu" else "cpu"
                    if got.device.type != dev:
                        print("FAIL %s: %s on %s, placed %s" % (mode, name, got.device,
                                                                placement[name]))
                        failures += 1
                    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
                        print("FAIL %s: %s is %s%s, want %s%s" % (
                            mode, name, got.dtype, tuple(got.shape), want.dtype,
                            tuple(want.shape)))
                        failures += 1
                        continue
                    a = got.cpu().contiguous().view(-1).view(torch.uint8) if got.numel() else None
                    b = want.contiguous().view(-1).view(torch.uint8) if want.numel() else None
                    if (a is None) != (b is None) or (a is not None and not torch.equal(a, b)):
                        print("FAIL %s: %s bytes differ from load_file" % (mode, name))
                        failures += 1
                ngpu = sum(1 for t in sd.values() if t.is_cuda)
                print("hf-parity %s: %d tensors (%d on cuda, %d on cpu) equal load_file, %.3f s"
                      % (mode, len(sd), ngpu, len(sd) - ngpu, dt))
                del sd
            # CPU-placed tensor files are plain files: numpy.memmap and
            # torch.from_file load them straight from the mount (mmap).
            import numpy as np
            for t in m.tensors:
                if t.placement != "cpu":
                    continue
                want = ref[t.name].contiguous().view(-1).view(torch.uint8)
                mm = np.memmap(t.path, dtype=np.uint8, mode="r")
                ff = torch.from_file(t.path, shared=False, size=t.nbytes, dtype=torch.uint8)
                for what, got in (("numpy.memmap", torch.from_numpy(np.array(mm))),
                                  ("torch.from_file", ff)):
                    if not torch.equal(got, want):
                        print("FAIL %s of %s differs from load_file" % (what, t.name))
                        failures += 1
                print("hf-parity: %s read by numpy.memmap and torch.from_file: ok" % t.name)
                del mm, ff, got
            del m
            import gc
            gc.collect()
        finally:
            if subprocess.run(["fusermount3", "-u", mnt], check=False).returncode != 0:
                subprocess.run(["fusermount3", "-u", "-z", mnt], check=False)
    print("hf-parity: %d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
