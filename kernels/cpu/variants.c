/*
 * variants.c -- the CPU backend's variant table: every op file's
 * variants, then the test-only ones of kernels/testing when linked, and
 * each op's reference.
 *
 * Owns: the table, built once (pthread_once) and then read-only.
 * Thread: any.
 */
#include <pthread.h>
#include <stddef.h>

#include "cpu_int.h"

/* Provided by kernels/testing/faulty.c when it is linked (flytuned-test,
 * test binaries); absent (NULL) in the production daemon. */
extern const struct flyk_variant flyk_testing_variants[]
	__attribute__((weak));
extern const size_t flyk_testing_nvariants __attribute__((weak));

#define CPU_MAX_VARIANTS 64

static struct flyk_variant cpu_table[CPU_MAX_VARIANTS];
static size_t cpu_ntable;
static pthread_once_t cpu_table_once = PTHREAD_ONCE_INIT;

static void table_append(const struct flyk_variant *v, size_t n)
{
	for (size_t i = 0; i < n && cpu_ntable < CPU_MAX_VARIANTS; i++)
		cpu_table[cpu_ntable++] = v[i];
}

/* Build the combined table: CPU variants first, test-only ones last. */
static void table_build(void)
{
	table_append(flyk_cpu_rmsnorm_variants, flyk_cpu_rmsnorm_nvariants);
	table_append(flyk_cpu_topk_variants, flyk_cpu_topk_nvariants);
	table_append(flyk_cpu_gemm_variants, flyk_cpu_gemm_nvariants);
	table_append(flyk_cpu_grouped_gemm_variants,
		     flyk_cpu_grouped_gemm_nvariants);
	table_append(flyk_cpu_mqa_logits_variants,
		     flyk_cpu_mqa_logits_nvariants);
	table_append(flyk_cpu_scaled_gemm_variants,
		     flyk_cpu_scaled_gemm_nvariants);
	table_append(flyk_cpu_attention_variants,
		     flyk_cpu_attention_nvariants);
	if (flyk_testing_variants && &flyk_testing_nvariants)
		table_append(flyk_testing_variants, flyk_testing_nvariants);
}

const struct flyk_variant *flyk_cpu_variants(size_t *n)
{
	pthread_once(&cpu_table_once, table_build);
	*n = cpu_ntable;
	return cpu_table;
}

const struct flyk_variant *flyk_cpu_reference(uint32_t op)
{
	size_t n;
	const struct flyk_variant *v = flyk_cpu_variants(&n);

	for (size_t i = 0; i < n; i++)
		if (v[i].op == op && v[i].is_reference)
			return &v[i];
	return NULL;
}
