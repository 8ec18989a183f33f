/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/slice.h"

static int bad(struct placefs_error *err, const char *name, const struct placefs_slice *s,
               const char *why)
{
	return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
	                         "tensor \"%s\": slice dim %u [%llu, +%llu): %s", name,
	                         (unsigned)s->dim, (unsigned long long)s->start,
	                         (unsigned long long)s->len, why);
}

/* The product of shape[lo..hi), or -1 on overflow (1 when lo == hi). */
static int shape_product(const uint64_t *shape, uint32_t lo, uint32_t hi, uint64_t *out)
{
	uint64_t p = 1;
	uint32_t i;

	for (i = lo; i < hi; i++)
		if (__builtin_mul_overflow(p, shape[i], &p))
			return -1;
	*out = p;
	return 0;
}

void placefs_slice_whole(uint64_t nbytes, struct placefs_slice_layout *out)
{
	memset(out, 0, sizeof(*out));
	if (nbytes == 0)
		return;
	out->rows = 1;
	out->seg_bytes = nbytes;
	out->stride = nbytes;
	out->nbytes = nbytes;
}

int placefs_slice_layout(const char *name, enum placefs_dtype dt, uint32_t ndim,
                         const uint64_t *shape, uint64_t tensor_bytes,
                         const struct placefs_slice *s, struct placefs_slice_layout *out,
                         struct placefs_error *err)
{
	uint64_t bits = placefs_dtype_bits(dt), outer, inner, d, end, inner_bits, total_bits;
	uint64_t off_bits, seg_bits, stride_bits, all_bits;

	if (!name)
		name = "(unnamed)";
	memset(out, 0, sizeof(*out));
	if (s->dim > PLACEFS_SLICE_DIM_MAX)
		return bad(err, name, s, "only dimension 0 (rows) or 1 (columns) can be sliced");
	if (ndim <= s->dim || !shape)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "tensor \"%s\": slice dim %u of a tensor of %u "
		                         "dimension%s",
		                         name, (unsigned)s->dim, (unsigned)ndim,
		                         ndim == 1 ? "" : "s");
	if (bits == 0)
		return bad(err, name, s, "the tensor's dtype is unknown");
	d = shape[s->dim];
	if (s->len == 0)
		return bad(err, name, s, "the slice is empty (len 0)");
	if (__builtin_add_overflow(s->start, s->len, &end) || end > d) {
		char why[96];

		snprintf(why, sizeof(why), "it ends past dimension %u of size %llu",
		         (unsigned)s->dim, (unsigned long long)d);
		return bad(err, name, s, why);
	}
	if (shape_product(shape, 0, s->dim, &outer) != 0 ||
	    shape_product(shape, s->dim + 1, ndim, &inner) != 0 ||
	    __builtin_mul_overflow(inner, bits, &inner_bits) ||
	    __builtin_mul_overflow(inner_bits, d, &stride_bits) ||
	    __builtin_mul_overflow(stride_bits, outer, &total_bits))
		return bad(err, name, s, "the tensor's size overflows 64 bits");
	if (total_bits % 8 != 0 || total_bits / 8 != tensor_bytes) {
		char why[128];

		snprintf(why, sizeof(why),
		         "its shape and dtype make %llu bits, not the %llu bytes it has",
		         (unsigned long long)total_bits, (unsigned long long)tensor_bytes);
		return bad(err, name, s, why);
	}
	if (total_bits == 0)
		return 0; /* a dimension of size 0: the slice has no bytes */
	/* Both fit: they are at most stride_bits <= total_bits. */
	off_bits = s->start * inner_bits;
	seg_bits = s->len * inner_bits;
	if (outer == 1 || s->len == d) {
		/* Contiguous: rows of dimension 0, one row, or every column. */
		all_bits = seg_bits * outer; /* <= total_bits */
		if (off_bits % 8 != 0 || all_bits % 8 != 0)
			return bad(err, name, s,
			           "its start or length is not a whole number of bytes "
			           "(sub-byte dtype)");
		out->offset = off_bits / 8;
		out->rows = 1;
		out->seg_bytes = all_bits / 8;
		out->stride = out->seg_bytes;
		out->nbytes = out->seg_bytes;
		return 0;
	}
	if (off_bits % 8 != 0 || seg_bits % 8 != 0 || stride_bits % 8 != 0)
		return bad(err, name, s,
		           "its start, length or row stride is not a whole number of bytes "
		           "(sub-byte dtype)");
	out->offset = off_bits / 8;
	out->rows = outer;
	out->seg_bytes = seg_bits / 8;
	out->stride = stride_bits / 8;
	out->nbytes = outer * out->seg_bytes; /* <= tensor_bytes */
	return 0;
}

int placefs_slice_check(const char *name, const struct placefs_slice_layout *l,
                        uint64_t tensor_bytes, struct placefs_error *err)
{
	uint64_t n, last, end;

	if (!name)
		name = "(unnamed)";
	if (__builtin_mul_overflow(l->rows, l->seg_bytes, &n) || n != l->nbytes)
		goto bad;
	if (l->nbytes == 0) {
		if (l->rows != 0 || l->seg_bytes != 0)
			goto bad;
		return 0;
	}
	if (l->rows > 1 && l->stride < l->seg_bytes)
		goto bad;
	if (__builtin_mul_overflow(l->rows - 1, l->stride, &last) ||
	    __builtin_add_overflow(last, l->offset, &last) ||
	    __builtin_add_overflow(last, l->seg_bytes, &end) || end > tensor_bytes)
		goto bad;
	return 0;
bad:
	return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
	                         "tensor \"%s\": slice layout of %llu x %llu bytes at offset %llu, "
	                         "stride %llu (%llu bytes) does not lie within its %llu bytes",
	                         name, (unsigned long long)l->rows,
	                         (unsigned long long)l->seg_bytes, (unsigned long long)l->offset,
	                         (unsigned long long)l->stride, (unsigned long long)l->nbytes,
	                         (unsigned long long)tensor_bytes);
}

int placefs_slice_contiguous(const struct placefs_slice_layout *l)
{
	return l->rows <= 1;
}

uint64_t placefs_slice_src(const struct placefs_slice_layout *l, uint64_t x, uint64_t *run)
{
	uint64_t r = x / l->seg_bytes, w = x % l->seg_bytes;

	*run = l->seg_bytes - w;
	return l->offset + r * l->stride + w;
}
