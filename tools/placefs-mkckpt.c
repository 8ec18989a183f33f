/* SPDX-License-Identifier: MIT */
/*
 * placefs-mkckpt: writes a deterministic synthetic safetensors checkpoint
 * (one file, or a directory of shards with an optional index) for the
 * tests, the demo and the benchmarks. Same options and seed, same bytes.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/dtype.h"
#include "common/error.h"
#include "common/io.h"
#include "format/safetensors.h"
#include "common/size.h"
#include "common/strbuf.h"
#include "format/stwrite.h"

#define PROG "placefs-mkckpt"

/* Exit statuses. */
enum { EXIT_OK = 0, EXIT_ERR = 1, EXIT_USAGE = 2 };

struct spec {
	char *name;
	enum placefs_dtype dtype;
	uint32_t ndim;
	uint64_t *shape;
	uint64_t nbytes;
};

struct specs {
	struct spec *v;
	size_t n, alloc;
};

/*
 * --quant: how the linear projections of --llama and --moe are stored.
 * QUANT_NONE is one BF16 X.weight per linear X; QUANT_FP8 and QUANT_GPTQ
 * are the layouts of add_linear().
 */
enum quant { QUANT_NONE = 0, QUANT_FP8, QUANT_GPTQ };

static const char *const quant_names[] = {"none", "fp8", "gptq"};
/* Tensors per linear projection, by enum quant. */
static const unsigned quant_tensors[] = {1, 3, 4};

/* GPTQ/AWQ int4: input rows per scale group, and int4 values per I32 word. */
#define GPTQ_GROUP 128u
#define GPTQ_PACK  8u

struct opts {
	uint64_t seed;
	uint64_t random_n;
	uint64_t max_bytes;
	uint64_t shards;
	int index;
	int quiet;
	int have_llama;
	uint64_t llama[4]; /* layers, hidden, intermediate, vocab */
	int have_moe;
	uint64_t moe[5]; /* layers, hidden, experts, expert intermediate, vocab */
	enum quant quant;
	char **tensor_args;
	size_t ntensor_args;
	char **meta; /* key/value pairs */
	size_t nmeta;
	const char *out;
};

static void die_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void die_msg(const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " [options] OUT\n"
	           "Writes a deterministic synthetic safetensors checkpoint.\n"
	           "\n"
	           "  --seed N              payload seed (default 1)\n"
	           "  --tensor NAME:DTYPE:SHAPE\n"
	           "                        add a tensor; SHAPE is d0xd1x... or 'scalar' "
	           "(repeatable)\n"
	           "  --random N            add N tensors random.<i> of random dtypes and sizes\n"
	           "                        (N at most 2000000)\n"
	           "  --max-bytes SIZE      largest --random payload (default 64K, at most 1T)\n"
	           "  --llama L:H:I:V       add a Llama-shaped bf16 model (layers, hidden,\n"
	           "                        intermediate, vocab; L at most 100000, the others\n"
	           "                        at most 4294967295)\n"
	           "  --moe L:H:E:I:V       add a mixture-of-experts bf16 model: per layer\n"
	           "                        attention, a router and E experts of three HxI\n"
	           "                        matrices (L, E at most 100000, H, I, V at most\n"
	           "                        4294967295)\n"
	           "  --quant fp8|gptq      quantize the linear projections of --llama and\n"
	           "                        --moe (attention q/k/v/o, mlp and expert\n"
	           "                        gate/up/down); embedding, norms, router and\n"
	           "                        lm_head stay bf16. A linear X (in -> out) becomes\n"
	           "                        fp8:  X.weight F8_E4M3 [out, in], X.weight_scale\n"
	           "                              F32 [out, 1], X.input_scale F32 [1]\n"
	           "                        gptq: X.qweight I32 [in/8, out], X.qzeros I32\n"
	           "                              [in/128, out/8], X.scales F16 [in/128, out],\n"
	           "                              X.g_idx I32 [in]; needs in %% 128 == 0 and\n"
	           "                              out %% 8 == 0 (default none: bf16 X.weight)\n"
	           "  --shards K            split into K shards of about equal bytes (default 1)\n"
	           "  --index               write model.safetensors.index.json (directory output)\n"
	           "  --metadata K=V        __metadata__ entry (repeatable; default format=pt)\n"
	           "  -q, --quiet           print nothing on success\n"
	           "  -h, --help            show this help\n"
	           "  -V, --version         show the version\n"
	           "\n"
	           "OUT ending in .safetensors with one shard and no index is a file; otherwise\n"
	           "a directory (created if missing).\n");
}

/* Strict unsigned decimal: ASCII digits only, no sign, no spaces, no overflow. */
static int parse_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;

	if (len == 0)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(s[i] - '0'), &v))
			return -ERANGE;
	}
	*out = v;
	return 0;
}

