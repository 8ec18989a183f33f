/* SPDX-License-Identifier: MIT */
/*
 * dtype: the safetensors element types (the 22 of the current spec) and
 * their widths in bits. Names are exact and case-sensitive.
 */
#ifndef PLACEFS_DTYPE_H
#define PLACEFS_DTYPE_H

#include <stddef.h>

enum placefs_dtype {
	PLACEFS_DT_INVALID = 0,
	PLACEFS_DT_BOOL,
	PLACEFS_DT_U8,
	PLACEFS_DT_I8,
	PLACEFS_DT_F8_E5M2,
	PLACEFS_DT_F8_E4M3,
	PLACEFS_DT_F8_E8M0,
	PLACEFS_DT_F8_E4M3FNUZ,
	PLACEFS_DT_F8_E5M2FNUZ,
	PLACEFS_DT_F4,
	PLACEFS_DT_F6_E2M3,
	PLACEFS_DT_F6_E3M2,
	PLACEFS_DT_I16,
	PLACEFS_DT_U16,
	PLACEFS_DT_F16,
	PLACEFS_DT_BF16,
	PLACEFS_DT_I32,
	PLACEFS_DT_U32,
	PLACEFS_DT_F32,
	PLACEFS_DT_C64,
	PLACEFS_DT_F64,
	PLACEFS_DT_I64,
	PLACEFS_DT_U64,
	PLACEFS_DT_COUNT
};

/* Looks up an exact name of `len` bytes; PLACEFS_DT_INVALID when unknown. */
enum placefs_dtype placefs_dtype_from_name(const char *name, size_t len);
/* Canonical name ("BF16"), or "INVALID". */
const char *placefs_dtype_name(enum placefs_dtype dt);
/* Bits per element (4, 6, 8, 16, 32 or 64); 0 for PLACEFS_DT_INVALID. */
unsigned placefs_dtype_bits(enum placefs_dtype dt);

#endif
