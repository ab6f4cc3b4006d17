/* trun's YAML config file (config/yaml_file.h): a byte-level pre-check (size, UTF-8, control characters, tabs
 * in indentation), then libyaml's event parser walking one mapping of option keys. The first problem stops
 * the load with "file:line:column: message". Anchors, aliases and tags are refused (config/README.md says
 * why).
 */
#include "yaml_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

enum { TRUN_KEY_SCRIPT = TRUN_OPT__COUNT, TRUN_KEY_ARGS, TRUN_KEY__END };

typedef struct {
  const char *name; /* for messages */
  yaml_parser_t parser;
  yaml_event_t ev;
  int have_ev;
  trun_yaml_doc *doc;
  char *err;
  size_t errlen;
} trun_yparse;

static int trun_yerr_at(const char *name, int line, int col, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static int trun_yerr_at(const char *name, int line, int col, char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return -1;
  int n = snprintf(err, errlen, "%s:%d:%d: ", name, line, col);
  if (n < 0 || (size_t)n >= errlen) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
  va_end(ap);
  return -1;
}

/* An error at the start of the current event. */
#define TRUN_YERR(p, ...)                                                                                 \
  trun_yerr_at((p)->name, (int)(p)->ev.start_mark.line + 1, (int)(p)->ev.start_mark.column + 1, (p)->err, \
               (p)->errlen, __VA_ARGS__)

/* ---- byte-level checks ----------------------------------------------------------------------------------
 */

/* Length of the UTF-8 sequence at s (at most n bytes), or 0 when it is not valid UTF-8 (overlong forms,
 * surrogates and code points above U+10FFFF included). */
static size_t trun_utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len;
  unsigned cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (len > n) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3f);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return len;
}

/* UTF-8, no control characters but tab / CR / LF, no tab in a line's indentation. Columns count characters,
 * as libyaml's do. */
static int trun_yaml_precheck(const char *name, const char *buf, size_t len, char *err, size_t errlen) {
  const unsigned char *s = (const unsigned char *)buf;
  int line = 1, col = 1, indent = 1;
  size_t i = 0;
  if (len >= 3 && s[0] == 0xef && s[1] == 0xbb && s[2] == 0xbf) i = 3; /* a byte order mark */
  while (i < len) {
    unsigned c = s[i];
    if (c == '\n') {
      line++;
      col = indent = 1;
      i++;
      continue;
    }
    if (c == '\t' && indent)
      return trun_yerr_at(name, line, col, err, errlen,
                          "tab character in indentation; YAML indents with spaces");
    if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f)
      return trun_yerr_at(name, line, col, err, errlen,
                          "control character 0x%02x is not allowed; remove it (inside double quotes write "
                          "an escape such as \\t)",
                          c);
    size_t n = trun_utf8_len(s + i, len - i);
    if (n == 0)
      return trun_yerr_at(name, line, col, err, errlen, "invalid UTF-8 (byte 0x%02x); save the file as UTF-8",
                          c);
    if (c != ' ') indent = 0;
    i += n;
    col++;
  }
  return 0;
}

/* ---- events ----------------------------------------------------------------------------------------- */

/* The libyaml error as "name:line:column: invalid YAML: problem (context at line L, column C)". */
static int trun_yaml_syntax_error(trun_yparse *p) {
  yaml_parser_t *y = &p->parser;
  const char *problem = y->problem ? y->problem : "cannot parse";
  int line = (int)y->problem_mark.line + 1, col = (int)y->problem_mark.column + 1;
  if (y->context)
    return trun_yerr_at(p->name, line, col, p->err, p->errlen, "invalid YAML: %s (%s at line %d, column %d)",
                        problem, y->context, (int)y->context_mark.line + 1, (int)y->context_mark.column + 1);
  return trun_yerr_at(p->name, line, col, p->err, p->errlen, "invalid YAML: %s", problem);
}