static int specs_push(struct specs *s, struct spec *sp)
{
	if (s->n == s->alloc) {
		size_t na = s->alloc ? s->alloc * 2 : 64;
		struct spec *nv;

		if (na < s->alloc || na > SIZE_MAX / sizeof(*nv))
			return -ENOMEM;
		nv = realloc(s->v, na * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		s->v = nv;
		s->alloc = na;
	}
	s->v[s->n++] = *sp;
	return 0;
}

static void specs_release(struct specs *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].name);
		free(s->v[i].shape);
	}
	free(s->v);
}

/* Adds one tensor; takes ownership of name and shape even on failure. */
static int add_spec(struct specs *s, char *name, enum placefs_dtype dt, uint32_t ndim,
                    uint64_t *shape)
{
	struct spec sp = {.name = name, .dtype = dt, .ndim = ndim, .shape = shape};
	int rc;

	if (!name || (ndim && !shape)) {
		free(name);
		free(shape);
		die_msg("out of memory");
		return -ENOMEM;
	}
	rc = placefs_stwrite_nbytes(dt, ndim, shape, &sp.nbytes);
	if (rc) {
		die_msg("tensor \"%s\": %s", name,
		        rc == -EOVERFLOW ? "size overflows 64 bits"
		                         : "elements must fill whole bytes");
		free(name);
		free(shape);
		return rc;
	}
	rc = specs_push(s, &sp);
	if (rc) {
		die_msg("out of memory");
		free(name);
		free(shape);
	}
	return rc;
}

static uint64_t *shape_of(uint32_t ndim, ...)
{
	uint64_t *v = malloc(ndim * sizeof(*v));
	va_list ap;

	if (!v)
		return NULL;
	va_start(ap, ndim);
	for (uint32_t i = 0; i < ndim; i++)
		v[i] = va_arg(ap, uint64_t);
	va_end(ap);
	return v;
}

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : s;
}

#define BF    PLACEFS_DT_BF16
#define LAYER "model.layers.%" PRIu64

/*
 * The tensors of linear projection `base` (freed here) from `in` to `out`
 * features, stored as --quant says:
 *   none: base.weight BF16 [out, in]
 *   fp8:  base.weight F8_E4M3 [out, in], base.weight_scale F32 [out, 1] (per
 *         output channel), base.input_scale F32 [1] (per tensor), as
 *         llm-compressor and vLLM write FP8 checkpoints
 *   gptq: base.qweight I32 [in/8, out] (eight int4 along the input per word),
 *         base.qzeros I32 [in/128, out/8], base.scales F16 [in/128, out] (one
 *         group per 128 inputs), base.g_idx I32 [in] (the group of each input)
 * GPTQ needs in % 128 == 0 and out % 8 == 0: a usage error naming the linear.
 */
static int add_linear(struct specs *s, enum quant q, char *base, uint64_t in, uint64_t out)
{
	const uint64_t one = 1;
	int rc = 0;

	if (!base) {
		die_msg("out of memory");
		return -ENOMEM;
	}
	switch (q) {
	case QUANT_NONE:
		rc = add_spec(s, xasprintf("%s.weight", base), BF, 2, shape_of(2, out, in));
		break;
	case QUANT_FP8:
		rc = add_spec(s, xasprintf("%s.weight", base), PLACEFS_DT_F8_E4M3, 2,
		              shape_of(2, out, in));
		if (rc == 0)
			rc = add_spec(s, xasprintf("%s.weight_scale", base), PLACEFS_DT_F32, 2,
			              shape_of(2, out, one));
		if (rc == 0)
			rc = add_spec(s, xasprintf("%s.input_scale", base), PLACEFS_DT_F32, 1,
			              shape_of(1, one));
		break;
	case QUANT_GPTQ: {
		const uint64_t groups = in / GPTQ_GROUP;

		if (in % GPTQ_GROUP != 0 || out % GPTQ_PACK != 0) {
			die_msg("--quant gptq: linear \"%s\" (in %" PRIu64 ", out %" PRIu64
			        "): gptq needs in %% %u == 0 (group size %u) and out %% %u == 0 "
			        "(%u int4 values per I32)",
			        base, in, out, GPTQ_GROUP, GPTQ_GROUP, GPTQ_PACK, GPTQ_PACK);
			rc = -EINVAL;
			break;
		}
		rc = add_spec(s, xasprintf("%s.qweight", base), PLACEFS_DT_I32, 2,
		              shape_of(2, in / GPTQ_PACK, out));
		if (rc == 0)
			rc = add_spec(s, xasprintf("%s.qzeros", base), PLACEFS_DT_I32, 2,
			              shape_of(2, groups, out / GPTQ_PACK));
		if (rc == 0)
			rc = add_spec(s, xasprintf("%s.scales", base), PLACEFS_DT_F16, 2,
			              shape_of(2, groups, out));
		if (rc == 0)
			rc = add_spec(s, xasprintf("%s.g_idx", base), PLACEFS_DT_I32, 1,
			              shape_of(1, in));
		break;
	}
	default: rc = -EINVAL; break;
	}
	free(base);
	return rc;
}

