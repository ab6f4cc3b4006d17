/* config/yaml_file.c and config/print.c: the YAML config file against the fixtures in tests/fixtures/config/
 * (every invalid one with its exact message), the 10 MiB limit, the precedence matrix cli > env > file >
 * detected > default, and --print-config's output read back as a config file. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "platform.h"
#include "print.h"
#include "yaml_file.h"

#define NOENV ((char *[]){NULL})

static char err[2048];
static char tmpdir[64];

static const char *repo(void) {
  const char *r = getenv("TRUN_REPO");
  return r && *r ? r : ".";
}

static const char *fixture(const char *name) {
  static char p[PATH_MAX];
  snprintf(p, sizeof(p), "%s/tests/fixtures/config/%s", repo(), name);
  return p;
}

static void setup(void) {
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/trun-test-yaml.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}

static const char *write_tmp(const char *name, const char *text) {
  static char p[256];
  snprintf(p, sizeof(p), "%s/%s", tmpdir, name);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
  return p;
}

/* What trun's main does: command line + environment, detected platform, then the file, then the typed
 * config. Returns 0, or -1 with err set. */
typedef struct {
  trun_settings cl;
  trun_platform plat;
  trun_yaml_doc doc;
  trun_config cfg;
} resolved;

static int resolve(resolved *r, char **argv, char **envp, const trun_platform_host *host) {
  int argc = 0;
  while (argv[argc]) argc++;
  memset(r, 0, sizeof(*r));
  err[0] = '\0';
  if (trun_cli_parse(argc, argv, envp, &r->cl, err, sizeof(err)) < 0) return -1;
  if (trun_platform_detect(envp, host, &r->plat, err, sizeof(err)) < 0) return -1;
  trun_platform_apply(&r->plat, &r->cl);
  const char *path = r->cl.v[TRUN_OPT_CONFIG].val;
  if (path) {
    if (trun_yaml_load(path, &r->doc, err, sizeof(err)) < 0) return -1;
    trun_yaml_apply(&r->doc, &r->cl);
  }
  return trun_config_from_settings(&r->cl, envp, &r->cfg, err, sizeof(err));
}

static void release(resolved *r) {
  trun_yaml_free(&r->doc);
  trun_platform_free(&r->plat);
}

/* ---- invalid fixtures: exact messages ------------------------------------------------------------------ */

static const struct {
  const char *file, *msg; /* msg follows "<path>:" */
} invalid[] = {
    {"tab-indent.yaml", "3:1: tab character in indentation; YAML indents with spaces"},
    {"anchor.yaml", "1:9: anchors (&n) are not supported; write the value out in full"},
    {"alias.yaml", "2:16: aliases (*seed) are not supported; write the value out in full"},
    {"tag.yaml", "1:9: tags (!!str) are not supported; remove the tag"},
    {"duplicate.yaml", "2:1: duplicate key 'nnodes' (first set at line 1)"},
    {"duplicate-spelling.yaml",
     "3:1: duplicate key 'nproc_per_node' (first set at line 1 as 'nproc-per-node')"},
    {"unknown-typo.yaml", "2:1: unknown key 'nproc-per-nodes'; did you mean 'nproc-per-node'?"},
    {"unknown-far.yaml",
     "1:1: unknown key 'colour' (the keys are the long option names, e.g. nproc-per-node, "
     "and script, args; see config/README.md)"},
    {"bad-syntax.yaml",
     "3:5: invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence at line 2, column "
     "7)"},
    {"bad-indent.yaml", "2:7: invalid YAML: mapping values are not allowed in this context"},
    {"non-utf8.yaml", "1:10: invalid UTF-8 (byte 0xe9); save the file as UTF-8"},
    {"control-char.yaml",
     "1:9: control character 0x01 is not allowed; remove it (inside double quotes write an escape such as "
     "\\t)"},
    {"wrong-type-list.yaml", "1:9: nnodes: expected a single value, got a list"},
    {"wrong-type-mapping.yaml", "2:3: rdzv-conf: expected a single value, got a mapping"},
    {"wrong-type-flag.yaml", "1:13: standalone: expected true or false, got 'yes'"},
    {"wrong-type-int.yaml", "2:15: max-restarts 'three' must be an integer >= 0"},
    {"out-of-range.yaml", "1:14: master-port '70000' must be a port 0-65535"},
    {"out-of-range-rank.yaml", "2:12: node-rank 3 must be below --nnodes 3"},
    {"top-level-list.yaml", "1:1: expected 'key: value' settings at the top level, got a list"},
    {"two-documents.yaml",
     "2:1: a second YAML document ('---') is not supported; keep one document per file"},
    {"config-key.yaml", "1:1: 'config' cannot be set in a config file (give --config on the command line)"},
    {"args-not-list.yaml",
     "1:7: args: expected a list of arguments such as [--epochs, 3], got a single value"},
    {"args-nested.yaml", "1:8: args: each argument must be a single value, got a list"},
    {"script-empty.yaml", "1:9: script: expected the path of the training script, got an empty string"},
};

