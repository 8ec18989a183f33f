/* SPDX-License-Identifier: MIT */
/*
 * progress: a one-line progress bar for the C tools, drawn only on a
 * terminal.
 *
 * The line, exactly (python/placefs/_progress.py draws the same bytes):
 *
 *   [LABEL ]"[" BAR "] " PCT "%  " DONE "/" TOTAL "  " RATE "/s  " TIME
 *
 *   LABEL  the label, then one space (nothing when the label is empty)
 *   BAR    PLACEFS_PROGRESS_BAR characters: '#' for floor(BAR x done / total),
 *          '.' for the rest (all '#' when total is 0)
 *   PCT    floor(100 x done / total), right-aligned in 3 columns (100 when
 *          total is 0; done above total counts as total)
 *   DONE, TOTAL, RATE  placefs_size_format() ("1.5 GiB"); RATE is
 *          done x 10^9 / elapsed_ns, or "--" while no time has passed
 *   TIME   "ETA " and the time left, ceil((total - done) x elapsed / done),
 *          while running ("ETA --:--" while done or the elapsed time is 0);
 *          "in " and the elapsed time (rounded down) on the final line.
 *          Times are M:SS below an hour, else H:MM:SS.
 *
 * Integer arithmetic only, so that the C and the Python bar agree byte for
 * byte. On a terminal each draw writes "\r", the line (cut to the terminal's
 * width minus one column) and "\033[K" (erase to the end of the line); the
 * final line ends with "\n". Redraws happen at most every
 * PLACEFS_PROGRESS_INTERVAL_NS (the first update and the final line always
 * draw). When the stream is not a terminal nothing at all is written.
 */
#ifndef PLACEFS_PROGRESS_H
#define PLACEFS_PROGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"

#define PLACEFS_PROGRESS_BAR         20
#define PLACEFS_PROGRESS_INTERVAL_NS 100000000ULL /* 0.1 s: at most ~10 redraws a second */

/*
 * Formats one line (no "\r", no newline) into buf, truncated and
 * NUL-terminated when len is too small; final selects the "in TIME" form.
 * Returns the length of the whole line (as snprintf does). A NULL label is
 * the empty one. Pure: no clock, no I/O, thread-safe.
 */
size_t placefs_progress_format(char *buf, size_t len, const char *label, uint64_t done,
                               uint64_t total, uint64_t elapsed_ns, int final);

/* A clock for tests: returns nanoseconds of CLOCK_MONOTONIC or of anything monotonic. */
typedef uint64_t (*placefs_progress_clock_fn)(void *arg);

struct placefs_progress;

/*
 * A bar for `total` bytes on stream f (not owned; stderr usually). enabled:
 * 1 draw, 0 never draw, -1 draw when isatty(fileno(f)). The label is
 * copied. The clock is placefs_clock_ns() unless clock is given (then
 * clock_arg is passed to it). Returns 0 or -ENOMEM (err filled). One
 * thread at a time: the callers draw from their main loop.
 */
int placefs_progress_create(FILE *f, uint64_t total, const char *label, int enabled,
                            placefs_progress_clock_fn clock, void *clock_arg,
                            struct placefs_progress **out, struct placefs_error *err);

/* Whether this bar draws anything (a terminal, or enabled = 1). */
int placefs_progress_enabled(const struct placefs_progress *p);

/* Counts nbytes more as done and redraws when the interval has passed. NULL: no-op. */
void placefs_progress_update(struct placefs_progress *p, uint64_t nbytes);

/*
 * Erases the bar's line (so that other output can be printed on it); the
 * next update draws it again whatever the interval. NULL: no-op.
 */
void placefs_progress_clear(struct placefs_progress *p);

/* Draws the final line and a newline; once only (later calls do nothing). NULL: no-op. */
void placefs_progress_finish(struct placefs_progress *p);

/* Frees the bar without drawing anything more. NULL: no-op. */
void placefs_progress_free(struct placefs_progress *p);

#endif
