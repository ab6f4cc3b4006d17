# trun — a torchrun peer in C.  `make` builds into build/; `make check` installs what is missing and runs
# every test; `make demo` runs a 2-worker gloo job; `make bench` compares with torch (never part of check).

CC      ?= cc
CLANG   ?= clang
OPT     ?= -O2 -g
B       := build
PKGS    := libuv jansson yaml-0.1 libcurl
CSTD    := -std=c17 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes
# libcurl: headers only; agent/discover/curl_dl.c loads it at run time (linked, it would add ~6 MiB to every agent).
LINK_PKGS := libuv jansson yaml-0.1
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(LINK_PKGS) 2>/dev/null) -ldl
CURL_LIBS  = $(shell pkg-config --libs libcurl 2>/dev/null)
CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   = $(shell pkg-config --libs check 2>/dev/null)
# The modules (docs/architecture.md): each a folder, one public header named after it. Code includes another
# module's header by its path from the top (-I.); tests, fuzz targets and benches may also include a module's
# private headers by name.
MODULES := base store config agent/discover agent/proc agent/rdzv agent/nccl agent/observe agent/hang agent launcher
INC     := -I.
TEST_INC := -I. $(addprefix -I,$(MODULES)) -Itests/unit
CFLAGS_ALL = $(CSTD) $(OPT) $(INC) $(PKG_CFLAGS) $(CFLAGS)
Q       ?= @
SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
export TRUN_CHROOT ?= /var/cache/trun/trixie

