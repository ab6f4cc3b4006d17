/* The workers' torchrun variables (round_vars.h): the one place their names are spelled. */
#include "round_vars.h"

#include <string.h>

enum {
  R = TRUN_RV_PER_ROUND,
  K = TRUN_RV_RANKS,
  M = TRUN_RV_MASTER,
  S = TRUN_RV_SHOWN,
  W = TRUN_RV_WARM,
  P = TRUN_RV_PREFIX,
};

const trun_round_var trun_round_vars[TRUN_RV_COUNT] = {
    [TRUN_RV_LOCAL_RANK] = {"LOCAL_RANK", R | S | W},
    [TRUN_RV_RANK] = {"RANK", R | K | S | W},
    [TRUN_RV_GROUP_RANK] = {"GROUP_RANK", R | K | S | W},
    [TRUN_RV_ROLE_RANK] = {"ROLE_RANK", R | K | S | W},
    [TRUN_RV_ROLE_NAME] = {"ROLE_NAME", R | S | W},
    [TRUN_RV_LOCAL_WORLD_SIZE] = {"LOCAL_WORLD_SIZE", R | S | W},
    [TRUN_RV_WORLD_SIZE] = {"WORLD_SIZE", R | K | S | W},
    [TRUN_RV_GROUP_WORLD_SIZE] = {"GROUP_WORLD_SIZE", R | K | S | W},
    [TRUN_RV_ROLE_WORLD_SIZE] = {"ROLE_WORLD_SIZE", R | K | S | W},
    [TRUN_RV_MASTER_ADDR] = {"MASTER_ADDR", R | M | S | W},
    [TRUN_RV_MASTER_PORT] = {"MASTER_PORT", R | M | S | W},
    [TRUN_RV_RESTART_COUNT] = {"TORCHELASTIC_RESTART_COUNT", R | S | W},
    [TRUN_RV_MAX_RESTARTS] = {"TORCHELASTIC_MAX_RESTARTS", R | S | W},
    [TRUN_RV_RUN_ID] = {"TORCHELASTIC_RUN_ID", R | S | W},
    /* whether the workers' store is the agent's: decided with the master */
    [TRUN_RV_USE_AGENT_STORE] = {"TORCHELASTIC_USE_AGENT_STORE", R | M | S | W},
    [TRUN_RV_NCCL_ASYNC_ERROR_HANDLING] = {"TORCH_NCCL_ASYNC_ERROR_HANDLING", R | S | W},
    [TRUN_RV_ERROR_FILE] = {"TORCHELASTIC_ERROR_FILE", R | S | W},
    /* set once for all rounds (trun_agent_env), as torchrun >= 2.9 exports it */
    [TRUN_RV_SIGNALS_TO_HANDLE] = {"TORCHELASTIC_SIGNALS_TO_HANDLE", S | W},
    /* 1 when unset and more than one worker (trun_agent_env); torch reads it at import: not warm */
    [TRUN_RV_OMP_NUM_THREADS] = {"OMP_NUM_THREADS", S},
    /* per round only with --virtual-local-rank (the worker's one GPU); the pool is started with the same */
    [TRUN_RV_CUDA_VISIBLE_DEVICES] = {"CUDA_VISIBLE_DEVICES", R | S},
    /* the job's own NCCL RAS port, reserved once by the agent (agent_rasport.c) */
    [TRUN_RV_NCCL_RAS_ADDR] = {"NCCL_RAS_ADDR", S},
    /* --nccl-report's, per round; read by NCCL when the worker runs, never at import */
    [TRUN_RV_NCCL_DEBUG] = {"NCCL_DEBUG", W},
    [TRUN_RV_NCCL_DEBUG_SUBSYS] = {"NCCL_DEBUG_SUBSYS", W},
    [TRUN_RV_NCCL_DEBUG_FILE] = {"NCCL_DEBUG_FILE", W},
    /* torch reads every TORCHELASTIC_* variable when the worker runs, the launching environment's too */
    [TRUN_RV_TORCHELASTIC_ANY] = {"TORCHELASTIC_", W | P},
};

const char *trun_round_var_name(trun_round_var_id id) { return trun_round_vars[id].name; }

unsigned trun_round_var_flags(const char *name) {
  size_t n = strcspn(name, "=");
  unsigned flags = 0;
  for (size_t i = 0; i < TRUN_RV_COUNT; i++) {
    const trun_round_var *v = &trun_round_vars[i];
    size_t len = strlen(v->name);
    if (v->flags & TRUN_RV_PREFIX ? n > len && strncmp(name, v->name, len) == 0
                                  : n == len && strncmp(name, v->name, n) == 0)
      flags |= v->flags;
  }
  return flags;
}
