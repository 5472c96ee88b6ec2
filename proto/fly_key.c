/*
 * fly_key.c -- shape keys: problem <-> canonical key string, validation,
 * bucketing and the key hash.
 *
 * Owns: the read-only tables of op, dtype, layout and flag names and of
 * which dtypes and flags each op allows.  Thread: any; no mutable state.
 * Invariant: for every problem p with fly_problem_validate(p) == 0,
 * fly_key_parse(fly_key_format(p)) == p, and fly_key_parse accepts no
 * other spelling of p (the key is the identity of a tuning result).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fly_err.h"
#include "fly_hash.h"
#include "fly_key.h"

#define DT(x) (1u << FLY_DT_##x)

struct op_info {
	const char *name;
	int ndims;
	const char *const *dims;
	int has_layout;
	uint32_t dtypes; /* bit (1 << dtype) per allowed dtype */
	uint32_t flags;	 /* allowed FLY_F_* */
	int bucket_dim;	 /* default bucketed dim */
};

static const char *const dims_mnk[] = {"m", "n", "k", NULL};
static const char *const dims_gmnk[] = {"g", "m", "n", "k", NULL};
static const char *const dims_mn[] = {"m", "n", NULL};
static const char *const dims_attn[] = {"b",   "sq", "skv", "hq",
					"hkv", "d",  NULL};
static const char *const dims_mqa[] = {"sq", "skv", "h", "d", NULL};

static const struct op_info ops[FLY_OP_COUNT] = {
    [FLY_OP_GEMM] = {"gemm", 3, dims_mnk, 1, DT(FP32) | DT(FP16) | DT(BF16),
		     FLY_F_BIAS | FLY_F_SCALE, 0},
    [FLY_OP_GROUPED_GEMM] = {"grouped_gemm", 4, dims_gmnk, 1,
			     DT(FP32) | DT(FP16) | DT(BF16), 0, 1},
    [FLY_OP_SCALED_GEMM] = {"scaled_gemm", 3, dims_mnk, 1,
			    DT(FP8_E4M3) | DT(FP8_E5M2) | DT(MXFP8) |
				DT(MXFP4) | DT(FP8_E4M3FNUZ),
			    FLY_F_BIAS, 0},
    [FLY_OP_RMSNORM] = {"rmsnorm", 2, dims_mn, 0,
			DT(FP32) | DT(FP16) | DT(BF16), FLY_F_RESIDUAL, 0},
    [FLY_OP_TOPK] = {"topk", 3, dims_mnk, 0, DT(FP32) | DT(FP16) | DT(BF16),
		     FLY_F_DETERMINISTIC, 0},
    [FLY_OP_ATTENTION] = {"attention", 6, dims_attn, 0, DT(FP16) | DT(BF16),
			  FLY_F_CAUSAL, 1},
    [FLY_OP_MQA_LOGITS] = {"mqa_logits", 4, dims_mqa, 0,
			   DT(FP8_E4M3) | DT(FP8_E4M3FNUZ),
			   FLY_F_CLEAN | FLY_F_KV_FNUZ, 0},
};

static const char *const dtype_names[FLY_DT_COUNT] = {
    [FLY_DT_FP32] = "fp32",	    [FLY_DT_FP16] = "fp16",
    [FLY_DT_BF16] = "bf16",	    [FLY_DT_FP8_E4M3] = "fp8_e4m3",
    [FLY_DT_FP8_E5M2] = "fp8_e5m2", [FLY_DT_MXFP8] = "mxfp8",
    [FLY_DT_MXFP4] = "mxfp4",	    [FLY_DT_FP8_E4M3FNUZ] = "fp8_e4m3fnuz",
};

static const char *const layout_names[FLY_LAYOUT_COUNT] = {
    [FLY_LAYOUT_NT] = "NT",
    [FLY_LAYOUT_NN] = "NN",
    [FLY_LAYOUT_TN] = "TN",
    [FLY_LAYOUT_TT] = "TT",
};

/* Flag names by bit position (bit 0 = FLY_F_BIAS). */
static const char *const flag_names[] = {"bias",   "scale", "residual", "det",
					 "causal", "clean", "kvfnuz", "exact"};
#define NFLAGS ((int)(sizeof(flag_names) / sizeof(flag_names[0])))

