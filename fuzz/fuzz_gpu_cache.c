/* libFuzzer target for the per-boot GPU cache (agent/discover/discover_cache.c): a cache file whose checksum
 * and key are right but whose list is anything (an edit that recomputed the hash, a file of another build),
 * and the raw file as it may be found. Input: byte 0 picks a CUDA_VISIBLE_DEVICES form (and whether the CPU
 * affinity is asked), then patches of 3 bytes (a 16-bit position scaled over the list, a byte) laid over a
 * valid list of 3 GPUs; the whole input is also written as the raw file. The key names the GPUs the patched
 * list names, so that a list can pass. Checks (abort on failure): a load is a hit or a miss with a reason; a
 * hit's every string is terminated, its links and P2P words are ones discovery writes; selecting from it
 * under each visibility form never yields more GPUs than the list holds, and every visible GPU's links are
 * terminated. ASan/UBSan/LSan find the rest. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "discover.h"
#include "discover_internal.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

/* The scratch directory and what the cache put in it go when the fuzzer exits. */
static void cleanup(void) {
  char p[128];
  snprintf(p, sizeof(p), "%s/trun/gpus.cache", dir);
  unlink(p);
  snprintf(p, sizeof(p), "%s/trun", dir);
  rmdir(p);
  rmdir(dir);
}

static void setup(void) {
  if (dir[0]) return;
  snprintf(dir, sizeof(dir), "/tmp/trun-fuzz-gpucache-XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
  setenv("XDG_RUNTIME_DIR", dir, 1);
  atexit(cleanup);
}

static const char *const forms[] = {NULL, "0,1", "GPU-", "3,1,x", "", "GPU-1,GPU-2", "7,6,5,4,3,2,1,0",
                                    "1,1"};

static int terminated(const char *s, size_t n) { return memchr(s, '\0', n) != NULL; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 3000) return 0;
  setup();
  static trun__gpu_list l, got;
  static trun_node node;
  static char key[TRUN__GPU_CACHE_KEY];
  memset(&l, 0, sizeof(l));
  l.count = 3;
  l.full = 1;
  for (int i = 0; i < 3; i++) {
    trun_gpu *g = &l.gpus[i];
    g->index = i;
    g->visible_index = -1;
    g->numa_node = i & 1;
    snprintf(g->uuid, sizeof(g->uuid), "GPU-%d0000000-0000-4000-8000-000000000000", i + 1);
    snprintf(g->name, sizeof(g->name), "NVIDIA H200");
    snprintf(g->pci_bus_id, sizeof(g->pci_bus_id), "00000000:%02X:00.0", 0x10 + i);
    snprintf(g->cpu_affinity, sizeof(g->cpu_affinity), "0-31");
    for (int j = 0; j < 3; j++) {
      snprintf(l.links[i][j], sizeof(l.links[i][j]), "%s", i == j ? "X" : "NV18");
      snprintf(l.p2p[i][j], sizeof(l.p2p[i][j]), "%s", i == j ? "X" : "OK");
    }
  }
  for (size_t k = 1; k + 3 <= size; k += 3) {
    size_t at = ((size_t)data[k] << 8 | data[k + 1]) * sizeof(l) / 65536;
    ((unsigned char *)&l)[at] = data[k + 2];
  }
  /* the key: the GPUs the list names (so that trun__gpu_cache_matches may pass) */
  size_t at = (size_t)snprintf(key, sizeof(key), "boot=fuzz\n");
  for (int i = 0; i >= 0 && i < l.count && i < TRUN_MAX_GPUS && at + 200 < sizeof(key); i++)
    if (terminated(l.gpus[i].uuid, sizeof(l.gpus[i].uuid)))
      at += (size_t)snprintf(key + at, sizeof(key) - at, "gpu=x %s\n", l.gpus[i].uuid);
  char why[256] = "";
  if (trun__gpu_cache_store(key, &l, why, sizeof(why)) < 0) return 0; /* the directory is not ours */
  int hit = trun__gpu_cache_load(key, data[0] & 1, &got, why, sizeof(why));
  CHECK(hit == 0 || hit == 1);
  CHECK(hit || why[0] != '\0');
  if (hit) {
    CHECK(got.count >= 0 && got.count <= TRUN_MAX_GPUS);
    for (int i = 0; i < got.count; i++) {
      CHECK(terminated(got.gpus[i].uuid, sizeof(got.gpus[i].uuid)));
      CHECK(terminated(got.gpus[i].pci_bus_id, sizeof(got.gpus[i].pci_bus_id)));
      for (int j = 0; j < got.count; j++) CHECK(terminated(got.links[i][j], sizeof(got.links[i][j])));
    }
    const char *cvd = forms[(data[0] >> 1) % (sizeof(forms) / sizeof(forms[0]))];
    char ent[64];
    snprintf(ent, sizeof(ent), "CUDA_VISIBLE_DEVICES=%s", cvd ? cvd : "");
    char *envp[] = {cvd ? ent : NULL, NULL};
    int src[TRUN_MAX_GPUS];
    char err[512];
    memset(&node, 0, sizeof(node));
    trun__gpu_select(&got, envp, NULL, NULL, &node, src, err, sizeof(err));
    CHECK(node.ngpu >= 0 && node.ngpu <= got.count);
    trun__gpu_links_to_node(&got, src, &node);
    for (int a = 0; a < node.ngpu; a++)
      for (int b = 0; b < node.ngpu; b++) CHECK(terminated(node.links[a][b], sizeof(node.links[a][b])));
  }
  /* the raw input as the whole file: a miss unless it is a valid file (the fuzzer will not forge the hash) */
  char path[4200];
  if (trun__gpu_cache_path(path, sizeof(path), 1, why, sizeof(why)) == 0) {
    FILE *f = fopen(path, "w");
    if (f) {
      fwrite(data, 1, size, f);
      fclose(f);
      chmod(path, 0600);
      hit = trun__gpu_cache_load(key, 0, &got, why, sizeof(why));
      CHECK(hit == 0 && why[0] != '\0');
    }
  }
  return 0;
}
