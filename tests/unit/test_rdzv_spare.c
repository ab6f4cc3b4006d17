/* Spares and bad nodes (issue 30) against an in-process store.
 * The job's attempt (agent/rdzv/rdzv_attempt.c): the nodes of a round get one attempt, the highest count
 * among them, whoever joined when (a spare at 0, survivors at 1); the round's value stays once set; a
 * membership round keeps the attempt; a key holding something else than a count is named, not trusted.
 * The exclusion list (rdzv_exclude.c, rdzv_export.c): records written and read back, who matches (same host;
 * same instance and a shared GPU where known; a cut-off record: that agent only), a node on the list refused
 * at its next round with the cause, news (new, ended), records that are not trun's ignored, the Slurm and
 * JSON exports. The job's health records (rdzv_health.c).
 */
#include "client.h"
#include "rdzv_int.h"
#include "unit.h"

static trun_client *connect_raw(int port) {
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = "127.0.0.1";
  o.port = port;
  o.key_prefix = "";
  o.timeout_ms = 10000;
  trun_client *c = NULL;
  ck_assert_int_eq(trun_client_connect(&o, &c), 0);
  return c;
}

/* One node: its own connection, the job's run id, the round's key space. */
static void node_init(trun_rdzv *r, trun_config *cfg, int port, int count) {
  memset(r, 0, sizeof(*r));
  r->cfg = cfg;
  r->client = connect_raw(port);
  r->info.attempt = count;
}

static void in_round(trun_rdzv *r, int round) {
  snprintf(r->key_space, sizeof(r->key_space), "/trun/%s/r%d", r->cfg->run_id, round);
}

/* A store (us) and one node r of job run_id on it, with --rdzv-conf conf, going by host_addr: the exclusion
 * tests' start. */
static void exclusion_node(unit_server *us, trun_config *cfg, trun_rdzv *r, const char *run_id,
                           const char *conf, const char *host_addr) {
  trun_server_opts o;
  trun_server_opts_default(&o);
  ck_assert_int_gt(unit_server_start(us, &o), 0);
  memset(cfg, 0, sizeof(*cfg));
  snprintf(cfg->run_id, sizeof(cfg->run_id), "%s", run_id);
  snprintf(cfg->endpoint_host, sizeof(cfg->endpoint_host), "127.0.0.1");
  cfg->endpoint_port = us->port;
  cfg->rdzv_conf = conf;
  node_init(r, cfg, us->port, 0);
  snprintf(r->host_addr, sizeof(r->host_addr), "%s", host_addr);
}

