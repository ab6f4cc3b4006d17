/* Environment vectors ("NAME=value" strings ending in NULL, as execve takes them): the agent and its
 * modules read the environment the launcher handed them, never the process's own, so that a test can give
 * any. */
#ifndef TRUN_BASE_ENV_H
#define TRUN_BASE_ENV_H

/* The value of name in envp (NULL or NULL-terminated), or NULL when envp has no such variable. */
const char *trun_env_get(char *const *envp, const char *name);

#endif
