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

#endif
