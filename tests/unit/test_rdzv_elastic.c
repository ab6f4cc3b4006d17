/* The elastic backends' protocol cores: torchelastic's decision table (agent/rdzv/c10d/dynamic.c) case by
 * case, the state mutations and dead-node pruning, and both executors (c10d and the `trun` backend) with many
 * agents as threads against an in-process store: distinct ranks, sorted order, last call, late joiners,
 * --node-rank hints, corrupt states, and the survivors of a lost node regrouping without the last call (issue
 * 22).
 */
#include "agent/rdzv/c10d/dynamic.h"
#include "agent/rdzv/trun/fast.h"
#include "client.h"
#include "unit.h"

static trun_dyn_settings settings(int min, int max) {
  trun_dyn_settings s = {.min_nodes = min,
                         .max_nodes = max,
                         .join_timeout_us = 600000000,
                         .last_call_us = 30000000,
                         .close_timeout_us = 30000000,
                         .heartbeat_timeout_us = 5000000,
                         .keep_alive_us = 5000000,
                         .keep_alive_max_attempt = 3,
                         .read_timeout_ms = 60000};
  return s;
}

static trun_rdzv_node node(const char *addr, int64_t pid) {
  trun_rdzv_node n = {(char *)addr, pid, 0};
  return n;
}

#define NOW_US INT64_C(1700000000000000)

static trun_dyn_action decide(const trun_rdzv_state *st, const trun_rdzv_node *me, const trun_dyn_settings *s,
                              bool redundancy, double now, double deadline) {
  trun_dyn_ctx c = {.st = st,
                    .me = me,
                    .s = s,
                    .redundancy = redundancy,
                    .now_mono = now,
                    .deadline_mono = deadline,
                    .now_us = NOW_US};
  return trun_dyn_join_action(&c);
}

/* ---- the decision table ----------------------------------------------------------------------- */

START_TEST(test_join_table) {
  trun_dyn_settings s = settings(2, 3);
  trun_rdzv_state st;
  memset(&st, 0, sizeof(st));
  trun_rdzv_node a = node("a", 1), b = node("b", 2), c = node("c", 3), d = node("d", 4);

  /* empty, open: join */
  ck_assert_int_eq(decide(&st, &a, &s, true, 10, 100), TRUN_DYN_ADD_TO_PARTICIPANTS);
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_ADD_TO_PARTICIPANTS, &a, &s, NOW_US), 0);
  ck_assert_int_eq(st.n_participants, 1);
  ck_assert(!st.has_deadline);
  /* one of min 2: wait (sync), heartbeat not yet due */
  ck_assert_int_eq(decide(&st, &a, &s, true, 10, 100), TRUN_DYN_SYNC);
  /* the second reaches min: last call starts */
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_ADD_TO_PARTICIPANTS, &b, &s, NOW_US), 0);
  ck_assert(st.has_deadline);
  ck_assert_int_eq(st.deadline_us, NOW_US + s.last_call_us);
  /* before the last call ends: sync; after it: complete */
  ck_assert_int_eq(decide(&st, &a, &s, true, 10, 100), TRUN_DYN_SYNC);
  st.deadline_us = NOW_US - 1;
  ck_assert_int_eq(decide(&st, &a, &s, true, 10, 100), TRUN_DYN_MARK_COMPLETE);
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_MARK_COMPLETE, &a, &s, NOW_US), 0);
  ck_assert(st.complete && !st.has_deadline);
  ck_assert_int_eq(decide(&st, &a, &s, true, 10, 100), TRUN_DYN_FINISH);
  /* a late node: wait list (room below max) */
  ck_assert_int_eq(decide(&st, &c, &s, true, 10, 100), TRUN_DYN_ADD_TO_WAIT_LIST);
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_ADD_TO_WAIT_LIST, &c, &s, NOW_US), 0);
  ck_assert_int_eq(st.n_wait, 1);
  ck_assert_int_eq(decide(&st, &c, &s, true, 10, 100), TRUN_DYN_SYNC);
  /* past the join deadline, within the 5 s rollback: leave the wait list; later: time out */
  ck_assert_int_eq(decide(&st, &c, &s, true, 102, 100), TRUN_DYN_REMOVE_FROM_WAIT_LIST);
  ck_assert_int_eq(decide(&st, &c, &s, true, 106, 100), TRUN_DYN_ERROR_TIMEOUT);
  /* full round (3 of max 3): 2.3+ puts a newcomer in the redundancy list, 1.13 just polls */
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_REMOVE_FROM_WAIT_LIST, &c, &s, NOW_US), 0);
  st.complete = false;
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_ADD_TO_PARTICIPANTS, &c, &s, NOW_US), 0);
  ck_assert(st.complete); /* max reached: complete at once */
  ck_assert_int_eq(decide(&st, &d, &s, true, 10, 100), TRUN_DYN_ADD_TO_REDUNDANCY_LIST);
  ck_assert_int_eq(decide(&st, &d, &s, false, 10, 100), TRUN_DYN_SYNC);
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_ADD_TO_REDUNDANCY_LIST, &d, &s, NOW_US), 0);
  ck_assert_int_eq(decide(&st, &d, &s, true, 10, 100), TRUN_DYN_SYNC);
  /* closed: participants get ClosedError, a spare torch's graceful exit */
  st.closed = true;
  ck_assert_int_eq(decide(&st, &a, &s, true, 10, 100), TRUN_DYN_ERROR_CLOSED);
  ck_assert_int_eq(decide(&st, &d, &s, true, 10, 100), TRUN_DYN_ERROR_GRACEFUL_EXIT);
  st.closed = false;
  /* a participant leaves: the spare takes its place */
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_REMOVE_FROM_PARTICIPANTS, &b, &s, NOW_US), 0);
  ck_assert_int_eq(decide(&st, &d, &s, true, 10, 100), TRUN_DYN_REMOVE_FROM_REDUNDANCY_LIST);
  trun_rdzv_state_free(&st);
}
END_TEST

