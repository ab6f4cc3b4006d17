/* torchrun's command line: argv + PET_* environment parsing and --help (launcher/cli.h), over the settings
 * table (config/options.h).
 * Parsing follows Python argparse as torchrun configures it: long options with a separate or '='-joined
 * value, unambiguous prefixes, -m/-r/-t short forms (clustered too: -mr3), the first positional is the
 * script and everything after it belongs to the script. Nothing is allocated: values point into argv,
 * envp or the table's static strings. */
#include "cli.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define TRUN_HELP_WIDTH 100
#define TRUN_HELP_COL 24

/* Pseudo ids beyond the table, matched like options: --help and --version. */
enum { TRUN_PSEUDO_HELP = TRUN_OPT__COUNT, TRUN_PSEUDO_VERSION, TRUN_PSEUDO__END };

static const char trun_flag_on[] = "1";

/* The table's entry for id (in range: the parser checks first). */
#define OPT(id) (trun_opt_desc_of((trun_opt_id)(id)))

/* ---- errors ----------------------------------------------------------------------------------------- */

/* "--nproc-per-node/--nproc_per_node" or "-r/--redirects": argparse's name for an option in errors. */
static void trun_opt_argname(int id, char *buf, size_t len) {
  const trun_opt_desc *d = OPT(id);
  char shortbuf[8] = "";
  if (d->short_name) snprintf(shortbuf, sizeof(shortbuf), "-%c/", d->short_name);
  if (d->alias)
    snprintf(buf, len, "%s--%s/--%s", shortbuf, d->name, d->alias);
  else
    snprintf(buf, len, "%s--%s", shortbuf, d->name);
}

/* ---- option spellings ------------------------------------------------------------------------------- */

/* The k-th long spelling (k = 0, 1) of option or pseudo id, or NULL. */
static const char *trun_spelling(int id, int k) {
  if (id == TRUN_PSEUDO_HELP) return k == 0 ? "help" : NULL;
  if (id == TRUN_PSEUDO_VERSION) return k == 0 ? "version" : NULL;
  if (id < 0 || id >= TRUN_OPT__COUNT) return NULL;
  return k == 0 ? OPT(id)->name : OPT(id)->alias;
}

/* The long spelling closest to word[0..len), when close enough to be a likely typo; else NULL. */
static const char *trun_suggest(const char *word, size_t len) {
  const char *best = NULL;
  size_t bestd = (size_t)-1;
  for (int id = 0; id < TRUN_PSEUDO__END; id++) {
    for (int k = 0; k < 2; k++) {
      const char *s = trun_spelling(id, k);
      if (!s) continue;
      size_t d = trun_edit_distance(word, len, s);
      if (d < bestd) {
        bestd = d;
        best = s;
      }
    }
  }
  if (best && (bestd <= 2 || bestd * 3 <= len)) return best;
  return NULL;
}

static void trun_err_unknown(const char *dashes, const char *word, size_t len, char *err, size_t errlen) {
  const char *s = trun_suggest(word, len);
  if (s)
    trun_errf(err, errlen, "unrecognized option '%s%.*s'; did you mean --%s?", dashes, (int)len, word, s);
  else
    trun_errf(err, errlen, "unrecognized option '%s%.*s'", dashes, (int)len, word);
}

static void trun_err_ambiguous(const char *word, size_t len, char *err, size_t errlen) {
  trun_errf(err, errlen, "ambiguous option: --%.*s could match", (int)len, word);
  const char *sep = " ";
  for (int id = 0; id < TRUN_PSEUDO__END; id++) {
    for (int k = 0; k < 2; k++) {
      const char *s = trun_spelling(id, k);
      if (!s || strncmp(s, word, len) != 0) continue;
      trun_catf(err, errlen, "%s--%s", sep, s);
      sep = ", ";
    }
  }
}

/* Resolves a long option name (without dashes and '=value') to an id: an exact spelling, else the one
 * option whose spellings it prefixes. Returns the id, or -1 with the reason in err. */
