/* The Xid watcher (agent/discover/xid_watch.h), a short-lived NVML child (nvml_child.h).
 * Protocol on the pipe, one line each:
 *   "R n"          it listens: n GPUs registered for nvmlEventTypeXidCriticalError
 *   "X gpu xid"    an Xid on GPU gpu (index into the uuids it was given, -1 unknown)
 *   "E reason"     it cannot watch and ends
 * The child waits in nvmlEventSetWait_v2 (5 s slices; NVML_ERROR_TIMEOUT just loops); it dies with the
 * agent (PR_SET_PDEATHSIG) or when the agent stops it. A wait that answers GPU_IS_LOST is reported as
 * Xid 79 on an unknown GPU, once, and the watcher ends. */
#include "xid_watch.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "nvml.h"
#include "nvml_child.h"

#define MAX_GPUS 64

struct trun_xid_watch {
  trun__nvml_child child;
  int n;
  int ready;
  trun_xid_event *ev; /* trun_xid_watch_read's output while it parses */
  int nev, max;
};

typedef struct {
  const char (*uuids)[96];
  int n;
} watch_args;

static void watch(void *arg) {
  const watch_args *a = arg;
  const char *lib;
  void *dl = trun__nvml_child_dlopen(&lib);
  if (dl == NULL) return;
  trun_nvmlInit_v2_fn init = (trun_nvmlInit_v2_fn)dlsym(dl, "nvmlInit_v2");
  trun_nvmlDeviceGetHandleByUUID_fn by_uuid =
      (trun_nvmlDeviceGetHandleByUUID_fn)dlsym(dl, "nvmlDeviceGetHandleByUUID");
  trun_nvmlEventSetCreate_fn create = (trun_nvmlEventSetCreate_fn)dlsym(dl, "nvmlEventSetCreate");
  trun_nvmlDeviceRegisterEvents_fn reg =
      (trun_nvmlDeviceRegisterEvents_fn)dlsym(dl, "nvmlDeviceRegisterEvents");
  trun_nvmlEventSetWait_fn wait = (trun_nvmlEventSetWait_fn)dlsym(dl, "nvmlEventSetWait_v2");
  if (!wait) wait = (trun_nvmlEventSetWait_fn)dlsym(dl, "nvmlEventSetWait"); /* v1: the same fields first */
  if (!init || !by_uuid || !create || !reg || !wait) {
    dprintf(
        3,
        "E NVML %s lacks the event calls (nvmlEventSetCreate, nvmlDeviceRegisterEvents, nvmlEventSetWait)\n",
        lib);
    return;
  }
  trun_nvmlReturn_t rc = init();
  if (rc != TRUN_NVML_SUCCESS) {
    dprintf(3, "E nvmlInit_v2 failed (%d)\n", rc);
    return;
  }
  trun_nvmlEventSet_t set;
  if ((rc = create(&set)) != TRUN_NVML_SUCCESS) {
    dprintf(3, "E nvmlEventSetCreate failed (%d)\n", rc);
    return;
  }
  trun_nvmlDevice_t dev[MAX_GPUS];
  int registered = 0, last_rc = 0;
  for (int i = 0; i < a->n; i++) {
    dev[i] = NULL;
    if (by_uuid(a->uuids[i], &dev[i]) != TRUN_NVML_SUCCESS) continue;
    rc = reg(dev[i], TRUN_NVML_EVENT_TYPE_XID_CRITICAL_ERROR, set);
    if (rc == TRUN_NVML_SUCCESS)
      registered++;
    else
      last_rc = rc;
  }
  if (registered == 0) {
    dprintf(3, "E no GPU here reports Xid events (nvmlDeviceRegisterEvents: %d)\n", last_rc);
    return;
  }
  dprintf(3, "R %d\n", registered);
  for (;;) {
    union {
      trun_nvmlEventData_t d;
      char pad[256]; /* in case a driver writes more */
    } data;
    memset(&data, 0, sizeof(data));
    rc = wait(set, &data.d, 5000);
    if (rc == TRUN_NVML_ERROR_TIMEOUT) continue;
    if (rc == TRUN_NVML_ERROR_GPU_IS_LOST) {
      dprintf(3, "X -1 79\n");
      return;
    }
    if (rc != TRUN_NVML_SUCCESS) {
      dprintf(3, "E nvmlEventSetWait_v2 failed (%d)\n", rc);
      return;
    }
    if (!(data.d.eventType & TRUN_NVML_EVENT_TYPE_XID_CRITICAL_ERROR)) continue;
    int gpu = -1;
    for (int i = 0; i < a->n; i++)
      if (dev[i] && dev[i] == data.d.device) gpu = i;
    if (dprintf(3, "X %d %llu\n", gpu, data.d.eventData) < 0) return; /* the agent is gone */
  }
}