/* Layer i's q/k/v/o projections, H -> H each. */
static int add_attn(struct specs *s, enum quant q, uint64_t i, uint64_t H)
{
	static const char *const attn[] = {"q", "k", "v", "o"};
	int rc = 0;

	for (int a = 0; rc == 0 && a < 4; a++)
		rc = add_linear(s, q, xasprintf(LAYER ".self_attn.%s_proj", i, attn[a]), H, H);
	return rc;
}

/* base.gate_proj and base.up_proj H -> I, base.down_proj I -> H; base is freed. */
static int add_mlp(struct specs *s, enum quant q, char *base, uint64_t I, uint64_t H)
{
	int rc = 0;

	if (!base) {
		die_msg("out of memory");
		return -ENOMEM;
	}
	if (rc == 0)
		rc = add_linear(s, q, xasprintf("%s.gate_proj", base), H, I);
	if (rc == 0)
		rc = add_linear(s, q, xasprintf("%s.up_proj", base), H, I);
	if (rc == 0)
		rc = add_linear(s, q, xasprintf("%s.down_proj", base), I, H);
	free(base);
	return rc;
}

/* Layer i's two norms, [H] each. */
static int add_norms(struct specs *s, uint64_t i, uint64_t H)
{
	int rc = add_spec(s, xasprintf(LAYER ".input_layernorm.weight", i), BF, 1, shape_of(1, H));

	if (rc == 0)
		rc = add_spec(s, xasprintf(LAYER ".post_attention_layernorm.weight", i), BF, 1,
		              shape_of(1, H));
	return rc;
}

/* The final norm [H] and the head [V, H]. */
static int add_head(struct specs *s, uint64_t V, uint64_t H)
{
	int rc = add_spec(s, xasprintf("model.norm.weight"), BF, 1, shape_of(1, H));

	if (rc == 0)
		rc = add_spec(s, xasprintf("lm_head.weight"), BF, 2, shape_of(2, V, H));
	return rc;
}

static int add_llama(struct specs *s, const uint64_t *l, enum quant q)
{
	const uint64_t L = l[0], H = l[1], I = l[2], V = l[3];
	int rc;

	rc = add_spec(s, xasprintf("model.embed_tokens.weight"), BF, 2, shape_of(2, V, H));
	for (uint64_t i = 0; rc == 0 && i < L; i++) {
		rc = add_attn(s, q, i, H);
		if (rc == 0)
			rc = add_mlp(s, q, xasprintf(LAYER ".mlp", i), I, H);
		if (rc == 0)
			rc = add_norms(s, i, H);
	}
	return rc ? rc : add_head(s, V, H);
}

/*
 * A mixture-of-experts model in the layout of Qwen-MoE / Mixtral checkpoints
 * on the Hugging Face hub: per layer q/k/v/o projections (HxH), a router
 * (ExH, never quantized), E experts of gate/up (IxH) and down (HxI)
 * projections, two norms.
 */
static int add_moe(struct specs *s, const uint64_t *m, enum quant q)
{
	const uint64_t L = m[0], H = m[1], E = m[2], I = m[3], V = m[4];
	int rc;

	rc = add_spec(s, xasprintf("model.embed_tokens.weight"), BF, 2, shape_of(2, V, H));
	for (uint64_t i = 0; rc == 0 && i < L; i++) {
		rc = add_attn(s, q, i, H);
		if (rc == 0)
			rc = add_spec(s, xasprintf(LAYER ".mlp.gate.weight", i), BF, 2,
			              shape_of(2, E, H));
		for (uint64_t x = 0; rc == 0 && x < E; x++)
			rc = add_mlp(s, q, xasprintf(LAYER ".mlp.experts.%" PRIu64, i, x), I, H);
		if (rc == 0)
			rc = add_norms(s, i, H);
	}
	return rc ? rc : add_head(s, V, H);
}

#undef BF
#undef LAYER