static int trun_match_long(const char *word, size_t len, char *err, size_t errlen) {
  int found = -1, nfound = 0;
  for (int id = 0; id < TRUN_PSEUDO__END; id++) {
    for (int k = 0; k < 2; k++) {
      const char *s = trun_spelling(id, k);
      if (s && strlen(s) == len && strncmp(s, word, len) == 0) return id;
    }
  }
  for (int id = 0; id < TRUN_PSEUDO__END && len > 0; id++) {
    for (int k = 0; k < 2; k++) {
      const char *s = trun_spelling(id, k);
      if (!s || strncmp(s, word, len) != 0) continue;
      if (id != found) {
        found = id;
        nfound++;
      }
      break;
    }
  }
  if (nfound == 1) return found;
  if (nfound > 1)
    trun_err_ambiguous(word, len, err, errlen);
  else
    trun_err_unknown("--", word, len, err, errlen);
  return -1;
}

/* ---- argv ------------------------------------------------------------------------------------------- */

static int trun_short_id(char c) {
  if (c == 'h') return TRUN_PSEUDO_HELP;
  for (int id = 0; id < TRUN_OPT__COUNT; id++)
    if (OPT(id)->short_name && OPT(id)->short_name == c) return id;
  return -1;
}

/* argparse's negative-number test (^-\d+$|^-\d*\.\d+$): such an argument is a positional, not an option. */
static int trun_is_negative_number(const char *arg) {
  if (arg[0] != '-') return 0;
  const char *s = arg + 1;
  size_t ndig = strspn(s, "0123456789");
  if (s[ndig] == '\0') return ndig > 0;
  if (s[ndig] != '.') return 0;
  s += ndig + 1;
  size_t nfrac = strspn(s, "0123456789");
  return nfrac > 0 && s[nfrac] == '\0';
}

/* Whether some option is spelt arg (without its "--") or starts with it: argparse's prefix lookup. */
static int trun_prefixes_long(const char *word, size_t len) {
  for (int id = 0; id < TRUN_PSEUDO__END; id++)
    for (int k = 0; k < 2; k++) {
      const char *s = trun_spelling(id, k);
      if (s && strncmp(s, word, len) == 0) return 1;
    }
  return 0;
}

/* argparse's _parse_optional: whether arg is read as an option (a known one, a prefix of one, or an
 * unknown one) rather than as a value or a positional. An option's value must not be one: torchrun says
 * "expected one argument" for "--log_dir --dry-run" where a plain read would swallow --dry-run. */
static int trun_reads_as_option(const char *arg) {
  if (arg[0] != '-' || arg[1] == '\0') return 0;
  if (arg[1] == '-') {
    const char *word = arg + 2;
    const char *eq = strchr(word, '=');
    if (trun_prefixes_long(word, eq ? (size_t)(eq - word) : strlen(word))) return 1;
  } else if (trun_short_id(arg[1]) >= 0) {
    return 1;
  }
  if (trun_is_negative_number(arg)) return 0;
  return strchr(arg, ' ') == NULL;
}

typedef struct {
  int argc;
  char **argv;
  int i; /* the argv item being parsed */
  trun_settings *out;
  char *err;
  size_t errlen;
} trun_argp;

static void trun_set_cli(trun_argp *p, int id, const char *val) {
  p->out->v[id].val = val;
  p->out->v[id].src = TRUN_SRC_CLI;
}

/* Stores the value of option id: explicit ("--opt=v", "-rv"; NULL when none) or the next argv item. */
static int trun_take_value(trun_argp *p, int id, const char *explicit_val) {
  char name[96];
  if (OPT(id)->is_flag) {
    if (explicit_val) {
      trun_opt_argname(id, name, sizeof(name));
      trun_errf(p->err, p->errlen, "argument %s: ignored explicit argument '%s'", name, explicit_val);
      return -1;
    }
    trun_set_cli(p, id, trun_flag_on);
    return 0;
  }
  if (!explicit_val) {
    if (p->i + 1 >= p->argc || trun_reads_as_option(p->argv[p->i + 1])) {
      trun_opt_argname(id, name, sizeof(name));
      trun_errf(p->err, p->errlen, "argument %s: expected one argument", name);
      return -1;
    }
    explicit_val = p->argv[++p->i];
  }
  trun_set_cli(p, id, explicit_val);
  return 0;
}

