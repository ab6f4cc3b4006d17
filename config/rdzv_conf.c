/* --rdzv-conf (config.h): torch's "key=value,key=value" rendezvous options: reading a key, and the check of
 * every value trun reads (bad input exits 2 before anything starts). What each key does is the rendezvous's
 * (agent/rdzv); the forms of their values are checked here, with the rest of the configuration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"

int trun_config_conf_get(const char *conf, const char *key, char *out, size_t len) {
  size_t klen = strlen(key);
  for (const char *p = conf; p && *p;) {
    while (*p == ' ' || *p == ',') p++;
    const char *end = strchr(p, ',');
    if (end == NULL) end = p + strlen(p);
    const char *eq = memchr(p, '=', (size_t)(end - p));
    if (eq) {
      const char *ke = eq;
      while (ke > p && ke[-1] == ' ') ke--;
      if ((size_t)(ke - p) == klen && strncmp(p, key, klen) == 0) {
        const char *v = eq + 1;
        while (v < end && *v == ' ') v++;
        size_t n = (size_t)(end - v);
        while (n && v[n - 1] == ' ') n--;
        if (n >= len) n = len - 1;
        memcpy(out, v, n);
        out[n] = '\0';
        return 1;
      }
    }
    p = end;
  }
  return 0;
}

int trun_config_conf_mask(char *s) {
  static const char key[] = "trun_token";
  int n = 0;
  for (char *p = s ? strstr(s, key) : NULL; p; p = strstr(p, key)) {
    p += sizeof(key) - 1;
    while (*p == ' ') p++;
    if (*p != '=') continue;
    for (p++; *p && *p != ','; p++)
      if (*p != ' ') *p = '*';
    n++;
  }
  return n;
}

int trun_config_conf_bool(const char *conf, const char *key) {
  char v[32];
  if (!conf || !trun_config_conf_get(conf, key, v, sizeof(v))) return -1;
  static const char *const yes[] = {"1", "true", "t", "yes", "y"}, *const no[] = {"0", "false", "f", "no",
                                                                                  "n"};
  for (int i = 0; i < 5; i++) {
    if (strcasecmp(v, yes[i]) == 0) return 1;
    if (strcasecmp(v, no[i]) == 0) return 0;
  }
  return -2;
}

static const char *const int_keys[] = {
    "join_timeout",         "last_call_timeout",      "close_timeout", "heartbeat_timeout",
    "keep_alive_interval",  "keep_alive_max_attempt", "read_timeout",  "timeout",
    "trun_heartbeat_misses"};

int trun_config_rdzv_conf_check(const char *conf, void (*unknown)(void *arg, const char *key), void *arg,
                                char *err, size_t errlen) {
  if (conf == NULL || *conf == '\0') return 0;
  for (const char *p = conf; *p;) {
    while (*p == ' ' || *p == ',') p++;
    if (*p == '\0') break;
    const char *end = strchr(p, ',');
    if (end == NULL) end = p + strlen(p);
    const char *eq = memchr(p, '=', (size_t)(end - p));
    if (eq == NULL || eq == p) {
      snprintf(err, errlen, "--rdzv-conf '%s': '%.*s' is not key=value", conf, (int)(end - p), p);
      return -1;
    }
    char k[64], v[128];
    snprintf(k, sizeof(k), "%.*s", (int)(eq - p), p);
    for (size_t n = strlen(k); n && k[n - 1] == ' '; n--) k[n - 1] = '\0';
    trun_config_conf_get(conf, k, v, sizeof(v));
    int known = 0;
    for (size_t i = 0; i < sizeof(int_keys) / sizeof(int_keys[0]); i++)
      if (strcmp(k, int_keys[i]) == 0) {
        known = 1;
        char *e;
        long x = strtol(v, &e, 10);
        if (*v == '\0' || *e != '\0' || x <= 0) {
          snprintf(err, errlen, "--rdzv-conf %s=%s: must be a positive whole number of %s", k, v,
                   strcmp(k, "keep_alive_max_attempt") == 0  ? "attempts"
                   : strcmp(k, "trun_heartbeat_misses") == 0 ? "heartbeats"
                                                             : "seconds");
          return -1;
        }
      }
    if (strcmp(k, "trun_heartbeat_interval") == 0) {
      known = 1;
      char *e;
      double x = strtod(v, &e);
      if (*v == '\0' || *e != '\0' || !(x >= 0.05 && x <= 3600)) {
        snprintf(err, errlen, "--rdzv-conf trun_heartbeat_interval=%s: give seconds between 0.05 and 3600",
                 v);
        return -1;
      }
    } else if (strcmp(k, "trun_token") == 0) {
      known = 1; /* checked with the agent token (agent/rdzv: trun_rdzv_token) */
    } else if (strcmp(k, "trun_exclude_seconds") == 0 || strcmp(k, "trun_exclude_failures") == 0 ||
               strcmp(k, "trun_wait_health_interval") == 0) {
      known = 1; /* 0 turns it off */
      char *e;
      long x = strtol(v, &e, 10);
      if (*v == '\0' || *e != '\0' || x < 0 || x > 100000000L) {
        snprintf(err, errlen, "--rdzv-conf %s=%s: give a whole number of %s, 0 for none", k, v,
                 strcmp(k, "trun_exclude_failures") == 0 ? "failed rounds in a row" : "seconds");
        return -1;
      }
    } else if (strcmp(k, "is_host") == 0) {
      known = 1;
      if (trun_config_conf_bool(conf, "is_host") == -2) {
        snprintf(err, errlen, "--rdzv-conf is_host=%s: use true or false (1/0, yes/no)", v);
        return -1;
      }
    } else if (strcmp(k, "store_type") == 0) {
      known = 1;
      if (strcasecmp(v, "tcp") != 0) {
        snprintf(err, errlen, "--rdzv-conf store_type=%s: trun supports the tcp store only", v);
        return -1;
      }
    } else if (strcmp(k, "torch_version") == 0) {
      known = 1;
      if (strcmp(v, "1.13") != 0 && strncmp(v, "2.", 2) != 0) {
        snprintf(err, errlen,
                 "--rdzv-conf torch_version=%s: give the torchrun agents' torch version (1.13 or 2.x) "
                 "or leave it out",
                 v);
        return -1;
      }
    }
    if (!known && unknown) unknown(arg, k);
    p = end;
  }
  return 0;
}
