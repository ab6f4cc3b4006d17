# trun — a torchrun peer in C.  `make` builds into build/; `make check` installs what is missing and runs
# every test; `make demo` runs a 2-worker gloo job; `make bench` compares with torch (never part of check).

CC      ?= cc
CLANG   ?= clang
OPT     ?= -O2 -g
B       := build
PKGS    := libuv jansson yaml-0.1 libcurl
CSTD    := -std=c17 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes
# libcurl: headers only; agent/curl_dl.c loads it at run time (linked, it would add ~6 MiB to every agent).
LINK_PKGS := libuv jansson yaml-0.1
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(LINK_PKGS) 2>/dev/null) -ldl
CURL_LIBS  = $(shell pkg-config --libs libcurl 2>/dev/null)
CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   = $(shell pkg-config --libs check 2>/dev/null)
INC     := -Istore -Iagent -Ilauncher -Iconfig
CFLAGS_ALL = $(CSTD) $(OPT) $(INC) $(PKG_CFLAGS) $(CFLAGS)
Q       ?= @
SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
export TRUN_CHROOT ?= /var/cache/trun/trixie

# The store library: everything in store/ but the trun-store command's own files.
STORE_TOOL := store/main.c store/serve.c store/bench.c store/cli.c store/tool.c
STORE_SRC  := $(filter-out $(STORE_TOOL),$(wildcard store/*.c))
# Everything else but the programs' main files: the agent and the launcher.
LIB_SRC    := $(STORE_SRC) $(wildcard agent/*.c) $(filter-out launcher/main.c,$(wildcard launcher/*.c)) $(wildcard config/*.c)
HEADERS    := $(wildcard store/*.h agent/*.h launcher/*.h config/*.h)
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
ASAN_BIN   := $(UNIT_SRC:tests/unit/%.c=$(B)/asan/%)

# Keep the sanitizer objects between runs (make would delete them as intermediate files).
.SECONDARY:
.PHONY: all deps check unit asan integration fuzz fuzz-short chaos bench bench-deps demo format clean pkgcheck portable
all: pkgcheck $(B)/trun $(B)/trun-store $(UNIT_BIN)

pkgcheck:
	@pkg-config --exists $(PKGS) check || { echo "make: missing libraries ($(PKGS) check); run 'make deps' (installs them from Debian)" >&2; exit 2; }

$(B)/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_ALL) -c $< -o $@

$(B)/asanobj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	@echo "  CC-SAN  $<"
	$(Q)$(CC) $(CSTD) -O1 -g $(SAN) $(INC) $(PKG_CFLAGS) $(CHECK_CFLAGS) -c $< -o $@

$(B)/libtrun.a: $(LIB_SRC:%.c=$(B)/obj/%.o)
	@rm -f $@
	ar rcs $@ $^

$(B)/trun: $(B)/obj/launcher/main.o $(B)/libtrun.a
	$(CC) $(OPT) -o $@ $^ $(PKG_LIBS) -lpthread -lm

$(B)/trun-store: $(STORE_TOOL:%.c=$(B)/obj/%.o) $(B)/libtrun.a
	$(CC) $(OPT) -o $@ $^ $(PKG_LIBS) -lpthread -lm

$(B)/tests/%: tests/unit/%.c $(B)/libtrun.a tests/unit/unit.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(CHECK_CFLAGS) -Itests/unit -o $@ $< $(B)/libtrun.a $(PKG_LIBS) $(CURL_LIBS) $(CHECK_LIBS) -lpthread -lm

$(B)/asan/%: tests/unit/%.c $(LIB_SRC:%.c=$(B)/asanobj/%.o) tests/unit/unit.h
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) -O1 -g $(SAN) $(INC) -Itests/unit $(PKG_CFLAGS) $(CHECK_CFLAGS) -o $@ $< \
	  $(LIB_SRC:%.c=$(B)/asanobj/%.o) $(PKG_LIBS) $(CURL_LIBS) $(CHECK_LIBS) -lpthread -lm

# The library is compiled once for every fuzz target (instrumented, not linked with libFuzzer's main).
FUZZ_SAN := -fsanitize=address,undefined
$(B)/fuzzobj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	@echo "  CC-FUZZ $<"
	$(Q)$(CLANG) $(CSTD) -O1 -g -fsanitize=fuzzer-no-link $(FUZZ_SAN) $(INC) $(PKG_CFLAGS) -c $< -o $@

$(B)/fuzz/%: fuzz/%.c fuzz/fuzz_check.h $(LIB_SRC:%.c=$(B)/fuzzobj/%.o) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CLANG) $(CSTD) -O1 -g -fsanitize=fuzzer $(FUZZ_SAN) $(INC) $(PKG_CFLAGS) -o $@ $< \
	  $(LIB_SRC:%.c=$(B)/fuzzobj/%.o) $(PKG_LIBS) -lpthread -lm

deps:
	@scripts/deps.sh
	@scripts/chroot.sh
	@scripts/deps-k8s.sh
	@scripts/deps-sched.sh

unit: all
	@scripts/run-unit.sh $(UNIT_BIN)

asan: pkgcheck $(ASAN_BIN)
	@ASAN_OPTIONS=detect_leaks=1 scripts/run-unit.sh $(ASAN_BIN)

FUZZ_BIN := $(patsubst fuzz/%.c,$(B)/fuzz/%,$(wildcard fuzz/fuzz_*.c))
fuzz-short: pkgcheck $(FUZZ_BIN)
	@scripts/fuzz.sh 15 $(FUZZ_BIN)

fuzz: pkgcheck $(FUZZ_BIN)
	@scripts/fuzz.sh $${FUZZ_SECONDS:-600} $(FUZZ_BIN)

integration: all
	@tests/run-integration.sh

# The chaos suite's long run (not part of check, which runs its short version, test 57: each of the 8 round
# kinds once): CHAOS_ROUNDS rounds (every kind, then random kinds), 2 workers per node; CHAOS_SEED repeats a run.
chaos: all
	@CHAOS_ROUNDS=$${CHAOS_ROUNDS:-16} CHAOS_NPROC=$${CHAOS_NPROC:-2} TRUN_TEST_TIMEOUT=3600 TRUN_TESTS=57-chaos \
	  tests/run-integration.sh

check: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory asan
	@$(MAKE) --no-print-directory fuzz-short
	@$(MAKE) --no-print-directory integration

bench: deps bench-deps
	@$(MAKE) --no-print-directory all
	@bench/run.sh

# matplotlib for bench/plots.py (bench only: `make check` does not need it).
bench-deps:
	@scripts/deps.sh python3-matplotlib

demo:
	@scripts/deps.sh
	@$(MAKE) --no-print-directory pkgcheck $(B)/trun
	@scripts/demo.sh

# Binaries for a machine without libuv / jansson (the GPU box): those two linked in statically.
STATIC_LIBS := -Wl,-Bstatic -luv_a -ljansson -lyaml -Wl,-Bdynamic -lpthread -ldl -lrt -lm
portable: pkgcheck $(B)/obj/launcher/main.o $(STORE_TOOL:%.c=$(B)/obj/%.o) $(B)/obj/tools/topo.o $(B)/obj/tools/topo_preflight.o $(B)/obj/tools/preflight.o $(B)/libtrun.a
	@mkdir -p $(B)/portable
	$(CC) $(OPT) -o $(B)/portable/trun-topo $(B)/obj/tools/topo.o $(B)/obj/tools/topo_preflight.o $(B)/libtrun.a $(STATIC_LIBS)
	$(CC) $(OPT) -o $(B)/portable/trun-preflight $(B)/obj/tools/preflight.o $(B)/libtrun.a $(STATIC_LIBS)
	$(CC) $(OPT) -o $(B)/portable/trun $(B)/obj/launcher/main.o $(B)/libtrun.a $(STATIC_LIBS)
	$(CC) $(OPT) -o $(B)/portable/trun-store $(STORE_TOOL:%.c=$(B)/obj/%.o) $(B)/libtrun.a $(STATIC_LIBS)

# trun-topo: the node's GPUs, EFA devices and links as trun sees them; and the fake NVML library the
# discovery tests load through TRUN_NVML_LIBRARY.
all: $(B)/trun-topo $(B)/trun-preflight $(B)/libnvidia-ml-fake.so $(B)/libcuda-nccl-fake.so
asan: $(B)/libnvidia-ml-fake.so $(B)/libcuda-nccl-fake.so

$(B)/trun-topo: $(B)/obj/tools/topo.o $(B)/obj/tools/topo_preflight.o $(B)/libtrun.a
	$(CC) $(OPT) -o $@ $(B)/obj/tools/topo.o $(B)/obj/tools/topo_preflight.o $(B)/libtrun.a $(PKG_LIBS) -ldl -lpthread -lm

# trun-preflight: the NCCL all-reduce check (libcudart / libnccl by dlopen at run time; nothing to link).
$(B)/trun-preflight: $(B)/obj/tools/preflight.o $(B)/libtrun.a
	$(CC) $(OPT) -o $@ $(B)/obj/tools/preflight.o $(B)/libtrun.a $(PKG_LIBS) -ldl -lpthread -lm

# The fake CUDA runtime + NCCL the preflight and discovery tests load through TRUN_CUDART_LIBRARY /
# TRUN_NCCL_LIBRARY.
$(B)/libcuda-nccl-fake.so: tests/fakes/cuda_nccl_shim.c
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(OPT) -shared -fPIC $(PKG_CFLAGS) -o $@ $< $(PKG_LIBS)

# trun-rdzv-bench: many rendezvous agents in one process (tests and make bench).
all: $(B)/trun-rdzv-bench
$(B)/trun-rdzv-bench: $(B)/obj/tools/rdzv_bench.o $(B)/libtrun.a
	$(CC) $(OPT) -o $@ $(B)/obj/tools/rdzv_bench.o $(B)/libtrun.a $(PKG_LIBS) -ldl -lpthread -lm

$(B)/libnvidia-ml-fake.so: tests/fakes/nvml_shim.c agent/nvml.h
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(OPT) -shared -fPIC -Iagent $(PKG_CFLAGS) -o $@ $< $(PKG_LIBS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(B)