/* Marks --help/--version; returns 1 when id was one of them. */
static int trun_take_pseudo(trun_argp *p, int id) {
  if (id == TRUN_PSEUDO_HELP)
    p->out->help = 1;
  else if (id == TRUN_PSEUDO_VERSION)
    p->out->version = 1;
  else
    return 0;
  return 1;
}

/* "--name", "--name=value", "--prefix[=value]". */
static int trun_parse_long(trun_argp *p) {
  const char *word = p->argv[p->i] + 2;
  const char *eq = strchr(word, '=');
  size_t len = eq ? (size_t)(eq - word) : strlen(word);
  int id = trun_match_long(word, len, p->err, p->errlen);
  if (id < 0) return -1;
  if (id >= TRUN_OPT__COUNT) {
    if (eq) {
      trun_errf(p->err, p->errlen, "argument --%s: ignored explicit argument '%s'", trun_spelling(id, 0),
                eq + 1);
      return -1;
    }
    return trun_take_pseudo(p, id) ? 0 : -1;
  }
  return trun_take_value(p, id, eq ? eq + 1 : NULL);
}

/* "-m", "-r VALUE", "-rVALUE", "-r=VALUE" and clusters such as "-mt3" (flags go on with the next letter). */
static int trun_parse_short(trun_argp *p) {
  const char *arg = p->argv[p->i];
  for (size_t j = 1; arg[j]; j++) {
    int id = trun_short_id(arg[j]);
    if (id < 0) {
      if (j == 1)
        trun_err_unknown("-", arg + 1, strlen(arg + 1), p->err, p->errlen);
      else
        trun_errf(p->err, p->errlen, "unrecognized option '-%c' in '%s'", arg[j], arg);
      return -1;
    }
    if (trun_take_pseudo(p, id)) return 0;
    const char *rest = arg + j + 1;
    if (*rest == '=') rest++;
    if (OPT(id)->is_flag && arg[j + 1] != '=') {
      trun_set_cli(p, id, trun_flag_on);
      continue;
    }
    return trun_take_value(p, id, arg[j + 1] ? rest : NULL);
  }
  return 0;
}

static void trun_take_script(trun_argp *p, int at) {
  p->out->script = p->argv[at];
  p->out->script_src = TRUN_SRC_CLI;
  p->out->script_args = p->argv + at + 1;
  p->out->nscript_args = p->argc - at - 1;
}

/* Walks argv up to the script. Returns 0 or -1 (err set). */
static int trun_parse_argv(trun_argp *p) {
  for (p->i = 1; p->i < p->argc && !p->out->help && !p->out->version; p->i++) {
    const char *arg = p->argv[p->i];
    int rc;
    if (strcmp(arg, "--") == 0) {
      if (p->i + 1 < p->argc) trun_take_script(p, p->i + 1);
      return 0;
    }
    if (arg[0] != '-' || arg[1] == '\0' || trun_is_negative_number(arg)) {
      trun_take_script(p, p->i);
      return 0;
    }
    rc = arg[1] == '-' ? trun_parse_long(p) : trun_parse_short(p);
    if (rc < 0) return -1;
  }
  return 0;
}

/* ---- environment and defaults ----------------------------------------------------------------------- */

/* Python's int(): optional blanks and sign, digits with single '_' between them. Returns 0 and sets
 * *nonzero, or -1 when s is not an integer. */
static int trun_parse_pyint(const char *s, int *nonzero) {
  *nonzero = 0;
  while (isspace((unsigned char)*s)) s++;
  if (*s == '+' || *s == '-') s++;
  if (!isdigit((unsigned char)*s)) return -1;
  for (; isdigit((unsigned char)*s) || *s == '_'; s++) {
    if (*s == '_' && !isdigit((unsigned char)s[1])) return -1;
    if (*s != '0' && *s != '_') *nonzero = 1;
  }
  while (isspace((unsigned char)*s)) s++;
  return *s ? -1 : 0;
}

