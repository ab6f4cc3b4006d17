/* libFuzzer target for the YAML config loader (config/yaml_file.c) and what follows it in `trun --config`:
 * the file's values applied to a command line (trun_yaml_apply) and checked by config/config.c.
 * Input: the file's bytes (seeds: tests/fixtures/config). Checks (abort on failure): a refused file has a
 * message "fuzz.yaml:LINE:COLUMN: ..." or "fuzz.yaml: ..."; a file that loads and resolves prints
 * (--print-config) a file that loads again with the same value for every key and the same script and args.
 * ASan/UBSan/LSan find the rest. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "fuzz_check.h"
#include "print.h"
#include "yaml_file.h"

#define NAME "fuzz.yaml"

static int same_str(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

/* A command line "trun --config fuzz.yaml" with the file applied, resolved. 0, or -1 (err set). */
static int resolve(trun_yaml_doc *doc, trun_settings *cl, trun_config *cfg, char *err, size_t errlen) {
  char *argv[] = {"trun", "--config", NAME, NULL};
  char *envp[] = {NULL};
  CHECK(trun_cli_parse(3, argv, envp, cl, err, errlen) == 0);
  trun_yaml_apply(doc, cl);
  if (!cl->script) return -1;
  return trun_config_from_settings(cl, envp, cfg, err, errlen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  trun_yaml_doc doc;
  char err[1024];
  memset(&doc, 0, sizeof(doc));
  err[0] = '\0';
  if (trun_yaml_load_buffer(NAME, (const char *)data, size, &doc, err, sizeof(err)) < 0) {
    CHECK(strncmp(err, NAME ":", sizeof(NAME)) == 0);
    trun_yaml_free(&doc);
    return 0;
  }
  trun_settings cl;
  trun_config cfg;
  if (resolve(&doc, &cl, &cfg, err, sizeof(err)) < 0) {
    CHECK(cl.script == NULL || err[0] != '\0');
    trun_yaml_free(&doc);
    return 0;
  }
  /* --print-config's output is a config file that gives the same settings. */
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  CHECK(m != NULL);
  trun_print_config(m, &cl, 0);
  CHECK(fclose(m) == 0);
  trun_yaml_doc doc2;
  memset(&doc2, 0, sizeof(doc2));
  if (trun_yaml_load_buffer(NAME, text, len, &doc2, err, sizeof(err)) < 0) {
    fprintf(stderr, "fuzz_yaml: the printed config does not load: %s\n%s\n", err, text);
    abort();
  }
  trun_settings cl2;
  trun_config cfg2;
  if (resolve(&doc2, &cl2, &cfg2, err, sizeof(err)) < 0) {
    fprintf(stderr, "fuzz_yaml: the printed config does not resolve: %s\n%s\n", err, text);
    abort();
  }
  for (int id = 0; id < TRUN_OPT__COUNT; id++) {
    if (!trun_yaml_key((trun_opt_id)id)) continue;
    if (!same_str(cl.v[id].val, cl2.v[id].val)) {
      fprintf(stderr, "fuzz_yaml: option %s: '%s' printed, read back as '%s'\n%s\n",
              trun_opt_desc_of((trun_opt_id)id)->name, cl.v[id].val ? cl.v[id].val : "(null)",
              cl2.v[id].val ? cl2.v[id].val : "(null)", text);
      abort();
    }
  }
  CHECK(same_str(cl.script, cl2.script));
  CHECK(cl.nscript_args == cl2.nscript_args);
  for (int i = 0; i < cl.nscript_args; i++) CHECK(same_str(cl.script_args[i], cl2.script_args[i]));
  free(text);
  trun_yaml_free(&doc2);
  trun_yaml_free(&doc);
  return 0;
}
