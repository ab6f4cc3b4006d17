/* The torch the workers' Python would import, found by reading files (worker_env.h): starting an interpreter
 * to ask would cost the launch tens of milliseconds, and what trun needs is only which names of torch's
 * variables that torch reads (agent_fr.c). The module path is built as CPython builds it, for the layouts
 * Python installs on Linux:
 *  - PYTHONPATH's entries first;
 *  - a virtual environment: pyvenv.cfg next to the interpreter as invoked or one directory up; its
 *    site-packages, then (include-system-site-packages = true) the base installation's, at `home`'s parent;
 *  - the user's site-packages (~/.local/lib/pythonX.Y/site-packages) unless PYTHONNOUSERSITE is set or a
 *    virtual environment excludes the system's;
 *  - the installation's prefix (the real interpreter's grandparent directory): local/lib/pythonX.Y/
 *    dist-packages and lib/python3/dist-packages (Debian), lib/pythonX.Y/site-packages (everything else).
 * X.Y comes from pyvenv.cfg's version, else from the interpreter's real name (python3.12). The first
 * directory holding torch/version.py wins; its __version__ = '2.11.0+cu130' line gives the version. What it
 * does not know (.pth files, zip imports, a wrapper script as PYTHON_EXEC) ends in "not found", and callers
 * then keep what works with any torch. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "worker_env.h"

#define TV_MAX_DIRS 48

/* Whether snprintf's result n fit in size bytes. */
static int fits(int n, size_t size) { return n >= 0 && (size_t)n < size; }

typedef struct {
  char dirs[TV_MAX_DIRS][PATH_MAX];
  int n;
} tv_path;

static void tv_add(tv_path *p, const char *fmt, const char *a, const char *b) {
  if (p->n >= TV_MAX_DIRS) return;
  int len = snprintf(p->dirs[p->n], sizeof(p->dirs[p->n]), fmt, a, b);
  if (len > 0 && (size_t)len < sizeof(p->dirs[p->n])) p->n++;
}

/* A key of pyvenv.cfg ("key = value" lines) into out; 0 found, -1 not. */
static int cfg_value(const char *text, const char *key, char *out, size_t len) {
  size_t kl = strlen(key);
  for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    while (*l == ' ' || *l == '\t') l++;
    if (strncmp(l, key, kl) != 0) continue;
    const char *v = l + kl;
    while (*v == ' ' || *v == '\t') v++;
    if (*v != '=') continue;
    v++;
    while (*v == ' ' || *v == '\t') v++;
    size_t vl = strcspn(v, "\r\n");
    while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t')) vl--;
    snprintf(out, len, "%.*s", (int)vl, v);
    return 0;
  }
  return -1;
}

/* "3.12" from "3.12.3" or "python3.12"; 0, or -1. */
static int major_minor(const char *s, char *out, size_t len) {
  const char *p = s;
  while (*p && (*p < '0' || *p > '9')) p++;
  int ma, mi;
  if (sscanf(p, "%d.%d", &ma, &mi) != 2 || ma < 2 || ma > 9 || mi < 0 || mi > 99) return -1;
  snprintf(out, len, "%d.%d", ma, mi);
  return 0;
}

/* The version in torch/version.py's text: __version__ = '2.11.0+cu130' (or "..."). */
static int parse_version(const char *text, int *major, int *minor) {
  for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    if (strncmp(l, "__version__", 11) != 0) continue;
    const char *q = strpbrk(l, "'\"");
    if (q == NULL || q > l + 40) return -1;
    if (sscanf(q + 1, "%d.%d", major, minor) != 2 || *major < 0 || *minor < 0) return -1;
    return 0;
  }
  return -1;
}