START_TEST(test_ranks_sorted) {
  trun_dyn_settings s = settings(4, 4);
  trun_rdzv_state st;
  memset(&st, 0, sizeof(st));
  trun_rdzv_node n[4] = {node("node-b", 7), node("node-a", 9), node("node-b", 3), node("node-a", 10)};
  for (int i = 0; i < 4; i++)
    ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_ADD_TO_PARTICIPANTS, &n[i], &s, NOW_US), 0);
  ck_assert(st.complete);
  /* (addr, pid, local_id): node-a/9, node-a/10, node-b/3, node-b/7; the dict keeps join order */
  int64_t want[4] = {3, 0, 2, 1};
  for (int i = 0; i < 4; i++) {
    ck_assert_str_eq(st.participants[i].node.addr, n[i].addr);
    ck_assert_int_eq(st.participants[i].v, want[i]);
  }
  trun_rdzv_state_free(&st);
}
END_TEST

START_TEST(test_sanitize) {
  trun_dyn_settings s = settings(2, 4);
  trun_rdzv_state st;
  memset(&st, 0, sizeof(st));
  trun_rdzv_node a = node("a", 1), b = node("b", 2), c = node("c", 3);
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_ADD_TO_PARTICIPANTS, &a, &s, NOW_US), 0);
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_ADD_TO_PARTICIPANTS, &b, &s, NOW_US - 16000000), 0);
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_ADD_TO_WAIT_LIST, &c, &s, NOW_US - 16000000), 0);
  /* b and c last beat 16 s ago: beyond 5 s x 3 */
  ck_assert_int_eq(trun_dyn_sanitize(&st, &s, NOW_US), 2);
  ck_assert_int_eq(st.n_participants, 1);
  ck_assert_int_eq(st.n_wait, 0);
  ck_assert_int_eq(st.n_heartbeats, 1);
  ck_assert(!st.has_deadline); /* below min again: the last call is off */
  ck_assert_int_eq(trun_dyn_sanitize(&st, &s, NOW_US), 0);
  /* a complete round that loses its last participant moves to the next round */
  st.complete = true;
  ck_assert_int_eq(trun_dyn_sanitize(&st, &s, NOW_US + 16000000), 1);
  ck_assert(!st.complete);
  ck_assert_int_eq(st.round, 1);
  trun_rdzv_state_free(&st);
}
END_TEST

/* Recovery (issue 22): a node known lost is pruned as an expired one would be, and a round that holds every
 * survivor of the last one may end its last call at once. */
