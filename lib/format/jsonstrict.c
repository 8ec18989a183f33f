/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/jsonstrict_i.h"

/*
 * cJSON keeps no token text and is lenient where the reference reader
 * (serde_json) is strict, so parsing happens in three steps:
 *
 *  1. the whole text is checked to be UTF-8;
 *  2. a lexer walks the raw bytes, enforcing the JSON token grammar, the
 *     whitespace set, string escapes, and recording every number token with
 *     its exact unsigned value;
 *  3. cJSON builds the tree (it checks the grammar between tokens), then a
 *     pre-order walk of the tree pairs the k-th number node with the k-th
 *     number token and looks for duplicate keys in every object.
 *
 * A number node's valueint (meaningless anyway: cJSON saturates it) is
 * overwritten with its token index so placefs_json_u64() is O(1).
 */

struct numtok {
	const cJSON *node; /* filled in by the tree walk */
	uint64_t value;
	int status; /* 0, -EINVAL (not a plain non-negative integer) or -ERANGE */
};

struct placefs_json {
	cJSON *root;
	struct numtok *nums;
	size_t nnums;
};

/* Array element counts are tracked this deep; cJSON refuses deeper nesting anyway. */
#define LEX_TRACK_DEPTH (CJSON_NESTING_LIMIT + 2)

struct lexer {
	const unsigned char *p;
	size_t len;
	struct numtok *nums;
	size_t nnums, cap;
	size_t depth, maxdepth;
	size_t first_value; /* offset of the first token, len when none */
	const struct placefs_json_limits *lim;
	size_t ntokens;
	/* Per open container: '[' or '{', and for arrays the commas seen so far. */
	unsigned char *open;
	size_t *commas;
	/* The last string token at depth 1 and 2 (member names, for messages). */
	size_t key_off[3], key_len[3];
};

struct jctx {
	const char *file;
	enum placefs_errkind kind;
	struct placefs_error *err;
};

static const char *kind_where(enum placefs_errkind kind)
{
	switch (kind) {
	case PLACEFS_E_FORMAT: return "header";
	case PLACEFS_E_INDEX: return "index";
	default: return "document";
	}
}

static int jfail(const struct jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int jfail(const struct jctx *c, const char *fmt, ...)
{
	char what[PLACEFS_ERROR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return placefs_error_set(c->err, -EINVAL, c->kind, "%s: invalid JSON in %s: %s", c->file,
	                         kind_where(c->kind), what);
}

static int jnomem(const struct jctx *c)
{
	return placefs_error_set(c->err, -ENOMEM, PLACEFS_E_NOMEM,
	                         "%s: out of memory parsing the %s", c->file, kind_where(c->kind));
}

/*
 * Returns the offset of the first byte that does not start a valid UTF-8
 * sequence (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF),
 * or len when the whole text is valid.
 */
static size_t utf8_scan(const unsigned char *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		unsigned char c = s[i];
		unsigned char lo = 0x80, hi = 0xbf;
		size_t n;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			n = 1;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 2;
			if (c == 0xe0)
				lo = 0xa0;
			else if (c == 0xed)
				hi = 0x9f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 3;
			if (c == 0xf0)
				lo = 0x90;
			else if (c == 0xf4)
				hi = 0x8f;
		} else {
			return i;
		}
		if (len - i - 1 < n)
			return i;
		if (s[i + 1] < lo || s[i + 1] > hi)
			return i;
		for (size_t k = 2; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
		}
		i += n + 1;
	}
	return len;
}

int placefs_utf8_valid(const char *s, size_t len)
{
	if (!s)
		return len == 0;
	return utf8_scan((const unsigned char *)s, len) == len;
}

const char *placefs_json_type_name(const cJSON *v)
{
	if (cJSON_IsNull(v))
		return "null";
	if (cJSON_IsBool(v))
		return "a boolean";
	if (cJSON_IsNumber(v))
		return "a number";
	if (cJSON_IsString(v))
		return "a string";
	if (cJSON_IsArray(v))
		return "an array";
	if (cJSON_IsObject(v))
		return "an object";
	return "an unknown value";
}

