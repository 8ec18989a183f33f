/* SPDX-License-Identifier: MIT */
/*
 * error: how lib/ reports failures.
 *
 * Every fallible lib/ function returns 0 on success or a negative errno, and
 * fills a caller-provided struct placefs_error (which may be NULL) with a
 * one-line, lower-case message for the user that names the file, the tensor
 * and the rule broken. `kind` refines the errno for callers that must tell
 * failures apart (placefs-plan maps it to its exit status).
 */
#ifndef PLACEFS_ERROR_H
#define PLACEFS_ERROR_H

#include <stddef.h>

enum placefs_errkind {
	PLACEFS_E_NONE = 0,
	PLACEFS_E_IO,         /* a system call failed */
	PLACEFS_E_FORMAT,     /* a malformed safetensors file */
	PLACEFS_E_INDEX,      /* a malformed or inconsistent index */
	PLACEFS_E_SOURCE,     /* the source path is unusable */
	PLACEFS_E_LIMIT,      /* an invalid size value (staging limit...) */
	PLACEFS_E_NAME,       /* a tensor name that cannot be a file name */
	PLACEFS_E_EMPTY,      /* the selection matched no tensor */
	PLACEFS_E_DUP_GPU,    /* duplicate names among GPU-placed tensors */
	PLACEFS_E_DUP_CPU,    /* duplicate names among CPU-placed tensors */
	PLACEFS_E_OVERLAP,    /* a name placed both on GPU and CPU */
	PLACEFS_E_DUP_SOURCE, /* a name in two shards with no index */
	PLACEFS_E_USAGE,      /* bad arguments to an API */
	PLACEFS_E_NOMEM,      /* out of memory */
};

#define PLACEFS_ERROR_MSG_MAX 1024

struct placefs_error {
	int code; /* negative errno, 0 when clear */
	enum placefs_errkind kind;
	char msg[PLACEFS_ERROR_MSG_MAX];
};

/* Resets err to "no error". err may be NULL. */
void placefs_error_clear(struct placefs_error *err);

/*
 * Records a failure and returns `code` (a negative errno) so callers can
 * write `return placefs_error_set(err, -EINVAL, PLACEFS_E_FORMAT, ...)`.
 * err may be NULL; the message is truncated to fit. Only the first error
 * recorded since the last clear is kept, so the most specific cause wins
 * over callers that add context with placefs_error_prefix().
 */
int placefs_error_set(struct placefs_error *err, int code, enum placefs_errkind kind,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Prepends "<text>: " to an existing message (for context such as a path). */
void placefs_error_prefix(struct placefs_error *err, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* Short stable name of a kind, e.g. "duplicate-gpu". */
const char *placefs_errkind_name(enum placefs_errkind kind);

/*
 * Exit statuses of the programs, documented in placefs(1) and placefs-plan(1).
 * The values are part of the user interface and must never change.
 */
enum placefs_exit {
	PLACEFS_EXIT_OK = 0,
	PLACEFS_EXIT_ERROR = 1,      /* any other failure */
	PLACEFS_EXIT_USAGE = 2,      /* bad command line */
	PLACEFS_EXIT_CHECKPOINT = 3, /* bad checkpoint, index or source */
	PLACEFS_EXIT_LIMIT = 4,      /* invalid staging limit */
	PLACEFS_EXIT_EMPTY = 5,      /* the selection matched no tensor */
	PLACEFS_EXIT_DUP_GPU = 6,    /* duplicate names among GPU-placed tensors */
	PLACEFS_EXIT_DUP_CPU = 7,    /* duplicate names among CPU-placed tensors */
	PLACEFS_EXIT_OVERLAP = 8,    /* a name placed both on GPU and CPU */
	PLACEFS_EXIT_NAME = 9,       /* a tensor name that cannot be a file name */
	/* The remaining statuses are used by the placefs daemon only. */
	PLACEFS_EXIT_MOUNT = 10,   /* the FUSE session could not be created or mounted */
	PLACEFS_EXIT_LOOP = 11,    /* the session loop failed */
	PLACEFS_EXIT_STAGING = 12, /* the staging backend could not be created */
};

/*
 * The exit status for a program that fails with err before doing its work:
 * the kind picks the status (a missing file counts as a bad source, whichever
 * layer noticed it), and anything unclassified is PLACEFS_EXIT_ERROR.
 * err must not be NULL.
 */
int placefs_error_exit_status(const struct placefs_error *err);

/*
 * Writes at most the first `max` bytes of s, escaped, into out (outlen > 0) as
 * they should appear between double quotes in a one-line message: '"' and
 * '\\' are escaped and control bytes become \xNN. When s is longer than
 * what was written, "..." follows, room permitting. The quotes themselves are
 * not written. Always NUL-terminates out.
 */
void placefs_error_quote(const char *s, size_t max, char *out, size_t outlen);

#endif
