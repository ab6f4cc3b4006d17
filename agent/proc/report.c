/* Worker failures: torchelastic error files (the @record JSON) and torchrun's failure banner.
 *
 * The banner reproduces torch 1.13's ChildFailedError.format_msg (see tests/fixtures/errfiles/
 * torchrun113-banner.txt for real output) without the blank line torchrun prints after "ChildFailedError: ".
 * Differences, all deliberate: a "  log       : <path>" line after error_file when the worker's stderr was
 * redirected, a "  cause     : <one line>" after exitcode when the death's cause is known (cause.h), "
 * (terminated by trun after the first failure)" after the pid of a torn-down worker, and a plain-string error
 * file message is indented like a traceback. */
#include "report.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TRUN_ERRFILE_MAX_BYTES ((size_t)4 << 20) /* larger error files are rejected as malformed */
#define TRUN_BANNER_MAX_WIDTH 60
#define TRUN_NO_TRACEBACK_MSG "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
#define TRUN_NOT_AVAILABLE "<N/A>"
#define TRUN_TORN_DOWN_LABEL " (terminated by trun after the first failure)"

void trun_failure_free(trun_failure *f) {
  if (!f) return;
  free(f->host);
  free(f->error_file);
  free(f->message);
  free(f->traceback);
  free(f->log_path);
  free(f->cause);
  free(f->cause_kind);
  f->host = f->error_file = f->message = f->traceback = f->log_path = f->cause = f->cause_kind = NULL;
}

/* ---- files ------------------------------------------------------------------------------------ */

/* Reads a regular file of at most max bytes into a malloc'ed buffer (NUL-terminated). 0, -ENOENT (and the
 * other open errors as negative errno), or -EBADMSG for a non-regular or oversized file. */
static int trun_read_small_file(const char *path, size_t max, char **out, size_t *out_len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK); /* NONBLOCK: never hang on a FIFO */
  if (fd < 0) return -errno;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  if (!S_ISREG(st.st_mode) || (uintmax_t)st.st_size > max) {
    close(fd);
    return -EBADMSG;
  }
  size_t cap = (size_t)st.st_size + 1, len = 0;
  char *buf = malloc(cap + 1);
  if (!buf) {
    close(fd);
    return -ENOMEM;
  }
  for (;;) { /* the file may grow or shrink while we read it: read to EOF, never past max */
    if (len == cap) {
      if (cap > max) {
        free(buf);
        close(fd);
        return -EBADMSG;
      }
      size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
      char *nb = realloc(buf, ncap + 1);
      if (!nb) {
        free(buf);
        close(fd);
        return -ENOMEM;
      }
      buf = nb;
      cap = ncap;
    }
    ssize_t k = read(fd, buf + len, cap - len);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      int e = errno == EISDIR ? -EBADMSG : -errno;
      free(buf);
      close(fd);
      return e;
    }
    if (k == 0) break;
    len += (size_t)k;
  }
  close(fd);
  if (len > max) {
    free(buf);
    return -EBADMSG;
  }
  buf[len] = '\0';
  *out = buf;
  *out_len = len;
  return 0;
}

static int trun_write_all_file(const char *path, const char *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0644);
  if (fd < 0) return -errno;
  while (len > 0) {
    ssize_t k = write(fd, data, len);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      int e = -errno;
      close(fd);
      return e;
    }
    data += k;
    len -= (size_t)k;
  }
  if (close(fd) != 0 && errno != EINTR) return -errno;
  return 0;
}

/* Parses a JSON document that must be an object; NULL when it is not (jansson bounds the nesting depth). */
static json_t *trun_load_object(const char *buf, size_t len) {
  json_error_t err;
  json_t *j = json_loadb(buf, len, 0, &err);
  if (j && !json_is_object(j)) {
    json_decref(j);
    j = NULL;
  }
  return j;
}

/* ---- error file ------------------------------------------------------------------------------- */