/* Anchors, aliases and tags are refused on every node. */
static int trun_yaml_check_node(trun_yparse *p) {
  const yaml_event_t *e = &p->ev;
  const yaml_char_t *anchor = NULL, *tag = NULL;
  switch (e->type) {
    case YAML_ALIAS_EVENT:
      return TRUN_YERR(p, "aliases (*%s) are not supported; write the value out in full",
                       (const char *)e->data.alias.anchor);
    case YAML_SCALAR_EVENT:
      anchor = e->data.scalar.anchor;
      tag = e->data.scalar.tag;
      break;
    case YAML_SEQUENCE_START_EVENT:
      anchor = e->data.sequence_start.anchor;
      tag = e->data.sequence_start.implicit ? NULL : e->data.sequence_start.tag;
      break;
    case YAML_MAPPING_START_EVENT:
      anchor = e->data.mapping_start.anchor;
      tag = e->data.mapping_start.implicit ? NULL : e->data.mapping_start.tag;
      break;
    default: return 0;
  }
  if (anchor) return TRUN_YERR(p, "anchors (&%s) are not supported; write the value out in full", anchor);
  if (tag) {
    static const char core[] = "tag:yaml.org,2002:"; /* "!!str" as written */
    const char *t = (const char *)tag;
    int is_core = strncmp(t, core, sizeof(core) - 1) == 0;
    return TRUN_YERR(p, "tags (%s%s) are not supported; remove the tag", is_core ? "!!" : "",
                     is_core ? t + sizeof(core) - 1 : t);
  }
  return 0;
}

/* The next event (the previous one is released), checked as a node. */
static int trun_yaml_next(trun_yparse *p) {
  if (p->have_ev) yaml_event_delete(&p->ev);
  p->have_ev = 0;
  if (!yaml_parser_parse(&p->parser, &p->ev)) return trun_yaml_syntax_error(p);
  p->have_ev = 1;
  return trun_yaml_check_node(p);
}

static const char *trun_yaml_scalar(const trun_yparse *p) { return (const char *)p->ev.data.scalar.value; }

/* A plain empty, ~ or null scalar. */
static int trun_yaml_is_null(const trun_yparse *p) {
  if (p->ev.type != YAML_SCALAR_EVENT || p->ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
  const char *s = trun_yaml_scalar(p);
  return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static const char *trun_yaml_kind(const yaml_event_t *e) {
  if (e->type == YAML_SEQUENCE_START_EVENT) return "a list";
  if (e->type == YAML_MAPPING_START_EVENT) return "a mapping";
  return "a single value";
}

/* A copy of the current scalar; refuses an embedded NUL ("\0" escape). */
static int trun_yaml_dup(trun_yparse *p, const char *key, char **out) {
  if (strlen(trun_yaml_scalar(p)) != p->ev.data.scalar.length)
    return TRUN_YERR(p, "%s: the value contains a NUL character", key);
  *out = strdup(trun_yaml_scalar(p));
  if (!*out) return TRUN_YERR(p, "%s: out of memory", key);
  return 0;
}

/* ---- keys ------------------------------------------------------------------------------------------- */

const char *trun_yaml_key(trun_opt_id id) {
  if (id == TRUN_OPT_CONFIG || id == TRUN_OPT_PRINT_CONFIG) return NULL;
  const trun_opt_desc *d = trun_opt_desc_of(id);
  return d ? d->name : NULL;
}

/* The k-th spelling (0 canonical, 1 underscore alias) of a key id, or NULL. */
static const char *trun_key_spelling(int id, int k) {
  if (id == TRUN_KEY_SCRIPT) return k == 0 ? "script" : NULL;
  if (id == TRUN_KEY_ARGS) return k == 0 ? "args" : NULL;
  const trun_opt_desc *d = trun_opt_desc_of((trun_opt_id)id);
  if (!d) return NULL;
  return k == 0 ? d->name : d->alias;
}

static int trun_key_lookup(const char *key) {
  for (int id = 0; id < TRUN_KEY__END; id++)
    for (int k = 0; k < 2; k++) {
      const char *s = trun_key_spelling(id, k);
      if (s && strcmp(s, key) == 0) return id;
    }
  return -1;
}

static const char *trun_key_suggest(const char *key) {
  const char *best = NULL;
  size_t bestd = (size_t)-1, len = strlen(key);
  for (int id = 0; id < TRUN_KEY__END; id++) {
    if (id == TRUN_OPT_CONFIG || id == TRUN_OPT_PRINT_CONFIG) continue;
    for (int k = 0; k < 2; k++) {
      const char *s = trun_key_spelling(id, k);
      if (!s) continue;
      size_t d = trun_edit_distance(key, len, s);
      if (d < bestd) {
        bestd = d;
        best = s;
      }
    }
  }
  return best && (bestd <= 2 || bestd * 3 <= len) ? best : NULL;
}

/* ---- values ----------------------------------------------------------------------------------------- */

static int trun_yaml_flag(trun_yparse *p, const char *key, int id) {
  trun_yaml_doc *doc = p->doc;
  if (p->ev.type != YAML_SCALAR_EVENT)
    return TRUN_YERR(p, "%s: expected true or false, got %s", key, trun_yaml_kind(&p->ev));
  if (trun_yaml_is_null(p)) return 0; /* the default: off */
  const char *s = trun_yaml_scalar(p);
  if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) {
    doc->val[id] = strdup("1");
    if (!doc->val[id]) return TRUN_YERR(p, "%s: out of memory", key);
    return 0;
  }
  if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) return 0;
  return TRUN_YERR(p, "%s: expected true or false, got '%s'", key, s);
}

