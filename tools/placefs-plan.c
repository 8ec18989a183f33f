/* SPDX-License-Identifier: MIT */
/*
 * placefs-plan: prints what a mount of a checkpoint would contain and where
 * each tensor would be staged, without mounting anything.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/ckpt.h"
#include "common/error.h"
#include "common/io.h"
#include "model/plan.h"
#include "common/size.h"
#include "common/strbuf.h"

#define PROG "placefs-plan"

static const char usage_text[] =
        "usage: " PROG " [--buffer-size SIZE] [--ring-size SIZE] [--prefix P]...\n"
        "                    [--index FILE] [--json | --columns | --sweep[=LIST] | --histogram]\n"
        "                    SOURCE\n";

static const char help_text[] =
        "Shows which tensors of a safetensors checkpoint a placefs mount would expose\n"
        "and whether each would be staged on the GPU or read on the CPU.\n"
        "\n"
        "SOURCE is a .safetensors file or a directory of shards.\n"
        "\n"
        "  --buffer-size SIZE  staging limit: tensors of at most SIZE bytes go to the\n"
        "                      GPU, larger ones to the CPU (default:\n"
        "                      $" PLACEFS_PLAN_ENV_LIMIT ", else no limit). SIZE is digits\n"
        "                      with an optional K, M, G, T, KiB, MiB, GiB, TiB (powers\n"
        "                      of 1024) or KB, MB, GB, TB (powers of 1000) suffix.\n"
        "  --ring-size SIZE    device memory of the staging ring (default: the\n"
        "                      staging limit, else an automatic size); at least\n"
        "                      that default\n"
        "  --prefix P          select only tensors whose names start with P\n"
        "                      (case-sensitive; repeatable; default: all)\n"
        "  --index FILE        use this index instead of model.safetensors.index.json\n"
        "  --json              print the plan as one line of JSON\n"
        "  --columns           print the plan as one line of JSON, one array per field\n"
        "                      (a mount's .placefs/columns.json)\n"
        "  --sweep[=LIST]      print what each candidate limit would do; LIST is\n"
        "                      comma-separated sizes (default: the powers of two from\n"
        "                      1 MiB and the sizes at which a tensor changes side, listed\n"
        "                      exactly below the table)\n"
        "  --histogram         draw the tensor sizes (log2 buckets) with the staging\n"
        "                      limit marked and the count and bytes on each side\n"
        "  -h, --help          show this help and exit\n"
        "  -V, --version       show the version and exit\n"
        "\n"
        "Exit status: 0 ok, 1 error, 2 usage, 3 bad checkpoint, index or source,\n"
        "4 invalid limit, 5 empty selection, 6 duplicate GPU names, 7 duplicate CPU\n"
        "names, 8 a name both on GPU and CPU, 9 a tensor name that cannot be a file name.\n";

static void __attribute__((format(printf, 1, 2))) say(const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int __attribute__((format(printf, 1, 2))) usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (see " PROG " --help)\n", stderr);
	return PLACEFS_EXIT_USAGE;
}

static int fail(const struct placefs_error *err)
{
	say("%s", err->msg[0] ? err->msg : strerror(-err->code));
	return placefs_error_exit_status(err);
}

/* Splits a comma-separated --sweep list into parsed sizes. */
static int parse_sweep(const char *list, uint64_t **out, size_t *n, struct placefs_error *err)
{
	size_t cap = 1, k = 0;
	uint64_t *v;
	char *copy, *item;
	int rc = 0;

	for (const char *p = list; *p; p++)
		cap += *p == ',';
	v = calloc(cap, sizeof(*v));
	copy = strdup(list);
	if (!v || !copy) {
		free(v);
		free(copy);
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
	}
	/* strtok would merge ",," and hide an empty item, so walk by hand. */
	item = copy;
	for (;;) {
		char *comma = strchr(item, ',');

		if (comma)
			*comma = '\0';
		rc = placefs_size_parse(item, "--sweep", &v[k], err);
		if (rc)
			break;
		k++;
		if (!comma)
			break;
		item = comma + 1;
	}
	free(copy);
	if (rc) {
		free(v);
		return rc;
	}
	*out = v;
	*n = k;
	return 0;
}

