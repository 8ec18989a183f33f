# SPDX-License-Identifier: MIT
"""placefs._progress (the installed package) for tests/progress-tty.sh.

    progress_test.py same PROGRESS_FMT   the Python lines equal the C ones
    progress_test.py bar                 drawing, throttling, threads, disabled
    progress_test.py tty                 a bar on this process's stderr (a pty)
"""

import io
import os
import random
import subprocess
import sys
import threading

from placefs import _progress
from placefs._progress import Progress, format_line

U64 = (1 << 64) - 1
failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL: %s" % what)


def cases():
    """(label, done, total, elapsed_ns, final): edges, then random values of every scale."""
    out = [("", 0, 0, 0, 0), ("x", 0, 0, 1, 1), ("stage", 1 << 30, 4 << 30, 2 * 10**9, 0),
           ("-", U64, U64, 1, 0), ("", 1, U64, U64, 0), ("load", 5000, 1000, 10**9, 1),
           ("", 1, 3600, 10**9, 0), ("", 1, 3601, 10**9, 0), ("", 9999, 10000, 10**9, 0)]
    r = random.Random(15)
    for _ in range(3000):
        total = r.choice([0, r.randrange(1, 1 << 10), r.randrange(1, 1 << 34),
                          r.randrange(1, 1 << 64)])
        done = r.choice([0, total, r.randrange(0, total + 1), r.randrange(0, 1 << 64)])
        ns = r.choice([0, 1, r.randrange(1, 10**10), r.randrange(1, 1 << 64)])
        label = r.choice(["", "verify", "placefs-load", "a b"])
        out.append((label, done, total, ns, r.randrange(2)))
    return out


def same(fmt):
    cs = cases()
    inp = "".join("%s\t%d\t%d\t%d\t%d\n" % (c[0] or "-", c[1], c[2], c[3], c[4]) for c in cs)
    got = subprocess.run([fmt, "-"], input=inp, capture_output=True, text=True, check=True)
    lines = got.stdout.split("\n")[:-1]
    check(len(lines) == len(cs), "progress-fmt printed %d lines for %d cases" % (len(lines),
                                                                              len(cs)))
    for c, cline in zip(cs, lines):
        label = "" if c[0] == "-" else c[0]
        py = format_line(label, c[1], c[2], c[3], bool(c[4]))
        check(py == cline, "case %r: C %r, Python %r" % (c, cline, py))
    # Sizes exactly as lib/common/size.c formats them (check_size's table).
    for n, want in [(0, "0 B"), (1536, "1.5 KiB"), (1280, "1.25 KiB"), (1000000, "976.56 KiB"),
                    (1025, "1.00 KiB"), ((1 << 20) - 1, "1024.00 KiB"), (U64, "16.00 EiB"),
                    (3 << 50, "3 PiB")]:
        check(_progress.format_size(n) == want, "format_size(%d) = %r" % (n,
                                                                        _progress.format_size(n)))


class FakeClock:
    def __init__(self):
        self.ns = 1000 * 10**9
        self.lock = threading.Lock()

    def __call__(self):
        with self.lock:
            return self.ns

    def add(self, ns):
        with self.lock:
            self.ns += ns


def bar():
    clk = FakeClock()
    s = io.StringIO()
    p = Progress(4000, "t", s, True, clock=clk)
    check(s.getvalue() == "", "nothing before the first update")
    clk.add(500 * 10**6)
    p.update(1000)
    check(s.getvalue() == "\rt [#####...............]  25%  1000 B/3.91 KiB  1.95 KiB/s  "
          "ETA 0:02\033[K", "first draw: %r" % s.getvalue())
    n = len(s.getvalue())
    clk.add(99 * 10**6)
    p.update(1000)
    check(len(s.getvalue()) == n, "a redraw within 0.1 s")
    clk.add(10**6)
    p.update(0)
    check(s.getvalue()[n:].startswith("\rt [##########..........]  50%"), "redraw after 0.1 s")
    p.clear()
    check(s.getvalue().endswith("\r\033[K"), "clear")
    clk.add(2 * 10**9)
    with p:
        p.update(2000)
    check(s.getvalue().endswith("] 100%  3.91 KiB/3.91 KiB  1.5 KiB/s  in 0:02\033[K\n"),
          "final line: %r" % s.getvalue()[-80:])
    n = len(s.getvalue())
    p.close()
    p.update(5)
    check(len(s.getvalue()) == n, "close is idempotent and ends the bar")

    # Disabled, and enabled=None on something that is not a terminal: nothing at all.
    for kw in ({"enabled": False}, {}):
        s = io.StringIO()
        with Progress(10, "x", s, clock=clk, **kw) as q:
            q.update(5)
            q.clear()
        check(s.getvalue() == "", "%r wrote %r" % (kw, s.getvalue()))
    r, w = os.pipe()
    with os.fdopen(w, "w") as wf, Progress(10, "x", wf) as q:
        check(not q.enabled, "a pipe is not a terminal")
        q.update(10)
    with os.fdopen(r) as rf:
        check(rf.read() == "", "nothing written to a pipe")

    # Thread-safe: 8 threads x 2000 updates, every byte counted, every draw whole.
    clk = FakeClock()
    s = io.StringIO()
    p = Progress(8 * 2000 * 3, "threads", s, True, clock=clk)

    def work():
        for _ in range(2000):
            clk.add(60 * 10**6)
            p.update(3)

    ts = [threading.Thread(target=work) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    p.close()
    check(p.done == 8 * 2000 * 3, "threads: %d bytes counted" % p.done)
    draws = s.getvalue().split("\r")[1:]
    check(len(draws) > 10, "threads: %d draws" % len(draws))
    check(all(d.startswith("threads [") and d.rstrip("\n").endswith("\033[K") for d in draws),
          "threads: a torn draw")
    check(draws[-1].startswith("threads [####################] 100%  46.88 KiB/46.88 KiB"),
          "threads: final %r" % draws[-1])


def tty():
    # stderr is the pty of script(1): enabled by default, drawn, then closed.
    check(sys.stderr.isatty(), "stderr is not a terminal under script")
    with Progress(3 << 20, "pybar") as p:
        for _ in range(3):
            p.update(1 << 20)


def main():
    op = sys.argv[1]
    if op == "same":
        same(sys.argv[2])
    elif op == "bar":
        bar()
    elif op == "tty":
        tty()
    else:
        raise SystemExit("unknown operation %r" % op)
    print("%s: %d checks, %d failures" % (op, checks, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
