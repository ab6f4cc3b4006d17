/* Liveness (agent/rdzv/rdzv.h, issue 22): knowing within seconds that a node of the round is gone, and
 * saying so once in the store so that every survivor acts on the same fact.
 *
 * While a round's workers run, a thread of each agent, on a connection of its own to the rendezvous store,
 * writes in the round's key space (r->key_space):
 *   alive/<g>  the agent's id "addr pid local_id tag" (trun__rdzv_agent_id), set once per round on that
 *              connection: the store host's server owns it to the connection (trun_server_own_keys), so a
 *              crash (the kernel closes the socket) is seen at once by an agent that hosts the store;
 *              deleted when the node leaves the round cleanly;
 *   live/<g>   a counter it bumps every trun_heartbeat_interval (1 s).
 * Each agent also watches the next node of the round that has an alive key (a ring; torchrun agents in a
 * c10d fleet write none and are skipped): a counter that stays still for trun_heartbeat_misses (3) intervals
 * is a silent loss (power, NIC, kernel panic). The first to see a loss writes
 *   lost/<g>   {"node": g, "addr": ..., "id": ..., "cause": ..., "by": g or "store", "at": seconds}
 *              (compare-and-set: one record per node), bumps lost_n (and left, so that the static
 *              backend's exit barrier does not wait for it), and ends the round: end = "gone:<g>"
 *              (compare-and-set: the first announcement of the round wins, as for "ok" and "fail:<g>").
 * The end watcher (rdzv_watch.c) wakes on that value. Two rules keep a slow store (thousands of
 * connections, a busy box) from being taken for a lost node: a watcher calls its successor lost only after it
 * made trun_heartbeat_misses + 1 heartbeats of its own while the successor made none, and the liveness
 * connection is never closed for a slow answer (closing it would look like a crash to the store's host).
 * An agent whose own heartbeats got no answer for twice the liveness window is the one cut off: a second
 * thread, the judge, which never waits on the store, looks once an interval and hands the agent a CUT_OFF
 * fate through the rendezvous's one door (rdzv_door.c), as the backend's tick hands on its news (JOINING,
 * REJOINED); the agent stops its workers and exits with its own code instead of hanging in a collective. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rdzv_int.h"

typedef struct trun_live {
  trun_rdzv *r; /* cfg, key space, identity: read under mu */
  pthread_t thread, judge;
  int started, judging;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* under mu */
  int stop;
  int active;      /* a round's workers run */
  unsigned epoch;  /* bumped by every new round */
  int release;     /* the agent asks the thread to leave the round cleanly (delete alive/<g>) */
  char leave[160]; /* trun_rdzv_leave_now's reason, for the thread to publish ("": none) */
  int fd;          /* the thread's connection, for trun_rdzv_abandon (-1: none) */
  int released;    /* done */
  int abandoned;   /* trun_rdzv_abandon: the store does not answer; the thread no longer connects */
  char ks[512];    /* the round's key space */
  int g, world;    /* this node in it */
  char id[TRUN_RDZV_AGENT_ID_MAX]; /* this agent's (trun__rdzv_agent_id) */
  double interval;                 /* seconds */
  int misses;
  double last_ok; /* when a heartbeat of the active round was last answered (monotonic) */
  /* the thread's own */
  trun_client *c;
} trun_live;

double trun__rdzv_live_interval(const trun_config *cfg) {
  return trun__rdzv_conf_seconds(cfg, "trun_heartbeat_interval", 1.0);
}

int trun__rdzv_live_misses(const trun_config *cfg) {
  return (int)trun__rdzv_conf_seconds(cfg, "trun_heartbeat_misses", 3);
}

/* ---- the loss record ------------------------------------------------------------------------------ */

/* {"node": g, "addr": ..., "id": ..., "cause": ..., "by": ..., "at": ...} (malloc'ed) or NULL. */
static char *loss_json(int g, const char *id, const char *cause, const char *by, double at) {
  char addr[256] = "";
  sscanf(id, "%255s", addr);
  json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:s, s:f}", "node", g, "addr", addr, "id", id, "cause", cause,
                        "by", by, "at", at);
  char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return s;
}

/* "<ks>/<what>/<g>" or "<ks>/<what>". */
static void ks_key(const char *ks, const char *what, int g, char *out, size_t len) {
  if (g >= 0)
    snprintf(out, len, "%s/%s/%d", ks, what, g);
  else
    snprintf(out, len, "%s/%s", ks, what);
}

