/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "staging/backend.h"
#include "common/clock.h"
#include "staging/fill.h"
#include "staging/gate.h"
#include "staging/lookahead.h"
#include "ioctl.h"
#include "log.h"
#include "common/size.h"
#include "common/slice.h"
#include "staging/stage.h"
#include "staging/stagers.h"
#include "stats.h"
#include "ioctl_i.h"

/* ---- stats --------------------------------------------------------------------------- */

/* Values of "staging" computed when the document is made. */
struct staging_view {
	unsigned dests;   /* copy destinations the backend holds mapped */
	unsigned waiting; /* stages on threads of their own now */
	struct placefs_backend_dest_stats dest;
};

/*
 * The members of "staging" after "device" and "backend", in order: one row
 * each. Base 0 is the stager's snapshot, base 1 this module, base 2 the view.
 */
#define STAGER(path, member) PLACEFS_STAT(path, U64, 0, struct placefs_stager_stats, member)
#define OWN(path, member)    PLACEFS_STAT(path, ATOMIC_U64, 1, struct placefs_ioctl, member)
#define VIEW(path, member)   PLACEFS_STAT(path, UINT, 2, struct staging_view, member)

static const struct placefs_stat staging_rows[] = {
        STAGER("ring_bytes", ring_capacity),
        STAGER("ring_used", ring_used),
        STAGER("ring_high_water", ring_high_water),
        STAGER("host_buffer_bytes", host_buffer_bytes),
        STAGER("chunk_bytes", chunk_bytes),
        STAGER("io_threads", io_threads),
        STAGER("staged.copy.tensors", staged[PLACEFS_IOC_STAGE_COPY]),
        STAGER("staged.copy.bytes", staged_bytes[PLACEFS_IOC_STAGE_COPY]),
        STAGER("staged.borrow.tensors", staged[PLACEFS_IOC_STAGE_BORROW]),
        STAGER("staged.borrow.bytes", staged_bytes[PLACEFS_IOC_STAGE_BORROW]),
        STAGER("waits", ring_waits),
        STAGER("wait_ns", ring_wait_ns),
        STAGER("errors", errors),
        OWN("refused", refused),
        STAGER("leases", leases),
        STAGER("released", released),
        STAGER("read_bytes", read_bytes),
        STAGER("prefetch.issued", prefetch_issued),
        STAGER("prefetch.hits", prefetch_hits),
        STAGER("prefetch.evicted", prefetch_evicted),
        STAGER("prefetch.cancelled", prefetch_cancelled),
        STAGER("prefetch.held", prefetch_held),
        OWN("stage_threads", threads),
        VIEW("stage_threads_now", waiting),
        OWN("busy", busy),
        OWN("borrow_refused", denied),
        OWN("share_over", share_over),
        VIEW("dests", dests),
        PLACEFS_STAT("dest_imports", U64, 2, struct staging_view, dest.imports),
        PLACEFS_STAT("dest_import_ns", U64, 2, struct staging_view, dest.import_ns),
        PLACEFS_STAT("dest_import_waits", U64, 2, struct staging_view, dest.import_waits),
        STAGER("zero_copy.on", zero_copy),
        STAGER("zero_copy.bytes", zero_copy_bytes),
        STAGER("zero_copy.registrations", zero_copy_registrations),
        STAGER("zero_copy.registration_ns", zero_copy_registration_ns),
        STAGER("zero_copy.registered_bytes", zero_copy_registered_bytes),
        STAGER("zero_copy.refused", zero_copy_refused),
        STAGER("zero_copy.stale", zero_copy_stale),
        STAGER("slices.tensors", slices),
        STAGER("slices.bytes", slice_bytes),
        STAGER("slices.strided_read_bytes", strided_read_bytes),
        STAGER("direct.on", direct),
        STAGER("direct.stages", direct_stages),
        STAGER("direct.bytes", direct_bytes),
};

/*
 * One element of "staging.devices" per stager, in the order of the -o
 * device= list, after "device" (its name), "index" and "position". Base 0
 * is that stager's snapshot.
 */
static const struct placefs_stat device_rows[] = {
        STAGER("ring_bytes", ring_capacity),
        STAGER("ring_used", ring_used),
        STAGER("ring_high_water", ring_high_water),
        STAGER("host_buffer_bytes", host_buffer_bytes),
        STAGER("io_threads", io_threads),
        STAGER("staged.copy.tensors", staged[PLACEFS_IOC_STAGE_COPY]),
        STAGER("staged.copy.bytes", staged_bytes[PLACEFS_IOC_STAGE_COPY]),
        STAGER("staged.borrow.tensors", staged[PLACEFS_IOC_STAGE_BORROW]),
        STAGER("staged.borrow.bytes", staged_bytes[PLACEFS_IOC_STAGE_BORROW]),
        STAGER("waits", ring_waits),
        STAGER("wait_ns", ring_wait_ns),
        STAGER("errors", errors),
        STAGER("leases", leases),
        STAGER("released", released),
        STAGER("read_bytes", read_bytes),
        STAGER("prefetch.issued", prefetch_issued),
        STAGER("prefetch.hits", prefetch_hits),
        STAGER("zero_copy.bytes", zero_copy_bytes),
        STAGER("slices.tensors", slices),
        STAGER("slices.bytes", slice_bytes),
        STAGER("slices.strided_read_bytes", strided_read_bytes),
        STAGER("direct.stages", direct_stages),
        STAGER("direct.bytes", direct_bytes),
};

/* READ mode (the filler), after the ring's rows; also without a ring. */
#define FILL(path, member) PLACEFS_STAT(path, U64, 0, struct placefs_fill_stats, member)

