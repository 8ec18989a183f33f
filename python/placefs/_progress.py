# SPDX-License-Identifier: MIT
"""A thread-safe progress bar with the layout of the C tools' (lib/common/progress.h).

    [LABEL ][####################]  PCT%  DONE/TOTAL  RATE/s  ETA M:SS   (running)
    ...                                                      in M:SS    (final line)

Integer arithmetic only, so that a Python and a C bar over the same numbers
print the same bytes: the bar is floor(20 x done / total) '#' then '.', the
percentage floor(100 x done / total), sizes as placefs_size_format() writes
them ("1.5 GiB"), the rate done x 10^9 / elapsed_ns ("--" while no time has
passed), the ETA ceil((total - done) x elapsed / done) seconds, M:SS below an
hour, else H:MM:SS. Each draw writes "\\r", the line (cut to the terminal's
width minus one) and "\\033[K"; close() writes the final line and "\\n".
Redraws happen at most every 0.1 s. Disabled (the default when the stream is
not a terminal), it writes nothing at all.
"""

import os
import sys
import threading
import time

BAR = 20
INTERVAL_NS = 100000000  # 0.1 s
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_U64 = (1 << 64) - 1


def format_size(n):
    """Bytes for humans, exactly as lib/common/size.c's placefs_size_format()."""
    n = max(0, min(int(n), _U64))
    u = 0
    while u + 1 < len(_UNITS) and (n >> (10 * (u + 1))) != 0:
        u += 1
    unit = 1 << (10 * u)
    if n % unit == 0:
        return "%d %s" % (n // unit, _UNITS[u])
    hundredths = (n * 100 + unit // 2) // unit
    whole, frac = divmod(hundredths, 100)
    if frac % 10 != 0 or frac == 0:
        return "%d.%02d %s" % (whole, frac, _UNITS[u])
    return "%d.%d %s" % (whole, frac // 10, _UNITS[u])


def _duration(s):
    if s < 3600:
        return "%d:%02d" % (s // 60, s % 60)
    return "%d:%02d:%02d" % (s // 3600, s // 60 % 60, s % 60)


def format_line(label, done, total, elapsed_ns, final=False):
    """One line of the bar (no "\\r", no newline), as placefs_progress_format()."""
    label = label or ""
    done = min(done, total)
    if total == 0:
        filled, pct = BAR, 100
    else:
        filled, pct = done * BAR // total, done * 100 // total
    bar = "#" * filled + "." * (BAR - filled)
    rate = "--" if elapsed_ns == 0 else format_size(min(done * 10**9 // elapsed_ns, _U64))
    if final:
        when = "in " + _duration(elapsed_ns // 10**9)
    elif done == 0 or elapsed_ns == 0:
        when = "ETA --:--"
    else:
        left = (total - done) * elapsed_ns // done
        when = "ETA " + _duration(min((left + 10**9 - 1) // 10**9, _U64))
    return "%s%s[%s] %3d%%  %s/%s  %s/s  %s" % (label, " " if label else "", bar, pct,
                                               format_size(done), format_size(total), rate,
                                               when)


class Progress:
    """A bar for total_bytes bytes on stream (default sys.stderr).

    enabled=None draws only when stream.isatty(). update(nbytes) counts
    nbytes more as done and may be called from any thread; close() draws the
    final line and a newline, once (later calls do nothing). A context
    manager: leaving the block closes the bar. clock (for tests) returns
    monotonic nanoseconds; default time.monotonic_ns.
    """

    def __init__(self, total_bytes, label="", stream=None, enabled=None, clock=None):
        self.stream = sys.stderr if stream is None else stream
        if enabled is None:
            try:
                enabled = bool(self.stream.isatty())
            except (AttributeError, ValueError, OSError):
                enabled = False
        self.enabled = bool(enabled)
        self.total = max(0, int(total_bytes))
        self.label = label or ""
        self.done = 0
        self._clock = clock or time.monotonic_ns
        self._lock = threading.Lock()
        self._start = self._clock()
        self._last = 0
        self._drawn = False
        self._closed = False

    def _columns(self):
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, ValueError, OSError):
            return 0

    def _draw(self, now, final):
        line = format_line(self.label, self.done, self.total, max(0, now - self._start), final)
        cols = self._columns()
        if cols > 1 and len(line) >= cols:
            line = line[:cols - 1]
        self.stream.write("\r" + line + ("\033[K\n" if final else "\033[K"))
        self.stream.flush()
        self._last = now
        self._drawn = True

    def update(self, nbytes):
        with self._lock:
            if self._closed:
                return
            self.done = min(self.done + int(nbytes), _U64)
            if not self.enabled:
                return
            now = self._clock()
            if not self._drawn or now - self._last >= INTERVAL_NS:
                self._draw(now, False)

    def clear(self):
        """Erases the bar's line before other output; the next update draws it again."""
        with self._lock:
            if self.enabled and self._drawn and not self._closed:
                self.stream.write("\r\033[K")
                self.stream.flush()
                self._drawn = False

    def close(self):
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self.enabled:
                self._draw(self._clock(), True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