/* NAME:DTYPE:SHAPE, split at the last two ':' so that names may hold ':'. */
static int add_tensor_arg(struct specs *s, const char *arg)
{
	const char *c2 = strrchr(arg, ':');
	const char *c1 = NULL;
	const char *shp, *p;
	enum placefs_dtype dt;
	uint64_t *shape = NULL;
	uint32_t ndim = 0;

	for (p = arg; c2 && p < c2; p++) {
		if (*p == ':')
			c1 = p;
	}
	if (!c1) {
		die_msg("--tensor %s: expected NAME:DTYPE:SHAPE", arg);
		return -EINVAL;
	}
	dt = placefs_dtype_from_name(c1 + 1, (size_t)(c2 - c1 - 1));
	if (dt == PLACEFS_DT_INVALID) {
		die_msg("--tensor %s: unknown dtype \"%.*s\"", arg, (int)(c2 - c1 - 1), c1 + 1);
		return -EINVAL;
	}
	shp = c2 + 1;
	if (strcmp(shp, "scalar") != 0) {
		size_t nd = 1;

		for (p = shp; *p; p++)
			nd += *p == 'x';
		if (nd > PLACEFS_ST_NDIM_MAX) {
			die_msg("--tensor %s: %zu dimensions, more than the limit of %d", arg, nd,
			        PLACEFS_ST_NDIM_MAX);
			return -EINVAL;
		}
		shape = calloc(nd, sizeof(*shape));
		if (!shape) {
			die_msg("out of memory");
			return -ENOMEM;
		}
		for (p = shp; ndim < nd; ndim++) {
			const char *e = strchr(p, 'x');
			size_t len = e ? (size_t)(e - p) : strlen(p);
			int rc = parse_u64(p, len, &shape[ndim]);

			if (rc) {
				die_msg("--tensor %s: bad shape \"%s\" (want d0xd1x... or scalar)",
				        arg, shp);
				free(shape);
				return -EINVAL;
			}
			p += len + (e ? 1 : 0);
		}
	}
	return add_spec(s, strndup(arg, (size_t)(c1 - arg)), dt, ndim, shape);
}

/* A tiny splitmix64 stream for --random, seeded from --seed. */
static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [0, bound] (bound may be UINT64_MAX). */
static uint64_t rng_upto(uint64_t *state, uint64_t bound)
{
	uint64_t r = rng_next(state);

	return bound == UINT64_MAX ? r : r % (bound + 1);
}

static int add_random(struct specs *s, uint64_t n, uint64_t max_bytes, uint64_t seed)
{
	uint64_t st = seed ^ 0x72616e646f6d2e30ULL; /* "random.0" */
	int rc = 0;

	for (uint64_t i = 0; rc == 0 && i < n; i++) {
		enum placefs_dtype dt =
		        (enum placefs_dtype)(1 + rng_upto(&st, PLACEFS_DT_COUNT - 2));
		unsigned bits = placefs_dtype_bits(dt);
		uint64_t bytes = rng_upto(&st, max_bytes);
		/* Elements per whole-byte group: 2 for 4-bit, 4 for 6-bit, else 1. */
		uint64_t group = bits % 8 == 0 ? 1 : (bits == 4 ? 2 : 4);
		uint64_t elems, k;
		unsigned form = (unsigned)rng_upto(&st, 1);

		/* Whole groups only, so sub-byte dtypes fill whole bytes. */
		elems = bytes / (group * bits / 8) * group;
		/* Half the tensors get two dimensions, with whole groups per row. */
		k = 1;
		for (uint64_t c = 64; form && elems && c >= group && c > 1; c /= 2) {
			if (elems % c == 0) {
				k = c;
				break;
			}
		}
		if (k == 1) {
			rc = add_spec(s, xasprintf("random.%" PRIu64, i), dt, 1,
			              shape_of(1, elems));
			continue;
		}
		rc = add_spec(s, xasprintf("random.%" PRIu64, i), dt, 2, shape_of(2, elems / k, k));
	}
	return rc;
}

static int cmp_spec_name(const void *a, const void *b)
{
	return strcmp((*(const struct spec *const *)a)->name,
	              (*(const struct spec *const *)b)->name);
}

/* A sorted view of the tensors, for duplicate checks and the index. */
static struct spec **sorted_specs(const struct specs *s)
{
	struct spec **v = calloc(s->n ? s->n : 1, sizeof(*v));

