/* The per-boot GPU cache (agent/discover/discover_cache.c) through trun_discover_gpus_flags, with the fake
 * NVML (build/libnvidia-ml-fake.so; TRUN_FAKE_NVML_INIT_LOG counts the nvmlInit_v2 calls) and a fake /proc
 * (TRUN_PROC_ROOT: boot id, driver version and parameters, /proc/driver/nvidia/gpus) made from the p4d
 * fixture: written on a miss, read without NVML on a hit and equal to what NVML gives under every
 * CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES form, and discovered again (never an error) when stale (boot,
 * driver, GPUs), damaged, edited, not the user's 0600 file, a link, or holding what discovery never writes.
 */
#include <check.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "discover.h"
#include "discover_internal.h"

#define ENV(...) ((char *[]){__VA_ARGS__, NULL})
#define NOENV ((char *[]){NULL})

static char dir[64];
static char cache[PATH_MAX];
static char initlog[PATH_MAX];
static trun_node a, b;
static char err[1024], err2[1024];

static void writef(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_msg(f != NULL, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

static void sh(const char *fmt, const char *arg) {
  char cmd[PATH_MAX * 2];
  snprintf(cmd, sizeof(cmd), fmt, arg, arg);
  ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
}

/* nvmlInit_v2 calls so far. */
static int inits(void) {
  FILE *f = fopen(initlog, "r");
  if (f == NULL) return 0;
  int n = 0, c;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

/* The p4d fixture's 8 GPUs in the fake NVML and the fake /proc; the cache directory empty. */
static void setup(void) {
  const char *repo = getenv("TRUN_REPO"), *build = getenv("TRUN_BUILD");
  char p[PATH_MAX], real[PATH_MAX];
  snprintf(dir, sizeof(dir), "/tmp/trun-gpucache-XXXXXX");
  ck_assert(mkdtemp(dir) != NULL);
  snprintf(p, sizeof(p), "%s/libnvidia-ml-fake.so", build && *build ? build : "build");
  ck_assert_msg(realpath(p, real) != NULL, "%s missing: run make", p);
  setenv("TRUN_NVML_LIBRARY", real, 1);
  setenv("TRUN_CUDART_LIBRARY", "/nonexistent/libcudart.so", 1);
  snprintf(p, sizeof(p), "%s/tests/fixtures/nodes/p4d.24xlarge/nvml.json", repo && *repo ? repo : ".");
  ck_assert_msg(realpath(p, real) != NULL, "%s missing", p);
  setenv("TRUN_FAKE_NVML_TOPO", real, 1);
  snprintf(p, sizeof(p), "%s/tests/fixtures/nodes/p4d.24xlarge/sys", repo && *repo ? repo : ".");
  ck_assert_msg(realpath(p, real) != NULL, "%s missing", p);
  setenv("TRUN_SYSFS_ROOT", real, 1);
  snprintf(initlog, sizeof(initlog), "%s/init.log", dir);
  setenv("TRUN_FAKE_NVML_INIT_LOG", initlog, 1);
  snprintf(p, sizeof(p), "%s/run", dir);
  ck_assert(mkdir(p, 0700) == 0);
  setenv("XDG_RUNTIME_DIR", p, 1);
  snprintf(cache, sizeof(cache), "%s/run/trun/gpus.cache", dir);
  setenv("TRUN_PROC_ROOT", dir, 1);
  unsetenv("TRUN_BOOT_ID");
  /* /proc: what the driver shows, from the fixture's GPUs */
  static const char *const gpus[8][2] = {{"0000:10:1c.0", "GPU-f9caa9b0-5ce1-5b37-9805-60c0fdd20ebb"},
                                         {"0000:10:1d.0", "GPU-1bf48cdd-68a1-55ae-bc60-0c514bd7d185"},
                                         {"0000:20:1c.0", "GPU-6c554657-6535-595b-96dc-81622c4f8797"},
                                         {"0000:20:1d.0", "GPU-f747e90c-e5fd-5366-92c9-a92d159a923a"},
                                         {"0000:90:1c.0", "GPU-1d98bcf1-3311-50d2-beed-280966be280f"},
                                         {"0000:90:1d.0", "GPU-76d376f4-177d-5809-928e-dbbf995754b5"},
                                         {"0000:a0:1c.0", "GPU-550e0f42-1d9e-5b58-80ac-a372779b3b84"},
                                         {"0000:a0:1d.0", "GPU-3dc96847-4a9d-5bf6-80f7-186233bfd709"}};
  sh("mkdir -p %s/sys/kernel/random %s/driver/nvidia/gpus", dir);
  snprintf(p, sizeof(p), "%s/sys/kernel/random/boot_id", dir);
  writef(p, "0c9e7f5a-1111-4222-8333-944455556666\n");
  snprintf(p, sizeof(p), "%s/driver/nvidia/version", dir);
  writef(p, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  (fake)\nGCC version:  gcc 12\n");
  snprintf(p, sizeof(p), "%s/driver/nvidia/params", dir);
  writef(p, "ResmanDebugLevel: 4294967295\nRegistryDwords: \"\"\n");
  for (int i = 0; i < 8; i++) {
    char d[PATH_MAX], info[512];
    snprintf(d, sizeof(d), "%s/driver/nvidia/gpus/%s", dir, gpus[i][0]);
    ck_assert(mkdir(d, 0755) == 0);
    snprintf(
        info, sizeof(info),
        "Model: \t\t NVIDIA A100-SXM4-40GB\nIRQ:   \t\t 0\nGPU UUID: \t %s\nVideo BIOS: \t ??.??.??.??.??\n"
        "Bus Type: \t PCIe\nBus Location: \t %s\nDevice Minor: \t %d\n",
        gpus[i][1], gpus[i][0], i);
    snprintf(d, sizeof(d), "%s/driver/nvidia/gpus/%s/information", dir, gpus[i][0]);
    writef(d, info);
  }
  unsetenv("CUDA_VISIBLE_DEVICES");
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
}

static void teardown(void) { sh("rm -rf %s", dir); }

static int cached(trun_node *n, char **envp, char *e) {
  return trun_discover_gpus_flags(n, envp, TRUN_GPU_NO_AFFINITY | TRUN_GPU_CACHE, e, sizeof(err));
}

/* a (cache) and b (NVML) say the same of the workers' GPUs. */
static void assert_same(void) {
  ck_assert_int_eq(a.ngpu, b.ngpu);
  ck_assert_int_eq(a.gpus_listed, b.gpus_listed);
  ck_assert_str_eq(a.gpu_source, b.gpu_source);
  for (int i = 0; i < a.ngpu; i++) {
    ck_assert_str_eq(a.gpus[i].uuid, b.gpus[i].uuid);
    ck_assert_str_eq(a.gpus[i].name, b.gpus[i].name);
    ck_assert_str_eq(a.gpus[i].pci_bus_id, b.gpus[i].pci_bus_id);
    ck_assert_int_eq(a.gpus[i].index, b.gpus[i].index);
    ck_assert_int_eq(a.gpus[i].visible_index, b.gpus[i].visible_index);
    ck_assert_int_eq(a.gpus[i].numa_node, b.gpus[i].numa_node);
    ck_assert_str_eq(a.gpus[i].cpu_affinity, b.gpus[i].cpu_affinity);
    ck_assert(a.gpus[i].memory_bytes == b.gpus[i].memory_bytes);
  }
  ck_assert(memcmp(a.links, b.links, sizeof(a.links)) == 0);
  ck_assert(memcmp(a.p2p, b.p2p, sizeof(a.p2p)) == 0);
}

/* A miss that discovers through NVML and writes the cache again; the note says why. */
static void assert_miss(const char *why) {
  int before = inits();
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  ck_assert_int_eq(a.ngpu, 8);
  ck_assert_int_eq(inits(), before + 1);
  ck_assert_msg(strstr(a.gpu_cache_note, why) != NULL, "note '%s' lacks '%s'", a.gpu_cache_note, why);
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_STORED);
  ck_assert_int_eq(cached(&a, NOENV, err), 0); /* and the next one is a hit */
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_HIT);
  ck_assert_int_eq(inits(), before + 1);
}

START_TEST(miss_then_hit_without_nvml) {
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_STORED);
  ck_assert_int_eq(inits(), 1);
  struct stat st;
  ck_assert_int_eq(lstat(cache, &st), 0);
  ck_assert(S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600 && st.st_uid == geteuid());
  char d[PATH_MAX];
  snprintf(d, sizeof(d), "%s/run/trun", dir);
  ck_assert_int_eq(lstat(d, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0700);
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_HIT);
  ck_assert_int_eq(inits(), 1); /* no NVML at all */
  ck_assert_int_eq(trun_discover_gpus_flags(&b, NOENV, TRUN_GPU_NO_AFFINITY, err2, sizeof(err2)), 0);
  ck_assert_int_eq(b.gpu_cache, TRUN_GPU_CACHE_NONE);
  assert_same();
  ck_assert_str_eq(a.links[0][1], "NV12");
}
END_TEST

/* Every visibility form gives from the cache what NVML gives: GPUs, order, links, the error and its rc. */
START_TEST(visibility_forms_match_nvml) {
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  char *envs[][3] = {{"CUDA_VISIBLE_DEVICES=2,5", NULL, NULL},
                     {"CUDA_VISIBLE_DEVICES=GPU-f747,GPU-1d98bcf1-3311-50d2-beed-280966be280f", NULL, NULL},
                     {"CUDA_VISIBLE_DEVICES=3,1,x,0", NULL, NULL},
                     {"CUDA_VISIBLE_DEVICES=1,1", NULL, NULL},
                     {"CUDA_VISIBLE_DEVICES=", NULL, NULL},
                     {"CUDA_VISIBLE_DEVICES=GPU-", NULL, NULL},
                     {"NVIDIA_VISIBLE_DEVICES=GPU-6c554657-6535-595b-96dc-81622c4f8797,"
                      "GPU-3dc96847-4a9d-5bf6-80f7-186233bfd709",
                      "CUDA_VISIBLE_DEVICES=1", NULL},
                     {"NVIDIA_VISIBLE_DEVICES=none", NULL, NULL}};
  for (size_t k = 0; k < sizeof(envs) / sizeof(envs[0]); k++) {
    int ra = cached(&a, envs[k], err);
    ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_HIT);
    int rb = trun_discover_gpus_flags(&b, envs[k], TRUN_GPU_NO_AFFINITY, err2, sizeof(err2));
    ck_assert_int_eq(ra, rb);
    ck_assert_str_eq(err, err2);
    assert_same();
  }
  ck_assert_int_eq(inits(), 1 + (int)(sizeof(envs) / sizeof(envs[0])));
}
END_TEST

