/*
 * faulty.c -- test-only rmsnorm variants that misbehave on demand, so the
 * daemon's supervision (crash, timeout, wrong answer) runs in CI without a
 * GPU.  Linked only into flytuned-test and the test binaries; the CPU
 * backend picks them up through weak symbols (kernels/cpu/backend.c).
 *
 *   test_crash  raises SIGSEGV (a store through a NULL volatile pointer)
 *   test_hang   spins forever on a volatile counter, no syscalls
 *   test_wrong  writes y = x (plausible numbers, wrong)
 *
 * Each is feasible only when FLYK_TESTING_FAULTS (comma-separated) names
 * it: "crash", "hang", "wrong"; otherwise feasible() returns -EINVAL.
 * A value "@PATH" reads the list from the file PATH (its first line) at
 * every call instead, so a test can switch a running daemon's fault
 * (tests/gpu/test_gpu_faults.c in its CPU mode; gpu_faulty.hip the same).
 *
 * flyk_testing_setup_fault(), called by the worker before a job's case
 * set-up, crashes it for rmsnorm problems with n = 4093 when the list
 * names "setup_crash" (a job that faults every time, issue 18).
 * flyk_testing_open_fault(), called by the worker before it opens its
 * device, fails the open (-ENODEV, as a GPU gone) while the list names
 * "gpu_lost" (RELIABILITY.md F11's CPU analogue).
 * Owns: nothing.  Thread: any.
 */
#include <errno.h>
#include <string.h>

#include "fault_list.h"
#include "flyk.h"

#define FAULTY_DTYPES ((1u << FLY_DT_FP32) | (1u << FLY_DT_BF16) | \
		       (1u << FLY_DT_FP16))

static const int64_t one_val[] = { 1 };

static int problem_ok(const struct fly_problem *p)
{
	return p->op == FLY_OP_RMSNORM && (FAULTY_DTYPES & (1u << p->dtype)) &&
	       p->dims[0] >= 1 && p->dims[1] >= 1;
}

/* 0 when @p p is a problem of these variants and fault @p name is on. */
static int feasible_if(const struct fly_problem *p, const char *name)
{
	return problem_ok(p) && flyk_testing_fault_enabled(name) ? 0 : -EINVAL;
}

static int crash_feasible(const struct flyk_device *dev,
			  const struct fly_problem *p, const int64_t *params)
{
	return feasible_if(p, "crash");
}

static int hang_feasible(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *params)
{
	return feasible_if(p, "hang");
}

static int wrong_feasible(const struct flyk_device *dev,
			  const struct fly_problem *p, const int64_t *params)
{
	return feasible_if(p, "wrong");
}

static int crash_launch(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params,
			const union flyk_args *args, void *stream)
{
	/* The pointee volatile too: gcc -O2 drops a plain store. */
	volatile int *volatile np = NULL;

	*np = 1;
	return -EFAULT;
}

static int hang_launch(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *params,
		       const union flyk_args *args, void *stream)
{
	volatile uint64_t spin = 0;

	for (;;)
		spin++;
	return 0;
}

/* y = x: the right shape and plausible magnitudes, the wrong numbers. */
static int wrong_launch(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params,
			const union flyk_args *args, void *stream)
{
	size_t es = p->dtype == FLY_DT_FP32 ? 4 : 2;

	memmove(args->rmsnorm.y, args->rmsnorm.x,
		(size_t)(p->dims[0] * p->dims[1]) * es);
	return 0;
}

#define FAULTY(nm, feas, fn)                                               \
	{                                                                  \
		.name = nm, .op = FLY_OP_RMSNORM, .dtypes = FAULTY_DTYPES, \
		.flags = FLY_F_RESIDUAL, .nparams = 1,                     \
		.params = { { "one", 1, one_val } },                       \
		.feasible = feas, .launch = fn,                            \
	}

const struct flyk_variant flyk_testing_variants[] = {
	FAULTY("test_crash", crash_feasible, crash_launch),
	FAULTY("test_hang", hang_feasible, hang_launch),
	FAULTY("test_wrong", wrong_feasible, wrong_launch),
};
const size_t flyk_testing_nvariants =
	sizeof(flyk_testing_variants) / sizeof(flyk_testing_variants[0]);

#define SETUP_FAULT_N 4093 /* the marked problems' n: no other test uses it */

void flyk_testing_setup_fault(const struct fly_problem *p);
void flyk_testing_setup_fault(const struct fly_problem *p)
{
	volatile int *volatile np = NULL;

	if (p->op == FLY_OP_RMSNORM && p->dims[1] == SETUP_FAULT_N &&
	    flyk_testing_fault_enabled("setup_crash"))
		*np = 1;
}

int flyk_testing_open_fault(void);
int flyk_testing_open_fault(void)
{
	return flyk_testing_fault_enabled("gpu_lost") ? -ENODEV : 0;
}