/* The key space a loss record is written into: through an agent's client, or in-process on the store host's
 * server from inside its gone callback (server NULL: the client). */
typedef struct {
  trun_client *client;
  trun_server *server;
} ks_door;

/* COMPARE_SET key from "" to val: 1 when the key holds val now (this writer won), 0, negative errno. */
static int door_claim(const ks_door *d, const char *key, const char *val) {
  size_t n = strlen(val);
  if (d->server) {
    trun_slice reply;
    int rc = trun_server_compare_set(d->server, trun_str(key), trun_str(""), trun_str(val), &reply);
    return rc < 0 ? rc : reply.n == n && memcmp(reply.p, val, n) == 0;
  }
  trun_buf out = {0};
  int rc = trun_client_compare_set(d->client, trun_str(key), trun_str(""), trun_str(val), &out);
  int won = rc == 0 && out.len == n && memcmp(out.data, val, n) == 0;
  trun_buf_free(&out);
  return rc < 0 ? rc : won;
}

static int door_count(const ks_door *d, const char *key) {
  int64_t n;
  return d->server ? trun_server_add(d->server, trun_str(key), 1, &n)
                   : trun_client_add(d->client, trun_str(key), 1, &n);
}

/* The one writer of a node's loss: "<ks>/lost/<g>" (first record wins), then, for the winner, "lost_n" and
 * "left" counted (the exit barrier counts it out, rdzv_end.c: unless the node counted itself out first,
 * "counted/<g>" says who did, so that a node counts once) and the round's end set to NODE_LOST.
 * 1 when this call wrote the record, 0 when there was one, negative errno. */
static int write_loss(const ks_door *d, const char *ks, int g, const char *id, const char *cause,
                      const char *by) {
  char k[600], end[32];
  char *rec = loss_json(g, id, cause, by, trun_wall_s());
  if (rec == NULL) return -ENOMEM;
  ks_key(ks, "lost", g, k, sizeof(k));
  int won = door_claim(d, k, rec);
  free(rec);
  if (won <= 0) return won;
  ks_key(ks, "lost_n", -1, k, sizeof(k));
  int rc = door_count(d, k);
  ks_key(ks, "counted", g, k, sizeof(k));
  int first = rc == 0 ? door_claim(d, k, "lost") : 0;
  if (first < 0) rc = first;
  ks_key(ks, "left", -1, k, sizeof(k));
  if (first > 0) rc = door_count(d, k);
  ks_key(ks, "end", -1, k, sizeof(k));
  if (rc == 0) rc = trun__rdzv_end_encode(TRUN_RDZV_END_NODE_LOST, g, NULL, end, sizeof(end));
  if (rc == 0) rc = door_claim(d, k, end);
  return rc < 0 ? rc : 1;
}

/* How a message names the agent of alive id "addr pid local_id tag": "ADDR, agent pid PID" (the id as it is
 * when it is not one), escaped: the value comes from the store. */
static void id_name(const char *id, char *out, size_t len) {
  char addr[256], raw[TRUN_RDZV_AGENT_ID_MAX + 32];
  long long pid = 0;
  if (sscanf(id, "%255s %lld", addr, &pid) == 2)
    snprintf(raw, sizeof(raw), "%s, agent pid %lld", addr, pid);
  else
    snprintf(raw, sizeof(raw), "%s", id);
  trun__rdzv_escape(raw, out, len);
}

/* The store host's server found an owner connection gone (trun_server_own_keys): key "<ks>/alive/<g>"
 * with value "addr pid local_id tag". Runs on the server's thread with the key space locked. */