trun_xid_watch *trun_xid_watch_start(const char (*uuids)[96], int n) {
  if (n <= 0) return NULL;
  if (n > MAX_GPUS) n = MAX_GPUS;
  trun_xid_watch *w = calloc(1, sizeof(*w));
  if (w == NULL) return NULL;
  watch_args args = {uuids, n};
  if (trun__nvml_child_start(&w->child, watch, &args) < 0) {
    free(w);
    return NULL;
  }
  w->n = n;
  return w;
}

int trun_xid_watch_fd(const trun_xid_watch *w) { return w ? w->child.fd : -1; }

static void parse(void *arg, char *line) {
  trun_xid_watch *w = arg;
  if (line[0] == 'R') {
    w->ready = 1;
  } else if (line[0] == 'X' && w->nev < w->max) {
    int gpu;
    unsigned long long xid;
    if (sscanf(line + 1, "%d %llu", &gpu, &xid) != 2) return;
    trun_xid_event *e = &w->ev[w->nev++];
    e->gpu = gpu >= 0 && gpu < w->n ? gpu : -1;
    e->xid = xid;
    e->time = trun_wall_s();
  }
}

int trun_xid_watch_read(trun_xid_watch *w, trun_xid_event *ev, int max, int *ready, char *err,
                        size_t errlen) {
  if (w == NULL) return -1;
  w->ev = ev;
  w->max = max;
  w->nev = 0;
  int rc = trun__nvml_child_read(&w->child, "the Xid watcher", parse, w);
  if (ready) *ready = w->ready;
  if (w->nev > 0) return w->nev;
  if (rc < 0) {
    if (err && errlen) snprintf(err, errlen, "%s", w->child.err);
    return -1;
  }
  return 0;
}

void trun_xid_watch_stop(trun_xid_watch *w) {
  if (w == NULL) return;
  trun__nvml_child_stop(&w->child);
  free(w);
}

/* NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors), the Xids a training job meets, in our words. */
static const struct {
  unsigned xid;
  int hardware;
  const char *meaning;
} xids[] = {
    {8, 0, "GPU stopped processing (a channel timed out)"},
    {13, 0, "graphics engine exception (usually the application: an out-of-range access, a bad instruction)"},
    {31, 0, "GPU memory page fault (usually the application: an illegal address)"},
    {32, 0, "invalid or corrupted push buffer stream"},
    {43, 0, "GPU stopped processing (the application's kernel was stopped)"},
    {45, 0, "preemptive cleanup after an earlier error"},
    {48, 1, "double-bit (uncorrectable) ECC error"},
    {61, 0, "internal micro-controller breakpoint or warning"},
    {62, 1, "internal micro-controller halt"},
    {63, 1, "ECC page retirement or row remapping recorded: reset the GPU"},
    {64, 1, "ECC page retirement or row remapping failed"},
    {68, 0, "video processor exception"},
    {69, 0, "graphics engine class error"},
    {74, 1, "NVLink error"},
    {79, 1, "GPU has fallen off the bus"},
    {92, 1, "high single-bit ECC error rate"},
    {94, 1, "contained ECC error"},
    {95, 1, "uncontained ECC error"},
    {109, 0, "context switch timeout"},
    {119, 1, "GSP RPC timeout (the GPU's system processor stopped answering)"},
    {120, 1, "GSP error (the GPU's system processor failed)"},
    {140, 1, "unrecovered ECC error"},
    {154, 1, "the driver's GPU recovery action changed (a reset, a reboot or a drain is needed)"},
    {999, 0, "an Xid NVML could not name"},
};

const char *trun_xid_meaning(unsigned long long xid, int *hardware) {
  for (size_t i = 0; i < sizeof(xids) / sizeof(xids[0]); i++)
    if (xids[i].xid == xid) {
      if (hardware) *hardware = xids[i].hardware;
      return xids[i].meaning;
    }
  if (hardware) *hardware = 0;
  return "an Xid trun does not know (see NVIDIA's Xid catalog)";
}
