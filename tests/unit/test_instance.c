/* Unit tests for agent/discover/discover_instance.c and agent/discover/discover_cpus.c: cgroup CPU quota
 * parsing (v2 cpu.max, v1 cfs files) and fixture trees, DMI product names, the `auto` / `cpu` worker counts,
 * and trun_discover_instance's DMI fallback. Fixtures: $TRUN_REPO/tests/fixtures/{cgroup,dmi} (TRUN_REPO
 * defaults to ".").
 *
 * IMDS cases run only when TRUN_IMDS_ENDPOINT is set: tests/integration/61-instance-identity.sh starts
 * tests/fakes/imds_server.py in one mode, and passes TRUN_IMDS_MODE (the mode, or "refused" for a closed
 * port) and TRUN_IMDS_CONTROL (the fake's control URL, which counts the requests it saw). */
#include <check.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "discover.h"
#include "discover_internal.h"

/* ---- helpers ---------------------------------------------------------------------------------- */

static char *fixture(const char *rel) {
  const char *repo = getenv("TRUN_REPO");
  char *p = NULL;
  ck_assert_int_ge(asprintf(&p, "%s/tests/fixtures/%s", repo && *repo ? repo : ".", rel), 0);
  return p;
}

static int affinity_cpus(void) {
  cpu_set_t *set = CPU_ALLOC(8192);
  size_t sz = CPU_ALLOC_SIZE(8192);
  CPU_ZERO_S(sz, set);
  ck_assert_int_eq(sched_getaffinity(0, sz, set), 0);
  int n = CPU_COUNT_S(sz, set);
  CPU_FREE(set);
  return n;
}