START_TEST(test_attempt_spare_takes_survivors) {
  unit_server us;
  trun_server_opts o;
  trun_server_opts_default(&o);
  ck_assert_int_gt(unit_server_start(&us, &o), 0);
  trun_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  snprintf(cfg.run_id, sizeof(cfg.run_id), "job");
  trun_rdzv n[4];
  /* round 1: nodes 0-2 at attempt 0, all get 0; the spare (3) proposes 0 too and waits */
  for (int i = 0; i < 4; i++) node_init(&n[i], &cfg, us.port, 0);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(trun__rdzv_attempt_propose(&n[i]), 0);
  for (int i = 0; i < 3; i++) {
    in_round(&n[i], 1);
    ck_assert_int_eq(trun__rdzv_attempt_settle(&n[i]), 0);
    ck_assert_int_eq(n[i].info.attempt, 0);
  }
  /* node 2 is lost: the survivors count a restart (1) and join round 2 with the spare, which still counts 0;
   * the spare settles first */
  n[0].info.attempt = n[1].info.attempt = 1;
  ck_assert_int_eq(trun__rdzv_attempt_propose(&n[0]), 0);
  ck_assert_int_eq(trun__rdzv_attempt_propose(&n[1]), 0);
  ck_assert_int_eq(trun__rdzv_attempt_propose(&n[3]), 0);
  int order[] = {3, 0, 1};
  for (int i = 0; i < 3; i++) {
    in_round(&n[order[i]], 2);
    ck_assert_int_eq(trun__rdzv_attempt_settle(&n[order[i]]), 0);
    ck_assert_int_eq(n[order[i]].info.attempt, 1);
  }
  /* a membership round (a node joins, no restart used): the attempt stays 1, also for the newcomer at 0 */
  trun_rdzv late;
  node_init(&late, &cfg, us.port, 0);
  ck_assert_int_eq(trun__rdzv_attempt_propose(&late), 0);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(trun__rdzv_attempt_propose(&n[i]), 0);
  in_round(&late, 3);
  ck_assert_int_eq(trun__rdzv_attempt_settle(&late), 0);
  ck_assert_int_eq(late.info.attempt, 1);
  /* the round's value, once set, is what every node of it takes, even after the job's attempt moved on */
  n[0].info.attempt = 5;
  ck_assert_int_eq(trun__rdzv_attempt_propose(&n[0]), 0);
  in_round(&n[1], 3);
  ck_assert_int_eq(trun__rdzv_attempt_settle(&n[1]), 0);
  ck_assert_int_eq(n[1].info.attempt, 1);
  /* a lower proposal never lowers the job's attempt */
  trun_buf b = {0};
  ck_assert_int_eq(trun_client_get(n[3].client, trun_str("/trun/job/attempt"), &b, 1000), 0);
  ck_assert_int_eq((int)b.len, 1);
  ck_assert_int_eq(b.data[0], '5');
  trun_buf_free(&b);
  for (int i = 0; i < 4; i++) trun_client_close(n[i].client);
  trun_client_close(late.client);
  unit_server_stop(&us);
}
END_TEST

/* a key that holds something else than a count: -EPROTO, the node keeps its own count */
START_TEST(test_attempt_garbage) {
  unit_server us;
  trun_server_opts o;
  trun_server_opts_default(&o);
  ck_assert_int_gt(unit_server_start(&us, &o), 0);
  trun_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  snprintf(cfg.run_id, sizeof(cfg.run_id), "bad");
  trun_rdzv r;
  node_init(&r, &cfg, us.port, 2);
  ck_assert_int_eq(trun_client_set(r.client, trun_str("/trun/bad/attempt"), trun_str("x\xff")), 0);
  ck_assert_int_eq(trun__rdzv_attempt_propose(&r), -EPROTO);
  in_round(&r, 1);
  ck_assert_int_eq(trun__rdzv_attempt_settle(&r), -EPROTO);
  ck_assert_int_eq(r.info.attempt, 2);
  ck_assert_int_eq(trun_client_set(r.client, trun_str("/trun/bad/attempt"), trun_str("99999999999999999999")),
                   0);
  ck_assert_int_eq(trun__rdzv_attempt_propose(&r), -EPROTO);
  ck_assert_int_eq(r.info.attempt, 2);
  trun_client_close(r.client);
  unit_server_stop(&us);
}
END_TEST

static trun_rdzv_exclusion excl_of(const char *host, const char *instance, const char *gpus) {
  trun_rdzv_exclusion e;
  memset(&e, 0, sizeof(e));
  snprintf(e.id.host, sizeof(e.id.host), "%s", host);
  snprintf(e.id.instance, sizeof(e.id.instance), "%s", instance);
  snprintf(e.id.gpus, sizeof(e.id.gpus), "%s", gpus);
  return e;
}