/* A timestamp as torch writes it ("1700000000") or as a JSON number. 0, or -EBADMSG. */
static int trun_parse_timestamp(const json_t *v, double *out) {
  if (json_is_number(v)) {
    *out = json_number_value(v);
    return isfinite(*out) ? 0 : -EBADMSG;
  }
  if (!json_is_string(v)) return -EBADMSG;
  const char *s = json_string_value(v);
  char *end;
  errno = 0;
  double d = strtod(s, &end);
  if (end == s || errno != 0 || !isfinite(d)) return -EBADMSG;
  while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r') end++;
  if (*end != '\0') return -EBADMSG;
  *out = d;
  return 0;
}

/* An optional string member: absent or null → *out stays NULL; a string → copied; anything else → -EBADMSG.
 */
static int trun_opt_string(const json_t *obj, const char *key, char **out) {
  const json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_string(v)) return -EBADMSG;
  *out = strdup(json_string_value(v));
  return *out ? 0 : -ENOMEM;
}

int trun_errfile_read(const char *path, trun_failure *f) {
  if (!path || !f) return -EINVAL;
  char *buf = NULL;
  size_t len = 0;
  int rc = trun_read_small_file(path, TRUN_ERRFILE_MAX_BYTES, &buf, &len);
  if (rc < 0) return rc;
  json_t *root = trun_load_object(buf, len);
  free(buf);
  if (!root) return -EBADMSG;

  char *msg = NULL, *tb = NULL, *path_copy = NULL;
  double ts = f->timestamp;
  rc = -EBADMSG;
  const json_t *m = json_object_get(root, "message");
  if (json_is_string(m)) { /* {"message": "<text>", "timestamp": ...} */
    const json_t *t = json_object_get(root, "timestamp");
    if (t && !json_is_null(t) && trun_parse_timestamp(t, &ts) < 0) goto out;
    if (!(msg = strdup(json_string_value(m)))) goto oom;
  } else if (json_is_object(m)) { /* {"message": {"message": ..., "extraInfo": {...}, "errorCode": n}} */
    if ((rc = trun_opt_string(m, "message", &msg)) < 0) goto out;
    rc = -EBADMSG;
    const json_t *ei = json_object_get(m, "extraInfo");
    if (ei && !json_is_null(ei)) {
      if (!json_is_object(ei)) goto out;
      if ((rc = trun_opt_string(ei, "py_callstack", &tb)) < 0) goto out;
      rc = -EBADMSG;
      const json_t *t = json_object_get(ei, "timestamp");
      if (t && !json_is_null(t) && trun_parse_timestamp(t, &ts) < 0) goto out;
    }
    const json_t *ec = json_object_get(m, "errorCode");
    if (ec && !json_is_null(ec) && !json_is_integer(ec)) goto out;
  } else {
    goto out;
  }
  if (!(path_copy = strdup(path))) goto oom;
  free(f->message);
  free(f->traceback);
  free(f->error_file);
  f->message = msg;
  f->traceback = tb;
  f->error_file = path_copy;
  f->timestamp = ts;
  json_decref(root);
  return 0;
oom:
  rc = -ENOMEM;
out:
  free(msg);
  free(tb);
  json_decref(root);
  return rc;
}

/* ---- root cause ------------------------------------------------------------------------------- */

int trun_failure_root(const trun_failure *fs, size_t n) {
  if (!fs || n == 0 || n > INT_MAX) return -1;
  int best = -1, any = 0;
  for (size_t i = 0; i < n; i++) { /* ties keep the first, as torch's min() over rank order does */
    if (!fs[i].torn_down && (best < 0 || fs[i].timestamp < fs[best].timestamp)) best = (int)i;
    if (fs[i].timestamp < fs[any].timestamp) any = (int)i;
  }
  return best >= 0 ? best : any;
}

/* ---- banner ----------------------------------------------------------------------------------- */

