/* --print-config (config/print.h). */
#include "print.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "yaml_file.h"

#define TRUN_PRINT_COMMENT_COL 44

/* The escape a double-quoted YAML scalar needs for the character at c: C0 controls and DEL; the C1 controls
 * U+0080..U+009F, which YAML does not allow raw; NEL (U+0085), LS (U+2028) and PS (U+2029), which it reads as
 * line breaks, even inside quotes; and a BOM (U+FEFF). Writes the escape into out and returns the bytes of
 * the character, or 0 when it can stay as it is. */
static int trun_yaml_escape(const unsigned char *c, char out[8]) {
  if (*c < 0x20 || *c == 0x7f) {
    if (*c == '\n' || *c == '\t')
      snprintf(out, 8, "\\%c", *c == '\n' ? 'n' : 't');
    else
      snprintf(out, 8, "\\x%02x", *c);
    return 1;
  }
  if (c[0] == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f) {
    if (c[1] == 0x85)
      snprintf(out, 8, "\\N");
    else
      snprintf(out, 8, "\\x%02x", c[1]);
    return 2;
  }
  if (c[0] == 0xe2 && c[1] == 0x80 && (c[2] == 0xa8 || c[2] == 0xa9)) {
    snprintf(out, 8, "\\%c", c[2] == 0xa8 ? 'L' : 'P');
    return 3;
  }
  if (c[0] == 0xef && c[1] == 0xbb && c[2] == 0xbf) {
    snprintf(out, 8, "\\uFEFF");
    return 3;
  }
  return 0;
}

static int trun_yaml_needs_escape(const char *s) {
  char esc[8];
  for (const unsigned char *c = (const unsigned char *)s; *c; c++)
    if (trun_yaml_escape(c, esc)) return 1;
  return 0;
}

/* A string that YAML reads back unchanged as a plain scalar, and that trun reads as this text: no indicator
 * at the start, no ": " or " #", no surrounding blanks, not a null or boolean word, nothing to
 * escape. */
static int trun_yaml_plain_ok(const char *s) {
  static const char *const words[] = {"~", "null", "true", "false", "yes", "no", "on", "off", "y", "n"};
  if (!*s || strchr("-?:,[]{}#&*!|>'\"%@`", s[0]) || s[0] == ' ' || s[strlen(s) - 1] == ' ') return 0;
  if ((s[0] == '-' || s[0] == '?' || s[0] == ':') && s[1] && s[1] != ' ') return 0;
  if (strstr(s, ": ") || strstr(s, " #") || s[strlen(s) - 1] == ':') return 0;
  if (strpbrk(s, ",[]{}")) return 0; /* safe in block context, but not inside the flow list of args */
  if (trun_yaml_needs_escape(s)) return 0;
  for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
    if (!strcasecmp(s, words[i])) return 0;
  return 1;
}

/* flow: s is an item of a flow list ([a, b]), where libyaml also rejects a ':' that a blank does not follow
 * ("found unexpected ':'"), so any ':' is quoted there. */
static void trun_yaml_write(FILE *f, const char *s, int flow) {
  if (trun_yaml_plain_ok(s) && !(flow && strchr(s, ':'))) {
    fputs(s, f);
    return;
  }
  if (!trun_yaml_needs_escape(s)) { /* single quotes: only ' needs doubling */
    fputc('\'', f);
    for (const char *c = s; *c; c++) {
      if (*c == '\'') fputc('\'', f);
      fputc(*c, f);
    }
    fputc('\'', f);
    return;
  }
  fputc('"', f);
  char esc[8];
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    int n;
    if (*c == '"' || *c == '\\') {
      fprintf(f, "\\%c", *c);
    } else if ((n = trun_yaml_escape(c, esc)) > 0) {
      fputs(esc, f);
      c += n - 1;
    } else {
      fputc(*c, f);
    }
  }
  fputc('"', f);
}

void trun_yaml_write_scalar(FILE *f, const char *s) { trun_yaml_write(f, s, 0); }