START_TEST(test_invalid_fixture) {
  char path[PATH_MAX], want[PATH_MAX + 256];
  snprintf(path, sizeof(path), "%s", fixture(invalid[_i].file));
  snprintf(want, sizeof(want), "%s:%s", path, invalid[_i].msg);
  resolved r;
  ck_assert_int_eq(resolve(&r, (char *[]){"trun", "--config", path, "--print-config", NULL}, NOENV, NULL),
                   -1);
  ck_assert_str_eq(err, want);
  release(&r);
}
END_TEST

/* ---- valid files --------------------------------------------------------------------------------------- */

START_TEST(test_valid_full) {
  resolved r;
  const char *path = fixture("valid-full.yaml");
  ck_assert_msg(resolve(&r, (char *[]){"trun", "--config", (char *)path, NULL}, NOENV, NULL) == 0, "%s", err);
  const trun_opt_val *v = r.cl.v;
  ck_assert_str_eq(v[TRUN_OPT_NNODES].val, "1:2");
  ck_assert_int_eq(v[TRUN_OPT_NNODES].src, TRUN_SRC_FILE);
  ck_assert_int_eq(v[TRUN_OPT_NNODES].line, 2);
  ck_assert_int_eq(v[TRUN_OPT_NNODES].col, 9);
  ck_assert_str_eq(v[TRUN_OPT_NPROC_PER_NODE].val, "4");
  ck_assert_str_eq(v[TRUN_OPT_RDZV_ENDPOINT].val, "head.example:29400");
  ck_assert_int_eq(v[TRUN_OPT_RDZV_ENDPOINT].col, 16);
  ck_assert_ptr_null(v[TRUN_OPT_STANDALONE].val);
  ck_assert_int_eq(v[TRUN_OPT_STANDALONE].src, TRUN_SRC_FILE);
  ck_assert_ptr_null(v[TRUN_OPT_MODULE].val);
  ck_assert_str_eq(v[TRUN_OPT_NO_PYTHON].val, "1");
  ck_assert_ptr_null(v[TRUN_OPT_LOG_DIR].val);
  ck_assert_int_eq(v[TRUN_OPT_LOG_DIR].src, TRUN_SRC_FILE);
  ck_assert_str_eq(v[TRUN_OPT_LOG_LINE_PREFIX].val, "[${rank}]: ");
  ck_assert_int_eq(v[TRUN_OPT_ROLE].src, TRUN_SRC_DEFAULT);
  ck_assert_str_eq(v[TRUN_OPT_ROLE].val, "default");
  /* the typed config saw the file's values */
  ck_assert_int_eq(r.cfg.min_nodes, 1);
  ck_assert_int_eq(r.cfg.max_nodes, 2);
  ck_assert_int_eq(r.cfg.backend, TRUN_RDZV_C10D);
  ck_assert_str_eq(r.cfg.endpoint_host, "head.example");
  ck_assert_int_eq(r.cfg.max_restarts, 3);
  ck_assert_double_eq(r.cfg.monitor_interval, 0.5);
  ck_assert_int_eq(r.cfg.no_python, 1);
  ck_assert_int_eq(r.cfg.redirect_lr[0], 3);
  ck_assert_int_eq(r.cfg.tee_all, 3);
  ck_assert_int_eq(r.cfg.nsignals, 2);
  ck_assert_str_eq(r.cfg.script, "/opt/train.py");
  ck_assert_int_eq(r.cfg.nscript_args, 3);
  ck_assert_str_eq(r.cfg.script_args[0], "--lr");
  ck_assert_str_eq(r.cfg.script_args[1], "0.1");
  ck_assert_str_eq(r.cfg.script_args[2], "--name=a b");
  ck_assert_ptr_null(r.cfg.script_args[3]);
  ck_assert_int_eq(r.cl.script_src, TRUN_SRC_FILE);
  ck_assert_int_eq(r.cl.script_line, 18);
  ck_assert_int_eq(r.cl.args_line, 19);
  release(&r);
}
END_TEST

