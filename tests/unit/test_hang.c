/* agent/hang/: the NCCL RAS client, the RAS JSON reader, the hang detector and the flight-recorder reader.
 * Fixtures (tests/fixtures/hang/): our captures of three real hangs on 4 x H100, NCCL 2.28.9, torch 2.11
 * (hang_worker.py): `sleep` (rank 3 sleeps, ranks 0-2 enter all-reduce 51), `mismatch` (rank 3 broadcasts,
 * ranks 0-2 all-reduce), `spin` (rank 3 spins in a GPU kernel before the all-reduce: RAS counts launches, so
 * every count is equal). RAS answers at 6/12/20 s after the start; each rank's flight-recorder dump.
 * The detector is fed them with made-up times; the client is run against tests/fakes/ras_server.py (real
 * sockets, every mode); finding a job's RAS address (ras_find.c) on a fake /proc. Paths: TRUN_REPO (default:
 * the current directory). */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base.h"
#include "hang.h"

static const char *repo(void) {
  const char *r = getenv("TRUN_REPO");
  return r && *r ? r : ".";
}

static char *slurp(const char *rel, size_t *n) {
  char p[PATH_MAX];
  snprintf(p, sizeof(p), "%s/tests/fixtures/hang/%s", repo(), rel);
  FILE *f = fopen(p, "rb");
  ck_assert_msg(f != NULL, "%s: %s", p, strerror(errno));
  char *buf = malloc(16 << 20);
  ck_assert_ptr_nonnull(buf);
  *n = fread(buf, 1, (16 << 20) - 1, f);
  buf[*n] = '\0';
  fclose(f);
  return buf;
}

static trun_ras_snapshot *load(const char *name) {
  size_t n;
  char *j = slurp(name, &n), err[256];
  trun_ras_snapshot *s = NULL;
  int rc = trun_ras_parse(j, n, &s, err, sizeof(err));
  ck_assert_msg(rc == 0, "%s: %s", name, err);
  free(j);
  return s;
}

/* Feeds snapshot file name at time t; returns the number of hung communicators, fills v. */
static int feed(trun_hang_detector *d, const char *name, double t, trun_hang_verdict *v) {
  trun_ras_snapshot *s = load(name);
  int k = trun_hang_feed(d, s, t, v);
  trun_ras_snapshot_free(s);
  return k;
}

/* ---- the reader --------------------------------------------------------------------------------- */

START_TEST(parse_captures) {
  trun_ras_snapshot *s = load("ras-mismatch-12s.json");
  ck_assert_str_eq(s->nccl_version, "2.28.9");
  ck_assert_uint_eq(s->ncomms, 1);
  trun_ras_comm *c = &s->comms[0];
  ck_assert_str_eq(c->hash, "0x326111d269af5c41");
  ck_assert_str_eq(c->secondary, "0x9b1399de3431483f:0x1255b1d6d73c7611");
  ck_assert_int_eq(c->size, 4);
  ck_assert_uint_eq(c->nranks, 4);
  ck_assert_uint_eq(c->npresent, 4);
  for (int r = 0; r < 4; r++) {
    ck_assert_int_eq(c->ranks[r].rank, r);
    ck_assert_int_eq(c->ranks[r].pid, 1021 + r);
    ck_assert_int_eq(c->ranks[r].cuda_dev, r);
    ck_assert_str_eq(c->ranks[r].host, "192.0.2.2");
    ck_assert_uint_eq(c->ranks[r].nkinds, 5);
    ck_assert(!c->ranks[r].missing && !c->ranks[r].abort_flag);
  }
  ck_assert_str_eq(c->ranks[3].counts[0].name, "Broadcast");
  ck_assert_uint_eq(c->ranks[3].counts[0].n, 1);
  ck_assert_str_eq(c->ranks[3].counts[4].name, "AllReduce");
  ck_assert_uint_eq(c->ranks[3].counts[4].n, 50);
  ck_assert_uint_eq(c->ranks[0].counts[4].n, 51);
  trun_ras_snapshot_free(s);
}
END_TEST

/* The sleep capture with one substitution: (from, to) replaced once; the parse must fail naming want. */
static void lie(const char *from, const char *to, int want_rc, const char *want) {
  size_t n;
  char *j = slurp("ras-sleep-20s.json", &n), err[256];
  char *at = strstr(j, from);
  ck_assert_msg(at != NULL, "fixture lacks %s", from);
  size_t fl = strlen(from), tl = strlen(to);
  char *out = malloc(n + tl + 1);
  memcpy(out, j, (size_t)(at - j));
  memcpy(out + (at - j), to, tl);
  strcpy(out + (at - j) + tl, at + fl);
  trun_ras_snapshot *s = (trun_ras_snapshot *)1;
  int rc = trun_ras_parse(out, strlen(out), &s, err, sizeof(err));
  ck_assert_msg(rc == want_rc, "%s -> %s: rc %d (%s)", from, to, rc, err);
  ck_assert_ptr_null(s);
  ck_assert_msg(strstr(err, want) != NULL, "%s -> %s: error \"%s\" lacks \"%s\"", from, to, err, want);
  ck_assert_msg(strncmp(err, "NCCL RAS answer: ", 17) == 0, "%s", err);
  free(out);
  free(j);
}

/* NCCL 2.28.9's answer when a rank stops answering (2 x H200, the mismatch hang: rank 1 broadcasts, rank 0
 * all-reduces): its "missing_ranks" record lacks a comma, so the answer is no JSON as sent. The reader puts
 * the comma back and the detector names the missing rank; valid answers and other garbage are not "mended".
 */
START_TEST(parse_nccl_missing_comma) {
  trun_ras_snapshot *s = load("ras-h200x2-mismatch-missing.json");
  ck_assert_uint_eq(s->ncomms, 1);
  trun_ras_comm *c = &s->comms[0];
  ck_assert_int_eq(c->size, 2);
  ck_assert_uint_eq(c->npresent, 1);
  ck_assert_uint_eq(c->nranks, 2);
  ck_assert(c->ranks[1].missing && c->ranks[1].unresponsive);
  ck_assert_int_eq(c->ranks[1].rank, 1);
  ck_assert_int_eq(c->ranks[1].pid, 1235);
  trun_hang_detector *d = trun_hang_new(15);
  trun_hang_verdict v;
  ck_assert_int_eq(trun_hang_feed(d, s, 0, &v), 0);
  ck_assert_int_eq(trun_hang_feed(d, s, 15, &v), 1);
  ck_assert_uint_eq(v.comm[0].nculprits, 1);
  ck_assert_int_eq(v.comm[0].culprit[0].rank, 1);
  ck_assert_int_eq(v.comm[0].culprit[0].pid, 1235);
  trun_hang_verdict_clear(&v);
  trun_hang_free(d);
  trun_ras_snapshot_free(s);
  /* Not every broken answer is mended: a comma missing inside one line, or a value cut off, stays an error.
   */
  const char *bad[] = {"{\"communicators\": [] \"x\": 1}", "{\n  \"communicators\": [\n",
                       "{\n  \"a\": tru\n  \"b\": 1\n}"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char err[256];
    trun_ras_snapshot *t = NULL;
    ck_assert_int_eq(trun_ras_parse(bad[i], strlen(bad[i]), &t, err, sizeof(err)), -EINVAL);
    ck_assert_ptr_null(t);
    ck_assert_ptr_nonnull(strstr(err, "not JSON"));
  }
}
END_TEST

