/* The job's processes outside the worker sessions (strays.h): one pass over /proc builds the process table
 * (pid, parent, session, start time, state); the job is the closure of the workers and the orphans the
 * agent inherited under the parent relation, plus every process of a session registered before. */
#include "strays.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "procstat.h"

#define TRUN_STRAYS_KILL_MS 5000 /* the longest the end-of-round sweep waits for the killed to go */

typedef struct {
  pid_t pid, ppid, sid;
  unsigned long long start;
  char state;
  int job; /* 1: a process of the job, 2: not, 0: not decided yet */
} proc_row;

struct trun_strays {
  char root[256];
  trun_watchdog *guard;
  pid_t *sessions; /* registered with the guard, this round */
  size_t n, cap;
  size_t last_rows; /* processes the last look read */
  int last_walk;    /* 1: the agent's descendants only (read_descendants) */
};

trun_strays *trun_strays_new(const char *proc_root, trun_watchdog *guard) {
  trun_strays *s = calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  snprintf(s->root, sizeof(s->root), "%s", proc_root);
  s->guard = guard;
  return s;
}

int trun_strays_last_look(const trun_strays *s, size_t *rows) {
  *rows = s->last_rows;
  return s->last_walk;
}

void trun_strays_free(trun_strays *s) {
  if (s == NULL) return;
  free(s->sessions);
  free(s);
}

/* One row from root/PID/stat: 0, or -1 when the process is gone or the line is not understood. */
static int read_row(const char *root, const char *pid, proc_row *r) {
  trun__proc_stat st;
  if (trun__proc_stat_read(root, pid, &st) != 0) return -1;
  r->state = st.state;
  r->start = st.start;
  r->pid = atoi(pid);
  r->ppid = st.ppid;
  r->sid = st.sid;
  r->job = 0;
  return 0;
}

/* Appends pid's row to *rows (growing it); 0, or -1 when the process is gone or memory is short. */
static int add_row(const char *root, pid_t pid, proc_row **rows, size_t *n, size_t *cap) {
  if (*n == *cap) {
    proc_row *more = realloc(*rows, 2 * *cap * sizeof(**rows));
    if (more == NULL) return -1;
    *rows = more;
    *cap *= 2;
  }
  char name[24];
  snprintf(name, sizeof(name), "%d", (int)pid);
  if (read_row(root, name, &(*rows)[*n]) != 0) return -1;
  (*n)++;
  return 0;
}

/* Reads root/PID/task/TID/children of every thread of pid and appends the children's rows not in rows yet. */
static void add_children(const char *root, pid_t pid, proc_row **rows, size_t *n, size_t *cap) {
  char path[320];
  snprintf(path, sizeof(path), "%s/%d/task", root, (int)pid);
  DIR *d = opendir(path);
  if (d == NULL) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    snprintf(path, sizeof(path), "%s/%d/task/%s/children", root, (int)pid, e->d_name);
    FILE *f = fopen(path, "re");
    if (f == NULL) continue;
    int c;
    while (fscanf(f, "%d", &c) == 1) {
      size_t i = 0;
      while (i < *n && (*rows)[i].pid != c) i++;
      if (i == *n) add_row(root, c, rows, n, cap);
    }
    fclose(f);
  }
  closedir(d);
}

/* The agent and its descendants, where they are the whole job: the kernel lists each thread's children
 * (root/PID/task/TID/children) and every orphan of the job comes back to the agent (its subreaper, or PID 1).
 * A box's other processes are not read: a 64-CPU machine has hundreds of kernel threads, a /proc/PID/stat
 * each. 1 with the table, 0 when the walk cannot be used (then every process is read). */
static int read_descendants(const char *root, proc_row **rows, size_t *n) {
  int reaper = 0;
  pid_t me = getpid();
  char path[320];
  snprintf(path, sizeof(path), "%s/%d/task/%d/children", root, (int)me, (int)me);
  if ((me != 1 && (prctl(PR_GET_CHILD_SUBREAPER, &reaper) < 0 || !reaper)) || access(path, R_OK) != 0)
    return 0;
  size_t cap = 64;
  *n = 0;
  if ((*rows = malloc(cap * sizeof(**rows))) == NULL) return 0;
  if (add_row(root, me, rows, n, &cap) < 0) {
    free(*rows);
    *rows = NULL;
    return 0;
  }
  for (size_t i = 0; i < *n; i++) add_children(root, (*rows)[i].pid, rows, n, &cap);
  return 1;
}

/* The process table in *rows (n of them): the agent's descendants where they hold the whole job, else every
 * process. 0 or -errno. */
