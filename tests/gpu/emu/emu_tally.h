/*
 * emu_tally.h -- which variants a run of an emulator binary launched, and
 * which it skipped as infeasible in its device model (issue 27): a
 * variant that the run looked at but never launched is a failure unless
 * the model's list below names it with the reason, and a listed variant
 * that did launch is a failure too (the list is stale), so no variant
 * passes by silently running nothing.  Prints, before the summary line:
 *   ran (MODEL): NAME POINTS ...
 *   skipped-infeasible (MODEL): NAME (WHY), ...
 *
 * Owns: the tally (file-static).  Thread: the emulator's one host thread.
 * Definitions, not declarations: include it from exactly one .cpp of an
 * emulator binary (emu_main.cpp, emu_gemm.cpp), after flyk_gpu.h.
 * Test-only; never part of a shipped build.
 */
#ifndef FLYK_EMU_TALLY_H
#define FLYK_EMU_TALLY_H

#include <stdio.h>
#include <string.h>

#include <vector>

#if FLYK_AMD
#define EMU_MODEL "amd wave64"
#else
#define EMU_MODEL "nvidia"
#endif

struct emu_skip {
	const char *name; /* variant */
	const char *why;  /* why no point of it is feasible in this model */
};

/* The variants this model cannot run, and why. */
#if FLYK_AMD
#define EMU_NO_CLUSTERS "clusters: none on AMD"
#define EMU_NO_TMA	"TMA: NVIDIA sm_90a only"
#else
#define EMU_NO_CLUSTERS "clusters: not emulated"
#define EMU_NO_TMA	"TMA: not emulated"
#endif
static const struct emu_skip emu_skips[] = {
    {"rmsnorm_cluster", EMU_NO_CLUSTERS},
    {"topk_wqc", EMU_NO_CLUSTERS},
    {"gemm_tma", EMU_NO_TMA},
    {"ggemm_tma", EMU_NO_TMA},
    {"attn_wgmma", EMU_NO_TMA},
    {"sg_wgmma", EMU_NO_TMA},
    {"gemm_stream", EMU_NO_TMA},
    {"sg_stream", EMU_NO_TMA},
    {"attn_cudnn", "cuDNN: vendor library"},
    {"cublas_default", "cuBLAS: vendor library"},
    {"cublaslt", "cuBLASLt: vendor library"},
#if FLYK_AMD
    {"gemm_mma", "mma.sync: NVIDIA only (gemm_mfma is AMD's)"},
    {"gemm_skinny", "mma.sync: NVIDIA only (gemm_mfma is AMD's)"},
    {"gemm_wgmma", "wgmma: NVIDIA sm_90a only"},
    {"ggemm_mma", "mma.sync: NVIDIA only (ggemm_mfma is AMD's)"},
    {"ggemm_wgmma", "wgmma: NVIDIA sm_90a only"},
    {"attn_fa2", "mma.sync: NVIDIA only (attn_mfma on AMD)"},
    {"attn_fa2_split", "mma.sync: NVIDIA only (attn_mfma on AMD)"},
    {"mqa_wgmma", "wgmma: NVIDIA sm_90a only (mqa_mfma is AMD's)"},
    {"sg_skinny", "fp8 mma.sync: NVIDIA sm_89+ only (sg_mfma is AMD's)"},
#else
    {"gemm_mfma", "MFMA: AMD CDNA only"},
    {"ggemm_mfma", "MFMA: AMD CDNA only"},
    {"sg_mfma", "MFMA: AMD CDNA only"},
    {"attn_mfma", "MFMA: AMD CDNA only"},
    {"mqa_mfma", "MFMA: AMD CDNA only"},
    {"mqa_wgmma", EMU_NO_TMA},
#endif
};

struct emu_count {
	const char *name; /* variant */
	int ran;	  /* points launched */
};

static std::vector<emu_count> emu_counts;

static emu_count *tally_of(const char *name)
{
	for (auto &c : emu_counts)
		if (!strcmp(c.name, name))
			return &c;
	emu_counts.push_back(emu_count{name, 0});
	return &emu_counts.back();
}

/* The run looked at variant @p name (for a problem it supports). */
static void tally_seen(const char *name)
{
	tally_of(name);
}

/* The run launched a point of variant @p name. */
static void tally_ran(const char *name)
{
	tally_of(name)->ran++;
}

/* Variants whose points another part of the same binary runs (a part
 * is a mode of it: the suite runs the parts as separate tests). */
static std::vector<emu_skip> emu_elsewhere;

/* Variant @p name is run by the part @p why names, not by this run. */
static void tally_elsewhere(const char *name, const char *why)
{
	emu_elsewhere.push_back(emu_skip{name, why});
}

static const char *tally_elsewhere_why(const char *name)
{
	for (const auto &s : emu_elsewhere)
		if (!strcmp(s.name, name))
			return s.why;
	return NULL;
}

static const char *tally_skip_why(const char *name)
{
	for (const auto &s : emu_skips)
		if (!strcmp(s.name, name))
			return s.why;
	return NULL;
}

/* Print what ran and what was skipped; @return the variants that broke
 * the rule above (each a failure, printed "FAIL"). */
static int tally_report(void)
{
	int bad = 0;
	printf("ran (%s):", EMU_MODEL);
	for (const auto &c : emu_counts)
		if (c.ran)
			printf(" %s %d", c.name, c.ran);
	printf("\nskipped-infeasible (%s):", EMU_MODEL);
	const char *sep = " ";
	for (const auto &c : emu_counts) {
		const char *why = tally_skip_why(c.name);
		if (!c.ran && why) {
			printf("%s%s (%s)", sep, c.name, why);
			sep = ", ";
		}
	}
	printf("\n");
	for (const auto &c : emu_counts) {
		const char *why = tally_elsewhere_why(c.name);
		if (!c.ran && why)
			printf("run by another part: %s (%s)\n", c.name, why);
	}
	for (const auto &c : emu_counts) {
		const char *why = tally_skip_why(c.name);
		if (!c.ran && !why && tally_elsewhere_why(c.name))
			continue;
		if (!c.ran && !why) {
			printf("FAIL %s: no feasible point ran (%s)\n", c.name,
			       EMU_MODEL);
			bad++;
		} else if (c.ran && why) {
			printf("FAIL %s ran, but is listed infeasible (%s): "
			       "update emu_tally.h\n",
			       c.name, EMU_MODEL);
			bad++;
		}
	}
	return bad;
}

#endif /* FLYK_EMU_TALLY_H */
