/* torchelastic's dynamic rendezvous: see c10d/dynamic.h. The decisions follow torch's _RendezvousJoinOp,
 * _RendezvousExitOp, _RendezvousKeepAliveOp, _RendezvousCloseOp and _DistributedRendezvousOpExecutor
 * (1.13; 2.3+ adds the redundancy list), docs/dev/torchrun-internals.md "Joining and leaving". */
#include "dynamic.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "store/store.h"

static const char *const action_names[] = {
    "SYNC",
    "FINISH",
    "ERROR_CLOSED",
    "ERROR_TIMEOUT",
    "ERROR_GRACEFUL_EXIT",
    "KEEP_ALIVE",
    "ADD_TO_PARTICIPANTS",
    "ADD_TO_WAIT_LIST",
    "ADD_TO_REDUNDANCY_LIST",
    "REMOVE_FROM_PARTICIPANTS",
    "REMOVE_FROM_WAIT_LIST",
    "REMOVE_FROM_REDUNDANCY_LIST",
    "MARK_RENDEZVOUS_COMPLETE",
    "MARK_RENDEZVOUS_CLOSED",
};

const char *trun_dyn_action_name(trun_dyn_action a) {
  return (unsigned)a < sizeof(action_names) / sizeof(action_names[0]) ? action_names[a] : "?";
}

/* ---- node lists ------------------------------------------------------------------------------------ */

static int node_eq(const trun_rdzv_node *a, const trun_rdzv_node *b) {
  return a->pid == b->pid && a->local_id == b->local_id && strcmp(a->addr, b->addr) == 0;
}

int trun_dyn_node_cmp(const trun_rdzv_node *a, const trun_rdzv_node *b) {
  /* Python compares str by code point; UTF-8 byte order is the same order. */
  int c = strcmp(a->addr, b->addr);
  if (c) return c < 0 ? -1 : 1;
  if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
  if (a->local_id != b->local_id) return a->local_id < b->local_id ? -1 : 1;
  return 0;
}

long trun_dyn_find_node(const trun_rdzv_node *l, size_t n, const trun_rdzv_node *me) {
  for (size_t i = 0; i < n; i++)
    if (node_eq(&l[i], me)) return (long)i;
  return -1;
}

long trun_dyn_find_entry(const trun_rdzv_entry *l, size_t n, const trun_rdzv_node *me) {
  for (size_t i = 0; i < n; i++)
    if (node_eq(&l[i].node, me)) return (long)i;
  return -1;
}

static int copy_node(trun_rdzv_node *dst, const trun_rdzv_node *src) {
  *dst = *src;
  dst->addr = strdup(src->addr);
  return dst->addr ? 0 : -ENOMEM;
}

static int node_add(trun_rdzv_node **l, size_t *n, const trun_rdzv_node *me) {
  if (trun_dyn_find_node(*l, *n, me) >= 0) return 0;
  trun_rdzv_node *nl = realloc(*l, (*n + 1) * sizeof(**l));
  if (nl == NULL) return -ENOMEM;
  *l = nl;
  if (copy_node(&nl[*n], me) < 0) return -ENOMEM;
  (*n)++;
  return 0;
}

static int node_remove(trun_rdzv_node *l, size_t *n, const trun_rdzv_node *me) {
  long i = trun_dyn_find_node(l, *n, me);
  if (i < 0) return 0;
  free(l[i].addr);
  memmove(&l[i], &l[i + 1], (*n - (size_t)i - 1) * sizeof(*l));
  (*n)--;
  return 1;
}

/* dict[node] = v: keeps the position of an existing key (Python dicts do). */
static int entry_set(trun_rdzv_entry **l, size_t *n, const trun_rdzv_node *me, int64_t v) {
  long i = trun_dyn_find_entry(*l, *n, me);
  if (i >= 0) {
    (*l)[i].v = v;
    return 0;
  }
  trun_rdzv_entry *nl = realloc(*l, (*n + 1) * sizeof(**l));
  if (nl == NULL) return -ENOMEM;
  *l = nl;
  if (copy_node(&nl[*n].node, me) < 0) return -ENOMEM;
  nl[*n].v = v;
  (*n)++;
  return 0;
}

