/* agent/discover/discover_gpu.c and agent/discover/discover_rdma.c against the node fixtures
 * (tests/fixtures/nodes/, see gen.py there), the fake NVML (build/libnvidia-ml-fake.so from
 * tests/fakes/nvml_shim.c) and the fake CUDA runtime (build/libcuda-nccl-fake.so from
 * tests/fakes/cuda_nccl_shim.c): GPUs, links, P2P status, CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES, NUMA
 * nodes (also derived from the CPU affinity), EFA and other RDMA devices, usability and GPU pairing, PCI
 * distances. Paths: TRUN_REPO (default: the current directory, the repository root under make) and TRUN_BUILD
 * (default <repo>/build). */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "discover.h"

/* Internal, from agent/discover/discover_rdma.c. */
int trun_pci_parse(const char *s, unsigned *dom, unsigned *bus, unsigned *dev, unsigned *fn);
const char *trun_pci_distance(const char *path_a, int numa_a, const char *path_b, int numa_b);

#define ENV(...) ((char *[]){__VA_ARGS__, NULL})
#define NOENV ((char *[]){NULL})

static trun_node node;
static char err[1024];
static char tmpdir[64];

static const char *repo(void) {
  const char *r = getenv("TRUN_REPO");
  return r && *r ? r : ".";
}

/* Sets var to the absolute path of build/<file> (TRUN_BUILD, default build). */
static void set_build_lib(const char *var, const char *file) {
  const char *b = getenv("TRUN_BUILD");
  char p[PATH_MAX + 64], lib[PATH_MAX];
  snprintf(p, sizeof(p), "%s/%s", b && *b ? b : "build", file);
  ck_assert_msg(realpath(p, lib) != NULL, "%s missing: run make", p);
  setenv(var, lib, 1);
}

