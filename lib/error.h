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

#endif
