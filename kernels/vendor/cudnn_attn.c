/*
 * cudnn_attn.c -- cuDNN 9's fused flash attention (forward, bf16) through
 * the backend graph API: one operation graph per problem, in the pattern
 * cuDNN's SDPA engines recognise (the one cudnn-frontend's SDPA node
 * lowers to for cuDNN < 9.21, without dropout, bias or padding):
 *
 *   S  = Q . K^T              MATMUL (fp32 out; K^T is K's strides swapped)
 *   S  = S * scale            POINTWISE MUL, scale by value
 *   [causal]  row, col = GEN_INDEX(S, axis 2), GEN_INDEX(S, axis 3) (int32)
 *        [sq < skv]  row = row + skv - sq   (ADD skv, SUB sq; int32 by value)
 *        S = row >= col ? S : -inf          CMP_GE, BINARY_SELECT
 *   M  = max_j S              REDUCTION MAX        [b, hq, sq, 1]
 *   E  = exp(S - M)           POINTWISE SUB, EXP
 *   Z  = sum_j E              REDUCTION ADD
 *   L  = M + log(Z)           POINTWISE LOG, ADD   (the LSE; virtual if unused)
 *   P  = E / Z                POINTWISE DIV        (bf16: bmm2's A type)
 *   O  = P . V                MATMUL
 *
 * GQA is the matmuls' batch broadcast: K and V carry hkv heads, Q and O
 * hq.  A causal mask with sq == 1 keeps every key and is left out.
 * Without a mask, cuDNN >= 9.13.1 also has the whole of it as one
 * operation (CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, the "unified"
 * SDPA node cudnn-frontend prefers there): a second graph form, whose
 * engines are candidates too (params[1] says which form).
 *
 * Owns: one cudnnHandle_t per device (created on first use, process
 * lifetime) and a cache of execution plans keyed by (device, problem,
 * engine + knobs), each holding a reference on its problem's operation
 * graph (descriptors, refcounted: a problem's plans share one graph).
 * Thread: the handles and the cache are under one mutex, held across a
 * launch (cudnnSetStream + cudnnBackendExecute on the shared handle).
 * flyk_cudnn_attn_last_error() is per thread.  Params: see cudnn_attn.h.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#include <cudnn.h>
#pragma GCC diagnostic pop

#include "cudnn_attn.h"
#include "fly_abi.h"

_Static_assert(FLYK_CUDNN_ATTN_NPARAMS == FLY_PARAMS_MAX,
	       "a cuDNN point is one flytuned parameter vector");

#define NP	     FLYK_CUDNN_ATTN_NPARAMS
#define CA_MAX_DEV   16
#define CA_CACHE     48 /* plans */
#define CA_MAX_DESC  64 /* of one graph: 23 tensors, 2 per op, the graph */
#define CA_MAX_OPS   16 /* operations of one graph */
#define CA_MAX_HEUR  24 /* results read from one heuristic query */
#define CA_PLAN_DESC (FLYK_CUDNN_ATTN_MAX_KNOBS + 3)
/* Seconds of plan building one enumeration may spend once it has a
 * candidate: the heuristics rank their configs best first, and on the
 * H200 a new head dim's plans (runtime-compiled kernels) took 1.4-2.4 s
 * of listing for 16-36 configs, over the key's 1.5 s tuning target.  At
 * 0.3 s the d64 and d256 keys still listed for 0.58-0.65 s (the graph
 * and the heuristics' queries come first). */
#define CA_LIST_S    0.15
/* Graph forms (params[1] bits 8..15). */
#define CA_COMPOSITE 0
#define CA_UNIFIED   1
#define CA_FORMS     2

/* The graph's non-virtual tensors: the variant pack's keys. */
enum {
	UID_Q = 1,
	UID_K,
	UID_V,
	UID_O,
	UID_LSE,
	UID_SCALE,
	UID_NEGINF,
	UID_SKV,
	UID_SQ,
	UID_VIRTUAL = 100 /* and up: the virtual ones */
};

struct ca_key {
	struct flyk_cudnn_attn_problem p;
	int64_t dev;
};

/* One problem's operation graph, shared by the plans built on it. */
struct ca_graph {
	int refs;
	struct ca_key key;
	int form;      /* CA_COMPOSITE or CA_UNIFIED */
	int mask;      /* the causal mask is in the graph */
	int shift;     /* ... with its diagonal moved by skv - sq */
	int32_t skv32; /* by-value operands of the shift */
	int32_t sq32;
	int ndesc;
	cudnnBackendDescriptor_t desc[CA_MAX_DESC]; /* creation order */
	int nops;
	cudnnBackendDescriptor_t ops[CA_MAX_OPS];
	cudnnBackendDescriptor_t graph;
};

/* One execution plan: (graph, engine, knobs). */
struct ca_plan {
	int used;
	unsigned long stamp; /* last use, for eviction */
	struct ca_graph *g;  /* one reference */
	int64_t params[NP]; /* canonical: params[1] holds the knob count only */
	int ndesc;
	cudnnBackendDescriptor_t desc[CA_PLAN_DESC];
	cudnnBackendDescriptor_t plan;
	size_t ws;
	int subst; /* the heuristics' plan, standing in for params' */
};

struct ca_dev {
	int ready; /* handle created (or failed: rc) */
	int rc;
	cudnnHandle_t h;
};

/* A sequence of backend calls that stops at the first failure: each
 * helper does nothing once st is set.  New descriptors go to list. */
struct ca_bld {
	cudnnStatus_t st;
	const char *step; /* what failed */
	long attr;	  /* the attribute being set, or -1 */
	cudnnBackendDescriptor_t *list;
	int *n;
	int cap;
};

static pthread_mutex_t ca_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ca_dev ca_devs[CA_MAX_DEV];
static struct ca_plan ca_cache[CA_CACHE];
static unsigned long ca_clock;
static unsigned long ca_subst; /* launches given another engine's plan */
/* (problem, params) pairs flyk_cudnn_attn_replays() found not to build,
 * so that a launch asking again does not rebuild (a ring) */
#define CA_NOREPLAY 16
static struct ca_noreplay {
	int used;
	struct ca_key k;
	int64_t params[NP];
} ca_noreplay[CA_NOREPLAY];
static unsigned ca_noreplay_next;
static _Thread_local char ca_err[1024];

/* Record @p step's failure with cuDNN's status and last message. */
static void ca_note(const char *step, long attr, cudnnStatus_t st)
{
	char msg[768] = "", at[40] = "";
	cudnnGetLastErrorString(msg, sizeof(msg));
	if (attr >= 0)
		snprintf(at, sizeof(at), " (attribute %ld)", attr);
	snprintf(ca_err, sizeof(ca_err), "%s%s: %s%s%s", step, at,
		 cudnnGetErrorString(st), msg[0] ? ": " : "", msg);
}