	if (!v)
		return NULL;
	for (size_t i = 0; i < s->n; i++)
		v[i] = &s->v[i];
	qsort(v, s->n, sizeof(*v), cmp_spec_name);
	return v;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int write_index(const char *path, struct spec **sorted, size_t n, const size_t *shard_of,
                       const struct specs *s, char **shard_names)
{
	struct placefs_strbuf sb;
	struct placefs_error err;
	uint64_t total = 0;
	char *tmp = NULL;
	int fd, rc = 0;

	placefs_strbuf_init(&sb);
	placefs_error_clear(&err);
	for (size_t i = 0; i < n; i++) {
		if (__builtin_add_overflow(total, sorted[i]->nbytes, &total)) {
			die_msg("%s: total_size overflows 64 bits", path);
			return -EOVERFLOW;
		}
	}
	rc = placefs_strbuf_addf(&sb,
	                         "{\n  \"metadata\": {\n    \"total_size\": %" PRIu64
	                         "\n  },\n  \"weight_map\": {",
	                         total);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		size_t k = (size_t)(sorted[i] - s->v);

		rc = placefs_strbuf_adds(&sb, i ? ",\n    " : "\n    ");
		if (rc == 0)
			rc = placefs_strbuf_add_json_string(&sb, sorted[i]->name);
		if (rc == 0)
			rc = placefs_strbuf_adds(&sb, ": ");
		if (rc == 0)
			rc = placefs_strbuf_add_json_string(&sb, shard_names[shard_of[k]]);
	}
	if (rc == 0)
		rc = placefs_strbuf_adds(&sb, n ? "\n  }\n}\n" : "}\n}\n");
	if (rc) {
		die_msg("out of memory");
		goto out;
	}
	tmp = xasprintf("%s.tmp", path);
	if (!tmp) {
		rc = -ENOMEM;
		die_msg("out of memory");
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0) {
		rc = -errno;
		die_msg("cannot write %s: %s", tmp, strerror(-rc));
		goto out;
	}
	rc = placefs_io_write_full(fd, sb.buf, sb.len);
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc) {
		die_msg("cannot write %s: %s", tmp, strerror(-rc));
		unlink(tmp);
		goto out;
	}
	if (rename(tmp, path) != 0) {
		rc = -errno;
		die_msg("cannot rename %s to %s: %s", tmp, path, strerror(errno));
		unlink(tmp);
	}
out:
	free(tmp);
	placefs_strbuf_release(&sb);
	return rc;
}

/*
 * Splits n tensors into k contiguous groups of about equal bytes: group g
 * starts at the first tensor whose preceding bytes reach g/k of the total,
 * clamped so that every group holds at least one tensor.
 */
static void split_shards(const struct specs *s, uint64_t k, size_t *start)
{
	unsigned __int128 total = 0, cum = 0;
	size_t i = 0;

	for (size_t t = 0; t < s->n; t++)
		total += s->v[t].nbytes;
	start[0] = 0;
	for (uint64_t g = 1; g < k; g++) {
		unsigned __int128 want = total * g / k;

		while (i < s->n && cum < want)
			cum += s->v[i++].nbytes;
		start[g] = i;
	}
	start[k] = s->n;
	for (uint64_t g = 1; g < k; g++) {
		if (start[g] <= start[g - 1])
			start[g] = start[g - 1] + 1;
	}
	for (uint64_t g = k - 1; g >= 1; g--) {
		if (start[g] > s->n - (k - g))
			start[g] = s->n - (k - g);
	}
}

static int write_checkpoint(const struct opts *o, struct specs *s)
{
	struct spec **sorted = NULL;
	struct placefs_stwrite_tensor *st = NULL;
	const char *const default_meta[] = {"format", "pt"};
	const char *const *meta = o->nmeta ? (const char *const *)o->meta : default_meta;
	size_t nmeta = o->nmeta ? o->nmeta : 1;
	size_t *start = NULL, *shard_of = NULL;
	char **names = NULL;
	uint64_t k = o->shards;
	int as_file = k == 1 && !o->index && ends_with(o->out, ".safetensors");
	int rc = 0;

	sorted = sorted_specs(s);
	if (!sorted) {
		die_msg("out of memory");
		return -ENOMEM;
	}
	for (size_t i = 1; i < s->n; i++) {
		if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0) {
			die_msg("tensor \"%s\" is defined twice", sorted[i]->name);
			rc = -EINVAL;
			goto out;
		}
	}
	if (k > s->n && !(k == 1 && s->n == 0)) {
		die_msg("--shards %" PRIu64 " exceeds the number of tensors (%zu)", k, s->n);
		rc = -EINVAL;
		goto out;
	}
	if (!as_file) {
		struct stat sbuf;

		if (mkdir(o->out, 0755) != 0 &&
		    !(errno == EEXIST && stat(o->out, &sbuf) == 0 && S_ISDIR(sbuf.st_mode))) {
			rc = -errno;
			die_msg("cannot create directory %s: %s", o->out,
			        errno == EEXIST ? "exists and is not a directory"
			                        : strerror(errno));
			goto out;
		}
	}
	start = calloc(k + 1, sizeof(*start));
	names = calloc(k, sizeof(*names));
	shard_of = calloc(s->n ? s->n : 1, sizeof(*shard_of));
	st = calloc(s->n ? s->n : 1, sizeof(*st));
	if (!start || !names || !shard_of || !st) {
		die_msg("out of memory");
		rc = -ENOMEM;
		goto out;
	}
	split_shards(s, k, start);
	for (uint64_t g = 0; g < k; g++) {
		if (as_file)
			names[g] = strdup(o->out);
		else if (k == 1)
			names[g] = strdup("model.safetensors");
		else
			names[g] = xasprintf("model-%05" PRIu64 "-of-%05" PRIu64 ".safetensors",
			                     g + 1, k);
		if (!names[g]) {
			die_msg("out of memory");
			rc = -ENOMEM;
			goto out;
		}
	}
	for (uint64_t g = 0; g < k; g++) {
		struct placefs_error err;
		uint64_t bytes = 0;
		size_t cnt = start[g + 1] - start[g];
		char *path = as_file ? strdup(names[g]) : xasprintf("%s/%s", o->out, names[g]);

		if (!path) {
			die_msg("out of memory");
			rc = -ENOMEM;
			goto out;
		}
		for (size_t i = start[g]; i < start[g + 1]; i++) {
			st[i].name = s->v[i].name;
			st[i].dtype = s->v[i].dtype;
			st[i].ndim = s->v[i].ndim;
			st[i].shape = s->v[i].shape;
			shard_of[i] = g;
			bytes += s->v[i].nbytes;
		}
		placefs_error_clear(&err);
		rc = placefs_stwrite_file(path, st + start[g], cnt, meta, nmeta, o->seed, &err);
		if (rc) {
			die_msg("%s", err.msg);
			free(path);
			goto out;
		}
		if (!o->quiet)
			printf("%s: %zu tensors, %" PRIu64 " payload bytes\n", path, cnt, bytes);
		free(path);
	}
	if (o->index) {
		char *ipath = xasprintf("%s/model.safetensors.index.json", o->out);

		if (!ipath) {
			die_msg("out of memory");
			rc = -ENOMEM;
			goto out;
		}
		rc = write_index(ipath, sorted, s->n, shard_of, s, names);
		if (rc == 0 && !o->quiet)
			printf("%s: %zu entries\n", ipath, s->n);
		free(ipath);
	}