static int trun_yaml_args(trun_yparse *p) {
  trun_yaml_doc *doc = p->doc;
  if (trun_yaml_is_null(p)) return 0;
  if (p->ev.type != YAML_SEQUENCE_START_EVENT)
    return TRUN_YERR(p, "args: expected a list of arguments such as [--epochs, 3], got %s",
                     trun_yaml_kind(&p->ev));
  int cap = 8;
  doc->args = calloc((size_t)cap + 1, sizeof(char *));
  if (!doc->args) return TRUN_YERR(p, "args: out of memory");
  for (;;) {
    if (trun_yaml_next(p) < 0) return -1;
    if (p->ev.type == YAML_SEQUENCE_END_EVENT) return 0;
    if (p->ev.type != YAML_SCALAR_EVENT)
      return TRUN_YERR(p, "args: each argument must be a single value, got %s", trun_yaml_kind(&p->ev));
    if (doc->nargs == cap) {
      char **n = realloc(doc->args, ((size_t)cap * 2 + 1) * sizeof(char *));
      if (!n) return TRUN_YERR(p, "args: out of memory");
      doc->args = n;
      cap *= 2;
    }
    if (trun_yaml_dup(p, "args", &doc->args[doc->nargs]) < 0) return -1;
    doc->args[++doc->nargs] = NULL;
  }
}

static int trun_yaml_value(trun_yparse *p, const char *key, int id) {
  trun_yaml_doc *doc = p->doc;
  if (id == TRUN_KEY_ARGS) return trun_yaml_args(p);
  if (id == TRUN_KEY_SCRIPT) {
    if (trun_yaml_is_null(p)) return 0; /* no script: the command line must give it */
    if (p->ev.type != YAML_SCALAR_EVENT || !*trun_yaml_scalar(p))
      return TRUN_YERR(p, "script: expected the path of the training script, got %s",
                       p->ev.type == YAML_SCALAR_EVENT ? "an empty string" : trun_yaml_kind(&p->ev));
    return trun_yaml_dup(p, key, &doc->script);
  }
  if (trun_opt_desc_of((trun_opt_id)id)->is_flag) return trun_yaml_flag(p, key, id);
  if (p->ev.type != YAML_SCALAR_EVENT)
    return TRUN_YERR(p, "%s: expected a single value, got %s", key, trun_yaml_kind(&p->ev));
  if (trun_yaml_is_null(p)) return 0; /* the default */
  return trun_yaml_dup(p, key, &doc->val[id]);
}