static const struct op_info *op_get(uint32_t op)
{
	if (op == FLY_OP_NONE || op >= FLY_OP_COUNT)
		return NULL;
	return &ops[op];
}

const char *fly_op_name(uint32_t op)
{
	const struct op_info *oi = op_get(op);

	return oi ? oi->name : NULL;
}

const char *fly_dtype_name(uint32_t dtype)
{
	return dtype < FLY_DT_COUNT ? dtype_names[dtype] : NULL;
}

const char *fly_layout_name(uint32_t layout)
{
	return layout < FLY_LAYOUT_COUNT ? layout_names[layout] : NULL;
}

/* Index of @p s (len bytes) in a table of names, or 0 when absent. */
static uint32_t name_find(const char *const *tab, uint32_t n, const char *s,
			  size_t len)
{
	for (uint32_t i = 1; i < n; i++) {
		if (tab[i] && strlen(tab[i]) == len && !memcmp(tab[i], s, len))
			return i;
	}
	return 0;
}

uint32_t fly_op_parse(const char *s, size_t len)
{
	for (uint32_t i = 1; i < FLY_OP_COUNT; i++) {
		if (strlen(ops[i].name) == len && !memcmp(ops[i].name, s, len))
			return i;
	}
	return FLY_OP_NONE;
}

uint32_t fly_dtype_parse(const char *s, size_t len)
{
	return name_find(dtype_names, FLY_DT_COUNT, s, len);
}

uint32_t fly_layout_parse(const char *s, size_t len)
{
	return name_find(layout_names, FLY_LAYOUT_COUNT, s, len);
}

int fly_op_ndims(uint32_t op)
{
	const struct op_info *oi = op_get(op);

	return oi ? oi->ndims : 0;
}

const char *const *fly_op_dim_names(uint32_t op)
{
	const struct op_info *oi = op_get(op);

	return oi ? oi->dims : NULL;
}

int fly_op_has_layout(uint32_t op)
{
	const struct op_info *oi = op_get(op);

	return oi ? oi->has_layout : 0;
}

/* The OCP MX formats scale blocks of 32 along K: K % 32 != 0 has no
 * meaning (no partial block). */
static int fly_problem_mx_k_bad(const struct fly_problem *p)
{
	return p->op == FLY_OP_SCALED_GEMM &&
	       (p->dtype == FLY_DT_MXFP8 || p->dtype == FLY_DT_MXFP4) &&
	       p->dims[2] % 32 != 0;
}

/* Attention (issue 16): the kernels are built for head_dim 64, 128 and
 * 256, and each query head reads kv head h / (hq / hkv) (GQA/MQA), so
 * hkv must divide hq.  @return 0, or which rule the key breaks: 1 (d),
 * 2 (hkv does not divide hq). */
static int fly_problem_attn_bad(const struct fly_problem *p)
{
	if (p->op != FLY_OP_ATTENTION)
		return 0;
	if (p->dims[5] != 64 && p->dims[5] != 128 && p->dims[5] != 256)
		return 1;
	if (p->dims[4] <= 0 || p->dims[3] % p->dims[4] != 0)
		return 2;
	return 0;
}

static int64_t bucket_value(int64_t v, const struct fly_bucket_policy *pol);

/* Whether @p p's varying dim differs from its bucket's representative
 * under the default policy: only then has it an exact key of its own
 * (one that buckets to itself is its bucket key's own shape). */
static int exact_differs(const struct fly_problem *p)
{
	struct fly_bucket_policy pol;
	struct fly_problem q = *p;

	fly_bucket_policy_default(p->op, &pol);
	if (pol.dim < 0)
		return 0;
	q.flags &= ~FLY_F_EXACT;
	fly_problem_bucket(&q, &pol);
	return q.dims[pol.dim] != p->dims[pol.dim];
}