START_TEST(test_prune_and_expect) {
  trun_dyn_settings s = settings(2, 3);
  trun_rdzv_state st;
  memset(&st, 0, sizeof(st));
  trun_rdzv_node a = node("a", 1), b = node("b", 2), c = node("c", 3);
  for (int i = 0; i < 3; i++) {
    trun_rdzv_node *n = i == 0 ? &a : i == 1 ? &b : &c;
    ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_ADD_TO_PARTICIPANTS, n, &s, NOW_US), 0);
  }
  ck_assert(st.complete);
  /* c is lost: pruned; the complete round keeps a and b */
  ck_assert_int_eq(trun_dyn_prune(&st, &c, 1, &s), 2); /* participant + heartbeat */
  ck_assert_int_eq(st.n_participants, 2);
  ck_assert_int_eq(trun_dyn_prune(&st, &c, 1, &s), 0);
  /* the survivors leave the round to rejoin: the last one out moves it on */
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_REMOVE_FROM_PARTICIPANTS, &a, &s, NOW_US), 0);
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_REMOVE_FROM_PARTICIPANTS, &b, &s, NOW_US), 0);
  ck_assert(!st.complete);
  ck_assert_int_eq(st.round, 1);
  trun_rdzv_node survivors[2] = {a, b}, all[3] = {a, b, c};
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_ADD_TO_PARTICIPANTS, &a, &s, NOW_US), 0);
  ck_assert(!trun_dyn_expected_in(&st, survivors, 2, &s, NOW_US)); /* b not back, below MIN */
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_ADD_TO_PARTICIPANTS, &b, &s, NOW_US), 0);
  ck_assert(st.has_deadline); /* MIN reached: the last call runs */
  ck_assert(trun_dyn_expected_in(&st, survivors, 2, &s, NOW_US));
  ck_assert(!trun_dyn_expected_in(&st, all, 3, &s, NOW_US));                   /* c is not back */
  ck_assert(!trun_dyn_expected_in(&st, survivors, 0, &s, NOW_US));             /* nothing expected */
  ck_assert(!trun_dyn_expected_in(&st, survivors, 2, &s, st.deadline_us + 1)); /* already over */
  trun_rdzv_node d = node("d", 4);
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_ADD_TO_WAIT_LIST, &d, &s, NOW_US), 0);
  ck_assert(!trun_dyn_expected_in(&st, survivors, 2, &s, NOW_US)); /* d waits to join: not without it */
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_REMOVE_FROM_WAIT_LIST, &d, &s, NOW_US), 0);
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_ADD_TO_REDUNDANCY_LIST, &d, &s, NOW_US), 0);
  ck_assert(!trun_dyn_expected_in(&st, survivors, 2, &s, NOW_US)); /* d is a spare on its way in */
  ck_assert_int_eq(trun_dyn_apply(&st, TRUN_DYN_REMOVE_FROM_REDUNDANCY_LIST, &d, &s, NOW_US), 0);
  ck_assert(trun_dyn_expected_in(&st, survivors, 2, &s, NOW_US));
  st.deadline_us = NOW_US - 1; /* what the executor writes */
  ck_assert_int_eq(decide(&st, &a, &s, true, 10, 100), TRUN_DYN_MARK_COMPLETE);
  trun_rdzv_state_free(&st);
}
END_TEST

static void set_me(trun_dyn *d, const char *addr, int64_t pid) {
  free(d->me.addr);
  d->me = node(addr, pid);
  d->me.addr = strdup(addr);
  ck_assert_ptr_nonnull(d->me.addr);
}

/* d freed and set up anew: settings s, this node (addr, pid), the last round's roster a (pid 1) and b (2). */
static void fresh_with_roster(trun_dyn *d, trun_dyn_settings s, const char *addr, int64_t pid) {
  trun_dyn_free(d);
  memset(d, 0, sizeof(*d));
  d->s = s;
  set_me(d, addr, pid);
  d->roster = calloc(2, sizeof(*d->roster));
  ck_assert_ptr_nonnull(d->roster);
  d->roster[0] = node("a", 1), d->roster[1] = node("b", 2);
  d->roster[0].addr = strdup("a"), d->roster[1].addr = strdup("b");
  d->n_roster = 2;
}

