/* --rdzv-conf (agent/rdzv/rdzv_int.h): torch's "key=value,key=value" rendezvous options as the backends read
 * them (config/rdzv_conf.c reads a key and checks the values), and the agent token's check. */
#include <stdlib.h>

#include "rdzv_int.h"

double trun__rdzv_conf_seconds(const trun_config *cfg, const char *key, double def) {
  char v[64];
  if (!cfg->rdzv_conf || !trun_config_conf_get(cfg->rdzv_conf, key, v, sizeof(v))) return def;
  char *end;
  double d = strtod(v, &end);
  return (*v && *end == '\0' && d > 0) ? d : def;
}

/* A key trun's backends do not read: said, as torchrun ignores it too. */
static void warn_unknown(void *arg, const char *key) {
  (void)arg;
  trun_warn("--rdzv-conf: key '%s' is not used by trun's c10d backend (ignored)", key);
}

int trun_rdzv_conf_check(const trun_config *cfg, char *err, size_t errlen) {
  char token[TRUN_STORE_TOKEN_MAX + 1];
  if (trun_rdzv_token(cfg, token, sizeof(token), err, errlen) < 0) return -1;
  /* The values were checked with the configuration (exit 2 there); here the unknown keys are said. */
  return trun_config_rdzv_conf_check(cfg->rdzv_conf, warn_unknown, NULL, err, errlen);
}