/* An empty file, only comments, or a null document: valid, and nothing is set. */
START_TEST(test_empty_files) {
  static const char *const files[] = {"empty.yaml", "comments-only.yaml", "null-document.yaml"};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    resolved r;
    char *path = (char *)fixture(files[i]);
    ck_assert_msg(resolve(&r, (char *[]){"trun", "--config", path, "t.py", NULL}, NOENV, NULL) == 0, "%s: %s",
                  files[i], err);
    for (int id = 0; id < TRUN_OPT__COUNT; id++) {
      if (id == TRUN_OPT_CONFIG) continue;
      ck_assert_msg(r.cl.v[id].src == TRUN_SRC_DEFAULT, "%s: option %d", files[i], id);
    }
    ck_assert_str_eq(r.cfg.script, "t.py");
    release(&r);
  }
}
END_TEST

/* A file of exactly 10 MiB loads; one byte more is refused before it is read, with the size in the message.
 */
START_TEST(test_size_limit) {
  char path[256], want[512];
  snprintf(path, sizeof(path), "%s/big.yaml", tmpdir);
  const char tail[] = "nnodes: 2\n";
  char line[100];
  memset(line, ' ', sizeof(line));
  line[0] = '#';
  line[sizeof(line) - 1] = '\n';
  for (int extra = 0; extra <= 1; extra++) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    size_t left = TRUN_YAML_MAX_BYTES + (size_t)extra - (sizeof(tail) - 1), lines = 0;
    while (left > 0) {
      size_t n = left < sizeof(line) ? left : sizeof(line);
      if (n < sizeof(line)) { /* the last comment line, shortened */
        fwrite(line, 1, n - 1, f);
        fputc('\n', f);
      } else {
        fwrite(line, 1, n, f);
      }
      left -= n;
      lines++;
    }
    fputs(tail, f);
    ck_assert_int_eq(ftell(f), TRUN_YAML_MAX_BYTES + extra);
    fclose(f);
    trun_yaml_doc doc;
    if (!extra) {
      ck_assert_msg(trun_yaml_load(path, &doc, err, sizeof(err)) == 0, "%s", err);
      ck_assert_str_eq(doc.val[TRUN_OPT_NNODES], "2");
      ck_assert_int_eq(doc.line[TRUN_OPT_NNODES], (int)lines + 1);
      trun_yaml_free(&doc);
    } else {
      ck_assert_int_eq(trun_yaml_load(path, &doc, err, sizeof(err)), -1);
      snprintf(
          want, sizeof(want),
          "%s:1:1: the file is 10485761 bytes, more than the 10 MiB (10485760 bytes) allowed for a config "
          "file",
          path);
      ck_assert_str_eq(err, want);
    }
  }
}
END_TEST

START_TEST(test_unreadable) {
  trun_yaml_doc doc;
  ck_assert_int_eq(trun_yaml_load("/nonexistent/job.yaml", &doc, err, sizeof(err)), -1);
  ck_assert_str_eq(err, "cannot read config file '/nonexistent/job.yaml': No such file or directory");
  ck_assert_int_eq(trun_yaml_load(tmpdir, &doc, err, sizeof(err)), -1);
  char want[256];
  snprintf(want, sizeof(want), "cannot read config file '%s': not a regular file", tmpdir);
  ck_assert_str_eq(err, want);
}
END_TEST

/* Buffers: the byte-level checks count columns in characters (as libyaml does), and accept a byte order mark.
 */
