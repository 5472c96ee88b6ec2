/*
 * test_devid.c -- kernels/devid.c without a GPU: the fingerprint composed
 * from a filled struct (NVIDIA's string unchanged, AMD's extra fields, the
 * fallback without ROCm SMI), the flush-buffer sizing from the device's
 * caches (MI300X's 256 MiB Infinity Cache, by gfx name and from a fake KFD
 * topology tree) and flyk_smi_query()'s
 * absent-library and wrong-library paths.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../kernels/gpu/devid.h"

#define MiB ((size_t)1 << 20)

static struct flyk_devid h100(void)
{
	struct flyk_devid id = {
		.arch = "sm_90", .name = "NVIDIA H100", .units = 132,
		.clock_mhz = 1980, .mem_clock_mhz = 2619,
		.driver_version = 12040, .runtime_version = 12040,
		.l2_bytes = 50 * MiB, .lib = "1.2.3", .blas = "cublasLt-12.4",
		.dnn = "none",
	};
	return id;
}

static struct flyk_devid mi300x(const struct flyk_smi *smi)
{
	struct flyk_devid id = {
		.amd = 1, .arch = "gfx942", .name = "AMD Instinct MI300X",
		.units = 304, .clock_mhz = 2100, .mem_clock_mhz = 1300,
		.driver_version = 60342, .runtime_version = 60342,
		.l2_bytes = 4 * MiB, .llc_bytes = 256 * MiB, .lib = "1.2.3",
		.blas = "hipblaslt-0.10", .dnn = "none", .smi = smi,
	};
	return id;
}

/* NVIDIA's fingerprint is byte for byte the string of the first GPU
 * backend: a change would orphan every tuned DB. */
static void nvidia_unchanged(void **state)
{
	struct flyk_devid id = h100();
	const char *want =
		"arch=sm_90 units=132 clock_mhz=1980 mem_clock_mhz=2619 "
		"driver=12040 runtime=12040 l2_kb=51200 lib=1.2.3 "
		"blas=cublasLt-12.4 dnn=none name=\"NVIDIA H100\"";
	char buf[512];
	(void)state;
	assert_int_equal(flyk_devid_fingerprint(&id, buf, sizeof(buf)),
			 (int)strlen(want));
	assert_string_equal(buf, want);
}

static void amd_with_smi(void **state)
{
	struct flyk_smi smi = { .power_cap_w = 750 };
	char buf[512];
	(void)state;
	strcpy(smi.kdriver, "6.8.5");
	struct flyk_devid id = mi300x(&smi);
	assert_true(flyk_devid_fingerprint(&id, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "arch=gfx942 units=304 "));
	assert_non_null(strstr(buf, " l2_kb=4096 "));
	assert_non_null(strstr(buf, "name=\"AMD Instinct MI300X\" llc_kb="
				    "262144 power_cap_w=750 kdriver=6.8.5"));
}

/* Without ROCm SMI the identity still composes, saying so. */
static void amd_without_smi(void **state)
{
	struct flyk_devid id = mi300x(NULL);
	struct flyk_smi empty = { 0 };
	char a[512], b[512];
	(void)state;
	assert_true(flyk_devid_fingerprint(&id, a, sizeof(a)) > 0);
	const char *tail = " power_cap_w=0 kdriver=none";
	assert_string_equal(a + strlen(a) - strlen(tail), tail);
	id.smi = &empty; /* SMI loaded but silent: the same identity */
	assert_true(flyk_devid_fingerprint(&id, b, sizeof(b)) > 0);
	assert_string_equal(a, b);
}