const char *placefs_json_quote(char *buf, size_t size, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	size_t o = 0;

	if (!buf || size < 16) {
		if (buf && size)
			buf[0] = '\0';
		return buf;
	}
	buf[o++] = '"';
	while (*p) {
		char tmp[8];
		size_t n;

		if (*p == '"' || *p == '\\') {
			tmp[0] = '\\';
			tmp[1] = (char)*p;
			n = 2;
		} else if (*p < 0x20 || *p == 0x7f) {
			snprintf(tmp, sizeof(tmp), "\\x%02x", *p);
			n = 4;
		} else if (*p < 0x80) {
			tmp[0] = (char)*p;
			n = 1;
		} else {
			/* Keep a multi-byte character whole so the message stays UTF-8. */
			n = *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : *p >= 0xc0 ? 2 : 1;
			for (size_t k = 1; k < n; k++) {
				if (!p[k]) {
					n = k;
					break;
				}
			}
			memcpy(tmp, p, n);
		}
		/* Room for this piece, then either more or `..."` and the NUL. */
		if (o + n + 5 > size) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		memcpy(buf + o, tmp, n);
		o += n;
		p += (*p < 0x80 || n == 1) ? 1 : n;
	}
	buf[o++] = '"';
	buf[o] = '\0';
	return buf;
}