/* One "key: value" pair; the current event is the key. */
static int trun_yaml_pair(trun_yparse *p, int *first_line, const char **first_spelling) {
  trun_yaml_doc *doc = p->doc;
  if (p->ev.type != YAML_SCALAR_EVENT)
    return TRUN_YERR(p, "expected a key name, got %s", trun_yaml_kind(&p->ev));
  char key[80];
  snprintf(key, sizeof(key), "%s", trun_yaml_scalar(p));
  int id = trun_key_lookup(key);
  if (id == TRUN_OPT_CONFIG)
    return TRUN_YERR(p, "'%s' cannot be set in a config file (give --config on the command line)", key);
  if (id == TRUN_OPT_PRINT_CONFIG)
    return TRUN_YERR(p, "'%s' cannot be set in a config file (it is a command-line switch)", key);
  if (id < 0 || strlen(trun_yaml_scalar(p)) >= sizeof(key)) {
    const char *s = trun_key_suggest(key);
    if (s) return TRUN_YERR(p, "unknown key '%s'; did you mean '%s'?", key, s);
    return TRUN_YERR(p,
                     "unknown key '%s' (the keys are the long option names, e.g. nproc-per-node, and "
                     "script, args; see config/README.md)",
                     key);
  }
  int line = (int)p->ev.start_mark.line + 1;
  if (first_line[id]) {
    if (strcmp(first_spelling[id], key) == 0)
      return TRUN_YERR(p, "duplicate key '%s' (first set at line %d)", key, first_line[id]);
    return TRUN_YERR(p, "duplicate key '%s' (first set at line %d as '%s')", key, first_line[id],
                     first_spelling[id]);
  }
  first_line[id] = line;
  first_spelling[id] = trun_key_spelling(id, strcmp(trun_key_spelling(id, 0), key) == 0 ? 0 : 1);
  if (trun_yaml_next(p) < 0) return -1;
  int vline = (int)p->ev.start_mark.line + 1, vcol = (int)p->ev.start_mark.column + 1;
  if (trun_yaml_value(p, key, id) < 0) return -1;
  if (id == TRUN_KEY_SCRIPT) {
    doc->script_line = vline;
    doc->script_col = vcol;
  } else if (id == TRUN_KEY_ARGS) {
    doc->args_line = line; /* the key's: a block list starts on the next line */
  } else if (id < TRUN_OPT__COUNT) {
    doc->set[id] = 1;
    doc->line[id] = vline;
    doc->col[id] = vcol;
  }
  return 0;
}

/* The document's top-level node (current event). */
static int trun_yaml_top(trun_yparse *p) {
  if (trun_yaml_is_null(p)) return 0; /* "---" alone, "~": nothing set */
  if (p->ev.type != YAML_MAPPING_START_EVENT)
    return TRUN_YERR(p, "expected 'key: value' settings at the top level, got %s", trun_yaml_kind(&p->ev));
  int first_line[TRUN_KEY__END] = {0};
  const char *first_spelling[TRUN_KEY__END] = {0};
  for (;;) {
    if (trun_yaml_next(p) < 0) return -1;
    if (p->ev.type == YAML_MAPPING_END_EVENT) return 0;
    if (trun_yaml_pair(p, first_line, first_spelling) < 0) return -1;
  }
}

static int trun_yaml_stream(trun_yparse *p) {
  if (trun_yaml_next(p) < 0) return -1; /* STREAM-START */
  if (trun_yaml_next(p) < 0) return -1;
  if (p->ev.type == YAML_STREAM_END_EVENT) return 0; /* an empty file, or only comments */
  if (trun_yaml_next(p) < 0) return -1;              /* past DOCUMENT-START */
  if (trun_yaml_top(p) < 0) return -1;
  if (trun_yaml_next(p) < 0) return -1; /* DOCUMENT-END */
  if (trun_yaml_next(p) < 0) return -1;
  if (p->ev.type == YAML_DOCUMENT_START_EVENT)
    return TRUN_YERR(p, "a second YAML document ('---') is not supported; keep one document per file");
  return 0;
}

/* ---- load / apply / free ---------------------------------------------------------------------------- */

void trun_yaml_free(trun_yaml_doc *doc) {
  if (!doc) return;
  free(doc->path);
  for (int i = 0; i < TRUN_OPT__COUNT; i++) free(doc->val[i]);
  free(doc->script);
  for (int i = 0; i < doc->nargs; i++) free(doc->args[i]);
  free(doc->args);
  memset(doc, 0, sizeof(*doc));
}