START_TEST(test_exclusion_matches) {
  trun_rdzv_node_id me;
  memset(&me, 0, sizeof(me));
  snprintf(me.host, sizeof(me.host), "10.0.0.3");
  snprintf(me.instance, sizeof(me.instance), "i-03");
  snprintf(me.gpus, sizeof(me.gpus), "GPU-a,GPU-b");
  trun_rdzv_exclusion e = excl_of("10.0.0.3", "", "");
  ck_assert_int_eq(trun_rdzv_exclusion_matches(&e, &me), 1); /* by address only: a cut-off node */
  e = excl_of("10.0.0.4", "", "");
  ck_assert_int_eq(trun_rdzv_exclusion_matches(&e, &me), 0);
  e = excl_of("10.0.0.3", "i-03", "GPU-b");
  ck_assert_int_eq(trun_rdzv_exclusion_matches(&e, &me), 1);
  e = excl_of("10.0.0.3", "i-99", "GPU-a"); /* a new instance under the old name */
  ck_assert_int_eq(trun_rdzv_exclusion_matches(&e, &me), 0);
  e = excl_of("10.0.0.3", "", "GPU-x,GPU-y"); /* other GPUs */
  ck_assert_int_eq(trun_rdzv_exclusion_matches(&e, &me), 0);
  e = excl_of("", "", "");
  ck_assert_int_eq(trun_rdzv_exclusion_matches(&e, &me), 0);
  /* A record of one agent (cut off) names that agent, not another on the same address. */
  snprintf(me.agent, sizeof(me.agent), "10.0.0.3 17 0 00000000000000aa");
  e = excl_of("10.0.0.3", "", "");
  snprintf(e.id.agent, sizeof(e.id.agent), "10.0.0.3 17 0 00000000000000aa");
  ck_assert_int_eq(trun_rdzv_exclusion_matches(&e, &me), 1);
  snprintf(e.id.agent, sizeof(e.id.agent), "10.0.0.3 17 0 00000000000000bb"); /* same pid, another tag */
  ck_assert_int_eq(trun_rdzv_exclusion_matches(&e, &me), 0);
  snprintf(e.id.agent, sizeof(e.id.agent), "10.0.0.3 18 0 00000000000000aa");
  ck_assert_int_eq(trun_rdzv_exclusion_matches(&e, &me), 0);
  e = excl_of("10.0.0.3", "", ""); /* a record of the node (older trun, a health failure): every agent */
  ck_assert_int_eq(trun_rdzv_exclusion_matches(&e, &me), 1);
}
END_TEST

/* Two agents of one address (one box, pods on the host's network; issue: the survivor excluded itself): the
 * cut-off one's record names it by its rendezvous id (trun__rdzv_agent_id), so the other goes on; that
 * agent is refused (exit 4, naming its pid); an older record of the address alone still refuses every agent
 * there; the exports and --rdzv-status's name show it; forged agent fields are ignored. */
