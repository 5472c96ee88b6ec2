/*
 * emu_sched.h -- the emulator's block scheduler, shared by emu_main.cpp
 * (rmsnorm, topk) and emu_gemm.cpp (gemm, grouped gemm): one coroutine
 * per GPU thread of a block, run until each reaches a barrier
 * (__syncthreads: the block; __syncwarp / warp collectives: its warp) or
 * ends; a barrier is released when every live thread of its scope waits
 * on it; mixed barriers that can never release abort ("deadlock").
 * Blocks of a grid (x, then y, then z) run one after another.  A warp is
 * FLYK_WARP threads (32, or 64 in the AMD mode); a launch asking for more
 * dynamic shared memory than FLYK_EMU_SMEM_MAX fails (hipGetLastError)
 * and runs nothing, as on the GPU.
 *
 * On x86-64 a switch between coroutines is emu_switch below: the
 * callee-saved registers, MXCSR and the x87 control word, no syscall.
 * glibc's swapcontext also saves and restores the signal mask, an
 * rt_sigprocmask syscall per switch: with it, flyk_emu_amd topk2 spent
 * 18.7 of its 39.2 s in the kernel, and the ten emulator tests of `make
 * test` took 692 s on the 2-core VM (28 s with emu_switch).  Elsewhere
 * (or with -DFLYK_EMU_UCONTEXT=1) the coroutines are ucontext's.
 *
 * Definitions, not declarations: include it from exactly one .cpp of an
 * emulator binary, after flyk_gpu.h.
 */
#ifndef FLYK_EMU_SCHED_H
#define FLYK_EMU_SCHED_H

#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <functional>
#include <vector>

dim3 threadIdx, blockIdx, blockDim, gridDim;

/* ------------------------------------------------------------ scheduler */

enum { RUN, WAIT_WARP, WAIT_BLOCK, DONE };
#define STACK (64 * 1024)

#if defined(__x86_64__) && !FLYK_EMU_UCONTEXT
#define EMU_FAST_SWITCH 1
/* emu_switch(&from, to): push the callee-saved registers and the FP
 * control words on the running stack, store its pointer in *from, load
 * @p to's and pop them there (a stack emu_stack_init made, or one an
 * earlier emu_switch left). */
extern "C" void emu_switch(void **from, void *to);
__asm__(".text\n"
	".globl emu_switch\n"
	".type emu_switch, @function\n"
	"emu_switch:\n"
	"\tpushq %rbp\n\tpushq %rbx\n\tpushq %r12\n"
	"\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n"
	"\tsubq $8, %rsp\n\tstmxcsr (%rsp)\n\tfnstcw 4(%rsp)\n"
	"\tmovq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n"
	"\tldmxcsr (%rsp)\n\tfldcw 4(%rsp)\n\taddq $8, %rsp\n"
	"\tpopq %r15\n\tpopq %r14\n\tpopq %r13\n"
	"\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n"
	"\tret\n"
	".size emu_switch, .-emu_switch\n");
typedef void *emu_ctx;
#else
#define EMU_FAST_SWITCH 0
typedef ucontext_t emu_ctx;
#endif

struct emu_thread {
	emu_ctx ctx;
	int state;
	char *stack;
};

static std::vector<emu_thread> thr;
static emu_ctx sched;
static int cur;
static std::vector<uint64_t> slots;
static hipError_t last_err;
static std::vector<unsigned char> dyn;
static const std::function<void()> *body_fn;

/* Save the running coroutine in @p from and resume @p to. */
static void emu_swap(emu_ctx *from, emu_ctx *to)
{
#if EMU_FAST_SWITCH
	emu_switch(from, *to);
#else
	swapcontext(from, to);
#endif
}

static void emu_yield(int state)
{
	thr[cur].state = state;
	emu_swap(&thr[cur].ctx, &sched);
}

void flyk_emu_syncthreads(void)
{
	emu_yield(WAIT_BLOCK);
}
void flyk_emu_syncwarp(void)
{
	emu_yield(WAIT_WARP);
}
uint64_t *flyk_emu_warp_slots(void)
{
	return &slots[(cur / FLYK_WARP) * FLYK_WARP];
}
hipError_t flyk_emu_last_error(void)
{
	hipError_t e = last_err;
	last_err = hipSuccess;
	return e;
}
void *flyk_emu_dyn_smem(void)
{
	return dyn.data();
}