int trun_yaml_load_buffer(const char *name, const char *buf, size_t len, trun_yaml_doc *doc, char *err,
                          size_t errlen) {
  memset(doc, 0, sizeof(*doc));
  if (err && errlen) err[0] = '\0';
  if (len > TRUN_YAML_MAX_BYTES)
    return trun_yerr_at(name, 1, 1, err, errlen,
                        "the file is %zu bytes, more than the %d MiB (%d bytes) allowed for a config file",
                        len, TRUN_YAML_MAX_BYTES >> 20, TRUN_YAML_MAX_BYTES);
  if (trun_yaml_precheck(name, buf, len, err, errlen) < 0) return -1;
  doc->path = strdup(name);
  trun_yparse p = {.name = name, .doc = doc, .err = err, .errlen = errlen};
  if (!doc->path || !yaml_parser_initialize(&p.parser)) {
    trun_yaml_free(doc);
    return trun_yerr_at(name, 1, 1, err, errlen, "out of memory");
  }
  yaml_parser_set_input_string(&p.parser, (const unsigned char *)buf, len);
  int rc = trun_yaml_stream(&p);
  if (p.have_ev) yaml_event_delete(&p.ev);
  yaml_parser_delete(&p.parser);
  if (rc < 0) trun_yaml_free(doc);
  return rc;
}

int trun_yaml_load(const char *path, trun_yaml_doc *doc, char *err, size_t errlen) {
  memset(doc, 0, sizeof(*doc));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0) {
    snprintf(err, errlen, "cannot read config file '%s': %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "cannot read config file '%s': not a regular file", path);
    close(fd);
    return -1;
  }
  if (st.st_size > TRUN_YAML_MAX_BYTES) { /* refused before reading it */
    close(fd);
    return trun_yerr_at(path, 1, 1, err, errlen,
                        "the file is %lld bytes, more than the %d MiB (%d bytes) allowed for a config file",
                        (long long)st.st_size, TRUN_YAML_MAX_BYTES >> 20, TRUN_YAML_MAX_BYTES);
  }
  size_t cap = (size_t)st.st_size + 1, len = 0;
  char *buf = malloc(cap);
  if (!buf) {
    close(fd);
    snprintf(err, errlen, "cannot read config file '%s': out of memory", path);
    return -1;
  }
  for (;;) { /* to the end, which may differ from st_size for special files that claim to be regular */
    ssize_t n = read(fd, buf + len, cap - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      snprintf(err, errlen, "cannot read config file '%s': %s", path, strerror(errno));
      free(buf);
      close(fd);
      return -1;
    }
    if (n == 0) break;
    len += (size_t)n;
    if (len == cap) {
      if (cap > TRUN_YAML_MAX_BYTES) break; /* already over the limit: load_buffer refuses it */
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        close(fd);
        snprintf(err, errlen, "cannot read config file '%s': out of memory", path);
        return -1;
      }
      buf = nb;
      cap *= 2;
    }
  }
  close(fd);
  int rc = trun_yaml_load_buffer(path, buf, len, doc, err, errlen);
  free(buf);
  return rc;
}

void trun_yaml_apply(const trun_yaml_doc *doc, trun_settings *cl) {
  cl->config_path = doc->path;
  for (int id = 0; id < TRUN_OPT__COUNT; id++) {
    trun_opt_val *v = &cl->v[id];
    if (!doc->set[id] || v->src >= TRUN_SRC_FILE) continue;
    const trun_opt_desc *d = trun_opt_desc_of((trun_opt_id)id);
    v->val = doc->val[id] ? doc->val[id] : (d->is_flag ? NULL : d->def);
    v->src = TRUN_SRC_FILE;
    v->line = doc->line[id];
    v->col = doc->col[id];
  }
  if (!cl->script && doc->script) {
    cl->script = doc->script;
    cl->script_args = doc->args;
    cl->nscript_args = doc->nargs;
    cl->script_src = TRUN_SRC_FILE;
    cl->script_line = doc->script_line;
    cl->script_col = doc->script_col;
    cl->args_line = doc->args_line;
  }
}