int fly_problem_validate(const struct fly_problem *p)
{
	const struct op_info *oi;
	int64_t prod = 1;

	if (p == NULL)
		return -EINVAL;
	oi = op_get(p->op);
	if (oi == NULL)
		return FLY_E_BADOP;
	if (p->dtype >= FLY_DT_COUNT || !(oi->dtypes & (1u << p->dtype)))
		return FLY_E_BADDTYPE;
	for (int i = 0; i < FLY_DIMS_MAX; i++) {
		if (i < oi->ndims ? p->dims[i] <= 0 : p->dims[i] != 0)
			return FLY_E_BADDIM;
	}
	for (int i = 0; i < oi->ndims; i++) {
		if (__builtin_mul_overflow(prod, p->dims[i], &prod))
			return FLY_E_OVERFLOW;
	}
	if (fly_problem_mx_k_bad(p) || fly_problem_attn_bad(p))
		return FLY_E_BADDIM;
	if (oi->has_layout ? (p->layout == FLY_LAYOUT_NONE ||
			      p->layout >= FLY_LAYOUT_COUNT)
			   : p->layout != FLY_LAYOUT_NONE)
		return FLY_E_INVALID;
	if (p->flags & ~(oi->flags | FLY_F_EXACT))
		return FLY_E_INVALID;
	if ((p->flags & FLY_F_EXACT) && !exact_differs(p))
		return FLY_E_INVALID;
	return 0;
}

/* Append @p s to tmp at *n (tmp has room: every piece is bounded and the
 * buffer is FLY_KEY_MAX * 2 + the longest name set, see fly_key_format). */
static void put_str(char *tmp, size_t *n, const char *s)
{
	size_t k = *n;

	/* the names are a few bytes: a byte loop, not strlen + memcpy
	 * calls (2 of them per name, on every process-cache miss) */
	while (*s != '\0')
		tmp[k++] = *s++;
	*n = k;
}

/* Append a positive int64 in decimal. */
static void put_dec(char *tmp, size_t *n, int64_t v)
{
	char d[24];
	int k = 0;
	uint64_t u = (uint64_t)v;

	do {
		d[k++] = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	while (k > 0)
		tmp[(*n)++] = d[--k];
}

/* Formatted by hand, not with snprintf: the key is built on every
 * process-cache miss of fly_decide, where vfprintf was a visible share
 * of a shm lookup's time. */
int fly_key_format(const struct fly_problem *p, char *buf, size_t cap)
{
	int rc = fly_problem_validate(p);

	return rc < 0 ? rc : fly__key_format_valid(p, buf, cap);
}

int fly__key_format_valid(const struct fly_problem *p, char *buf, size_t cap)
{
	const struct op_info *oi;
	/* op/dtype/layout names, FLY_DIMS_MAX "name=" + 19 digits + ',',
	 * every flag name: well under this. */
	char tmp[FLY_KEY_MAX * 4];
	size_t n = 0, lim;

	oi = &ops[p->op];
	put_str(tmp, &n, oi->name);
	tmp[n++] = '/';
	put_str(tmp, &n, dtype_names[p->dtype]);
	tmp[n++] = '/';
	if (oi->has_layout) {
		put_str(tmp, &n, layout_names[p->layout]);
		tmp[n++] = '/';
	}
	for (int i = 0; i < oi->ndims; i++) {
		if (i)
			tmp[n++] = ',';
		put_str(tmp, &n, oi->dims[i]);
		tmp[n++] = '=';
		put_dec(tmp, &n, p->dims[i]);
	}
	for (int b = 0, first = 1; b < NFLAGS; b++) {
		if (!(p->flags & (1u << b)))
			continue;
		tmp[n++] = first ? '/' : '+';
		put_str(tmp, &n, flag_names[b]);
		first = 0;
	}
	tmp[n] = '\0';
	lim = cap < FLY_KEY_MAX ? cap : FLY_KEY_MAX;
	if (buf == NULL || n + 1 > lim)
		return FLY_E_KEYLEN;
	memcpy(buf, tmp, n + 1);
	return (int)n;
}

/* A cursor over the key text. */
struct cur {
	const char *s;
	size_t len;
	size_t pos;
};

/* Take the bytes up to the next '/' (or the end) as one segment. */
static int seg_next(struct cur *c, const char **seg, size_t *seglen)
{
	size_t start = c->pos;

	if (c->pos > c->len)
		return 0;
	while (c->pos < c->len && c->s[c->pos] != '/')
		c->pos++;
	*seg = c->s + start;
	*seglen = c->pos - start;
	c->pos++; /* skip the '/' (or step past the end) */
	return 1;
}

/* Parse a canonical decimal: [-]digits, no leading zero, no '+'.
 * @return 0, FLY_E_BADKEY, FLY_E_OVERFLOW. */
static int parse_int(const char *s, size_t len, int64_t *out)
{
	int neg = 0;
	int64_t v = 0;
	size_t i = 0;

	if (len > 0 && s[0] == '-') {
		neg = 1;
		i = 1;
	}
	if (i == len || (s[i] == '0' && (len - i > 1 || neg)))
		return FLY_E_BADKEY;
	for (; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return FLY_E_BADKEY;
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, s[i] - '0', &v))
			return FLY_E_OVERFLOW;
	}
	*out = neg ? -v : v;
	return 0;
}