static void on_owner_gone(void *arg, trun_server *s, trun_slice key, trun_slice value, const char *peer) {
  (void)arg;
  static const char tag[] = "/alive/";
  char k[600], id[TRUN_RDZV_AGENT_ID_MAX], ks[512];
  if (key.n >= sizeof(k) || value.n >= sizeof(id)) return;
  memcpy(k, key.p, key.n);
  k[key.n] = '\0';
  memcpy(id, value.p, value.n);
  id[value.n] = '\0';
  /* The server owns only "<key space>/alive/<g>" (the marker is the last one in the key). */
  char *at = NULL;
  for (char *p = strstr(k, tag); p; p = strstr(p + 1, tag)) at = p;
  if (at == NULL || (size_t)(at - k) >= sizeof(ks)) return;
  int g = atoi(at + strlen(tag));
  memcpy(ks, k, (size_t)(at - k));
  ks[at - k] = '\0';
  char cause[128];
  snprintf(cause, sizeof(cause), "its connection to the rendezvous store closed (from %s)", peer);
  ks_door d = {.server = s};
  if (write_loss(&d, ks, g, id, cause, "store") == 1) {
    char name[TRUN_RDZV_AGENT_ID_MAX * 2];
    id_name(id, name, sizeof(name));
    trun_warn("node rank %d (%s) is gone: %s; the round ends for the others", g, name, cause);
  }
}

int trun__rdzv_loss_read(trun_client *c, const char *ks, int g, trun_rdzv_loss *out) {
  char k[600];
  memset(out, 0, sizeof(*out));
  out->node = g;
  ks_key(ks, "lost", g, k, sizeof(k));
  trun_slice key = trun_str(k);
  if (c == NULL || trun_client_check(c, 1, &key) != 1) return -ENOENT;
  trun_buf v = {0};
  int rc = trun_client_get(c, key, &v, 5000);
  json_t *o = rc == 0 ? json_loadb((const char *)v.data, v.len, 0, NULL) : NULL;
  trun_buf_free(&v);
  if (o == NULL) return rc < 0 ? rc : -EBADMSG;
  const char *addr = NULL, *id = NULL, *cause = NULL, *by = NULL;
  double at = 0;
  if (json_unpack(o, "{s?s, s?s, s?s, s?s, s?F}", "addr", &addr, "id", &id, "cause", &cause, "by", &by, "at",
                  &at) == 0) {
    snprintf(out->addr, sizeof(out->addr), "%s", addr ? addr : "?");
    snprintf(out->id, sizeof(out->id), "%s", id ? id : "");
    snprintf(out->cause, sizeof(out->cause), "%s", cause ? cause : "?");
    snprintf(out->by, sizeof(out->by), "%s", by ? by : "?");
    out->at = at;
  }
  json_decref(o);
  return 0;
}

int trun_rdzv_loss_of(const trun_rdzv *r, trun_client *c, int g, trun_rdzv_loss *out) {
  int rc = trun__rdzv_loss_read(c ? c : r->client, r->key_space, g, out);
  out->round_id = r->info.round_id;
  return rc;
}

int trun__rdzv_losses(trun_rdzv *r, const char *ks, int world, trun_rdzv_loss *out, int max) {
  char k[600];
  int64_t n = 0;
  ks_key(ks, "lost_n", -1, k, sizeof(k));
  trun_slice key = trun_str(k);
  if (r->client == NULL || ks[0] == '\0' || trun_client_check(r->client, 1, &key) != 1) return 0;
  if (trun__rdzv_get_count(r->client, k, &n) < 0 || n <= 0) return 0; /* a read: --rdzv-status has no token */
  int found = 0;
  for (int g = 0; g < world && found < max && found < n; g++)
    if (trun__rdzv_loss_read(r->client, ks, g, &out[found]) == 0) found++;
  return found;
}

