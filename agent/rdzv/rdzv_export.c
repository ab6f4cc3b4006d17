/* trun --list-excluded slurm|json (agent/rdzv/rdzv.h): the job's exclusion list as its rendezvous store
 * holds it now, for a scheduler: a Slurm --exclude host list, or JSON for the others. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_int.h"

/* The Slurm list: each host name once, comma-separated (what sbatch/srun --exclude takes). A record of one
 * agent (cut off) keeps out that agent, not its host: a new agent there is welcome, so it is not listed. */
static void print_slurm(const trun_rdzv_exclusion *v, int n, FILE *out) {
  int first = 1;
  for (int i = 0; i < n; i++) {
    if (v[i].id.agent[0]) continue;
    const char *h = v[i].id.hostname[0] ? v[i].id.hostname : v[i].id.host;
    int seen = 0;
    for (int k = 0; k < i && !seen; k++)
      seen = !v[k].id.agent[0] && strcmp(h, v[k].id.hostname[0] ? v[k].id.hostname : v[k].id.host) == 0;
    if (seen) continue;
    fprintf(out, "%s%s", first ? "" : ",", h);
    first = 0;
  }
  fputc('\n', out);
}

static int print_json(const trun_config *cfg, const trun_rdzv_exclusion *v, int n, FILE *out) {
  double now = trun_wall_s();
  json_t *list = json_array();
  for (int i = 0; list && i < n; i++) {
    json_t *gpus = json_array();
    const char *p = v[i].id.gpus;
    while (gpus && *p) {
      size_t m = strcspn(p, ",");
      json_array_append_new(gpus, json_stringn(p, m));
      p += m + (p[m] == ',');
    }
    json_array_append_new(
        list, json_pack("{s:s,s:s,s:s,s:o,s:s,s:s,s:s,s:f,s:f,s:f}", "host", v[i].id.host, "hostname",
                        v[i].id.hostname, "instance", v[i].id.instance, "gpus", gpus ? gpus : json_null(),
                        "agent", v[i].id.agent, "kind", v[i].kind, "cause", v[i].cause, "at", v[i].at,
                        "until", v[i].until, "seconds_left", v[i].until - now));
  }
  json_t *j = list ? json_pack("{s:s,s:o}", "run_id", cfg->run_id, "excluded", list) : NULL;
  char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
  json_decref(j);
  if (s == NULL) return -ENOMEM;
  fprintf(out, "%s\n", s);
  free(s);
  return 0;
}

int trun_rdzv_excluded_print(const trun_config *cfg, const char *format, FILE *out) {
  if (strcmp(format, "slurm") != 0 && strcmp(format, "json") != 0) {
    fprintf(stderr, "trun: error: --list-excluded takes slurm or json, not '%s'\n", format);
    return 2;
  }
  if (cfg->standalone || cfg->endpoint_port <= 0) {
    fprintf(
        stderr,
        "trun: error: --list-excluded reads the job's rendezvous store: give its --rdzv-endpoint HOST:PORT "
        "and --rdzv-id (or PET_RDZV_ENDPOINT, PET_RDZV_ID)\n");
    return 2;
  }
  trun_client_opts o;
  trun__rdzv_outside_opts(cfg, 10000, &o);
  trun_client *c = NULL;
  int rc = trun_client_connect(&o, &c);
  trun_rdzv_exclusion *v = NULL;
  int n = 0;
  if (rc == 0) rc = trun_rdzv_excluded_now(c, cfg->run_id, trun_rdzv_exclude_seconds(cfg), &v, &n);
  if (c) trun_client_close(c);
  if (rc < 0) {
    fprintf(stderr,
            "trun: error: --list-excluded: cannot read job '%s''s exclusion list from the rendezvous store "
            "%s:%d: %s; is the job's store up there (and, for a torch 1.13 store, --rdzv-conf "
            "torch_version=1.13)?\n",
            cfg->run_id, cfg->endpoint_host, cfg->endpoint_port, strerror(-rc));
    return 1;
  }
  if (strcmp(format, "slurm") == 0)
    print_slurm(v, n, out);
  else
    rc = print_json(cfg, v, n, out);
  free(v);
  return rc < 0 ? 1 : 0;
}