# The trun-store program's files (tools/store*.c), beside trun-topo's and trun-preflight's.
STORE_TOOL := tools/store.c tools/store_serve.c tools/store_bench.c tools/store_cli.c tools/store_tool.c
# Every module but the programs' main files: base, the store library, the agent and the launcher.
LIB_SRC    := $(wildcard base/*.c store/*.c config/*.c agent/*.c agent/*/*.c agent/rdzv/*/*.c) $(filter-out launcher/main.c,$(wildcard launcher/*.c))
HEADERS    := $(wildcard base/*.h store/*.h config/*.h agent/*.h agent/*/*.h agent/rdzv/*/*.h launcher/*.h tools/*.h)
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
ASAN_BIN   := $(UNIT_SRC:tests/unit/%.c=$(B)/asan/%)

# Keep the sanitizer objects between runs (make would delete them as intermediate files).
.SECONDARY:
.PHONY: all deps check check-fresh layers unit asan integration fuzz fuzz-short chaos bench bench-deps demo format clean pkgcheck portable
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
	$(CC) $(CSTD) $(OPT) $(TEST_INC) $(PKG_CFLAGS) $(CFLAGS) $(CHECK_CFLAGS) -o $@ $< $(B)/libtrun.a $(PKG_LIBS) $(CURL_LIBS) $(CHECK_LIBS) -lpthread -lm

$(B)/asan/%: tests/unit/%.c $(LIB_SRC:%.c=$(B)/asanobj/%.o) tests/unit/unit.h
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) -O1 -g $(SAN) $(TEST_INC) $(PKG_CFLAGS) $(CHECK_CFLAGS) -o $@ $< \
	  $(LIB_SRC:%.c=$(B)/asanobj/%.o) $(PKG_LIBS) $(CURL_LIBS) $(CHECK_LIBS) -lpthread -lm

# The library is compiled once for every fuzz target (instrumented, not linked with libFuzzer's main).
FUZZ_SAN := -fsanitize=address,undefined
$(B)/fuzzobj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	@echo "  CC-FUZZ $<"
	$(Q)$(CLANG) $(CSTD) -O1 -g -fsanitize=fuzzer-no-link $(FUZZ_SAN) $(INC) $(PKG_CFLAGS) -c $< -o $@

$(B)/fuzz/%: fuzz/%.c fuzz/fuzz_check.h $(LIB_SRC:%.c=$(B)/fuzzobj/%.o) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CLANG) $(CSTD) -O1 -g -fsanitize=fuzzer $(FUZZ_SAN) $(TEST_INC) $(PKG_CFLAGS) -o $@ $< \
	  $(LIB_SRC:%.c=$(B)/fuzzobj/%.o) $(PKG_LIBS) -lpthread -lm

deps:
	@scripts/deps.sh
	@scripts/chroot.sh
	@scripts/deps-k8s.sh
	@scripts/deps-sched.sh
	@scripts/deps-podman.sh

# The module rules: an include of another module names its public header, and only a module the includer's
# public header lists under "May use" (scripts/check-layers.py; test 05 shows it rejects breaches).
layers:
	@scripts/check-layers.py --doc docs/architecture.md --calls

unit: all
	@scripts/run-unit.sh $(UNIT_BIN)

asan: pkgcheck $(ASAN_BIN)
	@ASAN_OPTIONS=detect_leaks=1 scripts/run-unit.sh $(ASAN_BIN)

FUZZ_BIN := $(patsubst fuzz/%.c,$(B)/fuzz/%,$(wildcard fuzz/fuzz_*.c))
# check's short run: FUZZ_SHORT_SECONDS per target, as many targets at a time as there are CPUs (scripts/fuzz.sh).
FUZZ_SHORT_SECONDS ?= 10
fuzz-short: pkgcheck $(FUZZ_BIN)
	@scripts/fuzz.sh $(FUZZ_SHORT_SECONDS) $(FUZZ_BIN)

fuzz: pkgcheck $(FUZZ_BIN)
	@scripts/fuzz.sh $${FUZZ_SECONDS:-600} $(FUZZ_BIN)

integration: all
	@tests/run-integration.sh

# The chaos suite's long run (not part of check, which runs its short version, test 57: each of the 8 round
# kinds once): CHAOS_ROUNDS rounds (every kind, then random kinds), 2 workers per node; CHAOS_SEED repeats a run.
chaos: all
	@CHAOS_ROUNDS=$${CHAOS_ROUNDS:-16} CHAOS_NPROC=$${CHAOS_NPROC:-2} TRUN_TEST_TIMEOUT=3600 TRUN_TESTS=57-chaos \
	  tests/run-integration.sh

# check's builds (the program, the ASan and fuzz builds) use every CPU (CHECK_JOBS; a -j given to make wins);
# the tests themselves run one at a time.
CHECK_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CHECK_J = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(CHECK_JOBS))
check: deps
	@$(MAKE) --no-print-directory $(CHECK_J) all
	@$(MAKE) --no-print-directory layers
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory $(CHECK_J) asan
	@$(MAKE) --no-print-directory $(CHECK_J) fuzz-short
	@$(MAKE) --no-print-directory integration

# All of `make check` in a fresh Debian bookworm root (debootstrap minbase + git + make, through an overlay): the
# honest test of the install steps. Not part of check; about 28 minutes on 2 CPUs. Log: build/check-fresh.log.
check-fresh:
	@scripts/check-fresh.sh

bench: deps bench-deps
	@$(MAKE) --no-print-directory all
	@bench/run.sh

# matplotlib for bench/plots.py (bench only: `make check` does not need it).
bench-deps:
	@scripts/deps.sh python3-matplotlib

demo:
	@scripts/deps.sh
	@$(MAKE) --no-print-directory pkgcheck $(B)/trun $(B)/trun-topo
	@scripts/demo.sh

# Binaries for a machine without libuv / jansson (the GPU box): those two linked in statically.
STATIC_LIBS := -Wl,-Bstatic -luv_a -ljansson -lyaml -Wl,-Bdynamic -lpthread -ldl -lrt -lm
TOPO_OBJ := $(B)/obj/tools/topo.o $(B)/obj/tools/topo_preflight.o $(B)/obj/tools/topo_health.o $(B)/obj/tools/topo_hang.o
portable: pkgcheck $(B)/obj/launcher/main.o $(STORE_TOOL:%.c=$(B)/obj/%.o) $(TOPO_OBJ) $(B)/obj/tools/preflight.o $(B)/libtrun.a
	@mkdir -p $(B)/portable
	$(CC) $(OPT) -o $(B)/portable/trun-topo $(TOPO_OBJ) $(B)/libtrun.a $(STATIC_LIBS)
	$(CC) $(OPT) -o $(B)/portable/trun-preflight $(B)/obj/tools/preflight.o $(B)/libtrun.a $(STATIC_LIBS)
	$(CC) $(OPT) -o $(B)/portable/trun $(B)/obj/launcher/main.o $(B)/libtrun.a $(STATIC_LIBS)
	$(CC) $(OPT) -o $(B)/portable/trun-store $(STORE_TOOL:%.c=$(B)/obj/%.o) $(B)/libtrun.a $(STATIC_LIBS)

# trun-topo: the node's GPUs, EFA devices and links as trun sees them; and the fake NVML library the
# discovery tests load through TRUN_NVML_LIBRARY.
all: $(B)/trun-topo $(B)/trun-preflight $(B)/libnvidia-ml-fake.so $(B)/libcuda-nccl-fake.so
asan: $(B)/libnvidia-ml-fake.so $(B)/libcuda-nccl-fake.so

$(B)/trun-topo: $(TOPO_OBJ) $(B)/libtrun.a
	$(CC) $(OPT) -o $@ $(TOPO_OBJ) $(B)/libtrun.a $(PKG_LIBS) -ldl -lpthread -lm

# trun-preflight: the NCCL all-reduce check (libcudart / libnccl by dlopen at run time; nothing to link).
$(B)/trun-preflight: $(B)/obj/tools/preflight.o $(B)/libtrun.a
	$(CC) $(OPT) -o $@ $(B)/obj/tools/preflight.o $(B)/libtrun.a $(PKG_LIBS) -ldl -lpthread -lm

# The fake CUDA runtime + NCCL the preflight and discovery tests load through TRUN_CUDART_LIBRARY /
# TRUN_NCCL_LIBRARY.
$(B)/libcuda-nccl-fake.so: tests/fakes/cuda_nccl_shim.c
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(OPT) -shared -fPIC $(PKG_CFLAGS) -o $@ $< $(PKG_LIBS)

# trun-rdzv-bench: many rendezvous agents in one process (tests and make bench); it drives the rendezvous
# protocols' private cores, so it is built with the test include path.
all: $(B)/trun-rdzv-bench
$(B)/trun-rdzv-bench: bench/rdzv_bench.c $(B)/libtrun.a $(HEADERS)
	$(CC) $(CSTD) $(OPT) $(TEST_INC) $(PKG_CFLAGS) -o $@ $< $(B)/libtrun.a $(PKG_LIBS) -ldl -lpthread -lm

$(B)/libnvidia-ml-fake.so: tests/fakes/nvml_shim.c agent/discover/nvml.h
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(OPT) -shared -fPIC -Iagent/discover $(PKG_CFLAGS) -o $@ $< $(PKG_LIBS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(B)

# ---- Version, install, release tarball, wheel, .deb (packaging/, docs/man/) ------------------------------
# The version lives in VERSION; the commit comes from git when this is a checkout (TRUN_COMMIT=... gives it
# where there is no .git, as in the release build). Only the programs' main files see them, through
# $(B)/gen/trun_version.h, which is rewritten only when its text changes: a new commit relinks, no more.
VERSION := $(shell cat VERSION 2>/dev/null)
ifeq ($(origin TRUN_COMMIT),undefined)
TRUN_COMMIT := $(shell [ -e .git ] && command -v git >/dev/null && \
  echo "$$(git rev-parse --short=12 HEAD 2>/dev/null)$$(git diff --quiet HEAD -- 2>/dev/null || echo -dirty)")
endif
VERSION_STRING := $(VERSION)$(if $(TRUN_COMMIT), (git $(TRUN_COMMIT)))
MAIN_OBJ := $(B)/obj/launcher/main.o $(B)/obj/tools/store.o $(B)/obj/tools/topo.o $(B)/obj/tools/preflight.o
$(MAIN_OBJ): $(B)/gen/trun_version.h
$(MAIN_OBJ): CFLAGS_ALL += -include $(B)/gen/trun_version.h
.PHONY: version-header
$(B)/gen/trun_version.h: version-header
	@mkdir -p $(dir $@)
	@[ -n "$(VERSION)" ] || { echo "make: no VERSION file at the top of the tree" >&2; exit 2; }
	@printf '/* Written by the Makefile from VERSION and git. */\n#define TRUN_VERSION_STRING "%s"\n' \
	  '$(VERSION_STRING)' >$@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

# Man pages (docs/man/*.1, hand-written roff) with the version and the date of the last commit filled in.
MAN_DATE  := $(shell git log -1 --format=%cs 2>/dev/null || date -r VERSION +%F 2>/dev/null)
MAN_PAGES := $(patsubst docs/man/%,$(B)/man/%,$(wildcard docs/man/*.1))
.PHONY: man install uninstall
man: $(MAN_PAGES)
$(B)/man/%.1: docs/man/%.1 VERSION
	@mkdir -p $(dir $@)
	@sed -e 's/@VERSION@/$(VERSION)/g' -e 's/@DATE@/$(MAN_DATE)/g' $< >$@

# make install [PREFIX=/usr/local] [DESTDIR=]: the four programs into PREFIX/bin, man pages into
# PREFIX/share/man/man1 (scripts/install.sh; a PREFIX that cannot be written is named and fails).
PREFIX  ?= /usr/local
DESTDIR ?=
INSTALL_PROGS := $(B)/trun $(B)/trun-store $(B)/trun-topo $(B)/trun-preflight
install: $(INSTALL_PROGS) $(MAN_PAGES)
	@scripts/install.sh install "$(DESTDIR)$(PREFIX)" $(B)
uninstall:
	@scripts/install.sh uninstall "$(DESTDIR)$(PREFIX)" $(B)

# ---- make release: dist/trun-VERSION-linux-x86_64.tar.gz (scripts/release.sh) ----------------------------
# Built in a cached Debian bullseye root (glibc 2.31) from this tree; libuv (bullseye's 1.40), jansson and
# libyaml static, glibc dynamic; no program may need a GLIBC_ version above 2.31 (scripts/glibc-check.sh).
# release-bin is what runs inside the root (B=/out there).
REL_OUT  := $(B)/release
REL_NAME := trun-$(VERSION)-linux-x86_64
TARBALL  := dist/$(REL_NAME).tar.gz
REL_SRC  := $(LIB_SRC) $(HEADERS) launcher/main.c $(STORE_TOOL) tools/topo.c tools/topo_preflight.c tools/topo_health.c \
            tools/preflight.c
.PHONY: release release-bin
release: $(TARBALL)
$(TARBALL): $(REL_SRC) $(B)/gen/trun_version.h $(MAN_PAGES) README.md LICENSE Makefile scripts/release.sh \
            scripts/root-run.sh packaging/bullseye-build.list
	@scripts/release.sh "$(VERSION)" "$(TRUN_COMMIT)" $(REL_OUT) $(B)/man

REL_CFLAGS  := -D_FORTIFY_SOURCE=2 -fstack-protector-strong
REL_LDFLAGS := -Wl,-z,relro -Wl,-z,now
REL_PROGS   := trun trun-store trun-topo trun-preflight
release-bin: CFLAGS += $(REL_CFLAGS)
release-bin: $(REL_PROGS:%=$(B)/release-bin/%)
$(B)/release-bin/trun: $(B)/obj/launcher/main.o $(B)/libtrun.a
$(B)/release-bin/trun-store: $(STORE_TOOL:%.c=$(B)/obj/%.o) $(B)/libtrun.a
$(B)/release-bin/trun-topo: $(TOPO_OBJ) $(B)/libtrun.a
$(B)/release-bin/trun-preflight: $(B)/obj/tools/preflight.o $(B)/libtrun.a
$(REL_PROGS:%=$(B)/release-bin/%): Makefile
	@mkdir -p $(dir $@)
	$(CC) $(OPT) $(REL_LDFLAGS) -o $@ $(filter-out Makefile,$^) $(STATIC_LIBS)
	strip --remove-section=.comment --remove-section=.note $@

# ---- make wheel: dist/trun-VERSION-py3-none-manylinux_2_31_x86_64.whl (packaging/wheel/) --------------------
# The release tarball's programs as the wheel's scripts (pip puts them in the environment's bin/), its man
# pages as data, and the `trun` Python package (`python -m trun`); zipped by the standard library, offline.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || stat -c %Y VERSION)
WHEEL := dist/trun-$(VERSION)-py3-none-manylinux_2_31_x86_64.whl
.PHONY: wheel
wheel: $(WHEEL)
$(WHEEL): $(TARBALL) $(wildcard packaging/wheel/*.py packaging/wheel/trun/*.py)
	@rm -rf $(B)/wheel && mkdir -p $(B)/wheel && tar -C $(B)/wheel -xzf $(TARBALL)
	@SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) python3 packaging/wheel/build_wheel.py $(B)/wheel/$(REL_NAME) $(VERSION) dist

# ---- make deb: dist/trun_VERSION_amd64.deb (scripts/deb.sh, packaging/deb/) --------------------------------
# The release tarball's files under /usr; Depends: libc6 (>= 2.31) only (all the programs link); lintian
# runs on it and an error fails the build.
DEB := dist/trun_$(VERSION)_amd64.deb
.PHONY: deb
deb: $(DEB)
$(DEB): $(TARBALL) $(wildcard packaging/deb/*) scripts/deb.sh
	@rm -rf $(B)/deb && mkdir -p $(B)/deb && tar -C $(B)/deb -xzf $(TARBALL)
	@SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) scripts/deb.sh $(VERSION) $(B)/deb/$(REL_NAME) dist

# ---- make image [BASE=<image>] [IMAGE=<name:tag>]: the container image (packaging/container/Containerfile) --
# trun from the release tarball on PATH as the entrypoint, examples/ at /opt/trun/examples, on BASE (an image
# with python3 and torch; default: the offline Debian bookworm + python3-torch base, localhost/trun-base:
# bookworm-torch, made by scripts/image-base.sh when missing), tagged IMAGE (default trun:VERSION); built with
# podman, else docker (scripts/image.sh). Only the command line sets BASE and IMAGE, never the environment.
BASE  := localhost/trun-base:bookworm-torch
IMAGE := trun:$(VERSION)
.PHONY: image
image: $(TARBALL)
	@scripts/image.sh "$(BASE)" "$(IMAGE)" "$(VERSION)"

# `make deps` also readies the packaging's tools and roots (scripts/deps-release.sh: lintian, man-db, the
# bullseye build and plain roots, the fresh bookworm root; each built once per machine).
.PHONY: deps-release
deps: deps-release
deps-release:
	@scripts/deps-release.sh
.PHONY: clean-dist
clean: clean-dist
clean-dist:
	rm -rf dist
