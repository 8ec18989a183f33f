/* SPDX-License-Identifier: MIT */
/*
 * name: tensor name <-> mount file name.
 *
 * Encoding: '%' -> "%25", '/' -> "%2F", and a leading '.' -> "%2E"; every
 * other byte is kept. The mapping is injective. An empty name, a name with a
 * control character (bytes 0x01-0x1f and 0x7f), or an encoded name longer
 * than 255 bytes is refused.
 */
#ifndef PLACEFS_NAME_H
#define PLACEFS_NAME_H

#include <stddef.h>

#include "error.h"

#define PLACEFS_NAME_MAX 255

/*
 * Encodes `name` into out[PLACEFS_NAME_MAX + 1]. Returns 0, or -EINVAL /
 * -ENAMETOOLONG with kind PLACEFS_E_NAME and a message naming the tensor.
 */
int placefs_name_encode(const char *name, char out[PLACEFS_NAME_MAX + 1],
                        struct placefs_error *err);

/*
 * Decodes an encoded file name into out (at least strlen(fname) + 1 bytes).
 * Returns 0, or -EINVAL if fname is not a valid encoding (stray '%', bad hex,
 * or an escape the encoder never emits).
 */
int placefs_name_decode(const char *fname, char *out, size_t outlen);

#endif
