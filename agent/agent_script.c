/* Before anything starts: the workers' interpreter and their script exist (issue 38: a missing script was
 * found only after the workers spawned, exit 1; a python3 without torch was not named). Also the words
 * that name the interpreter in --dry-run and in start-up failure reports. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "agent_int.h"
#include "base/base.h"
#include "worker_env.h"

void trun_agent_describe_python(char **envp, char *out, size_t len) {
  char buf[PATH_MAX], found[PATH_MAX];
  const char *how;
  const char *py = trun_worker_python(envp, buf, sizeof(buf), &how);
  if (strchr(py, '/') == NULL && trun_worker_which(py, envp, found, sizeof(found)) == 0) py = found;
  snprintf(out, len, "%s (%s%s)", py, how,
           strcmp(how, "PYTHON_EXEC") == 0 ? "" : "; set PYTHON_EXEC to choose another");
}

/* Whether python finds top-level module name from the workers' working directory (as "python -m" would:
 * the current directory first on sys.path); nothing is imported. 1 found, 0 not found, -1 unknown (the
 * interpreter did not answer: the workers will say more). */
static int trun__module_found(const char *python, const char *name, char **envp) {
  char top[256];
  snprintf(top, sizeof(top), "%.*s", (int)strcspn(name, "."), name);
  char *argv[] = {(char *)python, "-c",
                  "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)",
                  top, NULL};
  pid_t pid = fork();
  if (pid < 0) {
    trun_debug("fork for the -m check: %s", strerror(errno));
    return -1;
  }
  if (pid == 0) { /* the child: quiet, then the interpreter; 127 when it cannot be started */
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
      (void)dup2(null, 0);
      (void)dup2(null, 1);
      (void)dup2(null, 2);
    }
    execvpe(python, argv, envp);
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) {
      trun_debug("waitpid(%d) for the -m check: %s", (int)pid, strerror(errno));
      return -1;
    }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 1;
  return WIFEXITED(st) && WEXITSTATUS(st) == 3 ? 0 : -1;
}

int trun_agent_check_script(const trun_config *cfg, char **envp, char *err, size_t len) {
  char cwd[PATH_MAX], buf[PATH_MAX], found[PATH_MAX];
  if (getcwd(cwd, sizeof(cwd)) == NULL) snprintf(cwd, sizeof(cwd), "the current directory");
  const char *script = cfg->script;
  struct stat st;
  if (cfg->no_python && !cfg->run_path) { /* the script is the program */
    if (strchr(script, '/') ? access(script, X_OK) == 0 && stat(script, &st) == 0 && !S_ISDIR(st.st_mode)
                            : trun_worker_which(script, envp, found, sizeof(found)) == 0)
      return 0;
    snprintf(
        err, len,
        "the training program '%s' (--no-python) is %s; give its path or put it on PATH; nothing was started",
        script, strchr(script, '/') ? "not an executable file" : "not on PATH");
    return -1;
  }
  const char *how;
  const char *python = trun_worker_python(envp, buf, sizeof(buf), &how);
  if (strchr(python, '/') ? access(python, X_OK) != 0
                          : trun_worker_which(python, envp, found, sizeof(found)) != 0) {
    snprintf(err, len,
             "the workers' interpreter '%s' (%s) is %s; set PYTHON_EXEC to a Python with torch; nothing was "
             "started",
             python, how, strchr(python, '/') ? "not an executable file" : "not on PATH");
    return -1;
  }
  if (cfg->module && !cfg->run_path) {
    if (trun__module_found(python, script, envp) != 0) return 0;
    snprintf(err, len,
             "no module named '%.*s' (-m %s) for the workers' interpreter %s from %s; check the name, "
             "PYTHONPATH or PYTHON_EXEC; nothing was started",
             (int)strcspn(script, "."), script, script, strchr(python, '/') ? python : found, cwd);
    return -1;
  }
  if (stat(script, &st) == 0) return 0;
  const char *why = strerror(errno);
  snprintf(err, len, "the training script '%s'%s%s: %s; nothing was started", script,
           script[0] == '/' ? "" : " in ", script[0] == '/' ? "" : cwd, why);
  return -1;
}

int trun__agent_check_ranks_filter(const trun_config *cfg, int nproc, char *err, size_t len) {
  if (!cfg->ranks_filter_set) return 0;
  int shown = 0, beyond = 0;
  for (int lr = 0; lr < TRUN_MAX_LOCAL; lr++) {
    if (!cfg->ranks_filter[lr]) continue;
    if (lr < nproc)
      shown++;
    else
      beyond++;
  }
  if (shown == 0) {
    snprintf(err, len,
             "--local-ranks-filter names no local rank of this node's %d worker%s (0-%d): the console would "
             "show none of their output; give ranks below %d",
             nproc, nproc == 1 ? "" : "s", nproc - 1, nproc);
    return -1;
  }
  if (beyond)
    trun_warn("--local-ranks-filter names %d local rank%s beyond this node's %d workers (0-%d): %s not shown",
              beyond, beyond == 1 ? "" : "s", nproc, nproc - 1, beyond == 1 ? "it is" : "they are");
  return 0;
}
