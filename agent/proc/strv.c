/* NULL-terminated, malloc'ed string vectors: the environments and argument lists handed to spawned
 * processes (agent/proc/strv.h). */
#include "strv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t strv_len(char *const *v) {
  size_t n = 0;
  while (v && v[n]) n++;
  return n;
}

void trun_strv_free(char **v) {
  for (size_t i = 0; v && v[i]; i++) free(v[i]);
  free(v);
}

int trun_strv_setenv(char ***v, const char *name, const char *value) {
  char *entry;
  if (asprintf(&entry, "%s=%s", name, value) < 0) return -ENOMEM;
  size_t n = strlen(name), len = strv_len(*v);
  for (size_t i = 0; i < len; i++)
    if (strncmp((*v)[i], name, n) == 0 && (*v)[i][n] == '=') {
      free((*v)[i]);
      (*v)[i] = entry;
      return 0;
    }
  char **nv = realloc(*v, (len + 2) * sizeof(char *));
  if (nv == NULL) {
    free(entry);
    return -ENOMEM;
  }
  nv[len] = entry;
  nv[len + 1] = NULL;
  *v = nv;
  return 0;
}

void trun_strv_unsetenv(char **v, const char *name) {
  size_t n = strlen(name), j = 0;
  for (size_t i = 0; v && v[i]; i++) {
    if (strncmp(v[i], name, n) == 0 && v[i][n] == '=')
      free(v[i]);
    else
      v[j++] = v[i];
  }
  if (v) v[j] = NULL;
}

char **trun_strv_dup(char *const *src) {
  size_t n = strv_len(src);
  char **v = calloc(n + 1, sizeof(char *));
  if (v == NULL) return NULL;
  for (size_t i = 0; i < n; i++)
    if ((v[i] = strdup(src[i])) == NULL) {
      trun_strv_free(v);
      return NULL;
    }
  return v;
}