out:
	if (names) {
		for (uint64_t g = 0; g < k; g++)
			free(names[g]);
	}
	free(names);
	free(st);
	free(shard_of);
	free(start);
	free(sorted);
	return rc;
}

enum {
	OPT_SEED = 256,
	OPT_TENSOR,
	OPT_RANDOM,
	OPT_MAX_BYTES,
	OPT_LLAMA,
	OPT_MOE,
	OPT_SHARDS,
	OPT_INDEX,
	OPT_METADATA,
	OPT_QUANT,
};

static const struct option long_opts[] = {
        {"seed", required_argument, NULL, OPT_SEED},
        {"tensor", required_argument, NULL, OPT_TENSOR},
        {"random", required_argument, NULL, OPT_RANDOM},
        {"max-bytes", required_argument, NULL, OPT_MAX_BYTES},
        {"llama", required_argument, NULL, OPT_LLAMA},
        {"moe", required_argument, NULL, OPT_MOE},
        {"shards", required_argument, NULL, OPT_SHARDS},
        {"index", no_argument, NULL, OPT_INDEX},
        {"metadata", required_argument, NULL, OPT_METADATA},
        {"quant", required_argument, NULL, OPT_QUANT},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
};

/*
 * Ranges of the numeric options, refused beyond (exit status 2) before any
 * memory is spent: --random and --llama's L make tensor lists, and a header
 * (100 MB at most) holds at most some 1.6 million tensor entries.
 */
#define RANDOM_MAX    2000000ULL
#define LLAMA_L_MAX   100000ULL
#define LLAMA_DIM_MAX 4294967295ULL
#define MAX_BYTES_MAX (1ULL << 40) /* 1 TiB per --random tensor */

static int parse_count(const char *opt, const char *arg, uint64_t *out)
{
	int rc = parse_u64(arg, strlen(arg), out);

	if (rc == -ERANGE) {
		die_msg("%s: %s does not fit in 64 bits", opt, arg);
		return -ERANGE;
	}
	if (rc != 0) {
		die_msg("%s: \"%s\" is not a non-negative integer", opt, arg);
		return -EINVAL;
	}
	return 0;
}

/* parse_count() with an upper bound. */
static int parse_count_max(const char *opt, const char *arg, uint64_t max, uint64_t *out)
{
	if (parse_count(opt, arg, out))
		return -EINVAL;
	if (*out > max) {
		die_msg("%s: %s is more than the limit of %" PRIu64, opt, arg, max);
		return -ERANGE;
	}
	return 0;
}

/*
 * --moe L:H:E:I:V: five integers; L and E count tensors (at most
 * LLAMA_L_MAX each, and L * E * 3 at most RANDOM_MAX), the others are
 * dimensions.
 */
