/* hang: hangs named in seconds from the job's collectives, not only its processes. NCCL (2.24 and later) runs
 * RAS in every process of a job; any one answers on NCCL_RAS_ADDR (default localhost:28028) with every
 * communicator's ranks, pids, hosts, GPUs and per-collective operation counts, job-wide. This module holds:
 *  - the RAS client (ras_client.c): CLIENT PROTOCOL 2, TIMEOUT, SET FORMAT json (NCCL 2.28.7+), VERBOSE
 * STATUS, one connection, bounded in bytes and time; "nothing answers" is an answer of its own
 * (-ECONNREFUSED);
 *  - finding a job's RAS address on this host (ras_find.c): the NCCL_RAS_ADDR values in processes'
 *    environments;
 *  - the RAS JSON reader (ras_json.c): the answer as typed communicators and ranks, every lie a named error;
 *  - the detector (detect.c): a pure state machine fed timestamped snapshots that calls a communicator hung
 *    when its counts stop moving while its ranks disagree (some behind, some missing) for a window, and names
 *    the culprit ranks and what the others wait in;
 *  - the flight-recorder reader (fr.c): torch's per-rank dump (a pickle, format 2.x) as its last completed,
 *    started and scheduled collectives and the Python frames of its last entry.
 * Nothing here talks to the agent's loop; the agent polls (see docs/architecture.md).
 * May use: base. */
#ifndef TRUN_HANG_H
#define TRUN_HANG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the RAS client ---------------------------------------------------------------------------- */

#define TRUN_RAS_DEFAULT_ADDR "localhost:28028"
#define TRUN_RAS_MAX_ANSWER (4u << 20) /* bytes of one answer we read at most */

/* Where the job's RAS listens: NCCL_RAS_ADDR in the workers' environment envp (NULL-terminated, or NULL),
 * else localhost:28028. */
const char *trun_ras_addr(char *const *envp);
/* Splits "host:port" / "[v6]:port" (port 1..65535) into host (brackets dropped) and port text: 0 or -EINVAL.
 */
int trun_ras_split_addr(const char *addr, char *host, size_t hostlen, char *port, size_t portlen);

/* Asks the RAS at addr ("host:port", "[v6addr]:port") for its verbose status in JSON: connects
 * (non-blocking), sends CLIENT PROTOCOL 2, TIMEOUT <s> (RAS's own time to gather the job's answers, a little
 * under timeout_ms), SET FORMAT json and VERBOSE STATUS, and reads until the server closes, all within
 * timeout_ms (100..600000) and max_bytes (1 KiB..TRUN_RAS_MAX_ANSWER; 0: TRUN_RAS_MAX_ANSWER). On success
 * *json is the JSON document (NUL-terminated, free()) and *n its length. Returns 0, or with err (errlen
 * bytes) saying what happened: -ECONNREFUSED (nothing listens there: no NCCL job on this node, or RAS off),
 * -ETIMEDOUT (no full answer in time), -E2BIG (answer over max_bytes), -EPROTO (not a RAS server, an ERROR
 * line, or an NCCL too old to answer in JSON), -EINVAL (a bad address or argument), -ENOMEM, or another
 * -errno of a system call. */
int trun_ras_query(const char *addr, int timeout_ms, size_t max_bytes, char **json, size_t *n, char *err,
                   size_t errlen);

/* ---- finding a job's RAS on this host ---------------------------------------------------------- */

#define TRUN_RAS_FIND_MAX_ENVIRON (1u << 20) /* bytes of one process's environment read at most */

/* One NCCL_RAS_ADDR that processes of this host were given (trun gives each job's workers a port of the
 * job's own), with what else their environments say. */
typedef struct trun_ras_found {
  char addr[64];   /* the address, as given */
  char run_id[64]; /* TORCHELASTIC_RUN_ID of the first such process that has one ("" none) */
  long pid;        /* the lowest pid with this address */
  int nprocs;      /* how many processes have it */
} trun_ras_found;