static int entry_remove(trun_rdzv_entry *l, size_t *n, const trun_rdzv_node *me) {
  long i = trun_dyn_find_entry(l, *n, me);
  if (i < 0) return 0;
  free(l[i].node.addr);
  memmove(&l[i], &l[i + 1], (*n - (size_t)i - 1) * sizeof(*l));
  (*n)--;
  return 1;
}

/* ---- decisions ------------------------------------------------------------------------------------- */

static int should_keep_alive(const trun_dyn_ctx *c) {
  long i = trun_dyn_find_entry(c->st->heartbeats, c->st->n_heartbeats, c->me);
  if (i < 0) return 0;
  return c->st->heartbeats[i].v <= c->now_us - c->s->keep_alive_us;
}

trun_dyn_action trun_dyn_join_action(const trun_dyn_ctx *c) {
  const trun_rdzv_state *st = c->st;
  int spare = c->redundancy && trun_dyn_find_node(st->redundancy_list, st->n_redundancy, c->me) >= 0;
  if (st->closed) return spare ? TRUN_DYN_ERROR_GRACEFUL_EXIT : TRUN_DYN_ERROR_CLOSED;
  if (spare) {
    if (st->n_participants == (size_t)c->s->max_nodes)
      return should_keep_alive(c) ? TRUN_DYN_KEEP_ALIVE : TRUN_DYN_SYNC;
    return TRUN_DYN_REMOVE_FROM_REDUNDANCY_LIST;
  }
  int participant = trun_dyn_find_entry(st->participants, st->n_participants, c->me) >= 0;
  int waiting = trun_dyn_find_node(st->wait_list, st->n_wait, c->me) >= 0;
  if (st->complete && participant) return TRUN_DYN_FINISH;
  if (c->now_mono > c->deadline_mono) {
    if (c->now_mono <= c->deadline_mono + 5) { /* torch's rollback period */
      if (participant) return TRUN_DYN_REMOVE_FROM_PARTICIPANTS;
      if (waiting) return TRUN_DYN_REMOVE_FROM_WAIT_LIST;
    }
    return TRUN_DYN_ERROR_TIMEOUT;
  }
  size_t np = st->n_participants;
  if (st->complete) {
    if (np < (size_t)c->s->max_nodes) {
      if (!waiting) return TRUN_DYN_ADD_TO_WAIT_LIST;
    } else if (c->redundancy && !waiting) {
      return TRUN_DYN_ADD_TO_REDUNDANCY_LIST;
    }
  } else if (participant) {
    if (np >= (size_t)c->s->min_nodes && np <= (size_t)c->s->max_nodes && st->has_deadline &&
        st->deadline_us < c->now_us)
      return TRUN_DYN_MARK_COMPLETE;
  } else {
    return TRUN_DYN_ADD_TO_PARTICIPANTS;
  }
  return should_keep_alive(c) ? TRUN_DYN_KEEP_ALIVE : TRUN_DYN_SYNC;
}

trun_dyn_action trun_dyn_exit_action(const trun_dyn_ctx *c) {
  if (trun_dyn_find_entry(c->st->participants, c->st->n_participants, c->me) >= 0)
    return c->now_mono > c->deadline_mono ? TRUN_DYN_ERROR_TIMEOUT : TRUN_DYN_REMOVE_FROM_PARTICIPANTS;
  return TRUN_DYN_FINISH;
}

trun_dyn_action trun_dyn_keep_alive_action(const trun_dyn_ctx *c) {
  if (should_keep_alive(c))
    return c->now_mono > c->deadline_mono ? TRUN_DYN_ERROR_TIMEOUT : TRUN_DYN_KEEP_ALIVE;
  return TRUN_DYN_FINISH;
}

trun_dyn_action trun_dyn_close_action(const trun_dyn_ctx *c) {
  if (c->st->closed) return TRUN_DYN_FINISH;
  return c->now_mono > c->deadline_mono ? TRUN_DYN_ERROR_TIMEOUT : TRUN_DYN_MARK_CLOSED;
}

/* ---- mutations --------------------------------------------------------------------------------------- */

static void remove_participant_epilogue(trun_rdzv_state *st, const trun_dyn_settings *s) {
  if (st->complete) {
    if (st->n_participants == 0) {
      st->complete = false;
      st->round++;
    }
  } else if (st->n_participants < (size_t)s->min_nodes) {
    st->has_deadline = false;
  }
}