/* Points the test hooks at fixture name (NULL NVML library when nvml is 0; never a CUDA runtime). */
static void use_fixture(const char *name, int nvml) {
  char p[PATH_MAX + 64], real[PATH_MAX];
  snprintf(p, sizeof(p), "%s/tests/fixtures/nodes/%s", repo(), name);
  ck_assert_msg(realpath(p, real) != NULL, "fixture %s missing", p);
  snprintf(p, sizeof(p), "%s/sys", real);
  setenv("TRUN_SYSFS_ROOT", p, 1);
  snprintf(p, sizeof(p), "%s/dev", real);
  setenv("TRUN_DEV_ROOT", p, 1);
  snprintf(p, sizeof(p), "%s/nvml.json", real);
  setenv("TRUN_FAKE_NVML_TOPO", p, 1);
  snprintf(p, sizeof(p), "%s/cudart.json", real);
  setenv("TRUN_FAKE_CUDART_TOPO", p, 1);
  setenv("TRUN_CUDART_LIBRARY", "/nonexistent/libcudart.so", 1);
  if (nvml)
    set_build_lib("TRUN_NVML_LIBRARY", "libnvidia-ml-fake.so");
  else
    setenv("TRUN_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  memset(&node, 0, sizeof(node));
  memset(err, 0, sizeof(err));
}

static int gpus(char **envp) { return trun_discover_gpus(&node, envp, err, sizeof(err)); }

static const char *P4D_UUID[8] = {
    "GPU-f9caa9b0-5ce1-5b37-9805-60c0fdd20ebb", "GPU-1bf48cdd-68a1-55ae-bc60-0c514bd7d185",
    "GPU-6c554657-6535-595b-96dc-81622c4f8797", "GPU-f747e90c-e5fd-5366-92c9-a92d159a923a",
    "GPU-1d98bcf1-3311-50d2-beed-280966be280f", "GPU-76d376f4-177d-5809-928e-dbbf995754b5",
    "GPU-550e0f42-1d9e-5b58-80ac-a372779b3b84", "GPU-3dc96847-4a9d-5bf6-80f7-186233bfd709"};

static void assert_indices(int n, const int *want) {
  ck_assert_int_eq(node.ngpu, n);
  for (int i = 0; i < n; i++) {
    ck_assert_int_eq(node.gpus[i].index, want[i]);
    ck_assert_int_eq(node.gpus[i].visible_index, i);
  }
}

START_TEST(p4d_full) {
  use_fixture("p4d.24xlarge", 1);
  ck_assert_int_eq(gpus(NOENV), 0);
  ck_assert_str_eq(err, "");
  ck_assert_str_eq(node.gpu_source, "nvml");
  assert_indices(8, (int[]){0, 1, 2, 3, 4, 5, 6, 7});
  for (int i = 0; i < 8; i++) {
    ck_assert_str_eq(node.gpus[i].uuid, P4D_UUID[i]);
    ck_assert_str_eq(node.gpus[i].name, "NVIDIA A100-SXM4-40GB");
    ck_assert_uint_eq(node.gpus[i].memory_bytes, 42949672960ULL);
    ck_assert_int_eq(node.gpus[i].numa_node, i < 4 ? 0 : 1);
    ck_assert_str_eq(node.gpus[i].cpu_affinity, i < 4 ? "0-23,48-71" : "24-47,72-95");
    for (int j = 0; j < 8; j++) ck_assert_str_eq(node.links[i][j], i == j ? "X" : "NV12");
    for (int j = 0; j < 8; j++) ck_assert_str_eq(node.p2p[i][j], i == j ? "X" : "OK");
  }
  ck_assert_str_eq(node.gpus[0].pci_bus_id, "00000000:10:1C.0");
  ck_assert_str_eq(node.gpus[7].pci_bus_id, "00000000:A0:1D.0");
  ck_assert_int_eq(trun_discover_rdma(&node), 0);
  ck_assert_int_eq(node.nrdma, 4);
  const char *names[] = {"rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27"};
  const char *pci[] = {"0000:10:1b.0", "0000:20:1b.0", "0000:90:1b.0", "0000:a0:1b.0"};
  for (int r = 0; r < 4; r++) {
    ck_assert_str_eq(node.rdma[r].name, names[r]);
    ck_assert_str_eq(node.rdma[r].pci_bus_id, pci[r]);
    ck_assert_str_eq(node.rdma[r].driver, "efa");
    ck_assert_int_eq(node.rdma[r].is_efa, 1);
    ck_assert_int_eq(node.rdma[r].usable, 1);
    ck_assert_int_eq(node.rdma[r].numa_node, r < 2 ? 0 : 1);
    ck_assert_int_eq(node.rdma[r].nearest_gpu, 2 * r);
  }
}
END_TEST

START_TEST(pod_4_of_8) {
  use_fixture("pod-p4d-4of8", 1);
  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES=4,5,6,7")), 0);
  assert_indices(4, (int[]){4, 5, 6, 7});
  ck_assert_str_eq(node.links[0][3], "NV12");
  ck_assert_int_eq(trun_discover_rdma(&node), 0);
  ck_assert_int_eq(node.nrdma, 4);
  for (int r = 0; r < 4; r++) ck_assert_int_eq(node.rdma[r].usable, r == 2);
  ck_assert_str_eq(node.rdma[2].name, "rdmap144s27");
  ck_assert_int_eq(node.rdma[2].nearest_gpu, 0);
  ck_assert_int_eq(node.rdma[3].nearest_gpu, 2);
  ck_assert_int_eq(node.rdma[0].nearest_gpu, 0); /* nothing in common, other NUMA: lowest index */
}
END_TEST

START_TEST(cuda_visible_forms) {
  use_fixture("p4d.24xlarge", 1);
  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES=")), 0);
  ck_assert_int_eq(node.ngpu, 0);
  ck_assert_str_eq(node.gpu_source, "nvml");

  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES= 1 , 0")), 0);
  assert_indices(2, (int[]){1, 0});
  ck_assert_str_eq(node.links[0][1], "NV12");
  ck_assert_str_eq(node.links[1][1], "X");

  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES=GPU-f9,GPU-76d376f4-177d-5809-928e-dbbf995754b5")), 0);
  assert_indices(2, (int[]){0, 5});

  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES=MIG-44201688-89d6-59d9-8fdc-17c2f094b69e,3")), 0);
  assert_indices(2, (int[]){0, 3});
  ck_assert_str_eq(node.gpus[0].uuid, "MIG-44201688-89d6-59d9-8fdc-17c2f094b69e");
  ck_assert_str_eq(node.gpus[0].name, "NVIDIA A100-SXM4-40GB");
  ck_assert_str_eq(node.links[0][1], "NV12");
}
END_TEST

START_TEST(cuda_visible_invalid) {
  use_fixture("p4d.24xlarge", 1);
  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES=2,abc,3")), -1);
  assert_indices(1, (int[]){2});
  ck_assert_ptr_nonnull(strstr(err, "'abc'"));
  ck_assert_ptr_nonnull(strstr(err, "CUDA_VISIBLE_DEVICES"));

  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES=8")), -1);
  ck_assert_int_eq(node.ngpu, 0);
  ck_assert_ptr_nonnull(strstr(err, "'8'"));

  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES=0,0")), -1); /* the same GPU twice */
  assert_indices(1, (int[]){0});

  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES=GPU-1,1")), -1); /* GPU-1 matches two UUIDs */
  ck_assert_int_eq(node.ngpu, 0);
  ck_assert_ptr_nonnull(strstr(err, "'GPU-1'"));

  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES=MIG-00000000-0000-0000-0000-000000000000")), -1);
  ck_assert_int_eq(node.ngpu, 0);
  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES=-1")), -1);
  ck_assert_int_eq(node.ngpu, 0);
}
END_TEST

START_TEST(nvidia_visible) {
  use_fixture("p4d.24xlarge", 1);
  ck_assert_int_eq(gpus(ENV("NVIDIA_VISIBLE_DEVICES=none")), 0);
  ck_assert_int_eq(node.ngpu, 0);
  ck_assert_int_eq(gpus(ENV("NVIDIA_VISIBLE_DEVICES=all")), 0);
  ck_assert_int_eq(node.ngpu, 8);
  ck_assert_int_eq(gpus(ENV("NVIDIA_VISIBLE_DEVICES=void")), 0);
  ck_assert_int_eq(node.ngpu, 8);
  ck_assert_int_eq(gpus(ENV("NVIDIA_VISIBLE_DEVICES=")), 0);
  ck_assert_int_eq(node.ngpu, 8);
  ck_assert_int_eq(gpus(ENV("NVIDIA_VISIBLE_DEVICES=6,1")), 0); /* NVML order */
  assert_indices(2, (int[]){1, 6});
  ck_assert_int_eq(gpus(ENV("NVIDIA_VISIBLE_DEVICES=8,9")), 0); /* already applied by the runtime */
  ck_assert_int_eq(node.ngpu, 8);
  /* UUIDs, then CUDA_VISIBLE_DEVICES indexes what is left. */
  ck_assert_int_eq(gpus(ENV("NVIDIA_VISIBLE_DEVICES=GPU-76d376f4-177d-5809-928e-dbbf995754b5,"
                            "GPU-6c554657-6535-595b-96dc-81622c4f8797",
                            "CUDA_VISIBLE_DEVICES=1")),
                   0);
  assert_indices(1, (int[]){5});
  ck_assert_int_eq(gpus(ENV("NVIDIA_VISIBLE_DEVICES=GPU-76d376f4-177d-5809-928e-dbbf995754b5",
                            "CUDA_VISIBLE_DEVICES=GPU-f9")),
                   -1); /* hidden by the runtime */
  ck_assert_int_eq(node.ngpu, 0);
}
END_TEST

START_TEST(p5_full) {
  use_fixture("p5.48xlarge", 1);
  ck_assert_int_eq(gpus(NOENV), 0);
  ck_assert_int_eq(node.ngpu, 8);
  ck_assert_str_eq(node.gpus[0].name, "NVIDIA H100 80GB HBM3");
  ck_assert_str_eq(node.gpus[0].pci_bus_id, "00000000:23:00.0");
  ck_assert_str_eq(node.gpus[5].cpu_affinity, "48-95,144-191");
  ck_assert_uint_eq(node.gpus[0].memory_bytes, 85520809984ULL);
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 8; j++) ck_assert_str_eq(node.links[i][j], i == j ? "X" : "NV18");
  ck_assert_int_eq(trun_discover_rdma(&node), 0);
  ck_assert_int_eq(node.nrdma, 32);
  ck_assert_str_eq(node.rdma[0].name, "rdmap36s0");
  ck_assert_str_eq(node.rdma[0].pci_bus_id, "0000:24:00.0");
  for (int r = 0; r < 32; r++) {
    ck_assert_int_eq(node.rdma[r].is_efa, 1);
    ck_assert_int_eq(node.rdma[r].usable, 1);
    ck_assert_int_eq(node.rdma[r].nearest_gpu, r / 4);
    ck_assert_int_eq(node.rdma[r].numa_node, r < 16 ? 0 : 1);
  }
}
END_TEST

