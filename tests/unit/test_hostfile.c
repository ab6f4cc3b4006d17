/* launcher/hostfile.c: the hostfile parser, remote-shell quoting (checked by a real /bin/sh) and the
 * command line every host's agent gets. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cli.h"
#include "config.h"
#include "hostfile.h"

#define ARGV(...) ((char *[]){"trun", __VA_ARGS__, NULL})
#define NOENV ((char *[]){NULL})

static char err[1024];

static int parse_text(const char *text, trun_hostfile *hf) {
  err[0] = '\0';
  return trun_hostfile_parse("hosts", text, strlen(text), hf, err, sizeof(err));
}

static void assert_bad(const char *text, const char *msg) {
  trun_hostfile hf;
  ck_assert_int_eq(parse_text(text, &hf), -1);
  ck_assert_str_eq(err, msg);
  ck_assert_ptr_null(hf.h);
}

START_TEST(test_parse_deepspeed_format) {
  trun_hostfile hf;
  ck_assert_int_eq(parse_text("# the cluster\n\nworker-0 slots=8\n  worker-1\tslots=4  # half\n"
                              "10.0.0.3\nubuntu@[fe80::1%eth0]   \n",
                              &hf),
                   0);
  ck_assert_uint_eq(hf.n, 4);
  ck_assert_str_eq(hf.h[0].host, "worker-0");
  ck_assert_int_eq(hf.h[0].slots, 8);
  ck_assert_int_eq(hf.h[0].line, 3);
  ck_assert_str_eq(hf.h[1].host, "worker-1");
  ck_assert_int_eq(hf.h[1].slots, 4);
  ck_assert_str_eq(hf.h[2].host, "10.0.0.3");
  ck_assert_int_eq(hf.h[2].slots, 0);
  ck_assert_str_eq(hf.h[3].host, "ubuntu@[fe80::1%eth0]");
  ck_assert_int_eq(hf.h[3].line, 6);
  trun_hostfile_free(&hf);
  ck_assert_int_eq(parse_text("a", &hf), 0); /* no final newline */
  ck_assert_uint_eq(hf.n, 1);
  trun_hostfile_free(&hf);
}
END_TEST

START_TEST(test_parse_errors) {
  assert_bad("", "hosts: no hosts (one 'host [slots=N]' per line)");
  assert_bad("# nothing\n\n", "hosts: no hosts (one 'host [slots=N]' per line)");
  assert_bad("a\nb slots=0\n", "hosts:2: slots must be an integer from 1 to 1024, got '0'");
  assert_bad("a slots=x\n", "hosts:1: slots must be an integer from 1 to 1024, got 'x'");
  assert_bad("a slots=\n", "hosts:1: slots must be an integer from 1 to 1024, got ''");
  assert_bad("a slots=4 extra\n", "hosts:1: unexpected 'extra': a line is 'host' or 'host slots=N'");
  assert_bad("a gpus=4\n", "hosts:1: unexpected 'gpus=4' after the host: a line is 'host' or 'host slots=N'");
  assert_bad(
      "a\n-oProxyCommand=x\n",
      "hosts:2: '-oProxyCommand=x' is not a host name (letters, digits, '.', '-', '_', ':', '@', '[', ']'; "
      "at most 255 characters; not starting with '-')");
  assert_bad("a;rm\n",
             "hosts:1: 'a;rm' is not a host name (letters, digits, '.', '-', '_', ':', '@', '[', ']'; "
             "at most 255 characters; not starting with '-')");
  assert_bad("a slots=2\nb\na\n",
             "hosts:3: host 'a' is already on line 1 (one line per host; slots=N sets its workers)");
  trun_hostfile hf;
  ck_assert_int_eq(trun_hostfile_parse("hosts", "a\0b\n", 4, &hf, err, sizeof(err)), -1);
  ck_assert_str_eq(err, "hosts: contains a NUL byte: not a hostfile");
  ck_assert_int_eq(trun_hostfile_load("/nonexistent/hosts", &hf, err, sizeof(err)), -1);
  ck_assert_str_eq(err, "--hostfile /nonexistent/hosts: cannot open: No such file or directory");
}
END_TEST