static int cmp_entry(const void *a, const void *b) {
  return trun_dyn_node_cmp(&((const trun_rdzv_entry *)a)->node, &((const trun_rdzv_entry *)b)->node);
}

static void mark_complete(trun_rdzv_state *st) {
  st->complete = true;
  st->has_deadline = false;
  /* rank = position in sorted order; the dict keeps its insertion order. */
  trun_rdzv_entry *sorted = malloc(st->n_participants * sizeof(*sorted) + 1);
  if (sorted == NULL) {
    /* Without memory for a copy, a quadratic count does the same. */
    for (size_t i = 0; i < st->n_participants; i++) {
      int64_t r = 0;
      for (size_t j = 0; j < st->n_participants; j++)
        if (trun_dyn_node_cmp(&st->participants[j].node, &st->participants[i].node) < 0) r++;
      st->participants[i].v = r;
    }
    return;
  }
  memcpy(sorted, st->participants, st->n_participants * sizeof(*sorted));
  qsort(sorted, st->n_participants, sizeof(*sorted), cmp_entry);
  for (size_t r = 0; r < st->n_participants; r++) {
    long i = trun_dyn_find_entry(st->participants, st->n_participants, &sorted[r].node);
    if (i >= 0) st->participants[i].v = (int64_t)r;
  }
  free(sorted);
}

int trun_dyn_apply(trun_rdzv_state *st, trun_dyn_action a, const trun_rdzv_node *me,
                   const trun_dyn_settings *s, int64_t now_us) {
  switch (a) {
    case TRUN_DYN_KEEP_ALIVE: return entry_set(&st->heartbeats, &st->n_heartbeats, me, now_us);
    case TRUN_DYN_ADD_TO_PARTICIPANTS: {
      node_remove(st->wait_list, &st->n_wait, me);
      int rc = entry_set(&st->participants, &st->n_participants, me, 0);
      if (rc == 0) rc = entry_set(&st->heartbeats, &st->n_heartbeats, me, now_us);
      if (rc < 0) return rc;
      if (st->n_participants == (size_t)s->min_nodes) {
        st->has_deadline = true;
        st->deadline_us = now_us + s->last_call_us;
      }
      if (st->n_participants == (size_t)s->max_nodes) mark_complete(st);
      return 0;
    }
    case TRUN_DYN_ADD_TO_WAIT_LIST: {
      node_remove(st->redundancy_list, &st->n_redundancy, me);
      int rc = node_add(&st->wait_list, &st->n_wait, me);
      return rc < 0 ? rc : entry_set(&st->heartbeats, &st->n_heartbeats, me, now_us);
    }
    case TRUN_DYN_ADD_TO_REDUNDANCY_LIST: {
      int rc = node_add(&st->redundancy_list, &st->n_redundancy, me);
      return rc < 0 ? rc : entry_set(&st->heartbeats, &st->n_heartbeats, me, now_us);
    }
    case TRUN_DYN_REMOVE_FROM_PARTICIPANTS:
      entry_remove(st->participants, &st->n_participants, me);
      entry_remove(st->heartbeats, &st->n_heartbeats, me);
      remove_participant_epilogue(st, s);
      return 0;
    case TRUN_DYN_REMOVE_FROM_WAIT_LIST:
      node_remove(st->wait_list, &st->n_wait, me);
      entry_remove(st->heartbeats, &st->n_heartbeats, me);
      return 0;
    case TRUN_DYN_REMOVE_FROM_REDUNDANCY_LIST:
      node_remove(st->redundancy_list, &st->n_redundancy, me);
      entry_remove(st->heartbeats, &st->n_heartbeats, me);
      return 0;
    case TRUN_DYN_MARK_COMPLETE: mark_complete(st); return 0;
    case TRUN_DYN_MARK_CLOSED: st->closed = true; return 0;
    default: return 0;
  }
}

int trun_dyn_sanitize(trun_rdzv_state *st, const trun_dyn_settings *s, int64_t now_us) {
  int64_t expire = now_us - s->keep_alive_us * s->keep_alive_max_attempt;
  int dropped = 0, participant_removed = 0;
  for (size_t i = 0; i < st->n_heartbeats;) {
    if (st->heartbeats[i].v >= expire) {
      i++;
      continue;
    }
    trun_rdzv_node dead = st->heartbeats[i].node; /* owned by the heartbeat entry until removed below */
    participant_removed |= entry_remove(st->participants, &st->n_participants, &dead);
    node_remove(st->wait_list, &st->n_wait, &dead);
    node_remove(st->redundancy_list, &st->n_redundancy, &dead);
    free(dead.addr);
    memmove(&st->heartbeats[i], &st->heartbeats[i + 1], (st->n_heartbeats - i - 1) * sizeof(*st->heartbeats));
    st->n_heartbeats--;
    dropped++;
  }
  if (participant_removed) remove_participant_epilogue(st, s);
  return dropped;
}

