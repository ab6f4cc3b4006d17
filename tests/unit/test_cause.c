/* Unit tests for agent/proc/cause.c, memcg.c and the stderr tail of output.c: the cause named for each
 * stderr tail in tests/fixtures/causes (TRUN_REPO defaults to "."), the order of the evidence (stuck, Xid,
 * OOM kill, stall, stderr, error file, signal, exit), the tail ring, a memory cgroup found through fixture
 * /proc and mountinfo trees (v1 and v2) with its counter and limit, and /proc/<pid>/stat states. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cause.h"
#include "memcg.h"
#include "output.h"
#include "report.h"

static char *slurp_fixture(const char *name) {
  const char *repo = getenv("TRUN_REPO");
  char path[1024];
  snprintf(path, sizeof(path), "%s/tests/fixtures/causes/%s", repo && *repo ? repo : ".", name);
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s (set TRUN_REPO to the repository root)", path);
  static char buf[16384];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_msg(f != NULL, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

static void mkdirs(const char *path) {
  char tmp[1024];
  snprintf(tmp, sizeof(tmp), "%s", path);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(tmp, 0755);
      *p = '/';
    }
  mkdir(tmp, 0755);
}

/* ---- stderr tails ------------------------------------------------------------------------------ */

static const struct {
  const char *file;
  trun_cause_kind kind;
  const char *line_has; /* the line named */
} fixtures[] = {
    {"cuda_oom_torch113.txt", TRUN_CAUSE_CUDA_OOM,
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB"},
    {"cuda_oom_torch26.txt", TRUN_CAUSE_CUDA_OOM,
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"},
    {"nccl_torch113.txt", TRUN_CAUSE_NCCL, "ncclUnhandledCudaError: Call to CUDA function failed."},
    {"nccl_torch26.txt", TRUN_CAUSE_NCCL, "ncclSystemError: System call"},
    {"nccl_timeout_torch26.txt", TRUN_CAUSE_NCCL_TIMEOUT, "Watchdog caught collective operation timeout"},
    {"cuda_error_torch26.txt", TRUN_CAUSE_CUDA_ERROR, "CUDA error: an illegal memory access was encountered"},
    {"import_error.txt", TRUN_CAUSE_STARTUP, "ModuleNotFoundError: No module named 'nonexistent_module_xyz'"},
    {"bad_path.txt", TRUN_CAUSE_STARTUP, "can't open file '/nope/train.py'"},
    {"syntax_error.txt", TRUN_CAUSE_STARTUP, "SyntaxError: invalid syntax"},
    {"plain_error.txt", TRUN_CAUSE_NONE, ""},
};

START_TEST(scan_fixtures) {
  for (size_t i = 0; i < sizeof(fixtures) / sizeof(fixtures[0]); i++) {
    char line[512];
    trun_cause_kind k = trun_cause_scan(slurp_fixture(fixtures[i].file), line, sizeof(line));
    ck_assert_msg(k == fixtures[i].kind, "%s: kind %s, want %s", fixtures[i].file, trun_cause_name(k),
                  trun_cause_name(fixtures[i].kind));
    ck_assert_msg(strstr(line, fixtures[i].line_has) != NULL, "%s: line '%s' lacks '%s'", fixtures[i].file,
                  line, fixtures[i].line_has);
  }
}
END_TEST

START_TEST(scan_edges) {
  char line[16];
  ck_assert_int_eq(trun_cause_scan(NULL, line, sizeof(line)), TRUN_CAUSE_NONE);
  ck_assert_str_eq(line, "");
  ck_assert_int_eq(trun_cause_scan("", line, sizeof(line)), TRUN_CAUSE_NONE);
  ck_assert_int_eq(trun_cause_scan("\n\n\n", line, sizeof(line)), TRUN_CAUSE_NONE);
  /* the last line that says something wins; a long line is cut to the buffer */
  ck_assert_int_eq(trun_cause_scan("NCCL error in: x\nCUDA out of memory. Tried\nbye\n", line, sizeof(line)),
                   TRUN_CAUSE_CUDA_OOM);
  ck_assert_str_eq(line, "CUDA out of mem");
  ck_assert_int_eq(trun_cause_scan("  NCCL error in: x  \r", line, sizeof(line)), TRUN_CAUSE_NCCL);
  ck_assert_str_eq(line, "NCCL error in: ");
  /* no final newline */
  ck_assert_int_eq(trun_cause_scan("ImportError: no", line, sizeof(line)), TRUN_CAUSE_STARTUP);
  ck_assert_str_eq(line, "ImportError: no");
}
END_TEST

START_TEST(names) {
  ck_assert_str_eq(trun_cause_name(TRUN_CAUSE_OOM_KILL), "oom_kill");
  ck_assert_str_eq(trun_cause_name(TRUN_CAUSE_CUDA_OOM), "cuda_oom");
  ck_assert_str_eq(trun_cause_name(TRUN_CAUSE_NCCL), "nccl_error");
  ck_assert_str_eq(trun_cause_name(TRUN_CAUSE_STUCK), "stuck");
  ck_assert_str_eq(trun_cause_name(TRUN_CAUSE__COUNT), "unknown");
  for (int k = 0; k < TRUN_CAUSE__COUNT; k++) ck_assert_ptr_nonnull(trun_cause_name((trun_cause_kind)k));
}
END_TEST

/* ---- the one line and its evidence ------------------------------------------------------------- */

static trun_cause_in base(int code) {
  trun_cause_in in = {.exit_code = code, .oom_kills = -1, .memcg_limit = -1};
  return in;
}

START_TEST(describe_order) {
  char out[1024];
  trun_cause_in in = base(-SIGKILL);
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_SIGNAL);
  ck_assert_str_eq(out, "killed by SIGKILL (signal 9)");
  in.oom_kills = 0;
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_SIGNAL);
  ck_assert_msg(strstr(out, "no OOM kill recorded") != NULL, "%s", out);
  /* the counter went up, but it counts the cgroup's other processes too: not evidence on its own */
  in.oom_kills = 1;
  in.memcg = "/sys/fs/cgroup/memory/job";
  in.memcg_limit = 256 << 20;
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_SIGNAL);
  ck_assert_msg(strstr(out, "the kernel's records name another process") != NULL, "%s", out);
  in.kmsg_err = -EPERM;
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_SIGNAL);
  ck_assert_msg(strstr(out, "kernel log cannot be read (Operation not permitted)") != NULL &&
                    strstr(out, "possibly the OOM killer") != NULL,
                "%s", out);
  in.kmsg_err = 0;
  /* the kernel's record naming it: the OOM killer, with the cgroup and its limit */
  in.oom_kernel = "Memory cgroup out of memory: Killed process 42 (python3) total-vm:1kB, anon-rss:2kB";
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_OOM_KILL);
  ck_assert_msg(strstr(out,
                       "killed by the kernel's OOM killer (out of memory in memory cgroup "
                       "/sys/fs/cgroup/memory/job, limit 256 MiB)") == out,
                "%s", out);
  /* trun's own SIGKILL (its teardown) is never the OOM killer's, whatever the log says */
  in.sent_by_trun = 1;
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_SIGNAL);
  ck_assert_msg(strstr(out, "sent by trun") != NULL, "%s", out);
  /* inside a PID namespace: a record matched by time is only likely, and says so */
  in = base(-SIGKILL);
  in.oom_likely = "Memory cgroup out of memory: Killed process 4242 (python3) total-vm:1kB, anon-rss:2kB";
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_OOM_KILL);
  ck_assert_msg(strstr(out, "likely killed by the kernel's OOM killer") == out &&
                    strstr(out, "PID namespace") != NULL && strstr(out, "Killed process 4242") != NULL,
                "%s", out);
  /* the kernel's record alone is enough, cut before its page detail */
  in = base(-SIGKILL);
  in.oom_kernel =
      "Memory cgroup out of memory: Killed process 42 (python3) total-vm:783408kB, "
      "anon-rss:259156kB, file-rss:116200kB, shmem-rss:0kB";
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_OOM_KILL);
  ck_assert_msg(strstr(out,
                       "; kernel: Memory cgroup out of memory: Killed process 42 (python3) "
                       "total-vm:783408kB, anon-rss:259156kB") != NULL &&
                    !strstr(out, "file-rss"),
                "%s", out);
  /* an OOM count with another death is not an OOM kill */
  in = base(1);
  in.oom_kills = 2;
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_EXIT);
  ck_assert_str_eq(out, "exited with code 1");
  /* stderr says it; else the error file's message */
  in.stderr_tail = slurp_fixture("cuda_oom_torch26.txt");
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_CUDA_OOM);
  ck_assert_msg(strstr(out, "CUDA out of memory on its GPU: [rank0]: torch.OutOfMemoryError") == out, "%s",
                out);
  in.stderr_tail = "nothing\n";
  in.message = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled cuda error";
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_NCCL);
  /* a stall before stderr, an Xid before a stall, stuck before all */
  in.stalled_s = 31;
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_STALL);
  ck_assert_str_eq(out, "stalled for 31 s (no output, no CPU time; --stall-timeout)");
  /* a hung collective (--hang-timeout tore it down: its SIGTERM) before a stall */
  in.hang = "hang (NCCL RAS): behind in communicator 0x1, frozen for 20 s";
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_HANG);
  ck_assert_str_eq(out, in.hang);
  ck_assert_str_eq(trun_cause_name(TRUN_CAUSE_HANG), "hang");
  in.xid = "GPU 3 GPU-abc Xid 79: GPU has fallen off the bus";
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_GPU_XID);
  ck_assert_str_eq(out, in.xid);
  in.stuck = "still in state D (uninterruptible sleep) in __refrigerator 10 s after SIGKILL";
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_STUCK);
  ck_assert_msg(strstr(out, "SIGKILL did not end it: still in state D") == out, "%s", out);
  /* success, other signals, a small buffer */
  in = base(0);
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_NONE);
  ck_assert_str_eq(out, "");
  in = base(-SIGSEGV);
  ck_assert_int_eq(trun_cause_describe(&in, out, sizeof(out)), TRUN_CAUSE_SIGNAL);
  ck_assert_str_eq(out, "killed by SIGSEGV (signal 11)");
  char small[8];
  ck_assert_int_eq(trun_cause_describe(&in, small, sizeof(small)), TRUN_CAUSE_SIGNAL);
  ck_assert_str_eq(small, "killed ");
}
END_TEST