/* Runs `sh -c 'printf "<%s>\n" WORDS'` (WORDS: the quoted strings joined by spaces, as ssh joins them) and
 * returns what the shell printed. */
static char *through_shell(char **quoted, int n) {
  char cmd[8192] = "printf '<%s>\\n'";
  for (int i = 0; i < n; i++) {
    strcat(cmd, " ");
    strcat(cmd, quoted[i]);
  }
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  static char out[8192];
  size_t got = fread(out, 1, sizeof(out) - 1, p);
  out[got] = '\0';
  ck_assert_int_eq(pclose(p), 0);
  return out;
}

START_TEST(test_shell_quote_real_shell) {
  const char *words[] = {"plain", "",  "two words", "it's",      "'",     "''", "$HOME", "`id`",
                         "a\\b",  "*", "x\ny",      "--opt=a b", "\"q\"", "!",  ";",     "&& echo pwned"};
  int n = (int)(sizeof(words) / sizeof(words[0]));
  char *quoted[32];
  char want[8192] = "";
  for (int i = 0; i < n; i++) {
    quoted[i] = trun_shell_quote(words[i]);
    ck_assert_ptr_nonnull(quoted[i]);
    ck_assert_int_eq(quoted[i][0], '\'');
    strcat(want, "<");
    strcat(want, words[i]);
    strcat(want, ">\n");
  }
  ck_assert_str_eq(through_shell(quoted, n), want);
  ck_assert_str_eq(quoted[3], "'it'\\''s'");
  for (int i = 0; i < n; i++) free(quoted[i]);
}
END_TEST

typedef struct {
  trun_settings cl;
  trun_config cfg;
  trun_hostfile hf;
  char **argv;
} built;

/* argv[] through the CLI and the config, then host i's command. */
static void build(built *b, char **argv, const char *hosts, size_t i) {
  int argc = 0;
  while (argv[argc]) argc++;
  ck_assert_msg(trun_cli_parse(argc, argv, NOENV, &b->cl, err, sizeof(err)) == 0, "%s", err);
  ck_assert_msg(trun_config_from_settings(&b->cl, NOENV, &b->cfg, err, sizeof(err)) == 0, "%s", err);
  ck_assert_int_eq(parse_text(hosts, &b->hf), 0);
  const char *rsh = b->cl.v[TRUN_OPT_RSH].val;
  ck_assert_msg(trun_hostfile_argv(&b->cl, &b->cfg, &b->hf, i, rsh, "/opt/trun bin/trun", &b->argv, err,
                                   sizeof(err)) == 0,
                "%s", err);
}

static char *joined(char **argv) {
  static char out[8192];
  out[0] = '\0';
  for (char **a = argv; *a; a++) {
    if (a != argv) strcat(out, " ");
    strcat(out, *a);
  }
  return out;
}

static void release(built *b) {
  trun_argv_free(b->argv);
  trun_hostfile_free(&b->hf);
}

START_TEST(test_argv_static) {
  built b;
  build(
      &b,
      ARGV("--hostfile", "h.txt", "--nproc_per_node", "2", "--nnodes", "7", "--node-rank=5", "--master-port",
           "29511", "--max-restarts=1", "-m", "--rsh", "my rsh", "train", "--name", "a b", "it's"),
      "u@h0\nh1 slots=8\nh2\n", 1);
  ck_assert_str_eq(
      joined(b.argv),
      "my rsh h1 '/opt/trun bin/trun' '--watch-stdin' '--nproc-per-node=2' '--max-restarts=1' '--module' "
      "'--nnodes=3' '--node-rank=1' '--master-addr=h0' '--master-port=29511' 'train' '--name' "
      "'a b' 'it'\\''s'");
  release(&b);
  /* slots= gives the worker count when the command line does not; the default port; --master-addr wins. */
  build(&b, ARGV("--hostfile", "h.txt", "--master-addr", "10.0.0.9", "-", "x"), "h0\nh1 slots=8\n", 1);
  ck_assert_str_eq(joined(b.argv),
                   "ssh -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=10 h1 '/opt/trun "
                   "bin/trun' '--watch-stdin' '--nproc-per-node=8' "
                   "'--nnodes=2' '--node-rank=1' '--master-addr=10.0.0.9' '--master-port=29500' "
                   "'--' '-' 'x'");
  release(&b);
  build(&b, ARGV("--hostfile", "h.txt", "--", "-weird.py"), "h0\n", 0);
  ck_assert_str_eq(joined(b.argv),
                   "ssh -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=10 h0 '/opt/trun "
                   "bin/trun' '--watch-stdin' '--nnodes=1' '--node-rank=0' "
                   "'--master-addr=h0' '--master-port=29500' '--' '-weird.py'");
  release(&b);
}
END_TEST