int trun_dyn_prune(trun_rdzv_state *st, const trun_rdzv_node *dead, size_t n_dead,
                   const trun_dyn_settings *s) {
  int dropped = 0, participant_removed = 0;
  for (size_t i = 0; i < n_dead; i++) {
    int p = entry_remove(st->participants, &st->n_participants, &dead[i]);
    participant_removed |= p;
    dropped += p + node_remove(st->wait_list, &st->n_wait, &dead[i]) +
               node_remove(st->redundancy_list, &st->n_redundancy, &dead[i]) +
               entry_remove(st->heartbeats, &st->n_heartbeats, &dead[i]);
  }
  if (participant_removed) remove_participant_epilogue(st, s);
  return dropped;
}

int trun_dyn_expected_in(const trun_rdzv_state *st, const trun_rdzv_node *expect, size_t n_expect,
                         const trun_dyn_settings *s, int64_t now_us) {
  if (n_expect == 0 || st->complete || st->closed || !st->has_deadline || st->deadline_us < now_us) return 0;
  if (st->n_wait || st->n_redundancy) return 0; /* a node that waits to join is on its way: not without it */
  if (st->n_participants < (size_t)s->min_nodes || st->n_participants > (size_t)s->max_nodes) return 0;
  for (size_t i = 0; i < n_expect; i++)
    if (trun_dyn_find_entry(st->participants, st->n_participants, &expect[i]) < 0) return 0;
  return 1;
}

/* ---- executor ---------------------------------------------------------------------------------------- */

int trun_dyn_init(trun_dyn *d, trun_client *c, const char *run_id, const char *addr, int64_t pid,
                  int64_t local_id, const trun_dyn_settings *s, const trun_rdzv_layout *hint) {
  memset(d, 0, sizeof(*d));
  d->c = c;
  d->s = *s;
  d->hint = *hint;
  d->last_sync = -1;
  snprintf(d->run_id, sizeof(d->run_id), "%s", run_id);
  snprintf(d->key, sizeof(d->key), "/torch.rendezvous.%s", run_id);
  d->me.addr = strdup(addr);
  d->me.pid = pid;
  d->me.local_id = local_id;
  if (d->me.addr == NULL) return -ENOMEM;
  trun_buf out = {0};
  int rc = trun_client_compare_set(c, trun_str(d->key), trun_str(""), trun_str(TRUN_DYN_SENTINEL), &out);
  d->ops++;
  d->bytes_out += strlen(d->key) + strlen(TRUN_DYN_SENTINEL);
  d->bytes_in += out.len;
  trun_buf_free(&out);
  if (rc < 0) snprintf(d->err, sizeof(d->err), "cannot create the state key %s: %s", d->key, strerror(-rc));
  return rc;
}

static void roster_free(trun_dyn *d) {
  for (size_t i = 0; i < d->n_roster; i++) free(d->roster[i].addr);
  free(d->roster);
  d->roster = NULL;
  d->n_roster = 0;
}

/* Keeps the participants of the round just joined. 0 or -ENOMEM. */
static int roster_save(trun_dyn *d) {
  roster_free(d);
  if (d->st.n_participants == 0) return 0;
  if ((d->roster = calloc(d->st.n_participants, sizeof(*d->roster))) == NULL) return -ENOMEM;
  for (size_t i = 0; i < d->st.n_participants; i++, d->n_roster++) {
    d->roster[i] = d->st.participants[i].node;
    if ((d->roster[i].addr = strdup(d->st.participants[i].node.addr)) == NULL) return -ENOMEM;
  }
  return 0;
}

static void nodes_free(trun_rdzv_node **l, size_t *n) {
  for (size_t i = 0; i < *n; i++) free((*l)[i].addr);
  free(*l);
  *l = NULL;
  *n = 0;
}