/* Reads proc/<pid>/environ (proc: "/proc") of every process this user may read, skipping the pid skip (this
 * process), and gathers their NCCL_RAS_ADDR values: one entry per address, in the order of their lowest
 * pids. A process whose environment is longer than TRUN_RAS_FIND_MAX_ENVIRON is read that far; a value over
 * 63 bytes, with a control character, or not on the loopback (127.0.0.0/8, [::1], localhost) is left out.
 * Returns how many entries are in out (at most n) and sets *more when there were others (out then holds the
 * addresses of the lowest pids); -errno when proc cannot be read. */
long trun_ras_find(const char *proc, long skip, trun_ras_found *out, size_t n, int *more);

/* ---- the RAS JSON reader ----------------------------------------------------------------------- */

#define TRUN_RAS_MAX_KINDS 16      /* collective kinds per rank (NCCL 2.28 has 5) */
#define TRUN_RAS_MAX_COMMS 4096    /* communicators per answer */
#define TRUN_RAS_MAX_SIZE 1048576  /* ranks per communicator */
#define TRUN_RAS_MAX_RANKS 1048576 /* rank records per answer, present and missing together */

typedef struct trun_ras_count {
  char name[24]; /* "AllReduce", "Broadcast", ... as NCCL names them */
  uint64_t n;    /* operations of that kind this rank has launched */
} trun_ras_count;

typedef struct trun_ras_rank {
  int rank;
  char host[64]; /* as RAS gives it: the process's IP address; "unknown" when RAS does not know */
  long pid;      /* -1: unknown */
  int cuda_dev, nvml_dev;
  bool missing;      /* listed under missing_ranks: RAS got no answer for it (its counts are unknown) */
  bool unresponsive; /* missing: its process did not answer RAS */
  bool dead;         /* missing: RAS considers its process dead */
  int init_state, async_error;
  bool finalize_called, destroy_flag, abort_flag;
  size_t nkinds;
  trun_ras_count counts[TRUN_RAS_MAX_KINDS];
} trun_ras_rank;

typedef struct trun_ras_comm {
  char hash[24];      /* "0x326111d269af5c41" */
  char secondary[48]; /* "0x4ab1...:0x7983..." (the creator's host and pid hashes), "" when absent */
  int size;           /* ranks in the communicator */
  size_t nranks;      /* records: present ones first, then missing ones (ranks_count + missing_ranks_count) */
  size_t npresent;
  trun_ras_rank *ranks;
} trun_ras_comm;

typedef struct trun_ras_snapshot {
  char nccl_version[32];
  int timeouts; /* ras.timeouts_count: legs of RAS's own gathering that timed out */
  size_t ncomms;
  trun_ras_comm *comms;
} trun_ras_snapshot;

/* Reads one RAS JSON answer (p[0..n), at most TRUN_RAS_MAX_ANSWER bytes). Returns 0 and *out (free with
 * trun_ras_snapshot_free), or -EINVAL (malformed or lying: err names the field, communicator and rank),
 * -E2BIG (over a limit above), -ENOMEM. Lies caught: counts disagreeing with the arrays, a rank outside
 * 0..size-1 or listed twice, a communicator listed twice, more records than its size, negative counts,
 * wrong types, strings over their fields. */
int trun_ras_parse(const char *p, size_t n, trun_ras_snapshot **out, char *err, size_t errlen);
void trun_ras_snapshot_free(trun_ras_snapshot *s);

/* ---- the detector ------------------------------------------------------------------------------ */

#define TRUN_HANG_DEFAULT_WINDOW_S 15.0
#define TRUN_HANG_MAX_CULPRITS 64 /* named per communicator; more are counted */

typedef struct trun_hang_culprit {
  int rank;
  long pid;
  char host[64];
  int cuda_dev;
  char why[160]; /* "launched AllReduce up to 50, Broadcast up to 1" or "missing from RAS (unresponsive)" */
} trun_hang_culprit;