/* The pause between a join's syncs: torch's second, shorter where the state is about to change. */
START_TEST(test_pause) {
  trun_dyn d;
  memset(&d, 0, sizeof(d));
  d.s = settings(2, 3);
  trun_rdzv_node a = node("a", 1), b = node("b", 2), c = node("c", 3), e = node("e", 5);
  set_me(&d, "e", 5);
  ck_assert_int_eq(trun_dyn_pause_ms(&d), 1000); /* nothing known: torch's pace */
  ck_assert_int_eq(trun_dyn_apply(&d.st, TRUN_DYN_ADD_TO_PARTICIPANTS, &e, &d.s, NOW_US), 0);
  ck_assert_int_eq(trun_dyn_pause_ms(&d), 1000); /* a participant of an open round */
  trun_rdzv_state_free(&d.st);
  memset(&d.st, 0, sizeof(d.st));
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(trun_dyn_apply(&d.st, TRUN_DYN_ADD_TO_PARTICIPANTS,
                                    i == 0   ? &a
                                    : i == 1 ? &b
                                             : &c,
                                    &d.s, NOW_US),
                     0);
  ck_assert(d.st.complete);
  ck_assert_int_eq(trun_dyn_pause_ms(&d), 100); /* outside a complete round: a spare */
  ck_assert_int_eq(trun_dyn_apply(&d.st, TRUN_DYN_ADD_TO_REDUNDANCY_LIST, &e, &d.s, NOW_US), 0);
  ck_assert_int_eq(trun_dyn_pause_ms(&d), 100); /* on the redundancy list */
  set_me(&d, "a", 1);
  ck_assert_int_eq(trun_dyn_pause_ms(&d), 1000); /* a participant of the complete round */
  ck_assert_int_eq(trun_dyn_mark_dead(&d, &c), 0);
  ck_assert_int_eq(trun_dyn_pause_ms(&d), 1000); /* no roster: no survivors expected */
  fresh_with_roster(&d, settings(1, 3), "a", 1);
  ck_assert_int_eq(trun_dyn_regroup(&d), 0); /* after a worker's failure, no node lost: both come back */
  ck_assert_int_eq(d.n_expect, 2);
  ck_assert_int_eq(trun_dyn_pause_ms(&d), 50);
  fresh_with_roster(&d, settings(2, 200), "z", 9);
  ck_assert_int_eq(trun_dyn_mark_dead(&d, &b), 0);
  ck_assert_int_eq(d.n_expect, 1);
  ck_assert_int_eq(trun_dyn_pause_ms(&d), 50); /* regrouping with known survivors */
  d.expect_since -= TRUN_DYN_REGROUP_FAST_S + 1;
  ck_assert_int_eq(trun_dyn_pause_ms(&d), 1000); /* b is not back in time: torch's pace */
  ck_assert_int_eq(trun_dyn_regroup(&d), 0);     /* the next round after b is gone: a alone */
  ck_assert_int_eq(d.n_expect, 1);
  ck_assert_int_eq(trun_dyn_pause_ms(&d), 50);
  char addr[70][16];
  for (int i = 0; i < 70; i++) { /* 70 participants: one step longer */
    snprintf(addr[i], sizeof(addr[i]), "n%d", i);
    trun_rdzv_node n = node(addr[i], i);
    ck_assert_int_eq(trun_dyn_apply(&d.st, TRUN_DYN_ADD_TO_PARTICIPANTS, &n, &d.s, NOW_US), 0);
  }
  ck_assert_int_eq(trun_dyn_pause_ms(&d), 100);
  trun_dyn_free(&d);
}
END_TEST

/* ---- executors against a store ------------------------------------------------------------------ */

typedef struct {
  int port, id, n, min, fast, hint, nproc, rc, rank, world, base, total, delay_ms;
  char addr[32];
  int64_t round;
} worker_arg;

static trun_client *connect_raw(int port) {
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = "127.0.0.1";
  o.port = port;
  o.key_prefix = "";
  o.timeout_ms = 60000;
  trun_client *c = NULL;
  ck_assert_int_eq(trun_client_connect(&o, &c), 0);
  return c;
}