START_TEST(g5_pcie_only) {
  use_fixture("g5.48xlarge", 1);
  ck_assert_int_eq(gpus(NOENV), 0);
  ck_assert_int_eq(node.ngpu, 8);
  ck_assert_str_eq(node.gpus[3].name, "NVIDIA A10G");
  ck_assert_str_eq(node.links[0][1], "NODE");
  ck_assert_str_eq(node.links[0][4], "SYS");
  ck_assert_str_eq(node.links[6][7], "NODE");
  ck_assert_str_eq(node.p2p[0][1], "NS");
  ck_assert_str_eq(node.p2p[7][0], "NS");
  ck_assert_str_eq(node.p2p[5][5], "X");
  ck_assert_int_eq(trun_discover_rdma(&node), 0);
  ck_assert_int_eq(node.nrdma, 1);
  ck_assert_str_eq(node.rdma[0].name, "rdmap5s0");
  ck_assert_int_eq(node.rdma[0].nearest_gpu, 0);
  ck_assert_int_eq(node.rdma[0].numa_node, 0);
}
END_TEST

START_TEST(cpu_only) {
  use_fixture("cpu-only", 0);
  node.ngpu = 3;
  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES=0")), 0);
  ck_assert_int_eq(node.ngpu, 0);
  ck_assert_str_eq(node.gpu_source, "none");
  ck_assert_str_eq(err, "");
  ck_assert_int_eq(trun_discover_rdma(&node), 0);
  ck_assert_int_eq(node.nrdma, 0);
}
END_TEST