/* Whether @p s names any dim of any op (to tell BADDIM from BADKEY). */
static int is_dim_name(const char *s, size_t len)
{
	for (uint32_t op = 1; op < FLY_OP_COUNT; op++) {
		for (int i = 0; i < ops[op].ndims; i++) {
			if (strlen(ops[op].dims[i]) == len &&
			    !memcmp(ops[op].dims[i], s, len))
				return 1;
		}
	}
	return 0;
}

/* Parse the dims segment "name=int,..." in the op's order. */
static int parse_dims(const struct op_info *oi, const char *s, size_t len,
		      struct fly_problem *p)
{
	size_t pos = 0;
	int i = 0, rc;

	if (len == 0)
		return FLY_E_BADKEY;
	while (pos <= len) {
		size_t start = pos, eq;

		while (pos < len && s[pos] != ',')
			pos++;
		for (eq = start; eq < pos && s[eq] != '='; eq++)
			;
		if (eq == pos || eq == start)
			return FLY_E_BADKEY;
		if (i >= oi->ndims || strlen(oi->dims[i]) != eq - start ||
		    memcmp(oi->dims[i], s + start, eq - start))
			return is_dim_name(s + start, eq - start)
				   ? FLY_E_BADDIM
				   : FLY_E_BADKEY;
		rc = parse_int(s + eq + 1, pos - eq - 1, &p->dims[i]);
		if (rc < 0)
			return rc;
		if (p->dims[i] <= 0)
			return FLY_E_BADDIM;
		i++;
		pos++; /* skip ',' */
	}
	return i == oi->ndims ? 0 : FLY_E_BADDIM;
}

/* Parse "flag+flag" (sorted by bit, no repeats). */
static int parse_flags(const char *s, size_t len, uint32_t *out)
{
	size_t pos = 0;
	int last = -1;

	*out = 0;
	while (pos <= len) {
		size_t start = pos;
		int b;

		while (pos < len && s[pos] != '+')
			pos++;
		for (b = 0; b < NFLAGS; b++) {
			if (strlen(flag_names[b]) == pos - start &&
			    !memcmp(flag_names[b], s + start, pos - start))
				break;
		}
		if (b == NFLAGS || b <= last)
			return FLY_E_BADKEY;
		*out |= 1u << b;
		last = b;
		pos++;
	}
	return 0;
}

int fly_key_parse(const char *s, size_t len, struct fly_problem *out)
{
	struct fly_problem p;
	struct cur c = {s, len, 0};
	const struct op_info *oi;
	const char *seg;
	size_t n;
	char canon[FLY_KEY_MAX];
	int rc;

	if (s == NULL || out == NULL)
		return -EINVAL;
	if (len > FLY_KEY_MAX - 1)
		return FLY_E_KEYLEN;
	if (len == 0 || memchr(s, '\0', len))
		return FLY_E_BADKEY;
	memset(&p, 0, sizeof(p));
	seg_next(&c, &seg, &n);
	p.op = fly_op_parse(seg, n);
	if ((oi = op_get(p.op)) == NULL)
		return n ? FLY_E_BADOP : FLY_E_BADKEY;
	if (!seg_next(&c, &seg, &n))
		return FLY_E_BADKEY;
	p.dtype = fly_dtype_parse(seg, n);
	if (p.dtype == FLY_DT_NONE || !(oi->dtypes & (1u << p.dtype)))
		return n ? FLY_E_BADDTYPE : FLY_E_BADKEY;
	if (oi->has_layout) {
		if (!seg_next(&c, &seg, &n))
			return FLY_E_BADKEY;
		p.layout = fly_layout_parse(seg, n);
		if (p.layout == FLY_LAYOUT_NONE)
			return FLY_E_BADKEY;
	}
	if (!seg_next(&c, &seg, &n))
		return FLY_E_BADDIM;
	rc = parse_dims(oi, seg, n, &p);
	if (rc < 0)
		return rc;
	if (seg_next(&c, &seg, &n)) {
		rc = parse_flags(seg, n, &p.flags);
		if (rc < 0)
			return rc;
	}
	if (c.pos <= c.len)
		return FLY_E_BADKEY; /* a further segment */
	rc = fly_problem_validate(&p);
	if (rc < 0)
		return rc;
	/* Belt and braces: only the canonical spelling is a key. */
	rc = fly_key_format(&p, canon, sizeof(canon));
	if (rc < 0)
		return rc;
	if ((size_t)rc != len || memcmp(canon, s, len))
		return FLY_E_BADKEY;
	*out = p;
	return 0;
}

