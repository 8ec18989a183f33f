/* SPDX-License-Identifier: MIT */
/*
 * size: the byte-size grammar shared by the staging limit
 * (INSTANTTENSOR_BUFFER_SIZE, --buffer-size, -o buffer_size=) and every other
 * size option.
 *
 *   size   := digits [suffix]
 *   digits := [0-9]+           (ASCII only; no sign, space, '_', '.', 0x)
 *   suffix := K | M | G | T | KiB | MiB | GiB | TiB   (all powers of 1024)
 *
 * The value must be > 0 and fit in uint64_t after scaling.
 */
#ifndef PLACEFS_SIZE_H
#define PLACEFS_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/*
 * Parses `text`. `origin` names where it came from for the message
 * (e.g. "INSTANTTENSOR_BUFFER_SIZE" or "--buffer-size"). Returns 0, or
 * -EINVAL (garbage, empty, zero, negative, fractional, hex) / -ERANGE
 * (overflow) with kind PLACEFS_E_LIMIT and a message quoting the value.
 */
int placefs_size_parse(const char *text, const char *origin, uint64_t *out,
                       struct placefs_error *err);

/* Formats bytes for humans: "512 B", "1.5 KiB", "8 MiB", "2.25 GiB". */
void placefs_size_format(uint64_t bytes, char *buf, size_t len);

#endif