void trun_config_source(const trun_settings *cl, trun_opt_id id, char *buf, size_t len) {
  const trun_opt_val *v = &cl->v[id];
  const trun_opt_desc *d = trun_opt_desc_of(id);
  switch (v->src) {
    case TRUN_SRC_CLI: snprintf(buf, len, "cli"); return;
    case TRUN_SRC_ENV: snprintf(buf, len, "env %s", d->env ? d->env : "?"); return;
    case TRUN_SRC_FILE:
      snprintf(buf, len, "file:%s:%d", cl->config_path ? cl->config_path : "?", v->line);
      return;
    case TRUN_SRC_DETECTED:
      if (v->why)
        snprintf(buf, len, "detected:%s (%s)", cl->platform ? cl->platform : "?", v->why);
      else
        snprintf(buf, len, "detected:%s", cl->platform ? cl->platform : "?");
      return;
    case TRUN_SRC_DEFAULT: break;
  }
  snprintf(buf, len, "default");
}

/* "key: value" then the source as a comment, aligned. The value is YAML: a scalar, null, a flag's true /
 * false, or (args) a flow list. */
static void trun_print_line(FILE *f, const char *key, const char *val, int is_flag, char **list, int nlist,
                            const char *src) {
  char *line = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&line, &len);
  if (!m) m = f; /* no memory: unaligned, straight out */
  fprintf(m, "%s: ", key);
  if (list) {
    fputc('[', m);
    for (int i = 0; i < nlist; i++) {
      if (i) fputs(", ", m);
      trun_yaml_write(m, list[i], 1);
    }
    fputc(']', m);
  } else if (is_flag) {
    fputs(val ? "true" : "false", m);
  } else if (!val) {
    fputs("null", m);
  } else {
    trun_yaml_write_scalar(m, val);
  }
  int pad = 0;
  if (m != f) {
    fclose(m);
    fputs(line, f);
    pad = len < TRUN_PRINT_COMMENT_COL ? TRUN_PRINT_COMMENT_COL - (int)len : 0;
    free(line);
  }
  fprintf(f, "%*s  # %s\n", pad, "", src);
}

void trun_print_config(FILE *f, const trun_settings *cl, int only_changed) {
  char src[512];
  if (!only_changed)
    fprintf(
        f,
        "# trun --print-config: the effective settings; after each, where it came from (precedence: cli > "
        "env > file > detected > default)\n");
  if (cl->config_path) fprintf(f, "# config file: %s\n", cl->config_path);
  if (cl->platform)
    fprintf(f, "# platform: %s\n", cl->platform);
  else if (!only_changed)
    fprintf(f, "# platform: none detected\n");
  if (cl->platform && cl->platform_note) fprintf(f, "# platform note: %s\n", cl->platform_note);
  for (int id = 0; id < TRUN_OPT__COUNT; id++) {
    const char *key = trun_yaml_key((trun_opt_id)id);
    if (!key || (only_changed && cl->v[id].src == TRUN_SRC_DEFAULT)) continue;
    trun_config_source(cl, (trun_opt_id)id, src, sizeof(src));
    /* The agent token is a secret: --rdzv-conf prints with trun_token masked (read back, it exits 2). */
    char *masked = id == TRUN_OPT_RDZV_CONF && cl->v[id].val ? strdup(cl->v[id].val) : NULL;
    if (masked) trun_config_conf_mask(masked);
    trun_print_line(f, key, masked ? masked : cl->v[id].val, trun_opt_desc_of((trun_opt_id)id)->is_flag, NULL,
                    0, src);
    free(masked);
  }
  if (only_changed && !cl->script) return;
  static char *const none[] = {NULL};
  char **args = cl->script_args ? cl->script_args : (char **)none;
  if (cl->script_src == TRUN_SRC_FILE) {
    snprintf(src, sizeof(src), "file:%s:%d", cl->config_path ? cl->config_path : "?", cl->script_line);
    trun_print_line(f, "script", cl->script, 0, NULL, 0, src);
    if (cl->args_line)
      snprintf(src, sizeof(src), "file:%s:%d", cl->config_path ? cl->config_path : "?", cl->args_line);
    else
      snprintf(src, sizeof(src), "default");
    trun_print_line(f, "args", NULL, 0, args, cl->nscript_args, src);
    return;
  }
  snprintf(src, sizeof(src), "%s", cl->script ? "cli" : "default");
  trun_print_line(f, "script", cl->script, 0, NULL, 0, src);
  trun_print_line(f, "args", NULL, 0, args, cl->nscript_args, src);
}
