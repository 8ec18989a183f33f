/* SPDX-License-Identifier: MIT */
/*
 * size: the byte-size grammar shared by the staging limit
 * (INSTANTTENSOR_BUFFER_SIZE, placefs-plan --buffer-size, placefs -o
 * buffer_size=) and every other size option of the programs.
 *
 *   size   := digits [suffix]
 *   digits := [0-9]+           (ASCII only; no sign, space, '_', '.', 0x)
 *   suffix := K | M | G | T | KiB | MiB | GiB | TiB   (powers of 1024)
 *           | KB | MB | GB | TB                      (powers of 1000)
 *
 * So "64M" and "64MiB" are 67108864 bytes and "64MB" is 64000000, as
 * Hugging Face writes max_shard_size ("5GB"). Suffixes are case-sensitive;
 * "B", "k", "m", "P" and spaces are refused, and the message of an unknown
 * suffix lists the accepted ones.
 *
 * The value must be > 0 and fit in uint64_t after scaling.
 */
#ifndef PLACEFS_SIZE_H
#define PLACEFS_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

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