START_TEST(h200_box) {
  use_fixture("h200x2", 1);
  ck_assert_int_eq(gpus(NOENV), 0);
  ck_assert_int_eq(node.ngpu, 2);
  ck_assert_str_eq(node.gpus[0].uuid, "GPU-975b78a1-6a65-a1da-4756-7a34bbfb8bee");
  ck_assert_str_eq(node.gpus[1].uuid, "GPU-cc1980a5-ea8b-6221-86ef-d9c8546cd156");
  ck_assert_str_eq(node.gpus[1].name, "NVIDIA H200");
  ck_assert_str_eq(node.links[0][1], "NV18");
  ck_assert_str_eq(node.links[1][0], "NV18");
  ck_assert_str_eq(node.gpus[0].cpu_affinity, "0-31");
  ck_assert_str_eq(node.p2p[0][1], "OK");
  /* The VM's sysfs numa_node says -1 (as on the box); nvidia-smi said 0: the only NUMA node. */
  ck_assert_int_eq(node.gpus[0].numa_node, 0);
  ck_assert_int_eq(node.gpus[1].numa_node, 0);
  ck_assert_int_eq(trun_discover_rdma(&node), 0);
  ck_assert_int_eq(node.nrdma, 0);
  /* Without the affinity asked for (the agent), the NUMA node is still derived. */
  memset(&node, 0, sizeof(node));
  ck_assert_int_eq(trun_discover_gpus_flags(&node, NOENV, TRUN_GPU_NO_AFFINITY, err, sizeof(err)), 0);
  ck_assert_int_eq(node.gpus[1].numa_node, 0);
}
END_TEST

