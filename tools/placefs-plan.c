/* SPDX-License-Identifier: MIT */
/*
 * placefs-plan: prints what a mount of a checkpoint would contain and where
 * each tensor would be staged, without mounting anything.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "error.h"
#include "io.h"
#include "plan.h"
#include "size.h"
#include "strbuf.h"

#define PROG "placefs-plan"

static const char usage_text[] =
        "usage: " PROG " [--buffer-size SIZE] [--ring-size SIZE] [--prefix P]...\n"
        "                    [--index FILE] [--json] [--sweep[=LIST]] SOURCE\n";

static const char help_text[] =
        "Shows which tensors of a safetensors checkpoint a placefs mount would expose\n"
        "and whether each would be staged on the GPU or read on the CPU.\n"
        "\n"
        "SOURCE is a .safetensors file or a directory of shards.\n"
        "\n"
        "  --buffer-size SIZE  staging limit: tensors of at most SIZE bytes go to the\n"
        "                      GPU, larger ones to the CPU (default:\n"
        "                      $" PLACEFS_PLAN_ENV_LIMIT ", else no limit). SIZE is digits\n"
        "                      with an optional K/M/G/T or KiB/MiB/GiB/TiB suffix\n"
        "                      (powers of 1024).\n"
        "  --ring-size SIZE    device memory of the staging ring (default: the\n"
        "                      staging limit, else an automatic size); at least\n"
        "                      that default\n"
        "  --prefix P          select only tensors whose names start with P\n"
        "                      (case-sensitive; repeatable; default: all)\n"
        "  --index FILE        use this index instead of model.safetensors.index.json\n"
        "  --json              print the plan as one line of JSON\n"
        "  --sweep[=LIST]      print what each candidate limit would do; LIST is\n"
        "                      comma-separated sizes (default: powers of two from 1 MiB)\n"
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

enum { OPT_BUFFER_SIZE = 256, OPT_RING_SIZE, OPT_PREFIX, OPT_INDEX, OPT_JSON, OPT_SWEEP };

static const struct option long_opts[] = {
        {"buffer-size", required_argument, NULL, OPT_BUFFER_SIZE},
        {"ring-size", required_argument, NULL, OPT_RING_SIZE},
        {"prefix", required_argument, NULL, OPT_PREFIX},
        {"index", required_argument, NULL, OPT_INDEX},
        {"json", no_argument, NULL, OPT_JSON},
        {"sweep", optional_argument, NULL, OPT_SWEEP},
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
	int json = 0, sweep = 0, c, status = PLACEFS_EXIT_OK;
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
	if (json && sweep) {
		status = usage_error("--json and --sweep cannot be combined");
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
	if (sweep) {
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
		rc = json ? placefs_plan_format_json(plan, source, &sb)
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