/* The directories, in import order, where the interpreter at exe (as invoked) looks for site packages. */
static void build_path(const char *exe, char *const *envp, tv_path *p) {
  p->n = 0;
  const char *pp = trun_env_get(envp, "PYTHONPATH");
  for (const char *e = pp; e && *e;) {
    size_t l = strcspn(e, ":");
    if (l > 0 && l < PATH_MAX) {
      char one[PATH_MAX];
      snprintf(one, sizeof(one), "%.*s", (int)l, e);
      tv_add(p, "%s%s", one, "");
    }
    e += l;
    if (*e == ':') e++;
  }
  char dir[PATH_MAX], cfgpath[PATH_MAX], cfg[4096] = "", xy[16] = "", real[PATH_MAX];
  char *slash = strrchr(exe, '/');
  if (slash == NULL || !fits(snprintf(dir, sizeof(dir), "%.*s", (int)(slash - exe), exe), sizeof(dir)))
    return;
  /* pyvenv.cfg next to the interpreter or one up (the venv's root) */
  char venv[PATH_MAX] = "";
  if (fits(snprintf(cfgpath, sizeof(cfgpath), "%s/pyvenv.cfg", dir), sizeof(cfgpath)) &&
      trun_read_small(cfgpath, cfg, sizeof(cfg)) >= 0) {
    snprintf(venv, sizeof(venv), "%s", dir);
  } else if (fits(snprintf(cfgpath, sizeof(cfgpath), "%s/../pyvenv.cfg", dir), sizeof(cfgpath)) &&
             trun_read_small(cfgpath, cfg, sizeof(cfg)) >= 0) {
    const char *up = strrchr(dir, '/'); /* the venv's root: bin/'s parent */
    if (up == NULL)
      snprintf(venv, sizeof(venv), ".");
    else if (up == dir)
      snprintf(venv, sizeof(venv), "/");
    else
      snprintf(venv, sizeof(venv), "%.*s", (int)(up - dir), dir);
  }
  char v[64];
  if (venv[0] && cfg_value(cfg, "version", v, sizeof(v)) == 0) major_minor(v, xy, sizeof(xy));
  if (venv[0] && !xy[0] && cfg_value(cfg, "version_info", v, sizeof(v)) == 0) major_minor(v, xy, sizeof(xy));
  if (realpath(exe, real) == NULL) snprintf(real, sizeof(real), "%s", exe);
  if (!xy[0]) {
    const char *base = strrchr(real, '/');
    major_minor(base ? base + 1 : real, xy, sizeof(xy));
  }
  if (!xy[0]) return; /* no X.Y: the directories cannot be named */
  int system = 1;
  if (venv[0]) {
    tv_add(p, "%s/lib/python%s/site-packages", venv, xy);
    if (cfg_value(cfg, "include-system-site-packages", v, sizeof(v)) != 0 || strcmp(v, "true") != 0)
      system = 0;
  }
  if (!system) return;
  const char *nouser = trun_env_get(envp, "PYTHONNOUSERSITE");
  const char *home = trun_env_get(envp, "HOME");
  if ((nouser == NULL || nouser[0] == '\0') && home && home[0]) {
    char h[PATH_MAX];
    snprintf(h, sizeof(h), "%s/.local/lib/python", home);
    tv_add(p, "%s%s/site-packages", h, xy);
  }
  /* the installation's prefix: the venv's home's parent, else the real interpreter's grandparent */
  char prefix[PATH_MAX] = "";
  if (venv[0] && cfg_value(cfg, "home", v, sizeof(v)) == 0 && v[0] == '/') {
    char h[PATH_MAX];
    snprintf(h, sizeof(h), "%s", v);
    char *s = strrchr(h, '/');
    if (s) *s = '\0';
    snprintf(prefix, sizeof(prefix), "%s", h[0] ? h : "/");
  } else {
    snprintf(prefix, sizeof(prefix), "%s", real);
    for (int up = 0; up < 2; up++) {
      char *s = strrchr(prefix, '/');
      if (s == NULL) return;
      *s = '\0';
    }
  }
  if (strcmp(prefix, "/") == 0) prefix[0] = '\0';
  tv_add(p, "%s/local/lib/python%s/dist-packages", prefix, xy);
  tv_add(p, "%s/lib/python3/dist-packages", prefix, "");
  tv_add(p, "%s/lib/python%s/dist-packages", prefix, xy);
  tv_add(p, "%s/lib/python%s/site-packages", prefix, xy);
}

int trun_worker_torch_version(const trun_config *cfg, char *const *envp, int *major, int *minor, char *where,
                              size_t wlen) {
  if (cfg && cfg->no_python && !cfg->run_path) return -1;
  char buf[PATH_MAX], exe[PATH_MAX];
  const char *py = trun_worker_python(envp, buf, sizeof(buf), NULL);
  if (strchr(py, '/'))
    snprintf(exe, sizeof(exe), "%s", py);
  else if (trun_worker_which(py, envp, exe, sizeof(exe)) != 0)
    return -1;
  tv_path *p = malloc(sizeof(*p));
  if (p == NULL) return -1;
  build_path(exe, envp, p);
  int rc = -1;
  for (int i = 0; i < p->n && rc != 0; i++) {
    char file[PATH_MAX + 32], text[4096];
    snprintf(file, sizeof(file), "%s/torch/version.py", p->dirs[i]);
    if (trun_read_small(file, text, sizeof(text)) >= 0 && parse_version(text, major, minor) == 0) {
      snprintf(where, wlen, "%s/torch", p->dirs[i]);
      rc = 0;
    }
  }
  free(p);
  return rc;
}
