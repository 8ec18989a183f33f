/* SPDX-License-Identifier: MIT */
/*
 * log: the daemon's event log. One line per notable event, prefixed
 * "placefs: ", to stderr while the daemon runs in the foreground and to
 * syslog (ident "placefs", facility daemon) once it has daemonized.
 *
 * Start-up failures that end the program are printed by main() straight to
 * stderr, so a user running placefs (or mount -a) always sees them.
 * Thread-safe: each line is formatted into a local buffer and written with
 * one call.
 */
#ifndef PLACEFS_FS_LOG_H
#define PLACEFS_FS_LOG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <syslog.h>

/*
 * Selects the destination: 0 = stderr, 1 = syslog. Also routes libfuse's own
 * messages there. Call before any worker thread exists.
 */
void placefs_log_to_syslog(int on);

/* Logs one line at syslog priority `prio` (LOG_ERR, LOG_WARNING, LOG_INFO...). */
void placefs_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Logs each line of a multi-line text as its own event. */
void placefs_log_lines(int prio, const char *text);

/*
 * A rate limit for lines that clients can cause at will (malformed or
 * refused staging requests): a burst of PLACEFS_LOG_LIMIT_BURST lines, then
 * one a second (a token bucket refilled at one line per
 * PLACEFS_LOG_LIMIT_NS). A line that is held back is counted in
 * `suppressed` (the mount's log_suppressed counter); the next line logged
 * ends with "(N similar lines suppressed)". A client sending errors at any
 * rate therefore costs about one line a second. Initialize with
 * PLACEFS_LOG_LIMIT_INIT; thread-safe.
 */
#define PLACEFS_LOG_LIMIT_BURST 5ULL
#define PLACEFS_LOG_LIMIT_NS    (1000ULL * 1000 * 1000)

struct placefs_log_limit {
	pthread_mutex_t lock;
	uint64_t tokens;                  /* lines that may be logged now */
	uint64_t last_ns;                 /* when tokens was last refilled; 0: never */
	uint64_t held;                    /* lines held back since the last line logged */
	atomic_uint_fast64_t *suppressed; /* counts every line held back; may be NULL */
};

#define PLACEFS_LOG_LIMIT_INIT(counter)                                                            \
	{                                                                                          \
		PTHREAD_MUTEX_INITIALIZER, PLACEFS_LOG_LIMIT_BURST, 0, 0, (counter)                \
	}

/* Logs one line through the rate limit `l`. */
void placefs_log_limited(struct placefs_log_limit *l, int prio, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Logs how many lines `l` held back since its last line, if any (at shutdown). */
void placefs_log_limit_flush(struct placefs_log_limit *l, const char *what);

#endif
