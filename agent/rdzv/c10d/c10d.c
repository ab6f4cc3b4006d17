/* The c10d backend as torchrun runs it (docs/dev/torchrun-internals.md "The c10d rendezvous";
 * agent/rdzv/rdzv_int.h): torchelastic's dynamic rendezvous (c10d/dynamic.c), then torch's agent protocol in
 * the round's key space "torch.rendezvous.<run_id>.<round>/": rank assignment, the workers' store address
 * and the exit barrier.
 * Two protocol generations, told apart by the state's node key: torch 1.13 (`fqdn`) and torch >= 2.5
 * (`addr`), so that trun agents and torchrun agents of either generation share one job. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "agent/rdzv/rdzv_int.h"
#include "dynamic.h"

/* The backend's own state (r->state). */
typedef struct {
  trun_dyn dyn;            /* torchelastic's state machine */
  int gen113;              /* the peers speak torch 1.13's agent protocol (`fqdn` node keys) */
  int worker_port;         /* the workers' store this agent serves as group rank 0 (torch >= 2.5) */
  char round_prefix[400];  /* "/torch.rendezvous.<run_id>.<round>/" */
  char cached_master[256]; /* the workers' store of an earlier round (torch caches it) */
  int cached_port;
  char prev_ks[512]; /* the key space of the round before the one being joined ("": none) */
  long long prev_round;
} c10d_state;

static c10d_state *st(const trun_rdzv *r) { return r->state; }

static void layout_hint(const trun_config *cfg, trun_rdzv_layout *lay) {
  char v[32] = "";
  lay->key = TRUN_RDZV_KEY_ADDR;
  lay->redundancy = true;
  lay->tz = TRUN_RDZV_TZ_AWARE;
  lay->proto = 4;
  if (!cfg->rdzv_conf || !trun_config_conf_get(cfg->rdzv_conf, "torch_version", v, sizeof(v))) return;
  int minor = strncmp(v, "2.", 2) == 0 ? atoi(v + 2) : -1;
  if (strcmp(v, "1.13") == 0) {
    lay->key = TRUN_RDZV_KEY_FQDN;
    lay->redundancy = false;
    lay->tz = TRUN_RDZV_TZ_NAIVE;
  } else if (minor >= 0 && minor < 6) {
    lay->redundancy = minor >= 3;
    lay->tz = TRUN_RDZV_TZ_NAIVE;
  }
}

static void c10d_close(trun_rdzv *r);

static trun_gen c10d_gen(const trun_config *cfg) {
  trun_gen gen = TRUN_GEN_V2;
  char ver[32];
  if (cfg->rdzv_conf && trun_config_conf_get(cfg->rdzv_conf, "torch_version", ver, sizeof(ver)) &&
      (strcmp(ver, "1.13") == 0 || strcmp(ver, "2.0") == 0 || strcmp(ver, "2.1") == 0))
    trun_client_parse_gen(ver, &gen);
  return gen;
}

