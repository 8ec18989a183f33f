# SPDX-License-Identifier: MIT
"""placefs._torch.typed_views against typed(), one tensor at a time (needs torch, no GPU).

  views_bulk_test.py [DEVICE]

Random layouts of mixed dtypes in one flat uint8 buffer, and mixture-of-
experts layouts (runs of one shape at one distance, interleaved, broken by
gaps and odd tensors): every bulk view equals the one-by-one view (dtype,
shape, strides, bytes, and that it is a view of the buffer at the tensor's
offset, not a copy), for aligned tensors, misaligned ones (which fall back
to typed()), empty ones, scalars, uint8 and dtypes torch lacks; a tensor
that overlaps another of its shape is a ValueError naming it, as is one
whose bytes do not form its shape. Run by tests/py/gpu-smoke.sh, and by
tests/python-torch.sh where the system python3 has torch.
"""

import random
import sys

import torch

from placefs import _torch


class T:
    def __init__(self, name, dtype, shape, nbytes):
        self.name, self.dtype, self.shape, self.nbytes = name, dtype, tuple(shape), nbytes


SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "U8": 1, "I64": 8, "I8": 1, "F4": 1,
         "BOOL": 1}


def layout(rng, n, align):
    ts, offs, pos = [], [], 0
    for i in range(n):
        dt = rng.choice(sorted(SIZES))
        shape = [rng.randint(0, 5) if rng.random() < 0.05 else rng.randint(1, 40)
                 for _ in range(rng.randint(0, 3))]
        count = 1
        for d in shape:
            count *= d
        nb = count * SIZES[dt] if dt != "F4" else count
        if align == 1:
            # Each tensor at a multiple of its own element size only (torch
            # views nothing else), so 1-byte dtypes land at any offset.
            a = SIZES[dt] if dt != "F4" else 1
            pos = (pos + a - 1) // a * a + (rng.randint(0, 3) * a if rng.random() < 0.3 else 0)
        else:
            pos = (pos + align - 1) // align * align
        ts.append(T("t%d.%s" % (i, dt), dt, shape, nb))
        offs.append(pos)
        pos += nb
    return ts, offs, pos


def experts(rng, layers, nexp, align):
    """A mixture-of-experts layout: per layer a router, then per expert down (H x I),
    gate and up (I x H) back to back, in name order (0, 1, 10, 100, ...); now and then a
    gap or an odd tensor between experts, so runs of one shape at one distance break."""
    h, i_ = rng.choice(((8, 4), (16, 8), (6, 10)))
    ts, offs, pos = [], [], 0

    def put(name, dt, shape):
        nonlocal pos
        count = 1
        for d in shape:
            count *= d
        a = max(align, SIZES[dt])  # torch views a dtype at multiples of its size only
        pos = (pos + a - 1) // a * a
        ts.append(T(name, dt, shape, count * SIZES[dt]))
        offs.append(pos)
        pos += count * SIZES[dt]

    dt = rng.choice(("BF16", "F32", "F16"))
    for layer in range(layers):
        put("l%d.router" % layer, dt, [nexp, h])
        for e in sorted(range(nexp), key=str):
            put("l%d.e%d.down" % (layer, e), dt, [h, i_])
            put("l%d.e%d.gate" % (layer, e), dt, [i_, h])
            put("l%d.e%d.up" % (layer, e), dt, [i_, h])
            if rng.random() < 0.05:
                pos += align * rng.randint(1, 3)  # a gap
            if rng.random() < 0.03:
                put("l%d.e%d.bias" % (layer, e), "F32", [h])
        put("l%d.norm" % layer, dt, [h])
    return ts, offs, pos


def check(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)


def main(device):
    rng = random.Random(1234)
    for trial in range(60):
        if trial % 2:
            ts, offs, total = experts(rng, rng.randint(1, 4), rng.choice((1, 2, 3, 16, 64)),
                                      rng.choice((1, 8, 64, 256)))
        else:
            ts, offs, total = layout(rng, rng.randint(1, 300), rng.choice((1, 8, 64, 256)))
        flat = torch.randint(0, 256, (max(total, 1),), dtype=torch.uint8, device=device)
        order = list(range(len(ts)))
        rng.shuffle(order)  # any order in, the order given out
        ts = [ts[i] for i in order]
        offs = [offs[i] for i in order]
        got = _torch.typed_views(torch, flat, ts, offs)
        check(len(got) == len(ts), "trial %d: %d views for %d tensors" % (trial, len(got), len(ts)))
        for t, o, g in zip(ts, offs, got):
            want = _torch.typed(torch, t, flat[o:o + t.nbytes])
            check(g.dtype == want.dtype and tuple(g.shape) == tuple(want.shape) and
                  g.stride() == want.stride() and g.is_contiguous() == want.is_contiguous(),
                  "%s: %s %r strides %r, want %s %r strides %r" % (
                      t.name, g.dtype, tuple(g.shape), g.stride(), want.dtype,
                      tuple(want.shape), want.stride()))
            check(g.device == flat.device, "%s: on %s" % (t.name, g.device))
            if t.nbytes:
                # A view of the buffer, at the tensor's offset (not a copy).
                gb = g.reshape(-1).view(torch.uint8) if g.dtype != torch.bool else \
                    g.reshape(-1).view(torch.uint8)
                check(gb.data_ptr() == flat.data_ptr() + o, "%s: at the wrong offset" % t.name)
                check(torch.equal(gb, flat[o:o + t.nbytes]), "%s: bytes differ" % t.name)
    # A group whose offsets are not all multiples of the element size is viewed
    # one by one: an F32 tensor at offset 2 beside aligned ones fails as typed() does.
    flat = torch.zeros(64, dtype=torch.uint8, device=device)
    ts = [T("u", "F32", [2], 8), T("v", "F32", [2], 8)]
    for what, fn in (("bulk", lambda: _torch.typed_views(torch, flat, ts, [0, 10])),
                     ("typed", lambda: _torch.typed(torch, ts[1], flat[10:18]))):
        try:
            fn()
        except ValueError as e:
            check("'v'" in str(e), "%s: error %r does not name 'v'" % (what, str(e)))
        else:
            check(False, "%s: an F32 tensor at offset 10 was viewed" % what)
    # Overlap and a shape that does not fit the bytes are errors naming the tensor.
    flat = torch.zeros(64, dtype=torch.uint8, device=device)
    for ts, offs, name in (([T("a", "F32", [4], 16), T("b", "F32", [4], 16)], [0, 8], "b"),
                           ([T("c", "F32", [5], 16)], [0], "c")):
        try:
            _torch.typed_views(torch, flat, ts, offs)
        except ValueError as e:
            check(repr(name) in str(e), "error %r does not name %r" % (str(e), name))
        else:
            check(False, "no ValueError for tensor %r" % name)
    print("views_bulk_test: ok (%s)" % device)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
