/*
 * emu_sched.h -- the emulator's block scheduler, shared by emu_main.cpp
 * (rmsnorm, topk) and emu_gemm.cpp (gemm, grouped gemm): one ucontext
 * coroutine per GPU thread of a block, run until each reaches a barrier
 * (__syncthreads: the block; __syncwarp / warp collectives: its warp) or
 * ends; a barrier is released when every live thread of its scope waits
 * on it; mixed barriers that can never release abort ("deadlock").
 * Blocks of a grid (x, then y, then z) run one after another.  A warp is
 * FLYK_WARP threads (32, or 64 in the AMD mode); a launch asking for more
 * dynamic shared memory than FLYK_EMU_SMEM_MAX fails (hipGetLastError)
 * and runs nothing, as on the GPU.
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

struct emu_thread {
	ucontext_t ctx;
	int state;
	char *stack;
};

static std::vector<emu_thread> thr;
static ucontext_t sched;
static int cur;
static std::vector<uint64_t> slots;
static hipError_t last_err;
static std::vector<unsigned char> dyn;
static const std::function<void()> *body_fn;

static void emu_yield(int state)
{
	thr[cur].state = state;
	swapcontext(&thr[cur].ctx, &sched);
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

static void emu_block(int n)
{
	for (int t = 0; t < n; t++) {
		getcontext(&thr[t].ctx);
		thr[t].ctx.uc_stack.ss_sp = thr[t].stack;
		thr[t].ctx.uc_stack.ss_size = STACK;
		thr[t].ctx.uc_link = NULL;
		makecontext(&thr[t].ctx, emu_tramp, 0);
		thr[t].state = RUN;
	}
	for (;;) {
		for (int t = 0; t < n; t++) {
			if (thr[t].state != RUN)
				continue;
			cur = t;
			threadIdx = dim3(t);
			swapcontext(&sched, &thr[t].ctx);
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
