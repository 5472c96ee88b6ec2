/*
 * test_devid.c -- kernels/devid.c without a GPU: the fingerprint composed
 * from a filled struct (NVIDIA's string unchanged, AMD's extra fields, the
 * fallback without ROCm SMI), the flush-buffer sizing from the device's
 * caches (MI300X's 256 MiB Infinity Cache) and flyk_smi_query()'s
 * absent-library and wrong-library paths.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

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
		cmocka_unit_test(smi_absent),
		cmocka_unit_test(smi_wrong_library),
		cmocka_unit_test(smi_default_search),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
