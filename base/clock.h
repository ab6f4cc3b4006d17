/* One clock for trun. CLOCK_MONOTONIC for intervals, timeouts and deadlines (it never jumps when the
 * wall clock is set); CLOCK_REALTIME for timestamps other processes or people read (events, reports, keys
 * in the store that other nodes compare). */
#ifndef TRUN_BASE_CLOCK_H
#define TRUN_BASE_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in seconds, milliseconds and whole microseconds (the kernel log's clock). */
double trun_mono_s(void);
double trun_mono_ms(void);
int64_t trun_mono_us(void);
/* CLOCK_REALTIME in seconds and whole microseconds since the epoch. */
double trun_wall_s(void);
int64_t trun_wall_us(void);

#endif
