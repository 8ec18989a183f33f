/* SPDX-License-Identifier: MIT */
/*
 * name: tensor name <-> mount file name.
 *
 * Encoding: '%' -> "%25", '/' -> "%2F", a leading '.' -> "%2E", and each
 * byte of a C1 control (U+0080-U+009F) or a bidirectional formatting
 * character (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) as %XX
 * (U+202E -> "%E2%80%AE"), so that no file name hides or reorders what a
 * listing shows; every other byte is kept. The mapping is injective. An
 * empty name, a name with a C0 control character (bytes 0x01-0x1f and 0x7f),
 * or an encoded name longer than 255 bytes is refused.
 */
#ifndef PLACEFS_NAME_H
#define PLACEFS_NAME_H

#include <stddef.h>

#include "common/error.h"

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