static void *worker(void *p) {
  worker_arg *w = p;
  if (w->delay_ms) usleep((useconds_t)w->delay_ms * 1000);
  trun_client *c = connect_raw(w->port);
  if (w->fast) {
    trun_fast_settings s = {.min_nodes = w->min,
                            .max_nodes = w->n,
                            .join_timeout_ms = 60000,
                            .last_call_ms = 300,
                            .keep_alive_ms = 1000,
                            .keep_alive_max_attempt = 3};
    trun_fast f;
    trun_fast_init(&f, c, "job", w->addr, 100 + w->id, w->nproc, w->hint, &s);
    w->rc = trun_fast_join(&f);
    w->rank = f.group_rank, w->world = f.group_world, w->base = f.base_rank, w->total = f.world_size;
    w->round = f.round;
  } else {
    trun_dyn_settings s = settings(w->min, w->n);
    s.last_call_us = 300000;
    trun_rdzv_layout lay = {TRUN_RDZV_KEY_ADDR, true, TRUN_RDZV_TZ_AWARE, 4};
    trun_dyn d;
    w->rc = trun_dyn_init(&d, c, "job", w->addr, 100 + w->id, 0, &s, &lay);
    if (w->rc == 0) w->rc = trun_dyn_next(&d, &w->rank, &w->world, &w->round);
    trun_dyn_free(&d);
  }
  trun_client_close(c);
  return NULL;
}

static void run_agents(int port, worker_arg *w, int n) {
  pthread_t th[64];
  for (int i = 0; i < n; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, worker, &w[i]), 0);
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  (void)port;
}

static void agents(worker_arg *w, int n, int port, int fast, int min, int max) {
  for (int i = 0; i < n; i++) {
    memset(&w[i], 0, sizeof(w[i]));
    w[i].port = port, w[i].id = i, w[i].n = max, w[i].min = min, w[i].fast = fast, w[i].hint = -1;
    w[i].nproc = 1 + i % 3;
    snprintf(w[i].addr, sizeof(w[i].addr), "host-%02d", (i * 7) % n);
  }
}