START_TEST(mig_entry_asks_nvml) {
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  int before = inits();
  cached(&a, ENV("CUDA_VISIBLE_DEVICES=MIG-5c7d9e1a-0000-4000-8000-000000000001"), err);
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_UNUSED);
  ck_assert_int_eq(inits(), before + 1);
}
END_TEST

/* Flips one byte of the file at offset off. */
static void flip(long off) {
  int fd = open(cache, O_RDWR);
  ck_assert(fd >= 0);
  unsigned char c;
  ck_assert_int_eq(pread(fd, &c, 1, off), 1);
  c ^= 0x20;
  ck_assert_int_eq(pwrite(fd, &c, 1, off), 1);
  close(fd);
}

START_TEST(damaged_or_edited_file) {
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  struct stat st;
  ck_assert_int_eq(stat(cache, &st), 0);
  flip(st.st_size - 20000); /* inside the links */
  assert_miss("checksum");
  flip(3); /* the magic */
  assert_miss("not a GPU cache");
  ck_assert_int_eq(truncate(cache, st.st_size - 1), 0);
  assert_miss("bytes");
  writef(cache, "");
  assert_miss("bytes");
}
END_TEST

START_TEST(stale_key) {
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  char p[PATH_MAX];
  snprintf(p, sizeof(p), "%s/sys/kernel/random/boot_id", dir);
  writef(p, "0c9e7f5a-1111-4222-8333-000000000000\n"); /* a reboot */
  assert_miss("another boot");
  snprintf(p, sizeof(p), "%s/driver/nvidia/version", dir);
  writef(p, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  (fake)\n"); /* a new driver */
  assert_miss("another boot, driver");
  snprintf(p, sizeof(p), "%s/driver/nvidia/params", dir);
  writef(p, "RegistryDwords: \"RMForceP2PType=1\"\n"); /* reloaded with other registry keys */
  assert_miss("another boot, driver");
  setenv("TRUN_BOOT_ID", "boot-of-a-test-node", 1);
  assert_miss("another boot, driver");
  unsetenv("TRUN_BOOT_ID");
}
END_TEST

/* /proc lists a GPU NVML does not: never written; one GPU fewer in /proc: another key. */
START_TEST(device_set) {
  sh("mkdir -p %s/driver/nvidia/gpus/0000:b0:1c.0 && printf 'GPU UUID: \\t "
     "GPU-0000aaaa-0000-4000-8000-000000000009\\n' "
     ">%s/driver/nvidia/gpus/0000:b0:1c.0/information",
     dir);
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  ck_assert_int_eq(a.ngpu, 8);
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_UNUSED);
  ck_assert_msg(strstr(a.gpu_cache_note, "other GPUs") != NULL, "%s", a.gpu_cache_note);
  ck_assert_int_eq(access(cache, F_OK), -1);
  sh("rm -rf %s/driver/nvidia/gpus/0000:b0:1c.0", dir);
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_STORED);
  sh("rm -rf %s/driver/nvidia/gpus/0000:a0:1d.0", dir);
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_UNUSED); /* NVML's 8 are not /proc's 7 */
  ck_assert_int_eq(inits(), 3);
  sh("rm -rf %s/driver", dir); /* no NVIDIA driver in /proc: no cache, NVML */
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_UNUSED);
  ck_assert_msg(strstr(a.gpu_cache_note, "driver") != NULL, "%s", a.gpu_cache_note);
  ck_assert_int_eq(a.ngpu, 8);
}
END_TEST

