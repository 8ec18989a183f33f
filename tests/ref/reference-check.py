#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Differential check against the reference reader (huggingface safetensors).

Run where `safetensors` (and torch) are installed, e.g. on the GPU machine:

    python3 tests/ref/reference-check.py BUILD_DIR

1. Every file of tests/corpus/good-safetensors must open in the reference
   reader; every file of tests/corpus/bad-safetensors must be refused by it,
   except the deliberate differences listed in DELIBERATE (doc/FORMAT.md).
2. Checkpoints written by placefs-mkckpt (every dtype the reference supports,
   scalars, empty tensors, a sharded Llama shape) load in the reference reader
   with exactly the bytes placefs-plan says are at each offset.
Prints a table and exits non-zero on any disagreement.
"""
import json
import os
import subprocess
import sys
import tempfile

from safetensors import safe_open

# Refused by placefs, accepted by the reference on purpose (doc/FORMAT.md).
DELIBERATE = {
    "dup-key-identical.safetensors": "placefs refuses any duplicate key",
    "dup-key.safetensors": "reference keeps the last duplicate",
    "dup-key-escaped.safetensors": "reference keeps the last duplicate",
    "dup-field-in-tensor.safetensors": "serde may take the last field",
    "dup-metadata-key.safetensors": "reference keeps the last duplicate metadata key",
    "nul-escape-in-name.safetensors": "a NUL cannot be in a file name; placefs refuses it",
}


def ref_opens(path):
    try:
        with safe_open(path, framework="numpy") as f:
            list(f.keys())
        return True, ""
    except Exception as e:  # noqa: BLE001 - any refusal counts
        return False, str(e).splitlines()[0][:70]


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build/dev"
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    corpus = os.path.join(top, "tests", "corpus")
    bad = 0
    rows = []
    for kind, want in (("good-safetensors", True), ("bad-safetensors", False)):
        d = os.path.join(corpus, kind)
        for name in sorted(os.listdir(d)):
            if not name.endswith(".safetensors"):
                continue
            ok, msg = ref_opens(os.path.join(d, name))
            agree = ok == want
            note = ""
            if not agree and not want and name in DELIBERATE:
                agree, note = True, "deliberate: " + DELIBERATE[name]
            elif not agree:
                bad += 1
                note = "DISAGREE " + msg
            rows.append((kind, name, "accept" if ok else "refuse", note))
    for r in rows:
        print("%-17s %-48s ref=%-6s %s" % r)

    mk = os.path.join(build, "tools", "placefs-mkckpt")
    plan = os.path.join(build, "tools", "placefs-plan")
    with tempfile.TemporaryDirectory() as tmp:
        # --random draws every dtype; dtypes newer than the installed reader
        # are reported, not counted as disagreements.
        specs = ["--tensor", "s:F32:scalar", "--tensor", "e:BF16:0x3",
                 "--tensor", "weird name/with%:F16:3x5", "--random", "200",
                 "--llama", "2:128:344:1000", "--shards", "3", "--index"]
        out = os.path.join(tmp, "ck")
        subprocess.run([mk, "--quiet", "--seed", "7", *specs, out], check=True)
        p = json.loads(subprocess.run([plan, "--json", out], check=True,
                                      capture_output=True).stdout)
        checked = 0
        unknown = set()
        for t in p["tensors"]:
            path = os.path.join(out, t["file"])
            try:
                with safe_open(path, framework="numpy") as f:
                    sl = f.get_slice(t["name"])
                    assert list(sl.get_shape()) == t["shape"], t["name"]
                    assert sl.get_dtype() == t["dtype"], (t["name"], sl.get_dtype())
            except Exception as e:  # noqa: BLE001
                if "Dtype not understood" in str(e):
                    unknown.add(t["dtype"])
                    continue
                raise
            checked += 1
        try:
            import torch
            compared = 0
            for t in p["tensors"]:
                if t["dtype"] in unknown:
                    continue
                path = os.path.join(out, t["file"])
                with safe_open(path, framework="pt") as f:
                    try:
                        ten = f.get_tensor(t["name"]).contiguous()
                    except Exception as e:  # noqa: BLE001
                        if "not understood" in str(e) or "not supported" in str(e):
                            unknown.add(t["dtype"])
                            continue
                        raise
                with open(path, "rb") as fh:
                    fh.seek(t["offset"])
                    raw = fh.read(t["nbytes"])
                got = ten.view(-1).view(torch.uint8).numpy().tobytes() if ten.numel() else b""
                if ten.dim() == 0:
                    got = ten.reshape(1).view(torch.uint8).numpy().tobytes()
                if got != raw:
                    bad += 1
                    print("DISAGREE bytes of", t["name"])
                compared += 1
            print("torch: %d tensors byte-identical to placefs-plan's offsets" % compared)
        except ImportError:
            print("torch not importable: byte comparison through torch skipped")
        if unknown:
            print("dtypes unknown to this reference version (not compared):",
                  " ".join(sorted(unknown)))
        print("mkckpt: %d tensors in %d shards opened by the reference reader"
              % (checked, len({t["file"] for t in p["tensors"]})))
    print("reference-check: %d disagreement(s)" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
