/* The job's exclusion list (agent/rdzv/rdzv.h): nodes judged bad stay out of the job, named, for a time.
 *
 * One list per job in the rendezvous store: /trun/<run_id>/excluded/n counts the records (ADD) and
 * /trun/<run_id>/excluded/<i> (i = 1..n) holds each, JSON: host (how the other nodes know the node:
 * --local-addr, else its FQDN), hostname (its host name: Slurm's node name), instance (its instance id, ""
 * unknown), gpus (its GPU UUIDs), kind ("health", "preflight", "xid", "failures", "cut_off"), cause, at and
 * until (wall-clock seconds), and in a record of one agent (cut_off) agent: its rendezvous id "addr pid
 * local_id tag" (a record without it names the node, as every record did before it existed). A record is
 * never changed: an exclusion ends when its time is up. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdzv_int.h"

#define EXCLUDE_DEFAULT_S 1800.0
#define FAILURES_DEFAULT 3

double trun_rdzv_exclude_seconds(const trun_config *cfg) {
  char v[64];
  if (!trun_config_conf_get(cfg->rdzv_conf, "trun_exclude_seconds", v, sizeof(v))) return EXCLUDE_DEFAULT_S;
  return strtod(v, NULL);
}

double trun_rdzv_wait_health_interval(const trun_config *cfg) {
  char v[64];
  if (!trun_config_conf_get(cfg->rdzv_conf, "trun_wait_health_interval", v, sizeof(v))) return 60.0;
  return strtod(v, NULL);
}

int trun_rdzv_exclude_failures(const trun_config *cfg) {
  char v[64];
  if (!trun_config_conf_get(cfg->rdzv_conf, "trun_exclude_failures", v, sizeof(v))) return FAILURES_DEFAULT;
  return atoi(v);
}

/* " (agent pid P)" for a record of one agent (its pid: the second word of its id), else "". */
static void agent_part(const trun_rdzv_node_id *id, char *out, size_t len) {
  long long pid = 0;
  out[0] = '\0';
  if (id->agent[0] == '\0') return;
  if (sscanf(id->agent, "%*s %lld", &pid) == 1 && pid > 0)
    snprintf(out, len, " (agent pid %lld)", pid);
  else
    snprintf(out, len, " (one agent)");
}

void trun_rdzv_node_name(const trun_rdzv_node_id *id, char *out, size_t len) {
  char agent[48];
  agent_part(id, agent, sizeof(agent));
  if (id->hostname[0] && strcmp(id->hostname, id->host) != 0)
    snprintf(out, len, "%s (%s%s%s", id->host, id->hostname, agent[0] ? ", " : ")",
             agent[0] ? agent + 2 : "");
  else
    snprintf(out, len, "%s%s", id->host, agent);
}

void trun_rdzv_node_identity(const char *host, const trun_node *node, trun_rdzv_node_id *id) {
  memset(id, 0, sizeof(*id));
  snprintf(id->host, sizeof(id->host), "%s", host ? host : "");
  if (gethostname(id->hostname, sizeof(id->hostname) - 1) < 0) id->hostname[0] = '\0';
  char *dot = strchr(id->hostname, '.');
  if (dot) *dot = '\0'; /* Slurm names nodes by their short name */
  if (node == NULL) return;
  snprintf(id->instance, sizeof(id->instance), "%s", node->instance.instance_id);
  size_t at = 0;
  for (int i = 0; i < node->ngpu && at + 2 < sizeof(id->gpus); i++) {
    int w = snprintf(id->gpus + at, sizeof(id->gpus) - at, "%s%s", i ? "," : "", node->gpus[i].uuid);
    if (w < 0 || (size_t)w >= sizeof(id->gpus) - at) {
      id->gpus[at] = '\0'; /* a GPU list that does not fit is cut at a whole UUID */
      break;
    }
    at += (size_t)w;
  }
}

/* 1 when the comma-separated lists a and b share an item. */
static int share_item(const char *a, const char *b) {
  const char *p = a;
  while (*p) {
    size_t n = strcspn(p, ",");
    const char *q = b;
    while (*q) {
      size_t m = strcspn(q, ",");
      if (m == n && memcmp(p, q, n) == 0) return 1;
      q += m + (q[m] == ',');
    }
    p += n + (p[n] == ',');
  }
  return 0;
}