/* ---------------------------------------------------------------- explain */

/* Append printf-style text to the NUL-terminated @p buf (truncating). */
static void put(char *buf, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void put(char *buf, size_t cap, const char *fmt, ...)
{
	size_t n = strlen(buf);
	va_list ap;

	if (n + 1 >= cap)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + n, cap - n, fmt, ap);
	va_end(ap);
}

static void put_ops(char *buf, size_t cap)
{
	for (uint32_t i = 1; i < FLY_OP_COUNT; i++)
		put(buf, cap, "%s%s", i > 1 ? ", " : "", ops[i].name);
}

static void put_dtypes(char *buf, size_t cap, const struct op_info *oi)
{
	for (uint32_t d = 1, first = 1; d < FLY_DT_COUNT; d++) {
		if (!(oi->dtypes & (1u << d)))
			continue;
		put(buf, cap, "%s%s", first ? "" : ", ", dtype_names[d]);
		first = 0;
	}
}

/* "m=..,n=..,k=.." for an op. */
static void put_dims(char *buf, size_t cap, const struct op_info *oi)
{
	for (int i = 0; i < oi->ndims; i++)
		put(buf, cap, "%s%s=N", i ? "," : "", oi->dims[i]);
}

/* An example key of the op: its first dtype, NT, every dim 64. */
static void put_example(char *buf, size_t cap, const struct op_info *oi)
{
	uint32_t d = 1;

	while (d < FLY_DT_COUNT && !(oi->dtypes & (1u << d)))
		d++;
	put(buf, cap, " (e.g. %s/%s/%s", oi->name,
	    d < FLY_DT_COUNT ? dtype_names[d] : "fp32",
	    oi->has_layout ? "NT/" : "");
	for (int i = 0; i < oi->ndims; i++)
		put(buf, cap, "%s%s=64", i ? "," : "", oi->dims[i]);
	put(buf, cap, ")");
}

static void put_flags(char *buf, size_t cap, const struct op_info *oi)
{
	int first = 1;

	for (int b = 0; b < NFLAGS; b++) {
		if (!((oi->flags | FLY_F_EXACT) & (1u << b)))
			continue;
		put(buf, cap, "%s%s", first ? "" : ", ", flag_names[b]);
		first = 0;
	}
	if (first)
		put(buf, cap, "none");
}

/* Say what is wrong with the op/dtype/layout segments; @return 1 when
 * something was, 0 when they are fine (*oi set, cursor at the dims). */
static int explain_head(struct cur *c, const struct op_info **oi_out,
			char *buf, size_t cap)
{
	const struct op_info *oi;
	const char *seg;
	size_t n;
	uint32_t dt;

	seg_next(c, &seg, &n);
	oi = op_get(fly_op_parse(seg, n));
	if (oi == NULL) {
		if (n == 0)
			put(buf, cap, "the op is missing; a key starts with "
			    "one of: ");
		else
			put(buf, cap, "'%.*s' is not an op; the ops are: ",
			    (int)n, seg);
		put_ops(buf, cap);
		return 1;
	}
	*oi_out = oi;
	if (!seg_next(c, &seg, &n) || n == 0) {
		put(buf, cap, "the dtype is missing after '%s/': %s takes ",
		    oi->name, oi->name);
		put_dtypes(buf, cap, oi);
		put_example(buf, cap, oi);
		return 1;
	}
	dt = fly_dtype_parse(seg, n);
	if (dt == FLY_DT_NONE || !(oi->dtypes & (1u << dt))) {
		put(buf, cap, "'%.*s' is not a dtype %s takes; it takes ",
		    (int)n, seg, oi->name);
		put_dtypes(buf, cap, oi);
		return 1;
	}
	if (!oi->has_layout)
		return 0;
	if (!seg_next(c, &seg, &n) || n == 0) {
		put(buf, cap, "the layout is missing: %s needs one of NT, NN, "
		    "TN, TT after the dtype", oi->name);
		put_example(buf, cap, oi);
		return 1;
	}
	if (fly_layout_parse(seg, n) == FLY_LAYOUT_NONE) {
		put(buf, cap, "'%.*s' is not a layout: %s needs one of NT, "
		    "NN, TN, TT after the dtype", (int)n, seg, oi->name);
		put_example(buf, cap, oi);
		return 1;
	}
	return 0;
}