START_TEST(test_exclusion_one_agent) {
  unit_server us;
  trun_config cfg;
  trun_rdzv r;
  exclusion_node(&us, &cfg, &r, "ag", "trun_exclude_seconds=1800", "box.example");
  snprintf(r.agent_tag, sizeof(r.agent_tag), "00000000000000aa");
  char mine[TRUN_RDZV_AGENT_ID_MAX], err[1024];
  trun__rdzv_agent_id(&r, mine, sizeof(mine));
  char want[TRUN_RDZV_AGENT_ID_MAX];
  snprintf(want, sizeof(want), "box.example %d 0 00000000000000aa", (int)getpid());
  ck_assert_str_eq(mine, want);
  /* the other agent of the box is cut off: this one goes ahead */
  trun_rdzv_node_id other;
  memset(&other, 0, sizeof(other));
  snprintf(other.host, sizeof(other.host), "box.example");
  snprintf(other.agent, sizeof(other.agent), "box.example %d 0 00000000000000bb", (int)getpid());
  ck_assert_int_eq(trun_rdzv_exclude(r.client, &cfg, &other, "cut_off", "cut off from the job: 4 missed"), 0);
  ck_assert_int_eq(trun__rdzv_exclusion_round(&r, err, sizeof(err)), 0);
  ck_assert_int_eq(r.n_excl, 1);
  ck_assert_str_eq(r.excl[0].id.agent, other.agent);
  ck_assert_int_eq(r.excluded, 0);
  char name[600];
  trun_rdzv_node_name(&r.excl[0].id, name, sizeof(name));
  char want_name[64];
  snprintf(want_name, sizeof(want_name), "box.example (agent pid %d)", (int)getpid());
  ck_assert_str_eq(name, want_name);
  /* the exports: no host for Slurm (the host is not excluded), the agent in JSON */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_int_eq(trun_rdzv_excluded_print(&cfg, "slurm", f), 0);
  fclose(f);
  ck_assert_str_eq(buf, "\n");
  free(buf);
  f = open_memstream(&buf, &len);
  ck_assert_int_eq(trun_rdzv_excluded_print(&cfg, "json", f), 0);
  fclose(f);
  ck_assert_msg(strstr(buf, "\"agent\": \"box.example ") && strstr(buf, " 0 00000000000000bb\""), "%s", buf);
  free(buf);
  /* forged agent fields: not an id's characters, longer than one: the record is ignored */
  double now = trun_wall_s();
  char rec[2][800], longest[400];
  memset(longest, 'a', sizeof(longest) - 1);
  longest[sizeof(longest) - 1] = '\0';
  snprintf(rec[0], sizeof(rec[0]),
           "{\"host\":\"box.example\",\"agent\":\"box.example 1 0 $(reboot)\",\"kind\":\"cut_off\","
           "\"cause\":\"x\",\"at\":%.0f,\"until\":%.0f}",
           now, now + 60);
  snprintf(rec[1], sizeof(rec[1]),
           "{\"host\":\"box.example\",\"agent\":\"%s\",\"kind\":\"cut_off\",\"cause\":\"x\",\"at\":%.0f,"
           "\"until\":%.0f}",
           longest, now, now + 60);
  for (int i = 0; i < 2; i++) {
    int64_t n;
    char k[64];
    ck_assert_int_eq(trun_client_add(r.client, trun_str("/trun/ag/excluded/n"), 1, &n), 0);
    snprintf(k, sizeof(k), "/trun/ag/excluded/%d", (int)n);
    ck_assert_int_eq(trun_client_set(r.client, trun_str(k), trun_str(rec[i])), 0);
  }
  ck_assert_int_eq(trun__rdzv_exclusion_round(&r, err, sizeof(err)), 0);
  ck_assert_int_eq(r.n_excl, 1);
  /* this agent cut off: refused, exit 4, named with its pid */
  trun_rdzv_node_id me;
  memset(&me, 0, sizeof(me));
  snprintf(me.host, sizeof(me.host), "box.example");
  snprintf(me.agent, sizeof(me.agent), "%s", mine);
  ck_assert_int_eq(trun_rdzv_exclude(r.client, &cfg, &me, "cut_off", "cut off from the job: 4 missed"), 0);
  ck_assert_int_eq(trun__rdzv_exclusion_round(&r, err, sizeof(err)), -1);
  ck_assert_int_eq(r.excluded, 4);
  snprintf(want_name, sizeof(want_name), "node box.example (agent pid %d) is excluded", (int)getpid());
  ck_assert_msg(strstr(err, want_name) && strstr(err, "exit 4"), "%s", err);
  /* a record of the address alone (an older trun's cut-off): every agent there, as before */
  trun_rdzv other_agent;
  node_init(&other_agent, &cfg, us.port, 0);
  snprintf(other_agent.host_addr, sizeof(other_agent.host_addr), "box.example");
  snprintf(other_agent.agent_tag, sizeof(other_agent.agent_tag), "00000000000000cc");
  ck_assert_int_eq(trun__rdzv_exclusion_round(&other_agent, err, sizeof(err)), 0);
  trun_rdzv_node_id host_only;
  memset(&host_only, 0, sizeof(host_only));
  snprintf(host_only.host, sizeof(host_only.host), "box.example");
  ck_assert_int_eq(trun_rdzv_exclude(r.client, &cfg, &host_only, "cut_off", "cut off (an older trun)"), 0);
  ck_assert_int_eq(trun__rdzv_exclusion_round(&other_agent, err, sizeof(err)), -1);
  ck_assert_int_eq(other_agent.excluded, 4);
  ck_assert_msg(strstr(err, "node box.example is excluded"), "%s", err);
  free(other_agent.excl);
  trun_client_close(other_agent.client);
  free(r.excl);
  trun_client_close(r.client);
  unit_server_stop(&us);
}
END_TEST