static int read_table(trun_strays *s, proc_row **rows, size_t *n) {
  const char *root = s->root;
  s->last_walk = read_descendants(root, rows, n);
  s->last_rows = *n;
  if (s->last_walk) return 0;
  DIR *d = opendir(root);
  if (d == NULL) return -errno;
  size_t cap = 256;
  *n = 0;
  *rows = malloc(cap * sizeof(**rows));
  struct dirent *e;
  while (*rows && (e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (*n == cap) {
      proc_row *more = realloc(*rows, 2 * cap * sizeof(**rows));
      if (more == NULL) break;
      *rows = more;
      cap *= 2;
    }
    if (read_row(root, e->d_name, &(*rows)[*n]) == 0) (*n)++;
  }
  closedir(d);
  s->last_rows = *n;
  return *rows ? 0 : -ENOMEM;
}

static int has(const pid_t *v, size_t n, pid_t p) {
  for (size_t i = 0; i < n; i++)
    if (v[i] == p) return 1;
  return 0;
}

static int by_pid(const void *x, const void *y) {
  pid_t a = ((const proc_row *)x)->pid, b = ((const proc_row *)y)->pid;
  return (a > b) - (a < b);
}

static proc_row *row_of(proc_row *rows, size_t n, pid_t pid) {
  proc_row key = {.pid = pid};
  return bsearch(&key, rows, n, sizeof(*rows), by_pid);
}

/* Marks the job's rows (job 1; 2: not the job's): the workers, the orphans the agent inherited (not in its
 * session, not kept), every process of a registered session, and their descendants. Rows sorted by pid; each
 * parent chain is walked once (O(n log n)). */
static void mark(const trun_strays *s, const trun_strays_view *v, proc_row *rows, size_t n) {
  pid_t me = getpid(), my_sid = getsid(0);
  qsort(rows, n, sizeof(*rows), by_pid);
  for (size_t i = 0; i < n; i++) {
    proc_row *r = &rows[i];
    if (r->pid == me || r->ppid == me)
      r->job = r->pid != me && (has(v->workers, v->nworkers, r->pid) ||
                                (r->sid != my_sid && !has(v->keep, v->nkeep, r->pid)))
                   ? 1
                   : 2;
    if (has(v->workers, v->nworkers, r->pid) || has(s->sessions, s->n, r->sid)) r->job = 1;
  }
  for (size_t i = 0; i < n; i++) {
    /* Up the chain to the first row already decided (or a parent outside the table: not the job's), then
     * the same answer for every row on the way. */
    proc_row *r = &rows[i];
    size_t depth = 0;
    while (r && r->job == 0 && depth++ < n) r = row_of(rows, n, r->ppid);
    int job = r && r->job ? r->job : 2;
    for (proc_row *q = &rows[i]; q && q->job == 0; q = row_of(rows, n, q->ppid)) q->job = job;
  }
}

/* Registers session sid with the guard: its leader's start time while the leader lives, else the session
 * as one whose leader is gone (the guard then kills only members born before now). */
static void add_session(trun_strays *s, const proc_row *rows, size_t n, pid_t sid, const proc_row *seen) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 16;
    pid_t *more = realloc(s->sessions, cap * sizeof(*more));
    if (more == NULL) return;
    s->sessions = more;
    s->cap = cap;
  }
  s->sessions[s->n++] = sid;
  const proc_row *leader = row_of((proc_row *)rows, n, sid);
  if (s->guard && leader && leader->state != 'Z') {
    trun_watchdog_add_at(s->guard, sid, leader->start);
  } else if (s->guard) {
    trun_watchdog_add_at(s->guard, sid, 0);
    trun_watchdog_gone(s->guard, sid);
  }
  trun_debug(
      "pid %d (parent %d) left its worker's session: session %d is the job's now (the guard kills it with "
      "the agent; the end of the round kills it)",
      (int)seen->pid, (int)seen->ppid, (int)sid);
}

int trun_strays_scan(trun_strays *s, const trun_strays_view *v) {
  proc_row *rows = NULL;
  size_t n = 0;
  int rc = read_table(s, &rows, &n);
  if (rc < 0) {
    free(rows);
    return rc;
  }
  mark(s, v, rows, n);
  int added = 0;
  for (size_t i = 0; i < n; i++) {
    const proc_row *r = &rows[i];
    if (r->job != 1 || r->state == 'Z' || has(v->workers, v->nworkers, r->sid) ||
        has(s->sessions, s->n, r->sid))
      continue;
    add_session(s, rows, n, r->sid, r);
    added++;
  }
  free(rows);
  return added;
}

int trun_strays_kill(trun_strays *s, const trun_strays_view *v) {
  pid_t me = getpid();
  int killed = 0;
  double deadline = trun_mono_ms() + TRUN_STRAYS_KILL_MS;
  for (int pass = 0;; pass++) {
    proc_row *rows = NULL;
    size_t n = 0;
    if (read_table(s, &rows, &n) < 0) {
      free(rows);
      break;
    }
    mark(s, v, rows, n);
    int left = 0;
    for (size_t i = 0; i < n; i++) {
      proc_row *r = &rows[i];
      if (r->job != 1) continue;
      if (r->state == 'Z') { /* a zombie the agent inherited: reap it; another's goes with its parent */
        if (r->ppid == me && waitpid(r->pid, NULL, WNOHANG) == 0)
          left++;
        else if (r->ppid != me)
          left++;
        continue;
      }
      if (kill(r->pid, SIGKILL) == 0 && pass == 0) {
        trun_debug("killing pid %d (session %d), left by the workers", (int)r->pid, (int)r->sid);
        killed++;
      }
      if (r->state != 'D') left++; /* uninterruptible: it goes when the kernel lets it (the guard has it) */
    }
    free(rows);
    if (left == 0) break;
    if (trun_mono_ms() > deadline) {
      trun_warn("%d process(es) started under the workers still there %d s after SIGKILL", left,
                TRUN_STRAYS_KILL_MS / 1000);
      break;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  s->n = 0;
  return killed;
}