static void too_small_or_null(void **state)
{
	struct flyk_devid id = mi300x(NULL);
	char buf[512];
	int n;
	(void)state;
	n = flyk_devid_fingerprint(&id, buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(flyk_devid_fingerprint(&id, buf, (size_t)n), -ENOSPC);
	assert_int_equal(flyk_devid_fingerprint(&id, buf, (size_t)n + 1), n);
	assert_int_equal(flyk_devid_fingerprint(&id, buf, 40), -ENOSPC);
	id.blas = NULL;
	assert_int_equal(flyk_devid_fingerprint(&id, buf, sizeof(buf)),
			 -EINVAL);
}

static void gfx_table(void **state)
{
	(void)state;
	assert_int_equal(flyk_gfx_llc_bytes("gfx942"), 256 * MiB);
	assert_int_equal(flyk_gfx_llc_bytes("gfx942:sramecc+:xnack-"),
			 256 * MiB);
	assert_int_equal(flyk_gfx_llc_bytes("gfx940"), 256 * MiB);
	assert_int_equal(flyk_gfx_llc_bytes("gfx950"), 256 * MiB);
	assert_int_equal(flyk_gfx_llc_bytes("gfx90a"), 0);
	assert_int_equal(flyk_gfx_llc_bytes("gfx9420"), 0);
	assert_int_equal(flyk_gfx_llc_bytes("gfx94"), 0);
	assert_int_equal(flyk_gfx_llc_bytes("sm_90"), 0);
	assert_int_equal(flyk_gfx_llc_bytes(NULL), 0);
}

static void flush_sizing(void **state)
{
	(void)state;
	/* NVIDIA: 4x L2, never below 256 MiB (as before) */
	assert_int_equal(flyk_flush_bytes(50 * MiB, 0), 256 * MiB);
	assert_int_equal(flyk_flush_bytes(0, 0), FLYK_FLUSH_MIN_BYTES);
	assert_int_equal(flyk_flush_bytes(96 * MiB, 0), 384 * MiB);
	/* MI300X: a 4 MiB L2 but a 256 MiB Infinity Cache */
	size_t b = flyk_flush_bytes(4 * MiB, 256 * MiB);
	assert_true(b >= 2 * 256 * MiB);
	assert_int_equal(b, 1024 * MiB);
	/* the larger cache wins whichever argument it is */
	assert_int_equal(flyk_flush_bytes(256 * MiB, 4 * MiB), b);
	/* exactly 4x, as the first GPU backend did (no rounding) */
	assert_int_equal(flyk_flush_bytes(100 * MiB + 1, 0), 400 * MiB + 4);
}

/* Write @p text to ROOT/@p rel, making the directories on the way. */
static void put(const char *root, const char *rel, const char *text)
{
	char path[512];
	FILE *f;
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (char *p = path + strlen(root) + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			(void)mkdir(path, 0700);
			*p = '/';
		}
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* A fake KFD topology: node 0 a CPU, node 1 an MI300X at 0000:0c:00.0
 * (location_id = bus << 8 | device << 3) listing L2 and Infinity Cache,
 * node 2 another GPU at 0000:8f:00.0 with an L2 only. */
static void kfd_topology(void **state)
{
	char root[64] = "/tmp/flyk-kfd-XXXXXX"; /* room for "/none" */
	char cmd[96];
	(void)state;
	assert_non_null(mkdtemp(root));
	put(root, "nodes/0/properties", "cpu_cores_count 64\nlocation_id 0\n"
					 "domain 0\n");
	put(root, "nodes/1/properties", "simd_count 1216\nlocation_id 3072\n"
					 "domain 0\ngfx_target_version 90402\n");
	put(root, "nodes/1/caches/0/properties", "processor_id_low 1\n"
						  "level 2\nsize 4096\n");
	put(root, "nodes/1/caches/1/properties", "level 3\nsize 262144\n"
						  "cache_line_size 64\n");
	put(root, "nodes/2/properties", "location_id 36608\ndomain 0\n");
	put(root, "nodes/2/caches/0/properties", "level 2\nsize 8192\n");
	assert_int_equal(flyk_kfd_cache_bytes(root, 0, 0x0c, 0), 256 * MiB);
	assert_int_equal(flyk_kfd_cache_bytes(root, 0, 0x8f, 0), 8 * MiB);
	assert_int_equal(flyk_kfd_cache_bytes(root, 1, 0x0c, 0), 0);
	assert_int_equal(flyk_kfd_cache_bytes(root, 0, 0x0d, 0), 0);
	strcat(root, "/none"); /* no topology at all */
	assert_int_equal(flyk_kfd_cache_bytes(root, 0, 0x0c, 0), 0);
	root[strlen(root) - 5] = '\0';
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	assert_int_equal(system(cmd), 0);
}

static void smi_absent(void **state)
{
	struct flyk_smi smi;
	(void)state;
	memset(&smi, 0x55, sizeof(smi));
	assert_int_equal(flyk_smi_query("libflyk-no-such-smi.so", 0, 3, 0,
					&smi), -ENOENT);
	assert_int_equal(smi.power_cap_w, 0); /* zeroed even on failure */
	assert_string_equal(smi.kdriver, "");
}

/* A library that loads but is not ROCm SMI. */
static void smi_wrong_library(void **state)
{
	struct flyk_smi smi;
	(void)state;
	assert_int_equal(flyk_smi_query("libm.so.6", 0, 3, 0, &smi), -ENOSYS);
	assert_string_equal(smi.kdriver, "");
}

/* The default search: on CI (no ROCm) it fails cleanly, never crashes;
 * on a ROCm machine with no device at that address it says -ENODEV. */
static void smi_default_search(void **state)
{
	struct flyk_smi smi;
	(void)state;
	int rc = flyk_smi_query(NULL, 0x7fff, 0xff, 0x1f, &smi);
	assert_true(rc == -ENOENT || rc == -ENODEV || rc == -ENOSYS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(nvidia_unchanged),
		cmocka_unit_test(amd_with_smi),
		cmocka_unit_test(amd_without_smi),
		cmocka_unit_test(too_small_or_null),
		cmocka_unit_test(gfx_table),
		cmocka_unit_test(flush_sizing),
		cmocka_unit_test(kfd_topology),
		cmocka_unit_test(smi_absent),
		cmocka_unit_test(smi_wrong_library),
		cmocka_unit_test(smi_default_search),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