START_TEST(test_exclusion_list) {
  unit_server us;
  trun_config cfg;
  trun_rdzv r;
  exclusion_node(&us, &cfg, &r, "ex", "trun_exclude_seconds=1", "10.0.0.2");
  char err[1024];
  /* nothing on the list: the round goes ahead */
  ck_assert_int_eq(trun__rdzv_exclusion_round(&r, err, sizeof(err)), 0);
  ck_assert_int_eq(r.n_excl, 0);
  /* another node excluded: news for this one, which goes ahead */
  trun_rdzv_node_id other;
  memset(&other, 0, sizeof(other));
  snprintf(other.host, sizeof(other.host), "10.0.0.3");
  snprintf(other.hostname, sizeof(other.hostname), "node3");
  snprintf(other.gpus, sizeof(other.gpus), "GPU-1,GPU-2");
  ck_assert_int_eq(trun_rdzv_exclude(r.client, &cfg, &other, "health", "failed the health gate: ecc"), 0);
  /* a record that is not trun's (someone wrote the key space): ignored */
  int64_t n;
  ck_assert_int_eq(trun_client_add(r.client, trun_str("/trun/ex/excluded/n"), 1, &n), 0);
  ck_assert_int_eq(trun_client_set(r.client, trun_str("/trun/ex/excluded/2"), trun_str("{not json")), 0);
  ck_assert_int_eq(trun__rdzv_exclusion_round(&r, err, sizeof(err)), 0);
  ck_assert_int_eq(r.n_excl, 1);
  ck_assert_int_eq(r.n_excl_news, 1);
  ck_assert_int_eq(r.excl[0].news, TRUN_RDZV_EXCL_NEW);
  ck_assert_str_eq(r.excl[0].kind, "health");
  ck_assert_str_eq(r.excl[0].id.hostname, "node3");
  ck_assert_int_eq(r.excluded, 0);
  /* the exports */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_int_eq(trun_rdzv_excluded_print(&cfg, "slurm", f), 0);
  fclose(f);
  ck_assert_str_eq(buf, "node3\n");
  free(buf);
  f = open_memstream(&buf, &len);
  ck_assert_int_eq(trun_rdzv_excluded_print(&cfg, "json", f), 0);
  fclose(f);
  ck_assert_msg(strstr(buf, "\"host\": \"10.0.0.3\"") && strstr(buf, "\"GPU-2\"") &&
                    strstr(buf, "\"kind\": \"health\"") && strstr(buf, "\"run_id\": \"ex\""),
                "%s", buf);
  free(buf);
  ck_assert_int_eq(trun_rdzv_excluded_print(&cfg, "xml", stdout), 2);
  /* this node excluded: its next round is refused, with the cause */
  trun_rdzv_node_id me;
  trun_rdzv_node_identity("10.0.0.2", NULL, &me);
  ck_assert_int_eq(trun_rdzv_exclude(r.client, &cfg, &me, "xid", "GPU 0 Xid 79: fallen off the bus"), 0);
  ck_assert_int_eq(trun__rdzv_exclusion_round(&r, err, sizeof(err)), -1);
  ck_assert_int_eq(r.excluded, 3); /* xid: the hardware, exit 3 (trun_rdzv_exclusion_code) */
  ck_assert_msg(
      strstr(err, "node 10.0.0.2 is excluded") && strstr(err, "xid: GPU 0 Xid 79") && strstr(err, "exit 3"),
      "%s", err);
  ck_assert_int_eq(r.excl[0].news, 0);
  /* the time is up: both end, once */
  usleep(1100000);
  r.excluded = 0;
  ck_assert_int_eq(trun__rdzv_exclusion_round(&r, err, sizeof(err)), 0);
  ck_assert_int_eq(r.n_excl, 2);
  ck_assert_int_eq(r.excl[0].news, TRUN_RDZV_EXCL_ENDED);
  ck_assert_int_eq(r.excl[1].news, TRUN_RDZV_EXCL_ENDED);
  /* a node that first reads the list after they ended learns both, at once */
  trun_rdzv late;
  node_init(&late, &cfg, us.port, 0);
  snprintf(late.host_addr, sizeof(late.host_addr), "10.0.0.2");
  ck_assert_int_eq(trun__rdzv_exclusion_round(&late, err, sizeof(err)), 0);
  ck_assert_int_eq(late.n_excl, 2);
  ck_assert_int_eq(late.excl[1].news, TRUN_RDZV_EXCL_NEW | TRUN_RDZV_EXCL_ENDED);
  free(late.excl);
  trun_client_close(late.client);
  ck_assert_int_eq(trun__rdzv_exclusion_round(&r, err, sizeof(err)), 0);
  ck_assert_int_eq(r.n_excl_news, 0);
  f = open_memstream(&buf, &len);
  ck_assert_int_eq(trun_rdzv_excluded_print(&cfg, "slurm", f), 0);
  fclose(f);
  ck_assert_str_eq(buf, "\n");
  free(buf);
  /* exclusions off: nothing is written */
  cfg.rdzv_conf = "trun_exclude_seconds=0";
  ck_assert_int_eq(trun_rdzv_exclude(r.client, &cfg, &me, "xid", "again"), 0);
  ck_assert_int_eq(trun_client_add(r.client, trun_str("/trun/ex/excluded/n"), 0, &n), 0);
  ck_assert_int_eq((int)n, 3);
  free(r.excl);
  trun_client_close(r.client);
  unit_server_stop(&us);
}
END_TEST