static void ca_bld_init(struct ca_bld *b, cudnnBackendDescriptor_t *list,
			int *n, int cap)
{
	memset(b, 0, sizeof(*b));
	b->st = CUDNN_STATUS_SUCCESS;
	b->attr = -1;
	b->list = list;
	b->n = n;
	b->cap = cap;
}

static int ca_bld_done(struct ca_bld *b)
{
	if (b->st == CUDNN_STATUS_SUCCESS)
		return 0;
	ca_note(b->step, b->attr, b->st);
	return -1;
}

static cudnnBackendDescriptor_t ca_new(struct ca_bld *b,
				       cudnnBackendDescriptorType_t type)
{
	cudnnBackendDescriptor_t d = NULL;
	if (b->st != CUDNN_STATUS_SUCCESS)
		return NULL;
	if (*b->n >= b->cap) {
		b->st = CUDNN_STATUS_BAD_PARAM;
		b->step = "descriptor list full";
		return NULL;
	}
	b->st = cudnnBackendCreateDescriptor(type, &d);
	if (b->st != CUDNN_STATUS_SUCCESS) {
		b->step = "cudnnBackendCreateDescriptor";
		return NULL;
	}
	b->list[(*b->n)++] = d;
	return d;
}

static void ca_set(struct ca_bld *b, cudnnBackendDescriptor_t d,
		   cudnnBackendAttributeName_t name,
		   cudnnBackendAttributeType_t type, int64_t n, const void *v)
{
	if (b->st != CUDNN_STATUS_SUCCESS)
		return;
	b->st = cudnnBackendSetAttribute(d, name, type, n, v);
	if (b->st != CUDNN_STATUS_SUCCESS) {
		b->step = "cudnnBackendSetAttribute";
		b->attr = (long)name;
	}
}