static int c10d_init(trun_rdzv *r, char *err, size_t errlen) {
  const trun_config *cfg = r->cfg;
  /* The store speaks the generation of the torch that serves it: 1.13 / 2.0 and 2.1 had no VALIDATE. */
  trun_gen gen = c10d_gen(cfg);
  if ((r->state = calloc(1, sizeof(c10d_state))) == NULL) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (trun__rdzv_elastic_connect(r, gen, err, errlen) < 0) {
    c10d_close(r);
    return -1;
  }
  r->foreign_peers = 1; /* torchrun agents may share the job */
  int read_timeout = (int)trun__rdzv_conf_seconds(cfg, "read_timeout", 60);
  int join_s = (int)trun__rdzv_conf_seconds(cfg, "join_timeout", 600);
  int port = cfg->endpoint_port, rc;
  trun_dyn_settings s = {
      .min_nodes = cfg->min_nodes,
      .max_nodes = cfg->max_nodes,
      .join_timeout_us = (int64_t)(join_s * 1e6),
      .last_call_us = (int64_t)(trun__rdzv_conf_seconds(cfg, "last_call_timeout", 30) * 1e6),
      .close_timeout_us = (int64_t)(trun__rdzv_conf_seconds(cfg, "close_timeout", 30) * 1e6),
      .heartbeat_timeout_us = (int64_t)(trun__rdzv_conf_seconds(cfg, "heartbeat_timeout", 5) * 1e6),
      .keep_alive_us = (int64_t)(trun__rdzv_conf_seconds(cfg, "keep_alive_interval", 5) * 1e6),
      .keep_alive_max_attempt = (int)trun__rdzv_conf_seconds(cfg, "keep_alive_max_attempt", 3),
      .read_timeout_ms = read_timeout * 1000,
  };
  trun_rdzv_layout hint;
  layout_hint(cfg, &hint);
  rc = trun_dyn_init(&st(r)->dyn, r->client, cfg->run_id, r->host_addr, getpid(), 0, &s, &hint);
  st(r)->dyn.poll = trun__rdzv_poll; /* r->poll, and the wait's reports */
  st(r)->dyn.poll_arg = r;
  if (rc < 0) {
    snprintf(err, errlen, "c10d rendezvous at %s:%d: %s", cfg->endpoint_host, port, st(r)->dyn.err);
    c10d_close(r);
    return -1;
  }
  return 0;
}

/* ---- one round ------------------------------------------------------------------------------------- */

