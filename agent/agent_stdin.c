/* --watch-stdin (agent_int.h): the agent is tied to the session of the launcher that started it (trun
 * --hostfile over ssh). The launcher's first line on stdin is its hello; later lines name a stop signal to
 * act on as if it had come to the agent; the end of stdin after the hello (the launcher or its ssh session is
 * gone) stops the job as SIGHUP does. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "agent_int.h"

#define TRUN_STDIN_HELLO "trun-watch-stdin 1"

void trun__agent_stdin_stop(agent *a) {
  if (!a->launcher.on) return;
  a->launcher.on = 0;
  uv_poll_stop(&a->launcher.poll);
  uv_close((uv_handle_t *)&a->launcher.poll, NULL);
}

/* One line from the launcher: its hello, or the name of a stop signal to act on. */
static void stdin_line(agent *a, const char *line) {
  static const int stop[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  char name[32];
  if (strcmp(line, TRUN_STDIN_HELLO) == 0) {
    a->launcher.hello = 1;
    trun_debug("--watch-stdin: the launcher's session is on stdin; its end stops the job");
    return;
  }
  for (size_t i = 0; i < sizeof(stop) / sizeof(stop[0]); i++)
    if (strcmp(line, trun_signal_name(stop[i], name, sizeof(name))) == 0) {
      trun_info("--watch-stdin: the launcher sent %s", name);
      trun__agent_handle_signal(a, stop[i]);
      return;
    }
  trun_warn("--watch-stdin: ignoring the line '%.40s' on stdin (want %s, SIGINT, SIGTERM, SIGHUP or SIGQUIT)",
            line, TRUN_STDIN_HELLO);
}

static void on_stdin(uv_poll_t *h, int status, int events) {
  (void)events;
  agent *a = h->data;
  char buf[256];
  ssize_t n = status < 0 ? -1 : read(0, buf, sizeof(buf));
  if (n < 0 && status >= 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    trun__agent_stdin_stop(a);
    if (!a->launcher.hello) {
      trun_warn(
          "--watch-stdin: stdin ended before the launcher's first line: not tied to it (does the --rsh "
          "command pass stdin on? ssh -n does not)");
      return;
    }
    trun_warn("--watch-stdin: stdin ended: the launcher or its ssh session is gone; stopping as on SIGHUP");
    trun__agent_handle_signal(a, SIGHUP);
    return;
  }
  for (ssize_t i = 0; i < n; i++) {
    if (buf[i] == '\n') {
      a->launcher.line[a->launcher.len] = '\0';
      a->launcher.len = 0;
      stdin_line(a, a->launcher.line);
    } else if (a->launcher.len < sizeof(a->launcher.line) - 1) {
      a->launcher.line[a->launcher.len++] = buf[i];
    }
  }
}

void trun__agent_watch_stdin(agent *a) {
  int rc = uv_poll_init(a->loop, &a->launcher.poll, 0);
  if (rc == 0) {
    a->launcher.poll.data = a;
    a->launcher.on = 1;
    rc = uv_poll_start(&a->launcher.poll, UV_READABLE | UV_DISCONNECT, on_stdin);
    if (rc < 0) trun__agent_stdin_stop(a);
  }
  if (rc < 0)
    trun_warn("--watch-stdin: cannot watch stdin (%s; a file or /dev/null?): not tied to the launcher",
              uv_strerror(rc));
}