/* Say what is wrong with the dims and flags segments. */
static void explain_tail(struct cur *c, const struct op_info *oi, int rc,
			 char *buf, size_t cap)
{
	struct fly_problem p;
	const char *seg;
	size_t n;
	int drc;

	memset(&p, 0, sizeof(p));
	if (!seg_next(c, &seg, &n) || n == 0) {
		put(buf, cap, "the dims are missing: %s takes ", oi->name);
		put_dims(buf, cap, oi);
		put_example(buf, cap, oi);
		return;
	}
	drc = parse_dims(oi, seg, n, &p);
	if (drc == FLY_E_OVERFLOW) {
		put(buf, cap, "a dim in '%.*s' does not fit in 64 bits",
		    (int)n, seg);
		return;
	}
	if (drc < 0) {
		put(buf, cap, "'%.*s' are not %s's dims: it takes ", (int)n,
		    seg, oi->name);
		put_dims(buf, cap, oi);
		put(buf, cap, " in this order, each N a positive integer "
		    "without leading zeros");
		return;
	}
	if (seg_next(c, &seg, &n) &&
	    (parse_flags(seg, n, &p.flags) < 0 ||
	     (p.flags & ~(oi->flags | FLY_F_EXACT)))) {
		put(buf, cap, "'%.*s' is not a set of flags %s takes (flags: ",
		    (int)n, seg, oi->name);
		put_flags(buf, cap, oi);
		put(buf, cap, "; joined by '+' in this order)");
		return;
	}
	if (c->pos <= c->len) {
		put(buf, cap, "unexpected text after the key: '/%.*s'",
		    (int)(c->len - c->pos), c->s + c->pos);
		return;
	}
	if (rc == FLY_E_OVERFLOW) {
		put(buf, cap, "the product of the dims overflows 64 bits");
		return;
	}
	p.op = (uint32_t)(oi - ops);
	if (rc == FLY_E_BADDIM && p.op == FLY_OP_SCALED_GEMM &&
	    p.dims[2] % 32 != 0) {
		put(buf, cap, "k=%lld is not a multiple of 32: the MX formats "
		    "(mxfp8, mxfp4) scale blocks of 32 along k",
		    (long long)p.dims[2]);
		return;
	}
	if (rc == FLY_E_BADDIM && fly_problem_attn_bad(&p) == 1) {
		put(buf, cap, "d=%lld is not a head_dim attention takes: "
		    "d is 64, 128 or 256", (long long)p.dims[5]);
		return;
	}
	if (rc == FLY_E_BADDIM && fly_problem_attn_bad(&p) == 2) {
		put(buf, cap, "hkv=%lld does not divide hq=%lld: each kv head "
		    "serves hq/hkv query heads (GQA), so hkv must divide hq",
		    (long long)p.dims[4], (long long)p.dims[3]);
		return;
	}
	if (rc == FLY_E_INVALID && (p.flags & FLY_F_EXACT) &&
	    !exact_differs(&p)) {
		struct fly_bucket_policy pol;

		fly_bucket_policy_default(p.op, &pol);
		put(buf, cap, "%s=%lld is its bucket's own value, so the key "
		    "without 'exact' is this exact shape: 'exact' marks only "
		    "a %s that buckets to another value", oi->dims[pol.dim],
		    (long long)p.dims[pol.dim], oi->dims[pol.dim]);
		return;
	}
	put(buf, cap, "not in canonical form (%s)", fly_strerror(rc));
}