typedef struct trun_hang_comm {
  char hash[24];
  int size;
  double frozen_s;    /* how long its counts have not moved (at least the window) */
  char wait_kind[24]; /* what the other ranks wait in: the collective kind ... */
  uint64_t wait_n;    /* ... and its count (the operation they launched and the culprits did not) */
  size_t nwaiters;    /* ranks that wait there */
  size_t nculprits;   /* culprits found (only the first TRUN_HANG_MAX_CULPRITS are in culprit[]) */
  trun_hang_culprit culprit[TRUN_HANG_MAX_CULPRITS];
  char line[512]; /* one line for people: "communicator 0x.. (4 ranks) hung for 15 s: rank 3 (pid 907 on
                     192.0.2.2, GPU 3) launched AllReduce up to 50; ranks 0-2 wait in AllReduce 51" */
} trun_hang_comm;

typedef struct trun_hang_verdict {
  size_t ncomms;        /* hung communicators in comm[] */
  size_t nfresh;        /* of them, newly hung at this snapshot (the first ones in comm[]) */
  trun_hang_comm *comm; /* free with trun_hang_verdict_clear */
} trun_hang_verdict;

typedef struct trun_hang_detector trun_hang_detector;

/* window_s: how long counts must stand still while ranks disagree (0: the default; 1..3600). NULL on ENOMEM
 * or a bad window. */
trun_hang_detector *trun_hang_new(double window_s);
void trun_hang_free(trun_hang_detector *d);

/* Feeds one snapshot taken at monotonic time t (seconds; t before the last feed is taken as the last). Fills
 * *v (cleared first) with the communicators hung now and returns their count (>= 0), or -ENOMEM. Advancing
 * counts, or frozen counts on which every rank agrees (an idle job, a GPU kernel that spins before the
 * collective), are never a hang. A communicator absent from the snapshot is forgotten. */
int trun_hang_feed(trun_hang_detector *d, const trun_ras_snapshot *s, double t, trun_hang_verdict *v);
/* The longest time (seconds, up to the last feed) that a communicator of the last snapshot has had equal
 * counts that did not move: an idle job, or every rank waiting in the same collective (0: none). */
double trun_hang_quiet_s(const trun_hang_detector *d);
/* A feed of "nothing answered" (RAS not up or the job gone): forgets every communicator. */
void trun_hang_reset(trun_hang_detector *d);
void trun_hang_verdict_clear(trun_hang_verdict *v);

/* ---- the flight-recorder reader ---------------------------------------------------------------- */

#define TRUN_FR_MAX_FILE (64u << 20) /* bytes of one dump */
#define TRUN_FR_MAX_FRAMES 64        /* Python frames kept of the last entry */

typedef struct trun_fr_frame {
  char *file;
  char *name;
  long line;
} trun_fr_frame;

/* One collective the dump holds (the last one in each state is kept). */
typedef struct trun_fr_op {
  bool present;
  int64_t seq; /* collective_seq_id (p2p_seq_id for point-to-point) */
  bool p2p;
  char *name; /* profiling_name: "nccl:all_reduce" */
  char *pg;   /* the process group's name, "" when absent */
} trun_fr_op;

typedef struct trun_fr_dump {
  char version[16];          /* "2.10" */
  char comm_lib_version[32]; /* "2.28.9", "" when absent */
  size_t nentries;
  /* From pg_status, the default group's (or the first group's) numbers; -1 when absent. */
  int64_t last_enqueued, last_started, last_completed;
  /* From the entries: the last completed, started and scheduled collective. */
  trun_fr_op completed, started, scheduled;
  trun_fr_op last;  /* the last entry, whatever its state */
  char *last_state; /* its state: "scheduled", "started", "completed" */
  char *last_sizes; /* its input sizes as text, "[[1048576]]" ("" when absent or of another shape) */
  size_t nframes;   /* its Python frames, innermost first, at most TRUN_FR_MAX_FRAMES */
  trun_fr_frame *frames;
} trun_fr_dump;

