/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/io.h"
#include "format/safetensors.h"
#include "common/strbuf.h"
#include "format/stwrite.h"

/*
 * Payload bytes go through a buffer this large: big enough that write()
 * calls cost nothing next to the page-cache copy, small enough to stay out
 * of the way of the benchmarks' memory.
 */
#define STWRITE_BUF (8u << 20)

/* The splitmix64 finaliser: a cheap, well-mixed bijection of 64 bits. */
static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* FNV-1a over the name, then mixed, so that similar names get unrelated keys. */
static uint64_t name_key(uint64_t seed, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
		h ^= *p;
		h *= 0x100000001b3ULL;
	}
	return mix64(seed ^ mix64(h));
}

/*
 * Bits cleared in every 64-bit word so that float elements are finite.
 * Words are taken relative to the tensor start and every element width
 * divides 64, so each word holds whole elements at fixed bit positions.
 * Clearing the top exponent bit caps the exponent below all-ones (no Inf or
 * NaN). For the 8-bit float formats the same idea applies per byte: E5M2
 * and E4M3 keep their exponent top at bit 6; E8M0's only NaN is 0xff and the
 * FNUZ formats' only NaN is 0x80, both gone when bit 7 is clear.
 */
static uint64_t dtype_mask(enum placefs_dtype dt)
{
	switch (dt) {
	case PLACEFS_DT_F16:
	case PLACEFS_DT_BF16: return ~0x4000400040004000ULL;
	case PLACEFS_DT_F32:
	case PLACEFS_DT_C64: return ~0x4000000040000000ULL;
	case PLACEFS_DT_F64: return ~0x4000000000000000ULL;
	case PLACEFS_DT_F8_E5M2:
	case PLACEFS_DT_F8_E4M3: return ~0x4040404040404040ULL;
	case PLACEFS_DT_F8_E8M0:
	case PLACEFS_DT_F8_E4M3FNUZ:
	case PLACEFS_DT_F8_E5M2FNUZ: return ~0x8080808080808080ULL;
	default: return ~0ULL;
	}
}

static inline uint64_t fill_word(uint64_t key, uint64_t mask, uint64_t w)
{
	return mix64(key + (w + 1) * 0x9e3779b97f4a7c15ULL) & mask;
}

/* Stores v little-endian, whatever the host order. */
static inline void store_le64(uint8_t *p, uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(p, &v, 8);
#else
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
#endif
}

void placefs_stwrite_fill(uint64_t seed, const char *name, enum placefs_dtype dtype, uint64_t pos,
                          void *buf, size_t len)
{
	const uint64_t key = name_key(seed, name);
	const uint64_t mask = dtype_mask(dtype);
	uint8_t *out = buf;
	uint64_t w = pos >> 3;
	unsigned skip = (unsigned)(pos & 7);
	uint8_t tmp[8];

	if (len == 0)
		return;
	/* A leading partial word. */
	if (skip) {
		size_t take = 8 - skip < len ? 8 - skip : len;

		store_le64(tmp, fill_word(key, mask, w));
		memcpy(out, tmp + skip, take);
		out += take;
		len -= take;
		w++;
	}
	/* Whole words: the hot loop. */
	while (len >= 8) {
		store_le64(out, fill_word(key, mask, w));
		out += 8;
		len -= 8;
		w++;
	}
	if (len) {
		store_le64(tmp, fill_word(key, mask, w));
		memcpy(out, tmp, len);
	}
}

int placefs_stwrite_nbytes(enum placefs_dtype dtype, uint32_t ndim, const uint64_t *shape,
                           uint64_t *out)
{
	unsigned bits = placefs_dtype_bits(dtype);
	uint64_t n = 1;

	if (bits == 0 || (ndim > 0 && !shape))
		return -EINVAL;
	/* A left fold from 1, as the reference reader: [0, 2^64-1] is 0 elements. */
	for (uint32_t i = 0; i < ndim; i++) {
		if (__builtin_mul_overflow(n, shape[i], &n))
			return -EOVERFLOW;
	}
	if (__builtin_mul_overflow(n, (uint64_t)bits, &n))
		return -EOVERFLOW;
	if (n % 8)
		return -EINVAL;
	*out = n / 8;
	return 0;
}