START_TEST(numa_of_cpulist) {
  use_fixture("pcie-cudart", 0); /* node0 0-15, node1 16-31 */
  ck_assert_int_eq(trun_numa_of_cpulist("16-31"), 1);
  ck_assert_int_eq(trun_numa_of_cpulist("0-15"), 0);
  ck_assert_int_eq(trun_numa_of_cpulist("2,4-5"), 0);
  ck_assert_int_eq(trun_numa_of_cpulist("8-20"), -1); /* spans both */
  ck_assert_int_eq(trun_numa_of_cpulist("40"), -1);   /* in no node */
  ck_assert_int_eq(trun_numa_of_cpulist(""), -1);
  ck_assert_int_eq(trun_numa_of_cpulist("x"), -1);
  ck_assert_int_eq(trun_numa_of_cpulist(NULL), -1);
  use_fixture("cpu-only", 0); /* one node: that node, whatever the affinity says */
  ck_assert_int_eq(trun_numa_of_cpulist("0-3"), 0);
  ck_assert_int_eq(trun_numa_of_cpulist(""), 0);
  setenv("TRUN_SYSFS_ROOT", "/nonexistent", 1);
  ck_assert_int_eq(trun_numa_of_cpulist("0-3"), -1);
}
END_TEST

static const char *L4_UUID[4] = {
    "GPU-e0f0db63-2ffa-538c-90a0-98e9369eec79", "GPU-160d0a60-c340-5dd4-8ed2-18607a30eb22",
    "GPU-8fb60e6b-ef8c-51b9-8794-2b4c04aecd91", "GPU-99efeeb2-a62f-5819-9d9f-2d0680db67f9"};

/* No NVML: the CUDA runtime (fake) in the child; it applies CUDA_VISIBLE_DEVICES, trun does not again. */
START_TEST(cudart_fallback) {
  use_fixture("pcie-cudart", 0);
  set_build_lib("TRUN_CUDART_LIBRARY", "libcuda-nccl-fake.so");
  unsetenv("CUDA_VISIBLE_DEVICES");
  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES=3,0,1")), 0);
  ck_assert_str_eq(err, "");
  ck_assert_str_eq(node.gpu_source, "cudart");
  ck_assert_int_eq(node.ngpu, 3);
  const int host[3] = {3, 0, 1};
  const char *pci[3] = {"00000000:90:00.0", "00000000:19:00.0", "00000000:1A:00.0"};
  for (int v = 0; v < 3; v++) {
    ck_assert_int_eq(node.gpus[v].index, -1);
    ck_assert_int_eq(node.gpus[v].visible_index, v);
    ck_assert_str_eq(node.gpus[v].uuid, L4_UUID[host[v]]);
    ck_assert_str_eq(node.gpus[v].name, "NVIDIA L4");
    ck_assert_str_eq(node.gpus[v].pci_bus_id, pci[v]);
    ck_assert_uint_eq(node.gpus[v].memory_bytes, 24152899584ULL);
    ck_assert_str_eq(node.gpus[v].cpu_affinity, v == 0 ? "16-31" : "0-15");
    ck_assert_int_eq(node.gpus[v].numa_node, v == 0 ? 1 : 0); /* sysfs -1: from local_cpulist */
  }
  ck_assert_str_eq(node.links[0][1], "SYS");
  ck_assert_str_eq(node.links[1][2], "PIX");
  ck_assert_str_eq(node.links[2][2], "X");
  ck_assert_str_eq(node.p2p[0][1], "NS");
  ck_assert_str_eq(node.p2p[2][1], "OK");
  ck_assert_str_eq(node.p2p[1][1], "X");
  /* The child set CUDA_VISIBLE_DEVICES for the runtime; this process's environment is untouched. */
  ck_assert_ptr_null(getenv("CUDA_VISIBLE_DEVICES"));
  ck_assert_int_eq(gpus(NOENV), 0);
  ck_assert_int_eq(node.ngpu, 4);
  ck_assert_str_eq(node.gpus[3].uuid, L4_UUID[3]);
  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES=")), 0); /* cudaErrorNoDevice: no GPU, no error */
  ck_assert_int_eq(node.ngpu, 0);
  ck_assert_str_eq(node.gpu_source, "none");
  ck_assert_str_eq(err, "");
  /* Other RDMA devices: the mlx5 HCA below the switch of visible GPUs 1 and 2. */
  ck_assert_int_eq(gpus(ENV("CUDA_VISIBLE_DEVICES=3,0,1")), 0);
  ck_assert_int_eq(trun_discover_rdma(&node), 0);
  ck_assert_int_eq(node.nrdma, 1);
  ck_assert_str_eq(node.rdma[0].name, "mlx5_0");
  ck_assert_str_eq(node.rdma[0].driver, "mlx5_core");
  ck_assert_int_eq(node.rdma[0].is_efa, 0);
  ck_assert_int_eq(node.rdma[0].usable, 1);
  ck_assert_int_eq(node.rdma[0].nearest_gpu, 1);
  /* --nproc-per-node gpu counts what the runtime lists (this process's environment), not /dev/nvidiaN. */
  int nproc = 0;
  setenv("CUDA_VISIBLE_DEVICES", "2,3,9", 1); /* the runtime stops at 9 */
  ck_assert_int_eq(trun_nproc_resolve("gpu", &nproc, err, sizeof(err)), 0);
  ck_assert_int_eq(nproc, 2);
  unsetenv("CUDA_VISIBLE_DEVICES");
  ck_assert_int_eq(trun_nproc_resolve("gpu", &nproc, err, sizeof(err)), 0);
  ck_assert_int_eq(nproc, 4);
  /* NVML, where it loads, wins over the runtime. */
  use_fixture("h200x2", 1);
  set_build_lib("TRUN_CUDART_LIBRARY", "libcuda-nccl-fake.so");
  ck_assert_int_eq(gpus(NOENV), 0);
  ck_assert_str_eq(node.gpu_source, "nvml");
  ck_assert_int_eq(node.ngpu, 2);
}
END_TEST