static int min_int(int a, int b) { return a < b ? a : b; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- cgroup parsing --------------------------------------------------------------------------- */

START_TEST(cpu_max_variants) {
  ck_assert_int_eq(trun_cpu_max_parse("max 100000\n"), 0);
  ck_assert_int_eq(trun_cpu_max_parse("max"), 0);
  ck_assert_int_eq(trun_cpu_max_parse("200000 100000\n"), 2);
  ck_assert_int_eq(trun_cpu_max_parse("150000 100000"), 2); /* rounded up */
  ck_assert_int_eq(trun_cpu_max_parse("50000 100000"), 1);
  ck_assert_int_eq(trun_cpu_max_parse("1000 100000"), 1); /* at least 1 */
  ck_assert_int_eq(trun_cpu_max_parse("6400000 50000"), 128);
  ck_assert_int_eq(trun_cpu_max_parse("300000"), 3); /* period omitted: the kernel's 100000 */
  ck_assert_int_eq(trun_cpu_max_parse("18446744073709551615 1"), INT_MAX);
  ck_assert_int_eq(trun_cpu_max_parse(""), -EINVAL);
  ck_assert_int_eq(trun_cpu_max_parse("abc 100000"), -EINVAL);
  ck_assert_int_eq(trun_cpu_max_parse("-1 100000"), -EINVAL);
  ck_assert_int_eq(trun_cpu_max_parse("200000 0"), -EINVAL);
  ck_assert_int_eq(trun_cpu_max_parse("0 100000"), -EINVAL);
  ck_assert_int_eq(trun_cpu_max_parse("200000 100000 7"), -EINVAL);
  ck_assert_int_eq(trun_cpu_max_parse("maxi 100000"), -EINVAL);
  ck_assert_int_eq(trun_cpu_max_parse("99999999999999999999999 100000"), -EINVAL); /* overflow */
  ck_assert_int_eq(trun_cpu_max_parse(NULL), -EINVAL);
}
END_TEST

START_TEST(cfs_quota_variants) {
  ck_assert_int_eq(trun_cfs_quota_parse("-1\n", "100000\n"), 0);
  ck_assert_int_eq(trun_cfs_quota_parse("300000\n", "100000\n"), 3);
  ck_assert_int_eq(trun_cfs_quota_parse("250000", "100000"), 3);
  ck_assert_int_eq(trun_cfs_quota_parse("50000", "100000"), 1);
  ck_assert_int_eq(trun_cfs_quota_parse("0", "100000"), -EINVAL);
  ck_assert_int_eq(trun_cfs_quota_parse("-2", "100000"), -EINVAL);
  ck_assert_int_eq(trun_cfs_quota_parse("-1x", "100000"), -EINVAL);
  ck_assert_int_eq(trun_cfs_quota_parse("100000", "0"), -EINVAL);
  ck_assert_int_eq(trun_cfs_quota_parse("100000", ""), -EINVAL);
  ck_assert_int_eq(trun_cfs_quota_parse("x", "100000"), -EINVAL);
  ck_assert_int_eq(trun_cfs_quota_parse(NULL, "100000"), -EINVAL);
}
END_TEST

START_TEST(cgroup_trees) {
  char *v2q = fixture("cgroup/v2-quota"), *v2u = fixture("cgroup/v2-unlimited");
  char *v1q = fixture("cgroup/v1-quota"), *v1u = fixture("cgroup/v1-unlimited");
  char *none = fixture("cgroup/no-such-tree");
  /* v2: the smallest quota from our cgroup up to the root. */
  ck_assert_int_eq(trun_cgroup_cpu_limit(v2q, "0::/\n"), 2);
  ck_assert_int_eq(trun_cgroup_cpu_limit(v2q, "0::/sub\n"), 2);
  ck_assert_int_eq(trun_cgroup_cpu_limit(v2q, "0::/sub/leaf\n"), 1);
  ck_assert_int_eq(trun_cgroup_cpu_limit(v2q, "0::/sub/leaf/\n"), 1);
  ck_assert_int_eq(trun_cgroup_cpu_limit(v2q, "0::/kubepods/burstable/pod1\n"), 2); /* host view: root */
  ck_assert_int_eq(trun_cgroup_cpu_limit(v2q, "0::/sub/../..\n"), 2);               /* never followed */
  ck_assert_int_eq(trun_cgroup_cpu_limit(v2q, NULL), 2);
  ck_assert_int_eq(trun_cgroup_cpu_limit(v2q, "garbage"), 2);
  ck_assert_int_eq(trun_cgroup_cpu_limit(v2u, "0::/\n"), 0);
  /* v1: the cpu controller's line, its directory by name or by the usual names. */
  ck_assert_int_eq(trun_cgroup_cpu_limit(v1q, "4:cpu,cpuacct:/\n"), 3);
  ck_assert_int_eq(trun_cgroup_cpu_limit(v1q, "12:pids:/x\n4:cpu,cpuacct:/docker/abc\n0::/\n"), 1);
  ck_assert_int_eq(trun_cgroup_cpu_limit(v1q, "4:cpuacct,cpu:/docker/abc\n"), 1);
  ck_assert_int_eq(trun_cgroup_cpu_limit(v1q, "2:cpuacct:/docker/abc\n1:cpu:/docker/abc\n"), 1);
  ck_assert_int_eq(trun_cgroup_cpu_limit(v1q, "4:cpuacct:/docker/abc\n"), 3); /* no cpu line: "/" */
  ck_assert_int_eq(trun_cgroup_cpu_limit(v1u, "3:cpu:/\n"), 0);
  ck_assert_int_eq(trun_cgroup_cpu_limit(none, "0::/\n"), 0);
  ck_assert_int_eq(trun_cgroup_cpu_limit("", "0::/\n"), 0);
  free(v2q), free(v2u), free(v1q), free(v1u), free(none);
}
END_TEST

/* trun_discover_cpus through TRUN_CGROUP_ROOT, with this process's real /proc/self/cgroup: the fixture
 * trees hold their quota at the root, which is where any path that is not in them leads. */
START_TEST(discover_cpus_fixtures) {
  int aff = affinity_cpus();
  ck_assert_int_ge(aff, 1);
  struct {
    const char *tree;
    int limit;
  } cases[] = {{"cgroup/v2-quota", 2},
               {"cgroup/v2-unlimited", 0},
               {"cgroup/v1-quota", 3},
               {"cgroup/v1-unlimited", 0},
               {"cgroup/no-such-tree", 0}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char *root = fixture(cases[i].tree);
    setenv("TRUN_CGROUP_ROOT", root, 1);
    int want = cases[i].limit ? min_int(aff, cases[i].limit) : aff;
    ck_assert_msg(trun_discover_cpus() == want, "%s: got %d CPUs, want %d (affinity %d)", cases[i].tree,
                  trun_discover_cpus(), want, aff);
    free(root);
  }
  unsetenv("TRUN_CGROUP_ROOT");
  int host = trun_discover_cpus();
  ck_assert_int_ge(host, 1);
  ck_assert_int_le(host, aff);
  printf("discover_cpus: affinity %d, this host's cgroup allows %d\n", aff, host);
}
END_TEST

/* --nproc-per-node: `auto` without GPUs honours the quota; `cpu` is os.cpu_count() (online CPUs). */
START_TEST(nproc_auto_and_cpu) {
  char *root = fixture("cgroup/v2-quota");
  setenv("TRUN_CGROUP_ROOT", root, 1);
  setenv("CUDA_VISIBLE_DEVICES", "", 1); /* no GPU visible */
  char err[256] = "";
  int n = 0;
  ck_assert_int_eq(trun_nproc_resolve("auto", &n, err, sizeof(err)), 0);
  ck_assert_int_eq(n, min_int(affinity_cpus(), 2));
  ck_assert_int_eq(trun_nproc_resolve("cpu", &n, err, sizeof(err)), 0);
  ck_assert_int_eq(n, (int)sysconf(_SC_NPROCESSORS_ONLN));
  ck_assert_int_eq(trun_nproc_resolve("gpu", &n, err, sizeof(err)), -1);
  ck_assert_ptr_nonnull(strstr(err, "no GPU"));
  unsetenv("TRUN_CGROUP_ROOT");
  unsetenv("CUDA_VISIBLE_DEVICES");
  free(root);
}
END_TEST

/* ---- DMI -------------------------------------------------------------------------------------- */

START_TEST(instance_type_names) {
  const char *yes[] = {"p4d.24xlarge",      "p4de.24xlarge",    "p5.48xlarge",     "p5en.48xlarge",
                       "p6-b200.48xlarge",  "g5.48xlarge",      "g6e.12xlarge",    "trn1n.32xlarge",
                       "u-6tb1.metal",      "mac2-m2pro.metal", "c7gd.metal-48xl", "t3.nano",
                       "p6e-gb200.36xlarge"};
  const char *no[] = {"",
                      "HVM domU",
                      "Standard PC (Q35 + ICH9, 2009)",
                      "P4D.24XLARGE",
                      "p4d",
                      "p4d.",
                      ".24xlarge",
                      "p4d.24xlarge.x",
                      "abc.large",
                      "p4d.24xlarge\n",
                      "p4d 24xlarge",
                      "p4d-.24xlarge",
                      "p4d.24xlarge-",
                      "4pd.24xlarge",
                      "Google Compute Engine",
                      "To Be Filled By O.E.M.",
                      "p4d.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
  for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
    ck_assert_msg(trun_instance_type_plausible(yes[i]), "'%s' should look like an instance type", yes[i]);
  for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
    ck_assert_msg(!trun_instance_type_plausible(no[i]), "'%s' should not look like an instance type", no[i]);
  ck_assert(!trun_instance_type_plausible(NULL));
}
END_TEST

START_TEST(dmi_names) {
  char out[64];
  ck_assert_int_eq(trun_dmi_instance_type("p4d.24xlarge\n", "Amazon EC2\n", out, sizeof(out)), 1);
  ck_assert_str_eq(out, "p4d.24xlarge");
  ck_assert_int_eq(trun_dmi_instance_type("  p5.48xlarge \nsecond line\n", NULL, out, sizeof(out)), 1);
  ck_assert_str_eq(out, "p5.48xlarge");
  ck_assert_int_eq(trun_dmi_instance_type("c7.large\n", "Dell Inc.\n", out, sizeof(out)), 0);
  ck_assert_int_eq(trun_dmi_instance_type("HVM domU\n", "Xen\n", out, sizeof(out)), 0);
  ck_assert_int_eq(trun_dmi_instance_type("Not Specified\n", "Amazon EC2\n", out, sizeof(out)), 0);
  ck_assert_int_eq(trun_dmi_instance_type("p4d.24xlarge\n", "Amazon EC2\n", out, 8), 0); /* too small */
  ck_assert_int_eq(trun_dmi_instance_type(NULL, NULL, out, sizeof(out)), 0);
}
END_TEST

START_TEST(dmi_fallback_trees) {
  struct {
    const char *tree, *type, *source;
  } cases[] = {{"dmi/p4d", "p4d.24xlarge", "dmi"},
               {"dmi/p5", "p5.48xlarge", "dmi"},
               {"dmi/g6e-novendor", "g6e.12xlarge", "dmi"},
               {"dmi/qemu", "", "none"},
               {"dmi/xen-hvm", "", "none"},
               {"dmi/other-vendor", "", "none"},
               {"dmi/empty", "", "none"},
               {"dmi/no-such-dir", "", "none"}};
  trun_node *node = calloc(1, sizeof(*node));
  ck_assert_ptr_nonnull(node);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char *root = fixture(cases[i].tree);
    setenv("TRUN_DMI_ROOT", root, 1);
    strcpy(node->instance.instance_id, "stale");
    ck_assert_int_eq(trun_discover_instance(node, 1), 0); /* no_imds: never touches the network */
    ck_assert_msg(strcmp(node->instance.instance_type, cases[i].type) == 0, "%s: type '%s', want '%s'",
                  cases[i].tree, node->instance.instance_type, cases[i].type);
    ck_assert_str_eq(node->instance.source, cases[i].source);
    ck_assert_str_eq(node->instance.instance_id, "");
    ck_assert_str_eq(node->instance.availability_zone, "");
    ck_assert_str_eq(node->instance.placement_group, "");
    free(root);
  }
  unsetenv("TRUN_DMI_ROOT");
  ck_assert_int_eq(trun_discover_instance(NULL, 1), -EINVAL);
  free(node);
}
END_TEST

/* ---- IMDS (against tests/fakes/imds_server.py) ------------------------------------------------- */

typedef struct {
  long connections, requests, puts, gets;
} fake_counts;

static size_t sink(char *p, size_t size, size_t nmemb, void *ud) {
  FILE *m = ud;
  return fwrite(p, size, nmemb, m);
}

/* The fake's counters from its control port (TRUN_IMDS_CONTROL). */
static fake_counts fake_count(void) {
  const char *ctl = getenv("TRUN_IMDS_CONTROL");
  ck_assert_msg(ctl && *ctl, "TRUN_IMDS_CONTROL is not set (run tests/integration/61-instance-identity.sh)");
  char url[256];
  snprintf(url, sizeof(url), "%s/count", ctl);
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  CURL *h = curl_easy_init();
  ck_assert_ptr_nonnull(h);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, m);
  CURLcode rc = curl_easy_perform(h);
  curl_easy_cleanup(h);
  fclose(m);
  ck_assert_msg(rc == CURLE_OK, "GET %s: %s", url, curl_easy_strerror(rc));
  json_error_t jerr;
  json_t *j = json_loads(buf, 0, &jerr);
  ck_assert_msg(j != NULL, "GET %s: not JSON: %s", url, buf);
  fake_counts c = {json_integer_value(json_object_get(j, "connections")),
                   json_integer_value(json_object_get(j, "requests")),
                   json_integer_value(json_object_get(j, "puts")),
                   json_integer_value(json_object_get(j, "gets"))};
  json_decref(j);
  free(buf);
  return c;
}