/* 1 when s is well-formed UTF-8 (no overlong forms, surrogates or values past U+10FFFF). */
static int utf8_ok(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	while (*p) {
		unsigned c = *p, n, min;
		uint32_t cp;

		if (c < 0x80) {
			p++;
			continue;
		}
		if ((c & 0xe0) == 0xc0) {
			n = 1, cp = c & 0x1f, min = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			n = 2, cp = c & 0x0f, min = 0x800;
		} else if ((c & 0xf8) == 0xf0) {
			n = 3, cp = c & 0x07, min = 0x10000;
		} else {
			return 0;
		}
		for (unsigned i = 1; i <= n; i++) {
			if ((p[i] & 0xc0) != 0x80)
				return 0;
			cp = (cp << 6) | (p[i] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		p += n + 1;
	}
	return 1;
}

static int cmp_name_ptr(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * Finds a string present twice among the n strings get(v, i) (tensor
 * names, or metadata keys), sorting a copy so that many names cost
 * n log n. Sets *dup to it, or NULL. Returns 0 or -ENOMEM.
 */
static int find_dup(const char *(*get)(const void *, size_t), const void *v, size_t n,
                    const char **dup)
{
	const char **names;

	*dup = NULL;
	if (n < 2)
		return 0;
	names = calloc(n, sizeof(*names));
	if (!names)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		names[i] = get(v, i);
	qsort(names, n, sizeof(*names), cmp_name_ptr);
	for (size_t i = 1; i < n && !*dup; i++) {
		if (strcmp(names[i - 1], names[i]) == 0)
			*dup = names[i];
	}
	free(names);
	return 0;
}

static const char *tensor_name_at(const void *v, size_t i)
{
	return ((const struct placefs_stwrite_tensor *)v)[i].name;
}

static const char *meta_key_at(const void *v, size_t i)
{
	return ((const char *const *)v)[2 * i];
}

/* Refuses names and keys the reader would refuse, so a written file always loads. */
static int check_names(const struct placefs_stwrite_tensor *t, size_t n, const char *const *meta,
                       size_t nmeta, const char *path, struct placefs_error *err)
{
	const char *dup;

	for (size_t i = 0; i < n; i++) {
		if (!t[i].name)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "%s: tensor %zu has no name", path, i);
		if (!utf8_ok(t[i].name))
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "%s: tensor %zu: name is not valid UTF-8", path,
			                         i);
		if (strcmp(t[i].name, "__metadata__") == 0)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "%s: \"__metadata__\" cannot be a tensor name",
			                         path);
	}
	for (size_t i = 0; i < nmeta; i++) {
		if (!meta[2 * i] || !meta[2 * i + 1])
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "%s: metadata entry %zu is NULL", path, i);
		if (!utf8_ok(meta[2 * i]) || !utf8_ok(meta[2 * i + 1]))
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "%s: metadata entry %zu is not valid UTF-8", path,
			                         i);
	}
	if (find_dup(tensor_name_at, t, n, &dup) != 0)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "%s: out of memory", path);
	if (dup)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: tensor \"%s\" is listed twice", path, dup);
	if (find_dup(meta_key_at, meta, nmeta, &dup) != 0)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "%s: out of memory", path);
	if (dup)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "%s: metadata key \"%s\" is listed twice", path, dup);
	return 0;
}

static int add_u64_array(struct placefs_strbuf *sb, const uint64_t *v, size_t n)
{
	int rc = placefs_strbuf_add(sb, "[", 1);

	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = placefs_strbuf_addf(sb, i ? ",%" PRIu64 : "%" PRIu64, v[i]);
	return rc ? rc : placefs_strbuf_add(sb, "]", 1);
}