int trun_dyn_regroup(trun_dyn *d) {
  nodes_free(&d->expect, &d->n_expect);
  d->expect_since = trun_mono_s();
  for (size_t i = 0; i < d->n_roster; i++)
    if (trun_dyn_find_node(d->dead, d->n_dead, &d->roster[i]) < 0 &&
        node_add(&d->expect, &d->n_expect, &d->roster[i]) < 0)
      return -ENOMEM;
  return 0;
}

int trun_dyn_mark_dead(trun_dyn *d, const trun_rdzv_node *n) {
  if (trun_dyn_find_node(d->dead, d->n_dead, n) >= 0) return 1;
  if (node_add(&d->dead, &d->n_dead, n) < 0) return -ENOMEM;
  return trun_dyn_regroup(d);
}

void trun_dyn_free(trun_dyn *d) {
  roster_free(d);
  nodes_free(&d->dead, &d->n_dead);
  nodes_free(&d->expect, &d->n_expect);
  trun_rdzv_state_free(&d->st);
  free(d->token);
  free(d->me.addr);
  d->token = NULL;
  d->me.addr = NULL;
}

void trun_dyn_write_layout(const trun_dyn *d, trun_rdzv_layout *out) {
  *out = d->hint;
  if (d->lay.proto) {
    out->redundancy = d->lay.redundancy;
    out->proto = d->lay.proto;
  }
  if (d->lay.key != TRUN_RDZV_KEY_UNKNOWN) out->key = d->lay.key;
  if (d->lay.tz != TRUN_RDZV_TZ_UNKNOWN) out->tz = d->lay.tz;
}

/* Adopts the store's value v (base64 or the sentinel) as the local state. */
static int adopt(trun_dyn *d, const uint8_t *v, size_t n) {
  trun_rdzv_state st;
  trun_rdzv_layout lay;
  memset(&st, 0, sizeof(st));
  memset(&lay, 0, sizeof(lay));
  char *tok = NULL;
  if (!(n == strlen(TRUN_DYN_SENTINEL) && memcmp(v, TRUN_DYN_SENTINEL, n) == 0)) {
    trun_pickle_err perr;
    memset(&perr, 0, sizeof(perr));
    int rc = trun_rdzv_state_decode((const char *)v, n, &st, &lay, &perr);
    if (rc < 0) {
      snprintf(d->err, sizeof(d->err), "the rendezvous state under %s is not one torch writes (%s)", d->key,
               perr.msg[0] ? perr.msg : strerror(-rc));
      return rc == -ENOMEM ? rc : -EPROTO;
    }
    tok = malloc(n + 1);
    if (tok == NULL) {
      trun_rdzv_state_free(&st);
      return -ENOMEM;
    }
    memcpy(tok, v, n);
    tok[n] = '\0';
    d->lay = lay;
  }
  trun_rdzv_state_free(&d->st);
  d->st = st;
  free(d->token);
  d->token = tok;
  return 0;
}

int trun_dyn_sync(trun_dyn *d) {
  trun_buf out = {0};
  int has_set = 0, rc;
  if (d->dirty) {
    trun_rdzv_layout lay;
    trun_dyn_write_layout(d, &lay);
    char *b64 = NULL;
    size_t n = 0;
    if ((rc = trun_rdzv_state_encode(&d->st, &lay, &b64, &n)) < 0) {
      snprintf(d->err, sizeof(d->err), "cannot encode the rendezvous state: %s", strerror(-rc));
      return rc;
    }
    const char *expected = d->token ? d->token : TRUN_DYN_SENTINEL;
    rc = trun_client_compare_set(d->c, trun_str(d->key), trun_str(expected),
                                 (trun_slice){(const uint8_t *)b64, n}, &out);
    d->ops++;
    d->bytes_out += strlen(d->key) + strlen(expected) + n;
    if (rc == 0) has_set = out.len == n && memcmp(out.data, b64, n) == 0;
    free(b64);
  } else {
    if (d->last_sync >= 0 && d->last_sync >= trun_mono_s() - 1.0) return 0; /* cached, as torch */
    rc = trun_client_get(d->c, trun_str(d->key), &out, d->s.read_timeout_ms);
    d->ops++;
    d->bytes_out += strlen(d->key);
  }
  if (rc < 0) {
    snprintf(d->err, sizeof(d->err), "rendezvous store request on %s failed: %s", d->key, strerror(-rc));
    trun_buf_free(&out);
    return rc;
  }
  d->bytes_in += out.len;
  rc = adopt(d, out.data, out.len);
  trun_buf_free(&out);
  if (rc < 0) return rc;
  d->dirty = false;
  d->last_sync = trun_mono_s();
  int dropped = trun_dyn_sanitize(&d->st, &d->s, trun_wall_us());
  if (dropped) trun_debug("rendezvous %s: %d node(s) without a heartbeat dropped", d->run_id, dropped);
  if (d->n_dead && trun_dyn_prune(&d->st, d->dead, d->n_dead, &d->s) > 0) {
    trun_debug("rendezvous %s: the lost node(s) dropped from the state", d->run_id);
    d->dirty = true; /* written with this node's next action, or now if it has none */
  }
  return has_set;
}

