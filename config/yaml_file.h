/* trun's YAML config file (`trun --config job.yaml`): every command-line option as a key, plus `script` and
 * `args`. The keys and their kinds (flag or value) come from the settings table (config/options.h);
 * the values are checked by the same code as command-line values (config/config.c). The reference for
 * every key is config/README.md. */
#ifndef TRUN_YAML_FILE_H
#define TRUN_YAML_FILE_H

#include <stddef.h>

#include "options.h"

#define TRUN_YAML_MAX_BYTES (10 * 1024 * 1024) /* larger files are refused */

typedef struct {
  char *path;
  char *val[TRUN_OPT__COUNT]; /* the value text ("1" / NULL for flags); NULL for null = the default */
  int set[TRUN_OPT__COUNT];   /* the key is in the file */
  int line[TRUN_OPT__COUNT];  /* 1-based position of the value */
  int col[TRUN_OPT__COUNT];
  char *script; /* NULL when the file has none */
  int script_line, script_col;
  char **args; /* NULL-terminated, nargs items (NULL when the file has no args) */
  int nargs;
  int args_line; /* 0 when the file has no args */
} trun_yaml_doc;

/* Reads and checks path. Returns 0, or -1 with "path:line:column: message" in err (the caller exits 2).
 * An empty file, or one with only comments, is valid: it sets nothing. */
int trun_yaml_load(const char *path, trun_yaml_doc *doc, char *err, size_t errlen);
/* The same from memory; name is used in the messages. */
int trun_yaml_load_buffer(const char *name, const char *buf, size_t len, trun_yaml_doc *doc, char *err,
                          size_t errlen);
/* Gives the file's values to every option of cl that is at its default or only detected (the command line and
 * the environment win), and its script and args when the command line has no script. cl keeps pointers into
 * doc: free doc after cl. */
void trun_yaml_apply(const trun_yaml_doc *doc, trun_settings *cl);
void trun_yaml_free(trun_yaml_doc *doc);

/* The key spelling of an option id ("nproc-per-node"), or NULL for ids a file cannot set. */
const char *trun_yaml_key(trun_opt_id id);

#endif
