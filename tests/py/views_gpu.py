#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Loaders nobody here wrote, on a GPU, against a live mount (issue #15).

A small Llama made by transformers (LlamaConfig, random weights), written by
save_pretrained as safetensors shards of at most 2 MB with an index, plus its
config.json and generation_config.json, mounted with a 512 KiB staging limit
(the 1 MiB embedding and head on the cpu), then:

  - each view (.placefs/views/all, gpu, cpu): every file opens with
    safetensors.safe_open (mmap) and load_file, and every tensor equals the
    source's; the names are the plan's for that placement; config.json is
    byte-exact;
  - transformers.AutoModelForCausalLM.from_pretrained(views/all) gives the
    same logits as from_pretrained(source);
  - placefs.iter_weights(mnt, device="cuda:0") (copy and borrow) and
    placefs.load_state_dict equal load_file of the source, gpu-placed tensors
    on cuda:0, cpu-placed ones on the cpu.

    views_gpu.py BUILDDIR     (torch with CUDA, safetensors, transformers, /dev/fuse)
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import load_file

import placefs

bad = []


def same(a, b):
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.detach().cpu().contiguous().reshape(-1).view(torch.uint8),
                       b.detach().cpu().contiguous().reshape(-1).view(torch.uint8))


def source_tensors(src):
    ref = {}
    for f in sorted(os.listdir(src)):
        if f.endswith(".safetensors"):
            ref.update(load_file(os.path.join(src, f)))
    return ref


def main():
    build = os.path.abspath(sys.argv[1])
    import transformers
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
    print("torch", torch.__version__, "transformers", transformers.__version__)
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        src = os.path.join(tmp, "llama")
        torch.manual_seed(5)
        cfg = LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=512,
                          num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                          max_position_embeddings=128, tie_word_embeddings=False)
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
        model.save_pretrained(src, safe_serialization=True, max_shard_size="2MB")
        files = sorted(os.listdir(src))
        print("source:", files)
        if "model.safetensors.index.json" not in files:
            bad.append("save_pretrained wrote no index: %r" % files)
        ref = source_tensors(src)
        mnt = os.path.join(tmp, "mnt")
        os.mkdir(mnt)
        subprocess.run([os.path.join(build, "fs", "placefs"), "-o",
                        "device=cuda:0,buffer_size=512KiB", src, mnt], check=True)
        try:
            m = placefs.Mount(mnt)
            place = {t.name: t.placement for t in m.tensors}
            ncpu = sum(1 for p in place.values() if p == "cpu")
            if not ncpu:
                bad.append("no tensor is placed on the cpu with a 512 KiB limit")
            views = os.path.join(mnt, ".placefs", "views")
            for view in ("all", "gpu", "cpu"):
                d = os.path.join(views, view)
                seen = {}
                for f in sorted(os.listdir(d)):
                    p = os.path.join(d, f)
                    if f.endswith(".safetensors"):
                        with safe_open(p, framework="pt") as sf:
                            for k in sf.keys():
                                seen[k] = f
                                if not same(sf.get_tensor(k), ref[k]):
                                    bad.append("%s/%s: safe_open %s differs" % (view, f, k))
                        lf = load_file(p)
                        for k, v in lf.items():
                            if not same(v, ref[k]):
                                bad.append("%s/%s: load_file %s differs" % (view, f, k))
                    elif f.endswith(".json") and f != "model.safetensors.index.json":
                        with open(p, "rb") as a, open(os.path.join(src, f), "rb") as b:
                            if a.read() != b.read():
                                bad.append("%s/%s is not the source's bytes" % (view, f))
                want = {k for k, p in place.items() if view == "all" or p == view}
                if set(seen) != want:
                    bad.append("%s: %d tensors, the plan places %d there" % (view, len(seen),
                                                                               len(want)))
                with open(os.path.join(d, "model.safetensors.index.json")) as f:
                    if json.load(f)["weight_map"] != seen:
                        bad.append("%s: the index's weight_map is not its files" % view)
                print("view %s: %d tensors in %d files equal the source (safe_open, load_file)"
                      % (view, len(seen), len(set(seen.values()))))
            ids = torch.tensor([[1, 7, 99, 300, 2000]], device="cuda:0")
            a = AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.bfloat16).to("cuda:0")
            b = AutoModelForCausalLM.from_pretrained(os.path.join(views, "all"),
                                                     torch_dtype=torch.bfloat16).to("cuda:0")
            with torch.no_grad():
                la, lb = a(ids).logits, b(ids).logits
            if not torch.equal(la, lb):
                bad.append("from_pretrained(views/all): logits differ from the source's")
            print("from_pretrained(views/all): logits equal the source's: %s"
                  % torch.equal(la, lb))
            del a, b
            for mode in ("copy", "borrow"):
                names = []
                for k, v in placefs.iter_weights(mnt, device="cuda:0", mode=mode):
                    names.append(k)
                    want_dev = "cuda" if place[k] == "gpu" else "cpu"
                    if v.device.type != want_dev or not same(v, ref[k]):
                        bad.append("iter_weights(%s): %s on %s differs" % (mode, k, v.device))
                if names != [t.name for t in m.tensors]:
                    bad.append("iter_weights(%s): not in checkpoint order" % mode)
                sd = placefs.load_state_dict(mnt, device="cuda:0", mode=mode)
                for k, v in sd.items():
                    if not same(v, ref[k]):
                        bad.append("load_state_dict(%s): %s differs" % (mode, k))
                print("iter_weights and load_state_dict (%s): %d tensors (%d on cpu) equal "
                      "load_file" % (mode, len(names), ncpu))
            m.close()
            del m, la, lb, sd
            import gc
            gc.collect()  # the models' and safe_open's mappings of the views
        finally:
            if subprocess.run(["fusermount3", "-u", mnt], check=False).returncode != 0:
                subprocess.run(["fusermount3", "-u", "-z", mnt], check=False)
    print("NOTE: views (safe_open, load_file, from_pretrained) and iter_weights: %s"
          % ("ok" if not bad else "%d failures" % len(bad)))
    for b_ in bad[:20]:
        print("FAIL:", b_)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