START_TEST(cudart_errors) {
  use_fixture("pcie-cudart", 0);
  setenv("TRUN_CUDART_LIBRARY", "libc.so.6", 1); /* loads, but is no CUDA runtime */
  ck_assert_int_eq(gpus(NOENV), -1);
  ck_assert_ptr_nonnull(strstr(err, "cudaGetDeviceCount"));
  ck_assert_ptr_nonnull(strstr(err, "TRUN_CUDART_LIBRARY"));
  ck_assert_int_eq(node.ngpu, 0);
  setenv("TRUN_CUDART_LIBRARY", "/nonexistent/libcudart.so", 1); /* none at all: a GPU-less host */
  ck_assert_int_eq(gpus(NOENV), 0);
  ck_assert_int_eq(node.ngpu, 0);
  ck_assert_str_eq(node.gpu_source, "none");
}
END_TEST

/* Writes a topology JSON into a fresh temp dir and points the fake NVML at it. */
static void fake_topo(const char *json) {
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/trun-discover.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  char p[128];
  snprintf(p, sizeof(p), "%s/nvml.json", tmpdir);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fputs(json, f);
  fclose(f);
  setenv("TRUN_FAKE_NVML_TOPO", p, 1);
}

static void fake_topo_done(void) {
  char p[128];
  snprintf(p, sizeof(p), "%s/nvml.json", tmpdir);
  unlink(p);
  rmdir(tmpdir);
}

START_TEST(direct_nvlinks_and_pcie) {
  use_fixture("cpu-only", 1);
  fake_topo(
      "{\"gpus\": ["
      "{\"uuid\": \"GPU-a\", \"name\": \"G\", \"pci\": \"00000000:01:00.0\", \"cpu_affinity\": \"0,2,4-5\","
      " \"nvlinks\": [\"00000000:02:00.0\", \"00000000:02:00.0\", \"00000000:02:00.0\", "
      "\"00000000:02:00.0\"]},"
      "{\"uuid\": \"GPU-b\", \"name\": \"G\", \"pci\": \"00000000:02:00.0\", \"numa_id\": 3,"
      " \"nvlinks\": [\"00000000:01:00.0\", \"00000000:01:00.0\", \"00000000:01:00.0\", "
      "\"00000000:01:00.0\"]},"
      "{\"uuid\": \"GPU-c\", \"name\": \"G\", \"pci\": \"00000000:03:00.0\"}],"
      "\"topology\": [[\"X\", \"PIX\", \"PXB\"], [\"PIX\", \"X\", \"SYS\"], [\"PXB\", \"SYS\", \"X\"]],"
      "\"p2p\": [[\"X\", \"OK\", \"CNS\"], [\"GNS\", \"X\", \"TNS\"], [\"DR\", \"U\", \"bogus\"]]}");
  ck_assert_int_eq(gpus(NOENV), 0);
  fake_topo_done();
  ck_assert_int_eq(node.ngpu, 3);
  ck_assert_str_eq(node.links[0][1], "NV4");
  ck_assert_str_eq(node.links[1][0], "NV4");
  ck_assert_str_eq(node.links[0][2], "PXB");
  ck_assert_str_eq(node.links[2][1], "SYS");
  ck_assert_str_eq(node.gpus[0].cpu_affinity, "0,2,4-5");
  ck_assert_int_eq(node.gpus[0].numa_node, 0); /* no sysfs entry, no NVML NUMA id: the fixture's one node */
  ck_assert_int_eq(node.gpus[1].numa_node, 3); /* NVML's NUMA id as the fallback */
  const char *p2p[3][3] = {{"X", "OK", "CNS"}, {"GNS", "X", "TNS"}, {"DR", "U", "X"}};
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++) ck_assert_str_eq(node.p2p[a][b], p2p[a][b]);
}
END_TEST