/* At most this many exact change sizes join the default sweep: the largest ones. */
#define SWEEP_CHANGES_MAX 16

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * The sizes at which placement changes: every distinct non-zero size S of a
 * selected tensor (a limit of S stages it, S - 1 reads it on the cpu), the
 * SWEEP_CHANGES_MAX largest of them, ascending, in *out (malloc'd).
 */
static int change_sizes(const struct placefs_plan *plan, uint64_t **out, size_t *n)
{
	size_t count = placefs_plan_count(plan), k = 0, i;
	uint64_t *v = malloc((count ? count : 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (i = 0; i < count; i++) {
		uint64_t b = placefs_plan_entry(plan, i)->tensor->nbytes;

		if (b)
			v[k++] = b;
	}
	qsort(v, k, sizeof(*v), cmp_u64);
	count = k;
	for (i = k = 0; i < count; i++)
		if (k == 0 || v[k - 1] != v[i])
			v[k++] = v[i];
	if (k > SWEEP_CHANGES_MAX) {
		memmove(v, v + (k - SWEEP_CHANGES_MAX), SWEEP_CHANGES_MAX * sizeof(*v));
		k = SWEEP_CHANGES_MAX;
	}
	*out = v;
	*n = k;
	return 0;
}

/*
 * The default sweep: the powers of two from 1 MiB up to the first one at or
 * above the largest tensor (as placefs_plan_sweep() picks them) and the
 * change sizes, then the table and, below it, the change sizes exactly with
 * the tensors that change side there.
 */
static int sweep_default(const struct placefs_tensor *tensors, size_t nt,
                         const char *const *prefixes, size_t nprefixes, struct placefs_strbuf *sb,
                         struct placefs_error *err)
{
	struct placefs_plan_options opt = {.prefixes = prefixes, .nprefixes = nprefixes};
	struct placefs_plan *plan = NULL;
	uint64_t *chg = NULL, *lim = NULL, largest = 0;
	size_t nchg = 0, nlim = 0, i, j;
	int rc;

	rc = placefs_plan_create(tensors, nt, &opt, &plan, err);
	if (rc)
		return rc;
	rc = change_sizes(plan, &chg, &nchg);
	if (rc)
		goto nomem;
	if (nchg)
		largest = chg[nchg - 1];
	lim = malloc((nchg + 64) * sizeof(*lim));
	if (!lim)
		goto nomem;
	for (uint64_t p = 1ULL << 20;; p <<= 1) {
		lim[nlim++] = p;
		if (p >= largest || p == 1ULL << 63)
			break;
	}
	memcpy(lim + nlim, chg, nchg * sizeof(*chg));
	nlim += nchg;
	qsort(lim, nlim, sizeof(*lim), cmp_u64);
	for (i = j = 0; i < nlim; i++)
		if (j == 0 || lim[j - 1] != lim[i])
			lim[j++] = lim[i];
	nlim = j;
	rc = placefs_plan_sweep(tensors, nt, prefixes, nprefixes, lim, nlim, sb, err);
	if (rc)
		goto out;
	if (nchg && (rc = placefs_strbuf_adds(sb, "\nplacement changes (a limit of at least "
	                                          "SIZE stages them on the gpu):\n")) != 0)
		goto nomem;
	for (i = 0; i < nchg; i++) {
		size_t count = placefs_plan_count(plan), same = 0;
		const char *first = NULL;
		char h[32];

		for (j = 0; j < count; j++) {
			const struct placefs_tensor *t = placefs_plan_entry(plan, j)->tensor;

			if (t->nbytes == chg[i] && same++ == 0)
				first = t->name;
		}
		placefs_size_format(chg[i], h, sizeof(h));
		rc = placefs_strbuf_addf(sb, "  %" PRIu64 " bytes (%s): %zu tensor%s, %s%s%s\n",
		                         chg[i], h, same, same == 1 ? "" : "s",
		                         same == 1 ? "" : "the first ", first ? first : "?", "");
		if (rc)
			goto nomem;
	}
	goto out;
nomem:
	rc = placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM, "out of memory");
out:
	free(lim);
	free(chg);
	placefs_plan_free(plan);
	return rc;
}

#define HIST_BAR 40

/*
 * One row of the histogram: the tensors of sizes lo..hi (inclusive) on one
 * side of the limit; hi == UINT64_MAX reads as "up to 16 EiB".
 */
struct hist_row {
	uint64_t lo, hi;
	int lo_open;   /* "(lo": the row starts just above the limit */
	int hi_closed; /* "hi]": the row ends at the limit */
	uint64_t count, bytes;
	int cpu; /* 1: above the limit */
};

/* "[1 MiB, 2 MiB)", "[1 MiB, 1.38 MiB]", "(1.38 MiB, 2 MiB)", "0 B". */
static void row_label(const struct hist_row *r, char *buf, size_t len)
{
	char a[32], b[32];

	if (r->hi == 0) {
		snprintf(buf, len, "0 B");
		return;
	}
	placefs_size_format(r->lo, a, sizeof(a));
	if (r->hi_closed)
		placefs_size_format(r->hi, b, sizeof(b));
	else if (r->hi == UINT64_MAX)
		snprintf(b, sizeof(b), "16 EiB");
	else
		placefs_size_format(r->hi + 1, b, sizeof(b));
	snprintf(buf, len, "%c%s, %s%c", r->lo_open ? '(' : '[', a, b, r->hi_closed ? ']' : ')');
}

/* The marker between the gpu and the cpu rows, with the count and bytes on each side. */
static int add_marker(struct placefs_strbuf *sb, uint64_t limit,
                      const struct placefs_plan_totals *t)
{
	char h1[32], h2[32], h3[32];

	placefs_size_format(limit, h1, sizeof(h1));
	placefs_size_format(t->bytes[PLACEFS_PLACE_GPU], h2, sizeof(h2));
	placefs_size_format(t->bytes[PLACEFS_PLACE_CPU], h3, sizeof(h3));
	return placefs_strbuf_addf(
	        sb,
	        "---- staging limit %s: gpu above (%" PRIu64 " tensor%s, %s), cpu below (%" PRIu64
	        " tensor%s, %s) ----\n",
	        h1, t->count[PLACEFS_PLACE_GPU], t->count[PLACEFS_PLACE_GPU] == 1 ? "" : "s", h2,
	        t->count[PLACEFS_PLACE_CPU], t->count[PLACEFS_PLACE_CPU] == 1 ? "" : "s", h3);
}

/*
 * The histogram: a row per log2 bucket [2^k, 2^(k+1)) from the smallest
 * selected size to the largest (a "0 B" row first when there are empty
 * tensors; a run of empty buckets on one side of the limit is one row), a
 * bucket that the limit cuts split into [lo, limit] and (limit, hi), and a
 * marker line between the gpu and the cpu rows with the count and bytes on
 * each side. Bars are tensor counts, the fullest row HIST_BAR marks long.
 */
static int histogram(const struct placefs_plan *plan, const char *source, struct placefs_strbuf *sb)
{
	size_t count = placefs_plan_count(plan), nrows = 0, i, r;
	int has_limit = placefs_plan_has_limit(plan), kmin = 64, kmax = -1, rc, marked = 0;
	uint64_t limit = placefs_plan_limit(plan), maxc = 0;
	size_t wl = strlen("SIZE"), wb = strlen("BYTES");
	struct placefs_plan_totals t;
	struct hist_row *rows;
	char label[80], h[32];

	for (i = 0; i < count; i++) {
		uint64_t b = placefs_plan_entry(plan, i)->tensor->nbytes;
		int k;

		if (!b)
			continue;
		k = 63 - __builtin_clzll(b);
		kmin = k < kmin ? k : kmin;
		kmax = k > kmax ? k : kmax;
	}
	/* One row per bucket, one more for the split one and one for 0 B. */
	rows = calloc((size_t)(kmax >= kmin ? kmax - kmin + 1 : 0) + 2, sizeof(*rows));
	if (!rows)
		return -ENOMEM;
	for (i = 0; i < count; i++)
		rows[0].count += placefs_plan_entry(plan, i)->tensor->nbytes == 0;
	if (rows[0].count)
		nrows++;
	for (int k = kmin; k <= kmax; k++) {
		uint64_t lo = 1ULL << k, hi = k == 63 ? UINT64_MAX : (1ULL << (k + 1)) - 1;
		struct hist_row g = {.lo = lo, .hi = hi}, c = {.lo = lo, .hi = hi, .cpu = 1};
		struct hist_row *prev = nrows ? &rows[nrows - 1] : NULL;

		for (i = 0; i < count; i++) {
			uint64_t b = placefs_plan_entry(plan, i)->tensor->nbytes;
			struct hist_row *side = has_limit && b > limit ? &c : &g;

			if (b < lo || b > hi)
				continue;
			side->count++;
			side->bytes += b;
		}
		if (g.count && c.count) {
			g.hi = limit;
			g.hi_closed = 1;
			c.lo = limit;
			c.lo_open = 1;
			rows[nrows++] = g;
			rows[nrows++] = c;
			continue;
		}
		if (!g.count && !c.count) {
			/*
			 * Empty: on the cpu side when any of it is above the limit (so
			 * the marker falls where the limit is), merged with an empty
			 * neighbour on the same side.
			 */
			g.cpu = has_limit && hi > limit;
			if (prev && prev->hi && !prev->count && prev->cpu == g.cpu &&
			    !prev->hi_closed) {
				prev->hi = hi;
				continue;
			}
			rows[nrows++] = g;
			continue;
		}
		rows[nrows++] = c.count ? c : g;
	}
	for (r = 0; r < nrows; r++) {
		row_label(&rows[r], label, sizeof(label));
		placefs_size_format(rows[r].bytes, h, sizeof(h));
		wl = strlen(label) > wl ? strlen(label) : wl;
		wb = strlen(h) > wb ? strlen(h) : wb;
		maxc = rows[r].count > maxc ? rows[r].count : maxc;
	}
	placefs_plan_totals(plan, &t);
	placefs_size_format(limit, h, sizeof(h));
	if (has_limit)
		rc = placefs_strbuf_addf(sb,
		                         "tensor sizes of %s: %zu tensor%s, staging limit %" PRIu64
		                         " bytes (%s)\n",
		                         source, count, count == 1 ? "" : "s", limit, h);
	else
		rc = placefs_strbuf_addf(
		        sb,
		        "tensor sizes of %s: %zu tensor%s, no staging limit (every "
		        "tensor is staged on the gpu)\n",
		        source, count, count == 1 ? "" : "s");
	if (!rc)
		rc = placefs_strbuf_addf(sb, "%-*s  %6s  %*s  PLACE\n", (int)wl, "SIZE", "COUNT",
		                         (int)wb, "BYTES");
	for (r = 0; rc == 0 && r < nrows; r++) {
		const struct hist_row *row = &rows[r];
		uint64_t marks = maxc ? (row->count * HIST_BAR + maxc - 1) / maxc : 0;

		if (has_limit && row->cpu && !marked) {
			marked = 1;
			if ((rc = add_marker(sb, limit, &t)) != 0)
				break;
		}
		row_label(row, label, sizeof(label));
		placefs_size_format(row->bytes, h, sizeof(h));
		rc = placefs_strbuf_addf(sb, "%-*s  %6" PRIu64 "  %*s", (int)wl, label, row->count,
		                         (int)wb, h);
		if (!rc && row->count)
			rc = placefs_strbuf_addf(sb, "  %s    ", row->cpu ? "cpu" : "gpu");
		for (uint64_t m = 0; rc == 0 && m < marks; m++)
			rc = placefs_strbuf_adds(sb, "#");
		if (!rc)
			rc = placefs_strbuf_adds(sb, "\n");
	}
	/* Everything fits: the marker closes the table. */
	if (!rc && has_limit && !marked)
		rc = add_marker(sb, limit, &t);
	if (!rc && !has_limit) {
		placefs_size_format(t.bytes[PLACEFS_PLACE_GPU], h, sizeof(h));
		rc = placefs_strbuf_addf(sb, "gpu: %" PRIu64 " tensor%s, %s; cpu: none\n",
		                         t.count[PLACEFS_PLACE_GPU],
		                         t.count[PLACEFS_PLACE_GPU] == 1 ? "" : "s", h);
	}
	free(rows);
	return rc;
}

/* Writes the whole buffer to stdout; a short write or a full disk is an error. */
static int emit(const struct placefs_strbuf *sb)
{
	int rc = placefs_io_write_full(STDOUT_FILENO, placefs_strbuf_cstr(sb), sb->len);

	if (rc) {
		say("writing to standard output: %s", strerror(-rc));
		return PLACEFS_EXIT_ERROR;
	}
	return PLACEFS_EXIT_OK;
}

static int is_long(const char *arg)
{
	return strncmp(arg, "--", 2) == 0;
}

enum {
	OPT_BUFFER_SIZE = 256,
	OPT_RING_SIZE,
	OPT_PREFIX,
	OPT_INDEX,
	OPT_JSON,
	OPT_COLUMNS,
	OPT_SWEEP,
	OPT_HISTOGRAM
};

static const struct option long_opts[] = {
        {"buffer-size", required_argument, NULL, OPT_BUFFER_SIZE},
        {"ring-size", required_argument, NULL, OPT_RING_SIZE},
        {"prefix", required_argument, NULL, OPT_PREFIX},
        {"index", required_argument, NULL, OPT_INDEX},
        {"json", no_argument, NULL, OPT_JSON},
        {"columns", no_argument, NULL, OPT_COLUMNS},
        {"sweep", optional_argument, NULL, OPT_SWEEP},
        {"histogram", no_argument, NULL, OPT_HISTOGRAM},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
};

int main(int argc, char **argv)
{
	const char *buffer_size = NULL, *ring_size = NULL, *index = NULL, *sweep_list = NULL;
	const char *source;
	const char **prefixes = NULL;
	size_t nprefixes = 0, nlimits = 0;
	uint64_t *limits = NULL, ring_bytes = 0;
	int json = 0, columns = 0, sweep = 0, hist = 0, c, status = PLACEFS_EXIT_OK;
	const char *as_json; /* --json or --columns, when one was given */
	struct placefs_plan_options opt = {0};
	struct placefs_ckpt *ck = NULL;
	struct placefs_plan *plan = NULL;
	struct placefs_strbuf sb;
	struct placefs_error err;

	placefs_strbuf_init(&sb);
	placefs_error_clear(&err);
	/* At most one prefix per argument: argc bounds the array. */
	prefixes = calloc((size_t)argc + 1, sizeof(*prefixes));
	if (!prefixes) {
		say("out of memory");
		return PLACEFS_EXIT_ERROR;
	}
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hV", long_opts, NULL)) != -1) {
		switch (c) {
		case OPT_BUFFER_SIZE: buffer_size = optarg; break;
		case OPT_RING_SIZE: ring_size = optarg; break;
		case OPT_PREFIX: prefixes[nprefixes++] = optarg; break;
		case OPT_INDEX: index = optarg; break;
		case OPT_JSON: json = 1; break;
		case OPT_COLUMNS: columns = 1; break;
		case OPT_HISTOGRAM: hist = 1; break;
		case OPT_SWEEP:
			sweep = 1;
			sweep_list = optarg;
			break;
		case 'h':
			fputs(usage_text, stdout);
			fputs("\n", stdout);
			fputs(help_text, stdout);
			free(prefixes);
			return fflush(stdout) == 0 ? PLACEFS_EXIT_OK : PLACEFS_EXIT_ERROR;
		case 'V':
			printf("%s %s\n", PROG, PACKAGE_VERSION);
			free(prefixes);
			return fflush(stdout) == 0 ? PLACEFS_EXIT_OK : PLACEFS_EXIT_ERROR;
		case ':':
			/* A long option is named by its argument, a short one by optopt. */
			if (!is_long(argv[optind - 1]))
				status = usage_error("option '-%c' needs a value", optopt);
			else
				status = usage_error("option '%s' needs a value", argv[optind - 1]);
			goto out;
		default:
			if (!is_long(argv[optind - 1]))
				status = usage_error("unknown option '-%c'", optopt);
			else
				status = usage_error("unknown option '%s'", argv[optind - 1]);
			goto out;
		}
	}
	if (optind + 1 != argc) {
		if (optind == argc)
			status = usage_error("no SOURCE given");
		else
			status = usage_error("more than one SOURCE given ('%s' and '%s')",
			                     argv[optind], argv[optind + 1]);
		goto out;
	}
	source = argv[optind];
	if (json && columns) {
		status = usage_error("--json and --columns cannot be combined");
		goto out;
	}
	as_json = columns ? "--columns" : json ? "--json" : NULL;
	if (as_json && sweep) {
		status = usage_error("%s and --sweep cannot be combined", as_json);
		goto out;
	}
	if (hist && (as_json || sweep)) {
		status = usage_error("--histogram cannot be combined with %s",
		                     as_json ? as_json : "--sweep");
		goto out;
	}
	if (ring_size && sweep) {
		/* Each candidate limit has its own ring; one size cannot fit them all. */
		status = usage_error("--ring-size and --sweep cannot be combined");
		goto out;
	}

	/* The option wins over the environment; a set but empty variable is an error. */
	if (placefs_plan_limit_parse(buffer_size, "--buffer-size", &opt.has_limit, &opt.limit, NULL,
	                             &err))
		goto fail;
	if (ring_size && placefs_size_parse(ring_size, "--ring-size", &ring_bytes, &err)) {
		/* Not the staging limit: a plain bad option value. */
		err.kind = PLACEFS_E_USAGE;
		goto fail;
	}
	if (sweep_list && parse_sweep(sweep_list, &limits, &nlimits, &err))
		goto fail;
	opt.prefixes = prefixes;
	opt.nprefixes = nprefixes;

	if (placefs_ckpt_open(source, index, &ck, &err))
		goto fail;
	if (sweep && !sweep_list) {
		if (sweep_default(placefs_ckpt_tensors(ck), placefs_ckpt_tensor_count(ck), prefixes,
		                  nprefixes, &sb, &err))
			goto fail;
	} else if (sweep) {
		if (placefs_plan_sweep(placefs_ckpt_tensors(ck), placefs_ckpt_tensor_count(ck),
		                       prefixes, nprefixes, limits, nlimits, &sb, &err))
			goto fail;
	} else {
		int rc;

		if (placefs_plan_create(placefs_ckpt_tensors(ck), placefs_ckpt_tensor_count(ck),
		                        &opt, &plan, &err))
			goto fail;
		/* Checked against the plan's own ring: the limit, or the automatic size. */
		if (ring_size && placefs_plan_set_ring_bytes(plan, ring_bytes, "--ring-size", &err))
			goto fail;
		rc = columns ? placefs_plan_format_columns(plan, source, &sb)
		     : json  ? placefs_plan_format_json(plan, source, &sb)
		     : hist  ? histogram(plan, source, &sb)
		             : placefs_plan_format_text(plan, source, &sb);
		if (rc) {
			placefs_error_set(&err, rc, PLACEFS_E_NOMEM, "formatting the plan: %s",
			                  strerror(-rc));
			goto fail;
		}
	}
	status = emit(&sb);
	goto out;

fail:
	status = fail(&err);
out:
	placefs_plan_free(plan);
	placefs_ckpt_free(ck);
	placefs_strbuf_release(&sb);
	free(limits);
	free(prefixes);
	return status;
}