static const char *imds_mode(void) {
  const char *m = getenv("TRUN_IMDS_MODE");
  return m && *m ? m : "normal";
}

START_TEST(imds_mode_case) {
  const char *mode = imds_mode();
  int counted = strcmp(mode, "refused") != 0;
  char *dmi = fixture("dmi/p5"); /* the fallback says p5.48xlarge, the fake says p4d.24xlarge */
  setenv("TRUN_DMI_ROOT", dmi, 1);
  trun_node *node = calloc(1, sizeof(*node));
  ck_assert_ptr_nonnull(node);
  fake_counts before = {0}, after = {0};
  if (counted) before = fake_count();
  double t0 = now_s();
  ck_assert_int_eq(trun_discover_instance(node, 0), 0);
  double dt = now_s() - t0;
  if (counted) after = fake_count();
  trun_instance *in = &node->instance;
  printf(
      "imds mode %s: %.3f s, source %s, type '%s', id '%s', az '%s', group '%s'; fake saw %ld "
      "connections, %ld PUT, %ld GET\n",
      mode, dt, in->source, in->instance_type, in->instance_id, in->availability_zone, in->placement_group,
      after.connections - before.connections, after.puts - before.puts, after.gets - before.gets);
  long puts = after.puts - before.puts, gets = after.gets - before.gets;
  ck_assert_msg(dt < 5.0, "mode %s: trun_discover_instance took %.3f s (the budget is ~1 s)", mode, dt);
  if (strcmp(mode, "normal") == 0 || strcmp(mode, "nogroup") == 0 || strcmp(mode, "v1only") == 0) {
    ck_assert_str_eq(in->source, "imds");
    ck_assert_str_eq(in->instance_type, "p4d.24xlarge");
    ck_assert_str_eq(in->instance_id, "i-0123456789abcdef0");
    ck_assert_str_eq(in->availability_zone, "us-east-1a");
    ck_assert_str_eq(in->placement_group, strcmp(mode, "nogroup") == 0 ? "" : "trun-pg");
    ck_assert_int_eq(puts, 1);
    ck_assert_int_eq(gets, 4);
  } else if (strcmp(mode, "badfields") == 0) {
    ck_assert_str_eq(in->source, "imds");
    ck_assert_str_eq(in->instance_type, "p4d.24xlarge");
    ck_assert_str_eq(in->instance_id, "");
    ck_assert_str_eq(in->availability_zone, "");
    ck_assert_str_eq(in->placement_group, "");
  } else {
    /* stall, token401, token400, malformed, refused: the DMI fallback and nothing from the fake. */
    ck_assert_str_eq(in->source, "dmi");
    ck_assert_str_eq(in->instance_type, "p5.48xlarge");
    ck_assert_str_eq(in->instance_id, "");
    ck_assert_str_eq(in->availability_zone, "");
    ck_assert_str_eq(in->placement_group, "");
    if (strcmp(mode, "token401") == 0) { /* PUT refused -> one tokenless GET -> 401: IMDSv2 required */
      ck_assert_int_eq(puts, 1);
      ck_assert_int_eq(gets, 1);
    } else if (strcmp(mode, "token400") == 0) { /* 400 is terminal */
      ck_assert_int_eq(puts, 1);
      ck_assert_int_eq(gets, 0);
    } else if (strcmp(mode, "malformed") == 0) { /* a bad instance type ends it */
      ck_assert_int_eq(puts, 1);
      ck_assert_int_eq(gets, 1);
    } else if (strcmp(mode, "stall") == 0) { /* the PUT, then a tokenless GET in the time left */
      ck_assert_int_ge(after.connections - before.connections, 1);
      ck_assert_int_le(after.connections - before.connections, 2);
    }
  }
  if (strcmp(mode, "stall") != 0)
    ck_assert_msg(dt < 1.0, "mode %s answered at once but took %.3f s", mode, dt);
  free(node);
  free(dmi);
  unsetenv("TRUN_DMI_ROOT");
}
END_TEST