/* Forged exclusion records (issue 41, finding 5), written raw into the job's list: an until 1e6 s ahead lasts
 * no longer than trun_exclude_seconds; host names with other characters than a host's (a word-split Slurm
 * --exclude list, a bracketed range) or an "at" ahead of this clock are not trun's and are ignored; a cause
 * with an ANSI escape and a newline is read escaped, and the exports carry it escaped. */
START_TEST(test_exclusion_forged) {
  unit_server us;
  trun_config cfg;
  trun_rdzv r;
  exclusion_node(&us, &cfg, &r, "fx", "trun_exclude_seconds=1800", "10.0.0.2");
  double now = trun_wall_s();
  char rec[5][512];
  snprintf(rec[0], sizeof(rec[0]),
           "{\"host\":\"10.0.0.7\",\"hostname\":\"n7\",\"kind\":\"health\",\"cause\":\"ecc\\u001b[2J\\nFAKE "
           "LINE\",\"at\":%.0f,\"until\":%.0f}",
           now, now + 1e6);
  snprintf(
      rec[1], sizeof(rec[1]),
      "{\"host\":\"10.0.0.8\",\"hostname\":\"n7 --wrap=id --output=/tmp/x\",\"kind\":\"health\",\"cause\":"
      "\"x\",\"at\":%.0f,\"until\":%.0f}",
      now, now + 60);
  snprintf(
      rec[2], sizeof(rec[2]),
      "{\"host\":\"10.0.0.9\",\"hostname\":\"gpu[001-512]\",\"kind\":\"health\",\"cause\":\"x\",\"at\":%.0f,"
      "\"until\":%.0f}",
      now, now + 60);
  snprintf(
      rec[3], sizeof(rec[3]),
      "{\"host\":\"10.0.0.10;reboot\",\"hostname\":\"n10\",\"kind\":\"health\",\"cause\":\"x\",\"at\":%.0f,"
      "\"until\":%.0f}",
      now, now + 60);
  snprintf(rec[4], sizeof(rec[4]),
           "{\"host\":\"10.0.0.11\",\"hostname\":\"n11\",\"kind\":\"health\",\"cause\":\"x\",\"at\":%.0f,"
           "\"until\":%.0f}",
           now + 1e6, now + 2e6);
  for (int i = 0; i < 5; i++) {
    int64_t n;
    char k[64];
    ck_assert_int_eq(trun_client_add(r.client, trun_str("/trun/fx/excluded/n"), 1, &n), 0);
    snprintf(k, sizeof(k), "/trun/fx/excluded/%d", (int)n);
    ck_assert_int_eq(trun_client_set(r.client, trun_str(k), trun_str(rec[i])), 0);
  }
  char err[1024];
  ck_assert_int_eq(trun__rdzv_exclusion_round(&r, err, sizeof(err)), 0);
  ck_assert_int_eq(r.n_excl, 1); /* only the first is trun's form */
  ck_assert_str_eq(r.excl[0].id.hostname, "n7");
  ck_assert_msg(r.excl[0].until <= now + 1800 + 1, "until %.0f is %.0f s ahead", r.excl[0].until,
                r.excl[0].until - now);
  ck_assert_str_eq(r.excl[0].cause, "ecc\\x1b[2J\\nFAKE LINE");
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_int_eq(trun_rdzv_excluded_print(&cfg, "slurm", f), 0);
  fclose(f);
  ck_assert_str_eq(buf, "n7\n");
  free(buf);
  f = open_memstream(&buf, &len);
  ck_assert_int_eq(trun_rdzv_excluded_print(&cfg, "json", f), 0);
  fclose(f);
  ck_assert_msg(strstr(buf, "ecc\\\\x1b[2J\\\\nFAKE LINE") && !strstr(buf, "\\u001b") &&
                    !strstr(buf, "wrap") && !strstr(buf, "gpu[") && !strstr(buf, "n11"),
                "%s", buf);
  free(buf);
  free(r.excl);
  trun_client_close(r.client);
  unit_server_stop(&us);
}
END_TEST