START_TEST(test_argv_c10d) {
  built b;
  build(&b, ARGV("--hostfile", "h.txt", "--rdzv-backend", "c10d", "--master-port", "1234", "t.py"),
        "h0 slots=2\n[::1]\n", 1);
  ck_assert_str_eq(joined(b.argv),
                   "ssh -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=10 [::1] '/opt/trun "
                   "bin/trun' '--watch-stdin' '--rdzv-backend=c10d' "
                   "'--master-port=1234' '--nnodes=2' '--rdzv-endpoint=h0:1234' 't.py'");
  release(&b);
  build(&b,
        ARGV("--hostfile", "h.txt", "--rdzv-backend", "c10d", "--rdzv-endpoint", "e:1", "--nnodes", "1:3",
             "t.py"),
        "h0\nh1\n", 0);
  ck_assert_str_eq(joined(b.argv),
                   "ssh -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=10 h0 '/opt/trun "
                   "bin/trun' '--watch-stdin' '--nnodes=1:3' "
                   "'--rdzv-backend=c10d' '--rdzv-endpoint=e:1' 't.py'");
  release(&b);
}
END_TEST

/* The remote words, re-split by a real shell, are exactly the arguments trun's parser reads back. */
START_TEST(test_argv_survives_remote_shell) {
  built b;
  build(&b, ARGV("--hostfile", "h.txt", "--log-dir", "/tmp/a b/$X", "--role=it's", "s.py", "`x`", "", "a  b"),
        "h0\n", 0);
  int n = 0;
  while (b.argv[n]) n++;
  char *out = through_shell(b.argv + 9, n - 9); /* after the default rsh (7 words), h0 and trun's path */
  ck_assert_str_eq(out,
                   "<--watch-stdin>\n<--role=it's>\n<--log-dir=/tmp/a b/$X>\n<--nnodes=1>\n<--node-rank=0>\n"
                   "<--master-addr=h0>\n<--master-port=29500>\n<s.py>\n<`x`>\n<>\n<a  b>\n");
  release(&b);
}
END_TEST

START_TEST(test_argv_bad_rsh) {
  trun_settings cl;
  trun_config cfg;
  trun_hostfile hf;
  char **argv;
  ck_assert_int_eq(trun_cli_parse(4, ARGV("--hostfile", "h", "t.py"), NOENV, &cl, err, sizeof(err)), 0);
  ck_assert_int_eq(trun_config_from_settings(&cl, NOENV, &cfg, err, sizeof(err)), 0);
  ck_assert_int_eq(parse_text("h0\n", &hf), 0);
  ck_assert_int_eq(trun_hostfile_argv(&cl, &cfg, &hf, 0, "  \t", "/t", &argv, err, sizeof(err)), -1);
  ck_assert_str_eq(err,
                   "--rsh is empty: give the remote shell command, e.g. --rsh 'ssh -o BatchMode=yes -o "
                   "ConnectTimeout=10 -o ServerAliveInterval=10'");
  ck_assert_ptr_null(argv);
  trun_hostfile_free(&hf);
}
END_TEST

static Suite *hostfile_suite(void) {
  Suite *s = suite_create("hostfile");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_parse_deepspeed_format);
  tcase_add_test(tc, test_parse_errors);
  tcase_add_test(tc, test_shell_quote_real_shell);
  tcase_add_test(tc, test_argv_static);
  tcase_add_test(tc, test_argv_c10d);
  tcase_add_test(tc, test_argv_survives_remote_shell);
  tcase_add_test(tc, test_argv_bad_rsh);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(hostfile_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