const char *trun_signal_name(int sig, char *buf, size_t len) {
  if (!buf || len == 0) return "";
  const char *abbrev = NULL;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  if (sig > 0) abbrev = sigabbrev_np(sig);
#else
  static const char *const names[] = {NULL,     "HUP",  "INT",    "QUIT", "ILL",   "TRAP", "ABRT", "BUS",
                                      "FPE",    "KILL", "USR1",   "SEGV", "USR2",  "PIPE", "ALRM", "TERM",
                                      "STKFLT", "CHLD", "CONT",   "STOP", "TSTP",  "TTIN", "TTOU", "URG",
                                      "XCPU",   "XFSZ", "VTALRM", "PROF", "WINCH", "IO",   "PWR",  "SYS"};
  if (sig > 0 && (size_t)sig < sizeof(names) / sizeof(names[0])) abbrev = names[sig];
#endif
#ifdef SIGIO
  if (sig == SIGIO) abbrev = "IO"; /* Python's signal.Signals(29).name; glibc says POLL */
#endif
  if (abbrev)
    snprintf(buf, len, "SIG%s", abbrev);
  else if (sig == SIGRTMIN)
    snprintf(buf, len, "SIGRTMIN");
  else if (sig == SIGRTMAX)
    snprintf(buf, len, "SIGRTMAX");
  else if (sig > SIGRTMIN && sig < SIGRTMAX)
    snprintf(buf, len, "SIGRTMIN+%d", sig - SIGRTMIN);
  else
    snprintf(buf, len, "SIG%d", sig);
  return buf;
}

/* What the traceback line shows, and what a synthesized parent error file says: the traceback, else the
 * error file message, else torchrun's made-up message. Returns msg or buf. */
static const char *trun_failure_text(const trun_failure *f, int prefer_traceback, char *buf, size_t len) {
  if (prefer_traceback && f->traceback) return f->traceback;
  if (f->message) return f->message;
  if (f->exit_code < 0) {
    char name[32];
    snprintf(buf, len, "Signal %d (%s) received by PID %ld", -f->exit_code,
             trun_signal_name(-f->exit_code, name, sizeof(name)), (long)f->pid);
    return buf;
  }
  return TRUN_NO_TRACEBACK_MSG;
}

static void trun_format_time(double ts, char *buf, size_t len) {
  if (!isfinite(ts) || ts < -9e15 || ts > 9e15) {
    snprintf(buf, len, TRUN_NOT_AVAILABLE);
    return;
  }
  time_t t = (time_t)floor(ts);
  struct tm tm;
  if (!localtime_r(&t, &tm) || strftime(buf, len, "%Y-%m-%d_%H:%M:%S", &tm) == 0)
    snprintf(buf, len, TRUN_NOT_AVAILABLE);
}

/* Writes s to out with every "\n" followed by "  ", as torch indents a traceback. */
static void trun_put_indented(FILE *out, const char *s) {
  for (const char *p = s; *p; p++) {
    fputc(*p, out);
    if (*p == '\n') fputs("  ", out);
  }
}