static void emu_tramp(void)
{
	(*body_fn)();
	slots[cur] = FLYK_EMU_GONE; /* every lane has read it: see xchg */
	emu_yield(DONE);
}

static bool emu_release(int n)
{
	bool any = false;
	for (int w = 0; w * FLYK_WARP < n; w++) {
		int live = 0, wait = 0, end = w * FLYK_WARP + FLYK_WARP;
		for (int t = w * FLYK_WARP; t < n && t < end; t++) {
			live += thr[t].state != DONE;
			wait += thr[t].state == WAIT_WARP;
		}
		if (wait && wait == live) {
			for (int t = w * FLYK_WARP; t < n && t < end; t++)
				thr[t].state = RUN;
			any = true;
		}
	}
	if (any)
		return true;
	int live = 0, wait = 0;
	for (int t = 0; t < n; t++) {
		live += thr[t].state != DONE;
		wait += thr[t].state == WAIT_BLOCK;
	}
	if (wait && wait == live) {
		for (int t = 0; t < n; t++)
			if (thr[t].state == WAIT_BLOCK)
				thr[t].state = RUN;
		return true;
	}
	return false;
}

#if EMU_FAST_SWITCH
/* Thread @p t's stack as emu_switch leaves one, "returning" into
 * emu_tramp (which never returns: the thread's last yield is DONE) with
 * the stack aligned as at a call, and the scheduler's FP control words. */
static void emu_stack_init(int t)
{
	uintptr_t top = ((uintptr_t)thr[t].stack + STACK) & ~(uintptr_t)15;
	void **sp = (void **)top;
	uint32_t mxcsr, fp[2];
	uint16_t cw;

	__asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(cw));
	fp[0] = mxcsr;
	fp[1] = cw;
	*--sp = NULL;                     /* emu_tramp's return address */
	*--sp = (void *)&emu_tramp;       /* emu_switch's ret */
	for (int r = 0; r < 6; r++)
		*--sp = NULL;             /* rbp rbx r12 r13 r14 r15 */
	--sp;
	memcpy(sp, fp, sizeof(fp)); /* MXCSR, then the x87 control word */
	thr[t].ctx = sp;
}
#endif

static void emu_block(int n)
{
	for (int t = 0; t < n; t++) {
#if EMU_FAST_SWITCH
		emu_stack_init(t);
#else
		getcontext(&thr[t].ctx);
		thr[t].ctx.uc_stack.ss_sp = thr[t].stack;
		thr[t].ctx.uc_stack.ss_size = STACK;
		thr[t].ctx.uc_link = NULL;
		makecontext(&thr[t].ctx, emu_tramp, 0);
#endif
		thr[t].state = RUN;
	}
	for (;;) {
		for (int t = 0; t < n; t++) {
			if (thr[t].state != RUN)
				continue;
			cur = t;
			threadIdx = dim3(t);
			emu_swap(&sched, &thr[t].ctx);
		}
		bool done = true;
		for (int t = 0; t < n; t++)
			done = done && thr[t].state == DONE;
		if (done)
			return;
		if (!emu_release(n)) {
			fprintf(stderr, "emu: deadlock (mixed barriers)\n");
			abort();
		}
	}
}

void flyk_emu_run(dim3 grid, dim3 block, size_t smem,
		  const std::function<void()> &body)
{
	int n = (int)block.x;
	if (n < 1 || n > 1024 || block.y != 1 || block.z != 1) {
		fprintf(stderr, "emu: bad launch %u x %u x %u\n", grid.x, grid.y,
			block.x);
		abort();
	}
	if (smem > FLYK_EMU_SMEM_MAX) {
		last_err = hipErrorInvalidValue;
		return;
	}
	if ((int)thr.size() < n) {
		size_t old = thr.size();
		thr.resize(n);
		for (size_t i = old; i < thr.size(); i++)
			thr[i].stack = (char *)malloc(STACK);
	}
	slots.assign(1024, FLYK_EMU_GONE); /* lanes past n: never written */
	dyn.assign(smem + 16, 0xcd); /* garbage, as on a GPU */
	body_fn = &body;
	blockDim = block;
	gridDim = grid;
	for (unsigned z = 0; z < grid.z; z++)
		for (unsigned y = 0; y < grid.y; y++)
			for (unsigned x = 0; x < grid.x; x++) {
				blockIdx = dim3(x, y, z);
				emu_block(n);
			}
}

#endif /* FLYK_EMU_SCHED_H */
