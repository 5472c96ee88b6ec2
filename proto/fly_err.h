/*
 * fly_err.h -- fly_strerror(): text for negative errno values and for the
 * FLY_E_* range.  Thread: any.  Never returns NULL.
 */
#ifndef FLY_ERR_H
#define FLY_ERR_H

/* Exported from libflyclient.so (built -fvisibility=hidden). */
__attribute__((visibility("default"))) const char *fly_strerror(int err);

#endif /* FLY_ERR_H */
