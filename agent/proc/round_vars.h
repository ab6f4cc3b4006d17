/* The workers' torchrun variables (torchrun's contract: LOCAL_RANK, RANK, ..., TORCHELASTIC_*), in one
 * table: round_vars.c is the only place their names are spelled. Each row says what its users need: whether
 * trun_worker_envp (agent/worker_env.c) sets it for every worker of every round, whether its value waits for
 * the rendezvous (the ranks or the master), whether --dry-run shows it (agent/agent_dryrun.c) and whether a
 * warm worker takes it from the round rather than from its pool process's start (warm.c). A row is found by
 * its trun_round_var_id, so a value is paired with its name at compile time. */
#ifndef TRUN_ROUND_VARS_H
#define TRUN_ROUND_VARS_H

/* The rows, in the order trun_worker_envp sets them (torchrun's worker_env, then its error file) and
 * --dry-run shows them. */
typedef enum {
  TRUN_RV_LOCAL_RANK,
  TRUN_RV_RANK,
  TRUN_RV_GROUP_RANK,
  TRUN_RV_ROLE_RANK,
  TRUN_RV_ROLE_NAME,
  TRUN_RV_LOCAL_WORLD_SIZE,
  TRUN_RV_WORLD_SIZE,
  TRUN_RV_GROUP_WORLD_SIZE,
  TRUN_RV_ROLE_WORLD_SIZE,
  TRUN_RV_MASTER_ADDR,
  TRUN_RV_MASTER_PORT,
  TRUN_RV_RESTART_COUNT,
  TRUN_RV_MAX_RESTARTS,
  TRUN_RV_RUN_ID,
  TRUN_RV_USE_AGENT_STORE,
  TRUN_RV_NCCL_ASYNC_ERROR_HANDLING,
  TRUN_RV_ERROR_FILE,
  TRUN_RV_SIGNALS_TO_HANDLE,
  TRUN_RV_OMP_NUM_THREADS,
  TRUN_RV_CUDA_VISIBLE_DEVICES,
  TRUN_RV_NCCL_RAS_ADDR,
  TRUN_RV_NCCL_DEBUG,
  TRUN_RV_NCCL_DEBUG_SUBSYS,
  TRUN_RV_NCCL_DEBUG_FILE,
  TRUN_RV_TORCHELASTIC_ANY,
  TRUN_RV_COUNT
} trun_round_var_id;

/* What a row's variable is to its users (OR'ed in trun_round_var.flags). */
enum {
  TRUN_RV_PER_ROUND = 1 << 0, /* trun_worker_envp sets it for each worker of each round */
  TRUN_RV_RANKS = 1 << 1,     /* its value comes from the ranks: unknown before the rendezvous */
  TRUN_RV_MASTER = 1 << 2,    /* its value comes from the master: unknown before the rendezvous */
  TRUN_RV_SHOWN = 1 << 3,     /* --dry-run shows it for each local rank */
  TRUN_RV_WARM = 1 << 4,      /* a warm worker takes it from the round: its pool process may differ */
  TRUN_RV_PREFIX = 1 << 5,    /* the name is a prefix: the row is every longer name that starts with it */
};

typedef struct {
  const char *name;
  unsigned flags;
} trun_round_var;

/* The table, indexed by trun_round_var_id (TRUN_RV_COUNT rows). */
extern const trun_round_var trun_round_vars[TRUN_RV_COUNT];

/* Row id's variable name. */
const char *trun_round_var_name(trun_round_var_id id);
/* The flags of environment variable NAME (with or without "=value"): those of its row and of every prefix
 * row that it extends; 0 when the table has none. */
unsigned trun_round_var_flags(const char *name);

#endif
