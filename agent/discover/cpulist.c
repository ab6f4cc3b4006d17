#include "cpulist.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void trun_mask_to_cpulist(const unsigned long *mask, unsigned nlongs, char *out, size_t outlen) {
  const unsigned bits = 8 * (unsigned)sizeof(unsigned long);
  const unsigned ncpu = nlongs * bits;
  size_t len = 0;
  out[0] = '\0';
  for (unsigned i = 0; i < ncpu;) {
    if (!(mask[i / bits] >> (i % bits) & 1UL)) {
      i++;
      continue;
    }
    unsigned j = i;
    while (j + 1 < ncpu && (mask[(j + 1) / bits] >> ((j + 1) % bits) & 1UL)) j++;
    char piece[32];
    int k = j == i ? snprintf(piece, sizeof(piece), "%s%u", len ? "," : "", i)
                   : snprintf(piece, sizeof(piece), "%s%u-%u", len ? "," : "", i, j);
    if (k < 0 || len + (size_t)k >= outlen) break;
    memcpy(out + len, piece, (size_t)k + 1);
    len += (size_t)k;
    i = j + 1;
  }
}

static int parse_cpu(const char **p, unsigned long *v) {
  while (**p == ' ') (*p)++;
  if (!isdigit((unsigned char)**p)) return -1;
  char *end;
  *v = strtoul(*p, &end, 10);
  *p = end;
  while (**p == ' ') (*p)++;
  return 0;
}

int trun_cpulist_to_mask(const char *s, unsigned long *mask, unsigned nlongs) {
  const unsigned long bits = 8 * sizeof(unsigned long), ncpu = nlongs * bits;
  memset(mask, 0, nlongs * sizeof(unsigned long));
  const char *p = s;
  while (*p == ' ') p++;
  if (*p == '\0' || *p == '\n') return 0;
  for (;;) {
    unsigned long a, b;
    if (parse_cpu(&p, &a) < 0) return -1;
    b = a;
    if (*p == '-') {
      p++;
      if (parse_cpu(&p, &b) < 0 || b < a) return -1;
    }
    if (b >= ncpu) return -1;
    for (unsigned long i = a; i <= b; i++) mask[i / bits] |= 1UL << (i % bits);
    if (*p == ',') {
      p++;
      continue;
    }
    if (*p == '\n') p++;
    return *p == '\0' ? 0 : -1;
  }
}

int trun_mask_count(const unsigned long *mask, unsigned nlongs) {
  int n = 0;
  for (unsigned i = 0; i < nlongs; i++) n += __builtin_popcountl(mask[i]);
  return n;
}