START_TEST(not_trusted_files) {
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  ck_assert_int_eq(chmod(cache, 0644), 0);
  assert_miss("not trusted");
  struct stat st;
  ck_assert_int_eq(stat(cache, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0600); /* written again as 0600 */
  /* a link to a valid cache elsewhere is not followed */
  char other[PATH_MAX], cmd[PATH_MAX * 5];
  snprintf(other, sizeof(other), "%s/elsewhere", dir);
  snprintf(cmd, sizeof(cmd), "cp -p %s %s && ln -sf %s %s", cache, other, other, cache);
  ck_assert_int_eq(system(cmd), 0);
  assert_miss("Too many levels of symbolic links");
  /* a cache directory others may write: not used at all */
  char d[PATH_MAX];
  snprintf(d, sizeof(d), "%s/run/trun", dir);
  ck_assert_int_eq(chmod(d, 0777), 0);
  int before = inits();
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_UNUSED);
  ck_assert_msg(strstr(a.gpu_cache_note, "closed to others") != NULL, "%s", a.gpu_cache_note);
  ck_assert_int_eq(inits(), before + 1);
  ck_assert_int_eq(chmod(d, 0700), 0);
}
END_TEST

/* A file with a right checksum and key but content discovery never writes (an edit that recomputed the
 * hash): rejected by what it holds. */