/* Fills every option not given on the command line from its environment variable, else its default. */
static int trun_apply_env(trun_settings *out, char **envp, char *err, size_t errlen) {
  for (int id = 0; id < TRUN_OPT__COUNT; id++) {
    const trun_opt_desc *d = OPT(id);
    if (out->v[id].src == TRUN_SRC_CLI) continue;
    const char *ev = d->env ? trun_env_get(envp, d->env) : NULL;
    out->v[id].val = d->def;
    out->v[id].src = TRUN_SRC_DEFAULT;
    if (!ev) continue;
    out->v[id].src = TRUN_SRC_ENV;
    out->v[id].val = ev;
    if (!d->is_flag) continue;
    int on;
    if (trun_parse_pyint(ev, &on) < 0) {
      trun_errf(err, errlen, "invalid value '%s' in environment variable %s for --%s: expected an integer",
                ev, d->env, d->name);
      return -1;
    }
    out->v[id].val = on ? trun_flag_on : NULL;
  }
  return 0;
}

int trun_cli_parse(int argc, char **argv, char **envp, trun_settings *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  if (err && errlen) err[0] = '\0';
  trun_argp p = {.argc = argc, .argv = argv, .out = out, .err = err, .errlen = errlen};
  if (trun_parse_argv(&p) < 0) return -1;
  if (trun_apply_env(out, envp, err, errlen) < 0) return -1;
  if (!out->script && !out->help && !out->version && !out->v[TRUN_OPT_EXPLAIN].val &&
      !out->v[TRUN_OPT_CONFIG].val && !out->v[TRUN_OPT_PRINT_CONFIG].val &&
      !out->v[TRUN_OPT_RDZV_STATUS].val && !out->v[TRUN_OPT_LIST_EXCLUDED].val) {
    trun_errf(err, errlen, "the following arguments are required: training_script");
    return -1;
  }
  return 0;
}

/* ---- --help ----------------------------------------------------------------------------------------- */

/* Writes text word-wrapped to TRUN_HELP_WIDTH; the cursor is at column col, continuation lines start at
 * column indent. Ends the line. */
static void trun_help_wrap(FILE *f, const char *text, int col, int indent) {
  const char *w = text;
  int first = 1;
  while (*w) {
    while (*w == ' ') w++;
    if (!*w) break;
    int len = (int)strcspn(w, " ");
    if (!first && col + 1 + len > TRUN_HELP_WIDTH) {
      fprintf(f, "\n%*s", indent, "");
      col = indent;
      first = 1;
    }
    if (!first) {
      fputc(' ', f);
      col++;
    }
    fprintf(f, "%.*s", len, w);
    col += len;
    first = 0;
    w += len;
  }
  fputc('\n', f);
}

/* One entry: "  invocation" then the help text in the help column (on the next line when too long). */
static void trun_help_entry(FILE *f, const char *invocation, const char *help) {
  int col = fprintf(f, "  %s", invocation);
  if (col + 2 <= TRUN_HELP_COL) {
    fprintf(f, "%*s", TRUN_HELP_COL - col, "");
  } else {
    fprintf(f, "\n%*s", TRUN_HELP_COL, "");
  }
  trun_help_wrap(f, help, TRUN_HELP_COL, TRUN_HELP_COL);
}

/* "-r, --redirects REDIRECTS" / "--nproc-per-node, --nproc_per_node NPROC_PER_NODE". */
static void trun_help_invocation(const trun_opt_desc *d, char *buf, size_t len) {
  char shortbuf[8] = "";
  if (d->short_name) snprintf(shortbuf, sizeof(shortbuf), "-%c, ", d->short_name);
  snprintf(buf, len, "%s--%s%s%s%s%s", shortbuf, d->name, d->alias ? ", --" : "", d->alias ? d->alias : "",
           d->metavar ? " " : "", d->metavar ? d->metavar : "");
}