int trun_rdzv_exclusion_matches(const trun_rdzv_exclusion *e, const trun_rdzv_node_id *id) {
  if (e->id.host[0] == '\0' || strcmp(e->id.host, id->host) != 0) return 0;
  /* The same name on other hardware (a replaced instance, other GPUs) is another node. */
  if (e->id.instance[0] && id->instance[0] && strcmp(e->id.instance, id->instance) != 0) return 0;
  if (e->id.gpus[0] && id->gpus[0] && !share_item(e->id.gpus, id->gpus)) return 0;
  /* A record of one agent names that one: another agent of the same address is not it. */
  if (e->id.agent[0] && strcmp(e->id.agent, id->agent) != 0) return 0;
  return 1;
}

static void list_key(const char *run_id, const char *what, char *out, size_t len) {
  snprintf(out, len, "/trun/%s/excluded/%s", run_id, what);
}

int trun_rdzv_exclude(trun_client *c, const trun_config *cfg, const trun_rdzv_node_id *id, const char *kind,
                      const char *cause) {
  double secs = trun_rdzv_exclude_seconds(cfg);
  if (secs <= 0 || c == NULL) return 0; /* trun_exclude_seconds=0: no exclusions */
  double at = trun_wall_s();
  json_t *j =
      json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:f,s:f}", "host", id->host, "hostname", id->hostname, "instance",
                id->instance, "gpus", id->gpus, "kind", kind, "cause", cause, "at", at, "until", at + secs);
  if (j && id->agent[0] && json_object_set_new(j, "agent", json_string(id->agent)) < 0) {
    json_decref(j);
    j = NULL;
  }
  char *rec = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (rec == NULL) return -ENOMEM;
  char k[400];
  int64_t i = 0;
  list_key(cfg->run_id, "n", k, sizeof(k));
  int rc = trun_client_add(c, trun_str(k), 1, &i);
  if (rc == 0) {
    char idx[24];
    snprintf(idx, sizeof(idx), "%lld", (long long)i);
    list_key(cfg->run_id, idx, k, sizeof(k));
    rc = trun_client_set(c, trun_str(k), trun_str(rec));
  }
  free(rec);
  char agent[48];
  agent_part(id, agent, sizeof(agent));
  if (rc == 0)
    trun_warn("node %s%s is excluded from job '%s' for %.0f s: %s: %s", id->host, agent, cfg->run_id, secs,
              kind, cause);
  return rc;
}

/* Copies string member key of o into out, escaped (trun__rdzv_escape): the record's words reach terminals
 * (node 0's stderr, an agent's exit line) and must not drive them. */
static void copy_str(json_t *o, const char *key, char *out, size_t len) {
  trun__rdzv_escape(json_string_value(json_object_get(o, key)), out, len);
}

void trun__rdzv_escape(const char *s, char *out, size_t len) {
  size_t at = 0;
  for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c && at + 5 < len; c++) {
    if (*c >= 0x20 && *c != 0x7f)
      out[at++] = (char)*c;
    else if (*c == '\n' || *c == '\t')
      at += (size_t)snprintf(out + at, len - at, "\\%c", *c == '\n' ? 'n' : 't');
    else
      at += (size_t)snprintf(out + at, len - at, "\\x%02x", *c);
  }
  if (len) out[at] = '\0';
}

int trun__rdzv_name_ok(const char *s, const char *extra, int empty_ok) {
  if (s[0] == '\0') return empty_ok;
  if (s[0] == '-') return 0;
  for (const char *c = s; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          strchr(extra, *c)))
      return 0;
  return 1;
}

/* One record's JSON into e, checked: 0, or -1 when it is not one trun writes (names or an agent id with
 * other characters than a host's (blanks between an id's words), an agent id too long to keep whole, its time
 * not a number or more than TRUN_RDZV_EXCL_SKEW_S ahead of this clock). The exclusion lasts at most cap_s
 * (the job's trun_exclude_seconds) from when it was made, whatever its until says; its words are escaped
 * (copy_str). */