/* The job's health records (rdzv_health.c): appended in order under /trun/<run_id>/health/, read after the
 * first `from`; a node that never joined reaches the store with trun_rdzv_reach to leave its record and its
 * exclusion; without a connection nothing is written. */
/* A node is named by its address and, when known and different, its host name: never "HOST ()" (issue 38). */
START_TEST(test_node_name) {
  trun_rdzv_node_id id;
  memset(&id, 0, sizeof(id));
  char out[600];
  snprintf(id.host, sizeof(id.host), "10.0.0.3");
  trun_rdzv_node_name(&id, out, sizeof(out));
  ck_assert_str_eq(out, "10.0.0.3");
  snprintf(id.hostname, sizeof(id.hostname), "rn3");
  trun_rdzv_node_name(&id, out, sizeof(out));
  ck_assert_str_eq(out, "10.0.0.3 (rn3)");
  snprintf(id.host, sizeof(id.host), "rn3");
  trun_rdzv_node_name(&id, out, sizeof(out));
  ck_assert_str_eq(out, "rn3");
  snprintf(id.agent, sizeof(id.agent), "rn3 4242 0 00000000000000aa"); /* one agent of it */
  trun_rdzv_node_name(&id, out, sizeof(out));
  ck_assert_str_eq(out, "rn3 (agent pid 4242)");
  snprintf(id.host, sizeof(id.host), "10.0.0.3");
  trun_rdzv_node_name(&id, out, sizeof(out));
  ck_assert_str_eq(out, "10.0.0.3 (rn3, agent pid 4242)");
}
END_TEST