static bool is_ws(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Reads \uXXXX at s[i]; returns the code unit or -1. */
static long read_u_escape(const struct lexer *lx, size_t i)
{
	long v = 0;

	if (lx->len - i < 6 || lx->p[i] != '\\' || lx->p[i + 1] != 'u')
		return -1;
	for (size_t k = 2; k < 6; k++) {
		int h = hexval(lx->p[i + k]);

		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

static int lex_string(struct lexer *lx, size_t *pos, const struct jctx *c)
{
	size_t start = *pos;
	size_t i = start + 1;

	for (;;) {
		unsigned char ch;

		if (i >= lx->len)
			return jfail(c, "unterminated string starting at byte %zu", start);
		ch = lx->p[i];
		if (ch == '"')
			break;
		if (ch < 0x20)
			return jfail(c, "raw control byte 0x%02x in a string at byte %zu", ch, i);
		if (ch != '\\') {
			i++;
			continue;
		}
		if (i + 1 >= lx->len)
			return jfail(c, "unterminated string starting at byte %zu", start);
		switch (lx->p[i + 1]) {
		case '"':
		case '\\':
		case '/':
		case 'b':
		case 'f':
		case 'n':
		case 'r':
		case 't': i += 2; break;
		case 'u': {
			long u = read_u_escape(lx, i);

			if (u < 0)
				return jfail(c, "invalid \\u escape at byte %zu", i);
			if (u == 0)
				return jfail(c,
				             "\\u0000 in a string at byte %zu (NUL is not allowed)",
				             i);
			if (u >= 0xdc00 && u <= 0xdfff)
				return jfail(c, "unpaired low surrogate \\u%04lx at byte %zu", u,
				             i);
			if (u >= 0xd800 && u <= 0xdbff) {
				long u2 = read_u_escape(lx, i + 6);

				if (u2 < 0xdc00 || u2 > 0xdfff)
					return jfail(c,
					             "unpaired high surrogate \\u%04lx at byte %zu",
					             u, i);
				i += 12;
			} else {
				i += 6;
			}
			break;
		}
		default:
			if (lx->p[i + 1] >= 0x20 && lx->p[i + 1] < 0x7f)
				return jfail(c, "invalid escape \\%c at byte %zu", lx->p[i + 1], i);
			return jfail(c, "invalid escape at byte %zu", i);
		}
	}
	*pos = i + 1;
	return 0;
}

/* cJSON copies at most 63 characters of a number token. */
#define NUMBER_TOKEN_MAX 63

static int lex_number(struct lexer *lx, size_t *pos, const struct jctx *c)
{
	size_t start = *pos, i = start;
	bool plain = true;
	uint64_t v = 0;
	int status = 0;

	if (lx->p[i] == '-') {
		plain = false;
		i++;
	}
	if (i >= lx->len || !is_digit(lx->p[i]))
		return jfail(c, "invalid number at byte %zu", start);
	if (lx->p[i] == '0') {
		i++;
		if (i < lx->len && is_digit(lx->p[i]))
			return jfail(c, "number with a leading zero at byte %zu", start);
	} else {
		while (i < lx->len && is_digit(lx->p[i])) {
			/* Exact value, as strtoull() with an ERANGE check would give. */
			if (__builtin_mul_overflow(v, 10, &v) ||
			    __builtin_add_overflow(v, (uint64_t)(lx->p[i] - '0'), &v))
				status = -ERANGE;
			i++;
		}
	}
	if (i < lx->len && lx->p[i] == '.') {
		plain = false;
		i++;
		if (i >= lx->len || !is_digit(lx->p[i]))
			return jfail(c, "invalid number at byte %zu", start);
		while (i < lx->len && is_digit(lx->p[i]))
			i++;
	}
	if (i < lx->len && (lx->p[i] == 'e' || lx->p[i] == 'E')) {
		plain = false;
		i++;
		if (i < lx->len && (lx->p[i] == '+' || lx->p[i] == '-'))
			i++;
		if (i >= lx->len || !is_digit(lx->p[i]))
			return jfail(c, "invalid number at byte %zu", start);
		while (i < lx->len && is_digit(lx->p[i]))
			i++;
	}
	if (i - start > NUMBER_TOKEN_MAX)
		return jfail(c, "number longer than %d characters at byte %zu", NUMBER_TOKEN_MAX,
		             start);
	if (lx->nnums == lx->cap) {
		size_t ncap = lx->cap ? lx->cap * 2 : 64;
		struct numtok *n;

		if (ncap > SIZE_MAX / sizeof(*n))
			return jnomem(c);
		n = realloc(lx->nums, ncap * sizeof(*n));
		if (!n)
			return jnomem(c);
		lx->nums = n;
		lx->cap = ncap;
	}
	/* The index is stored in cJSON's int valueint. */
	if (lx->nnums >= INT_MAX)
		return jfail(c, "too many numbers (more than %d)", INT_MAX);
	lx->nums[lx->nnums].node = NULL;
	lx->nums[lx->nnums].value = v;
	lx->nums[lx->nnums].status = plain ? status : -EINVAL;
	lx->nnums++;
	*pos = i;
	return 0;
}

static int lex_literal(struct lexer *lx, size_t *pos, const struct jctx *c)
{
	static const char *const lits[] = {"true", "false", "null"};

	for (size_t k = 0; k < sizeof(lits) / sizeof(lits[0]); k++) {
		size_t n = strlen(lits[k]);

		if (lx->len - *pos >= n && memcmp(lx->p + *pos, lits[k], n) == 0) {
			*pos += n;
			return 0;
		}
	}
	return jfail(c, "invalid literal at byte %zu", *pos);
}

/* The raw text of the last member name at `depth` (1 or 2), quoted for a message. */
static const char *last_key(const struct lexer *lx, size_t depth, char *q, size_t qsize)
{
	char raw[PLACEFS_JSON_QUOTE_MAX];
	size_t n = lx->key_len[depth];

	if (n >= sizeof(raw))
		n = sizeof(raw) - 1;
	memcpy(raw, lx->p + lx->key_off[depth], n);
	raw[n] = '\0';
	return placefs_json_quote(q, qsize, raw);
}

/* One more value or key; refused past the document's token budget. */
static int count_token(struct lexer *lx, size_t pos, const struct jctx *c)
{
	const struct placefs_json_limits *l = lx->lim;
	size_t budget;

	lx->ntokens++;
	if (!l || !l->bytes_per_token)
		return 0;
	budget = lx->len / l->bytes_per_token + l->tokens_extra;
	if (lx->ntokens <= budget)
		return 0;
	return jfail(c,
	             "more than %zu values and names (at most one per %zu bytes of the %s, "
	             "plus %zu), at byte %zu",
	             budget, l->bytes_per_token, kind_where(c->kind), l->tokens_extra, pos);
}

/* A ',' inside an array: one more element after it. */
static int count_element(struct lexer *lx, size_t pos, const struct jctx *c)
{
	const struct placefs_json_limits *l = lx->lim;
	char q1[PLACEFS_JSON_QUOTE_MAX], q2[PLACEFS_JSON_QUOTE_MAX];

	lx->commas[lx->depth]++;
	if (!l || !l->array_max || lx->commas[lx->depth] < l->array_max)
		return 0;
	if (lx->depth >= 3 && lx->key_len[1] + lx->key_len[2] > 0)
		return jfail(c,
		             "%s %s: %s has more than %zu elements, the limit for any array "
		             "(%s), at byte %zu",
		             l->array_owner ? l->array_owner : "member",
		             last_key(lx, 1, q1, sizeof(q1)), last_key(lx, 2, q2, sizeof(q2)),
		             l->array_max, l->array_rule ? l->array_rule : "placefs", pos);
	return jfail(c,
	             "an array has more than %zu elements, the limit for any array (%s), at "
	             "byte %zu",
	             l->array_max, l->array_rule ? l->array_rule : "placefs", pos);
}

static int lex_all(struct lexer *lx, const struct jctx *c)
{
	size_t pos = 0;
	int rc;

	lx->first_value = lx->len;
	while (pos < lx->len) {
		unsigned char ch = lx->p[pos];

		if (is_ws(ch)) {
			pos++;
			continue;
		}
		if (lx->first_value == lx->len)
			lx->first_value = pos;
		if (ch != ',' && ch != ':' && ch != '}' && ch != ']') {
			rc = count_token(lx, pos, c);
			if (rc)
				return rc;
		}
		switch (ch) {
		case '{':
		case '[':
			lx->depth++;
			if (lx->depth > lx->maxdepth)
				lx->maxdepth = lx->depth;
			if (lx->open && lx->depth < LEX_TRACK_DEPTH) {
				lx->open[lx->depth] = ch;
				lx->commas[lx->depth] = 0;
			}
			pos++;
			break;
		case '}':
		case ']':
			if (lx->depth)
				lx->depth--;
			pos++;
			break;
		case ',':
			if (lx->open && lx->depth < LEX_TRACK_DEPTH && lx->open[lx->depth] == '[') {
				rc = count_element(lx, pos, c);
				if (rc)
					return rc;
			}
			pos++;
			break;
		case ':': pos++; break;
		case '"': {
			size_t start = pos;

			rc = lex_string(lx, &pos, c);
			if (rc)
				return rc;
			if (lx->depth >= 1 && lx->depth <= 2) {
				lx->key_off[lx->depth] = start + 1;
				lx->key_len[lx->depth] = pos - start - 2;
			}
			break;
		}
		case '-':
		case '0':
		case '1':
		case '2':
		case '3':
		case '4':
		case '5':
		case '6':
		case '7':
		case '8':
		case '9':
			rc = lex_number(lx, &pos, c);
			if (rc)
				return rc;
			break;
		case 't':
		case 'f':
		case 'n':
			rc = lex_literal(lx, &pos, c);
			if (rc)
				return rc;
			break;
		default:
			if (pos == 0 && lx->len >= 3 && memcmp(lx->p, "\xef\xbb\xbf", 3) == 0)
				return jfail(c, "byte-order mark at byte 0 (not allowed)");
			if (ch == 0)
				return jfail(c, "NUL byte at byte %zu", pos);
			if (ch < 0x20 || ch == 0x7f)
				return jfail(c, "control byte 0x%02x outside a string at byte %zu",
				             ch, pos);
			if (ch < 0x80)
				return jfail(c, "unexpected character '%c' at byte %zu", ch, pos);
			return jfail(c, "unexpected byte 0x%02x at byte %zu", ch, pos);
		}
	}
	return 0;
}

struct keyref {
	const char *key;
	size_t idx;
};

static int keyref_cmp(const void *a, const void *b)
{
	const struct keyref *x = a, *y = b;
	int r = strcmp(x->key, y->key);

	if (r)
		return r;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

struct walk {
	struct keyref *keys;
	size_t keycap;
	cJSON **stack;
	size_t sp, stackcap;
	size_t k; /* next number token */
};

/*
 * Checks one object for repeated keys in O(n log n): sorting (key, position)
 * pairs makes equal keys neighbours. The key reported is the one whose second
 * occurrence comes first in the document.
 */
static int check_object(struct walk *w, const cJSON *obj, const struct jctx *c)
{
	size_t n = 0, best = SIZE_MAX;
	const char *dup = NULL;
	char q[PLACEFS_JSON_QUOTE_MAX];

	for (const cJSON *m = obj->child; m; m = m->next)
		n++;
	if (n < 2)
		return 0;
	if (n > w->keycap) {
		struct keyref *nk;

		if (n > SIZE_MAX / sizeof(*nk))
			return jnomem(c);
		nk = realloc(w->keys, n * sizeof(*nk));
		if (!nk)
			return jnomem(c);
		w->keys = nk;
		w->keycap = n;
	}
	n = 0;
	for (const cJSON *m = obj->child; m; m = m->next) {
		w->keys[n].key = m->string ? m->string : "";
		w->keys[n].idx = n;
		n++;
	}
	qsort(w->keys, n, sizeof(*w->keys), keyref_cmp);
	for (size_t i = 1; i < n; i++) {
		if (strcmp(w->keys[i - 1].key, w->keys[i].key) == 0 && w->keys[i].idx < best) {
			best = w->keys[i].idx;
			dup = w->keys[i].key;
		}
	}
	if (dup)
		return jfail(c, "duplicate key %s", placefs_json_quote(q, sizeof(q), dup));
	return 0;
}

static int visit(struct walk *w, cJSON *node, struct placefs_json *js, const struct jctx *c)
{
	if (cJSON_IsNumber(node)) {
		if (w->k >= js->nnums)
			return jfail(c, "internal error: more number nodes than number tokens");
		js->nums[w->k].node = node;
		node->valueint = (int)w->k;
		w->k++;
	} else if (cJSON_IsObject(node)) {
		return check_object(w, node, c);
	}
	return 0;
}

static int push(struct walk *w, cJSON *node, const struct jctx *c)
{
	if (w->sp == w->stackcap) {
		size_t ncap = w->stackcap ? w->stackcap * 2 : 32;
		cJSON **ns = realloc(w->stack, ncap * sizeof(*ns));

		if (!ns)
			return jnomem(c);
		w->stack = ns;
		w->stackcap = ncap;
	}
	w->stack[w->sp++] = node;
	return 0;
}

/* Pre-order walk without recursion; the stack holds next siblings to resume. */
static int walk_tree(struct placefs_json *js, const struct jctx *c)
{
	struct walk w = {0};
	cJSON *cur = js->root;
	int rc = 0;

	while (cur) {
		rc = visit(&w, cur, js, c);
		if (rc)
			goto out;
		if (cur->child) {
			if (cur != js->root && cur->next) {
				rc = push(&w, cur->next, c);
				if (rc)
					goto out;
			}
			cur = cur->child;
		} else if (cur != js->root && cur->next) {
			cur = cur->next;
		} else {
			cur = w.sp ? w.stack[--w.sp] : NULL;
		}
	}
	if (w.k != js->nnums)
		rc = jfail(c, "internal error: %zu number tokens but %zu number nodes", js->nnums,
		           w.k);
out:
	free(w.keys);
	free(w.stack);
	return rc;
}

int placefs_json_parse(const char *file, const char *text, size_t len, enum placefs_errkind kind,
                       struct placefs_json **out, struct placefs_error *err)
{
	return placefs_json_parse_limited(file, text, len, kind, NULL, out, err);
}

int placefs_json_parse_limited(const char *file, const char *text, size_t len,
                               enum placefs_errkind kind, const struct placefs_json_limits *lim,
                               struct placefs_json **out, struct placefs_error *err)
{
	struct jctx c = {.file = file ? file : "(unknown)", .kind = kind, .err = err};
	struct lexer lx = {0};
	struct placefs_json *js = NULL;
	const char *end = NULL;
	size_t bad;
	int rc;

	*out = NULL;
	if (!text && len)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "placefs_json_parse: NULL text");
	bad = utf8_scan((const unsigned char *)text, len);
	if (bad != len)
		return placefs_error_set(err, -EINVAL, kind,
		                         "%s: invalid UTF-8 in %s: bad byte 0x%02x at byte %zu",
		                         c.file, kind_where(kind), (unsigned char)text[bad], bad);

	lx.p = (const unsigned char *)text;
	lx.len = len;
	lx.lim = lim;
	if (lim && lim->array_max) {
		lx.open = calloc(LEX_TRACK_DEPTH, sizeof(*lx.open));
		lx.commas = calloc(LEX_TRACK_DEPTH, sizeof(*lx.commas));
		if (!lx.open || !lx.commas) {
			rc = jnomem(&c);
			goto fail;
		}
	}
	rc = lex_all(&lx, &c);
	free(lx.open);
	free(lx.commas);
	lx.open = NULL;
	lx.commas = NULL;
	if (rc)
		goto fail;
	if (lx.first_value == len) {
		rc = jfail(&c, "empty %s", kind_where(kind));
		goto fail;
	}

	js = calloc(1, sizeof(*js));
	if (!js) {
		rc = jnomem(&c);
		goto fail;
	}
	js->nums = lx.nums;
	js->nnums = lx.nnums;
	lx.nums = NULL;

	/*
	 * The length-taking entry point reads only within text[0..len), so the
	 * caller's buffer needs no NUL. cJSON also records the failure position
	 * in a global; we use `end` instead, but concurrent parses still write
	 * that global (a benign race that thread sanitizers report).
	 */
	js->root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
	if (!js->root) {
		size_t off = end ? (size_t)(end - text) : 0;

		if (lx.maxdepth > CJSON_NESTING_LIMIT)
			rc = jfail(&c, "nested deeper than %d levels", CJSON_NESTING_LIMIT);
		else
			rc = jfail(&c, "syntax error at byte %zu", off);
		goto fail;
	}
	for (size_t i = (size_t)(end - text); i < len; i++) {
		if (!is_ws((unsigned char)text[i])) {
			rc = jfail(&c, "unexpected data after the top-level value at byte %zu", i);
			goto fail;
		}
	}
	if (!cJSON_IsObject(js->root)) {
		rc = jfail(&c, "the top-level value is not an object");
		goto fail;
	}
	rc = walk_tree(js, &c);
	if (rc)
		goto fail;
	*out = js;
	return 0;

fail:
	free(lx.open);
	free(lx.commas);
	free(lx.nums);
	placefs_json_free(js);
	return rc;
}

void placefs_json_free(struct placefs_json *js)
{
	if (!js)
		return;
	cJSON_Delete(js->root);
	free(js->nums);
	free(js);
}

const cJSON *placefs_json_root(const struct placefs_json *js)
{
	return js ? js->root : NULL;
}

int placefs_json_u64(const struct placefs_json *js, const cJSON *node, uint64_t *out)
{
	const struct numtok *t;

	if (!js || !node || !cJSON_IsNumber(node))
		return -EINVAL;
	if (node->valueint < 0 || (size_t)node->valueint >= js->nnums)
		return -EINVAL;
	t = &js->nums[node->valueint];
	if (t->node != node)
		return -EINVAL;
	if (t->status)
		return t->status;
	if (out)
		*out = t->value;
	return 0;
}

const char *placefs_json_version(void)
{
	return cJSON_Version();
}