/* The help text with the default and the environment variable appended. */
static void trun_help_text(const trun_opt_desc *d, char *buf, size_t len) {
  int n;
  if (d->is_flag)
    n = snprintf(buf, len, "%s", d->help);
  else if (!d->def)
    n = snprintf(buf, len, "%s (default: unset", d->help);
  else if (!*d->def)
    n = snprintf(buf, len, "%s (default: \"\"", d->help);
  else
    n = snprintf(buf, len, "%s (default: %s", d->help, d->def);
  if (n < 0 || (size_t)n >= len) return;
  const char *open = d->is_flag ? " (" : "; ";
  if (d->env)
    snprintf(buf + n, len - n, "%senv: %s)", open, d->env);
  else if (!d->is_flag)
    snprintf(buf + n, len - n, ")");
}

/* "[--nnodes NNODES]" items of the usage line, wrapped under "usage: trun ". */
static void trun_help_usage(FILE *f) {
  static const char lead[] = "usage: trun ";
  int indent = (int)sizeof(lead) - 1;
  int col = fprintf(f, "%s[-h] [--version]", lead);
  char item[128];
  for (int id = 0; id < TRUN_OPT__COUNT + 1; id++) {
    if (id == TRUN_OPT__COUNT)
      snprintf(item, sizeof(item), "training_script ...");
    else if (OPT(id)->short_name) {
      snprintf(item, sizeof(item), "[-%c%s%s]", OPT(id)->short_name, OPT(id)->metavar ? " " : "",
               OPT(id)->metavar ? OPT(id)->metavar : "");
    } else {
      snprintf(item, sizeof(item), "[--%s%s%s]", OPT(id)->name, OPT(id)->metavar ? " " : "",
               OPT(id)->metavar ? OPT(id)->metavar : "");
    }
    int len = (int)strlen(item);
    if (col + 1 + len > TRUN_HELP_WIDTH)
      col = fprintf(f, "\n%*s", indent, "") - 1;
    else
      col += fprintf(f, " ");
    col += fprintf(f, "%s", item);
  }
  fputc('\n', f);
}

void trun_cli_help(FILE *f) {
  char inv[160], text[1024];
  trun_help_usage(f);
  fputc('\n', f);
  trun_help_wrap(f,
                 "trun: a torchrun-compatible launcher; spawns and supervises the workers of a "
                 "(multi-node) distributed job.",
                 0, 0);
  fprintf(f, "\npositional arguments:\n");
  trun_help_entry(f, "training_script",
                  "Full path to the (single GPU) training program/script to be launched in parallel, "
                  "followed by all the arguments for the training script.");
  trun_help_entry(f, "training_script_args",
                  "Passed to every worker verbatim; ${local_rank} in an argument becomes the worker's "
                  "local rank.");
  fprintf(f, "\noptions:\n");
  trun_help_entry(f, "-h, --help", "show this help message and exit");
  trun_help_entry(f, "--version", "show trun's version and exit");
  for (int g = 0; trun_opt_group(g); g++) {
    fprintf(f, "\n%s:\n", trun_opt_group(g));
    for (int id = 0; id < TRUN_OPT__COUNT; id++) {
      const trun_opt_desc *d = OPT(id);
      if (strcmp(d->group, trun_opt_group(g)) != 0) continue;
      trun_help_invocation(d, inv, sizeof(inv));
      trun_help_text(d, text, sizeof(text));
      trun_help_entry(f, inv, text);
    }
  }
  fputc('\n', f);
  trun_help_wrap(f,
                 "An option that is not on the command line takes the value of the environment variable "
                 "shown (PET_<NAME>) when that is set, else its default.",
                 0, 0);
  fprintf(f, "\nexit codes:\n");
  int n;
  const trun_exit_info *x = trun_exit_table(&n);
  for (int i = 0; i < n; i++) {
    char code[8];
    snprintf(code, sizeof(code), "%d", x[i].code);
    snprintf(text, sizeof(text), "%s (%s)", x[i].meaning, x[i].detail);
    trun_help_entry(f, code, text);
  }
}
