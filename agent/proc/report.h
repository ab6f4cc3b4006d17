/* Worker failures: torchelastic error files (the @record JSON) and torchrun's failure banner. */
#ifndef TRUN_REPORT_H
#define TRUN_REPORT_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

typedef struct {
  int global_rank;
  int local_rank;
  int group_rank; /* node rank */
  pid_t pid;
  int exit_code;    /* >= 0: exit status; < 0: -signal number (torchrun's convention) */
  double timestamp; /* unix seconds: from the error file when present, else when the agent saw the exit */
  char *host;       /* where the worker ran */
  char *error_file; /* path, or NULL when the worker wrote none */
  char *message;    /* error file message ("ExcType: text"), or NULL */
  char *traceback;  /* extraInfo.py_callstack, or NULL */
  char *log_path;   /* stderr log file when redirected, or NULL */
  int torn_down;    /* 1: killed by the agent's teardown after another worker failed */
  char *cause;      /* one line: why it died (cause.h), or NULL */
  char *cause_kind; /* trun_cause_name() of it, or NULL */
  int node_lost;    /* 1: not a worker: the node group_rank was lost (its workers' fate is unknown);
                       exit_code and pid do not apply */
} trun_failure;

void trun_failure_free(trun_failure *f);

/* Reads a torchelastic error file into f->message / f->traceback / f->timestamp (and f->error_file).
 * Both layouts: {"message": {"message": ..., "extraInfo": {"py_callstack": ..., "timestamp": "..."}}} and
 * {"message": "<text>", "timestamp": ...}. Returns 0, -ENOENT when absent, -EBADMSG when not that JSON
 * (f keeps the detection timestamp; the caller reports the file as unreadable). */
int trun_errfile_read(const char *path, trun_failure *f);

/* Index of the root cause: the failure with the smallest timestamp that was not torn down (else the
 * smallest overall); -1 when n == 0. */
int trun_failure_root(const trun_failure *fs, size_t n);

/* torchrun's banner: '=' rule, "<script> FAILED", Failures (the others or <NO_OTHER_FAILURES>),
 * "Root Cause (first observed failure):" block with time/host/rank/exitcode/error_file/traceback, where a
 * negative exit code reads "Signal N (SIGNAME) received by PID p", a "  cause     : " line says why it died
 * (when known), torn-down workers are labelled
 * "(terminated by trun after the first failure)" and a log path is named. */
void trun_report_print(FILE *out, const char *script, const trun_failure *fs, size_t n);

/* One failure as a JSON object (for publishing to the store) and back. The string is malloc'ed. */
char *trun_failure_to_json(const trun_failure *f);
int trun_failure_from_json(const char *json, size_t len, trun_failure *f);

/* "SIGSEGV" for 11, "SIG<n>" when unknown. */
const char *trun_signal_name(int sig, char *buf, size_t len);

/* torchrun's @record copy: writes the root cause into path (the agent's own TORCHELASTIC_ERROR_FILE)
 * with message.errorCode = its exit code. 0 or a negative errno. */
int trun_errfile_write_parent(const char *path, const trun_failure *root);

#endif