typedef trun_dyn_action (*op_fn)(const trun_dyn_ctx *c);

/* trun_dyn_pause_ms: torch's agents sync about every second (a 1 s delay and a
 * 1 s state cache); a trun agent does so too, except where the state is about to change and a second is
 * pure waiting: a node of the last round while the next one regroups (after a worker's failure or a lost
 * node: every node it waits for is known and on its way) every 50 ms for TRUN_DYN_REGROUP_FAST_S, a spare
 * or a node in the wait list (it takes a lost node's place in the next round) every 100 ms. The short
 * pauses grow with the round (one more step per 64 participants, at most a second) so that a large fleet's
 * polls do not load the store: each is a GET of the whole state. */
int trun_dyn_pause_ms(const trun_dyn *d) {
  const trun_rdzv_state *st = &d->st;
  int participant = trun_dyn_find_entry(st->participants, st->n_participants, &d->me) >= 0;
  int spare = st->complete && !participant;
  int waiting = trun_dyn_find_node(st->wait_list, st->n_wait, &d->me) >= 0 ||
                trun_dyn_find_node(st->redundancy_list, st->n_redundancy, &d->me) >= 0;
  int regroup = d->n_expect && trun_mono_s() - d->expect_since < TRUN_DYN_REGROUP_FAST_S;
  int base = regroup ? 50 : spare || waiting ? 100 : 1000;
  long ms = (long)base * (long)(1 + st->n_participants / 64);
  return ms < 1000 ? (int)ms : 1000;
}

/* Sleeps trun_dyn_pause_ms between syncs, calling d->poll every 100 ms (at least once) and d->refresh about
 * once a second. A short pause is its own sync interval: the next sync reads the store, past the 1 s cache.
 */
