/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <string.h>

#include "common/dtype.h"

struct dtype_info {
	const char *name;
	unsigned bits;
};

/* Indexed by enum placefs_dtype; the names are those of the safetensors spec. */
static const struct dtype_info dtype_table[PLACEFS_DT_COUNT] = {
        [PLACEFS_DT_INVALID] = {"INVALID", 0},
        [PLACEFS_DT_BOOL] = {"BOOL", 8},
        [PLACEFS_DT_U8] = {"U8", 8},
        [PLACEFS_DT_I8] = {"I8", 8},
        [PLACEFS_DT_F8_E5M2] = {"F8_E5M2", 8},
        [PLACEFS_DT_F8_E4M3] = {"F8_E4M3", 8},
        [PLACEFS_DT_F8_E8M0] = {"F8_E8M0", 8},
        [PLACEFS_DT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
        [PLACEFS_DT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
        [PLACEFS_DT_F4] = {"F4", 4},
        [PLACEFS_DT_F6_E2M3] = {"F6_E2M3", 6},
        [PLACEFS_DT_F6_E3M2] = {"F6_E3M2", 6},
        [PLACEFS_DT_I16] = {"I16", 16},
        [PLACEFS_DT_U16] = {"U16", 16},
        [PLACEFS_DT_F16] = {"F16", 16},
        [PLACEFS_DT_BF16] = {"BF16", 16},
        [PLACEFS_DT_I32] = {"I32", 32},
        [PLACEFS_DT_U32] = {"U32", 32},
        [PLACEFS_DT_F32] = {"F32", 32},
        [PLACEFS_DT_C64] = {"C64", 64},
        [PLACEFS_DT_F64] = {"F64", 64},
        [PLACEFS_DT_I64] = {"I64", 64},
        [PLACEFS_DT_U64] = {"U64", 64},
};

enum placefs_dtype placefs_dtype_from_name(const char *name, size_t len)
{
	if (!name)
		return PLACEFS_DT_INVALID;
	/* A linear scan of 22 short names is cheaper than anything cleverer. */
	for (int i = PLACEFS_DT_INVALID + 1; i < PLACEFS_DT_COUNT; i++) {
		const char *n = dtype_table[i].name;

		if (strlen(n) == len && memcmp(n, name, len) == 0)
			return (enum placefs_dtype)i;
	}
	return PLACEFS_DT_INVALID;
}

const char *placefs_dtype_name(enum placefs_dtype dt)
{
	if ((int)dt <= PLACEFS_DT_INVALID || dt >= PLACEFS_DT_COUNT)
		return "INVALID";
	return dtype_table[dt].name;
}

unsigned placefs_dtype_bits(enum placefs_dtype dt)
{
	if ((int)dt <= PLACEFS_DT_INVALID || dt >= PLACEFS_DT_COUNT)
		return 0;
	return dtype_table[dt].bits;
}