/* ---- the tail ring ----------------------------------------------------------------------------- */

START_TEST(tail_ring) {
  trun_tail *t = calloc(1, sizeof(*t));
  char out[TRUN_TAIL_MAX + 1];
  trun_tail_text(t, out, sizeof(out));
  ck_assert_str_eq(out, "");
  trun_tail_add(t, "a\n", 2);
  trun_tail_add(t, "b\0c\n", 4); /* a NUL does not end the text */
  trun_tail_text(t, out, sizeof(out));
  ck_assert_str_eq(out, "a\nb c\n");
  /* wrap around many times: the last whole lines stay, the cut one goes */
  char line[100];
  for (int i = 0; i < 1000; i++) {
    int n = snprintf(line, sizeof(line), "line %04d of the worker's stderr\n", i);
    trun_tail_add(t, line, (size_t)n);
  }
  trun_tail_text(t, out, sizeof(out));
  ck_assert_msg(strncmp(out, "line ", 5) == 0, "starts mid-line: %.40s", out);
  ck_assert_ptr_nonnull(strstr(out, "line 0999 of the worker's stderr\n"));
  ck_assert_ptr_null(strstr(out, "line 0800 "));
  /* one huge write keeps its end */
  char *big = malloc(3 * TRUN_TAIL_MAX);
  memset(big, 'x', 3 * TRUN_TAIL_MAX);
  memcpy(big + 3 * TRUN_TAIL_MAX - 4, "END\n", 4);
  trun_tail_add(t, big, 3 * TRUN_TAIL_MAX);
  trun_tail_text(t, out, 16); /* the only line, cut: kept */
  ck_assert_str_eq(out, "xxxxxxxxxxxEND\n");
  free(big);
  /* from a file */
  char path[] = "/tmp/trun-test-cause-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  write_file(path, "first\nImportError: cannot import name 'x'\n");
  memset(t, 0, sizeof(*t));
  ck_assert_int_eq(trun_tail_from_file(t, path), 0);
  trun_tail_text(t, out, sizeof(out));
  ck_assert_str_eq(out, "first\nImportError: cannot import name 'x'\n");
  unlink(path);
  ck_assert_int_eq(trun_tail_from_file(t, path), -ENOENT);
  free(t);
}
END_TEST