int fly_key_explain(const char *key, char *buf, size_t cap)
{
	const struct op_info *oi = NULL;
	struct fly_problem p;
	struct cur c;
	size_t len;
	int rc;

	if (buf == NULL || cap == 0)
		return -EINVAL;
	buf[0] = '\0';
	if (key == NULL) {
		put(buf, cap, "no key");
		return -EINVAL;
	}
	len = strlen(key);
	rc = fly_key_parse(key, len, &p);
	if (rc == 0)
		return 0;
	if (rc == FLY_E_KEYLEN) {
		put(buf, cap, "the key is %zu bytes long, over the limit of "
		    "%d", len, FLY_KEY_MAX - 1);
		return rc;
	}
	if (len == 0) {
		put(buf, cap, "the key is empty");
		return rc;
	}
	c = (struct cur){key, len, 0};
	if (!explain_head(&c, &oi, buf, cap))
		explain_tail(&c, oi, rc, buf, cap);
	return rc;
}

void fly_bucket_policy_default(uint32_t op, struct fly_bucket_policy *out)
{
	const struct op_info *oi = op_get(op);

	out->dim = oi ? oi->bucket_dim : -1;
	out->pow2_max = 1024;
	out->step = 1024;
}

/* Round @p v up per the policy; returns @p v unchanged on overflow. */
static int64_t bucket_value(int64_t v, const struct fly_bucket_policy *pol)
{
	int64_t r;

	if (v <= 0)
		return v;
	if (v <= pol->pow2_max) {
		r = 1;
		while (r < v) {
			if (r > INT64_MAX / 2)
				return v;
			r *= 2;
		}
		return r;
	}
	if (pol->step <= 1)
		return v;
	if (v % pol->step == 0)
		return v;
	if (__builtin_add_overflow(v / pol->step, 1, &r) ||
	    __builtin_mul_overflow(r, pol->step, &r))
		return v;
	return r;
}

void fly_problem_bucket(struct fly_problem *p,
			const struct fly_bucket_policy *pol)
{
	const struct op_info *oi;
	int64_t old, prod = 1;

	if (p == NULL || pol == NULL || (p->flags & FLY_F_EXACT))
		return;
	oi = op_get(p->op);
	if (oi == NULL || pol->dim < 0 || pol->dim >= oi->ndims)
		return;
	old = p->dims[pol->dim];
	p->dims[pol->dim] = bucket_value(old, pol);
	for (int i = 0; i < oi->ndims; i++) {
		if (__builtin_mul_overflow(prod, p->dims[i], &prod)) {
			p->dims[pol->dim] = old;
			return;
		}
	}
}

void fly_problem_bucket_floor(const struct fly_problem *bucketed,
			      const struct fly_bucket_policy *pol,
			      struct fly_problem *lo)
{
	const struct op_info *oi;
	int64_t b, lo_v = 1, hi_v;

	*lo = *bucketed;
	oi = op_get(bucketed->op);
	if (oi == NULL || pol == NULL || pol->dim < 0 ||
	    pol->dim >= oi->ndims || (bucketed->flags & FLY_F_EXACT))
		return;
	b = bucketed->dims[pol->dim];
	if (b <= 1)
		return;
	/* A value that is not a bucket's own (bucketing saturated it, since
	 * the bucket would overflow the dims' product) is only its own
	 * floor: a smaller value buckets to itself or to a larger bucket. */
	if (bucket_value(b, pol) != b)
		return;
	/* bucket_value is monotone: binary search the least v in [1, b]
	 * with bucket_value(v) == b. */
	hi_v = b;
	while (lo_v < hi_v) {
		int64_t mid = lo_v + (hi_v - lo_v) / 2;

		if (bucket_value(mid, pol) >= b)
			hi_v = mid;
		else
			lo_v = mid + 1;
	}
	lo->dims[pol->dim] = lo_v;
}

int fly_problem_exact(const struct fly_problem *p, struct fly_problem *out)
{
	*out = *p;
	if (p->flags & FLY_F_EXACT)
		return 1;
	if (!exact_differs(p))
		return 0;
	out->flags |= FLY_F_EXACT;
	return 1;
}

int fly_key_is_exact(const char *s, size_t len)
{
	static const char tail[] = "exact";
	size_t n = sizeof(tail) - 1;

	return len > n && memcmp(s + len - n, tail, n) == 0 &&
	       (s[len - n - 1] == '/' || s[len - n - 1] == '+');
}

void fly_problem_shape(struct fly_problem *p)
{
	p->flags &= ~FLY_F_EXACT;
}

uint64_t fly_key_hash(const char *s, size_t len)
{
	return fly__hash(s, len);
}
