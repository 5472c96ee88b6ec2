/*
 * fly_num.h -- exact number printing (fly_num.c).
 */
#ifndef FLY_NUM_H
#define FLY_NUM_H

#include <stdint.h>

/* Decimal digits of @p v into @p out (no NUL; 20 bytes suffice).
 * @return the length. */
int fly_num_fmt_i64(int64_t v, char *out);

/* Print finite @p v as the shortest of "%.15g", "%.16g", "%.17g" that
 * strtod() reads back as @p v (integral values below 2^53 as integers).
 * @return the length written to @p out (NUL-terminated), or FLY_E_PROTO
 * when @p v is not finite (JSON has no such number). */
int fly_num_fmt_double(double v, char out[32]);

#endif /* FLY_NUM_H */
