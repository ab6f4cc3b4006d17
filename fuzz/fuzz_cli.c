/* libFuzzer target for the command line (launcher/cli.c trun_cli_parse, config/config.c
 * trun_config_from_settings) and the --hostfile parser and per-host command (launcher/hostfile.c).
 * Input: items separated by NUL bytes; the first byte's low 2 bits = how many leading items are environment
 * entries ("PET_NNODES=2"), the rest is argv after "trun". Checks (abort on failure): every refusal has a
 * message; a tiny error buffer is never overrun and stays NUL-terminated; the same input parses the same way
 * twice; the whole input as a hostfile either loads or says "fuzz-hosts:..." and, with a valid command line,
 * every host's remote words are single-quoted. ASan/UBSan/LSan find the rest. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "fuzz_check.h"
#include "hostfile.h"

#define MAXITEMS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 4096) return 0;
  int nenv = data[0] & 3;
  char *copy = malloc(size); /* items: data[1..], NUL-separated, the last one NUL-terminated here */
  CHECK(copy != NULL);
  memcpy(copy, data + 1, size - 1);
  copy[size - 1] = '\0';
  char *items[MAXITEMS];
  int n = 0;
  for (size_t i = 0; i < size - 1 && n < MAXITEMS;) {
    items[n++] = copy + i;
    i += strlen(copy + i) + 1;
  }
  char *envp[4 + 1];
  int ne = 0;
  for (; ne < nenv && ne < n; ne++) envp[ne] = items[ne];
  envp[ne] = NULL;
  char *argv[MAXITEMS + 2];
  int argc = 0;
  argv[argc++] = "trun";
  for (int i = ne; i < n; i++) argv[argc++] = items[i];
  argv[argc] = NULL;

  trun_settings cl, cl2;
  trun_config cfg;
  char err[512], small[8];
  memset(small, 'x', sizeof(small));
  int rc = trun_cli_parse(argc, argv, envp, &cl, err, sizeof(err));
  int rc_small = trun_cli_parse(argc, argv, envp, &cl2, small, 4);
  CHECK(rc == rc_small);
  CHECK(small[4] == 'x' && memchr(small, '\0', 4) != NULL);
  if (rc < 0) {
    CHECK(err[0] != '\0');
  } else {
    CHECK(memcmp(&cl, &cl2, sizeof(cl)) == 0);
    int crc = trun_config_from_settings(&cl, envp, &cfg, err, sizeof(err));
    if (crc < 0) CHECK(err[0] != '\0');
    if (crc == 0) CHECK(trun_config_from_settings(&cl, envp, &cfg, small, 4) == 0);

    /* The input as a hostfile; with a valid command line, every host's command. */
    trun_hostfile hf;
    if (trun_hostfile_parse("fuzz-hosts", (const char *)data, size, &hf, err, sizeof(err)) < 0) {
      CHECK(strncmp(err, "fuzz-hosts:", 11) == 0);
    } else {
      CHECK(hf.n > 0);
      for (size_t i = 0; crc == 0 && i < hf.n && i < 4; i++) {
        char **words;
        const char *rsh = cl.v[TRUN_OPT_RSH].val ? cl.v[TRUN_OPT_RSH].val : TRUN_RSH_DEFAULT;
        if (trun_hostfile_argv(&cl, &cfg, &hf, i, rsh, "/usr/bin/trun", &words, err, sizeof(err)) < 0) {
          CHECK(err[0] != '\0');
          continue;
        }
        /* The rsh command's own words come first (split on blanks like hostfile.c), then the host: a host
         * may be named like one of them ("ssh"), so it is found by position, not by name. */
        int k = 0;
        for (const char *p = rsh; *p;) {
          while (*p && isspace((unsigned char)*p)) p++;
          if (*p == '\0') break;
          k++;
          while (*p && !isspace((unsigned char)*p)) p++;
        }
        CHECK(words[k] != NULL && strcmp(words[k], hf.h[i].host) == 0 && words[k][0] != '-');
        for (k++; words[k]; k++) {
          size_t wl = strlen(words[k]);
          CHECK(wl >= 2 && words[k][0] == '\'' && words[k][wl - 1] == '\'');
        }
        trun_argv_free(words);
      }
      trun_hostfile_free(&hf);
    }
  }
  free(copy);
  return 0;
}