int trun_rdzv_leave_now(trun_rdzv *r, const char *why) {
  trun_live *l = r->live;
  if (l == NULL) return 0;
  pthread_mutex_lock(&l->mu);
  int in_round = l->active && !l->release;
  if (in_round) {
    snprintf(l->leave, sizeof(l->leave), "%s", why);
    pthread_cond_broadcast(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
  return in_round ? 0 : -EAGAIN;
}

static int connect_once(trun_live *l);

/* ---- the thread ----------------------------------------------------------------------------------- */

static int ensure_connected(trun_live *l) {
  if (l->c) return 0;
  int rc = connect_once(l);
  pthread_mutex_lock(&l->mu);
  l->fd = rc == 0 ? trun_client_fd(l->c) : -1;
  pthread_mutex_unlock(&l->mu);
  return rc;
}

static int connect_once(trun_live *l) {
  /* A slow answer is waited for (a time-out would close the connection, which the store's host takes for
   * a crash); the judge (judge_main) judges the silence. Connecting is retried every interval. */
  trun_client_opts o;
  trun__rdzv_agent_opts(l->r, 60000, &o);
  o.connect_timeout_ms = (int)(l->interval * 1000) > 100 ? (int)(l->interval * 1000) : 100;
  o.quiet_connect = 1;
  o.quiet_errors = 1; /* a store that went away is said by the agent (cut off, lost, or the job's end) */
  return trun_client_connect(&o, &l->c);
}

static void drop_connection(trun_live *l) {
  pthread_mutex_lock(&l->mu);
  l->fd = -1;
  pthread_mutex_unlock(&l->mu);
  if (l->c) trun_client_close(l->c);
  l->c = NULL;
}

typedef struct {
  unsigned epoch;
  int owned;         /* alive/<g> written on this connection */
  int succ;          /* the node watched, -1 none */
  int64_t succ_seen; /* its counter */
  int own_beats;     /* this node's answered heartbeats since the successor's counter last moved */
  double succ_since; /* when it last moved (monotonic) */
  char succ_id[TRUN_RDZV_AGENT_ID_MAX];
} round_view;

/* The node this one watches: the next of the ring that has an alive key, looked for at every heartbeat (a
 * node whose key is not there yet is taken as soon as it is; torchrun agents in a c10d fleet never write
 * one and are passed over; a node that left cleanly deleted its key). *out: its group rank, -1 none.
 * 0 or a negative errno. */
static int successor(trun_live *l, const char *ks, int g, int world, int *out) {
  *out = -1;
  for (int i = 1; i < world; i++) {
    int s = (g + i) % world;
    char k[600];
    ks_key(ks, "alive", s, k, sizeof(k));
    trun_slice key = trun_str(k);
    int rc = trun_client_check(l->c, 1, &key);
    if (rc < 0) return rc;
    if (rc == 1) {
      *out = s;
      return 0;
    }
  }
  return 0;
}

/* Starts watching node s: its identity for the loss record. Its key was just seen, but the node may leave the
 * round cleanly (deleting it) at any moment, and a GET would then wait for a key that does not come back (a
 * time-out drops this connection, which the store's host takes for this node's crash). So it is read without
 * waiting: COMPARE_SET with an expected value no key holds stores nothing and answers the value, or that
 * expected value when the key is gone (then no successor for now). 0 or a negative errno. */
static int watch(trun_live *l, round_view *v, const char *ks, int s) {
  static const char none[] = "\x01trun-live:no-value";
  char k[600];
  ks_key(ks, "alive", s, k, sizeof(k));
  trun_buf b = {0};
  int rc = trun_client_compare_set(l->c, trun_str(k), trun_str(none), trun_str(none), &b);
  if (rc == 0 && b.len == strlen(none) && memcmp(b.data, none, b.len) == 0) {
    v->succ = -1; /* gone meanwhile */
    rc = 1;
  }
  if (rc == 0) {
    size_t n = b.len < sizeof(v->succ_id) - 1 ? b.len : sizeof(v->succ_id) - 1;
    memcpy(v->succ_id, b.data, n);
    v->succ_id[n] = '\0';
    v->succ = s;
    v->succ_seen = -1;
    v->own_beats = 0;
    v->succ_since = trun_mono_s();
  }
  trun_buf_free(&b);
  return rc < 0 ? rc : 0;
}

/* A node gone silent (its link, its kernel, its power) is cut off: its agent stays out of the job for a time
 * (rdzv_exclude.c), named by its rendezvous address (the first word of id "addr pid local_id tag") and by
 * that whole id, so that another agent with the same address (one box, pods on the host's network: the
 * watcher itself, maybe) is not taken for it. An id of one word (not an agent's) names the address only. */
static void exclude_cut_off(trun_live *l, const char *succ_id, const char *cause) {
  trun_rdzv_node_id id;
  memset(&id, 0, sizeof(id));
  size_t host_len = strcspn(succ_id, " ");
  snprintf(id.host, sizeof(id.host), "%.*s", (int)host_len, succ_id);
  if (succ_id[host_len] == ' ') snprintf(id.agent, sizeof(id.agent), "%s", succ_id);
  char why[320];
  snprintf(why, sizeof(why), "cut off from the job: %s", cause);
  int rc = trun_rdzv_exclude(l->c, l->r->cfg, &id, "cut_off", why);
  if (rc < 0) trun_warn("could not put node %s on the job's exclusion list: %s", id.host, strerror(-rc));
}

/* One heartbeat of this node and one look at its successor. 0, or the negative errno of a store request
 * that failed (the connection is then dropped and made again). */
static int beat(trun_live *l, round_view *v, const char *ks, int g, int world, const char *id) {
  char k[600];
  double now = trun_mono_s();
  int rc;
  if (!v->owned) {
    ks_key(ks, "alive", g, k, sizeof(k));
    if ((rc = trun_client_set(l->c, trun_str(k), trun_str(id))) < 0) return rc;
    v->owned = 1;
  }
  int64_t n;
  ks_key(ks, "live", g, k, sizeof(k));
  if ((rc = trun_client_add(l->c, trun_str(k), 1, &n)) < 0) return rc;
  pthread_mutex_lock(&l->mu);
  l->last_ok = trun_mono_s();
  pthread_mutex_unlock(&l->mu);
  v->own_beats++;
  if (world < 2) return 0;
  int s;
  if ((rc = successor(l, ks, g, world, &s)) < 0) return rc;
  if (s < 0) {
    v->succ = -1;
    return 0;
  }
  if (s != v->succ) return watch(l, v, ks, s);
  ks_key(ks, "live", v->succ, k, sizeof(k));
  if ((rc = trun_client_add(l->c, trun_str(k), 0, &n)) < 0) return rc;
  if (n != v->succ_seen) {
    v->succ_seen = n;
    v->succ_since = now;
    v->own_beats = 0;
    return 0;
  }
  /* Silent while this node's own heartbeats went through: misses + 1 of them, one interval apart. */
  if (v->own_beats <= l->misses) return 0;
  double quiet = now - v->succ_since;
  char cause[128], by[16];
  snprintf(cause, sizeof(cause), "%d heartbeats missed (%.1f s without one)", v->own_beats, quiet);
  snprintf(by, sizeof(by), "%d", g);
  if ((rc = write_loss(&(ks_door){.client = l->c}, ks, v->succ, v->succ_id, cause, by)) == 1) {
    char name[TRUN_RDZV_AGENT_ID_MAX * 2];
    id_name(v->succ_id, name, sizeof(name));
    trun_warn("node rank %d (%s) is gone: %s; the round ends for the others", v->succ, name, cause);
    exclude_cut_off(l, v->succ_id, cause);
  }
  v->succ = -1;
  return rc < 0 ? rc : 0;
}

/* The absolute time secs from now for pthread_cond_timedwait (which waits on CLOCK_REALTIME). */
static struct timespec abs_in(double secs) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  double t = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + (secs > 0 ? secs : 0);
  ts.tv_sec = (time_t)t;
  ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
  return ts;
}

/* The backend's news while the workers run, handed to the agent as a fate through the one door. */
static void tell_news(trun_rdzv *r, trun_rdzv_news news, int nodes) {
  trun_rdzv_end e = {.node = -1, .nodes = nodes};
  e.kind = news == TRUN_RDZV_NEW_NODES ? TRUN_RDZV_END_JOINING : TRUN_RDZV_END_REJOINED;
  trun__rdzv_door_post(r, &e);
}

static void *live_main(void *arg) {
  trun_live *l = arg;
  trun_rdzv *r = l->r;
  round_view v = {.succ = -1};
  char ks[512], id[TRUN_RDZV_AGENT_ID_MAX], leave[160];
  int g = 0, world = 0;
  double tick_every = r->be->tick && r->be->tick_ms ? r->be->tick_ms(r) / 1000.0 : 0;
  if (tick_every > 0 && tick_every < 0.1) tick_every = 0.1;
  double next_beat = 0, next_tick = 0;
  pthread_mutex_lock(&l->mu);
  while (!l->stop) {
    int active = l->active, release = l->release;
    leave[0] = '\0';
    if (l->leave[0]) {
      snprintf(leave, sizeof(leave), "%s", l->leave);
      l->leave[0] = '\0';
    }
    if (l->epoch != v.epoch) {
      v = (round_view){.epoch = l->epoch, .succ = -1};
      snprintf(ks, sizeof(ks), "%s", l->ks);
      snprintf(id, sizeof(id), "%s", l->id);
      g = l->g, world = l->world;
      next_beat = next_tick = trun_mono_s();
    }
    pthread_mutex_unlock(&l->mu);
    if ((active || release || leave[0]) && !l->abandoned && ensure_connected(l) < 0) drop_connection(l);
    double now = trun_mono_s();
    if (release) {
      if (l->c && v.owned) {
        char k[600];
        ks_key(ks, "alive", g, k, sizeof(k));
        if (trun_client_delete(l->c, trun_str(k)) < 0) drop_connection(l);
      }
      v.owned = 0;
    } else if (active && l->c) {
      if (leave[0]) {
        char cause[200], by[16];
        snprintf(cause, sizeof(cause), "it left the job: %s", leave);
        snprintf(by, sizeof(by), "%d", g);
        if (write_loss(&(ks_door){.client = l->c}, ks, g, id, cause, by) < 0) drop_connection(l);
      }
      if (l->c && now >= next_beat) {
        next_beat = now + l->interval;
        /* Alone in the round (a world of 1, only the backend's tick runs): nobody watches this node. */
        if (world >= 2 && beat(l, &v, ks, g, world, id) < 0) {
          drop_connection(l);
          v.owned = 0; /* a new connection must own alive/<g> again */
        }
      }
      if (l->c && tick_every > 0 && now >= next_tick) {
        /* The backend's own keep-alive and membership watch, on this thread's connection: the agent's loop
         * never waits on the store while the workers run. */
        next_tick = now + tick_every;
        int nodes = 0;
        trun_rdzv_news news = r->be->tick(r, l->c, &nodes);
        if (news != TRUN_RDZV_STEADY) tell_news(r, news, nodes);
        if (trun_client_fd(l->c) < 0) drop_connection(l);
      }
    }
    pthread_mutex_lock(&l->mu);
    if (release && l->release) {
      l->release = 0;
      l->active = 0;
      l->released = 1;
      pthread_cond_broadcast(&l->cv);
    }
    if (l->stop) break;
    if (l->active && !l->release) {
      double until = next_beat;
      if (tick_every > 0 && next_tick < until) until = next_tick;
      struct timespec ts = abs_in(until - trun_mono_s());
      if (!l->leave[0]) pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    } else if (!l->release && !l->stop) {
      pthread_cond_wait(&l->cv, &l->mu);
    }
  }
  pthread_mutex_unlock(&l->mu);
  if (l->c && v.owned) {
    char k[600];
    ks_key(ks, "alive", g, k, sizeof(k));
    trun_client_delete(l->c, trun_str(k)); /* leaving for good: not a loss */
  }
  drop_connection(l);
  return NULL;
}

/* ---- the judge: is this node cut off? ------------------------------------------------------------ */

/* Under l->mu: 1 with the cause in why when this node's heartbeats of the active round have had no answer
 * from the rendezvous store for twice the liveness window. */
static int cut_off_locked(trun_live *l, char *why, size_t len) {
  double silent = l->active && !l->release && l->world >= 2 ? trun_mono_s() - l->last_ok : 0;
  double window = 2 * l->interval * l->misses;
  if (silent <= window) return 0;
  snprintf(
      why, len,
      "no answer from the rendezvous store at %s:%d for %.1f s (twice the liveness window of %d heartbeats "
      "of %.1f s)",
      l->r->store_addr, l->r->store_port, silent, l->misses, l->interval);
  return 1;
}

/* Once an interval while a round's workers run (the heartbeat thread may be stuck in a request to the store
 * that does not answer; this one never waits on the store): CUT_OFF through the door while it lasts. Posted
 * under mu, so that it cannot reach the agent once the round is released (trun_rdzv_round_done). */
static void *judge_main(void *arg) {
  trun_live *l = arg;
  trun_rdzv_end *e = calloc(1, sizeof(*e));
  if (e == NULL) return NULL;
  pthread_mutex_lock(&l->mu);
  while (!l->stop) {
    struct timespec ts = abs_in(l->interval);
    pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    if (l->stop) break;
    memset(e, 0, sizeof(*e));
    e->node = -1;
    if (!cut_off_locked(l, e->cause, sizeof(e->cause))) continue;
    e->kind = TRUN_RDZV_END_CUT_OFF;
    trun__rdzv_door_post(l->r, e);
  }
  pthread_mutex_unlock(&l->mu);
  free(e);
  return NULL;
}

/* ---- the interface (rdzv_int.h) -------------------------------------------------------------------- */

int trun__rdzv_live_start(trun_rdzv *r) {
  if (r->cfg->standalone || r->cfg->max_nodes < 2 || r->store_port <= 0) return 0;
  trun_live *l = calloc(1, sizeof(*l));
  if (l == NULL) return -ENOMEM;
  l->r = r;
  l->fd = -1;
  l->interval = trun__rdzv_live_interval(r->cfg);
  l->misses = trun__rdzv_live_misses(r->cfg);
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  if (r->host) {
    int rc = trun_server_own_keys(trun_store_host_server(r->host), "/alive/", on_owner_gone, NULL);
    if (rc < 0)
      trun_warn("liveness: the store cannot own keys (%s): crashes are seen by heartbeats only",
                strerror(-rc));
  }
  /* The thread takes no process signals: the agent's loop handles them. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&l->thread, NULL, live_main, l);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
    trun_warn("liveness: cannot start its thread (%s): a lost node is seen only by the backend's keep-alive",
              strerror(rc));
    return 0;
  }
  l->started = 1;
  pthread_sigmask(SIG_SETMASK, &all, &old);
  l->judging = pthread_create(&l->judge, NULL, judge_main, l) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (!l->judging) trun_warn("liveness: cannot start its judge thread: a node cut off is not noticed here");
  r->live = l;
  return 0;
}

void trun__rdzv_live_round(trun_rdzv *r) {
  trun_live *l = r->live;
  /* A world of 1 still runs the backend's tick: c10d's keep-alive and its watch for nodes waiting to join
   * (torch's agent asks num_nodes_waiting at every monitor interval, whatever the world), else a joiner
   * takes the lone agent's heartbeat for stale and trains in a world of its own. */
  if (l == NULL || (r->info.group_world_size < 2 && r->be->tick == NULL)) return;
  trun__rdzv_door_round(r, r->info.round); /* the round this thread's fates belong to */
  pthread_mutex_lock(&l->mu);
  l->epoch++;
  snprintf(l->ks, sizeof(l->ks), "%s", r->key_space);
  trun__rdzv_agent_id(r, l->id, sizeof(l->id));
  l->g = r->info.group_rank;
  l->world = r->info.group_world_size;
  l->last_ok = trun_mono_s();
  l->active = 1;
  l->release = 0;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

/* Under l->mu: gives up on the store: the thread's request in flight fails at once and it connects no
 * more. */
static void abandon_locked(trun_live *l) {
  l->abandoned = 1;
  if (l->fd >= 0) shutdown(l->fd, SHUT_RDWR);
}

int trun_rdzv_round_done_within(trun_rdzv *r, int timeout_ms) {
  trun_live *l = r->live;
  if (l == NULL) return 0;
  pthread_mutex_lock(&l->mu);
  if (!l->active) {
    pthread_mutex_unlock(&l->mu);
    return 0;
  }
  l->release = 1;
  l->released = 0;
  pthread_cond_broadcast(&l->cv);
  /* Until the thread is out of the round: it may be inside the backend's tick (its state is the agent's
   * again afterwards). A store that does not answer holds it one request time-out at most, or timeout_ms,
   * after which its connection is abandoned (a cut-off agent calls trun_rdzv_abandon first). */
  int stuck = 0;
  struct timespec until = abs_in(timeout_ms / 1000.0);
  while (!l->released) {
    if (timeout_ms < 0 || stuck) {
      pthread_cond_wait(&l->cv, &l->mu);
    } else if (pthread_cond_timedwait(&l->cv, &l->mu, &until) == ETIMEDOUT && !l->released) {
      stuck = 1;
      abandon_locked(l);
    }
  }
  l->active = 0;
  pthread_mutex_unlock(&l->mu);
  return stuck;
}

void trun_rdzv_round_done(trun_rdzv *r) { trun_rdzv_round_done_within(r, -1); }

void trun_rdzv_abandon(trun_rdzv *r) {
  trun_live *l = r->live;
  if (l == NULL) return;
  pthread_mutex_lock(&l->mu);
  abandon_locked(l);
  pthread_mutex_unlock(&l->mu);
}

int trun_rdzv_live_ms(const trun_rdzv *r) { return r->live ? (int)(r->live->interval * 1000) : 0; }

void trun__rdzv_live_stop(trun_rdzv *r) {
  trun_live *l = r->live;
  if (l == NULL) return;
  pthread_mutex_lock(&l->mu);
  l->stop = 1;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  if (l->started) pthread_join(l->thread, NULL);
  if (l->judging) pthread_join(l->judge, NULL);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l);
  r->live = NULL;
}