START_TEST(test_buffers) {
  trun_yaml_doc doc;
  const char utf8[] = "role: \xc3\xa9t\xc3\xa9\nnnodes: x\x80\n";
  ck_assert_int_eq(trun_yaml_load_buffer("b.yaml", utf8, sizeof(utf8) - 1, &doc, err, sizeof(err)), -1);
  ck_assert_str_eq(err, "b.yaml:2:10: invalid UTF-8 (byte 0x80); save the file as UTF-8");
  const char overlong[] = "role: \xc0\xaf\n";
  ck_assert_int_eq(trun_yaml_load_buffer("b.yaml", overlong, sizeof(overlong) - 1, &doc, err, sizeof(err)),
                   -1);
  ck_assert_str_eq(err, "b.yaml:1:7: invalid UTF-8 (byte 0xc0); save the file as UTF-8");
  const char nul[] = "role: a\0b\n";
  ck_assert_int_eq(trun_yaml_load_buffer("b.yaml", nul, sizeof(nul) - 1, &doc, err, sizeof(err)), -1);
  ck_assert_str_eq(err,
                   "b.yaml:1:8: control character 0x00 is not allowed; remove it (inside double quotes "
                   "write an escape such as \\t)");
  const char escaped_nul[] = "role: \"a\\0b\"\n";
  ck_assert_int_eq(
      trun_yaml_load_buffer("b.yaml", escaped_nul, sizeof(escaped_nul) - 1, &doc, err, sizeof(err)), -1);
  ck_assert_str_eq(err, "b.yaml:1:7: role: the value contains a NUL character");
  const char bom[] =
      "\xef\xbb\xbfrole: \xc3\xa9t\xc3\xa9\ntee:\t3\n"; /* a tab after the colon is not indentation */
  ck_assert_msg(trun_yaml_load_buffer("b.yaml", bom, sizeof(bom) - 1, &doc, err, sizeof(err)) == 0, "%s",
                err);
  ck_assert_str_eq(doc.val[TRUN_OPT_ROLE], "\xc3\xa9t\xc3\xa9");
  ck_assert_str_eq(doc.val[TRUN_OPT_TEE], "3");
  trun_yaml_free(&doc);
  const char printcfg[] = "print-config: true\n";
  ck_assert_int_eq(trun_yaml_load_buffer("b.yaml", printcfg, sizeof(printcfg) - 1, &doc, err, sizeof(err)),
                   -1);
  ck_assert_str_eq(err,
                   "b.yaml:1:1: 'print-config' cannot be set in a config file (it is a command-line switch)");
  const char anchor_map[] = "tee: 3\nx: &a {b: 1}\n";
  ck_assert_int_eq(
      trun_yaml_load_buffer("b.yaml", anchor_map, sizeof(anchor_map) - 1, &doc, err, sizeof(err)), -1);
  ck_assert_str_eq(err,
                   "b.yaml:2:1: unknown key 'x' (the keys are the long option names, e.g. nproc-per-node, "
                   "and script, args; see config/README.md)");
}
END_TEST

/* The command line's script replaces the file's script and args. */
START_TEST(test_cli_script_wins) {
  resolved r;
  char *path = (char *)fixture("valid-full.yaml");
  ck_assert_msg(resolve(&r, (char *[]){"trun", "--config", path, "mine.py", "x", NULL}, NOENV, NULL) == 0,
                "%s", err);
  ck_assert_str_eq(r.cfg.script, "mine.py");
  ck_assert_int_eq(r.cfg.nscript_args, 1);
  ck_assert_str_eq(r.cfg.script_args[0], "x");
  ck_assert_int_eq(r.cl.script_src, TRUN_SRC_CLI);
  release(&r);
  /* no script anywhere: the file loads, the typed config refuses */
  const char *none = write_tmp("none.yaml", "nnodes: 1\n");
  ck_assert_int_eq(resolve(&r, (char *[]){"trun", "--config", (char *)none, NULL}, NOENV, NULL), -1);
  ck_assert_str_eq(err, "the following arguments are required: training_script");
  release(&r);
  /* TRUN_CONFIG names the file when --config is absent */
  char env_config[PATH_MAX + 16];
  snprintf(env_config, sizeof(env_config), "TRUN_CONFIG=%s", path);
  ck_assert_msg(resolve(&r, (char *[]){"trun", NULL}, (char *[]){env_config, NULL}, NULL) == 0, "%s", err);
  ck_assert_str_eq(r.cfg.script, "/opt/train.py");
  ck_assert_int_eq(r.cl.v[TRUN_OPT_NNODES].src, TRUN_SRC_FILE);
  release(&r);
}
END_TEST