static void ca_setd(struct ca_bld *b, cudnnBackendDescriptor_t d,
		    cudnnBackendAttributeName_t name,
		    cudnnBackendDescriptor_t v)
{
	ca_set(b, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

static void ca_fin(struct ca_bld *b, cudnnBackendDescriptor_t d,
		   const char *what)
{
	if (b->st != CUDNN_STATUS_SUCCESS)
		return;
	b->st = cudnnBackendFinalize(d);
	if (b->st != CUDNN_STATUS_SUCCESS)
		b->step = what;
}

static void ca_destroy(cudnnBackendDescriptor_t *list, int n)
{
	while (n-- > 0)
		if (list[n])
			cudnnBackendDestroyDescriptor(list[n]);
}

/* The graph's tensors (T_S3 and T_R2: see ca_alias). */
/* clang-format off */
enum {
	T_Q, T_K, T_V, T_O, T_LSE, T_SCALE, T_NINF, T_SKV, T_SQ, /* operands */
	T_S, T_S2, T_ROW, T_COL, T_R1, T_R2, T_KEEP, T_S3,       /* scores */
	T_M, T_SUB, T_E, T_Z, T_LZ, T_P,                         /* softmax */
	T_N
};
enum ca_shape { SH_Q, SH_KT, SH_K, SH_V, SH_O, SH_S, SH_ROW, SH_1 };

static const struct ca_tdef {
	int64_t uid;        /* 0: virtual (UID_VIRTUAL + index) */
	cudnnDataType_t dt;
	enum ca_shape sh;
} ca_tdefs[T_N] = {
	[T_Q]     = { UID_Q,      CUDNN_DATA_BFLOAT16, SH_Q },
	[T_K]     = { UID_K,      CUDNN_DATA_BFLOAT16, SH_KT },
	[T_V]     = { UID_V,      CUDNN_DATA_BFLOAT16, SH_V },
	[T_O]     = { UID_O,      CUDNN_DATA_BFLOAT16, SH_O },
	[T_LSE]   = { UID_LSE,    CUDNN_DATA_FLOAT,    SH_ROW }, /* virtual if !lse */
	[T_SCALE] = { UID_SCALE,  CUDNN_DATA_FLOAT,    SH_1 },
	[T_NINF]  = { UID_NEGINF, CUDNN_DATA_FLOAT,    SH_1 },
	[T_SKV]   = { UID_SKV,    CUDNN_DATA_INT32,    SH_1 },
	[T_SQ]    = { UID_SQ,     CUDNN_DATA_INT32,    SH_1 },
	[T_S]     = { 0, CUDNN_DATA_FLOAT,    SH_S },
	[T_S2]    = { 0, CUDNN_DATA_FLOAT,    SH_S },
	[T_ROW]   = { 0, CUDNN_DATA_INT32,    SH_S },
	[T_COL]   = { 0, CUDNN_DATA_INT32,    SH_S },
	[T_R1]    = { 0, CUDNN_DATA_INT32,    SH_S },
	[T_R2]    = { 0, CUDNN_DATA_INT32,    SH_S },
	[T_KEEP]  = { 0, CUDNN_DATA_BOOLEAN,  SH_S },
	[T_S3]    = { 0, CUDNN_DATA_FLOAT,    SH_S },
	[T_M]     = { 0, CUDNN_DATA_FLOAT,    SH_ROW },
	[T_SUB]   = { 0, CUDNN_DATA_FLOAT,    SH_S },
	[T_E]     = { 0, CUDNN_DATA_FLOAT,    SH_S },
	[T_Z]     = { 0, CUDNN_DATA_FLOAT,    SH_ROW },
	[T_LZ]    = { 0, CUDNN_DATA_FLOAT,    SH_ROW },
	[T_P]     = { 0, CUDNN_DATA_BFLOAT16, SH_S }, /* bmm2's A: the I/O type */
};

enum ca_kind { K_MM, K_PW, K_RED };
enum ca_when { ALWAYS, MASK, SHIFT };

/* The operations, in order: y = mode(x, b, t), computed in prec. */
static const struct ca_odef {
	enum ca_kind kind;
	int mode;             /* cudnnPointwiseMode_t or cudnnReduceTensorOp_t */
	cudnnDataType_t prec;
	int axis;             /* GEN_INDEX's */
	int x, b, t, y;
	enum ca_when when;
} ca_odefs[] = {
#define PW(m)  K_PW, CUDNN_POINTWISE_##m
#define RED(m) K_RED, CUDNN_REDUCE_TENSOR_##m
#define F32    CUDNN_DATA_FLOAT
	{ K_MM, 0,        F32, 0, T_Q,   T_K,     -1,     T_S,    ALWAYS },
	{ PW(MUL),        F32, 0, T_S,   T_SCALE, -1,     T_S2,   ALWAYS },
	{ PW(GEN_INDEX),  F32, 2, T_S2,  -1,      -1,     T_ROW,  MASK },
	{ PW(GEN_INDEX),  F32, 3, T_S2,  -1,      -1,     T_COL,  MASK },
	{ PW(ADD),   CUDNN_DATA_INT32, 0, T_ROW, T_SKV, -1, T_R1, SHIFT },
	{ PW(SUB),   CUDNN_DATA_INT32, 0, T_R1,  T_SQ,  -1, T_R2, SHIFT },
	{ PW(CMP_GE), CUDNN_DATA_BOOLEAN, 0, T_R2, T_COL, -1, T_KEEP, MASK },
	{ PW(BINARY_SELECT), F32, 0, T_S2, T_NINF, T_KEEP, T_S3,  MASK },
	{ RED(MAX),       F32, 0, T_S3,  -1,      -1,     T_M,    ALWAYS },
	{ PW(SUB),        F32, 0, T_S3,  T_M,     -1,     T_SUB,  ALWAYS },
	{ PW(EXP),        F32, 0, T_SUB, -1,      -1,     T_E,    ALWAYS },
	{ RED(ADD),       F32, 0, T_E,   -1,      -1,     T_Z,    ALWAYS },
	{ PW(LOG),        F32, 0, T_Z,   -1,      -1,     T_LZ,   ALWAYS },
	{ PW(ADD),        F32, 0, T_M,   T_LZ,    -1,     T_LSE,  ALWAYS },
	{ PW(DIV),        F32, 0, T_E,   T_Z,     -1,     T_P,    ALWAYS },
	{ K_MM, 0,        F32, 0, T_P,   T_V,     -1,     T_O,    ALWAYS },
#undef PW
#undef RED
#undef F32
};
/* clang-format on */
#define CA_NOPS ((int)(sizeof(ca_odefs) / sizeof(ca_odefs[0])))
_Static_assert(CA_NOPS <= CA_MAX_OPS, "ca_graph.ops holds every operation");

/* Dims and strides of shape @p sh of @p p (cuDNN order b, h, s, d; K^T is
 * K with its last two axes swapped). */
static void ca_shape_of(const struct flyk_cudnn_attn_problem *p,
			enum ca_shape sh, int64_t *dim, int64_t *str)
{
	int kv = sh == SH_KT || sh == SH_K || sh == SH_V;
	const int64_t *ps = sh == SH_Q			? p->q_stride
			    : sh == SH_KT || sh == SH_K ? p->k_stride
			    : sh == SH_V		? p->v_stride
							: p->o_stride;
	int64_t h = kv ? p->hkv : p->hq, s = kv ? p->skv : p->sq;
	int64_t x[4] = {p->b, h, s, p->d}, y[4] = {ps[0], ps[2], ps[1], 1};
	if (sh == SH_KT) {
		x[2] = p->d, x[3] = p->skv;
		y[2] = 1, y[3] = ps[1];
	} else if (sh == SH_S || sh == SH_ROW) {
		x[3] = sh == SH_S ? p->skv : 1;
		y[3] = 1;
		y[2] = x[3];
		y[1] = p->sq * x[3];
		y[0] = p->hq * y[1];
	} else if (sh == SH_1) {
		for (int i = 0; i < 4; i++)
			x[i] = y[i] = 1;
	}
	memcpy(dim, x, sizeof(x));
	memcpy(str, y, sizeof(y));
}

/* Tensor @p i of @p g (created on first use). */
static cudnnBackendDescriptor_t ca_tensor(struct ca_bld *b, struct ca_graph *g,
					  cudnnBackendDescriptor_t *t, int i)
{
	const struct ca_tdef *td = &ca_tdefs[i];
	int64_t dim[4], str[4], align = 16, uid = td->uid;
	bool virt = uid == 0 || (i == T_LSE && !g->key.p.lse),
	     byval = td->sh == SH_1;
	if (t[i] || b->st != CUDNN_STATUS_SUCCESS)
		return t[i];
	if (uid == 0)
		uid = UID_VIRTUAL + i;
	/* the unified operation takes K as it is, the matmul K^T */
	ca_shape_of(&g->key.p,
		    i == T_K && g->form == CA_UNIFIED ? SH_K : td->sh, dim,
		    str);
	cudnnBackendDescriptor_t d = ca_new(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
	ca_set(b, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
	       &td->dt);
	ca_set(b, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
	ca_set(b, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str);
	ca_set(b, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
	ca_set(b, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1,
	       &align);
	if (virt) /* as cudnn-frontend: these two only when true */
		ca_set(b, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN,
		       1, &virt);
	if (byval)
		ca_set(b, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN,
		       1, &byval);
	ca_fin(b, d, "finalize tensor");
	return t[i] = d;
}

/* The operation of @p od on tensors @p t: its descriptor (matmul,
 * pointwise or reduction) and the operation node. */
static cudnnBackendDescriptor_t ca_operation(struct ca_bld *b,
					     const struct ca_odef *od,
					     cudnnBackendDescriptor_t *t)
{
	static const cudnnBackendDescriptorType_t dt[] = {
	    CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_BACKEND_POINTWISE_DESCRIPTOR,
	    CUDNN_BACKEND_REDUCTION_DESCRIPTOR};
	static const cudnnBackendDescriptorType_t ot[] = {
	    CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR,
	    CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
	    CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR};
	/* per kind: desc's compute type, op's X (A), B, Y (C), desc */
	static const cudnnBackendAttributeName_t an[][5] = {
	    {CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_ATTR_OPERATION_MATMUL_ADESC,
	     CUDNN_ATTR_OPERATION_MATMUL_BDESC,
	     CUDNN_ATTR_OPERATION_MATMUL_CDESC,
	     CUDNN_ATTR_OPERATION_MATMUL_DESC},
	    {CUDNN_ATTR_POINTWISE_MATH_PREC,
	     CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
	     CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
	     CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
	     CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR},
	    {CUDNN_ATTR_REDUCTION_COMP_TYPE,
	     CUDNN_ATTR_OPERATION_REDUCTION_XDESC, 0,
	     CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
	     CUDNN_ATTR_OPERATION_REDUCTION_DESC}};
	const cudnnBackendAttributeName_t *a = an[od->kind];
	int64_t axis = od->axis;
	float one = 1.0f;
	cudnnBackendDescriptor_t d = ca_new(b, dt[od->kind]);
	ca_set(b, d, a[0], CUDNN_TYPE_DATA_TYPE, 1, &od->prec);
	if (od->kind == K_PW) {
		cudnnPointwiseMode_t m = (cudnnPointwiseMode_t)od->mode;
		ca_set(b, d, CUDNN_ATTR_POINTWISE_MODE,
		       CUDNN_TYPE_POINTWISE_MODE, 1, &m);
		if (m == CUDNN_POINTWISE_GEN_INDEX)
			ca_set(b, d, CUDNN_ATTR_POINTWISE_AXIS,
			       CUDNN_TYPE_INT64, 1, &axis);
	} else if (od->kind == K_RED) {
		cudnnReduceTensorOp_t r = (cudnnReduceTensorOp_t)od->mode;
		ca_set(b, d, CUDNN_ATTR_REDUCTION_OPERATOR,
		       CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &r);
	}
	ca_fin(b, d, "finalize operation descriptor");
	cudnnBackendDescriptor_t op = ca_new(b, ot[od->kind]);
	ca_setd(b, op, a[1], t[od->x]);
	if (od->b >= 0)
		ca_setd(b, op, a[2], t[od->b]);
	if (od->t >= 0)
		ca_setd(b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t[od->t]);
	ca_setd(b, op, a[3], t[od->y]);
	ca_setd(b, op, a[4], d);
	if (od->kind == K_PW) { /* cudnn-frontend sets both, to 1 */
		ca_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1,
		       CUDNN_TYPE_FLOAT, 1, &one);
		ca_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2,
		       CUDNN_TYPE_FLOAT, 1, &one);
	}
	ca_fin(b, op, "finalize operation");
	return op;
}

/* The tensor that stands for @p u in @p g: T_S3 is T_S2 without the
 * mask, T_R2 is T_ROW without the shift. */
static int ca_alias(const struct ca_graph *g, int u)
{
	if (u == T_S3 && !g->mask)
		return T_S2;
	if (u == T_R2 && !g->shift)
		return T_ROW;
	return u;
}

/* The unified form's one operation on @p t (cuDNN >= 9.13.1 headers). */
static void ca_unified(struct ca_bld *b, struct ca_graph *g,
		       cudnnBackendDescriptor_t *t)
{
#if CUDNN_VERSION >= 91301
	static const cudnnBackendAttributeName_t an[] = {
	    CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC,
	    CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC,
	    CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC,
	    CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC,
	    CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC,
	    CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC};
	static const int ti[] = {T_Q, T_K, T_V, T_O, T_SCALE, T_LSE};
	int n = g->key.p.lse ? 6 : 5; /* no stats tensor without the LSE */
	cudnnBackendDescriptor_t op =
	    ca_new(b, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
	for (int i = 0; i < n; i++)
		ca_setd(b, op, an[i], ca_tensor(b, g, t, ti[i]));
	ca_fin(b, op, "finalize SDPA_FWD operation");
	if (b->st == CUDNN_STATUS_SUCCESS)
		g->ops[g->nops++] = op;
#else
	(void)g, (void)t;
	b->st = CUDNN_STATUS_NOT_SUPPORTED;
	b->step = "the SDPA_FWD operation (headers older than cuDNN 9.13.1)";
#endif
}

/* Build @p g's operation graph (g->key, g->form set): the unified
 * operation, or the operations of ca_odefs that apply on the tensors they
 * name.  @return 0 or -EIO. */
static int ca_graph_build(struct ca_graph *g, cudnnHandle_t h)
{
	const struct flyk_cudnn_attn_problem *p = &g->key.p;
	cudnnBackendDescriptor_t t[T_N] = {NULL};
	struct ca_bld b;
	g->mask = p->causal && p->sq > 1; /* sq == 1: every key is kept */
	g->shift = g->mask && p->sq != p->skv;
	g->skv32 = (int32_t)p->skv;
	g->sq32 = (int32_t)p->sq;
	ca_bld_init(&b, g->desc, &g->ndesc, CA_MAX_DESC);
	if (g->form == CA_UNIFIED)
		ca_unified(&b, g, t);
	for (int i = 0; g->form == CA_COMPOSITE && i < CA_NOPS; i++) {
		struct ca_odef o = ca_odefs[i];
		if ((o.when == MASK && !g->mask) ||
		    (o.when == SHIFT && !g->shift))
			continue;
		o.x = ca_alias(g, o.x);
		o.b = ca_alias(g, o.b);
		int use[4] = {o.x, o.b, o.t, o.y};
		for (int j = 0; j < 4; j++)
			if (use[j] >= 0)
				ca_tensor(&b, g, t, use[j]);
		cudnnBackendDescriptor_t op = ca_operation(&b, &o, t);
		if (b.st == CUDNN_STATUS_SUCCESS)
			g->ops[g->nops++] = op;
	}
	g->graph = ca_new(&b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
	ca_set(&b, g->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
	       CUDNN_TYPE_HANDLE, 1, &h);
	ca_set(&b, g->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
	       CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops);
	ca_fin(&b, g->graph, "finalize operation graph");
	return ca_bld_done(&b) ? -EIO : 0;
}

static void ca_graph_put(struct ca_graph *g)
{
	if (!g || --g->refs > 0)
		return;
	ca_destroy(g->desc, g->ndesc);
	free(g);
}

static void ca_plan_clear(struct ca_plan *e)
{
	if (!e->used)
		return;
	ca_destroy(e->desc, e->ndesc);
	ca_graph_put(e->g);
	memset(e, 0, sizeof(*e));
}

/* @p k's graph, one more reference (from a cached plan, else built).
 * Called with ca_mu held.  @return NULL on failure (noted). */
static struct ca_graph *ca_graph_get_locked(const struct ca_key *k, int form,
					    cudnnHandle_t h)
{
	for (int i = 0; i < CA_CACHE; i++) {
		struct ca_plan *e = &ca_cache[i];
		if (e->used && e->g->form == form &&
		    !memcmp(&e->g->key, k, sizeof(*k))) {
			e->g->refs++;
			return e->g;
		}
	}
	struct ca_graph *g = calloc(1, sizeof(*g));
	if (!g) {
		snprintf(ca_err, sizeof(ca_err), "out of memory");
		return NULL;
	}
	g->refs = 1;
	g->key = *k;
	g->form = form;
	if (ca_graph_build(g, h)) {
		ca_graph_put(g);
		return NULL;
	}
	return g;
}

/* The params' canonical form: bits 16+ of params[1] (provenance) off. */
static void ca_canon(const int64_t *in, int64_t *out)
{
	memcpy(out, in, sizeof(int64_t) * NP);
	out[1] &= 0xffff;
	for (int64_t i = out[1]; i < FLYK_CUDNN_ATTN_MAX_KNOBS; i++)
		out[2 + i] = 0;
}

/* Replay @p pr on @p g into @p e: engine by global index, its knob
 * choices, engine config, execution plan.  @return 0 or -EINVAL. */
static int ca_plan_build(struct ca_plan *e, struct ca_graph *g, cudnnHandle_t h,
			 const int64_t *pr)
{
	cudnnBackendDescriptor_t knob[FLYK_CUDNN_ATTN_MAX_KNOBS];
	int n = (int)(pr[1] & 0xff);
	int64_t ws = 0, got = 0;
	struct ca_bld b;
	ca_bld_init(&b, e->desc, &e->ndesc, CA_PLAN_DESC);
	cudnnBackendDescriptor_t eng =
	    ca_new(&b, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
	ca_setd(&b, eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, g->graph);
	ca_set(&b, eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
	       &pr[0]);
	ca_fin(&b, eng, "finalize engine");
	for (int i = 0; i < n; i++) {
		uint64_t w = (uint64_t)pr[2 + i];
		cudnnBackendKnobType_t type = (cudnnBackendKnobType_t)(w >> 32);
		int64_t val = (int32_t)(uint32_t)w;
		knob[i] = ca_new(&b, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
		ca_set(&b, knob[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
		       CUDNN_TYPE_KNOB_TYPE, 1, &type);
		ca_set(&b, knob[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
		       CUDNN_TYPE_INT64, 1, &val);
		ca_fin(&b, knob[i], "finalize knob choice");
	}
	cudnnBackendDescriptor_t cfg =
	    ca_new(&b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
	ca_setd(&b, cfg, CUDNN_ATTR_ENGINECFG_ENGINE, eng);
	if (n > 0)
		ca_set(&b, cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
		       CUDNN_TYPE_BACKEND_DESCRIPTOR, n, knob);
	ca_fin(&b, cfg, "finalize engine config");
	e->plan = ca_new(&b, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
	ca_set(&b, e->plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
	       1, &h);
	ca_setd(&b, e->plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
	ca_fin(&b, e->plan, "finalize execution plan");
	if (b.st == CUDNN_STATUS_SUCCESS) {
		b.st = cudnnBackendGetAttribute(
		    e->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
		    CUDNN_TYPE_INT64, 1, &got, &ws);
		b.step = "plan workspace size";
	}
	if (ca_bld_done(&b) || ws < 0)
		return -EINVAL;
	e->ws = (size_t)ws;
	return 0;
}

static int ca_heur(struct ca_graph *g, cudnnBackendHeurMode_t mode, int tag,
		   int64_t (*c)[NP], int n, int cap);

/* @p e's params do not replay on this cuDNN (engine indices and knobs
 * belong to one version: a decision tuned by a daemon whose cuDNN is not
 * this process's -- PyTorch loads its own -- names another engine, or
 * none): @p e becomes the plan of the first configuration cuDNN's own
 * heuristics (mode A, else fallback) propose for the graph, under the
 * same params, so the launch still computes the graph (any plan of it
 * does) and later launches find it cached.  ca_subst counts them and
 * ca_err says so.  @return 0, or -EINVAL when nothing builds. */
static int ca_plan_substitute(struct ca_plan *e, cudnnHandle_t h)
{
	int64_t alt[1][NP];
	char why[sizeof(ca_err)];
	snprintf(why, sizeof(why), "%s", ca_err);
	ca_destroy(e->desc, e->ndesc);
	e->ndesc = 0;
	e->plan = NULL;
	if (ca_heur(e->g, CUDNN_HEUR_MODE_A, 0, alt, 0, 1) != 1 &&
	    ca_heur(e->g, CUDNN_HEUR_MODE_FALLBACK, 1, alt, 0, 1) != 1)
		return -EINVAL;
	if (ca_plan_build(e, e->g, h, alt[0])) {
		ca_destroy(e->desc, e->ndesc);
		e->ndesc = 0;
		e->plan = NULL;
		return -EINVAL;
	}
	ca_subst++;
	e->subst = 1;
	snprintf(ca_err, sizeof(ca_err),
		 "engine %lld does not replay on cuDNN %zu (%.300s): ran the "
		 "heuristics' engine %lld instead",
		 (long long)e->params[0], cudnnGetVersion(), why,
		 (long long)alt[0][0]);
	return 0;
}

/* The cached plan of (@p k, @p params), built on a miss on @p have (the
 * key's graph, when the caller holds it) or the key's cached or a new
 * graph.  Called with ca_mu held.  @return NULL on failure (noted). */
static struct ca_plan *ca_plan_get_locked(const struct ca_key *k,
					  cudnnHandle_t h,
					  const int64_t *params,
					  struct ca_graph *have)
{
	int64_t pr[NP];
	struct ca_plan *victim = &ca_cache[0];
	ca_canon(params, pr);
	for (int i = 0; i < CA_CACHE; i++) {
		struct ca_plan *e = &ca_cache[i];
		if (e->used && !memcmp(&e->g->key, k, sizeof(*k)) &&
		    !memcmp(e->params, pr, sizeof(pr))) {
			e->stamp = ++ca_clock;
			return e;
		}
		if (!e->used || (victim->used && e->stamp < victim->stamp))
			victim = e;
	}
	struct ca_graph *g = have;
	int form = (int)(pr[1] >> 8);
	/* a launch of a point whose form this cuDNN lacks (SDPA_FWD before
	 * 9.13.1) runs the composite graph */
	if (g)
		g->refs++;
	else if (!(g = ca_graph_get_locked(k, form, h)) &&
		 (form == 0 || !(g = ca_graph_get_locked(k, 0, h))))
		return NULL;
	ca_plan_clear(victim); /* our reference keeps g alive */
	victim->used = 1;
	victim->g = g;
	victim->stamp = ++ca_clock;
	memcpy(victim->params, pr, sizeof(pr));
	/* enumerating (@p have): a point that does not build is not offered */
	if (ca_plan_build(victim, g, h, pr) &&
	    (have || ca_plan_substitute(victim, h))) {
		ca_plan_clear(victim);
		return NULL;
	}
	return victim;
}

/* The calling thread's current device's handle.  Called with ca_mu held. */
static cudnnHandle_t ca_handle_locked(int64_t *dev)
{
	int d = 0;
	if (cudaGetDevice(&d) != cudaSuccess || d < 0 || d >= CA_MAX_DEV) {
		snprintf(ca_err, sizeof(ca_err), "no current CUDA device");
		return NULL;
	}
	struct ca_dev *cd = &ca_devs[d];
	if (!cd->ready) {
		cudnnStatus_t st = cudnnCreate(&cd->h);
		cd->ready = 1;
		cd->rc = st == CUDNN_STATUS_SUCCESS ? 0 : -ENODEV;
		if (st != CUDNN_STATUS_SUCCESS)
			ca_note("cudnnCreate", -1, st);
	}
	*dev = d;
	return cd->rc ? NULL : cd->h;
}

static void ca_key_of(const struct flyk_cudnn_attn_problem *p, int64_t dev,
		      struct ca_key *k)
{
	memset(k, 0, sizeof(*k));
	k->p = *p;
	k->dev = dev;
}

static int ca_dim_ok(int64_t v)
{
	return v >= 1 && v <= 0x7fffffff;
}

int flyk_cudnn_attn_feasible(const struct flyk_cudnn_attn_problem *p,
			     const int64_t *params)
{
	const int64_t *st[4];
	int64_t cells = 0;
	if (!p || !ca_dim_ok(p->b) || !ca_dim_ok(p->sq) || !ca_dim_ok(p->skv) ||
	    !ca_dim_ok(p->hq) || !ca_dim_ok(p->hkv) || !ca_dim_ok(p->d) ||
	    p->hq % p->hkv || (p->causal & ~1) || (p->lse & ~1))
		return -EINVAL;
	/* the score tensor's strides (b * hq * sq * skv) must fit */
	if (__builtin_mul_overflow(p->b * p->hq, p->sq, &cells) ||
	    __builtin_mul_overflow(cells, p->skv, &cells))
		return -EINVAL;
	st[0] = p->q_stride;
	st[1] = p->k_stride;
	st[2] = p->v_stride;
	st[3] = p->o_stride;
	for (int t = 0; t < 4; t++)
		for (int i = 0; i < 3; i++) {
			if (st[t][i] < 1 || st[t][i] > ((int64_t)1 << 40))
				return -EINVAL;
			if (st[t][i] % 8) /* rows 16-byte aligned */
				return -EOPNOTSUPP;
		}
	if (p->d % 8 || p->d > 256 || (p->causal && p->sq > p->skv))
		return -EOPNOTSUPP;
	if (params && (params[0] < 0 || params[0] > 0x7fffffff ||
		       (params[1] & 0xff) > FLYK_CUDNN_ATTN_MAX_KNOBS ||
		       ((params[1] >> 8) & 0xff) >= CA_FORMS))
		return -EINVAL;
	/* the unified form has no mask */
	if (params && ((params[1] >> 8) & 0xff) == CA_UNIFIED && p->causal &&
	    p->sq > 1)
		return -EINVAL;
	return 0;
}

/* Read config @p cfg (form @p form, rank @p rank of heuristic @p tag)
 * into @p out.
 * @return 0, or -1 when it is not representable (too many knobs, a value
 * outside int32) or cannot be read. */
static int ca_cfg_params(cudnnBackendDescriptor_t cfg, int form, int tag,
			 int rank, int64_t *out)
{
	cudnnBackendDescriptor_t tmp[CUDNN_KNOB_TYPE_COUNTS + 1];
	int ntmp = 0, nk = 0;
	int64_t got = 0, gidx = -1, nknob = 0;
	struct ca_bld b;
	ca_bld_init(&b, tmp, &ntmp, CUDNN_KNOB_TYPE_COUNTS + 1);
	cudnnBackendDescriptor_t eng =
	    ca_new(&b, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
	for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; i++)
		ca_new(&b, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
	if (b.st == CUDNN_STATUS_SUCCESS &&
	    (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
				      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
				      &eng) != CUDNN_STATUS_SUCCESS ||
	     cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
				      CUDNN_TYPE_INT64, 1, &got,
				      &gidx) != CUDNN_STATUS_SUCCESS ||
	     cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
				      CUDNN_TYPE_BACKEND_DESCRIPTOR,
				      CUDNN_KNOB_TYPE_COUNTS, &nknob,
				      tmp + 1) != CUDNN_STATUS_SUCCESS))
		b.st = CUDNN_STATUS_BAD_PARAM;
	memset(out, 0, sizeof(int64_t) * NP);
	out[0] = gidx;
	for (int64_t i = 0; b.st == CUDNN_STATUS_SUCCESS && i < nknob; i++) {
		cudnnBackendKnobType_t type;
		int64_t val = 0;
		if (nk >= FLYK_CUDNN_ATTN_MAX_KNOBS ||
		    cudnnBackendGetAttribute(tmp[1 + i],
					     CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
					     CUDNN_TYPE_KNOB_TYPE, 1, &got,
					     &type) != CUDNN_STATUS_SUCCESS ||
		    cudnnBackendGetAttribute(tmp[1 + i],
					     CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
					     CUDNN_TYPE_INT64, 1, &got,
					     &val) != CUDNN_STATUS_SUCCESS ||
		    val != (int32_t)val) {
			b.st = CUDNN_STATUS_NOT_SUPPORTED;
			break;
		}
		/* insertion by type: one canonical order */
		int64_t w = (int64_t)((uint64_t)type << 32 | (uint32_t)val);
		int j = nk++;
		for (; j > 0 && out[1 + j] > w; j--)
			out[2 + j] = out[1 + j];
		out[2 + j] = w;
	}
	ca_destroy(tmp, ntmp);
	if (b.st != CUDNN_STATUS_SUCCESS || gidx < 0 || gidx > 0x7fffffff)
		return -1;
	out[1] = nk | (int64_t)form << 8 | (int64_t)(tag & 0xff) << 16 |
		 (int64_t)(rank & 0xffff) << 24;
	return 0;
}

static int ca_seen(int64_t (*c)[NP], int n, const int64_t *pt)
{
	int64_t a[NP], b[NP];
	ca_canon(pt, b);
	for (int i = 0; i < n; i++) {
		ca_canon(c[i], a);
		if (!memcmp(a, b, sizeof(a)))
			return 1;
	}
	return 0;
}

/* Append heuristic @p mode's configs for @p g to @p c (now @p n of them,
 * room for @p cap).  @return the new count, or -1 (noted). */
static int ca_heur(struct ca_graph *g, cudnnBackendHeurMode_t mode, int tag,
		   int64_t (*c)[NP], int n, int cap)
{
	cudnnBackendDescriptor_t d[CA_MAX_HEUR + 1];
	int nd = 0;
	int64_t cnt = 0;
	struct ca_bld b;
	ca_bld_init(&b, d, &nd, CA_MAX_HEUR + 1);
	cudnnBackendDescriptor_t heur =
	    ca_new(&b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
	ca_setd(&b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, g->graph);
	ca_set(&b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
	       &mode);
	ca_fin(&b, heur, tag ? "heuristics (fallback)" : "heuristics (mode A)");
	if (b.st == CUDNN_STATUS_SUCCESS) {
		b.st = cudnnBackendGetAttribute(
		    heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
		    CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &cnt, NULL);
		b.step = "heuristic result count";
	}
	if (cnt > CA_MAX_HEUR)
		cnt = CA_MAX_HEUR;
	for (int64_t i = 0; i < cnt; i++)
		ca_new(&b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
	if (b.st == CUDNN_STATUS_SUCCESS && cnt > 0) {
		b.st = cudnnBackendGetAttribute(
		    heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
		    CUDNN_TYPE_BACKEND_DESCRIPTOR, cnt, &cnt, d + 1);
		b.step = "heuristic results";
	}
	int rc = ca_bld_done(&b) ? -1 : 0;
	for (int64_t i = 0; rc == 0 && i < cnt && n < cap; i++)
		if (!ca_cfg_params(d[1 + i], g->form, tag, (int)i, c[n]) &&
		    !ca_seen(c, n, c[n]))
			n++;
	ca_destroy(d, nd);
	return rc ? rc : n;
}

/* The candidates of graph form @p form of @p k appended to @p out (now
 * @p n, room for @p max): heuristics mode A, then fallback; each config
 * replayed into a cached plan.  Called with ca_mu held.  @return the new
 * count, or -1 when the graph did not build (noted). */
static double ca_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int ca_enum_form(const struct ca_key *k, cudnnHandle_t h, int form,
			int64_t (*out)[NP], int n, int max, double t0,
			int *unbuilt)
{
	int64_t cand[2 * CA_MAX_HEUR][NP];
	char a_err[sizeof(ca_err)];
	struct ca_graph *g = ca_graph_get_locked(k, form, h);
	if (!g)
		return -1;
	/* mode A's failure is the one to report; fallback's alone is not */
	int a = ca_heur(g, CUDNN_HEUR_MODE_A, 0, cand, 0, CA_MAX_HEUR);
	snprintf(a_err, sizeof(a_err), "%s", a < 0 ? ca_err : "");
	int nc = ca_heur(g, CUDNN_HEUR_MODE_FALLBACK, 1, cand, a < 0 ? 0 : a,
			 2 * CA_MAX_HEUR);
	if (nc < 0)
		nc = a < 0 ? 0 : a;
	snprintf(ca_err, sizeof(ca_err), "%s", a_err);
	if (nc == 0 && a >= 0)
		snprintf(ca_err, sizeof(ca_err), "no engine proposed");
	for (int i = 0; i < nc && n < max; i++) {
		if (n > 0 && ca_now() - t0 > CA_LIST_S) {
			*unbuilt += nc - i;
			break;
		}
		struct ca_plan *e = ca_plan_get_locked(k, h, cand[i], g);
		if (e && e->ws > FLYK_CUDNN_ATTN_WS_MAX)
			snprintf(ca_err, sizeof(ca_err),
				 "engine %lld needs %zu bytes of workspace",
				 (long long)cand[i][0], e->ws);
		else if (e && !ca_seen(out, n, cand[i]))
			memcpy(out[n++], cand[i], sizeof(cand[i]));
	}
	ca_graph_put(g);
	return n;
}

int flyk_cudnn_attn_enumerate(const struct flyk_cudnn_attn_problem *p,
			      int64_t (*out)[NP], int max)
{
	static const char *const name[CA_FORMS] = {"composite graph",
						   "unified SDPA_FWD"};
	char note[CA_FORMS][500];
	int64_t dev = 0;
	struct ca_key k;
	int forms = 1, n = 0, built = 0, unbuilt = 0;
	int rc = flyk_cudnn_attn_feasible(p, NULL);
	ca_err[0] = '\0';
	if (rc == -EOPNOTSUPP) {
		snprintf(ca_err, sizeof(ca_err),
			 "not offered (causal sq > skv, d, strides)");
		return 0;
	}
	if (rc || !out || max < 0)
		return rc ? rc : -EINVAL;
#if CUDNN_VERSION >= 91301
	/* the unified operation: no mask before cuDNN 9.21 (cudnn-frontend) */
	if (cudnnGetVersion() >= 91301 && !(p->causal && p->sq > 1))
		forms = CA_FORMS;
#endif
	pthread_mutex_lock(&ca_mu);
	cudnnHandle_t h = ca_handle_locked(&dev);
	rc = -ENODEV;
	if (!h)
		goto out;
	ca_key_of(p, dev, &k);
	double t0 = ca_now();
	for (int f = 0; f < forms; f++) {
		ca_err[0] = '\0';
		int m = ca_enum_form(&k, h, f, out, n, max, t0, &unbuilt);
		built += m >= 0;
		n = m >= 0 ? m : n;
		snprintf(note[f], sizeof(note[f]), "%s%s%s",
			 ca_err[0] ? name[f] : "", ca_err[0] ? ": " : "",
			 ca_err);
	}
	snprintf(ca_err, sizeof(ca_err), "%s%s%s", note[0],
		 forms > 1 && note[0][0] && note[1][0] ? "; " : "",
		 forms > 1 ? note[1] : "");
	if (unbuilt) {
		size_t at = strlen(ca_err);
		snprintf(ca_err + at, sizeof(ca_err) - at,
			 "%s%d lower-ranked configs not built (listing past "
			 "%.1f s)",
			 at ? "; " : "", unbuilt, CA_LIST_S);
	}
	rc = built ? n : -EIO;
out:
	pthread_mutex_unlock(&ca_mu);
	return rc;
}

int flyk_cudnn_attn_workspace(const struct flyk_cudnn_attn_problem *p,
			      const int64_t *params, size_t *bytes)
{
	int64_t dev = 0;
	struct ca_key k;
	int rc = flyk_cudnn_attn_feasible(p, params);
	if (rc || !params || !bytes)
		return rc ? rc : -EINVAL;
	pthread_mutex_lock(&ca_mu);
	cudnnHandle_t h = ca_handle_locked(&dev);
	rc = -ENODEV;
	if (h) {
		ca_key_of(p, dev, &k);
		struct ca_plan *e = ca_plan_get_locked(&k, h, params, NULL);
		rc = e ? 0 : -EINVAL;
		if (e)
			*bytes = e->ws;
	}
	pthread_mutex_unlock(&ca_mu);
	return rc;
}

int flyk_cudnn_attn_replays(const struct flyk_cudnn_attn_problem *p,
			    const int64_t *params, size_t *bytes)
{
	int64_t dev = 0, pr[NP];
	struct ca_key k;
	int rc = flyk_cudnn_attn_feasible(p, params);
	if (rc || !params || !bytes)
		return rc ? rc : -EINVAL;
	ca_canon(params, pr);
	pthread_mutex_lock(&ca_mu);
	cudnnHandle_t h = ca_handle_locked(&dev);
	rc = -ENODEV;
	if (!h)
		goto out;
	ca_key_of(p, dev, &k);
	rc = -EINVAL;
	for (int i = 0; i < CA_NOREPLAY; i++) {
		const struct ca_noreplay *x = &ca_noreplay[i];
		if (x->used && !memcmp(&x->k, &k, sizeof(k)) &&
		    !memcmp(x->params, pr, sizeof(pr)))
			goto out;
	}
	/* the point's own form only, and no stand-in: as enumerating does */
	struct ca_graph *g = ca_graph_get_locked(&k, (int)(pr[1] >> 8), h);
	struct ca_plan *e = g ? ca_plan_get_locked(&k, h, pr, g) : NULL;
	ca_graph_put(g);
	if (e && !e->subst) {
		*bytes = e->ws;
		rc = 0;
	} else {
		struct ca_noreplay *x =
		    &ca_noreplay[ca_noreplay_next++ % CA_NOREPLAY];
		x->used = 1;
		x->k = k;
		memcpy(x->params, pr, sizeof(pr));
	}
out:
	pthread_mutex_unlock(&ca_mu);
	return rc;
}

static int ca_misaligned(const void *ptr)
{
	return !ptr || ((uintptr_t)ptr & 15);
}

/* Execute @p e with @p a's operands.  Called with ca_mu held. */
static int ca_execute_locked(cudnnHandle_t h, const struct ca_plan *e,
			     const struct flyk_cudnn_attn_args *a)
{
	const struct ca_graph *g = e->g;
	float scale = a->scale;
	float ninf = cudnnGetVersion() >= 91000 ? -INFINITY : -FLT_MAX;
	int32_t skv = g->skv32, sq = g->sq32;
	int64_t uid[9] = {UID_Q, UID_K, UID_V, UID_O, UID_SCALE};
	void *ptr[9] = {(void *)a->q, (void *)a->k, (void *)a->v, a->o, &scale};
	void *ws = a->workspace;
	int n = 5;
	if (g->key.p.lse) {
		uid[n] = UID_LSE;
		ptr[n++] = a->lse;
	}
	if (g->mask) {
		uid[n] = UID_NEGINF;
		ptr[n++] = &ninf;
	}
	if (g->shift) {
		uid[n] = UID_SKV;
		ptr[n++] = &skv;
		uid[n] = UID_SQ;
		ptr[n++] = &sq;
	}
	cudnnBackendDescriptor_t list[1] = {NULL};
	int nd = 0;
	struct ca_bld b;
	ca_bld_init(&b, list, &nd, 1);
	cudnnBackendDescriptor_t vp =
	    ca_new(&b, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
	ca_set(&b, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
	       uid);
	ca_set(&b, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
	       CUDNN_TYPE_VOID_PTR, n, ptr);
	ca_set(&b, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
	       1, &ws);
	ca_fin(&b, vp, "finalize variant pack");
	if (b.st == CUDNN_STATUS_SUCCESS) {
		b.st = cudnnBackendExecute(h, e->plan, vp);
		b.step = "cudnnBackendExecute";
	}
	int rc = ca_bld_done(&b) ? -EIO : 0;
	ca_destroy(list, nd);
	return rc;
}

int flyk_cudnn_attn_run(const struct flyk_cudnn_attn_problem *p,
			const int64_t *params,
			const struct flyk_cudnn_attn_args *a, void *stream)
{
	int64_t dev = 0;
	struct ca_key k;
	int rc = flyk_cudnn_attn_feasible(p, params);
	if (rc)
		return rc;
	if (!params || !a || ca_misaligned(a->q) || ca_misaligned(a->k) ||
	    ca_misaligned(a->v) || ca_misaligned(a->o) ||
	    (p->lse && ca_misaligned(a->lse)) || ((uintptr_t)a->workspace & 15))
		return -EINVAL;
	pthread_mutex_lock(&ca_mu);
	cudnnHandle_t h = ca_handle_locked(&dev);
	rc = -ENODEV;
	if (!h)
		goto out;
	ca_key_of(p, dev, &k);
	struct ca_plan *e = ca_plan_get_locked(&k, h, params, NULL);
	rc = -EINVAL;
	if (!e)
		goto out;
	rc = -ENOSPC;
	if (e->ws > 0 && (!a->workspace || a->workspace_size < e->ws))
		goto out;
	cudnnStatus_t st = cudnnSetStream(h, (cudaStream_t)stream);
	rc = -EIO;
	if (st != CUDNN_STATUS_SUCCESS) {
		ca_note("cudnnSetStream", -1, st);
		goto out;
	}
	rc = ca_execute_locked(h, e, a);
out:
	pthread_mutex_unlock(&ca_mu);
	return rc;
}

unsigned long flyk_cudnn_attn_substituted(void)
{
	pthread_mutex_lock(&ca_mu);
	unsigned long n = ca_subst;
	pthread_mutex_unlock(&ca_mu);
	return n;
}

const char *flyk_cudnn_attn_last_error(void)
{
	return ca_err;
}

int flyk_cudnn_attn_warm(void)
{
	/* a causal d128 problem's first plan: loads cuDNN's engine libraries
	 * and builds its kernels, once per process.  (Building the top plans
	 * of the causal and non-causal s4096 graphs with and without the LSE
	 * too took 3.3-4.3 s at the worker's start on the H200 and took the
	 * first key's listing from 0.90 s to 0.54-0.83 s only: not kept.)
	 * The time goes to stderr, the worker's log. */
	struct flyk_cudnn_attn_problem p;
	int64_t pt[1][NP];
	double t0 = ca_now();
	memset(&p, 0, sizeof(p));
	p.b = 1;
	p.sq = p.skv = 128;
	p.hq = p.hkv = 1;
	p.d = 128;
	p.causal = 1;
	p.lse = 1;
	for (int i = 0; i < 3; i++)
		p.q_stride[i] = p.k_stride[i] = p.v_stride[i] = p.o_stride[i] =
		    i == 0 ? 128 * 128 : 128;
	int n = flyk_cudnn_attn_enumerate(&p, pt, 1);
	fprintf(stderr, "flyk: cudnn attention warm-up: %.2f s\n",
		ca_now() - t0);
	return n < 0 ? n : 0;
}

int flyk_cudnn_attn_version(char *buf, size_t cap)
{
	return snprintf(buf, cap, "cudnn-%zu", cudnnGetVersion());
}
