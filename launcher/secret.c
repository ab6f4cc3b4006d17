/* Hiding the agent token in the agent's own process image (launcher/secret.h). unsetenv does not change
 * /proc/<pid>/environ: the kernel shows the bytes of the environment block the process started with, and
 * /proc/<pid>/cmdline the argument bytes, which any local user may read. Both are overwritten in place. */
#include "secret.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "agent/rdzv/rdzv.h"
#include "base/base.h"
#include "config/config.h"

/* Re-sets variable name from a heap copy of its value, then masks the original bytes: all of them (whole:
 * the value is the token) or only trun_token= values. 1 when something was masked, 0 when nothing, -1 out
 * of memory. */
static int hide_env(const char *name, int whole) {
  char *orig = getenv(name);
  if (orig == NULL || orig[0] == '\0' || (!whole && strstr(orig, "trun_token") == NULL)) return 0;
  char *copy = strdup(orig);
  if (copy == NULL || setenv(name, copy, 1) != 0) {
    free(copy);
    return -1;
  }
  free(copy);
  if (whole) {
    memset(orig, '*', strlen(orig));
    return 1;
  }
  return trun_config_conf_mask(orig) > 0;
}

char **trun_secret_hide(int argc, char **argv) {
  int found = 0, masked_argv = 0;
  for (int i = 1; i < argc; i++)
    if (strstr(argv[i], "trun_token")) masked_argv = 1;
  char **copy = argv;
  if (masked_argv) {
    copy = calloc((size_t)argc + 1, sizeof(char *));
    for (int i = 0; copy && i < argc; i++)
      if ((copy[i] = strdup(argv[i])) == NULL) copy = NULL; /* out of memory: said below */
    if (copy == NULL) {
      fprintf(stderr, "trun: error: out of memory copying the command line\n");
      return NULL;
    }
    for (int i = 1; i < argc; i++) found |= trun_config_conf_mask(argv[i]) > 0;
  }
  int e1 = hide_env(TRUN_RDZV_TOKEN_ENV, 1), e2 = hide_env("PET_RDZV_CONF", 0);
  if (e1 < 0 || e2 < 0) {
    fprintf(stderr, "trun: error: out of memory copying the environment\n");
    return NULL;
  }
  found |= e1 | e2;
  /* The heap copies stay: /proc/<pid>/mem and ptrace of a dumpable process are open to its uid. Non-dumpable,
   * they need CAP_SYS_PTRACE (root reads everything anyway). execve makes the workers dumpable again. */
  if (found && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
    trun_warn(
        "prctl(PR_SET_DUMPABLE, 0): %s; processes of this user could read the agent token from the "
        "agent's memory",
        strerror(errno));
  return copy;
}