START_TEST(valid_sum_bad_content) {
  static char key[TRUN__GPU_CACHE_KEY];
  char why[256];
  ck_assert_int_eq(trun__gpu_cache_key(key, sizeof(key), why, sizeof(why)), 0);
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  static trun__gpu_list l, got;
  ck_assert_int_eq(trun__gpu_cache_load(key, 0, &l, why, sizeof(why)), 1);
  trun__gpu_list bad = l;
  snprintf(bad.links[0][1], sizeof(bad.links[0][1]), "NVx");
  ck_assert_int_eq(trun__gpu_cache_store(key, &bad, why, sizeof(why)), 0);
  ck_assert_int_eq(trun__gpu_cache_load(key, 0, &got, why, sizeof(why)), 0);
  ck_assert_msg(strstr(why, "GPUs 0 and 1") != NULL, "%s", why);
  bad = l;
  bad.count = TRUN_MAX_GPUS + 1;
  ck_assert_int_eq(trun__gpu_cache_store(key, &bad, why, sizeof(why)), 0);
  ck_assert_int_eq(trun__gpu_cache_load(key, 0, &got, why, sizeof(why)), 0);
  bad = l;
  memset(bad.gpus[3].uuid, 'A', sizeof(bad.gpus[3].uuid)); /* no end */
  ck_assert_int_eq(trun__gpu_cache_store(key, &bad, why, sizeof(why)), 0);
  ck_assert_int_eq(trun__gpu_cache_load(key, 0, &got, why, sizeof(why)), 0);
  ck_assert_msg(strstr(why, "GPU 3") != NULL, "%s", why);
  bad = l;
  snprintf(bad.gpus[2].uuid, sizeof(bad.gpus[2].uuid), "GPU-00000000-0000-4000-8000-000000000000");
  ck_assert_int_eq(trun__gpu_cache_store(key, &bad, why, sizeof(why)), 0);
  ck_assert_int_eq(trun__gpu_cache_load(key, 0, &got, why, sizeof(why)), 0); /* a GPU the key does not name */
  ck_assert_int_eq(trun__gpu_cache_store(key, &l, why, sizeof(why)), 0);
  ck_assert_int_eq(trun__gpu_cache_load(key, 0, &got, why, sizeof(why)), 1);
  /* without the CPU affinity: a miss for --numa-binding, which needs it; a hit once it was read */
  ck_assert_int_eq(trun__gpu_cache_load(key, 1, &got, why, sizeof(why)), 0);
  ck_assert_msg(strstr(why, "affinity") != NULL, "%s", why);
  int before = inits();
  ck_assert_int_eq(trun_discover_gpus_flags(&a, NOENV, TRUN_GPU_CACHE, err, sizeof(err)), 0);
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_STORED);
  ck_assert_int_eq(trun_discover_gpus_flags(&a, NOENV, TRUN_GPU_CACHE, err, sizeof(err)), 0);
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_HIT);
  ck_assert_int_eq(inits(), before + 1);
  ck_assert_str_eq(a.gpus[0].cpu_affinity, "0-23,48-71");
}
END_TEST