/* Multi-node NVLink as NCCL decides it: fabric registration "completed" (3) with a non-zero cluster UUID.
 * No fabric (NOT_SUPPORTED) or a zero UUID: 0; a driver without the call (FUNCTION_NOT_FOUND): unknown. */
START_TEST(fabric_mnnvl) {
  use_fixture("cpu-only", 1);
  fake_topo(
      "{\"gpus\": ["
      "{\"uuid\": \"GPU-a\", \"pci\": \"00000000:01:00.0\", \"nvswitch_links\": 18,"
      " \"fabric\": [3, \"0000000000000000000000000000a1b2\"]},"
      "{\"uuid\": \"GPU-b\", \"pci\": \"00000000:02:00.0\", \"nvswitch_links\": 18,"
      " \"fabric\": [3, \"00000000000000000000000000000000\"]},"
      "{\"uuid\": \"GPU-c\", \"pci\": \"00000000:03:00.0\", \"nvswitch_links\": 18,"
      " \"fabric\": [2, \"0000000000000000000000000000a1b2\"]},"
      "{\"uuid\": \"GPU-d\", \"pci\": \"00000000:04:00.0\"}]}");
  ck_assert_int_eq(gpus(NOENV), 0);
  fake_topo_done();
  ck_assert_int_eq(node.ngpu, 4);
  ck_assert_int_eq(node.gpus[0].mnnvl, 1);
  ck_assert_int_eq(node.gpus[1].mnnvl, 0); /* an HGX board: registered, no cluster */
  ck_assert_int_eq(node.gpus[2].mnnvl, 0); /* registration still in progress */
  ck_assert_int_eq(node.gpus[3].mnnvl, 0); /* no fabric */
  fake_topo(
      "{\"missing\": [\"nvmlDeviceGetGpuFabricInfo\"], \"gpus\": ["
      "{\"uuid\": \"GPU-a\", \"nvswitch_links\": 18, \"fabric\": [3, "
      "\"00000000000000000000000000000001\"]}]}");
  ck_assert_int_eq(gpus(NOENV), 0);
  fake_topo_done();
  ck_assert_int_eq(node.gpus[0].mnnvl, -1);
}
END_TEST

START_TEST(nvml_init_errors) {
  use_fixture("cpu-only", 1);
  fake_topo("{\"init_rc\": 9, \"gpus\": []}");
  ck_assert_int_eq(gpus(NOENV), 0); /* driver not loaded: a GPU-less host */
  ck_assert_str_eq(node.gpu_source, "none");
  fake_topo_done();
  fake_topo("{\"gpus\": [{\"uuid\": \"GPU-a\"}, {\"uuid\": \"GPU-b\"}]}"); /* no P2P status */
  ck_assert_int_eq(gpus(NOENV), 0);
  ck_assert_str_eq(node.p2p[0][1], "N/A");
  ck_assert_str_eq(node.p2p[1][1], "X");
  fake_topo_done();
  fake_topo("{\"init_rc\": 999, \"gpus\": []}");
  ck_assert_int_eq(gpus(NOENV), -1);
  fake_topo_done();
  ck_assert_ptr_nonnull(strstr(err, "nvmlInit_v2"));
  /* A library without the NVML symbols. */
  setenv("TRUN_NVML_LIBRARY", "libc.so.6", 1);
  ck_assert_int_eq(gpus(NOENV), -1);
  ck_assert_ptr_nonnull(strstr(err, "nvmlInit_v2"));
  ck_assert_int_eq(node.ngpu, 0);
}
END_TEST