/* ---- memory cgroups ---------------------------------------------------------------------------- */

static char root[64];

static void make_root(void) {
  snprintf(root, sizeof(root), "/tmp/trun-test-memcg-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(root));
}

static void rm_root(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
  ck_assert_int_eq(system(cmd), 0);
}

static void put(const char *rel, const char *text) {
  char p[1024];
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  char dir[1024];
  snprintf(dir, sizeof(dir), "%s", p);
  *strrchr(dir, '/') = '\0';
  mkdirs(dir);
  write_file(p, text);
}

START_TEST(memcg_v1) {
  make_root();
  put("proc/77/cgroup", "9:name=systemd:/\n4:memory:/pod/job\n1:cpu,cpuacct:/\n0::/\n");
  put("proc/77/mountinfo",
      "25 30 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
      "31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
      "32 25 0:28 /pod /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
      "33 25 0:29 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
  put("sys/fs/cgroup/memory/job/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  put("sys/fs/cgroup/memory/job/memory.limit_in_bytes", "268435456\n");
  trun_memcg m;
  ck_assert_int_eq(trun_memcg_of(root, 77, &m), 0);
  char want[256];
  snprintf(want, sizeof(want), "%s/sys/fs/cgroup/memory/job", root);
  ck_assert_str_eq(m.dir, want);
  ck_assert_int_eq(m.v2, 0);
  long long n = -1;
  ck_assert_int_eq(trun_memcg_oom_kills(&m, &n), 0);
  ck_assert_int_eq(n, 3);
  ck_assert_int_eq(trun_memcg_limit(&m), 268435456);
  put("sys/fs/cgroup/memory/job/memory.limit_in_bytes", "9223372036854771712\n");
  ck_assert_int_eq(trun_memcg_limit(&m), -1);
  put("sys/fs/cgroup/memory/job/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n");
  ck_assert_int_eq(trun_memcg_oom_kills(&m, &n), -EBADMSG);
  /* no memory controller at all */
  put("proc/78/cgroup", "1:cpu:/\n");
  put("proc/78/mountinfo", "31 25 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n");
  ck_assert_int_eq(trun_memcg_of(root, 78, &m), -ENOENT);
  ck_assert_int_eq(trun_memcg_of(root, 79, &m), -ENOENT); /* no such process */
  rm_root();
}
END_TEST

START_TEST(memcg_v2) {
  make_root();
  put("proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  put("proc/self/mountinfo", "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n");
  /* the memory controller is off for this cgroup (no memory.events): nothing to read */
  put("sys/fs/cgroup/kubepods/pod1/ctr/cgroup.procs", "1\n");
  trun_memcg m;
  ck_assert_int_eq(trun_memcg_of(root, 0, &m), -ENOENT);
  put("sys/fs/cgroup/kubepods/pod1/ctr/memory.events",
      "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n");
  put("sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "max\n");
  ck_assert_int_eq(trun_memcg_of(root, 0, &m), 0);
  ck_assert_int_eq(m.v2, 1);
  long long n = -1;
  ck_assert_int_eq(trun_memcg_oom_kills(&m, &n), 0);
  ck_assert_int_eq(n, 1); /* oom_kill, not oom nor oom_group_kill */
  ck_assert_int_eq(trun_memcg_limit(&m), -1);
  put("sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "1073741824\n");
  ck_assert_int_eq(trun_memcg_limit(&m), 1073741824);
  /* the host's cgroup namespace with the container's cgroup mounted as /sys/fs/cgroup */
  put("proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  put("proc/self/mountinfo", "30 25 0:26 /kubepods/pod1/ctr /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  put("sys/fs/cgroup/memory.events", "oom_kill 5\n");
  ck_assert_int_eq(trun_memcg_of(root, 0, &m), 0);
  ck_assert_int_eq(trun_memcg_oom_kills(&m, &n), 0);
  ck_assert_int_eq(n, 5);
  rm_root();
}
END_TEST

/* The kernel log's records: only the kernel's own (facility 0) OOM kills are believed. A regular file of
 * one record reads like /dev/kmsg (one record per read). */
START_TEST(kmsg_facility) {
  make_root();
  char p[1024], text[512];
  snprintf(p, sizeof(p), "%s/kmsg", root);
  trun_kmsg_oom r[4];
  /* the kernel's: "3" = kern.err */
  write_file(p, "3,812,5000000,-;Memory cgroup out of memory: Killed process 42 (python3) total-vm:1kB\n");
  ck_assert_int_eq(trun_kmsg_oom_kills(p, 0, r, 4), 1);
  ck_assert_int_eq(r[0].pid, 42);
  ck_assert_int_eq((long long)r[0].us, 5000000);
  ck_assert_int_eq(trun_kmsg_oom_kill(p, 42, 0, text, sizeof(text)), 1);
  ck_assert_int_eq(trun_kmsg_oom_kill(p, 43, 0, text, sizeof(text)), 0);
  ck_assert_int_eq(trun_kmsg_oom_kill(p, 42, 5000001, text, sizeof(text)), 0); /* before it started */
  /* a process's write to /dev/kmsg: "<3>..." still gets facility 1 (user): 11 = user.err, 12 = user.warn */
  write_file(p, "11,813,5000001,-;Memory cgroup out of memory: Killed process 42 (python3) total-vm:1kB\n");
  ck_assert_int_eq(trun_kmsg_oom_kills(p, 0, r, 4), 0);
  ck_assert_int_eq(trun_kmsg_oom_kill(p, 42, 0, text, sizeof(text)), 0);
  write_file(p, "12,814,5000002,-;Killed process 42 (python3)\n");
  ck_assert_int_eq(trun_kmsg_oom_kill(p, 42, 0, text, sizeof(text)), 0);
  /* no prefix, another record */
  write_file(p, "Killed process 42 (python3)\n");
  ck_assert_int_eq(trun_kmsg_oom_kills(p, 0, r, 4), 0);
  write_file(p, "6,815,5000003,-;oom-kill:constraint=CONSTRAINT_MEMCG,task=python3,pid=42,uid=0\n");
  ck_assert_int_eq(trun_kmsg_oom_kills(p, 0, r, 4), 0);
  ck_assert_int_eq(trun_kmsg_oom_kills("/nonexistent/kmsg", 0, r, 4), -ENOENT);
  rm_root();
}
END_TEST

START_TEST(memcg_this_process) {
  /* the real system: whatever it has, the call answers without crashing, and a found cgroup reads */
  trun_memcg m;
  int rc = trun_memcg_of("", 0, &m);
  ck_assert(rc == 0 || rc == -ENOENT);
  long long n;
  if (rc == 0) ck_assert_int_eq(trun_memcg_oom_kills(&m, &n), 0);
}
END_TEST

/* ---- /proc/<pid>/stat ---------------------------------------------------------------------------- */

START_TEST(proc_state) {
  make_root();
  put("41/stat", "41 (python3 (a) b) D 1 41 41 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 100 1000 10\n");
  put("41/wchan", "__refrigerator");
  char st = 0, wchan[64];
  ck_assert_int_eq(trun_proc_state(root, 41, &st, wchan, sizeof(wchan)), 0);
  ck_assert_int_eq(st, 'D');
  ck_assert_str_eq(wchan, "__refrigerator");
  put("42/stat", "42 (sleep) S 1 42 42 0 -1\n");
  put("42/wchan", "0");
  ck_assert_int_eq(trun_proc_state(root, 42, &st, wchan, sizeof(wchan)), 0);
  ck_assert_int_eq(st, 'S');
  ck_assert_str_eq(wchan, "");
  put("43/stat", "43 (broken");
  ck_assert_int_eq(trun_proc_state(root, 43, &st, wchan, sizeof(wchan)), -EBADMSG);
  ck_assert_int_eq(trun_proc_state(root, 44, &st, wchan, sizeof(wchan)), -ENOENT);
  rm_root();
  /* this process runs */
  ck_assert_int_eq(trun_proc_state("/proc", getpid(), &st, wchan, sizeof(wchan)), 0);
  ck_assert_int_eq(st, 'R');
}
END_TEST

/* ---- the report carries the cause ---------------------------------------------------------------- */

/* faulthandler's dump (PYTHONFAULTHANDLER=1, SIGABRT; captured from CPython 3.11) after other stderr lines:
 * the main thread's frames (the block ending in <module>), innermost first, directories left out. */
START_TEST(pystack) {
  const char *text =
      "rank 1 attempt 0: pid 2343 asleep\n"
      "Fatal Python error: Aborted\n"
      "\n"
      "Thread 0x00007fac92e326c0 (most recent call first):\n"
      "  File \"/tmp/ras_fh.py\", line 3 in worker\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 975 in run\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 1038 in _bootstrap_inner\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 995 in _bootstrap\n"
      "\n"
      "Current thread 0x00007fac930ed2c0 (most recent call first):\n"
      "  File \"/tmp/ras_fh.py\", line 6 in inner\n"
      "  File \"/tmp/ras_fh.py\", line 8 in outer\n"
      "  File \"/tmp/ras_fh.py\", line 9 in <module>\n"
      "\n"
      "Extension modules: torch._C (total: 1)\n";
  char out[512];
  ck_assert_int_eq(trun_cause_pystack(text, 8, out, sizeof(out)), 3);
  ck_assert_str_eq(out, "ras_fh.py:6 in inner <- ras_fh.py:8 in outer <- ras_fh.py:9 in <module>");
  ck_assert_int_eq(trun_cause_pystack(text, 2, out, sizeof(out)), 2);
  ck_assert_str_eq(out, "ras_fh.py:6 in inner <- ras_fh.py:8 in outer");
  /* The signal reached another thread: the main thread is still the one ending in <module>. */
  const char *other =
      "Fatal Python error: Aborted\n\n"
      "Current thread 0x1 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 975 in run\n\n"
      "Thread 0x2 (most recent call first):\n"
      "  File \"/w/train.py\", line 40 in <module>\n";
  ck_assert_int_eq(trun_cause_pystack(other, 8, out, sizeof(out)), 1);
  ck_assert_str_eq(out, "train.py:40 in <module>");
  /* No dump, a dump without frames, frames without a dump, a cut line, a small buffer: nothing invented. */
  ck_assert_int_eq(
      trun_cause_pystack("Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n", 8, out,
                         sizeof(out)),
      0);
  ck_assert_str_eq(out, "");
  ck_assert_int_eq(trun_cause_pystack("Fatal Python error: Aborted\n\n", 8, out, sizeof(out)), 0);
  ck_assert_int_eq(
      trun_cause_pystack(
          "Fatal Python error: Aborted\nThread 0x1 (most recent call first):\n  File \"a.py\", line", 8, out,
          sizeof(out)),
      0);
  ck_assert_int_eq(trun_cause_pystack(text, 8, out, 20), 0);
  ck_assert_str_eq(out, "");
  ck_assert_int_eq(trun_cause_pystack(NULL, 8, out, sizeof(out)), 0);
}
END_TEST

START_TEST(report_cause) {
  trun_failure f = {.global_rank = 1, .local_rank = 1, .pid = 99, .exit_code = -9, .timestamp = 1.0e9};
  f.host = strdup("h");
  f.cause = strdup("killed by the kernel's OOM killer (out of memory)");
  f.cause_kind = strdup("oom_kill");
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  trun_report_print(m, "train.py", &f, 1);
  fclose(m);
  ck_assert_msg(strstr(buf,
                       "  exitcode  : -9 (pid: 99)\n  cause     : killed by the kernel's OOM killer "
                       "(out of memory)\n  error_file: <N/A>\n") != NULL,
                "%s", buf);
  free(buf);
  /* through the store's JSON and back */
  char *json = trun_failure_to_json(&f);
  trun_failure g;
  ck_assert_int_eq(trun_failure_from_json(json, strlen(json), &g), 0);
  ck_assert_str_eq(g.cause, f.cause);
  ck_assert_str_eq(g.cause_kind, "oom_kill");
  trun_failure_free(&g);
  free(json);
  /* an older agent's record has none */
  const char *old =
      "{\"global_rank\":0,\"local_rank\":0,\"group_rank\":0,\"pid\":1,\"exit_code\":1,\"timestamp\":1}";
  ck_assert_int_eq(trun_failure_from_json(old, strlen(old), &g), 0);
  ck_assert_ptr_null(g.cause);
  trun_failure_free(&g);
  const char *bad =
      "{\"global_rank\":0,\"local_rank\":0,\"group_rank\":0,\"pid\":1,\"exit_code\":1,\"timestamp\":1,"
      "\"cause\":3}";
  ck_assert_int_eq(trun_failure_from_json(bad, strlen(bad), &g), -EBADMSG);
  trun_failure_free(&f);
}
END_TEST

static Suite *cause_suite(void) {
  Suite *s = suite_create("cause");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, scan_fixtures);
  tcase_add_test(tc, scan_edges);
  tcase_add_test(tc, names);
  tcase_add_test(tc, describe_order);
  tcase_add_test(tc, tail_ring);
  tcase_add_test(tc, memcg_v1);
  tcase_add_test(tc, memcg_v2);
  tcase_add_test(tc, kmsg_facility);
  tcase_add_test(tc, memcg_this_process);
  tcase_add_test(tc, proc_state);
  tcase_add_test(tc, report_cause);
  tcase_add_test(tc, pystack);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(cause_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