/* every agent: distinct group ranks in (addr) order, the same world, prefix sums of nproc as base ranks */
static void check_world(worker_arg *w, int n) {
  int seen[64] = {0}, total = 0;
  for (int i = 0; i < n; i++) {
    ck_assert_msg(w[i].rc == 0, "agent %d: %s", i, strerror(-w[i].rc));
    ck_assert_int_eq(w[i].world, n);
    ck_assert(w[i].rank >= 0 && w[i].rank < n && !seen[w[i].rank]);
    seen[w[i].rank] = 1;
    total += w[i].nproc;
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (strcmp(w[i].addr, w[j].addr) < 0) ck_assert_int_lt(w[i].rank, w[j].rank);
  for (int i = 0; w[0].fast && i < n; i++) {
    int base = 0;
    for (int j = 0; j < n; j++)
      if (w[j].rank < w[i].rank) base += w[j].nproc;
    ck_assert_int_eq(w[i].base, base);
    ck_assert_int_eq(w[i].total, total);
  }
}

START_TEST(test_c10d_agents) {
  unit_server us;
  trun_server_opts o;
  trun_server_opts_default(&o);
  ck_assert_int_gt(unit_server_start(&us, &o), 0);
  worker_arg w[12];
  agents(w, 12, us.port, 0, 12, 12);
  run_agents(us.port, w, 12);
  check_world(w, 12);
  unit_server_stop(&us);
}
END_TEST

START_TEST(test_fast_agents) {
  unit_server us;
  trun_server_opts o;
  trun_server_opts_default(&o);
  ck_assert_int_gt(unit_server_start(&us, &o), 0);
  worker_arg w[40];
  agents(w, 40, us.port, 1, 40, 40);
  run_agents(us.port, w, 40);
  check_world(w, 40);
  unit_server_stop(&us);
}
END_TEST

/* min 2, max 4, three agents: the last call (300 ms) commits a world of 3 */
START_TEST(test_fast_last_call) {
  unit_server us;
  trun_server_opts o;
  trun_server_opts_default(&o);
  ck_assert_int_gt(unit_server_start(&us, &o), 0);
  worker_arg w[3];
  agents(w, 3, us.port, 1, 2, 4);
  run_agents(us.port, w, 3);
  for (int i = 0; i < 3; i++) w[i].n = 3; /* the world it should settle on */
  check_world(w, 3);
  unit_server_stop(&us);
}
END_TEST

START_TEST(test_c10d_last_call) {
  unit_server us;
  trun_server_opts o;
  trun_server_opts_default(&o);
  ck_assert_int_gt(unit_server_start(&us, &o), 0);
  worker_arg w[3];
  agents(w, 3, us.port, 0, 2, 4);
  run_agents(us.port, w, 3);
  for (int i = 0; i < 3; i++) w[i].n = 3;
  check_world(w, 3);
  unit_server_stop(&us);
}
END_TEST

/* --node-rank hints: given ranks kept, the others fill the gaps in address order */
START_TEST(test_fast_hints) {
  unit_server us;
  trun_server_opts o;
  trun_server_opts_default(&o);
  ck_assert_int_gt(unit_server_start(&us, &o), 0);
  worker_arg w[4];
  agents(w, 4, us.port, 1, 4, 4);
  w[0].hint = 3; /* host-00 would be rank 0 by address */
  w[2].hint = 0;
  run_agents(us.port, w, 4);
  ck_assert_int_eq(w[0].rank, 3);
  ck_assert_int_eq(w[2].rank, 0);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(w[i].rc, 0);
  /* host-03 (w[1]) and host-01 (w[3]) fill ranks 1, 2 by address */
  ck_assert_int_eq(w[3].rank, 1);
  ck_assert_int_eq(w[1].rank, 2);
  unit_server_stop(&us);
}
END_TEST

/* a fifth agent after a full round of 4 (max 4): a spare; once the round ends (a member left), it joins
 * the next round */
START_TEST(test_fast_late_joiner) {
  unit_server us;
  trun_server_opts o;
  trun_server_opts_default(&o);
  ck_assert_int_gt(unit_server_start(&us, &o), 0);
  worker_arg w[3];
  agents(w, 3, us.port, 1, 2, 3);
  w[2].delay_ms = 1500; /* after the last call of 300 ms committed a world of 2 */
  pthread_t late;
  ck_assert_int_eq(pthread_create(&late, NULL, worker, &w[2]), 0);
  run_agents(us.port, w, 2);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(w[i].world, 2);
  /* the late agent ends round 0 ("member:join"); the two rejoin like agents after stopping their workers */
  trun_client *c = connect_raw(us.port);
  trun_buf v = {0};
  ck_assert_int_eq(trun_client_get(c, trun_str("/trun/job/r0/end"), &v, 30000), 0);
  ck_assert(v.len == 11 && memcmp(v.data, "member:join", 11) == 0);
  trun_buf_free(&v);
  trun_client_close(c);
  for (int i = 0; i < 2; i++) w[i].delay_ms = 0;
  run_agents(us.port, w, 2);
  pthread_join(late, NULL);
  ck_assert_int_eq(w[2].rc, 0);
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(w[i].round, 1);
    w[i].n = 3;
  }
  check_world(w, 3);
  unit_server_stop(&us);
}
END_TEST

/* Three agents form round 0; one is lost (what liveness writes); the two survivors rejoin and form a world of
 * 2 at once although the last call is ten minutes and the join time-out one: without the recovery rule they
 * would time out. */
typedef struct {
  trun_client *c;
  trun_fast f;
  trun_dyn d;
  int fast, rc, rank, world;
  int64_t round;
} survivor;

static void *survivor_join(void *p) {
  survivor *v = p;
  if (v->fast) {
    v->rc = trun_fast_join(&v->f);
    v->rank = v->f.group_rank, v->world = v->f.group_world, v->round = v->f.round;
  } else {
    v->rc = trun_dyn_next(&v->d, &v->rank, &v->world, &v->round);
  }
  return NULL;
}

static void join_all(survivor *v, int n) {
  pthread_t th[3];
  for (int i = 0; i < n; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, survivor_join, &v[i]), 0);
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < n; i++) ck_assert_msg(v[i].rc == 0, "agent %d: %s", i, strerror(-v[i].rc));
}