/*
 * Builds the padded header JSON into sb and the payload sizes into nbytes.
 * Compact, in the given order, like the Python writer.
 */
static int build_header(const char *path, const struct placefs_stwrite_tensor *t, size_t n,
                        const char *const *meta, size_t nmeta, uint64_t *nbytes,
                        struct placefs_strbuf *sb, struct placefs_error *err)
{
	uint64_t off = 0;
	int rc = placefs_strbuf_add(sb, "{", 1);
	int first = 1;

	if (rc == 0 && meta) {
		rc = placefs_strbuf_adds(sb, "\"__metadata__\":{");
		for (size_t i = 0; rc == 0 && i < nmeta; i++) {
			if (i)
				rc = placefs_strbuf_add(sb, ",", 1);
			if (rc == 0)
				rc = placefs_strbuf_add_json_string(sb, meta[2 * i]);
			if (rc == 0)
				rc = placefs_strbuf_add(sb, ":", 1);
			if (rc == 0)
				rc = placefs_strbuf_add_json_string(sb, meta[2 * i + 1]);
		}
		if (rc == 0)
			rc = placefs_strbuf_add(sb, "}", 1);
		first = 0;
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		uint64_t end;
		uint64_t offs[2];
		int nrc = placefs_stwrite_nbytes(t[i].dtype, t[i].ndim, t[i].shape, &nbytes[i]);

		if (nrc == -EOVERFLOW)
			return placefs_error_set(err, -EOVERFLOW, PLACEFS_E_USAGE,
			                         "%s: tensor \"%s\": size of shape x %s overflows",
			                         path, t[i].name, placefs_dtype_name(t[i].dtype));
		if (nrc && placefs_dtype_bits(t[i].dtype) == 0)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "%s: tensor \"%s\" has an invalid dtype", path,
			                         t[i].name);
		if (nrc && t[i].ndim > 0 && !t[i].shape)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "%s: tensor \"%s\" has %" PRIu32
			                         " dimensions but no shape",
			                         path, t[i].name, t[i].ndim);
		if (nrc)
			return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
			                         "%s: tensor \"%s\": %s elements must fill whole "
			                         "bytes",
			                         path, t[i].name, placefs_dtype_name(t[i].dtype));
		if (__builtin_add_overflow(off, nbytes[i], &end))
			return placefs_error_set(err, -EOVERFLOW, PLACEFS_E_USAGE,
			                         "%s: tensor \"%s\": data offsets overflow", path,
			                         t[i].name);
		if (!first)
			rc = placefs_strbuf_add(sb, ",", 1);
		first = 0;
		if (rc == 0)
			rc = placefs_strbuf_add_json_string(sb, t[i].name);
		if (rc == 0)
			rc = placefs_strbuf_addf(sb, ":{\"dtype\":\"%s\",\"shape\":",
			                         placefs_dtype_name(t[i].dtype));
		if (rc == 0)
			rc = add_u64_array(sb, t[i].shape, t[i].ndim);
		if (rc == 0)
			rc = placefs_strbuf_adds(sb, ",\"data_offsets\":");
		offs[0] = off;
		offs[1] = end;
		if (rc == 0)
			rc = add_u64_array(sb, offs, 2);
		if (rc == 0)
			rc = placefs_strbuf_add(sb, "}", 1);
		off = end;
	}
	if (rc == 0)
		rc = placefs_strbuf_add(sb, "}", 1);
	/* Pad with spaces so the data buffer starts 8-byte aligned. */
	while (rc == 0 && sb->len % 8)
		rc = placefs_strbuf_add(sb, " ", 1);
	if (rc)
		return placefs_error_set(err, rc, rc == -ENOMEM ? PLACEFS_E_NOMEM : PLACEFS_E_USAGE,
		                         "%s: cannot build the header: %s", path, strerror(-rc));
	/* The whole file, 8 + N + data, must have a 64-bit size too. */
	if (__builtin_add_overflow(off, (uint64_t)sb->len + 8, &off))
		return placefs_error_set(err, -EOVERFLOW, PLACEFS_E_USAGE,
		                         "%s: file size overflows 64 bits", path);
	if (sb->len > PLACEFS_ST_HEADER_MAX)
		return placefs_error_set(err, -EFBIG, PLACEFS_E_USAGE,
		                         "%s: header of %zu bytes exceeds the %llu-byte limit",
		                         path, sb->len, PLACEFS_ST_HEADER_MAX);
	return 0;
}