START_TEST(pci_helpers) {
  unsigned d, b, s, f;
  ck_assert_int_eq(trun_pci_parse("00000000:A0:1D.0", &d, &b, &s, &f), 0);
  ck_assert_uint_eq(d, 0);
  ck_assert_uint_eq(b, 0xa0);
  ck_assert_uint_eq(s, 0x1d);
  ck_assert_uint_eq(f, 0);
  ck_assert_int_eq(trun_pci_parse("0001:10:1b.3", &d, &b, &s, &f), 0);
  ck_assert_uint_eq(d, 1);
  ck_assert_uint_eq(f, 3);
  ck_assert_int_eq(trun_pci_parse("10:1b.0", &d, &b, &s, &f), 0);
  ck_assert_uint_eq(b, 0x10);
  ck_assert_int_lt(trun_pci_parse("", &d, &b, &s, &f), 0);
  ck_assert_int_lt(trun_pci_parse("0000:10:1b", &d, &b, &s, &f), 0);
  ck_assert_int_lt(trun_pci_parse("0000:10:1b.0x", &d, &b, &s, &f), 0);
  ck_assert_int_lt(trun_pci_parse("0000:10:2b.0", &d, &b, &s, &f), 0);
  const char *sw_a = "/s/devices/pci0000:20/0000:20:01.0/0000:21:00.0/0000:22:00.0/0000:23:00.0";
  const char *sw_b = "/s/devices/pci0000:20/0000:20:01.0/0000:21:00.0/0000:22:01.0/0000:24:00.0";
  const char *sw2 = "/s/devices/pci0000:20/0000:20:02.0/0000:31:00.0/0000:32:00.0/0000:33:00.0";
  const char *root = "/s/devices/pci0000:20/0000:20:1b.0";
  const char *other = "/s/devices/pci0000:90/0000:90:1b.0";
  ck_assert_str_eq(trun_pci_distance(sw_a, 0, sw_b, 0), "PIX");
  ck_assert_str_eq(trun_pci_distance(sw_a, 0, sw2, 0), "PHB");
  ck_assert_str_eq(trun_pci_distance(sw_a, 0, root, 0), "PHB");
  ck_assert_str_eq(trun_pci_distance(root, 0, other, 0), "NODE");
  ck_assert_str_eq(trun_pci_distance(root, 0, other, 1), "SYS");
  ck_assert_str_eq(trun_pci_distance(root, -1, other, -1), "SYS");
  const char *deep = "/s/devices/pci0000:20/0000:20:01.0/0000:21:00.0/0000:22:00.0/0000:23:00.0/0000:24:00.0";
  ck_assert_str_eq(trun_pci_distance(sw_b, 0, deep, 0), "PXB");
}
END_TEST

START_TEST(rdma_missing_sysfs) {
  setenv("TRUN_SYSFS_ROOT", "/nonexistent", 1);
  memset(&node, 0, sizeof(node));
  node.nrdma = 5;
  ck_assert_int_eq(trun_discover_rdma(&node), 0);
  ck_assert_int_eq(node.nrdma, 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("discover");
  TCase *tc = tcase_create("gpu-rdma");
  tcase_add_test(tc, p4d_full);
  tcase_add_test(tc, pod_4_of_8);
  tcase_add_test(tc, cuda_visible_forms);
  tcase_add_test(tc, cuda_visible_invalid);
  tcase_add_test(tc, nvidia_visible);
  tcase_add_test(tc, p5_full);
  tcase_add_test(tc, g5_pcie_only);
  tcase_add_test(tc, cpu_only);
  tcase_add_test(tc, h200_box);
  tcase_add_test(tc, numa_of_cpulist);
  tcase_add_test(tc, cudart_fallback);
  tcase_add_test(tc, cudart_errors);
  tcase_add_test(tc, direct_nvlinks_and_pcie);
  tcase_add_test(tc, nvml_init_errors);
  tcase_add_test(tc, fabric_mnnvl);
  tcase_add_test(tc, pci_helpers);
  tcase_add_test(tc, rdma_missing_sysfs);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