/* ---- precedence matrix -----------------------------------------------------------------------------------
 */

typedef struct {
  trun_opt_id id;
  const char *cli_flag, *cli_val; /* cli_val NULL: a flag */
  const char *env;                /* "PET_X=v" or NULL when the option has no environment source here */
  const char *file;               /* "key: v" */
  const char *detect_env;         /* Slurm variable that detects it, or NULL */
  const char *want_cli, *want_env, *want_file, *want_det, *want_def;
} prec_case;

static const prec_case prec[] = {
    {TRUN_OPT_NNODES, "--nnodes", "4", "PET_NNODES=3", "nnodes: 2", "SLURM_NNODES=5", "4", "3", "2", "5",
     "1:1"},
    {TRUN_OPT_MASTER_ADDR, "--master-addr", "cli.host", "PET_MASTER_ADDR=env.host", "master-addr: file.host",
     "SLURM_JOB_NODELIST=det[1-2]", "cli.host", "env.host", "file.host", "det1", "127.0.0.1"},
    {TRUN_OPT_RDZV_ID, "--rdzv-id", "c", "PET_RDZV_ID=e", "rdzv_id: f", "SLURM_JOB_ID=77", "c", "e", "f",
     "77", "none"},
    {TRUN_OPT_MAX_RESTARTS, "--max-restarts", "4", "PET_MAX_RESTARTS=3", "max-restarts: 2", NULL, "4", "3",
     "2", NULL, "0"},
    /* PET_STANDALONE=0 is "off" from the environment: it beats the file's true */
    {TRUN_OPT_STANDALONE, "--standalone", NULL, "PET_STANDALONE=0", "standalone: true", NULL, "1", NULL, "1",
     NULL, NULL},
    {TRUN_OPT_LOG_LINE_PREFIX, "--log-line-prefix", "C", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=E",
     "log-line-prefix: F", NULL, "C", "E", "F", NULL, NULL},
};

/* Every combination of the four sources for each option: the highest present one wins, and the source
 * shown by --print-config names it. */
START_TEST(test_precedence_matrix) {
  const prec_case *c = &prec[_i];
  for (int mask = 0; mask < 16; mask++) {
    int has_cli = mask & 1, has_env = mask & 2, has_file = mask & 4, has_det = mask & 8;
    if (has_det && !c->detect_env) continue;
    char *argv[16], *envp[16];
    int a = 0, e = 0;
    argv[a++] = "trun";
    char fileline[128];
    snprintf(fileline, sizeof(fileline), "%s\n", has_file ? c->file : "# nothing");
    const char *path = write_tmp("prec.yaml", fileline);
    argv[a++] = "--config";
    argv[a++] = (char *)path;
    if (has_cli) {
      argv[a++] = (char *)c->cli_flag;
      if (c->cli_val) argv[a++] = (char *)c->cli_val;
    }
    argv[a++] = "t.py";
    argv[a] = NULL;
    if (has_env) envp[e++] = (char *)c->env;
    if (has_det) { /* a Slurm job on 5 nodes det1..det5 (rank 0), whatever the option */
      envp[e++] = "SLURM_JOB_ID=77";
      envp[e++] = "SLURM_NNODES=5";
      envp[e++] = "SLURM_NODEID=0";
      envp[e++] = "SLURM_JOB_NODELIST=det[1-5]";
    }
    envp[e] = NULL;
    resolved r;
    ck_assert_msg(resolve(&r, argv, envp, NULL) == 0, "option %d mask %d: %s", c->id, mask, err);
    const char *want = has_cli    ? c->want_cli
                       : has_env  ? c->want_env
                       : has_file ? c->want_file
                       : has_det  ? c->want_det
                                  : c->want_def;
    trun_src want_src = has_cli    ? TRUN_SRC_CLI
                        : has_env  ? TRUN_SRC_ENV
                        : has_file ? TRUN_SRC_FILE
                        : has_det  ? TRUN_SRC_DETECTED
                                   : TRUN_SRC_DEFAULT;
    ck_assert_msg(r.cl.v[c->id].src == want_src, "option %d mask %d: source %d, want %d", c->id, mask,
                  r.cl.v[c->id].src, want_src);
    if (want)
      ck_assert_msg(r.cl.v[c->id].val && strcmp(r.cl.v[c->id].val, want) == 0,
                    "option %d mask %d: '%s', want '%s'", c->id, mask,
                    r.cl.v[c->id].val ? r.cl.v[c->id].val : "(null)", want);
    else
      ck_assert_msg(r.cl.v[c->id].val == NULL, "option %d mask %d: '%s', want unset", c->id, mask,
                    r.cl.v[c->id].val);
    char src[256], wantsrc[512];
    trun_config_source(&r.cl, c->id, src, sizeof(src));
    if (want_src == TRUN_SRC_FILE)
      snprintf(wantsrc, sizeof(wantsrc), "file:%s:1", path);
    else if (want_src == TRUN_SRC_ENV)
      snprintf(wantsrc, sizeof(wantsrc), "env %.*s", (int)strcspn(c->env, "="), c->env);
    else if (want_src == TRUN_SRC_DETECTED)
      snprintf(wantsrc, sizeof(wantsrc), "detected:slurm (%s)",
               c->id == TRUN_OPT_MASTER_ADDR ? "SLURM_JOB_NODELIST, first host"
                                             : strtok(strdupa(c->detect_env), "="));
    else
      snprintf(wantsrc, sizeof(wantsrc), "%s", want_src == TRUN_SRC_CLI ? "cli" : "default");
    ck_assert_str_eq(src, wantsrc);
    release(&r);
  }
}
END_TEST