/* One "[idx]:" block, without a final newline; *width = its longest line in code points (Python's len). */
static char *trun_format_failure(size_t idx, const trun_failure *f, size_t *width) {
  char *s = NULL;
  size_t slen = 0;
  FILE *m = open_memstream(&s, &slen);
  if (!m) return NULL;
  char when[64], text[128];
  trun_format_time(f->timestamp, when, sizeof(when));
  fprintf(m, "[%zu]:\n", idx);
  fprintf(m, "  time      : %s\n", when);
  fprintf(m, "  host      : %s\n", f->host ? f->host : TRUN_NOT_AVAILABLE);
  if (f->node_lost)
    fprintf(m, "  rank      : %s (every rank of node rank %d)\n", TRUN_NOT_AVAILABLE, f->group_rank);
  else
    fprintf(m, "  rank      : %d (local_rank: %d)\n", f->global_rank, f->local_rank);
  if (f->node_lost)
    fprintf(m, "  exitcode  : %s (node rank %d lost)\n", TRUN_NOT_AVAILABLE, f->group_rank);
  else
    fprintf(m, "  exitcode  : %d (pid: %ld)%s\n", f->exit_code, (long)f->pid,
            f->torn_down ? TRUN_TORN_DOWN_LABEL : "");
  if (f->cause) fprintf(m, "  cause     : %s\n", f->cause);
  fprintf(m, "  error_file: %s\n", f->error_file ? f->error_file : TRUN_NOT_AVAILABLE);
  if (f->log_path) fprintf(m, "  log       : %s\n", f->log_path);
  fputs("  traceback : ", m);
  trun_put_indented(m, trun_failure_text(f, 1, text, sizeof(text)));
  if (fclose(m) != 0) {
    free(s);
    return NULL;
  }
  size_t w = 0, cur = 0;
  for (const char *p = s;; p++) {
    if (*p == '\n' || *p == '\0') {
      if (cur > w) w = cur;
      cur = 0;
      if (*p == '\0') break;
    } else if (((unsigned char)*p & 0xC0) != 0x80) {
      cur++;
    }
  }
  *width = w;
  return s;
}

static void trun_put_rule(FILE *out, char c, size_t width) {
  for (size_t i = 0; i < width; i++) fputc(c, out);
  fputc('\n', out);
}

static size_t trun_codepoints(const char *s) {
  size_t n = 0;
  for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
  return n;
}

void trun_report_print(FILE *out, const char *script, const trun_failure *fs, size_t n) {
  if (!out || !fs || n == 0) return;
  int root = trun_failure_root(fs, n);
  if (root < 0) return;
  char **blocks = calloc(n, sizeof(*blocks));
  if (!blocks) return;
  if (!script) script = "";
  size_t width = trun_codepoints(script) + strlen(" FAILED");
  for (size_t i = 0; i < n; i++) {
    size_t w = 0;
    blocks[i] = trun_format_failure(i, &fs[i], &w);
    if (w > width) width = w;
  }
  if (width > TRUN_BANNER_MAX_WIDTH) width = TRUN_BANNER_MAX_WIDTH;

  trun_put_rule(out, '=', width);
  fprintf(out, "%s FAILED\n", script);
  trun_put_rule(out, '-', width);
  fputs("Failures:\n", out);
  if (n == 1) fputs("  <NO_OTHER_FAILURES>\n", out);
  for (size_t i = 0; i < n; i++)
    if ((int)i != root) fprintf(out, "%s\n", blocks[i] ? blocks[i] : "[?]: <out of memory>");
  trun_put_rule(out, '-', width);
  fputs("Root Cause (first observed failure):\n", out);
  fprintf(out, "%s\n", blocks[root] ? blocks[root] : "[?]: <out of memory>");
  trun_put_rule(out, '=', width);
  for (size_t i = 0; i < n; i++) free(blocks[i]);
  free(blocks);
}

/* ---- JSON for the store ----------------------------------------------------------------------- */

static int trun_set(json_t *obj, const char *key, json_t *v) {
  return v ? json_object_set_new(obj, key, v) : -1;
}

static json_t *trun_json_string_or_null(const char *s) { return s ? json_string(s) : json_null(); }

