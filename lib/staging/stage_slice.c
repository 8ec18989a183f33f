/* SPDX-License-Identifier: MIT */
/*
 * The stager's strided slices: how a slice's bytes are read (segments or
 * whole rows compacted in place) and how a job is cut into pieces for it.
 */
#include "config.h"

#include <stdbool.h>
#include <string.h>

#include "staging/stage_i.h"

/* ---- strided slices --------------------------------------------------------- */

/*
 * Reads slice bytes [off, off + n) of a strided job into buf, compacted.
 * Rows mode: pieces are whole segments and the source bytes they span fit
 * the chunk (stage_job_set_strided()), so one pread brings them all and the
 * segments move down into place, front to back (each lands at or before
 * where it was read). Segments mode: one pread per segment (or part of one).
 */
int stage_read_strided(struct placefs_stager *st, struct job *j, uint8_t *buf, uint64_t off,
                       uint64_t n, struct placefs_error *err)
{
	const struct placefs_slice_layout *l = &j->lay;
	uint64_t run, src = placefs_slice_src(l, off, &run), done, span, k, i;
	int rc;

	if (j->rows_mode) {
		k = n / l->seg_bytes;
		span = (k - 1) * l->stride + l->seg_bytes;
		rc = stage_read_full(st, j->fd, buf, span, j->file_off + src, j->name, err);
		if (rc != 0)
			return rc;
		for (i = 1; i < k; i++)
			memmove(buf + i * l->seg_bytes, buf + i * l->stride, (size_t)l->seg_bytes);
		CNT_ADD(st, read_bytes, span);
		CNT_ADD(st, strided_read_bytes, span);
		return 0;
	}
	for (done = 0; done < n; done += run) {
		src = placefs_slice_src(l, off + done, &run);
		if (run > n - done)
			run = n - done;
		rc = stage_read_full(st, j->fd, buf + done, run, j->file_off + src, j->name, err);
		if (rc != 0)
			return rc;
	}
	CNT_ADD(st, read_bytes, n);
	CNT_ADD(st, strided_read_bytes, n);
	return 0;
}

/*
 * Segments or rows for a strided slice with this stager's chunks. "auto":
 * rows when a chunk holds at least two rows, a whole row (the stride) is at
 * most SLICE_ROWS_STRIDE_MAX bytes and the rows read at most
 * SLICE_ROWS_RATIO times the slice's bytes. A segment costs a pread each;
 * reading whole rows costs copying the bytes skipped, twice (page cache,
 * then compaction). Measured with tests/bench/slicebench on the H200
 * machine, 16 cores, into cuda:0 (doc/STAGING.md, "Devices and slices"):
 * rows won for rows of 2-8 KiB (12.4 against 7.5 GB/s for 4 KiB segments of
 * 8 KiB rows, 3.2 against 2.3 for 1 KiB ones), segments for rows of 28 KiB
 * and more (8.5 against 6.2 GB/s for 3.5 KiB segments of 28 KiB rows).
 */
#define SLICE_ROWS_STRIDE_MAX (16ULL << 10)
#define SLICE_ROWS_RATIO      8
static bool slice_rows(const struct placefs_stager *st, const struct placefs_slice_layout *l)
{
	uint64_t chunk = st->info.chunk_bytes;

	if (l->seg_bytes > chunk || l->stride > chunk - l->seg_bytes)
		return false; /* not two rows' worth in one chunk: rows cannot help */
	if (st->slice_read == PLACEFS_STAGE_SLICE_ROWS)
		return true;
	if (st->slice_read == PLACEFS_STAGE_SLICE_SEGMENTS)
		return false;
	return l->stride <= SLICE_ROWS_STRIDE_MAX && l->stride / l->seg_bytes <= SLICE_ROWS_RATIO;
}

/* Makes j (fresh from stage_job_init() over the slice's bytes) read the strided layout l. */
void stage_job_set_strided(struct placefs_stager *st, struct job *j,
                           const struct placefs_slice_layout *l)
{
	uint64_t chunk = st->info.chunk_bytes, k;

	j->strided = true;
	j->lay = *l;
	j->rows_mode = slice_rows(st, l);
	if (j->rows_mode) {
		/* k whole segments whose rows span at most a chunk: (k-1)*stride + seg <= chunk. */
		k = (chunk - l->seg_bytes) / l->stride + 1;
		j->piece_bytes = k * l->seg_bytes;
	} else {
		j->piece_bytes = chunk;
	}
	j->npieces = j->nbytes / j->piece_bytes + (j->nbytes % j->piece_bytes != 0);
}