static void pkey(const trun_rdzv *r, char *out, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void pkey(const trun_rdzv *r, char *out, size_t len, const char *fmt, ...) {
  char tail[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tail, sizeof(tail), fmt, ap);
  va_end(ap);
  if (snprintf(out, len, "%s%s", st(r)->round_prefix, tail) >= (int)len) out[0] = '\0'; /* names no key */
}

static int get_str(trun_rdzv *r, const char *k, char *out, size_t len, int timeout_ms) {
  int rc = trun__rdzv_wait_key(r, k, timeout_ms);
  if (rc < 0) return rc;
  trun_buf v = {0};
  rc = trun_client_get(r->client, trun_str(k), &v, 10000);
  if (rc == 0) {
    size_t n = v.len < len - 1 ? v.len : len - 1;
    memcpy(out, v.data, n);
    out[n] = '\0';
  }
  trun_buf_free(&v);
  return rc;
}

typedef struct {
  char role[128];
  int rank, lws;
} role_info;

/* {"role": "default", "rank": 0, "local_world_size": 2} as json.dumps writes it. Roles are plain names
 * (trun's --role); a role with characters JSON escapes is written escaped. */
static void role_json(const trun_rdzv *r, char *out, size_t len) {
  char esc[200];
  size_t j = 0;
  for (const char *p = r->cfg->role; *p && j + 7 < sizeof(esc); p++) {
    unsigned char ch = (unsigned char)*p;
    if (ch == '"' || ch == '\\')
      esc[j++] = '\\', esc[j++] = (char)ch;
    else if (ch < 0x20)
      j += (size_t)snprintf(esc + j, sizeof(esc) - j, "\\u%04x", ch);
    else
      esc[j++] = (char)ch;
  }
  esc[j] = '\0';
  snprintf(out, len, "{\"role\": \"%s\", \"rank\": %d, \"local_world_size\": %d}", esc, r->info.group_rank,
           r->nproc);
}

/* Reads the fields of a role_info JSON object (the ones torch writes). 0 or -EPROTO. */
static int role_parse(const char *s, role_info *ri) {
  const char *p = strstr(s, "\"role\"");
  const char *q = strstr(s, "\"rank\"");
  const char *l = strstr(s, "\"local_world_size\"");
  if (!p || !q || !l) return -EPROTO;
  p = strchr(p + 6, '"');
  if (!p) return -EPROTO;
  size_t n = 0;
  for (p++; *p && *p != '"' && n + 1 < sizeof(ri->role); p++) {
    if (*p == '\\' && p[1]) p++;
    ri->role[n++] = *p;
  }
  ri->role[n] = '\0';
  q = strchr(q + 6, ':');
  l = strchr(l + 18, ':');
  if (!q || !l) return -EPROTO;
  ri->rank = atoi(q + 1);
  ri->lws = atoi(l + 1);
  return 0;
}

/* torch's rank arithmetic: global ranks by group rank, role ranks by group rank within the role. */
static void assign(const role_info *ri, int n, int g, int *base, int *total, int *rbase, int *rtotal) {
  *base = *total = *rbase = *rtotal = 0;
  for (int i = 0; i < n; i++) {
    int same = strcmp(ri[i].role, ri[g].role) == 0;
    if (i < g) *base += ri[i].lws;
    *total += ri[i].lws;
    if (same && i < g) *rbase += ri[i].lws;
    if (same) *rtotal += ri[i].lws;
  }
}

/* torch >= 2.3: rank 0 gathers role_info/<i> (multi_get), writes assigned_ranks/<i> (multi_set); the others
 * read theirs. */
static int ranks_v2(trun_rdzv *r, int timeout_ms) {
  char k[512], v[400];
  int world = r->info.group_world_size, rc;
  pkey(r, k, sizeof(k), "torchelastic/role_info/%d", r->info.group_rank);
  role_json(r, v, sizeof(v));
  if ((rc = trun_client_set(r->client, trun_str(k), trun_str(v))) < 0) return rc;
  if (r->info.group_rank == 0) {
    char **names = calloc((size_t)world, sizeof(char *));
    trun_slice *keys = calloc((size_t)world, sizeof(*keys));
    trun_buf *vals = calloc((size_t)world, sizeof(*vals));
    role_info *ri = calloc((size_t)world, sizeof(*ri));
    char **outv = calloc((size_t)world, sizeof(char *));
    trun_slice *outs = calloc((size_t)world, sizeof(*outs));
    rc = (names && keys && vals && ri && outv && outs) ? 0 : -ENOMEM;
    for (int i = 0; rc == 0 && i < world; i++) {
      pkey(r, k, sizeof(k), "torchelastic/role_info/%d", i);
      if ((names[i] = strdup(k)) == NULL) rc = -ENOMEM;
      if (rc == 0) keys[i] = trun_str(names[i]);
    }
    for (int i = 0; rc == 0 && i < world; i++) rc = trun__rdzv_wait_key(r, names[i], timeout_ms);
    if (rc == 0) rc = trun_client_multi_get(r->client, (size_t)world, keys, vals, timeout_ms);
    for (int i = 0; rc == 0 && i < world; i++) {
      char tmp[512];
      size_t n = vals[i].len < sizeof(tmp) - 1 ? vals[i].len : sizeof(tmp) - 1;
      memcpy(tmp, vals[i].data, n);
      tmp[n] = '\0';
      rc = role_parse(tmp, &ri[i]);
    }
    for (int i = 0; rc == 0 && i < world; i++) {
      int b, t, rb, rt;
      assign(ri, world, i, &b, &t, &rb, &rt);
      free(names[i]);
      pkey(r, k, sizeof(k), "torchelastic/assigned_ranks/%d", i);
      names[i] = strdup(k);
      if (names[i] == NULL || asprintf(&outv[i], "[%d, %d, %d, %d]", b, t, rb, rt) < 0) {
        outv[i] = NULL;
        rc = -ENOMEM;
        break;
      }
      keys[i] = trun_str(names[i]);
      outs[i] = trun_str(outv[i]);
    }
    if (rc == 0) rc = trun_client_multi_set(r->client, (size_t)world, keys, outs);
    for (int i = 0; i < world; i++) {
      if (names) free(names[i]);
      if (vals) trun_buf_free(&vals[i]);
      if (outv) free(outv[i]);
    }
    free(names), free(keys), free(vals), free(ri), free(outv), free(outs);
    if (rc < 0) return rc;
  }
  pkey(r, k, sizeof(k), "torchelastic/assigned_ranks/%d", r->info.group_rank);
  if ((rc = get_str(r, k, v, sizeof(v), timeout_ms)) < 0) return rc;
  int b, t, rb, rt;
  if (sscanf(v, "[%d, %d, %d, %d]", &b, &t, &rb, &rt) != 4 &&
      sscanf(v, "[%d,%d,%d,%d]", &b, &t, &rb, &rt) != 4)
    return -EPROTO;
  r->info.base_rank = b, r->info.world_size = t, r->info.role_base_rank = rb, r->info.role_world_size = rt;
  return 0;
}

/* torch 1.13: store_util.synchronize — every agent writes role_info<g>, reads all, writes <g>.FIN; rank 0
 * waits for every FIN. */
static int synchronize_113(trun_rdzv *r, const char *prefix, const char *data, role_info *ri,
                           int timeout_ms) {
  char k[512];
  int world = r->info.group_world_size, rc;
  pkey(r, k, sizeof(k), "%s%d", prefix, r->info.group_rank);
  if ((rc = trun_client_set(r->client, trun_str(k), trun_str(data))) < 0) return rc;
  for (int i = 0; i < world; i++) {
    char got[512];
    pkey(r, k, sizeof(k), "%s%d", prefix, i);
    if ((rc = get_str(r, k, got, sizeof(got), timeout_ms)) < 0) return rc;
    if (ri && (rc = role_parse(got, &ri[i])) < 0) return rc;
  }
  pkey(r, k, sizeof(k), "%s%d.FIN", prefix, r->info.group_rank);
  if ((rc = trun_client_set(r->client, trun_str(k), trun_str("FIN"))) < 0) return rc;
  if (r->info.group_rank == 0)
    for (int i = 0; i < world; i++) {
      pkey(r, k, sizeof(k), "%s%d.FIN", prefix, i);
      if ((rc = trun__rdzv_wait_key(r, k, timeout_ms)) < 0) return rc;
    }
  return 0;
}

static int ranks_113(trun_rdzv *r, int timeout_ms) {
  char v[400];
  role_info *ri = calloc((size_t)r->info.group_world_size, sizeof(*ri));
  if (ri == NULL) return -ENOMEM;
  role_json(r, v, sizeof(v));
  int rc = synchronize_113(r, "torchelastic/role_info", v, ri, timeout_ms);
  if (rc == 0)
    assign(ri, r->info.group_world_size, r->info.group_rank, &r->info.base_rank, &r->info.world_size,
           &r->info.role_base_rank, &r->info.role_world_size);
  free(ri);
  return rc;
}

/* A port nobody listens on now, as torch's _get_socket_with_port (bind localhost:0, close). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof(a);
  int port = -EADDRNOTAVAIL;
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &n) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* Deletes every key in the workers' store this agent serves (the last attempt's), as torch >= 2.6 workers
 * write unprefixed keys. */
static void wipe_worker_store(trun_rdzv *r);

static int publish_master(trun_rdzv *r, const char *addr, int port) {
  char k[512], v[32];
  pkey(r, k, sizeof(k), "MASTER_ADDR");
  int rc = trun_client_set(r->client, trun_str(k), trun_str(addr));
  snprintf(v, sizeof(v), "%d", port);
  pkey(r, k, sizeof(k), "MASTER_PORT");
  if (rc == 0) rc = trun_client_set(r->client, trun_str(k), trun_str(v));
  return rc;
}

static int read_master(trun_rdzv *r, int timeout_ms) {
  char k[512], v[32];
  pkey(r, k, sizeof(k), "MASTER_ADDR");
  int rc = get_str(r, k, r->info.master_addr, sizeof(r->info.master_addr), timeout_ms);
  pkey(r, k, sizeof(k), "MASTER_PORT");
  if (rc == 0) rc = get_str(r, k, v, sizeof(v), timeout_ms);
  if (rc == 0) r->info.master_port = atoi(v);
  return rc;
}

static int master_v2(trun_rdzv *r, int timeout_ms) {
  if (r->info.group_rank == 0) {
    if (r->worker_host == NULL) {
      int rc = trun_store_acl_start(r->cfg->max_nodes == 1, r->host_addr, 0, r->cfg->store_threads, NULL,
                                    NULL, &r->worker_host, &st(r)->worker_port);
      if (rc < 0) return rc;
    } else {
      wipe_worker_store(r);
    }
    snprintf(r->info.master_addr, sizeof(r->info.master_addr), "%s", r->host_addr);
    r->info.master_port = st(r)->worker_port;
    /* torch publishes once and caches; trun publishes every round so that nodes joining later find it. */
    int rc = publish_master(r, r->info.master_addr, r->info.master_port);
    if (rc == 0) snprintf(st(r)->cached_master, sizeof(st(r)->cached_master), "%s", r->info.master_addr);
    st(r)->cached_port = r->info.master_port;
    return rc;
  }
  if (st(r)->cached_port > 0) {
    /* torch agents keep the first round's address; a rank 0 that publishes again wins. */
    char k[512];
    pkey(r, k, sizeof(k), "MASTER_PORT");
    trun_slice ks = trun_str(k);
    if (trun_client_check(r->client, 1, &ks) != 1) {
      snprintf(r->info.master_addr, sizeof(r->info.master_addr), "%s", st(r)->cached_master);
      r->info.master_port = st(r)->cached_port;
      return 0;
    }
  }
  int rc = read_master(r, timeout_ms);
  if (rc == 0) {
    snprintf(st(r)->cached_master, sizeof(st(r)->cached_master), "%s", r->info.master_addr);
    st(r)->cached_port = r->info.master_port;
  }
  return rc;
}

static int master_113(trun_rdzv *r, int timeout_ms) {
  if (r->info.group_rank == 0) {
    int port = free_port();
    if (port < 0) return port;
    int rc = publish_master(r, r->host_addr, port);
    if (rc < 0) return rc;
  }
  return read_master(r, timeout_ms);
}

/* The losses recorded in the last round's key space (rdzv_live.c): those nodes are dropped from the state at
 * once, and the survivors are what the next round waits for instead of the last call. */
static void learn_losses(void *arg) {
  trun_rdzv *r = arg;
  c10d_state *c = st(r);
  if (c->prev_ks[0] == '\0' || c->dyn.n_roster < 2) return;
  trun_rdzv_loss lost[TRUN_RDZV_MAX_LOSSES];
  int n = trun__rdzv_losses(r, c->prev_ks, (int)c->dyn.n_roster, lost, TRUN_RDZV_MAX_LOSSES);
  for (int i = 0; i < n; i++) {
    char addr[256];
    long long pid = 0, local = 0;
    if (sscanf(lost[i].id, "%255s %lld %lld", addr, &pid, &local) != 3) continue;
    trun_rdzv_node dead = {.addr = addr, .pid = pid, .local_id = local};
    if (trun_dyn_find_node(c->dyn.roster, c->dyn.n_roster, &dead) < 0) continue;
    if (trun_dyn_mark_dead(&c->dyn, &dead) == 0)
      trun_info(
          "c10d rendezvous: node rank %d of round %lld (%s) is lost (%s): the next round goes on with the "
          "%zu other node(s) as soon as they are back",
          lost[i].node, c->prev_round, addr, lost[i].cause, c->dyn.n_expect);
  }
}

/* What the join's wait has (trun__rdzv_wait_begin), from the state this node synced last: the participants
 * of the round by address, the nodes that wait for the next one, the last call; a spare says so. */
static void c10d_have(trun_rdzv *r) {
  enum { NAMED = 8 };
  const trun_dyn *d = &st(r)->dyn;
  const trun_rdzv_state *s = &d->st;
  char names[600] = "";
  size_t nl = 0;
  for (size_t i = 0; i < s->n_participants && i < NAMED && nl < sizeof(names); i++)
    nl += (size_t)snprintf(names + nl, sizeof(names) - nl, "%s%s (pid %lld)", i ? ", " : "",
                           s->participants[i].node.addr, (long long)s->participants[i].node.pid);
  const char *more = s->n_participants > NAMED ? ", ..." : "";
  int spare = trun_dyn_find_node(s->redundancy_list, s->n_redundancy, &d->me) >= 0;
  double lc_left = s->has_deadline ? (double)(s->deadline_us - trun_wall_us()) / 1e6 : -1;
  int last_call = !spare && !s->complete && s->n_participants >= (size_t)d->s.min_nodes && lc_left >= 0;
  snprintf(r->wait.what, sizeof(r->wait.what), "%s rendezvous round %lld of '%s' (c10d at %s:%d)",
           spare       ? "a spare's turn in"
           : last_call ? "more nodes until the last call of"
                       : "the other nodes of",
           (long long)s->round, r->cfg->run_id, r->store_addr, r->store_port);
  snprintf(r->wait.kind, sizeof(r->wait.kind), "%s", spare ? "spare" : last_call ? "last_call" : "round");
  /* A spare has no time-out; leaving the redundancy list restarts the join time-out (c10d/dynamic.c). */
  if (spare)
    r->wait.deadline = 0;
  else if (r->wait.deadline == 0)
    r->wait.deadline = trun_mono_s() + (double)d->s.join_timeout_us / 1e6;
  int n = snprintf(r->wait.have, sizeof(r->wait.have), "%zu of %d..%d nodes joined%s%s%s", s->n_participants,
                   d->s.min_nodes, d->s.max_nodes, s->n_participants ? ": " : "", names, more);
  if (n < 0 || (size_t)n >= sizeof(r->wait.have)) return;
  if (s->complete)
    n += snprintf(r->wait.have + n, sizeof(r->wait.have) - (size_t)n,
                  "; that round is complete: this node joins the next one");
  else if (last_call)
    n += snprintf(r->wait.have + n, sizeof(r->wait.have) - (size_t)n, "; the last call ends in %.0f s",
                  lc_left > 0 ? lc_left : 0);
  else if (s->n_participants < (size_t)d->s.min_nodes)
    n += snprintf(r->wait.have + n, sizeof(r->wait.have) - (size_t)n, "; missing: %zu more to reach %d",
                  (size_t)d->s.min_nodes - s->n_participants, d->s.min_nodes);
  if (n >= 0 && (size_t)n < sizeof(r->wait.have) && (s->n_wait || s->n_redundancy))
    snprintf(r->wait.have + n, sizeof(r->wait.have) - (size_t)n, "; %zu waiting, %zu spare", s->n_wait,
             s->n_redundancy);
}

static int c10d_round(trun_rdzv *r, int agent_round, char *err, size_t errlen) {
  (void)agent_round; /* the store's round counter decides */
  snprintf(st(r)->prev_ks, sizeof(st(r)->prev_ks), "%s", r->key_space);
  st(r)->prev_round = r->info.round_id;
  learn_losses(r);
  st(r)->dyn.refresh = learn_losses;
  st(r)->dyn.refresh_arg = r;
  int rank = 0, world = 0;
  int64_t round = 0;
  int waiting = trun__rdzv_wait_begin(r, "round", (double)st(r)->dyn.s.join_timeout_us / 1e6, "join_timeout",
                                      c10d_have, "the other nodes of the c10d rendezvous '%s' at %s:%d",
                                      r->cfg->run_id, r->store_addr, r->store_port);
  int rc = trun_dyn_next(&st(r)->dyn, &rank, &world, &round);
  trun__rdzv_wait_end(r, waiting);
  st(r)->dyn.refresh = NULL;
  if (rc < 0) {
    snprintf(err, errlen, "c10d rendezvous via %s:%d: %s", r->cfg->endpoint_host, r->cfg->endpoint_port,
             rc == -EINTR ? "interrupted by a signal" : st(r)->dyn.err);
    if (rc == -EINTR) c10d_have(r);
    if (rc == -EINTR && r->wait.have[0])
      snprintf(err + strlen(err), errlen - strlen(err), " (%s)", r->wait.have);
    return -1;
  }
  trun_rdzv_layout lay;
  trun_dyn_write_layout(&st(r)->dyn, &lay);
  st(r)->gen113 = lay.key == TRUN_RDZV_KEY_FQDN;
  r->info.workers_host_store = st(r)->gen113;
  r->info.group_rank = rank;
  r->info.group_world_size = world;
  r->info.round_id = round;
  r->info.round = (int)round;
  snprintf(st(r)->round_prefix, sizeof(st(r)->round_prefix), "/torch.rendezvous.%s.%lld/", r->cfg->run_id,
           (long long)round);
  snprintf(r->key_space, sizeof(r->key_space), "%strun", st(r)->round_prefix);
  int timeout = (int)trun__rdzv_conf_seconds(r->cfg, "join_timeout", 600) * 1000;
  /* torch >= 2.5 settles the workers' store inside next_rendezvous, before the ranks; 1.13 after them. */
  const char *what = st(r)->gen113 ? "assigning ranks" : "sharing the workers' store address";
  rc = st(r)->gen113 ? ranks_113(r, timeout) : master_v2(r, timeout);
  if (rc == 0) {
    what = st(r)->gen113 ? "sharing the workers' store address" : "assigning ranks";
    rc = st(r)->gen113 ? master_113(r, timeout) : ranks_v2(r, timeout);
  }
  if (rc < 0) {
    snprintf(err, errlen, "c10d round %lld (node rank %d of %d): %s failed: %s", (long long)round, rank,
             world, what,
             rc == -EINTR    ? "interrupted by a signal"
             : rc == -EPROTO ? "a peer wrote values torch does not"
                             : strerror(-rc));
    return -1;
  }
  trun_debug("c10d round %lld: node rank %d of %d (%s protocol), ranks %d-%d of %d, workers' store %s:%d",
             (long long)round, rank, world, st(r)->gen113 ? "torch 1.13" : "torch 2.x", r->info.base_rank,
             r->info.base_rank + r->nproc - 1, r->info.world_size, r->info.master_addr, r->info.master_port);
  return 0;
}

static void collect_all(void *arg, trun_slice k) {
  trun_client *c = arg;
  trun_client_delete(c, k);
}

static void wipe_worker_store(trun_rdzv *r) {
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = trun_store_host_addr(r->worker_host);
  o.port = st(r)->worker_port;
  o.key_prefix = "";
  o.connect_timeout_ms = 5000;
  trun_client *c = NULL;
  if (trun_client_connect(&o, &c) < 0) return;
  /* LIST then DELETE on a second connection: the callback runs while the LIST reply is read. */
  trun_client *d = NULL;
  if (trun_client_connect(&o, &d) == 0) {
    trun_client_list(c, collect_all, d);
    trun_client_close(d);
  }
  trun_client_close(c);
}

/* torchrun's monitor step for a healthy group: keep the heartbeat fresh; nodes in the wait list mean a new
 * world. Only nodes that were not in this round are new members: a peer of this round in the wait list
 * restarted after a failure, which every node counts, so that all agents keep one restart count (torch
 * <= 2.5 workers prefix their store keys with it). */
static trun_rdzv_news c10d_tick(trun_rdzv *r, trun_client *c, int *nodes) {
  trun_dyn *d = &st(r)->dyn;
  trun_client *own = d->c;
  trun_rdzv_news news = TRUN_RDZV_STEADY;
  *nodes = 0;
  d->c = c;
  if (trun_dyn_keep_alive(d) < 0) {
    trun_warn("c10d heartbeat failed: %s", d->err);
  } else {
    int waiting = trun_dyn_num_waiting(d, 0);
    int fresh = waiting > 0 ? trun_dyn_num_new_waiting(d, 0) : 0;
    if (waiting > 0) {
      *nodes = fresh > 0 ? fresh : waiting;
      news = fresh > 0 ? TRUN_RDZV_NEW_NODES : TRUN_RDZV_PEER_RESTART;
    }
  }
  d->c = own;
  return news;
}

static int c10d_tick_ms(const trun_rdzv *r) { return (int)(r->cfg->monitor_interval * 1000); }

static int c10d_new_nodes_waiting(trun_rdzv *r) { return trun_dyn_num_new_waiting(&st(r)->dyn, 1); }

/* What the exit barrier's wait has (torch >= 2.x key space): how many agents reached it. */
static void barrier_have(trun_rdzv *r) {
  char k[512];
  int64_t n = 0;
  pkey(r, k, sizeof(k), "torchelastic/agent/terminal_state/num_members");
  if (trun_client_add(r->client, trun_str(k), 0, &n) == 0)
    snprintf(r->wait.have, sizeof(r->wait.have), "%lld of %d agents reached it", (long long)n,
             r->info.group_world_size);
}

/* torch's exit barrier for this round (errors only logged). */
static void exit_barrier(trun_rdzv *r, int timeout_ms) {
  char k[512], last[512];
  int rc;
  if (st(r)->gen113) {
    char v[32];
    snprintf(v, sizeof(v), "%d", r->info.group_rank);
    rc = synchronize_113(r, "torchelastic/agent/terminal_state", v, NULL, timeout_ms);
  } else {
    int64_t n = 0;
    pkey(r, k, sizeof(k), "torchelastic/agent/terminal_state/num_members");
    pkey(r, last, sizeof(last), "torchelastic/agent/terminal_state/last_member");
    rc = trun_client_add(r->client, trun_str(k), 1, &n);
    if (rc == 0 && n == r->info.group_world_size)
      rc = trun_client_set(r->client, trun_str(last), trun_str("<val_ignored>"));
    if (rc == 0) {
      int waiting =
          trun__rdzv_wait_begin(r, "exit_barrier", timeout_ms / 1000.0, NULL, barrier_have,
                                "the exit barrier of c10d round %lld: the other %d agents to finish",
                                r->info.round_id, r->info.group_world_size - 1);
      rc = trun__rdzv_wait_key(r, last, timeout_ms);
      trun__rdzv_wait_end(r, waiting);
    }
  }
  if (rc < 0)
    trun_warn("exit barrier of c10d round %lld: %s (waited up to %d s for the other agents)",
              r->info.round_id, strerror(-rc), timeout_ms / 1000);
}

/* How long the store's host waits after the last failure for the other trun agents to read its record. */
#define C10D_SAW_END_MS 5000

/* torchrun: the exit barrier after success (1.13: also after the last failure), then shutdown() closes the
 * rendezvous for good unless the agent was stopped by a signal. */
static void c10d_finish(trun_rdzv *r, int code, int signaled) {
  if (r->client == NULL) return;
  if (code == 0 || (st(r)->gen113 && !signaled))
    exit_barrier(r, trun__rdzv_exit_barrier_ms(r));
  else if (r->host && !signaled && r->info.group_world_size > 1)
    trun__rdzv_wait_saw_end(r, C10D_SAW_END_MS); /* the store closes with this agent */
  if (!signaled && trun_dyn_close(&st(r)->dyn) < 0) {
    if (r->store_may_go) /* its host ended the job: nothing is left to close */
      trun_debug("could not close the c10d rendezvous: %s", st(r)->dyn.err);
    else
      trun_warn("could not close the c10d rendezvous: %s", st(r)->dyn.err);
  }
}

static void c10d_close(trun_rdzv *r) {
  if (r->state) trun_dyn_free(&st(r)->dyn);
  free(r->state);
  r->state = NULL;
  trun__rdzv_close_stores(r);
}

/* c10d: group rank 0 hosts the workers' store (torch >= 2.x layouts; with 1.13's the workers host it):
 * admit loopback, this host and every address the round's participants' names resolve to. */
static int c10d_admit(trun_rdzv *r, int round, char *err, size_t errlen) {
  (void)round;
  if (r->worker_host == NULL || r->info.group_rank != 0 || r->state == NULL) return 0;
  trun_server *s = trun_store_host_server(r->worker_host);
  const char **names = calloc(st(r)->dyn.n_roster + 1, sizeof(*names));
  if (names == NULL) {
    snprintf(err, errlen, "--store-allow-peers: out of memory");
    return -1;
  }
  for (size_t i = 0; i < st(r)->dyn.n_roster; i++) names[i] = st(r)->dyn.roster[i].addr;
  int rc = trun_store_acl_allow_names(s, names, st(r)->dyn.n_roster, err, errlen);
  free(names);
  if (rc < 0) return -1;
  trun_server_allow_enforce(s, 1);
  return 0;
}

const trun_rdzv_ops trun__rdzv_c10d = {
    .name = "c10d",
    .elastic = 1,
    .store_gen = c10d_gen,
    .init = c10d_init,
    .next_round = c10d_round,
    .admit_round = c10d_admit,
    .tick_ms = c10d_tick_ms,
    .tick = c10d_tick,
    .new_nodes_waiting = c10d_new_nodes_waiting,
    .finish = c10d_finish,
    .close = c10d_close,
};
