/* `trun --hostfile FILE [--rsh CMD]`: one agent per host, started over ssh (or any rsh-like command), as
 * DeepSpeed's and pdsh's launchers do.
 *
 * The hostfile is DeepSpeed's format: one host per line, "host slots=N" or just "host"; '#' starts a
 * comment; blank lines are ignored. The first host is the master (--master-addr unless given) and node
 * ranks follow the file's order. Host i runs, through `<rsh words> <host> <trun> <args...>`, the same trun
 * command line minus --hostfile/--rsh, plus --nnodes N --node-rank i --master-addr A --master-port P (static
 * backend) or --nnodes N [--rdzv-endpoint A:P] (c10d); slots=N becomes --nproc-per-node N when the command
 * line does not give one. Every argument is quoted for the remote POSIX shell (ssh joins its arguments with
 * spaces and the remote shell splits them again); no shell runs on this side. */
#ifndef TRUN_HOSTFILE_H
#define TRUN_HOSTFILE_H

#include <stddef.h>
#include <stdio.h>

#include "config/config.h"

#define TRUN_HOSTFILE_MAX_HOSTS 4096
#define TRUN_RSH_DEFAULT "ssh -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=10"

typedef struct {
  char *host; /* as written ("user@name" allowed); never starts with '-' */
  int slots;  /* 0 when the line has no slots= */
  int line;
} trun_host;

typedef struct {
  trun_host *h;
  size_t n;
} trun_hostfile;

/* Parses the text of a hostfile (path is only used in messages). Returns 0, or -1 with
 * "path:line: message" in err (the caller exits 2). */
int trun_hostfile_parse(const char *path, const char *text, size_t len, trun_hostfile *out, char *err,
                        size_t errlen);
int trun_hostfile_load(const char *path, trun_hostfile *out, char *err, size_t errlen);
void trun_hostfile_free(trun_hostfile *hf);

/* s quoted for a POSIX shell: 'text' with each ' written as '\''. malloc'ed; NULL when out of memory. */
char *trun_shell_quote(const char *s);

/* The argv (NULL-terminated, every string malloc'ed; free with trun_argv_free) that starts node rank i:
 * the words of rsh, the host, then trun_path and the agent's arguments, each shell-quoted. Returns 0, or -1
 * with a reason in err. */
int trun_hostfile_argv(const trun_settings *cl, const trun_config *cfg, const trun_hostfile *hf, size_t i,
                       const char *rsh, const char *trun_path, char ***out, char *err, size_t errlen);
void trun_argv_free(char **argv);

/* The launcher: loads cl's hostfile, starts every host's agent, prefixes each output line with "[host] ",
 * forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT to every child, and returns the job's exit code (of the hosts'
 * codes the first in base/exit.h's order, trun_exit_worst: 2, 5, 3, 6, 4, then 1 for any other non-zero
 * code such as ssh's 255 or a signal; else 0; 2 for a bad hostfile or --rsh). With
 * cfg->dry_run it prints each host's command to out and starts nothing. */
int trun_hostfile_launch(const trun_settings *cl, const trun_config *cfg, char **envp, FILE *out);

#endif