static const struct placefs_stat read_rows[] = {
        FILL("read.threads", threads),       FILL("read.piece_bytes", piece_bytes),
        FILL("read.tensors", copies),        FILL("read.bytes", bytes),
        FILL("read.errors", errors),         FILL("read.ns", ns),
        FILL("read.mapped_bytes", mapped),   FILL("read.spliced_bytes", spliced),
        FILL("read.bounced_bytes", bounced), FILL("read.now", busy_copies),
};

/* STAGE_BATCH, last. */
struct batch_view {
	uint64_t threads, requests, entries, failed, moves, lookahead;
};

#define BATCH(path, member) PLACEFS_STAT(path, U64, 0, struct batch_view, member)

static const struct placefs_stat batch_rows[] = {
        BATCH("batch.threads", threads), BATCH("batch.requests", requests),
        BATCH("batch.entries", entries), BATCH("batch.failed", failed),
        BATCH("batch.moves", moves),     BATCH("lookahead_reads", lookahead),
};

static void read_stats(const struct placefs_ioctl *fs, struct placefs_stats *w)
{
	struct placefs_fill_stats f;
	struct batch_view b = {0};

	placefs_filler_stats(fs ? fs->fill : NULL, &f);
	placefs_stats_table(w, read_rows, PLACEFS_STATS_ROWS(read_rows), (const void *const[]){&f});
	if (fs) {
		b.threads = fs->nbthreads;
		b.requests = atomic_load_explicit(&fs->batches, memory_order_relaxed);
		b.entries = atomic_load_explicit(&fs->batch_entries, memory_order_relaxed);
		b.failed = atomic_load_explicit(&fs->batch_failed, memory_order_relaxed);
		b.moves = atomic_load_explicit(&fs->batch_moves, memory_order_relaxed);
		b.lookahead = placefs_lookahead_probes(fs->lookahead);
	}
	placefs_stats_table(w, batch_rows, PLACEFS_STATS_ROWS(batch_rows),
	                    (const void *const[]){&b});
}

/* staging.disk: the disk gate's counters (lib/staging/gate.h); streams 0 when there is none. */
#define DISK(path, kind, member) PLACEFS_STAT(path, kind, 0, struct placefs_gate_stats, member)

static const struct placefs_stat disk_rows[] = {
        DISK("disk.streams", UINT, streams),
        DISK("disk.cached_reads", U64, cached_reads),
        DISK("disk.cached_bytes", U64, cached_bytes),
        DISK("disk.disk_reads", U64, disk_reads),
        DISK("disk.disk_bytes", U64, disk_bytes),
        DISK("disk.unknown_reads", U64, unknown_reads),
        DISK("disk.waits", U64, waits),
        DISK("disk.wait_ns", U64, wait_ns),
        DISK("disk.peak", UINT, peak),
        DISK("disk.waiting", UINT, waiting),
        DISK("disk.sequential", U64, sequential),
};

static void disk_stats(struct placefs_gate *g, struct placefs_stats *w)
{
	struct placefs_gate_stats d;

	placefs_gate_get_stats(g, &d);
	placefs_stats_table(w, disk_rows, PLACEFS_STATS_ROWS(disk_rows), (const void *const[]){&d});
}

void placefs_ioctl_stats(const struct placefs_ioctl *fs, struct placefs_stats *w)
{
	struct placefs_stager_stats s;
	struct staging_view v;

	placefs_stats_begin(w, "staging");
	placefs_stats_string(w, "device", fs ? fs->device : "none");
	if (!fs || !fs->ss) {
		placefs_stats_string(w, "backend", "none");
		placefs_stats_u64(w, "ndevices", 0);
		read_stats(fs, w);
		placefs_stats_end(w);
		return;
	}
	placefs_stats_string(w, "backend", placefs_device_kind_name(fs->info.device.kind));
	placefs_stats_u64(w, "ndevices", fs->nst);
	/* Every ring's counters added up (lib/staging/stagers.h); per device below. */
	placefs_stagers_stats(fs->ss, &s);
	placefs_stagers_dest_stats(fs->ss, &v.dest);
	v.dests = (unsigned)v.dest.held;
	pthread_mutex_lock((pthread_mutex_t *)&fs->lock);
	v.waiting = fs->detached;
	pthread_mutex_unlock((pthread_mutex_t *)&fs->lock);
	placefs_stats_table(w, staging_rows, PLACEFS_STATS_ROWS(staging_rows),
	                    (const void *const[]){&s, fs, &v});
	placefs_stats_begin_array(w, "devices");
	for (unsigned i = 0; i < fs->nst; i++) {
		struct placefs_stager_stats d;
		char name[PLACEFS_DEVICE_NAME_MAX];

		placefs_stager_stats(placefs_stagers_at(fs->ss, i), &d);
		placefs_stats_begin(w, NULL);
		placefs_stats_string(
		        w, "device",
		        placefs_device_format(placefs_stagers_devices(fs->ss)->items[i], name));
		placefs_stats_i64(w, "index", placefs_stagers_devices(fs->ss)->items[i].index);
		placefs_stats_u64(w, "position", i);
		placefs_stats_string(w, "name", fs->infos[i].name);
		placefs_stats_table(w, device_rows, PLACEFS_STATS_ROWS(device_rows),
		                    (const void *const[]){&d});
		placefs_stats_end(w);
	}
	placefs_stats_end(w);
	disk_stats(fs->gate, w);
	read_stats(fs, w);
	placefs_stats_end(w);
}

void ioctl_stats_zero(struct placefs_ioctl *fs)
{
	placefs_stats_table_zero(staging_rows, PLACEFS_STATS_ROWS(staging_rows),
	                         (void *const[]){NULL, fs, NULL});
}