static int parse_moe(const char *arg, uint64_t *v)
{
	static const char *const what[] = {"L (layers)", "H", "E (experts)", "I", "V"};
	const char *p = arg;
	uint64_t n;

	for (int i = 0; i < 5; i++) {
		const char *e = strchr(p, ':');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		uint64_t max = (i == 0 || i == 2) ? LLAMA_L_MAX : LLAMA_DIM_MAX;

		if ((i < 4) != (e != NULL) || parse_u64(p, len, &v[i]) != 0) {
			die_msg("--moe %s: expected L:H:E:I:V (five non-negative integers)", arg);
			return -EINVAL;
		}
		if (v[i] > max) {
			die_msg("--moe %s: %s is more than the limit of %llu", arg, what[i],
			        (unsigned long long)max);
			return -ERANGE;
		}
		p += len + 1;
	}
	if (__builtin_mul_overflow(v[0], v[2], &n) || n > RANDOM_MAX / 3) {
		die_msg("--moe %s: L x E x 3 expert tensors is more than %llu", arg,
		        (unsigned long long)RANDOM_MAX);
		return -ERANGE;
	}
	return 0;
}

static int parse_quant(const char *arg, enum quant *q)
{
	for (size_t i = 0; i < sizeof(quant_names) / sizeof(quant_names[0]); i++) {
		if (strcmp(arg, quant_names[i]) == 0) {
			*q = (enum quant)i;
			return 0;
		}
	}
	die_msg("--quant %s: unknown quantization (want fp8 or gptq)", arg);
	return -EINVAL;
}

/*
 * The tensor-count limits with --quant, once all options are known: the
 * expert tensors of --moe (L x E x 3 linears x tensors per linear) and the
 * layer tensors of --llama (L x (7 linears x tensors per linear + 2 norms))
 * at most RANDOM_MAX, as --random. Without --quant both hold by the ranges
 * parse_moe() and parse_llama() enforce.
 */
static int check_quant(const struct opts *o)
{
	const uint64_t k = quant_tensors[o->quant];
	uint64_t n;

	if (o->quant == QUANT_NONE)
		return 0;
	if (!o->have_llama && !o->have_moe) {
		die_msg("--quant %s applies to --llama and --moe; give one of them",
		        quant_names[o->quant]);
		return -EINVAL;
	}
	if (o->have_moe && (__builtin_mul_overflow(o->moe[0], o->moe[2], &n) ||
	                    __builtin_mul_overflow(n, 3 * k, &n) || n > RANDOM_MAX)) {
		die_msg("--moe %" PRIu64 ":%" PRIu64 ":%" PRIu64 ":%" PRIu64 ":%" PRIu64
		        " --quant %s: L x E x 3 x %" PRIu64 " expert tensors is more than %llu",
		        o->moe[0], o->moe[1], o->moe[2], o->moe[3], o->moe[4],
		        quant_names[o->quant], k, RANDOM_MAX);
		return -ERANGE;
	}
	if (o->have_llama &&
	    (__builtin_mul_overflow(o->llama[0], 7 * k + 2, &n) || n > RANDOM_MAX)) {
		die_msg("--llama %" PRIu64 ":%" PRIu64 ":%" PRIu64 ":%" PRIu64
		        " --quant %s: L x %" PRIu64 " layer tensors is more than %llu",
		        o->llama[0], o->llama[1], o->llama[2], o->llama[3], quant_names[o->quant],
		        7 * k + 2, RANDOM_MAX);
		return -ERANGE;
	}
	return 0;
}

static int parse_llama(const char *arg, uint64_t *v)
{
	const char *p = arg;

	for (int i = 0; i < 4; i++) {
		const char *e = strchr(p, ':');
		size_t len = e ? (size_t)(e - p) : strlen(p);

		if ((i < 3) != (e != NULL) || parse_u64(p, len, &v[i]) != 0) {
			die_msg("--llama %s: expected L:H:I:V (four non-negative integers)", arg);
			return -EINVAL;
		}
		if (v[i] > (i == 0 ? LLAMA_L_MAX : LLAMA_DIM_MAX)) {
			die_msg("--llama %s: %s is more than the limit of %llu", arg,
			        i == 0   ? "L (layers)"
			        : i == 1 ? "H"
			        : i == 2 ? "I"
			                 : "V",
			        i == 0 ? LLAMA_L_MAX : LLAMA_DIM_MAX);
			return -ERANGE;
		}
		p += len + 1;
	}
	return 0;
}