/* With the health facts asked: a hit reads none (probed 0); TRUN_GPU_REFRESH always asks NVML and rewrites.
 */
START_TEST(health_and_refresh) {
  ck_assert_int_eq(trun_discover_gpus_flags(&a, NOENV, TRUN_GPU_CACHE | TRUN_GPU_HEALTH, err, sizeof(err)),
                   0);
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_STORED);
  ck_assert_int_eq(a.gpus[0].health.probed, 1);
  ck_assert_int_eq(trun_discover_gpus_flags(&a, NOENV, TRUN_GPU_CACHE | TRUN_GPU_HEALTH, err, sizeof(err)),
                   0);
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_HIT);
  ck_assert_int_eq(a.gpus[0].health.probed, 0);
  ck_assert_int_eq(inits(), 1);
  ck_assert_int_eq(trun_discover_gpus_flags(&a, NOENV, TRUN_GPU_CACHE | TRUN_GPU_HEALTH | TRUN_GPU_REFRESH,
                                            err, sizeof(err)),
                   0);
  ck_assert_int_eq(a.gpu_cache, TRUN_GPU_CACHE_STORED);
  ck_assert_int_eq(a.gpus[0].health.probed, 1);
  ck_assert_int_eq(inits(), 2);
}
END_TEST

/* The background probe: the facts come back through the pipe without blocking the caller. */
START_TEST(probe_in_background) {
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  trun_gpu_probe *p = trun_gpu_probe_start(&a, ENV("CUDA_VISIBLE_DEVICES=6,7"));
  ck_assert(p != NULL);
  int rc = 99, got = 0;
  for (int i = 0; i < 1000 && (got = trun_gpu_probe_poll(p, &b, &rc, err, sizeof(err))) == 0; i++)
    usleep(10000);
  ck_assert_int_eq(got, 1);
  ck_assert_int_eq(rc, 0);
  ck_assert_int_eq(b.ngpu, 2);
  ck_assert_int_eq(b.gpus[0].index, 6);
  ck_assert_int_eq(b.gpus[1].health.probed, 1);
  trun_gpu_probe_free(p);
  /* one that still runs is stopped */
  setenv("TRUN_FAKE_NVML_INIT_MS", "5000", 1);
  p = trun_gpu_probe_start(&a, NOENV);
  ck_assert(p != NULL);
  ck_assert_int_eq(trun_gpu_probe_poll(p, &b, &rc, err, sizeof(err)), 0);
  trun_gpu_probe_free(p);
  unsetenv("TRUN_FAKE_NVML_INIT_MS");
}
END_TEST