static void survivors_regroup(int fast) {
  unit_server us;
  trun_server_opts o;
  trun_server_opts_default(&o);
  ck_assert_int_gt(unit_server_start(&us, &o), 0);
  survivor v[3];
  memset(v, 0, sizeof(v));
  const char *addr[3] = {"host-a", "host-b", "host-c"};
  for (int i = 0; i < 3; i++) {
    v[i].fast = fast;
    v[i].c = connect_raw(us.port);
    if (fast) {
      trun_fast_settings s = {.min_nodes = 2,
                              .max_nodes = 3,
                              .join_timeout_ms = 60000,
                              .last_call_ms = 600000,
                              .keep_alive_ms = 1000,
                              .keep_alive_max_attempt = 3};
      trun_fast_init(&v[i].f, v[i].c, "job", addr[i], 100 + i, 1, -1, &s);
    } else {
      trun_dyn_settings s = settings(2, 3);
      s.join_timeout_us = 60000000;
      s.last_call_us = 600000000;
      trun_rdzv_layout lay = {TRUN_RDZV_KEY_ADDR, true, TRUN_RDZV_TZ_AWARE, 4};
      ck_assert_int_eq(trun_dyn_init(&v[i].d, v[i].c, "job", addr[i], 100 + i, 0, &s, &lay), 0);
    }
  }
  join_all(v, 3); /* max 3: complete at once */
  for (int i = 0; i < 3; i++) ck_assert_int_eq(v[i].world, 3);
  /* host-c is lost */
  if (fast) {
    int64_t n;
    ck_assert_int_eq(trun_client_add(v[0].c, trun_str("/trun/job/r0/lost_n"), 1, &n), 0);
  } else {
    trun_rdzv_node lost = node("host-c", 102);
    for (int i = 0; i < 2; i++) ck_assert_int_eq(trun_dyn_mark_dead(&v[i].d, &lost), 0);
    ck_assert_int_eq(v[0].d.n_expect, 2);
  }
  join_all(v, 2);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(v[i].world, 2);
    ck_assert_int_eq(v[i].round, 1);
  }
  ck_assert_int_ne(v[0].rank, v[1].rank);
  for (int i = 0; i < 3; i++) {
    if (!fast) trun_dyn_free(&v[i].d);
    trun_client_close(v[i].c);
  }
  unit_server_stop(&us);
}

START_TEST(test_fast_survivors) { survivors_regroup(1); }
END_TEST

START_TEST(test_c10d_survivors) { survivors_regroup(0); }
END_TEST

/* a state that is not a pickle torch writes: a clear error, no crash */
START_TEST(test_c10d_corrupt_state) {
  unit_server us;
  trun_server_opts o;
  trun_server_opts_default(&o);
  ck_assert_int_gt(unit_server_start(&us, &o), 0);
  trun_client *c = connect_raw(us.port);
  ck_assert_int_eq(trun_client_set(c, trun_str("/torch.rendezvous.job"), trun_str("gASVAAAAAAAAAAB9lC4=")),
                   0);
  trun_dyn_settings s = settings(1, 1);
  trun_rdzv_layout lay = {TRUN_RDZV_KEY_ADDR, true, TRUN_RDZV_TZ_AWARE, 4};
  trun_dyn d;
  ck_assert_int_eq(trun_dyn_init(&d, c, "job", "a", 1, 0, &s, &lay), 0);
  int rank, world;
  int64_t round;
  ck_assert_int_eq(trun_dyn_next(&d, &rank, &world, &round), -EPROTO);
  ck_assert_msg(strstr(d.err, "not one torch writes") != NULL, "%s", d.err);
  trun_dyn_free(&d);
  trun_client_close(c);
  unit_server_stop(&us);
}
END_TEST

static Suite *rdzv_suite(void) {
  Suite *s = suite_create("rdzv_elastic");
  TCase *tc = tcase_create("decisions");
  tcase_add_test(tc, test_join_table);
  tcase_add_test(tc, test_ranks_sorted);
  tcase_add_test(tc, test_sanitize);
  tcase_add_test(tc, test_prune_and_expect);
  tcase_add_test(tc, test_pause);
  suite_add_tcase(s, tc);
  tc = tcase_create("store");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_c10d_agents);
  tcase_add_test(tc, test_fast_agents);
  tcase_add_test(tc, test_fast_last_call);
  tcase_add_test(tc, test_c10d_last_call);
  tcase_add_test(tc, test_fast_hints);
  tcase_add_test(tc, test_fast_late_joiner);
  tcase_add_test(tc, test_c10d_corrupt_state);
  tcase_add_test(tc, test_fast_survivors);
  tcase_add_test(tc, test_c10d_survivors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return unit_run(rdzv_suite()); }
