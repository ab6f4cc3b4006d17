/* The health facts of a GPU (trun_gpu_health, agent/discover/discover.h), read in the discovery child when
 * the caller asks for them (TRUN_GPU_HEALTH): NVML only, one call per fact, no judgement (that is health.c's,
 * in the caller). A call the driver's library lacks leaves its fact TRUN_HF_MISSING; a call that fails leaves
 * its NVML return code (NOT_SUPPORTED, GPU_IS_LOST, ...) for the verdict to name.
 *
 * Clock event reasons: nvmlDeviceGetCurrentClocksEventReasons (r535 and later), else the older name
 * nvmlDeviceGetCurrentClocksThrottleReasons (same bits). NVLinks: nvmlDeviceGetNvLinkState for links
 * 0..TRUN_NVML_NVLINK_MAX_LINKS-1 until INVALID_ARGUMENT (no such link); NOT_SUPPORTED on link 0 means the
 * GPU has none. The GPU recovery action: field 230 through nvmlDeviceGetFieldValues (r570 and later; older
 * drivers answer the field with an error in its nvmlReturn). */
#include <dlfcn.h>
#include <string.h>

#include "discover.h"
#include "discover_internal.h"
#include "nvml.h"

void trun__gpu_health_load(void *dl, trun__gpu_health_fns *f) {
  memset(f, 0, sizeof(*f));
  f->remapped_rows = (trun_nvmlDeviceGetRemappedRows_fn)dlsym(dl, "nvmlDeviceGetRemappedRows");
  f->retired_pending =
      (trun_nvmlDeviceGetRetiredPagesPendingStatus_fn)dlsym(dl, "nvmlDeviceGetRetiredPagesPendingStatus");
  f->total_ecc = (trun_nvmlDeviceGetTotalEccErrors_fn)dlsym(dl, "nvmlDeviceGetTotalEccErrors");
  f->clock_reasons = (trun_nvmlDeviceGetClocksReasons_fn)dlsym(dl, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!f->clock_reasons)
    f->clock_reasons =
        (trun_nvmlDeviceGetClocksReasons_fn)dlsym(dl, "nvmlDeviceGetCurrentClocksThrottleReasons");
  f->pcie_gen = (trun_nvmlDeviceGetPcieLink_fn)dlsym(dl, "nvmlDeviceGetCurrPcieLinkGeneration");
  f->pcie_gen_max = (trun_nvmlDeviceGetPcieLink_fn)dlsym(dl, "nvmlDeviceGetMaxPcieLinkGeneration");
  f->pcie_width = (trun_nvmlDeviceGetPcieLink_fn)dlsym(dl, "nvmlDeviceGetCurrPcieLinkWidth");
  f->pcie_width_max = (trun_nvmlDeviceGetPcieLink_fn)dlsym(dl, "nvmlDeviceGetMaxPcieLinkWidth");
  f->nvlink_state = (trun_nvmlDeviceGetNvLinkState_fn)dlsym(dl, "nvmlDeviceGetNvLinkState");
  f->field_values = (trun_nvmlDeviceGetFieldValues_fn)dlsym(dl, "nvmlDeviceGetFieldValues");
}

/* FUNCTION_NOT_FOUND (the library has the symbol but not the call, as some shims do) reads as missing. */
static int rc_of(trun_nvmlReturn_t rc) {
  return rc == TRUN_NVML_ERROR_FUNCTION_NOT_FOUND ? TRUN_HF_MISSING : rc;
}

static void read_pcie(const trun__gpu_health_fns *f, trun_nvmlDevice_t dev, trun_gpu_health *h) {
  if (!f->pcie_gen || !f->pcie_gen_max || !f->pcie_width || !f->pcie_width_max) return;
  trun_nvmlReturn_t rc = f->pcie_gen(dev, &h->pcie_gen);
  if (rc == TRUN_NVML_SUCCESS) rc = f->pcie_gen_max(dev, &h->pcie_gen_max);
  if (rc == TRUN_NVML_SUCCESS) rc = f->pcie_width(dev, &h->pcie_width);
  if (rc == TRUN_NVML_SUCCESS) rc = f->pcie_width_max(dev, &h->pcie_width_max);
  h->pcie_rc = rc_of(rc);
}

static void read_nvlinks(const trun__gpu_health_fns *f, trun_nvmlDevice_t dev, trun_gpu_health *h) {
  if (!f->nvlink_state) return;
  for (unsigned link = 0; link < TRUN_NVML_NVLINK_MAX_LINKS; link++) {
    int active = 0;
    trun_nvmlReturn_t rc = f->nvlink_state(dev, link, &active);
    if (rc == TRUN_NVML_ERROR_INVALID_ARGUMENT || (link > 0 && rc == TRUN_NVML_ERROR_NOT_SUPPORTED)) {
      if (link == 0) h->nvlink_rc = TRUN_NVML_ERROR_NOT_SUPPORTED; /* no link 0: no NVLink */
      break;
    }
    if (rc != TRUN_NVML_SUCCESS) {
      if (link == 0) h->nvlink_rc = rc_of(rc);
      if (link == 0 || rc == TRUN_NVML_ERROR_GPU_IS_LOST) return;
      continue;
    }
    h->nvlink_rc = 0;
    h->nvlink_links++;
    if (!active && link < 64) h->nvlink_down_mask |= 1ULL << link;
  }
}

static void read_recovery(const trun__gpu_health_fns *f, trun_nvmlDevice_t dev, trun_gpu_health *h) {
  if (!f->field_values) return;
  trun_nvmlFieldValue_t v;
  memset(&v, 0, sizeof(v));
  v.fieldId = TRUN_NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
  trun_nvmlReturn_t rc = f->field_values(dev, 1, &v);
  if (rc == TRUN_NVML_SUCCESS) rc = v.nvmlReturn;
  if (rc == TRUN_NVML_ERROR_INVALID_ARGUMENT)
    rc = TRUN_NVML_ERROR_NOT_SUPPORTED; /* a field it does not know */
  h->recovery_rc = rc_of(rc);
  if (rc == TRUN_NVML_SUCCESS) h->recovery_action = v.value.uiVal;
}

void trun__gpu_health_read(const trun__gpu_health_fns *f, trun_nvmlDevice_t dev, trun_gpu_health *h) {
  memset(h, 0, sizeof(*h));
  h->probed = 1;
  h->remap_rc = h->retired_rc = h->ecc_rc = h->clocks_rc = TRUN_HF_MISSING;
  h->pcie_rc = h->nvlink_rc = h->recovery_rc = TRUN_HF_MISSING;
  if (f->remapped_rows)
    h->remap_rc =
        rc_of(f->remapped_rows(dev, &h->remap_corr, &h->remap_unc, &h->remap_pending, &h->remap_failure));
  if (f->retired_pending) h->retired_rc = rc_of(f->retired_pending(dev, &h->retired_pending));
  if (f->total_ecc)
    h->ecc_rc = rc_of(f->total_ecc(dev, TRUN_NVML_MEMORY_ERROR_TYPE_UNCORRECTED, TRUN_NVML_VOLATILE_ECC,
                                   &h->ecc_volatile_unc));
  if (f->clock_reasons) h->clocks_rc = rc_of(f->clock_reasons(dev, &h->clock_reasons));
  read_pcie(f, dev, h);
  read_nvlinks(f, dev, h);
  read_recovery(f, dev, h);
}
