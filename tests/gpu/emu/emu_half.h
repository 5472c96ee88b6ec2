/*
 * emu_half.h -- fp16 <-> fp32 for the emulator binaries (copies of
 * backend.hip's host versions: the emulator links no runtime), round to
 * nearest even.  Definitions, not declarations: include it from exactly
 * one .cpp of an emulator binary (emu_main.cpp, emu_gemm.cpp).
 * Test-only; never part of a shipped build.
 */
#ifndef FLYK_EMU_HALF_H
#define FLYK_EMU_HALF_H

#include <stdint.h>
#include <string.h>

extern "C" float flyk_half_to_float(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f,
		 m = h & 0x3ffu, u;
	if (e == 0x1f) {
		u = s | 0x7f800000u | (m << 13);
	} else if (e == 0) {
		if (m == 0) {
			u = s;
		} else {
			e = 113;
			while (!(m & 0x400u)) {
				m <<= 1;
				e--;
			}
			u = s | (e << 23) | ((m & 0x3ffu) << 13);
		}
	} else {
		u = s | ((e + 112) << 23) | (m << 13);
	}
	float f;
	memcpy(&f, &u, 4);
	return f;
}

extern "C" uint16_t flyk_float_to_half(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t s = (u >> 16) & 0x8000u;
	int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
	uint32_t m = u & 0x7fffffu;
	if (((u >> 23) & 0xff) == 0xff)
		return (uint16_t)(s | 0x7c00u | (m ? 0x200u : 0));
	if (e >= 0x1f)
		return (uint16_t)(s | 0x7c00u);
	if (e <= 0) {
		if (e < -10)
			return (uint16_t)s;
		m |= 0x800000u;
		uint32_t shift = (uint32_t)(14 - e);
		uint32_t h = m >> shift, rem = m & ((1u << shift) - 1),
			 half = 1u << (shift - 1);
		if (rem > half || (rem == half && (h & 1)))
			h++;
		return (uint16_t)(s | h);
	}
	uint32_t h = s | ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
		h++;
	return (uint16_t)h;
}

#endif /* FLYK_EMU_HALF_H */
