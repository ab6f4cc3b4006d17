/* The job's agent token (agent/rdzv/rdzv.h; docs/store.md, "The agents' key space"): what trun agents
 * present on their connections to the rendezvous store, so that the store an agent hosts lets only them
 * write the job's key space. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_int.h"

/* FNV-1a 64 from basis h over p[0..n). Not a secret's protection: the derived token only keeps out clients
 * that do not mean to write the agents' keys (see docs/store.md). */
static uint64_t fnv(uint64_t h, const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= (uint8_t)p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

int trun_rdzv_token(const trun_config *cfg, char *out, size_t len, char *err, size_t errlen) {
  char v[128] = "";
  const char *src = NULL;
  const char *env = getenv(TRUN_RDZV_TOKEN_ENV);
  if (env && env[0]) {
    snprintf(v, sizeof(v), "%s", env);
    src = TRUN_RDZV_TOKEN_ENV;
    if (strlen(env) >= sizeof(v)) v[0] = '\0'; /* too long: reported below */
  } else if (cfg->rdzv_conf && trun_config_conf_get(cfg->rdzv_conf, "trun_token", v, sizeof(v))) {
    src = "--rdzv-conf trun_token";
  }
  if (src) {
    size_t n = strlen(v);
    int printable = n > 0;
    for (size_t i = 0; i < n; i++) printable &= v[i] > 0x20 && v[i] < 0x7f;
    if (n > 0 && strspn(v, "*") == n) {
      snprintf(
          err, errlen,
          "%s is masked ('*' only, as --print-config and --dry-run print it): give the job's agent token "
          "itself, the same on every node",
          src);
      return -1;
    }
    if (n < TRUN_STORE_TOKEN_MIN || n > TRUN_STORE_TOKEN_MAX || !printable) {
      snprintf(err, errlen,
               "%s: the agent token must be %d to %d printable characters without spaces (e.g. the output "
               "of 'openssl rand -hex 32'), the same on every node",
               src, TRUN_STORE_TOKEN_MIN, TRUN_STORE_TOKEN_MAX);
      return -1;
    }
    snprintf(out, len, "%s", v);
    return 1;
  }
  static const char domain[] = "trun agent token v1\n";
  char what[160];
  int wn = snprintf(what, sizeof(what), "%s\n%d\n", cfg->run_id, (int)cfg->backend);
  uint64_t a = fnv(fnv(0xcbf29ce484222325ull, domain, sizeof(domain) - 1), what, (size_t)wn);
  uint64_t b = fnv(fnv(0x84222325cbf29ce4ull, what, (size_t)wn), domain, sizeof(domain) - 1);
  snprintf(out, len, "derived-%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
  return 0;
}

int trun_rdzv_token_public(const trun_rdzv *r) {
  return r->host != NULL && !r->token_explicit && r->cfg != NULL && r->cfg->max_nodes > 1;
}

int trun__rdzv_guard_server(trun_server *s, void *arg) {
  const trun_rdzv *r = arg;
  char root[300];
  int rc = trun_server_agent_token(s, r->token);
  snprintf(root, sizeof(root), "/trun/%s", r->cfg->run_id);
  if (rc == 0) rc = trun_server_protect(s, root, NULL);
  snprintf(root, sizeof(root), "/torch.rendezvous.%s.", r->cfg->run_id);
  if (rc == 0) rc = trun_server_protect(s, root, "/trun");
  if (rc == 0) rc = trun_server_address_keys(s, "/addr/"); /* trun__rdzv_addr_key: what a node publishes */
  if (rc < 0) {
    trun_error("cannot guard the job's key space on the rendezvous store: %s", strerror(-rc));
    return rc;
  }
  trun_debug(
      "the rendezvous store lets only agents with the %s token write /trun/%s/ and the trun keys of "
      "/torch.rendezvous.%s.<round>/",
      r->token_explicit ? "job's" : "derived", r->cfg->run_id, r->cfg->run_id);
  return 0;
}