char *trun_failure_to_json(const trun_failure *f) {
  if (!f) return NULL;
  json_t *o = json_object();
  if (!o) return NULL;
  double ts = isfinite(f->timestamp) ? f->timestamp : 0.0; /* JSON has no NaN / infinity */
  int bad = trun_set(o, "global_rank", json_integer(f->global_rank)) |
            trun_set(o, "local_rank", json_integer(f->local_rank)) |
            trun_set(o, "group_rank", json_integer(f->group_rank)) |
            trun_set(o, "pid", json_integer(f->pid)) | trun_set(o, "exit_code", json_integer(f->exit_code)) |
            trun_set(o, "timestamp", json_real(ts)) | trun_set(o, "host", trun_json_string_or_null(f->host)) |
            trun_set(o, "error_file", trun_json_string_or_null(f->error_file)) |
            trun_set(o, "message", trun_json_string_or_null(f->message)) |
            trun_set(o, "traceback", trun_json_string_or_null(f->traceback)) |
            trun_set(o, "log_path", trun_json_string_or_null(f->log_path)) |
            trun_set(o, "cause", trun_json_string_or_null(f->cause)) |
            trun_set(o, "cause_kind", trun_json_string_or_null(f->cause_kind)) |
            trun_set(o, "torn_down", json_boolean(f->torn_down));
  /* JSON_REAL_PRECISION(17) is jansson's default: doubles round-trip exactly. */
  char *s = bad ? NULL : json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return s;
}

static int trun_get_int(const json_t *o, const char *key, long min, long max, long *out) {
  const json_t *v = json_object_get(o, key);
  if (!json_is_integer(v)) return -EBADMSG;
  json_int_t x = json_integer_value(v);
  if (x < min || x > max) return -EBADMSG;
  *out = (long)x;
  return 0;
}

/* Fills *f entirely (it need not be initialized and its old strings are not freed). On error *f is zeroed,
 * so trun_failure_free(f) is always safe afterwards. */
int trun_failure_from_json(const char *json, size_t len, trun_failure *f) {
  if (!f) return -EINVAL;
  memset(f, 0, sizeof(*f));
  if (!json) return -EINVAL;
  json_t *o = trun_load_object(json, len);
  if (!o) return -EBADMSG;
  trun_failure t = {0};
  long g, l, gr, pid, ec;
  int rc = -EBADMSG;
  if (trun_get_int(o, "global_rank", INT_MIN, INT_MAX, &g) < 0 ||
      trun_get_int(o, "local_rank", INT_MIN, INT_MAX, &l) < 0 ||
      trun_get_int(o, "group_rank", INT_MIN, INT_MAX, &gr) < 0 ||
      trun_get_int(o, "pid", INT_MIN, INT_MAX, &pid) < 0 ||
      trun_get_int(o, "exit_code", INT_MIN, INT_MAX, &ec) < 0)
    goto out;
  const json_t *ts = json_object_get(o, "timestamp"), *td = json_object_get(o, "torn_down");
  if (!json_is_number(ts)) goto out;
  if (td && !json_is_boolean(td) && !json_is_integer(td)) goto out;
  t.global_rank = (int)g;
  t.local_rank = (int)l;
  t.group_rank = (int)gr;
  t.pid = (pid_t)pid;
  t.exit_code = (int)ec;
  t.timestamp = json_number_value(ts);
  t.torn_down = td ? (json_is_boolean(td) ? json_is_true(td) : json_integer_value(td) != 0) : 0;
  if ((rc = trun_opt_string(o, "host", &t.host)) < 0 ||
      (rc = trun_opt_string(o, "error_file", &t.error_file)) < 0 ||
      (rc = trun_opt_string(o, "message", &t.message)) < 0 ||
      (rc = trun_opt_string(o, "traceback", &t.traceback)) < 0 ||
      (rc = trun_opt_string(o, "log_path", &t.log_path)) < 0 ||
      (rc = trun_opt_string(o, "cause", &t.cause)) < 0 ||
      (rc = trun_opt_string(o, "cause_kind", &t.cause_kind)) < 0)
    goto out;
  *f = t;
  json_decref(o);
  return 0;
out:
  trun_failure_free(&t);
  json_decref(o);
  return rc;
}

/* ---- parent error file ------------------------------------------------------------------------ */

