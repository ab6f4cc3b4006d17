/* Linux CPU lists ("0-23,48-71", as sysfs cpulist files and taskset print them) ↔ bitmasks of unsigned
 * longs (CPU i = bit i). */
#ifndef TRUN_CPULIST_H
#define TRUN_CPULIST_H

#include <stddef.h>

#define TRUN_CPU_LONGS 64 /* 4096 CPUs */

/* Mask → "0-23,48-71" (every CPU in nlongs longs); truncated safely when out is short. */
void trun_mask_to_cpulist(const unsigned long *mask, unsigned nlongs, char *out, size_t outlen);
/* "0-23,48-71\n" → mask (cleared first). Spaces and a trailing newline are allowed; an empty list gives
 * an empty mask. 0, or -1 for malformed text or a CPU beyond nlongs longs. */
int trun_cpulist_to_mask(const char *s, unsigned long *mask, unsigned nlongs);
/* Number of CPUs set in mask. */
int trun_mask_count(const unsigned long *mask, unsigned nlongs);

#endif