/* No NVML library: the CUDA runtime lists the GPUs (in the probe's child too), and nothing is cached. */
START_TEST(cudart_never_cached) {
  const char *repo = getenv("TRUN_REPO"), *build = getenv("TRUN_BUILD");
  char p[PATH_MAX], real[PATH_MAX];
  snprintf(p, sizeof(p), "%s/libcuda-nccl-fake.so", build && *build ? build : "build");
  ck_assert_msg(realpath(p, real) != NULL, "%s missing: run make", p);
  setenv("TRUN_CUDART_LIBRARY", real, 1);
  snprintf(p, sizeof(p), "%s/tests/fixtures/nodes/pcie-cudart/cudart.json", repo && *repo ? repo : ".");
  ck_assert_msg(realpath(p, real) != NULL, "%s missing", p);
  setenv("TRUN_FAKE_CUDART_TOPO", real, 1);
  setenv("TRUN_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  ck_assert_int_eq(cached(&a, NOENV, err), 0);
  ck_assert_str_eq(a.gpu_source, "cudart");
  ck_assert_int_eq(a.ngpu, 4);
  trun_gpu_probe *pr = trun_gpu_probe_start(&a, NOENV);
  ck_assert(pr != NULL);
  int rc = 99, got = 0;
  for (int i = 0; i < 1000 && (got = trun_gpu_probe_poll(pr, &b, &rc, err, sizeof(err))) == 0; i++)
    usleep(10000);
  trun_gpu_probe_free(pr);
  ck_assert_int_eq(got, 1);
  ck_assert_str_eq(b.gpu_source, "cudart");
  ck_assert_int_eq(access(cache, F_OK), -1);
  unsetenv("TRUN_FAKE_CUDART_TOPO");
}
END_TEST

int main(void) {
  Suite *s = suite_create("gpu_cache");
  TCase *tc = tcase_create("cache");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, miss_then_hit_without_nvml);
  tcase_add_test(tc, visibility_forms_match_nvml);
  tcase_add_test(tc, mig_entry_asks_nvml);
  tcase_add_test(tc, damaged_or_edited_file);
  tcase_add_test(tc, stale_key);
  tcase_add_test(tc, device_set);
  tcase_add_test(tc, not_trusted_files);
  tcase_add_test(tc, valid_sum_bad_content);
  tcase_add_test(tc, health_and_refresh);
  tcase_add_test(tc, probe_in_background);
  tcase_add_test(tc, cudart_never_cached);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