/* no_imds, or AWS_EC2_METADATA_DISABLED=true, makes no connection at all. */
START_TEST(imds_disabled_no_connection) {
  if (strcmp(imds_mode(), "refused") == 0) return;
  trun_node *node = calloc(1, sizeof(*node));
  ck_assert_ptr_nonnull(node);
  fake_counts before = fake_count();
  ck_assert_int_eq(trun_discover_instance(node, 1), 0);
  ck_assert_str_ne(node->instance.source, "imds");
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  ck_assert_int_eq(trun_discover_instance(node, 0), 0);
  ck_assert_str_ne(node->instance.source, "imds");
  unsetenv("AWS_EC2_METADATA_DISABLED");
  fake_counts after = fake_count();
  ck_assert_int_eq(after.connections, before.connections);
  ck_assert_int_eq(after.requests, before.requests);
  free(node);
}
END_TEST

int main(void) {
  Suite *s = suite_create("instance");
  TCase *tc = tcase_create("parse");
  tcase_add_test(tc, cpu_max_variants);
  tcase_add_test(tc, cfs_quota_variants);
  tcase_add_test(tc, cgroup_trees);
  tcase_add_test(tc, discover_cpus_fixtures);
  tcase_add_test(tc, nproc_auto_and_cpu);
  tcase_add_test(tc, instance_type_names);
  tcase_add_test(tc, dmi_names);
  tcase_add_test(tc, dmi_fallback_trees);
  suite_add_tcase(s, tc);
  const char *ep = getenv("TRUN_IMDS_ENDPOINT");
  if (ep && *ep) {
    TCase *ti = tcase_create("imds");
    tcase_set_timeout(ti, 30);
    tcase_add_test(ti, imds_mode_case);
    tcase_add_test(ti, imds_disabled_no_connection);
    suite_add_tcase(s, ti);
  } else {
    printf(
        "test_instance: TRUN_IMDS_ENDPOINT is not set; IMDS cases skipped "
        "(tests/integration/61-instance-identity.sh runs them against tests/fakes/imds_server.py)\n");
  }
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