/* ---- --print-config
 * ---------------------------------------------------------------------------------------- */

START_TEST(test_scalar_quoting) {
  static const struct {
    const char *in, *out;
  } cases[] = {
      {"plain", "plain"},
      {"1:1", "1:1"},
      {"", "''"},
      {"null", "'null'"},
      {"True", "'True'"},
      {"-1", "'-1'"},
      {"[${rank}]: ", "'[${rank}]: '"},
      {"it's", "it's"},
      {"'q'", "'''q'''"},
      {"a: b", "'a: b'"},
      {"x #y", "'x #y'"},
      {"a,b", "'a,b'"},
      {"tab\there", "\"tab\\there\""},
      {"q\"\n", "\"q\\\"\\n\""},
      {"caf\xc3\xa9", "caf\xc3\xa9"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    trun_yaml_write_scalar(f, cases[i].in);
    fclose(f);
    ck_assert_str_eq(buf, cases[i].out);
    /* and it reads back as the same string */
    char doc[256];
    snprintf(doc, sizeof(doc), "role: %s\n", buf);
    trun_yaml_doc d;
    ck_assert_msg(trun_yaml_load_buffer("q.yaml", doc, strlen(doc), &d, err, sizeof(err)) == 0, "%s", err);
    ck_assert_pstr_eq(d.val[TRUN_OPT_ROLE], cases[i].in);
    trun_yaml_free(&d);
    free(buf);
  }
}
END_TEST

/* What --print-config prints for r (malloc'ed). */
static char *printed(resolved *r) {
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  ck_assert_ptr_nonnull(f);
  trun_print_config(f, &r->cl, 0);
  fclose(f);
  return out;
}

/* Resolves "trun --config NAME" with the printed text out as the file, into r2 (asserts it resolves). */
static void read_back(const char *name, const char *out, resolved *r2) {
  const char *back = write_tmp(name, out);
  ck_assert_msg(resolve(r2, (char *[]){"trun", "--config", (char *)back, NULL}, NOENV, NULL) == 0, "%s\n%s",
                err, out);
}

/* --print-config's output is a config file: read back alone it gives every value again. */
START_TEST(test_print_config_round_trip) {
  resolved r;
  char *path = (char *)fixture("valid-full.yaml");
  char *envp[] = {"PET_ROLE=trainer",
                  "SLURM_JOB_ID=9",
                  "SLURM_NNODES=2",
                  "SLURM_NODEID=1",
                  "SLURM_JOB_NODELIST=n[1-2]",
                  "PET_DUPLICATE_STDOUT_FILTERS=a,,b",
                  NULL};
  ck_assert_msg(resolve(&r, (char *[]){"trun", "--config", path, "--node-rank=1", "--print-config", NULL},
                        envp, NULL) == 0,
                "%s", err);
  char *out = printed(&r);
  ck_assert_ptr_nonnull(strstr(out, "\n# platform: slurm\n"));
  ck_assert_ptr_nonnull(strstr(out, "\nrole: trainer                                 # env PET_ROLE\n"));
  ck_assert_ptr_nonnull(strstr(out, "\nnode-rank: 1                                  # cli\n"));
  ck_assert_ptr_nonnull(strstr(out, "\nrdzv-id: job-42                               # file:"));
  ck_assert_ptr_nonnull(strstr(out,
                               "\nmaster-addr: n1                               # detected:slurm "
                               "(SLURM_JOB_NODELIST, first host)\n"));
  ck_assert_ptr_nonnull(strstr(out, "\nrole: trainer"));
  ck_assert_ptr_nonnull(strstr(out, "\nargs: ['--lr', 0.1, '--name=a b']             # file:"));
  resolved r2;
  read_back("back.yaml", out, &r2);
  for (int id = 0; id < TRUN_OPT__COUNT; id++) {
    if (id == TRUN_OPT_CONFIG || id == TRUN_OPT_PRINT_CONFIG) continue;
    ck_assert_msg(r2.cl.v[id].src == TRUN_SRC_FILE, "option %d not in the printed file", id);
    ck_assert_pstr_eq(r2.cl.v[id].val, r.cl.v[id].val);
  }
  ck_assert_str_eq(r2.cl.script, r.cl.script);
  ck_assert_int_eq(r2.cl.nscript_args, r.cl.nscript_args);
  for (int i = 0; i < r.cl.nscript_args; i++) ck_assert_str_eq(r2.cl.script_args[i], r.cl.script_args[i]);
  free(out);
  release(&r);
  release(&r2);
}
END_TEST

/* An argument with ':' is quoted in the printed flow list (libyaml rejects "x:?y" there; found by fuzz_yaml),
 * while a block value such as nnodes' 1:1 stays plain. */
START_TEST(test_print_config_args_colon) {
  resolved r;
  const char *in = write_tmp("colon.yaml", "script: t.py\nargs: ['k:v', 'x:?y', 'host:29500', plain]\n");
  ck_assert_msg(resolve(&r, (char *[]){"trun", "--config", (char *)in, NULL}, NOENV, NULL) == 0, "%s", err);
  char *out = printed(&r);
  ck_assert_ptr_nonnull(strstr(out, "\nargs: ['k:v', 'x:?y', 'host:29500', plain]"));
  ck_assert_ptr_nonnull(strstr(out, "\nnnodes: 1:1 "));
  resolved r2;
  read_back("colon-back.yaml", out, &r2);
  ck_assert_int_eq(r2.cl.nscript_args, 4);
  for (int i = 0; i < 4; i++) ck_assert_str_eq(r2.cl.script_args[i], r.cl.script_args[i]);
  free(out);
  release(&r);
  release(&r2);
}
END_TEST

/* Characters that YAML reads as line breaks (NEL U+0085, LS U+2028, PS U+2029) or refuses raw (the other C1
 * controls, U+0080..U+009F) are escaped in the printed config, so that the value reads back unchanged: a raw
 * NEL inside quotes was folded into a space (found by fuzz_yaml: rdzv_endpoint "s\Nula \a b"). */
START_TEST(test_print_config_yaml_breaks) {
  resolved r;
  const char *in = write_tmp("breaks.yaml",
                             "script: t.py\nrdzv-backend: c10d\nrdzv_endpoint: \"s\\Nula \\a b\"\nrdzv-id: "
                             "\"a\\Lb\\Pc\\x80d\\x9fe\"\n"
                             "args: [\"x\\Ny\", \"\\ufeffz\", 'plain \xc3\xa9']\n");
  ck_assert_msg(resolve(&r, (char *[]){"trun", "--config", (char *)in, NULL}, NOENV, NULL) == 0, "%s", err);
  ck_assert_str_eq(r.cl.v[TRUN_OPT_RDZV_ENDPOINT].val, "s\xc2\x85ula \x07 b");
  ck_assert_str_eq(r.cl.v[TRUN_OPT_RDZV_ID].val,
                   "a\xe2\x80\xa8"
                   "b\xe2\x80\xa9"
                   "c\xc2\x80"
                   "d\xc2\x9f"
                   "e");
  char *out = printed(&r);
  ck_assert_ptr_nonnull(strstr(out, "\nrdzv-endpoint: \"s\\Nula \\x07 b\""));
  ck_assert_ptr_nonnull(strstr(out, "\nrdzv-id: \"a\\Lb\\Pc\\x80d\\x9fe\""));
  ck_assert_ptr_nonnull(strstr(out, "\nargs: [\"x\\Ny\", \"\\uFEFFz\", plain \xc3\xa9]"));
  resolved r2;
  read_back("breaks-back.yaml", out, &r2);
  ck_assert_str_eq(r2.cl.v[TRUN_OPT_RDZV_ENDPOINT].val, r.cl.v[TRUN_OPT_RDZV_ENDPOINT].val);
  ck_assert_str_eq(r2.cl.v[TRUN_OPT_RDZV_ID].val, r.cl.v[TRUN_OPT_RDZV_ID].val);
  ck_assert_int_eq(r2.cl.nscript_args, 3);
  for (int i = 0; i < 3; i++) ck_assert_str_eq(r2.cl.script_args[i], r.cl.script_args[i]);
  free(out);
  release(&r);
  release(&r2);
}
END_TEST

/* config/README.md's key table ("## Keys": rows "| `key` | ..."): one row per option of the command-line
 * table (launcher/cli.c) except config and print-config (command-line only, said below the table), plus
 * script and args, and no row for anything else; so the reference cannot drift from the options. */
START_TEST(test_readme_lists_every_option) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/config/README.md", repo());
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot read %s (set TRUN_REPO to the repository)", path);
  char keys[128][64];
  int nkeys = 0, in_keys = 0, cli_only_said = 0;
  char line[4096];
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, "## ", 3) == 0) in_keys = strcmp(line, "## Keys\n") == 0;
    if (!in_keys) continue;
    if (strstr(line, "`config` and `print-config` are command-line only")) cli_only_said = 1;
    if (strncmp(line, "| `", 3) != 0) continue;
    const char *end = strchr(line + 3, '`');
    ck_assert_ptr_nonnull(end);
    ck_assert_int_lt(nkeys, 128);
    snprintf(keys[nkeys++], sizeof(keys[0]), "%.*s", (int)(end - (line + 3)), line + 3);
  }
  fclose(f);
  ck_assert_msg(cli_only_said,
                "config/README.md no longer says config and print-config are command-line only");
  for (int id = 0; id < TRUN_OPT__COUNT; id++) {
    const char *name = trun_opt_desc_of((trun_opt_id)id)->name;
    int rows = 0;
    for (int k = 0; k < nkeys; k++) rows += strcmp(keys[k], name) == 0;
    int want = id == TRUN_OPT_CONFIG || id == TRUN_OPT_PRINT_CONFIG ? 0 : 1;
    ck_assert_msg(rows == want, "config/README.md's key table has %d row(s) for option '%s', want %d", rows,
                  name, want);
  }
  for (int k = 0; k < nkeys; k++) {
    int known = strcmp(keys[k], "script") == 0 || strcmp(keys[k], "args") == 0;
    for (int id = 0; !known && id < TRUN_OPT__COUNT; id++)
      known = strcmp(keys[k], trun_opt_desc_of((trun_opt_id)id)->name) == 0;
    ck_assert_msg(known, "config/README.md's key table has a row for '%s', which is no option", keys[k]);
  }
}
END_TEST

static Suite *yaml_suite(void) {
  Suite *s = suite_create("yaml");
  TCase *tc = tcase_create("yaml");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, test_invalid_fixture, 0, (int)(sizeof(invalid) / sizeof(invalid[0])));
  tcase_add_test(tc, test_valid_full);
  tcase_add_test(tc, test_empty_files);
  tcase_add_test(tc, test_size_limit);
  tcase_add_test(tc, test_unreadable);
  tcase_add_test(tc, test_buffers);
  tcase_add_test(tc, test_cli_script_wins);
  tcase_add_loop_test(tc, test_precedence_matrix, 0, (int)(sizeof(prec) / sizeof(prec[0])));
  tcase_add_test(tc, test_scalar_quoting);
  tcase_add_test(tc, test_print_config_round_trip);
  tcase_add_test(tc, test_print_config_args_colon);
  tcase_add_test(tc, test_print_config_yaml_breaks);
  tcase_add_test(tc, test_readme_lists_every_option);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(yaml_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
