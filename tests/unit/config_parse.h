/* Shared by the Check tests that build a configuration from a command line (test_config.c,
 * test_worker_env.c, test_restart_policy.c): argv "trun" + args (NULL-terminated) with envp, through the
 * launcher's parser and config/config.c. 0, or -1 with the error in err[512]. */
#ifndef TRUN_TESTS_CONFIG_PARSE_H
#define TRUN_TESTS_CONFIG_PARSE_H

#include "cli.h"
#include "config.h"

static inline int parse(trun_config *cfg, char *err, const char *const *args, char **envp) {
  static char *argv[64]; /* cfg keeps pointers into it */
  int argc = 0;
  argv[argc++] = "trun";
  for (; args[argc - 1]; argc++) argv[argc] = (char *)args[argc - 1];
  argv[argc] = NULL;
  static trun_settings cl; /* cfg keeps pointers into it */
  if (trun_cli_parse(argc, argv, envp, &cl, err, 512) < 0) return -1;
  return trun_config_from_settings(&cl, envp, cfg, err, 512);
}

/* parse() that must succeed (fails the test with the error otherwise). */
#define PARSE_OK(cfg, ...)                                                \
  do {                                                                    \
    static const char *const a_[] = {__VA_ARGS__, NULL};                  \
    char e_[512] = "";                                                    \
    ck_assert_msg(parse(cfg, e_, a_, NULL) == 0, "parse failed: %s", e_); \
  } while (0)

#endif