static int parse_record(const trun_buf *b, double cap_s, double now, trun_rdzv_exclusion *e) {
  json_t *o = json_loadb((const char *)b->data, b->len, 0, NULL);
  json_t *host = json_object_get(o, "host"), *hostname = json_object_get(o, "hostname");
  json_t *inst = json_object_get(o, "instance"), *gpus = json_object_get(o, "gpus");
  json_t *agent = json_object_get(o, "agent");
  int ok = json_is_object(o) && json_is_number(json_object_get(o, "until")) &&
           json_is_number(json_object_get(o, "at")) && json_is_string(host) &&
           (hostname == NULL || json_is_string(hostname)) && (inst == NULL || json_is_string(inst)) &&
           (gpus == NULL || json_is_string(gpus)) && (agent == NULL || json_is_string(agent));
  /* host: a name or address (IPv6 with ':', '[', ']' and a zone after '%'); hostname: a host name. */
  ok = ok && strlen(json_string_value(host)) < sizeof(e->id.host) &&
       trun__rdzv_name_ok(json_string_value(host), ".-_:[]%", 0);
  ok = ok && (hostname == NULL || (strlen(json_string_value(hostname)) < sizeof(e->id.hostname) &&
                                   trun__rdzv_name_ok(json_string_value(hostname), ".-_", 1)));
  ok = ok && (inst == NULL || trun__rdzv_name_ok(json_string_value(inst), ".-_:", 1));
  ok = ok && (gpus == NULL || trun__rdzv_name_ok(json_string_value(gpus), ".-_:,", 1));
  /* agent: "addr pid local_id tag", the address's characters and blanks; kept whole or the record is
   * ignored, named in the warning below (an id cut to fit would silently name no agent). */
  ok = ok && (agent == NULL || (json_string_length(agent) + 5 < sizeof(e->id.agent) &&
                                trun__rdzv_name_ok(json_string_value(agent), ".-_:[]% ", 1)));
  double at = ok ? json_number_value(json_object_get(o, "at")) : 0;
  double until = ok ? json_number_value(json_object_get(o, "until")) : 0;
  ok = ok && at == at && until == until && at <= now + TRUN_RDZV_EXCL_SKEW_S; /* not NaN, not ahead */
  if (!ok) {
    json_decref(o);
    return -1;
  }
  copy_str(o, "host", e->id.host, sizeof(e->id.host));
  copy_str(o, "hostname", e->id.hostname, sizeof(e->id.hostname));
  copy_str(o, "instance", e->id.instance, sizeof(e->id.instance));
  copy_str(o, "gpus", e->id.gpus, sizeof(e->id.gpus));
  copy_str(o, "agent", e->id.agent, sizeof(e->id.agent));
  copy_str(o, "kind", e->kind, sizeof(e->kind));
  copy_str(o, "cause", e->cause, sizeof(e->cause));
  e->at = at;
  e->until = until > at + cap_s ? at + (cap_s > 0 ? cap_s : 0) : until;
  json_decref(o);
  return 0;
}

int trun_rdzv_exclusions(trun_client *c, const char *run_id, double cap_s, int from,
                         trun_rdzv_exclusion **out, int *n) {
  *out = NULL;
  *n = 0;
  char k[400];
  int64_t count = 0;
  list_key(run_id, "n", k, sizeof(k));
  int rc = trun__rdzv_get_count(c, k, &count); /* a read: --list-excluded and --rdzv-status hold no token */
  if (rc < 0) return rc;
  if (count <= from) return 0;
  if (count - from > TRUN_RDZV_MAX_EXCLUSIONS) count = from + TRUN_RDZV_MAX_EXCLUSIONS;
  trun_rdzv_exclusion *v = calloc((size_t)(count - from), sizeof(*v));
  if (v == NULL) return -ENOMEM;
  int got = 0, read = 0;
  for (int64_t i = from + 1; i <= count; i++, read++) {
    char idx[24];
    snprintf(idx, sizeof(idx), "%lld", (long long)i);
    list_key(run_id, idx, k, sizeof(k));
    trun_buf b = {0};
    rc = trun_client_get(c, trun_str(k), &b, 2000); /* written right after the count */
    if (rc == -ETIMEDOUT) {
      trun_buf_free(&b);
      break; /* the next read gets it */
    }
    if (rc < 0) {
      trun_buf_free(&b);
      free(v);
      return rc;
    }
    v[got].index = (int)i;
    if (parse_record(&b, cap_s, trun_wall_s(), &v[got]) == 0)
      got++;
    else
      trun_warn(
          "the exclusion record %s is not one trun writes (a host name or agent id of other characters "
          "than a host's, or a time ahead of this clock); it is ignored",
          k);
    trun_buf_free(&b);
  }
  *out = v;
  *n = got;
  return read;
}

