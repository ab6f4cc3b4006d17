/* NULL-terminated, malloc'ed string vectors: an environment ("NAME=value" items) or an argument list, as
 * handed to trun_spawn. */
#ifndef TRUN_STRV_H
#define TRUN_STRV_H

void trun_strv_free(char **v);
/* A deep copy of src (NULL: an empty vector), or NULL when out of memory. */
char **trun_strv_dup(char *const *src);
/* Sets NAME=value in *v (replacing an earlier NAME). 0 or -ENOMEM. */
int trun_strv_setenv(char ***v, const char *name, const char *value);
/* Removes every NAME=... from v. */
void trun_strv_unsetenv(char **v, const char *name);

#endif
