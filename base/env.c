/* Environment vectors (env.h). */
#include "env.h"

#include <string.h>

const char *trun_env_get(char *const *envp, const char *name) {
  size_t n = strlen(name);
  for (char *const *e = envp; e && *e; e++)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  return NULL;
}