/* ---- the agent's view, each round ---- */

int trun__rdzv_exclusion_round(trun_rdzv *r, char *err, size_t errlen) {
  r->n_excl_news = 0;
  if (r->client == NULL || trun_rdzv_exclude_seconds(r->cfg) <= 0) return 0;
  trun_rdzv_exclusion *fresh = NULL;
  int nf = 0;
  int rc = trun_rdzv_exclusions(r->client, r->cfg->run_id, trun_rdzv_exclude_seconds(r->cfg), r->excl_read,
                                &fresh, &nf);
  if (rc < 0) {
    trun_debug("could not read the job's exclusion list: %s", strerror(-rc));
    return 0; /* the rendezvous itself says what is wrong with the store */
  }
  r->excl_read += rc;
  for (int i = 0; i < r->n_excl; i++) r->excl[i].news = 0;
  if (nf > 0) {
    trun_rdzv_exclusion *all = realloc(r->excl, (size_t)(r->n_excl + nf) * sizeof(*all));
    if (all == NULL) {
      free(fresh);
      return 0;
    }
    r->excl = all;
    memcpy(r->excl + r->n_excl, fresh, (size_t)nf * sizeof(*fresh));
    for (int i = 0; i < nf; i++) r->excl[r->n_excl + i].news = TRUN_RDZV_EXCL_NEW;
    r->n_excl += nf;
  }
  free(fresh);
  trun_rdzv_node_id me;
  trun_rdzv_node_identity(r->host_addr, r->node, &me);
  trun__rdzv_agent_id(r, me.agent, sizeof(me.agent));
  double now = trun_wall_s();
  const trun_rdzv_exclusion *mine = NULL;
  for (int i = 0; i < r->n_excl; i++) {
    trun_rdzv_exclusion *e = &r->excl[i];
    if (e->until <= now && !e->ended) {
      e->ended = 1;
      e->news |= TRUN_RDZV_EXCL_ENDED; /* first seen already ended: both */
    }
    if (e->news) r->n_excl_news++;
    if (!e->ended && trun_rdzv_exclusion_matches(e, &me) && (mine == NULL || e->until > mine->until))
      mine = e;
  }
  if (mine) {
    r->excluded = trun_rdzv_exclusion_code(mine->kind);
    const trun_exit_info *x = trun_exit_info_of(r->excluded);
    char agent[48];
    agent_part(&mine->id, agent, sizeof(agent));
    snprintf(
        err, errlen,
        "node %s%s is excluded from job '%s' for %.0f more s (%s: %s, at %.0f): it does not join; exit %d "
        "(%s; --rdzv-conf trun_exclude_seconds, docs/rendezvous.md)",
        me.host, agent, r->cfg->run_id, mine->until - now, mine->kind, mine->cause, mine->at, r->excluded,
        x ? x->meaning : "");
    return -1;
  }
  return 0;
}

int trun_rdzv_exclusion_code(const char *kind) {
  static const char *const hardware[] = {"health", "xid", "preflight", "stuck"};
  for (size_t i = 0; i < sizeof(hardware) / sizeof(hardware[0]); i++)
    if (strcmp(kind, hardware[i]) == 0) return TRUN_EXIT_UNHEALTHY;
  return strcmp(kind, "cut_off") == 0 ? TRUN_EXIT_CUT_OFF : TRUN_EXIT_EXCLUDED;
}

int trun_rdzv_excluded_now(trun_client *c, const char *run_id, double cap_s, trun_rdzv_exclusion **out,
                           int *n) {
  int rc = trun_rdzv_exclusions(c, run_id, cap_s, 0, out, n);
  if (rc < 0) return rc;
  double now = trun_wall_s();
  int k = 0;
  for (int i = 0; i < *n; i++)
    if ((*out)[i].until > now) (*out)[k++] = (*out)[i];
  *n = k;
  return 0;
}