START_TEST(parse_lies) {
  lie("\"rank\": 3,", "\"rank\": 4,", -EINVAL, "\"rank\" = 4, outside 0..3");
  lie("\"rank\": 3,", "\"rank\": 2,", -EINVAL, "rank 2 listed twice");
  lie("\"rank\": 3,", "\"rank\": -1,", -EINVAL, "outside 0..3");
  lie("\"ranks_count\": 4", "\"ranks_count\": 3", -EINVAL, "ranks_count 3");
  lie("\"size\": 4", "\"size\": 3", -EINVAL, "ranks_count");
  lie("\"size\": 4", "\"size\": 0", -EINVAL, "\"size\" = 0");
  lie("\"size\": 4", "\"size\": \"4\"", -EINVAL, "\"size\" is not an integer");
  lie("\"AllReduce\": 50", "\"AllReduce\": -50", -EINVAL, "count of AllReduce");
  lie("\"AllReduce\": 50", "\"AllReduce\": 5.0", -EINVAL, "count of AllReduce");
  lie("\"AllReduce\": 50", "\"AllReduce\": 50, \"AllReduce\": 51", -EINVAL, "not JSON");
  lie("\"AllReduce\": 50", "\"All Reduce\": 50", -EINVAL, "not a word");
  lie("\"host\": \"192.0.2.2\",\n          \"pid\": 907",
      "\"host\": \"192.0.2.2\\u001b[31m\",\n          \"pid\": 907", -EINVAL, "control");
  lie("\"pid\": 907", "\"pid\": 99999999999", -EINVAL, "\"pid\"");
  lie("\"communicators_count\": 1", "\"communicators_count\": 2", -EINVAL, "communicators_count 2");
  lie("\"communicators\": [", "\"communicators\": {\"x\": [", -EINVAL, "not JSON");
  lie("\"collective_counts\": {\n            \"Broadcast\": 0,\n            \"Reduce\": 0,\n            "
      "\"AllGather\": 0,"
      "\n            \"ReduceScatter\": 0,\n            \"AllReduce\": 50",
      "\"collective_counts\": "
      "{\"a\":1,\"b\":1,\"c\":1,\"d\":1,\"e\":1,\"f\":1,\"g\":1,\"h\":1,\"i\":1,\"j\":1,\"k\":1,"
      "\"l\":1,\"m\":1,\"n\":1,\"o\":1,\"p\":1,\"q\":1",
      -E2BIG, "17 collective kinds");
  lie("\"missing_ranks\": [\n\n      ]", "\"missing_ranks\": [{\"rank\": 0}]", -EINVAL,
      "missing_ranks_count 0");
  lie("\"missing_ranks\": [\n\n      ]", "\"missing_ranks\": 7", -EINVAL,
      "\"missing_ranks\" is not an array");
  lie("\"ranks\": [", "\"ranks\": 3, \"x\": [", -EINVAL, "\"ranks\" is not an array");

  /* Whole answers: not JSON, not an object, too big, a communicator twice, a long host. */
  char err[256];
  trun_ras_snapshot *s = NULL;
  ck_assert_int_eq(trun_ras_parse("{ this is not json", 18, &s, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "not JSON"));
  ck_assert_int_eq(trun_ras_parse("[1,2]", 5, &s, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "not a JSON object"));
  ck_assert_int_eq(trun_ras_parse("{}", TRUN_RAS_MAX_ANSWER + 1, &s, err, sizeof(err)), -E2BIG);
  const char *twice =
      "{\"communicators\": [{\"hash\": \"0x1\", \"size\": 1, \"ranks\": []},"
      "{\"hash\": \"0x1\", \"size\": 1, \"ranks\": []}]}";
  ck_assert_int_eq(trun_ras_parse(twice, strlen(twice), &s, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "communicator 0x1 listed twice"));
  char longhost[400];
  snprintf(
      longhost, sizeof(longhost),
      "{\"communicators\": [{\"hash\": \"0x1\", \"size\": 1, \"ranks\": [{\"rank\": 0, \"host\": \"%0100d\","
      " \"collective_counts\": {}}]}]}",
      0);
  ck_assert_int_eq(trun_ras_parse(longhost, strlen(longhost), &s, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "\"host\" is 100 bytes"));
  /* Deep nesting: jansson's own depth limit, a clean error. */
  static char deep[40000];
  memset(deep, '[', sizeof(deep) - 1);
  ck_assert_int_eq(trun_ras_parse(deep, sizeof(deep) - 1, &s, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_null(s);
  /* An empty job: no communicators is an answer. */
  const char *none = "{\"communicators_count\": 0, \"communicators\": []}";
  ck_assert_int_eq(trun_ras_parse(none, strlen(none), &s, err, sizeof(err)), 0);
  ck_assert_uint_eq(s->ncomms, 0);
  trun_ras_snapshot_free(s);
}
END_TEST

/* ---- the detector ------------------------------------------------------------------------------- */

START_TEST(detect_sleep_names_rank3) {
  trun_hang_detector *d = trun_hang_new(0);
  trun_hang_verdict v;
  ck_assert_int_eq(feed(d, "ras-sleep-12s.json", 12, &v), 0);
  ck_assert_int_eq(feed(d, "ras-sleep-20s.json", 20, &v), 0); /* frozen 8 s: under the window */
  ck_assert_int_eq(feed(d, "ras-sleep-20s.json", 26.9, &v), 0);
  ck_assert_int_eq(feed(d, "ras-sleep-20s.json", 27, &v), 1);
  ck_assert_uint_eq(v.nfresh, 1);
  trun_hang_comm *h = &v.comm[0];
  ck_assert_str_eq(h->hash, "0xe1fe929aaf4e2ffe");
  ck_assert_int_eq(h->size, 4);
  ck_assert_double_eq_tol(h->frozen_s, 15, 1e-9);
  ck_assert_uint_eq(h->nculprits, 1);
  ck_assert_int_eq(h->culprit[0].rank, 3);
  ck_assert_int_eq(h->culprit[0].pid, 907);
  ck_assert_int_eq(h->culprit[0].cuda_dev, 3);
  ck_assert_str_eq(h->culprit[0].host, "192.0.2.2");
  ck_assert_str_eq(h->culprit[0].why, "launched AllReduce up to 50 (others 51)");
  ck_assert_str_eq(h->wait_kind, "AllReduce");
  ck_assert_uint_eq(h->wait_n, 51);
  ck_assert_uint_eq(h->nwaiters, 3);
  ck_assert_str_eq(h->line,
                   "communicator 0xe1fe929aaf4e2ffe (4 ranks): counts frozen for 15 s: rank 3 (pid 907 on "
                   "192.0.2.2, GPU 3) launched AllReduce up to 50 (others 51); 3 ranks wait in AllReduce 51");
  trun_hang_verdict_clear(&v);
  /* Still hung later: reported again, no longer fresh. */
  ck_assert_int_eq(feed(d, "ras-sleep-20s.json", 40, &v), 1);
  ck_assert_uint_eq(v.nfresh, 0);
  ck_assert_int_eq(v.comm[0].culprit[0].rank, 3);
  trun_hang_verdict_clear(&v);
  /* The job gone (nothing answers): forgotten; the same answer again starts a new window. */
  trun_hang_reset(d);
  ck_assert_int_eq(feed(d, "ras-sleep-20s.json", 41, &v), 0);
  ck_assert_int_eq(feed(d, "ras-sleep-20s.json", 56, &v), 1);
  ck_assert_uint_eq(v.nfresh, 1);
  trun_hang_verdict_clear(&v);
  trun_hang_free(d);
}
END_TEST

START_TEST(detect_mismatch_names_rank3) {
  trun_hang_detector *d = trun_hang_new(15);
  trun_hang_verdict v;
  ck_assert_int_eq(feed(d, "ras-mismatch-6s.json", 6, &v), 0);
  ck_assert_int_eq(feed(d, "ras-mismatch-12s.json", 12, &v), 0);
  ck_assert_int_eq(feed(d, "ras-mismatch-20s.json", 20, &v), 0);
  ck_assert_int_eq(feed(d, "ras-mismatch-20s.json", 27, &v), 1);
  trun_hang_comm *h = &v.comm[0];
  ck_assert_uint_eq(h->nculprits, 1);
  ck_assert_int_eq(h->culprit[0].rank, 3);
  ck_assert_int_eq(h->culprit[0].pid, 1024);
  ck_assert_str_eq(h->culprit[0].why,
                   "launched Broadcast up to 1 (others 0), AllReduce up to 50 (others 51)");
  ck_assert_str_eq(h->wait_kind, "AllReduce");
  ck_assert_uint_eq(h->wait_n, 51);
  ck_assert_uint_eq(h->nwaiters, 3);
  trun_hang_verdict_clear(&v);
  trun_hang_free(d);
}
END_TEST

START_TEST(detect_spin_not_named) {
  /* Every rank launched AllReduce 51 (rank 3's GPU spins before it): equal frozen counts, as an idle job. */
  trun_hang_detector *d = trun_hang_new(15);
  trun_hang_verdict v;
  ck_assert_int_eq(feed(d, "ras-spin-12s.json", 12, &v), 0);
  ck_assert(trun_hang_quiet_s(d) == 0);
  for (double t = 20; t < 3600; t += 20) ck_assert_int_eq(feed(d, "ras-spin-20s.json", t, &v), 0);
  ck_assert_msg(trun_hang_quiet_s(d) == 3580 - 12, "%f",
                trun_hang_quiet_s(d));                          /* equal, unchanged since 12 */
  ck_assert_int_eq(feed(d, "ras-sleep-20s.json", 3600, &v), 0); /* another job's counts: moved */
  ck_assert(trun_hang_quiet_s(d) == 0);
  trun_hang_reset(d);
  ck_assert(trun_hang_quiet_s(d) == 0);
  trun_hang_free(d);
}
END_TEST

/* A 4-rank snapshot built by hand: counts[r] AllReduce counts; missing: rank 3 listed as missing. */
static void mk(trun_ras_snapshot *s, trun_ras_comm *c, trun_ras_rank *r, const uint64_t *counts,
               int missing) {
  memset(s, 0, sizeof(*s));
  memset(c, 0, sizeof(*c));
  memset(r, 0, 4 * sizeof(*r));
  snprintf(c->hash, sizeof(c->hash), "0xabc");
  c->size = 4;
  c->nranks = 4;
  c->npresent = missing ? 3 : 4;
  c->ranks = r;
  for (int i = 0; i < 4; i++) {
    r[i].rank = i;
    r[i].pid = 100 + i;
    r[i].cuda_dev = i;
    snprintf(r[i].host, sizeof(r[i].host), "10.0.0.%d", i / 2);
    if (missing && i == 3) {
      r[i].missing = r[i].unresponsive = true;
      continue;
    }
    r[i].nkinds = 2;
    snprintf(r[i].counts[0].name, sizeof(r[i].counts[0].name), "AllGather");
    r[i].counts[0].n = 7;
    snprintf(r[i].counts[1].name, sizeof(r[i].counts[1].name), "AllReduce");
    r[i].counts[1].n = counts[i];
  }
  s->ncomms = 1;
  s->comms = c;
}

START_TEST(detect_healthy_and_idle_never) {
  trun_hang_detector *d = trun_hang_new(15);
  trun_hang_verdict v;
  trun_ras_snapshot s;
  trun_ras_comm c;
  trun_ras_rank r[4];
  /* Advancing: every snapshot some ranks are a launch ahead of others, and the counts move. */
  for (int i = 0; i < 500; i++) {
    uint64_t n = 1000 + (uint64_t)i, counts[4] = {n + 1, n, n + 1, n + (i % 2)};
    mk(&s, &c, r, counts, 0);
    ck_assert_int_eq(trun_hang_feed(d, &s, i * 5.0, &v), 0);
  }
  /* Idle with equal counts, for an hour. */
  uint64_t eq[4] = {42, 42, 42, 42};
  for (int i = 0; i < 720; i++) {
    mk(&s, &c, r, eq, 0);
    ck_assert_int_eq(trun_hang_feed(d, &s, 2500 + i * 5.0, &v), 0);
  }
  /* Time going backwards is taken as the last time: never a hang by itself. */
  uint64_t behind[4] = {43, 43, 43, 42};
  mk(&s, &c, r, behind, 0);
  ck_assert_int_eq(trun_hang_feed(d, &s, 10000, &v), 0);
  ck_assert_int_eq(trun_hang_feed(d, &s, 1, &v), 0);
  ck_assert_int_eq(trun_hang_feed(d, &s, 10014.5, &v), 0);
  ck_assert_int_eq(trun_hang_feed(d, &s, 10015, &v), 1);
  ck_assert_int_eq(v.comm[0].culprit[0].rank, 3);
  trun_hang_verdict_clear(&v);
  /* It moves again: no longer hung. */
  uint64_t moved[4] = {44, 44, 44, 44};
  mk(&s, &c, r, moved, 0);
  ck_assert_int_eq(trun_hang_feed(d, &s, 10020, &v), 0);
  trun_hang_free(d);
  /* Bad windows. */
  ck_assert_ptr_null(trun_hang_new(0.5));
  ck_assert_ptr_null(trun_hang_new(-1));
  ck_assert_ptr_null(trun_hang_new(1e9));
}
END_TEST

START_TEST(detect_unresponsive_rank) {
  trun_hang_detector *d = trun_hang_new(15);
  trun_hang_verdict v;
  trun_ras_snapshot s;
  trun_ras_comm c;
  trun_ras_rank r[4];
  uint64_t counts[4] = {51, 51, 51, 0};
  mk(&s, &c, r, counts, 1);
  ck_assert_int_eq(trun_hang_feed(d, &s, 0, &v), 0);
  ck_assert_int_eq(trun_hang_feed(d, &s, 15, &v), 1);
  trun_hang_comm *h = &v.comm[0];
  ck_assert_uint_eq(h->nculprits, 1);
  ck_assert_int_eq(h->culprit[0].rank, 3);
  ck_assert_int_eq(h->culprit[0].pid, 103);
  ck_assert_str_eq(h->culprit[0].host, "10.0.0.1");
  ck_assert_str_eq(h->culprit[0].why, "missing from RAS (its process does not answer)");
  ck_assert_uint_eq(h->nwaiters, 3);
  trun_hang_verdict_clear(&v);
  /* Rank 2 unaccounted for too (neither present nor missing): said in the line. */
  c.nranks = 2;
  c.npresent = 2;
  ck_assert_int_eq(trun_hang_feed(d, &s, 16, &v), 0); /* changed: a new window */
  ck_assert_int_eq(trun_hang_feed(d, &s, 31, &v), 1);
  ck_assert_ptr_nonnull(strstr(v.comm[0].line, "2 ranks not reported by RAS"));
  trun_hang_verdict_clear(&v);
  trun_hang_free(d);
}
END_TEST

START_TEST(detect_ahead_and_tie) {
  trun_hang_detector *d = trun_hang_new(15);
  trun_hang_verdict v;
  trun_ras_snapshot s;
  trun_ras_comm c;
  trun_ras_rank r[4];
  /* One rank ahead, three behind: the three are named (they never launched what rank 0 waits in). */
  uint64_t ahead[4] = {52, 51, 51, 51};
  mk(&s, &c, r, ahead, 0);
  trun_hang_feed(d, &s, 0, &v);
  ck_assert_int_eq(trun_hang_feed(d, &s, 20, &v), 1);
  ck_assert_uint_eq(v.comm[0].nculprits, 3);
  ck_assert_int_eq(v.comm[0].culprit[0].rank, 1);
  ck_assert_uint_eq(v.comm[0].nwaiters, 1);
  ck_assert_uint_eq(v.comm[0].wait_n, 52);
  ck_assert_ptr_nonnull(strstr(v.comm[0].line, "1 rank wait in AllReduce 52"));
  trun_hang_verdict_clear(&v);
  /* Two against two, each ahead in another kind: no majority, every rank named. */
  mk(&s, &c, r, ahead, 0);
  for (int i = 0; i < 4; i++) {
    r[i].counts[0].n = i < 2 ? 8 : 7;
    r[i].counts[1].n = i < 2 ? 51 : 52;
  }
  ck_assert_int_eq(trun_hang_feed(d, &s, 21, &v), 0);
  ck_assert_int_eq(trun_hang_feed(d, &s, 36, &v), 1);
  ck_assert_uint_eq(v.comm[0].nculprits, 4);
  ck_assert_uint_eq(v.comm[0].nwaiters, 0);
  ck_assert_str_eq(v.comm[0].culprit[0].why,
                   "ranks disagree on the order of collectives and no group is the largest");
  trun_hang_verdict_clear(&v);
  trun_hang_free(d);
}
END_TEST

START_TEST(detect_many_ranks_mismatch) {
  /* 20,000 ranks, every one behind in some kind: 2/3 launched AllReduce 1, 1/3 Broadcast 1 instead. The
   * minority is named, the majority waits in AllReduce 1; the analysis sorts, it never compares every pair
   * of ranks (a lying answer of this size took minutes that way). */
  enum { N = 20000 };
  trun_ras_rank *r = calloc(N, sizeof(*r));
  ck_assert_ptr_nonnull(r);
  for (int i = 0; i < N; i++) {
    r[i].rank = i;
    r[i].pid = i;
    snprintf(r[i].host, sizeof(r[i].host), "h");
    r[i].nkinds = 2;
    snprintf(r[i].counts[0].name, sizeof(r[i].counts[0].name), "AllReduce");
    snprintf(r[i].counts[1].name, sizeof(r[i].counts[1].name), "Broadcast");
    r[i].counts[0].n = i % 3 != 2;
    r[i].counts[1].n = i % 3 == 2;
  }
  trun_ras_comm c = {.hash = "0xbig", .size = N, .nranks = N, .npresent = N, .ranks = r};
  trun_ras_snapshot s = {.ncomms = 1, .comms = &c};
  trun_hang_detector *d = trun_hang_new(15);
  trun_hang_verdict v;
  ck_assert_int_eq(trun_hang_feed(d, &s, 0, &v), 0);
  ck_assert_int_eq(trun_hang_feed(d, &s, 15, &v), 1);
  ck_assert_uint_eq(v.comm[0].nculprits, N / 3);
  ck_assert_uint_eq(v.comm[0].nwaiters, N - N / 3);
  ck_assert_int_eq(v.comm[0].culprit[0].rank, 2);
  ck_assert_str_eq(v.comm[0].culprit[0].why,
                   "launched AllReduce up to 0 (others 1), Broadcast up to 1 (others 0)");
  ck_assert_str_eq(v.comm[0].wait_kind, "AllReduce");
  ck_assert_uint_eq(v.comm[0].wait_n, 1);
  ck_assert_ptr_nonnull(strstr(v.comm[0].line, "and 6662 more ranks"));
  trun_hang_verdict_clear(&v);
  trun_hang_free(d);
  free(r);
}
END_TEST

/* ---- the flight-recorder reader --------------------------------------------------------------------- */

static trun_fr_dump *fr(const char *name) {
  char p[PATH_MAX], err[512];
  snprintf(p, sizeof(p), "%s/tests/fixtures/hang/flight-recorder/%s", repo(), name);
  trun_fr_dump *d = NULL;
  int rc = trun_fr_load_file(p, &d, err, sizeof(err));
  ck_assert_msg(rc == 0, "%s", err);
  return d;
}

START_TEST(fr_dumps) {
  /* sleep, rank 3: it never entered all-reduce 51; 50 completed. */
  trun_fr_dump *d = fr("sleep_rank_3");
  ck_assert_str_eq(d->version, "2.10");
  ck_assert_str_eq(d->comm_lib_version, "2.28.9");
  ck_assert_uint_eq(d->nentries, 50);
  ck_assert_int_eq(d->last_enqueued, 50);
  ck_assert_int_eq(d->last_started, -1);
  ck_assert_int_eq(d->last_completed, 50);
  ck_assert(d->completed.present);
  ck_assert_int_eq(d->completed.seq, 50);
  ck_assert_str_eq(d->completed.name, "nccl:all_reduce");
  ck_assert_str_eq(d->completed.pg, "0");
  ck_assert(!d->started.present && !d->scheduled.present);
  ck_assert_str_eq(d->last_state, "completed");
  ck_assert_int_eq(d->last.seq, 50);
  ck_assert_uint_eq(d->nframes, 3);
  ck_assert_str_eq(d->frames[0].name, "all_reduce");
  ck_assert_ptr_nonnull(strstr(d->frames[0].file, "torch/distributed/distributed_c10d.py"));
  ck_assert_int_eq(d->frames[0].line, 3068);
  ck_assert_str_eq(d->frames[2].name, "<module>");
  ck_assert_ptr_nonnull(strstr(d->frames[2].file, "hang_worker.py"));
  ck_assert_int_eq(d->frames[2].line, 8);
  trun_fr_free(d);
  /* sleep, ranks 0-2: all-reduce 51 scheduled, never completed. */
  for (int r = 0; r < 3; r++) {
    char name[32];
    snprintf(name, sizeof(name), "sleep_rank_%d", r);
    d = fr(name);
    ck_assert_uint_eq(d->nentries, 51);
    ck_assert_int_eq(d->last_enqueued, 51);
    ck_assert_int_eq(d->last_completed, 50);
    ck_assert_int_eq(d->completed.seq, 50);
    ck_assert(d->scheduled.present);
    ck_assert_int_eq(d->scheduled.seq, 51);
    ck_assert_str_eq(d->scheduled.name, "nccl:all_reduce");
    ck_assert_str_eq(d->last_state, "scheduled");
    ck_assert_str_eq(d->frames[0].name, "all_reduce");
    ck_assert_int_eq(d->frames[2].line, 15);
    trun_fr_free(d);
  }
  /* mismatch, rank 3: its 51st collective is a broadcast; the others' an all-reduce. */
  d = fr("mismatch_rank_3");
  ck_assert_int_eq(d->scheduled.seq, 51);
  ck_assert_str_eq(d->scheduled.name, "nccl:broadcast");
  ck_assert_str_eq(d->last.name, "nccl:broadcast");
  ck_assert_str_eq(d->frames[0].name, "broadcast");
  trun_fr_free(d);
  d = fr("mismatch_rank_0");
  ck_assert_str_eq(d->scheduled.name, "nccl:all_reduce");
  trun_fr_free(d);
  /* spin: every rank scheduled all-reduce 51 (no start times: timing was off). */
  for (int r = 0; r < 4; r++) {
    char name[32];
    snprintf(name, sizeof(name), "spin_rank_%d", r);
    d = fr(name);
    ck_assert_int_eq(d->scheduled.seq, 51);
    ck_assert_str_eq(d->scheduled.name, "nccl:all_reduce");
    ck_assert(!d->started.present);
    ck_assert_int_eq(d->last_completed, 50);
    trun_fr_free(d);
  }
}
END_TEST

START_TEST(fr_timing_p2p) {
  /* Made by Python's pickle (protocol 2): a duration (BINFLOAT, as with TORCH_NCCL_ENABLE_TIMING), a started
   * collective, a point-to-point send of another group last. */
  char p[PATH_MAX], err[512];
  snprintf(p, sizeof(p), "%s/tests/fixtures/hang/fr-timing-p2p.pickle", repo());
  trun_fr_dump *d = NULL;
  ck_assert_msg(trun_fr_load_file(p, &d, err, sizeof(err)) == 0, "%s", err);
  ck_assert_uint_eq(d->nentries, 3);
  ck_assert_int_eq(d->last_enqueued, 3);
  ck_assert_int_eq(d->last_started, 3);
  ck_assert_int_eq(d->last_completed, 2);
  ck_assert_int_eq(d->completed.seq, 2);
  ck_assert_str_eq(d->completed.name, "nccl:all_gather");
  ck_assert_int_eq(d->started.seq, 3);
  ck_assert_str_eq(d->started.name, "nccl:reduce_scatter");
  ck_assert(d->scheduled.p2p);
  ck_assert_int_eq(d->scheduled.seq, 1);
  ck_assert_str_eq(d->scheduled.name, "nccl:send 0->1");
  ck_assert_str_eq(d->scheduled.pg, "1");
  ck_assert_str_eq(d->last_state, "scheduled");
  ck_assert_uint_eq(d->nframes, 1);
  ck_assert_str_eq(d->frames[0].file, "b.py");
  ck_assert_int_eq(d->frames[0].line, 2);
  trun_fr_free(d);
}
END_TEST

START_TEST(fr_bad) {
  char err[512], p[PATH_MAX];
  trun_fr_dump *d = (trun_fr_dump *)1;
  size_t n;
  char *b = slurp("flight-recorder/sleep_rank_0", &n);
  /* Truncated anywhere: a named pickle error, never a crash. */
  for (size_t k = 0; k < n; k += 97) {
    ck_assert_int_lt(trun_fr_parse((uint8_t *)b, k, &d, err, sizeof(err)), 0);
    ck_assert_ptr_null(d);
    ck_assert_msg(strncmp(err, "flight-recorder dump: ", 22) == 0, "%s", err);
  }
  free(b);
  /* Not a dict; another format; entries not a list; a float (BINFLOAT) where timing is on. */
  const uint8_t list[] = {0x80, 2, ']', '.'};
  ck_assert_int_eq(trun_fr_parse(list, sizeof(list), &d, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "not a dict"));
  const uint8_t v3[] = {0x80, 2,   '}', 'X', 7, 0, 0, 0,   'v', 'e', 'r', 's', 'i',
                        'o',  'n', 'X', 3,   0, 0, 0, '3', '.', '0', 's', '.'};
  ck_assert_int_eq(trun_fr_parse(v3, sizeof(v3), &d, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "format 3.0"));
  const uint8_t ent[] = {0x80, 2,    '}',  '(',  'X',  7,    0,    0,    0,    'v', 'e', 'r',
                         's',  'i',  'o',  'n',  'X',  3,    0,    0,    0,    '2', '.', '1',
                         'X',  7,    0,    0,    0,    'e',  'n',  't',  'r',  'i', 'e', 's',
                         'G',  0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18, 'u', '.'};
  ck_assert_int_eq(trun_fr_parse(ent, sizeof(ent), &d, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "\"entries\" is not a list"));
  /* A symbolic link a worker planted is not followed; a directory is not a dump. */
  snprintf(p, sizeof(p), "/tmp/trun-test-hang-%d", (int)getpid());
  ck_assert_int_eq(symlink("/etc/passwd", p), 0);
  ck_assert_int_eq(trun_fr_load_file(p, &d, err, sizeof(err)), -ELOOP);
  ck_assert_ptr_nonnull(strstr(err, p));
  unlink(p);
  ck_assert_int_eq(trun_fr_load_file("/tmp", &d, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
  ck_assert_int_eq(trun_fr_load_file("/nonexistent/dump", &d, err, sizeof(err)), -ENOENT);
}
END_TEST

/* What a job's dumps say together: the three captured hangs, and a rank without a dump. */
static void summary_of(const char *kind, char *out, size_t len, int drop) {
  trun_fr_rank r[4] = {{0}};
  for (int i = 0; i < 4; i++) {
    char name[64];
    snprintf(name, sizeof(name), "%s_rank_%d", kind, i);
    r[i].rank = i;
    if (i == drop)
      snprintf(r[i].why, sizeof(r[i].why), "no dump within 10.0 s");
    else
      r[i].dump = fr(name);
  }
  size_t n = trun_fr_summarize(r, 4, out, len);
  ck_assert_uint_eq(n, strlen(out));
  trun_fr_ranks_clear(r, 4);
}

START_TEST(fr_summary_captures) {
  char s[1024];
  summary_of("sleep", s, sizeof(s), -1);
  ck_assert_str_eq(s,
                   "ranks 0-2: nccl:all_reduce #51 scheduled [[1048576]] (hang_worker.py:15); rank 3: "
                   "nccl:all_reduce #50 completed [[1048576]] (hang_worker.py:8): behind");
  summary_of("mismatch", s, sizeof(s), -1);
  ck_assert_str_eq(s,
                   "ranks 0-2: nccl:all_reduce #51 scheduled [[1048576]] (hang_worker.py:15); rank 3: "
                   "nccl:broadcast #51 scheduled [[1048576]] (hang_worker.py:13): mismatched");
  summary_of("spin", s, sizeof(s), -1); /* every rank waits in #51: FR alone names no one */
  ck_assert_str_eq(s,
                   "ranks 0-2: nccl:all_reduce #51 scheduled [[1048576]] (hang_worker.py:17); rank 3: "
                   "nccl:all_reduce #51 scheduled [[1048576]] (hang_worker.py:14)");
  summary_of("sleep", s, sizeof(s), 1);
  ck_assert_str_eq(s,
                   "ranks 0, 2: nccl:all_reduce #51 scheduled [[1048576]] (hang_worker.py:15); rank 1: no "
                   "dump (no dump within 10.0 s); rank 3: nccl:all_reduce #50 completed [[1048576]] "
                   "(hang_worker.py:8): behind");
  char small[40]; /* cut, never past the buffer */
  summary_of("mismatch", small, sizeof(small), -1);
  ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
}
END_TEST

static void copy_file(const char *from, const char *to, size_t first) {
  FILE *f = fopen(from, "rb");
  ck_assert_ptr_nonnull(f);
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  if (first && first < n) { /* as torch writes in place: a part first, read as a half-written dump */
    ck_assert_int_eq(write(fd, buf, first), (ssize_t)first);
    usleep(300000);
    ck_assert_int_eq(write(fd, buf + first, n - first), (ssize_t)(n - first));
  } else {
    ck_assert_int_eq(write(fd, buf, n), (ssize_t)n);
  }
  close(fd);
}

/* Every rank in NCCL: two probes of the spin capture (every rank's all-reduce #51 scheduled) are a hang with
 * no culprit; with start times recorded (TORCH_NCCL_ENABLE_TIMING: ranks 0-2 "started") rank 3 is named; the
 * sleep capture (rank 3's newest completed), an idle job (every newest completed), a job that moved between
 * the probes and a rank without a dump are not. */
static void probe_of(trun_fr_rank *r, const char *k0, const char *k1, const char *k2, const char *k3) {
  const char *k[4] = {k0, k1, k2, k3};
  for (int i = 0; i < 4; i++) {
    r[i].rank = i;
    r[i].dump = k[i] ? fr(k[i]) : NULL;
  }
}

static void set_state(trun_fr_rank *r, int i, const char *st) {
  free(r[i].dump->last_state);
  r[i].dump->last_state = strdup(st);
}

START_TEST(fr_spin_judge) {
  trun_fr_rank a[4] = {{0}}, b[4] = {{0}};
  int cul[4];
  size_t nc = 9;
  char line[512];
  probe_of(a, "spin_rank_0", "spin_rank_1", "spin_rank_2", "spin_rank_3");
  probe_of(b, "spin_rank_0", "spin_rank_1", "spin_rank_2", "spin_rank_3");
  ck_assert_int_eq(trun_fr_spin(a, b, 4, cul, &nc, line, sizeof(line)), 1);
  ck_assert_uint_eq(nc, 0);
  ck_assert_msg(strstr(line,
                       "every rank waits in nccl:all_reduce #51 (scheduled) in both flight-recorder probes: "
                       "culprit unknown"),
                "%s", line);
  for (int i = 0; i < 3; i++) set_state(a, i, "started"), set_state(b, i, "started");
  ck_assert_int_eq(trun_fr_spin(a, b, 4, cul, &nc, line, sizeof(line)), 1);
  ck_assert_uint_eq(nc, 1);
  ck_assert_int_eq(cul[0], 3);
  ck_assert_msg(
      strstr(line, "rank 3 never started nccl:all_reduce #51 on the GPU while 3 rank(s) started it"), "%s",
      line);
  set_state(a, 0, "scheduled"); /* rank 0's state changed between the probes: it moved */
  ck_assert_int_eq(trun_fr_spin(a, b, 4, cul, &nc, line, sizeof(line)), 0);
  trun_fr_ranks_clear(a, 4);
  trun_fr_ranks_clear(b, 4);
  probe_of(a, "sleep_rank_0", "sleep_rank_1", "sleep_rank_2", "sleep_rank_3");
  probe_of(b, "sleep_rank_0", "sleep_rank_1", "sleep_rank_2", "sleep_rank_3");
  ck_assert_int_eq(trun_fr_spin(a, b, 4, cul, &nc, line, sizeof(line)), 0); /* rank 3 completed its newest */
  trun_fr_ranks_clear(a, 4);
  trun_fr_ranks_clear(b, 4);
  probe_of(a, "sleep_rank_3", "sleep_rank_3", "sleep_rank_3",
           "sleep_rank_3"); /* idle: every newest completed */
  probe_of(b, "sleep_rank_3", "sleep_rank_3", "sleep_rank_3", "sleep_rank_3");
  ck_assert_int_eq(trun_fr_spin(a, b, 4, cul, &nc, line, sizeof(line)), 0);
  ck_assert_str_eq(line, "");
  trun_fr_ranks_clear(a, 4);
  trun_fr_ranks_clear(b, 4);
  probe_of(a, "spin_rank_0", "spin_rank_1", "spin_rank_2", "spin_rank_3");
  probe_of(b, "spin_rank_0", "spin_rank_1", "spin_rank_2", NULL); /* rank 3 gave no dump the second time */
  ck_assert_int_eq(trun_fr_spin(a, b, 4, cul, &nc, line, sizeof(line)), 0);
  trun_fr_ranks_clear(a, 4);
  trun_fr_ranks_clear(b, 4);
}
END_TEST

/* torch's side of the dump pipe (its heartbeat monitor), played by a child: makes <dir>/rank_5.pipe, reads it
 * non-blocking, and on a byte writes a captured dump to <dir>/rank_5 (in two parts). */
START_TEST(fr_probe_pipe) {
  char dir[] = "/tmp/trun-fr-unit.XXXXXX", p[PATH_MAX], pipe5[PATH_MAX], dump5[PATH_MAX], fix[PATH_MAX];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(pipe5, sizeof(pipe5), "%s/rank_5.pipe", dir);
  snprintf(dump5, sizeof(dump5), "%s/rank_5", dir);
  snprintf(fix, sizeof(fix), "%s/tests/fixtures/hang/flight-recorder/sleep_rank_3", repo());
  snprintf(p, sizeof(p), "%s/tests/fixtures/hang/flight-recorder/sleep_rank_0", repo());
  copy_file(p, dump5, 0); /* an old dump of rank 5: not the answer */
  ck_assert_int_eq(mkfifo(pipe5, 0600), 0);
  pid_t c = fork();
  if (c == 0) {
    int fd = open(pipe5, O_RDONLY | O_NONBLOCK);
    char b;
    for (int i = 0; i < 600 && fd >= 0; i++, usleep(50000))
      if (read(fd, &b, 1) == 1) {
        usleep(200000); /* the old dump's mtime must differ */
        copy_file(fix, dump5, 100);
        _exit(0);
      }
    _exit(1);
  }
  usleep(300000); /* the child holds the pipe open (else the probe says nothing reads it) */
  snprintf(p, sizeof(p), "%s/rank_7.pipe", dir);
  ck_assert_int_eq(mkfifo(p, 0600), 0); /* a pipe nobody reads */
  snprintf(p, sizeof(p), "%s/rank_8.pipe", dir);
  close(open(p, O_WRONLY | O_CREAT, 0600)); /* not a FIFO */
  char prefix[PATH_MAX];
  snprintf(prefix, sizeof(prefix), "%s/rank_", dir);
  trun_fr_rank r[4] = {{.rank = 5}, {.rank = 6}, {.rank = 7}, {.rank = 8}};
  ck_assert_uint_eq(trun_fr_probe(prefix, prefix, r, 4, 5000), 1);
  int st;
  ck_assert_int_eq(waitpid(c, &st, 0), c);
  ck_assert_int_eq(WEXITSTATUS(st), 0);
  ck_assert_ptr_nonnull(r[0].dump);
  ck_assert_int_eq(r[0].dump->last.seq, 50); /* sleep_rank_3's, not the old sleep_rank_0 (51) */
  ck_assert_str_eq(r[0].dump->last_state, "completed");
  ck_assert_ptr_null(r[1].dump);
  ck_assert_msg(strstr(r[1].why, "no dump pipe"), "%s", r[1].why);
  ck_assert_msg(strstr(r[2].why, "nothing reads its dump pipe"), "%s", r[2].why);
  ck_assert_msg(strstr(r[3].why, "not a FIFO"), "%s", r[3].why);
  char line[512];
  trun_fr_summarize(r, 4, line, sizeof(line));
  ck_assert_msg(strstr(line, "rank 5: nccl:all_reduce #50 completed"), "%s", line);
  trun_fr_ranks_clear(r, 4);
  /* No pipe prefix: the dumps as they are now (a store-triggered dump, or one the watchdog wrote). */
  trun_fr_rank q[1] = {{.rank = 5}};
  ck_assert_uint_eq(trun_fr_probe(prefix, NULL, q, 1, 100), 1);
  ck_assert_int_eq(q[0].dump->last.seq, 50);
  trun_fr_ranks_clear(q, 1);
  /* A link where a dump should be is not followed. */
  snprintf(p, sizeof(p), "%s/rank_9", dir);
  ck_assert_int_eq(symlink(fix, p), 0);
  trun_fr_rank l[1] = {{.rank = 9}};
  ck_assert_uint_eq(trun_fr_probe(prefix, NULL, l, 1, 300), 0);
  ck_assert_msg(strstr(l[0].why, "rank_9"), "%s", l[0].why);
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(pickle_binfloat) {
  const uint8_t pk[] = {0x80, 2, 'G', 0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18, '.'};
  trun_pickle_doc *doc = NULL;
  trun_pickle_err e;
  ck_assert_int_eq(trun_pickle_load(pk, sizeof(pk), NULL, &doc, &e), 0);
  ck_assert_int_eq(doc->root->type, TRUN_PK_FLOAT);
  ck_assert_double_eq_tol(doc->root->f, 3.141592653589793, 1e-15);
  trun_pickle_free(doc);
  ck_assert_int_eq(trun_pickle_load(pk, 6, NULL, &doc, &e), -EINVAL);
  ck_assert_ptr_nonnull(strstr(e.msg, "BINFLOAT"));
}
END_TEST

/* ---- the client against the stand-in ------------------------------------------------------------ */

typedef struct {
  pid_t pid;
  int port;
  char addr[32];
  char pf[128];
} standin;

static void standin_start(standin *s, const char *mode) {
  snprintf(s->pf, sizeof(s->pf), "/tmp/trun-test-ras-%d-%s", (int)getpid(), mode);
  unlink(s->pf);
  char script[PATH_MAX];
  snprintf(script, sizeof(script), "%s/tests/fakes/ras_server.py", repo());
  s->pid = fork();
  ck_assert_int_ge(s->pid, 0);
  if (s->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* ends with this test's process, even when an assertion fails */
    execl("/usr/bin/python3", "python3", script, "--mode", mode, "--port-file", s->pf, (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 2000; i++) { /* up to 20 s for the interpreter to start on a busy box */
    FILE *f = fopen(s->pf, "r");
    if (f) {
      int ok = fscanf(f, "%d", &s->port) == 1;
      fclose(f);
      if (ok) break;
    }
    int st;
    ck_assert_int_eq(waitpid(s->pid, &st, WNOHANG), 0);
    usleep(10000);
  }
  ck_assert_int_gt(s->port, 0);
  snprintf(s->addr, sizeof(s->addr), "127.0.0.1:%d", s->port);
}

static void standin_stop(standin *s) {
  kill(s->pid, SIGTERM);
  waitpid(s->pid, NULL, 0);
  unlink(s->pf);
}

static int ask(standin *s, int timeout_ms, size_t max, char **json, size_t *n, char *err, size_t errlen) {
  return trun_ras_query(s->addr, timeout_ms, max, json, n, err, errlen);
}

START_TEST(client_against_standin) {
  standin s;
  char *json = NULL, err[256];
  size_t n;
  trun_hang_detector *d = trun_hang_new(15);
  trun_hang_verdict v;
  /* The frozen mismatch, asked four times 7 s apart (made-up times): rank 3 named at the third answer. */
  standin_start(&s, "mismatch");
  int hung = 0;
  for (int i = 0; i < 4; i++) {
    ck_assert_msg(ask(&s, 60000, 0, &json, &n, err, sizeof(err)) == 0, "%s", err);
    trun_ras_snapshot *snap = NULL;
    ck_assert_msg(trun_ras_parse(json, n, &snap, err, sizeof(err)) == 0, "%s", err);
    free(json);
    hung = trun_hang_feed(d, snap, i * 7.5, &v);
    trun_ras_snapshot_free(snap);
    if (hung) break;
  }
  ck_assert_int_eq(hung, 1);
  ck_assert_int_eq(v.comm[0].culprit[0].rank, 3);
  ck_assert_int_eq(v.comm[0].culprit[0].pid, 1024);
  trun_hang_verdict_clear(&v);
  standin_stop(&s);
  /* Advancing: 12 answers over 60 s, never hung. */
  trun_hang_reset(d);
  standin_start(&s, "advancing");
  for (int i = 0; i < 12; i++) {
    ck_assert_msg(ask(&s, 60000, 0, &json, &n, err, sizeof(err)) == 0, "%s", err);
    trun_ras_snapshot *snap = NULL;
    ck_assert_msg(trun_ras_parse(json, n, &snap, err, sizeof(err)) == 0, "%s", err);
    free(json);
    ck_assert_int_eq(trun_hang_feed(d, snap, i * 5.0, &v), 0);
    trun_ras_snapshot_free(snap);
  }
  standin_stop(&s);
  /* Unresponsive rank: parsed as missing, named. */
  trun_hang_reset(d);
  standin_start(&s, "unresponsive");
  for (int i = 0; i < 2; i++) {
    ck_assert_msg(ask(&s, 60000, 0, &json, &n, err, sizeof(err)) == 0, "%s", err);
    trun_ras_snapshot *snap = NULL;
    ck_assert_msg(trun_ras_parse(json, n, &snap, err, sizeof(err)) == 0, "%s", err);
    free(json);
    hung = trun_hang_feed(d, snap, 100 + i * 15.0, &v);
    trun_ras_snapshot_free(snap);
  }
  ck_assert_int_eq(hung, 1);
  ck_assert_str_eq(v.comm[0].culprit[0].why, "missing from RAS (its process does not answer)");
  ck_assert_int_eq(v.comm[0].culprit[0].pid, 907);
  trun_hang_verdict_clear(&v);
  standin_stop(&s);
  trun_hang_free(d);
}
END_TEST

START_TEST(client_real_nccl_wire) {
  /* The bytes real NCCL 2.28.9 sent (2 x H200): rank 1 sleeps after 20 all-reduces, rank 0 waits in the
   * 21st. Through the client, the reader and the detector: rank 1 named. */
  standin s;
  char *json, err[256];
  size_t n;
  trun_hang_detector *d = trun_hang_new(15);
  trun_hang_verdict v;
  standin_start(&s, "wire");
  for (int i = 0; i < 3; i++) {
    ck_assert_msg(ask(&s, 60000, 0, &json, &n, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(json[0], '{');
    trun_ras_snapshot *snap = NULL;
    ck_assert_msg(trun_ras_parse(json, n, &snap, err, sizeof(err)) == 0, "%s", err);
    free(json);
    ck_assert_int_eq(snap->comms[0].size, 2);
    ck_assert_int_eq(trun_hang_feed(d, snap, i * 7.5, &v), i == 2);
    trun_ras_snapshot_free(snap);
  }
  ck_assert_int_eq(v.comm[0].culprit[0].rank, 1);
  ck_assert_int_eq(v.comm[0].culprit[0].pid, 669);
  ck_assert_str_eq(v.comm[0].culprit[0].why, "launched AllReduce up to 20 (others 21)");
  ck_assert_str_eq(v.comm[0].wait_kind, "AllReduce");
  ck_assert_uint_eq(v.comm[0].wait_n, 21);
  trun_hang_verdict_clear(&v);
  trun_hang_free(d);
  standin_stop(&s);
}
END_TEST

/* One mode of the stand-in: the client's return code and a word of its error. */
static void client_fails(const char *mode, int timeout_ms, size_t max, int want, const char *word) {
  standin s;
  char *json = (char *)1, err[256];
  size_t n = 7;
  standin_start(&s, mode);
  int rc = ask(&s, timeout_ms, max, &json, &n, err, sizeof(err));
  ck_assert_msg(rc == want, "mode %s: rc %d (%s), want %d", mode, rc, err, want);
  ck_assert_ptr_null(json);
  ck_assert_uint_eq(n, 0);
  ck_assert_msg(strstr(err, word) != NULL, "mode %s: \"%s\" lacks \"%s\"", mode, err, word);
  ck_assert_msg(strstr(err, s.addr) != NULL, "mode %s: \"%s\" does not name %s", mode, err, s.addr);
  standin_stop(&s);
}

START_TEST(client_slow) { client_fails("slow", 1000, 0, -ETIMEDOUT, "no full answer within 1000 ms"); }
END_TEST

START_TEST(client_trickle) { client_fails("trickle", 1000, 0, -ETIMEDOUT, "no full answer"); }
END_TEST

START_TEST(client_huge) {
  client_fails("huge", 60000, 0, -E2BIG, "answer over 4194304 bytes");
  client_fails("mismatch", 60000, 1024, -E2BIG, "answer over 1024 bytes");
}
END_TEST

START_TEST(client_old_and_notras) {
  client_fails("old", 60000, 0, -EPROTO, "NCCL 2.28.7 or later");
  client_fails("notras", 60000, 0, -EPROTO, "not a RAS server");
}
END_TEST

START_TEST(client_malformed_lying) {
  /* Malformed and lying answers pass the client (it checks the protocol, not the report) and stop at the
   * reader. */
  standin s;
  char *json, err[256];
  size_t n;
  standin_start(&s, "malformed");
  ck_assert_int_eq(ask(&s, 60000, 0, &json, &n, err, sizeof(err)), 0);
  trun_ras_snapshot *snap = NULL;
  ck_assert_int_eq(trun_ras_parse(json, n, &snap, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "not JSON"));
  free(json);
  standin_stop(&s);
  standin_start(&s, "lying");
  ck_assert_int_eq(ask(&s, 60000, 0, &json, &n, err, sizeof(err)), 0);
  ck_assert_int_eq(trun_ras_parse(json, n, &snap, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "\"rank\" = 9, outside 0..3"));
  free(json);
  standin_stop(&s);
}
END_TEST

START_TEST(client_nothing_listens) {
  /* A loopback port nobody listens on: -ECONNREFUSED, the "no NCCL job" answer. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof(a);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
  close(fd);
  char addr[64], err[256], *json;
  size_t n;
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(a.sin_port));
  ck_assert_int_eq(trun_ras_query(addr, 2000, 0, &json, &n, err, sizeof(err)), -ECONNREFUSED);
  ck_assert_ptr_nonnull(strstr(err, "nothing listens"));
  /* Bad addresses and arguments. */
  const char *bad[] = {"",          "localhost",  "localhost:", "localhost:0", "localhost:65536",
                       "::1:28028", "[::1]28028", "host:12ab",  ":28028"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ck_assert_msg(trun_ras_query(bad[i], 2000, 0, &json, &n, err, sizeof(err)) == -EINVAL, "%s", bad[i]);
    ck_assert_ptr_nonnull(strstr(err, "NCCL RAS address"));
  }
  ck_assert_int_eq(trun_ras_query(addr, 50, 0, &json, &n, err, sizeof(err)), -EINVAL);
  ck_assert_int_eq(trun_ras_query(addr, 2000, 100, &json, &n, err, sizeof(err)), -EINVAL);
  /* Where to ask. */
  char *env[] = {"PATH=/bin", "NCCL_RAS_ADDR=[::1]:29000", NULL}, *env0[] = {"PATH=/bin", NULL};
  ck_assert_str_eq(trun_ras_addr(env), "[::1]:29000");
  ck_assert_str_eq(trun_ras_addr(env0), "localhost:28028");
  ck_assert_str_eq(trun_ras_addr(NULL), "localhost:28028");
}
END_TEST

/* ---- finding a job's RAS address on this host (ras_find.c) ------------------------------------- */

static void put_environ(const char *proc, const char *pid, const char *bytes, size_t n) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/%s", proc, pid);
  ck_assert_int_eq(mkdir(path, 0755), 0);
  snprintf(path, sizeof(path), "%s/%s/environ", proc, pid);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
  fclose(f);
}
#define PUT(proc, pid, lit) put_environ(proc, pid, lit, sizeof(lit) - 1)

/* A fake /proc: two jobs (one over two processes, one whose address follows an entry longer than a read),
 * processes without an address, lies (a control character, 100 bytes, empty, a longer name, no NUL at the
 * end), addresses off the loopback (never asked) and the loopback's spellings, an address only past the
 * bound on what is read, one of the skipped pid, names that are no pids. */
START_TEST(find_ras_addr) {
  char proc[] = "/tmp/trun-proc-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(proc));
  PUT(proc, "100", "A=1\0NCCL_RAS_ADDR=127.0.0.1:1000\0TORCHELASTIC_RUN_ID=job1\0B=2\0");
  PUT(proc, "101", "NCCL_RAS_ADDR=127.0.0.1:1000\0LOCAL_RANK=1\0");
  PUT(proc, "102", "TORCHELASTIC_RUN_ID=other\0PATH=/bin\0");
  size_t big = 10000;
  char *e = malloc(big + 100);
  ck_assert_ptr_nonnull(e);
  memcpy(e, "X=", 2);
  memset(e + 2, 'x', big - 2);
  e[big] = '\0';
  int tail = snprintf(e + big + 1, 99, "NCCL_RAS_ADDR=127.0.0.1:2000%cTORCHELASTIC_RUN_ID=job2", 0);
  put_environ(proc, "200", e, big + 1 + (size_t)tail + 1);
  free(e);
  PUT(proc, "150", "NCCL_RAS_ADDR=127.0.0.1:15\x1b[2J0\0");
  PUT(proc, "151",
      "NCCL_RAS_ADDR=127.0.0.1:15000000000000000000000000000000000000000000000000000000000000000000"
      "0000000000000000\0");
  PUT(proc, "152", "NCCL_RAS_ADDR=\0");
  PUT(proc, "153", "NCCL_RAS_ADDRX=127.0.0.1:1530\0XNCCL_RAS_ADDR=127.0.0.1:1531\0");
  PUT(proc, "154", "A=1\0NCCL_RAS_ADDR=127.0.0.1:1540");
  size_t far = TRUN_RAS_FIND_MAX_ENVIRON + 4096;
  char *g = malloc(far + 64);
  ck_assert_ptr_nonnull(g);
  for (size_t i = 0; i < far; i += 64) {
    memset(g + i, 'y', 63);
    memcpy(g + i, "Y=", 2);
    g[i + 63] = '\0';
  }
  int gt = snprintf(g + far, 64, "NCCL_RAS_ADDR=127.0.0.1:3000");
  put_environ(proc, "300", g, far + (size_t)gt + 1);
  free(g);
  PUT(proc, "400", "NCCL_RAS_ADDR=127.0.0.1:4000\0");
  /* off the loopback: never taken (another user's process may name any host) */
  PUT(proc, "160", "NCCL_RAS_ADDR=10.1.2.3:28028\0");
  PUT(proc, "161", "NCCL_RAS_ADDR=example.com:28028\0");
  PUT(proc, "162", "NCCL_RAS_ADDR=[fe80::1]:28028\0");
  PUT(proc, "163", "NCCL_RAS_ADDR=128.0.0.1:28028\0");
  /* loopback spellings: taken */
  PUT(proc, "600", "NCCL_RAS_ADDR=localhost:6000\0");
  PUT(proc, "601", "NCCL_RAS_ADDR=[::1]:6001\0");
  PUT(proc, "602", "NCCL_RAS_ADDR=127.8.9.10:6002\0");
  PUT(proc, "self", "NCCL_RAS_ADDR=127.0.0.1:5000\0");
  PUT(proc, "0", "NCCL_RAS_ADDR=127.0.0.1:5001\0");
  PUT(proc, "99999999999999999999999", "NCCL_RAS_ADDR=127.0.0.1:5002\0");
  PUT(proc, "12ab", "NCCL_RAS_ADDR=127.0.0.1:5003\0");
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/500", proc); /* a process without an environ file (gone) */
  ck_assert_int_eq(mkdir(path, 0755), 0);

  trun_ras_found f[8];
  int more = -1;
  long n = trun_ras_find(proc, 400, f, 8, &more);
  ck_assert_int_eq(n, 5); /* the two jobs, then the three loopback spellings (pids 600-602) */
  ck_assert_int_eq(more, 0);
  ck_assert_str_eq(f[0].addr, "127.0.0.1:1000");
  ck_assert_str_eq(f[0].run_id, "job1");
  ck_assert_int_eq(f[0].pid, 100);
  ck_assert_int_eq(f[0].nprocs, 2);
  ck_assert_str_eq(f[1].addr, "127.0.0.1:2000");
  ck_assert_str_eq(f[1].run_id, "job2");
  ck_assert_int_eq(f[1].pid, 200);
  ck_assert_int_eq(f[1].nprocs, 1);
  /* room for one: the first job, and more said */
  n = trun_ras_find(proc, 400, f, 1, &more);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(more, 1);
  ck_assert_str_eq(f[0].addr, "127.0.0.1:1000");
  /* nothing skipped: pid 400's job too, after the others, and the loopback spellings after it */
  n = trun_ras_find(proc, -1, f, 8, &more);
  ck_assert_int_eq(n, 6);
  ck_assert_str_eq(f[2].addr, "127.0.0.1:4000");
  ck_assert_str_eq(f[2].run_id, "");
  ck_assert_str_eq(f[3].addr, "localhost:6000");
  ck_assert_str_eq(f[4].addr, "[::1]:6001");
  ck_assert_str_eq(f[5].addr, "127.8.9.10:6002");
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", proc);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_int_eq(trun_ras_find(proc, -1, f, 8, &more), -ENOENT);
}
END_TEST

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  Suite *s = suite_create("hang");
  TCase *tc = tcase_create("all");
  tcase_set_timeout(tc, 300); /* a busy 2-core box starts Python slowly */
  tcase_add_test(tc, parse_captures);
  tcase_add_test(tc, parse_lies);
  tcase_add_test(tc, parse_nccl_missing_comma);
  tcase_add_test(tc, detect_sleep_names_rank3);
  tcase_add_test(tc, detect_mismatch_names_rank3);
  tcase_add_test(tc, detect_spin_not_named);
  tcase_add_test(tc, detect_healthy_and_idle_never);
  tcase_add_test(tc, detect_unresponsive_rank);
  tcase_add_test(tc, detect_ahead_and_tie);
  tcase_add_test(tc, detect_many_ranks_mismatch);
  tcase_add_test(tc, fr_dumps);
  tcase_add_test(tc, fr_timing_p2p);
  tcase_add_test(tc, fr_bad);
  tcase_add_test(tc, fr_summary_captures);
  tcase_add_test(tc, fr_probe_pipe);
  tcase_add_test(tc, fr_spin_judge);
  tcase_add_test(tc, pickle_binfloat);
  tcase_add_test(tc, client_against_standin);
  tcase_add_test(tc, client_real_nccl_wire);
  tcase_add_test(tc, client_slow);
  tcase_add_test(tc, client_trickle);
  tcase_add_test(tc, client_huge);
  tcase_add_test(tc, client_old_and_notras);
  tcase_add_test(tc, client_malformed_lying);
  tcase_add_test(tc, client_nothing_listens);
  tcase_add_test(tc, find_ras_addr);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
