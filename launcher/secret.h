/* The agent token kept out of reach of the workers and other local users (docs/store.md, "Who can read the
 * token"): the token's bytes in the process's first environment block and command line, which
 * /proc/<pid>/environ and /proc/<pid>/cmdline show, are overwritten with '*', the program goes on from heap
 * copies, and the process is made non-dumpable so that a same-uid process cannot read its memory. */
#ifndef TRUN_LAUNCHER_SECRET_H
#define TRUN_LAUNCHER_SECRET_H

/* Call first in main, before anything reads argv or the environment. Returns the argument vector to use
 * from here on: argv itself when it holds no token, else a heap copy of it (argv's own strings masked). When
 * TRUN_RDZV_TOKEN, PET_RDZV_CONF's or a command-line word's trun_token= held a token, their environment
 * values are re-set from copies, the originals masked, and the process is made non-dumpable
 * (PR_SET_DUMPABLE 0; core dumps and same-uid ptrace of the agent are refused, the workers are not
 * affected). NULL only when out of memory (said on stderr). */
char **trun_secret_hide(int argc, char **argv);

#endif