/* Returns EXIT_OK to go on, or the exit status. Sets *done after -h/-V. */
static int parse_args(int argc, char **argv, struct opts *o, int *done)
{
	struct placefs_error err;
	int c;

	/* getopt's own messages lack our prefix: report bad options here instead. */
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":qhV", long_opts, NULL)) != -1) {
		switch (c) {
		case OPT_SEED:
			if (parse_count("--seed", optarg, &o->seed))
				return EXIT_USAGE;
			break;
		case OPT_TENSOR: o->tensor_args[o->ntensor_args++] = optarg; break;
		case OPT_RANDOM:
			if (parse_count_max("--random", optarg, RANDOM_MAX, &o->random_n))
				return EXIT_USAGE;
			break;
		case OPT_MAX_BYTES:
			placefs_error_clear(&err);
			if (placefs_size_parse(optarg, "--max-bytes", &o->max_bytes, &err) != 0) {
				die_msg("%s", err.msg);
				return EXIT_USAGE;
			}
			if (o->max_bytes > MAX_BYTES_MAX) {
				die_msg("--max-bytes: %s is more than the limit of 1T (%llu bytes)",
				        optarg, MAX_BYTES_MAX);
				return EXIT_USAGE;
			}
			break;
		case OPT_MOE:
			if (parse_moe(optarg, o->moe))
				return EXIT_USAGE;
			o->have_moe = 1;
			break;
		case OPT_LLAMA:
			if (parse_llama(optarg, o->llama))
				return EXIT_USAGE;
			o->have_llama = 1;
			break;
		case OPT_SHARDS:
			if (parse_count("--shards", optarg, &o->shards))
				return EXIT_USAGE;
			if (o->shards == 0 || o->shards > 99999) {
				die_msg("--shards: %s must be between 1 and 99999", optarg);
				return EXIT_USAGE;
			}
			break;
		case OPT_INDEX: o->index = 1; break;
		case OPT_QUANT:
			if (parse_quant(optarg, &o->quant))
				return EXIT_USAGE;
			break;
		case OPT_METADATA: {
			char *eq = strchr(optarg, '=');

			if (!eq) {
				die_msg("--metadata %s: expected KEY=VALUE", optarg);
				return EXIT_USAGE;
			}
			*eq = '\0';
			o->meta[2 * o->nmeta] = optarg;
			o->meta[2 * o->nmeta + 1] = eq + 1;
			o->nmeta++;
			break;
		}
		case 'q': o->quiet = 1; break;
		case 'h':
			usage(stdout);
			*done = 1;
			return EXIT_OK;
		case 'V':
			printf(PROG " %s\n", PACKAGE_VERSION);
			*done = 1;
			return EXIT_OK;
		case ':':
			die_msg("option %s needs an argument (see --help)", argv[optind - 1]);
			return EXIT_USAGE;
		default:
			if (optopt)
				die_msg("unknown option -%c (see --help)", optopt);
			else
				die_msg("unknown option %s (see --help)", argv[optind - 1]);
			return EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		die_msg(optind >= argc ? "missing OUT (see --help)"
		                       : "too many arguments (see --help)");
		return EXIT_USAGE;
	}
	o->out = argv[optind];
	if (!*o->out) {
		die_msg("OUT is empty");
		return EXIT_USAGE;
	}
	if (check_quant(o))
		return EXIT_USAGE;
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	struct opts o = {.seed = 1, .max_bytes = 64 << 10, .shards = 1};
	struct specs s = {0};
	int done = 0;
	int status;

	/* Each repeatable option takes one argv slot, so argc bounds their count. */
	o.tensor_args = calloc((size_t)argc, sizeof(*o.tensor_args));
	o.meta = calloc(2 * (size_t)argc, sizeof(*o.meta));
	if (!o.tensor_args || !o.meta) {
		die_msg("out of memory");
		status = EXIT_ERR;
		goto out;
	}
	status = parse_args(argc, argv, &o, &done);
	if (status != EXIT_OK || done)
		goto out;
	/* Bad tensor specs are usage errors; failures after this point are not. */
	if (o.have_llama && add_llama(&s, o.llama, o.quant) != 0) {
		status = EXIT_USAGE;
		goto out;
	}
	if (o.have_moe && add_moe(&s, o.moe, o.quant) != 0) {
		status = EXIT_USAGE;
		goto out;
	}
	for (size_t i = 0; i < o.ntensor_args; i++) {
		if (add_tensor_arg(&s, o.tensor_args[i]) != 0) {
			status = EXIT_USAGE;
			goto out;
		}
	}
	if (o.random_n && add_random(&s, o.random_n, o.max_bytes, o.seed) != 0) {
		status = EXIT_ERR;
		goto out;
	}
	if (write_checkpoint(&o, &s) != 0)
		status = EXIT_ERR;
	if (fflush(stdout) != 0 && status == EXIT_OK) {
		die_msg("cannot write to standard output: %s", strerror(errno));
		status = EXIT_ERR;
	}
out:
	specs_release(&s);
	free(o.meta);
	free(o.tensor_args);
	return status;
}