START_TEST(test_health_records) {
  unit_server us;
  trun_server_opts o;
  trun_server_opts_default(&o);
  ck_assert_int_gt(unit_server_start(&us, &o), 0);
  trun_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  snprintf(cfg.run_id, sizeof(cfg.run_id), "hj");
  snprintf(cfg.endpoint_host, sizeof(cfg.endpoint_host), "127.0.0.1");
  cfg.endpoint_port = us.port;
  trun_rdzv *none = trun_rdzv_new();
  ck_assert_ptr_nonnull(none);
  ck_assert_int_eq(trun_rdzv_connected(none), 0);
  ck_assert_int_eq(trun_rdzv_health_publish(none, "{}"), -ENOTCONN);
  trun_rdzv_free(none);
  trun_rdzv r;
  node_init(&r, &cfg, us.port, 0);
  ck_assert_int_eq(trun_rdzv_connected(&r), 1);
  char **rec = NULL;
  int n = -1;
  ck_assert_int_eq(trun_rdzv_health_read(&r, 0, &rec, &n), 0); /* none yet */
  ck_assert_int_eq(n, 0);
  free(rec);
  ck_assert_int_eq(trun_rdzv_health_publish(&r, "{\"host\":\"a\"}"), 0);
  ck_assert_int_eq(trun_rdzv_health_publish(&r, "{\"host\":\"b\"}"), 0);
  /* the keys are the documented ones (docs/rendezvous.md, "Key space") */
  trun_buf v = {0};
  ck_assert_int_eq(trun_client_get(r.client, trun_str("/trun/hj/health/2"), &v, 1000), 0);
  ck_assert_int_eq((int)v.len, 12);
  ck_assert_int_eq(memcmp(v.data, "{\"host\":\"b\"}", 12), 0);
  trun_buf_free(&v);
  /* a node that never joined: its own connection, with the job's token */
  trun_rdzv *outside = NULL;
  ck_assert_int_eq(trun_rdzv_reach(&cfg, 5000, &outside), 0);
  ck_assert_int_eq(trun_rdzv_health_publish(outside, "{\"host\":\"c\"}"), 0);
  trun_rdzv_node_id me;
  trun_rdzv_node_identity("10.0.0.9", NULL, &me);
  ck_assert_int_eq(trun_rdzv_exclude_node(outside, &me, "health", "failed the health gate: ecc"), 0);
  trun_rdzv_free(outside);
  ck_assert_int_eq(trun_rdzv_health_read(&r, 1, &rec, &n), 0);
  ck_assert_int_eq(n, 2);
  ck_assert_str_eq(rec[0], "{\"host\":\"b\"}");
  ck_assert_str_eq(rec[1], "{\"host\":\"c\"}");
  for (int i = 0; i < n; i++) free(rec[i]);
  free(rec);
  trun_rdzv_exclusion *e = NULL;
  int ne = 0;
  ck_assert_int_eq(trun_rdzv_excluded_now(r.client, "hj", 1800, &e, &ne), 0);
  ck_assert_int_eq(ne, 1);
  ck_assert_str_eq(e[0].id.host, "10.0.0.9");
  free(e);
  /* nobody at the endpoint: reach says so */
  unit_server_stop(&us);
  trun_client_close(r.client);
  ck_assert_int_lt(trun_rdzv_reach(&cfg, 1000, &outside), 0);
  ck_assert_ptr_null(outside);
}
END_TEST

static Suite *spare_suite(void) {
  Suite *s = suite_create("rdzv_spare");
  TCase *tc = tcase_create("attempt");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_attempt_spare_takes_survivors);
  tcase_add_test(tc, test_attempt_garbage);
  suite_add_tcase(s, tc);
  tc = tcase_create("exclusion");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_exclusion_matches);
  tcase_add_test(tc, test_exclusion_list);
  tcase_add_test(tc, test_exclusion_one_agent);
  tcase_add_test(tc, test_node_name);
  tcase_add_test(tc, test_exclusion_forged);
  tcase_add_test(tc, test_health_records);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return unit_run(spare_suite()); }