/* Reads one dump from p[0..n). Returns 0 and *out (free with trun_fr_free), or -EINVAL (not a pickle, not a
 * dump of format 2.x, a field of the wrong type: err says which and where), -E2BIG, -ENOMEM. */
int trun_fr_parse(const uint8_t *p, size_t n, trun_fr_dump **out, char *err, size_t errlen);
/* The same from a file a worker wrote (not followed if a symbolic link, a regular file, at most
 * TRUN_FR_MAX_FILE bytes); -errno of open/read too, with the path in err. */
int trun_fr_load_file(const char *path, trun_fr_dump **out, char *err, size_t errlen);
void trun_fr_free(trun_fr_dump *d);

/* ---- asking a job's ranks for their dumps ------------------------------------------------------ */

#define TRUN_FR_MAX_RANKS 1024 /* ranks asked and summarised at once (a node's workers) */

typedef struct trun_fr_rank {
  int rank;           /* the global rank (torch names its files and pipes by it) */
  trun_fr_dump *dump; /* what it dumped, NULL when nothing usable came */
  char why[200];      /* no dump: why, in words */
} trun_fr_rank;

/* Asks each rank of out[0..n) (rank set by the caller) for a fresh dump through torch's dump pipe and
 * collects it: writes one byte to <pipe_prefix><rank>.pipe (TORCH_NCCL_DEBUG_INFO_PIPE_FILE; a FIFO only,
 * opened non-blocking and not followed if a link: no reader means no flight recorder listens) when
 * pipe_prefix is not NULL, then waits up to timeout_ms (100..600000) for <dump_prefix><rank> (torch's
 * TORCH_FR_DUMP_TEMP_FILE) to change from what it was before and to read as a whole dump (torch writes it
 * in place). pipe_prefix NULL: reads the dumps there now, changed or not. Fills out[i].dump or out[i].why;
 * returns how many dumps were read. Bounded: TRUN_FR_MAX_FILE per file, timeout_ms in all. */
size_t trun_fr_probe(const char *dump_prefix, const char *pipe_prefix, trun_fr_rank *out, size_t n,
                     int timeout_ms);
void trun_fr_ranks_clear(trun_fr_rank *r, size_t n);

/* One line (at most len - 1 bytes, NUL-terminated) of what r[0..n)'s dumps say together: the ranks grouped
 * by their newest entry, "ranks 0-2: nccl:all_reduce #51 scheduled [[1048576]] (train.py:15); rank 3:
 * nccl:broadcast #51 scheduled [[1048576]] (train.py:13): mismatched", with a group whose newest
 * collective is older than the largest group's marked "behind", one whose collective or sizes differ at the
 * same number "mismatched", and ranks without a dump with their why. r sorted by rank. Returns the length. */
size_t trun_fr_summarize(const trun_fr_rank *r, size_t n, char *out, size_t len);

/* Every rank in NCCL, RAS counts equal and frozen: a and b are two probes of the same ranks (same order) some
 * seconds apart. Returns 1 (hung) when every rank has a dump in both and its newest entry is the same
 * collective, not completed, in both; 0 otherwise (an idle job has completed its newest entry; a job that
 * moved; a rank without a dump). On 1, line (len bytes) says it for people, and culprit[0..*nculprit) (room
 * for n) gets the ranks whose collective is "scheduled" while others' is "started"
 * (TORCH_NCCL_ENABLE_TIMING=1 records starts): their GPU never began it. No such split: *nculprit 0, "culprit
 * unknown". */
int trun_fr_spin(const trun_fr_rank *a, const trun_fr_rank *b, size_t n, int *culprit, size_t *nculprit,
                 char *line, size_t len);

#endif