/* Streams the payloads of all tensors through one buffer. */
static int write_payloads(int fd, const struct placefs_stwrite_tensor *t, size_t n,
                          const uint64_t *nbytes, uint64_t seed)
{
	uint8_t *buf = malloc(STWRITE_BUF);
	size_t used = 0;
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		uint64_t pos = 0;

		while (pos < nbytes[i]) {
			uint64_t left = nbytes[i] - pos;
			size_t room = STWRITE_BUF - used;
			size_t take = left < room ? (size_t)left : room;

			placefs_stwrite_fill(seed, t[i].name, t[i].dtype, pos, buf + used, take);
			used += take;
			pos += take;
			if (used == STWRITE_BUF) {
				rc = placefs_io_write_full(fd, buf, used);
				if (rc)
					break;
				used = 0;
			}
		}
	}
	if (rc == 0 && used)
		rc = placefs_io_write_full(fd, buf, used);
	free(buf);
	return rc;
}

int placefs_stwrite_file(const char *path, const struct placefs_stwrite_tensor *t, size_t n,
                         const char *const *meta, size_t nmeta, uint64_t seed,
                         struct placefs_error *err)
{
	struct placefs_strbuf hdr;
	uint64_t *nbytes = NULL;
	uint8_t len8[8];
	char *tmp = NULL;
	int fd = -1;
	int rc;

	placefs_strbuf_init(&hdr);
	if (!path || (n && !t) || (nmeta && !meta))
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "stwrite: invalid arguments");
	rc = check_names(t, n, meta, nmeta, path, err);
	if (rc)
		return rc;
	nbytes = calloc(n ? n : 1, sizeof(*nbytes));
	if (!nbytes)
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "%s: out of memory", path);
	rc = build_header(path, t, n, meta, nmeta, nbytes, &hdr, err);
	if (rc)
		goto out_free;
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)((uint64_t)hdr.len >> (8 * i));

	/* Write beside the target and rename, so a failure leaves nothing half-written. */
	if (asprintf(&tmp, "%s.tmp", path) < 0) {
		tmp = NULL;
		rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "%s: out of memory", path);
		goto out_free;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO, "cannot create %s: %s", tmp,
		                       strerror(errno));
		goto out_free;
	}
	rc = placefs_io_write_full(fd, len8, sizeof(len8));
	if (rc == 0)
		rc = placefs_io_write_full(fd, hdr.buf, hdr.len);
	if (rc == 0)
		rc = write_payloads(fd, t, n, nbytes, seed);
	if (rc) {
		placefs_error_set(err, rc, rc == -ENOMEM ? PLACEFS_E_NOMEM : PLACEFS_E_IO,
		                  "cannot write %s: %s", tmp, strerror(-rc));
		goto out_unlink;
	}
	if (close(fd) != 0) {
		fd = -1;
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO, "cannot write %s: %s", tmp,
		                       strerror(errno));
		goto out_unlink;
	}
	fd = -1;
	if (rename(tmp, path) != 0) {
		rc = placefs_error_set(err, -errno, PLACEFS_E_IO, "cannot rename %s to %s: %s", tmp,
		                       path, strerror(errno));
		goto out_unlink;
	}
	goto out_free;

out_unlink:
	if (fd >= 0)
		close(fd);
	unlink(tmp);
out_free:
	free(tmp);
	free(nbytes);
	placefs_strbuf_release(&hdr);
	return rc;
}