static int pause_sync(trun_dyn *d) {
  int ms = trun_dyn_pause_ms(d);
  for (int left = ms; left > 0; left -= 100) {
    int slice = left < 100 ? left : 100;
    struct timespec ts = {0, (long)slice * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (d->poll && d->poll(d->poll_arg)) return -EINTR;
  }
  double now = trun_mono_s();
  if (d->refresh && (d->last_refresh <= 0 || now - d->last_refresh >= 0.95)) {
    d->last_refresh = now;
    d->refresh(d->refresh_arg);
  }
  if (ms < 1000) d->last_sync = -1;
  return 0;
}

/* torch's _DistributedRendezvousOpExecutor.run. timeout_us restarts the deadline after leaving the
 * redundancy list (2.3+). */
static int run_op(trun_dyn *d, op_fn op, double *deadline, int64_t timeout_us) {
  for (;;) {
    int rc = trun_dyn_sync(d);
    if (rc < 0) return rc;
    if (op == trun_dyn_join_action &&
        trun_dyn_expected_in(&d->st, d->expect, d->n_expect, &d->s, trun_wall_us())) {
      /* Every node of the last round not known lost is back, and none waits to join: no one else comes. */
      trun_debug("rendezvous %s round %lld: every node of the last round is back: ending the last call now",
                 d->run_id, (long long)d->st.round);
      d->st.deadline_us = trun_wall_us() - 1;
      d->dirty = true;
      continue;
    }
    trun_dyn_ctx c = {.st = &d->st,
                      .me = &d->me,
                      .s = &d->s,
                      .now_mono = trun_mono_s(),
                      .deadline_mono = *deadline,
                      .now_us = trun_wall_us()};
    trun_rdzv_layout lay;
    trun_dyn_write_layout(d, &lay);
    c.redundancy = lay.redundancy;
    trun_dyn_action a = op(&c);
    switch (a) {
      case TRUN_DYN_FINISH: return 0;
      case TRUN_DYN_ERROR_CLOSED:
        snprintf(d->err, sizeof(d->err), "the rendezvous '%s' is closed (the job ended); use a new --rdzv-id",
                 d->run_id);
        return -ECANCELED;
      case TRUN_DYN_ERROR_GRACEFUL_EXIT:
        snprintf(d->err, sizeof(d->err), "the rendezvous '%s' closed while this node was a spare", d->run_id);
        return -ESHUTDOWN;
      case TRUN_DYN_ERROR_TIMEOUT:
        snprintf(d->err, sizeof(d->err), "the rendezvous '%s' timed out (round %lld, %zu of min %d node(s))",
                 d->run_id, (long long)d->st.round, d->st.n_participants, d->s.min_nodes);
        return -ETIMEDOUT;
      case TRUN_DYN_SYNC:
        if ((rc = pause_sync(d)) < 0) return rc;
        continue;
      default: break;
    }
    trun_debug("rendezvous %s round %lld: %s", d->run_id, (long long)d->st.round, trun_dyn_action_name(a));
    if ((rc = trun_dyn_apply(&d->st, a, &d->me, &d->s, trun_wall_us())) < 0) return rc;
    if (a == TRUN_DYN_REMOVE_FROM_REDUNDANCY_LIST && timeout_us > 0)
      *deadline = trun_mono_s() + (double)timeout_us / 1e6;
    d->dirty = true;
  }
}

int trun_dyn_next(trun_dyn *d, int *rank, int *world, int64_t *round) {
  if (d->st.round == 0 && d->n_roster == 0) {
    /* torch: uniform(0, 0.3) s before round 0, so that agents started together do not collide. Not again
     * for a node that ran round 0 (torch checks only the round): a recovery round would pay it for nothing,
     * as it does not in any later round. */
    uint64_t seed = (uint64_t)trun_wall_us() ^ ((uint64_t)d->me.pid << 20) ^ (uint64_t)(uintptr_t)d;
    if (seed == 0) seed = 1;
    struct timespec ts = {0, (long)(trun_rng_next(&seed) % 300) * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  /* A round after one this node was in: its nodes are on their way back (a worker failed, or a peer's). */
  if (d->n_roster > 0 && d->n_expect == 0 && trun_dyn_regroup(d) < 0) return -ENOMEM;
  double deadline = trun_mono_s() + (double)d->s.join_timeout_us / 1e6;
  int rc = run_op(d, trun_dyn_exit_action, &deadline, 0);
  if (rc == 0) rc = run_op(d, trun_dyn_join_action, &deadline, d->s.join_timeout_us);
  if (rc < 0) return rc;
  long i = trun_dyn_find_entry(d->st.participants, d->st.n_participants, &d->me);
  if (i < 0) return -EPROTO;
  *rank = (int)d->st.participants[i].v;
  *world = (int)d->st.n_participants;
  *round = d->st.round;
  nodes_free(&d->expect, &d->n_expect); /* this round is formed: the next one waits as usual */
  return roster_save(d);
}

int trun_dyn_keep_alive(trun_dyn *d) {
  double deadline = trun_mono_s() + (double)d->s.heartbeat_timeout_us / 1e6;
  return run_op(d, trun_dyn_keep_alive_action, &deadline, 0);
}

int trun_dyn_num_waiting(trun_dyn *d, int fresh) {
  if (fresh && !d->dirty) d->last_sync = -1;
  int rc = trun_dyn_sync(d);
  return rc < 0 ? rc : (int)d->st.n_wait;
}

int trun_dyn_num_new_waiting(trun_dyn *d, int fresh) {
  int rc = trun_dyn_num_waiting(d, fresh);
  if (rc <= 0) return rc;
  int fresh_nodes = 0;
  for (size_t i = 0; i < d->st.n_wait; i++)
    if (trun_dyn_find_node(d->roster, d->n_roster, &d->st.wait_list[i]) < 0) fresh_nodes++;
  return fresh_nodes;
}

int trun_dyn_close(trun_dyn *d) {
  double deadline = trun_mono_s() + (double)d->s.close_timeout_us / 1e6;
  return run_op(d, trun_dyn_close_action, &deadline, 0);
}