/* The root cause's own error file when it can be read as a JSON object (torch copies it verbatim, adding
 * message.errorCode when the exit code is non-zero and message is an object), else NULL. */
static json_t *trun_copy_child_errfile(const trun_failure *root) {
  if (!root->error_file) return NULL;
  char *buf = NULL;
  size_t len = 0;
  if (trun_read_small_file(root->error_file, TRUN_ERRFILE_MAX_BYTES, &buf, &len) < 0) return NULL;
  json_t *doc = trun_load_object(buf, len);
  free(buf);
  if (!doc) return NULL;
  json_t *m = json_object_get(doc, "message");
  if (root->exit_code != 0 && json_is_object(m) &&
      json_object_set_new(m, "errorCode", json_integer(root->exit_code))) {
    json_decref(doc);
    return NULL;
  }
  return doc;
}

/* {"message": {"message": ..., "extraInfo": {["py_callstack": ...,] "timestamp": "<secs>"}, "errorCode": n}}
 */
static json_t *trun_synth_errfile(const trun_failure *root) {
  char text[128], ts[32];
  double t = isfinite(root->timestamp) ? floor(root->timestamp) : 0.0;
  if (t < -9e18 || t > 9e18) t = 0.0;
  snprintf(ts, sizeof(ts), "%lld", (long long)t);
  json_t *doc = json_object(), *m = json_object(), *ei = json_object();
  int bad = !doc || !m || !ei;
  bad = bad || trun_set(m, "message", json_string(trun_failure_text(root, 0, text, sizeof(text))));
  if (!bad && root->traceback) bad = trun_set(ei, "py_callstack", json_string(root->traceback));
  bad = bad || trun_set(ei, "timestamp", json_string(ts));
  bad = bad || trun_set(m, "extraInfo", json_incref(ei)) ||
        trun_set(m, "errorCode", json_integer(root->exit_code));
  bad = bad || trun_set(doc, "message", json_incref(m));
  json_decref(ei);
  json_decref(m);
  if (bad) {
    json_decref(doc);
    return NULL;
  }
  return doc;
}

/* jansson's JSON_ENSURE_ASCII output made byte-identical to Python's json.dumps: the hex digits of "\u"
 * escapes lower-cased ("\u00e9", not "\u00E9") and DEL escaped as "\u007f" (jansson leaves it raw; a raw
 * 0x7f can only be inside a string). Returns a new malloc'ed string, or NULL. */
static char *trun_pythonize_json(const char *s) {
  size_t n = 0;
  for (const char *p = s; *p; p++) n += *p == 0x7f ? 6 : 1;
  char *out = malloc(n + 1), *o = out;
  if (!out) return NULL;
  for (const char *p = s; *p; p++) {
    if (*p == 0x7f) {
      memcpy(o, "\\u007f", 6);
      o += 6;
      continue;
    }
    *o++ = *p;
    if (*p != '\\' || !p[1]) continue;
    *o++ = *++p; /* the escaped character; an escaped backslash is copied whole */
    if (*p != 'u') continue;
    for (int i = 0; i < 4 && p[1]; i++) {
      char c = *++p;
      *o++ = c >= 'A' && c <= 'F' ? (char)(c - 'A' + 'a') : c;
    }
  }
  *o = '\0';
  return out;
}

int trun_errfile_write_parent(const char *path, const trun_failure *root) {
  if (!path || !*path || !root) return -EINVAL;
  json_t *doc = trun_copy_child_errfile(root);
  if (!doc) doc = trun_synth_errfile(root);
  if (!doc) return -ENOMEM;
  /* Python's json.dumps: ", " and ": " separators, ASCII only; no trailing newline. */
  char *s = json_dumps(doc, JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
  json_decref(doc);
  char *py = s ? trun_pythonize_json(s) : NULL;
  free(s);
  if (!py) return -ENOMEM;
  int rc = trun_write_all_file(path, py, strlen(py));
  free(py);
  return rc;
}
