# flytuned -- one non-recursive Makefile (STYLE.md R19).
#
#   make            build what this machine can: the CPU backend always, the
#                   CUDA build of kernels/gpu when nvcc is found, the HIP build
#                   when hipcc is found (GPU=none|cuda|hip|auto overrides)
#   make test       unit + integration tests (CPU backend) and the
#                   compile-only GPU builds; installs missing deps first
#   make check      test, which includes the checks (style, layering and
#                   call cycles, generated code); `make checks` alone
#   make run        build and start flytuned in the foreground on ./.state
#   make asan ubsan tsan coverage   the test suite under a sanitizer
#   make deb        the Debian packages in build/deb/ (dpkg-buildpackage,
#                   then lintian); GPU= picks the GPU libraries as for make
#   make asan-ci    the ASan + UBSan subset the test suite runs
#   make install    PREFIX=/usr/local DESTDIR= (PYTHONDIR=, UNITDIR=)
#   make gen        regenerate proto/fly_msgs.def and fly_record.def from schemas/
#   make test-gpu   GPU tests (needs a GPU; see tests/gpu/)
#   make gpu-faults GPU faults in the real daemon, F9 (needs a GPU;
#                   GPU_FAULTS=100)
#   make corrupt-inputs   1,000 mutated DBs, shm tables, import files
#   make torture    10,000 SIGKILLs mid-stream (TORTURE_KILLS=)
#   make faultsim   the Nth-call failure sweep (tests/fault/)
#   make deps       install missing Debian packages (apt-get)
#   V=1             show commands

BUILD   ?= build
PREFIX  ?= /usr/local
DESTDIR ?=
GPU     ?= auto
CC      ?= cc
SAN     ?=
STATE   ?= $(CURDIR)/.state
# The release version: one place (the VERSION file) for the binaries'
# --version, flyclient.pc and the installed man pages.
VERSION := $(shell cat VERSION)

ifeq ($(V),1)
Q :=
else
Q := @
endif

# ---------------------------------------------------------------- flags
WARN := -Wall -Wextra -Wstrict-prototypes -Wmissing-prototypes -Wshadow \
	-Wno-unused-parameter
ifeq ($(CI),true)
WERROR ?= 1
endif
ifeq ($(WERROR),1)
WARN += -Werror
endif
OPT ?= -O2 -g
SANFLAGS :=
ifneq ($(SAN),)
SANFLAGS := -fsanitize=$(SAN) -fno-omit-frame-pointer
OPT := -O1 -g
endif
ifeq ($(COVERAGE),1)
SANFLAGS += --coverage
OPT := -O0 -g
endif
CJSON_CFLAGS := $(shell pkg-config --cflags libcjson 2>/dev/null)
# libpq (the fleet, daemon/fleet.c): Debian's libpq-dev, which the deps
# step installs.  A build where pkg-config finds no libpq (the GPU
# machine's) compiles daemon/fleet_off.c instead: the fleet is off and a
# configured fleet_url is refused at start.
HAS_PQ    := $(shell pkg-config --exists libpq 2>/dev/null && echo 1)
PQ_CFLAGS := $(if $(HAS_PQ),$(shell pkg-config --cflags libpq),)
BASE_CFLAGS := -std=gnu11 $(OPT) $(WARN) -fPIC -MMD -MP $(SANFLAGS) \
	-D_GNU_SOURCE $(CJSON_CFLAGS) $(PQ_CFLAGS) $(CFLAGS)
LIBS := -lsqlite3 -luv -lcjson $(if $(HAS_PQ),-lpq,) -lpthread -lm -ldl
LDFLAGS_ALL := $(SANFLAGS) $(LDFLAGS)

# Include paths per module: a module sees only what it may depend on
# (STYLE.md R2); tools/check-layering.sh also checks every #include (ctl/
# gets -Iproto for proto/fly_record.h alone, the export-record validator
# it shares with the daemon; the check refuses any other proto header).
INC_proto   := -Iproto
INC_client  := -Iproto -Iclient
INC_ctl     := -I$(BUILD)/include -Iproto -Ictl
INC_kernels := -Iproto -Ikernels/include
INC_daemon  := -Iproto -Ikernels/include -Idaemon
INC_tests   := -Iproto -Ikernels/include -Idaemon -Iclient -Itests/common

# ---------------------------------------------------------------- GPU
NVCC  ?= $(shell command -v nvcc 2>/dev/null || \
	 { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
HIPCC ?= $(shell command -v hipcc 2>/dev/null)
ifeq ($(GPU),auto)
BUILD_CUDA := $(if $(NVCC),1,)
BUILD_HIP  := $(if $(HIPCC),1,)
else ifeq ($(GPU),cuda)
BUILD_CUDA := 1
else ifeq ($(GPU),hip)
BUILD_HIP := 1
else ifneq ($(GPU),none)
$(error GPU must be auto, none, cuda or hip (got '$(GPU)'))
endif
ifeq ($(BUILD_CUDA)$(NVCC),1)
$(error GPU=cuda but nvcc was not found (set NVCC=/path/to/nvcc))
endif
ifeq ($(BUILD_HIP)$(HIPCC),1)
$(error GPU=hip but hipcc was not found (set HIPCC=/path/to/hipcc))
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH ?= -gencode arch=compute_90a,code=sm_90a
HIP_ARCH  ?= --offload-arch=gfx90a --offload-arch=gfx940
# The wgmma kernels exist only in an sm_90a build: tell the host code so.
CUDA_DEFS := $(if $(findstring sm_90a,$(CUDA_ARCH)),-DFLYK_SM90A,)
# cuDNN 9 (the attention op's vendor candidate, kernels/vendor/cudnn_attn.c):
# its C headers (cudnn_graph.h and cudnn_backend.h are cuDNN 9's) and
# libcudnn.so in the CUDA tree or the system's multiarch directories.
# Found, the CUDA build compiles cudnn_attn.c, defines FLYK_HAS_CUDNN=1 and
# links libflykernels_cuda.so with -lcudnn; not found, it builds as before.
# CUDNN=0 turns it off; CUDNN_INC= and CUDNN_LIBDIR= point elsewhere.
CUDNN ?= auto
CUDNN_INC_DIRS := $(CUDA_HOME)/include /usr/include/x86_64-linux-gnu \
	/usr/include/aarch64-linux-gnu /usr/include /usr/local/include
CUDNN_LIB_DIRS := $(CUDA_HOME)/lib64 /usr/lib/x86_64-linux-gnu \
	/usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib
ifneq ($(CUDNN),0)
CUDNN_INC ?= $(firstword $(foreach d,$(CUDNN_INC_DIRS),$(if $(and \
	$(wildcard $(d)/cudnn_graph.h),$(wildcard $(d)/cudnn_backend.h)),$(d))))
CUDNN_LIBDIR ?= $(firstword $(foreach d,$(CUDNN_LIB_DIRS),$(if \
	$(wildcard $(d)/libcudnn.so),$(d))))
endif
HAS_CUDNN := $(if $(BUILD_CUDA),$(if $(CUDNN_INC),$(if $(CUDNN_LIBDIR),1)))
CUDNN_CFLAGS := $(if $(HAS_CUDNN),-I$(CUDNN_INC),)
CUDNN_LIBS := $(if $(HAS_CUDNN),-L$(CUDNN_LIBDIR) -lcudnn,)
CUDA_DEFS += $(if $(HAS_CUDNN),-DFLYK_HAS_CUDNN=1,)
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -fPIC \
	-Xcompiler -Wall -Iproto -Ikernels/include -Ikernels/gpu -Ikernels/vendor
HIPFLAGS  ?= -O3 -std=c++17 $(HIP_ARCH) -fPIC -Wall \
	-Iproto -Ikernels/include -Ikernels/gpu

# ---------------------------------------------------------------- sources
PROTO_SRC   := $(wildcard proto/*.c)
CLIENT_SRC  := $(wildcard client/*.c)
CTL_SRC     := $(wildcard ctl/*.c)
KCOMMON_SRC := $(wildcard kernels/*.c)
KCPU_SRC    := $(wildcard kernels/cpu/*.c)
KTEST_SRC   := $(wildcard kernels/testing/*.c)
# kernels/gpu: the core (backend, launch API) at the top, prim/ (headers
# only), one folder per op family (gemm/, norm/, topk/, mqa/).
KGPU_SRC    := $(wildcard kernels/gpu/*.hip kernels/gpu/*/*.hip)
KGPU_HDR    := $(wildcard kernels/gpu/*.h kernels/gpu/*/*.h)
DAEMON_SRC  := $(filter-out daemon/main.c $(if $(HAS_PQ),daemon/fleet_off.c,daemon/fleet.c),$(wildcard daemon/*.c))
TCOMMON_SRC := $(wildcard tests/common/*.c)
UNIT_SRC    := $(wildcard tests/unit/test_*.c)
INTEG_SRC   := $(wildcard tests/integration/test_*.c)
GPUTEST_SRC := $(wildcard tests/gpu/test_*.c)
BENCH_SRC   := $(wildcard bench/*.c)
MIGRATIONS  := $(sort $(wildcard tuning-db/migrations/*.sql))
FLEET_MIGRATIONS := $(sort $(wildcard tuning-db/fleet/*.sql))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
PROTO_OBJ   := $(call obj,$(PROTO_SRC))
CLIENT_OBJ  := $(call obj,$(CLIENT_SRC))
CTL_OBJ     := $(call obj,$(CTL_SRC))
KCOMMON_OBJ := $(call obj,$(KCOMMON_SRC))
KCPU_OBJ    := $(call obj,$(KCPU_SRC))
KTEST_OBJ   := $(call obj,$(KTEST_SRC))
DAEMON_OBJ  := $(call obj,$(DAEMON_SRC)) $(BUILD)/obj/tuning-db/migrations.o \
	$(BUILD)/obj/tuning-db/fleet_migrations.o
MAIN_OBJ    := $(call obj,daemon/main.c)
TCOMMON_OBJ := $(call obj,$(TCOMMON_SRC))
UNIT_BIN    := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRC))
INTEG_BIN   := $(patsubst tests/integration/%.c,$(BUILD)/tests/integration/%,$(INTEG_SRC))
GPUTEST_BIN := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(filter-out \
	$(if $(HAS_CUDNN),,tests/gpu/test_cudnn_attn.c) \
	tests/gpu/test_gpu_faults.c,$(GPUTEST_SRC)))
BENCH_BIN   := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

LIBPROTO   := $(BUILD)/libflyproto.a
LIBCLIENT_A := $(BUILD)/libflyclient.a
LIBCLIENT_SO := $(BUILD)/libflyclient.so
LIBKCPU    := $(BUILD)/libflykernels.a
LIBKTEST   := $(BUILD)/libflykernels_testing.a
LIBFLYD    := $(BUILD)/libflyd.a
FLYTUNED   := $(BUILD)/flytuned
FLYTUNED_T := $(BUILD)/flytuned-test
CTL        := $(BUILD)/flytune-ctl
HEADER     := $(BUILD)/include/flyclient.h
LAYERING   := $(BUILD)/.layering-ok
LIBKCUDA   := $(if $(BUILD_CUDA),$(BUILD)/libflykernels_cuda.so,)
LIBKHIP    := $(if $(BUILD_HIP),$(BUILD)/libflykernels_hip.so,)
CUDA_OBJ   := $(patsubst %.hip,$(BUILD)/cuda/%.o,$(KGPU_SRC)) \
	$(patsubst %.c,$(BUILD)/cuda/%.o,$(filter-out \
	$(if $(HAS_CUDNN),,kernels/vendor/cudnn_attn.c),$(wildcard kernels/vendor/cu*.c)))
HIP_OBJ    := $(patsubst %.hip,$(BUILD)/hip/%.o,$(KGPU_SRC))
GPU_COMMON_OBJ := $(patsubst %.c,$(BUILD)/gpuobj/%.o,$(KCOMMON_SRC))

ALL_TARGETS := $(LAYERING) $(HEADER) $(LIBCLIENT_A) $(LIBCLIENT_SO) \
	$(BUILD)/flyclient.pc $(FLYTUNED) $(FLYTUNED_T) $(CTL) \
	$(LIBKCUDA) $(LIBKHIP)

.PHONY: all test test-bins unit integration python-test check checks style layering run \
	deps asan ubsan tsan coverage install uninstall clean gen gen-check \
	deb deb-version asan-ci asan-ci-bins tsan-ci tsan-ci-bins \
	corrupt-inputs torture powercut churn faultsim \
	test-gpu gpu-faults bench systemd-verify fuzz fuzz-bins examples FORCE
.DEFAULT_GOAL := all
# Keep every intermediate object (no rebuilds of objects make deleted).
.SECONDARY:

all: $(ALL_TARGETS)

# ---------------------------------------------------------------- compile
$(LAYERING): tools/check-layering.sh $(PROTO_SRC) $(CLIENT_SRC) $(CTL_SRC) \
		$(KCOMMON_SRC) $(KCPU_SRC) $(KTEST_SRC) $(KGPU_SRC) \
		$(wildcard kernels/testing/*.hip) \
		$(DAEMON_SRC) daemon/main.c $(wildcard */*.h */*/*.h) $(KGPU_HDR)
	@mkdir -p $(@D)
	$(Q)sh tools/check-layering.sh --no-cycles . && touch $@

$(BUILD)/obj/proto/%.o: proto/%.c | $(LAYERING)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(BASE_CFLAGS) -fvisibility=hidden $(INC_proto) -c $< -o $@
$(BUILD)/obj/client/%.o: client/%.c | $(LAYERING)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(BASE_CFLAGS) -fvisibility=hidden $(INC_client) -c $< -o $@
$(BUILD)/obj/ctl/%.o: ctl/%.c $(HEADER) | $(LAYERING)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(BASE_CFLAGS) $(INC_ctl) -c $< -o $@
$(BUILD)/obj/kernels/%.o: kernels/%.c | $(LAYERING)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(BASE_CFLAGS) $(INC_kernels) -c $< -o $@
# The kernels' source id (tools/srcid.sh) in flyk_libver(): rewritten only
# when it changes, so libver.o is rebuilt exactly when a kernel source is.
KSRCID := $(BUILD)/gen/kernels.srcid
$(KSRCID): FORCE
	@mkdir -p $(@D)
	$(Q)sh tools/srcid.sh > $@.tmp && { cmp -s $@.tmp $@ || mv $@.tmp $@; }; \
		rm -f $@.tmp
$(BUILD)/obj/kernels/libver.o $(BUILD)/gpuobj/kernels/libver.o: \
		kernels/libver.c $(KSRCID) | $(LAYERING)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(BASE_CFLAGS) $(INC_kernels) \
		-DFLYK_SOURCE_ID="\"$$(cat $(KSRCID))\"" -c $< -o $@
$(BUILD)/obj/daemon/%.o: daemon/%.c | $(LAYERING)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(BASE_CFLAGS) $(INC_daemon) -c $< -o $@
# The daemon looks for the GPU library in $(PREFIX)/lib/flytuned (and next
# to its binary): the prefix is compiled in, and a new PREFIX rebuilds it
# (the stamp is rewritten only when the value changes).
$(BUILD)/prefix.stamp: FORCE
	@mkdir -p $(@D)
	@echo '$(PREFIX)' | cmp -s - $@ 2>/dev/null || echo '$(PREFIX)' > $@
$(BUILD)/obj/daemon/backend.o: $(BUILD)/prefix.stamp
$(BUILD)/obj/daemon/backend.o: INC_daemon += -DFLYD_PREFIX='"$(PREFIX)"'
$(BUILD)/obj/daemon/main.o $(BUILD)/obj/ctl/main.o: VERSION
$(BUILD)/obj/daemon/main.o: INC_daemon += -DFLY_VERSION='"$(VERSION)"'
$(BUILD)/obj/ctl/main.o: INC_ctl += -DFLY_VERSION='"$(VERSION)"'
FORCE:
$(BUILD)/obj/tests/%.o: tests/%.c $(HEADER) | $(LAYERING)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(BASE_CFLAGS) $(INC_tests) -DFLY_BUILD_DIR='"$(abspath $(BUILD))"' \
		-DFLY_SRC_DIR='"$(CURDIR)"' -c $< -o $@
$(BUILD)/obj/bench/%.o: bench/%.c $(HEADER) | $(LAYERING)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(BASE_CFLAGS) $(INC_tests) -c $< -o $@

# The migrations are embedded in the binary: tools/embed-sql.sh writes a C
# array of (version, name, sql) from tuning-db/migrations/NNNN_*.sql.
$(BUILD)/gen/migrations.c: $(MIGRATIONS) tuning-db/schema.sql tools/embed-sql.sh
	@mkdir -p $(@D)
	$(Q)sh tools/embed-sql.sh $(MIGRATIONS) > $@.tmp && mv $@.tmp $@
$(BUILD)/obj/tuning-db/migrations.o: $(BUILD)/gen/migrations.c
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE_CFLAGS) $(INC_daemon) -c $< -o $@
# The fleet DB's (PostgreSQL) migrations, tuning-db/fleet/NNNN_*.sql.
$(BUILD)/gen/fleet_migrations.c: $(FLEET_MIGRATIONS) tools/embed-sql.sh
	@mkdir -p $(@D)
	$(Q)sh tools/embed-sql.sh --fleet $(FLEET_MIGRATIONS) > $@.tmp && mv $@.tmp $@
$(BUILD)/obj/tuning-db/fleet_migrations.o: $(BUILD)/gen/fleet_migrations.c
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE_CFLAGS) $(INC_daemon) -c $< -o $@

# ---------------------------------------------------------------- link
$(LIBPROTO): $(PROTO_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIBCLIENT_A): $(CLIENT_OBJ) $(PROTO_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIBCLIENT_SO): $(CLIENT_OBJ) $(PROTO_OBJ) client/libflyclient.map
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,libflyclient.so.0 \
		-Wl,--version-script=client/libflyclient.map $(LDFLAGS_ALL) \
		-o $@ $(CLIENT_OBJ) $(PROTO_OBJ) -lcjson -lpthread
	$(Q)ln -sf libflyclient.so $(BUILD)/libflyclient.so.0
$(LIBKCPU): $(KCOMMON_OBJ) $(KCPU_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIBKTEST): $(KTEST_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^ $(if $^,,&& ar rcs $@)
$(LIBFLYD): $(DAEMON_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^
$(FLYTUNED): $(MAIN_OBJ) $(LIBFLYD) $(LIBKCPU) $(LIBPROTO)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS_ALL) -rdynamic -o $@ $(MAIN_OBJ) $(LIBFLYD) $(LIBKCPU) $(LIBPROTO) $(LIBS)
# The test build of the daemon: same code plus kernels/testing (variants
# that crash, hang or answer wrong, enabled by FLYK_TESTING_FAULTS).
$(FLYTUNED_T): $(MAIN_OBJ) $(LIBFLYD) $(KTEST_OBJ) $(LIBKCPU) $(LIBPROTO)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS_ALL) -rdynamic -o $@ $(MAIN_OBJ) $(KTEST_OBJ) $(LIBFLYD) $(LIBKCPU) $(LIBPROTO) $(LIBS)
$(CTL): $(CTL_OBJ) $(LIBCLIENT_A) $(LIBPROTO)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $(CTL_OBJ) $(LIBCLIENT_A) $(LIBPROTO) -lcjson -lpthread -lm

$(HEADER): client/flyclient.h proto/fly_abi.h
	@mkdir -p $(@D)
	$(Q)sed -e '/^#include "fly_abi.h"/{r proto/fly_abi.h' -e 'd;}' client/flyclient.h > $@
# Generated files that carry PREFIX depend on the stamp, so a new PREFIX
# (`make install PREFIX=/opt/x` after a plain `make`) regenerates them.
$(BUILD)/flyclient.pc: client/flyclient.pc.in $(BUILD)/prefix.stamp VERSION
	@mkdir -p $(@D)
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' $< > $@
# The man pages as installed: the tree's copies name the default prefix's
# paths (/usr/local) and the version of VERSION.
$(BUILD)/man/%: man/% $(BUILD)/prefix.stamp VERSION
	@mkdir -p $(@D)
	$(Q)sed -e 's|/usr/local/share/flytuned|$(DATADIR)|g' \
		-e 's|/usr/local/bin|$(BINDIR)|g' \
		-e 's|"flytuned [0-9][0-9.]*"|"flytuned $(VERSION)"|' $< > $@
# The Python client as installed: it loads $(LIBDIR)/libflyclient.so.0
# (FLYCLIENT_LIB still overrides).
$(BUILD)/python/flyclient/__init__.py: client/python/flyclient/__init__.py \
		$(BUILD)/prefix.stamp
	@mkdir -p $(@D)
	$(Q)sed -e 's|^_INSTALLED_LIB = None$$|_INSTALLED_LIB = "$(LIBDIR)/libflyclient.so.0"|' $< > $@
	$(Q)grep -q '^_INSTALLED_LIB = "' $@
# The unit as installed: ExecStart in $(BINDIR) (the tree's copy says
# /usr/local/bin, the default PREFIX's).
$(BUILD)/systemd/flytuned@.service: systemd/flytuned@.service $(BUILD)/prefix.stamp
	@mkdir -p $(@D)
	$(Q)sed -e 's|^ExecStart=/usr/local/bin/flytuned |ExecStart=$(BINDIR)/flytuned |' $< > $@

TEST_LINK = $(TCOMMON_OBJ) $(LIBFLYD) $(KTEST_OBJ) $(LIBKCPU) $(LIBCLIENT_A) $(LIBPROTO) $(LIBS) -lcmocka
$(BUILD)/tests/unit/%: $(BUILD)/obj/tests/unit/%.o $(TCOMMON_OBJ) $(LIBFLYD) $(KTEST_OBJ) $(LIBKCPU) $(LIBCLIENT_A) $(LIBPROTO)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $< $(TEST_LINK)
$(BUILD)/tests/integration/%: $(BUILD)/obj/tests/integration/%.o $(TCOMMON_OBJ) $(LIBFLYD) $(KTEST_OBJ) $(LIBKCPU) $(LIBCLIENT_A) $(LIBPROTO)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $< $(TEST_LINK)
$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIBCLIENT_A) $(LIBPROTO)
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $< $(LIBCLIENT_A) $(LIBPROTO) -lcjson -lpthread -lm

# ---------------------------------------------------------------- GPU builds
$(BUILD)/cuda/%.o: %.hip $(KGPU_HDR) kernels/include/flyk.h
	@mkdir -p $(@D)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCCFLAGS) $(CUDA_DEFS) -x cu -c $< -o $@
$(BUILD)/cuda/%.o: %.c kernels/include/flyk.h
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $< (cuda)")
	$(Q)$(CC) $(BASE_CFLAGS) $(INC_kernels) -Ikernels/gpu -I$(CUDA_HOME)/include \
		$(CUDNN_CFLAGS) -c $< -o $@
$(BUILD)/hip/%.o: %.hip $(KGPU_HDR) kernels/include/flyk.h
	@mkdir -p $(@D)
	@$(if $(Q),echo "  HIPCC   $<")
	$(Q)$(HIPCC) $(HIPFLAGS) -c $< -o $@
$(BUILD)/gpuobj/%.o: %.c
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE_CFLAGS) $(INC_kernels) -c $< -o $@
$(BUILD)/libflykernels_cuda.so: $(CUDA_OBJ) $(GPU_COMMON_OBJ)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(NVCC) -shared $(CUDA_ARCH) -o $@ $^ -lcublasLt -lcublas $(CUDNN_LIBS)
# The test build of the GPU kernel library: the same objects plus
# kernels/testing/gpu_faulty.hip (variants that trap, read out of bounds,
# hang, write NaN or exhaust device memory, enabled by FLYK_TESTING_FAULTS,
# which kernels/testing/fault_list.c reads for them as for the CPU ones),
# under the same name in its own directory, which a test daemon is pointed
# at with FLYTUNED_KERNELS_DIR (tests/gpu/test_gpu_faults.c).  The
# production library above never links it.
$(BUILD)/testing/libflykernels_cuda.so: $(CUDA_OBJ) $(GPU_COMMON_OBJ) \
		$(BUILD)/cuda/kernels/testing/gpu_faulty.o \
		$(BUILD)/gpuobj/kernels/testing/fault_list.o
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(NVCC) -shared $(CUDA_ARCH) -o $@ $^ -lcublasLt -lcublas $(CUDNN_LIBS)
$(BUILD)/libflykernels_hip.so: $(HIP_OBJ) $(GPU_COMMON_OBJ)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(HIPCC) -shared $(HIP_ARCH) -o $@ $^
$(BUILD)/testing/libflykernels_hip.so: $(HIP_OBJ) $(GPU_COMMON_OBJ) \
		$(BUILD)/hip/kernels/testing/gpu_faulty.o \
		$(BUILD)/gpuobj/kernels/testing/fault_list.o
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(HIPCC) -shared $(HIP_ARCH) -o $@ $^

# ---------------------------------------------------------------- fuzzing
# Coverage-guided fuzzers (clang's libFuzzer, with ASan and UBSan) over the
# parsers that meet untrusted bytes: frames, messages, keys, the config
# file, the client's shm reader (tests/fuzz/fuzz_*.c).  `make test` replays
# every seed and regression input and fuzzes each harness briefly
# (FUZZ_SECONDS, 10 by default); `make fuzz FUZZ_SECONDS=3600` runs longer.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 10
FUZZ_SRC     := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN     := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRC))
FUZZ_CFLAGS  := -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -D_GNU_SOURCE $(CJSON_CFLAGS) \
	-Iproto -Idaemon -Itests/fuzz
# What each harness links besides proto/.
FUZZ_EXTRA_fuzz_config := daemon/config.c
$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz.h $(PROTO_SRC) \
		$(wildcard proto/*.h) daemon/config.c daemon/config.h
	@mkdir -p $(@D)
	@$(if $(Q),echo "  FUZZ    $@")
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(PROTO_SRC) $(FUZZ_EXTRA_$*) \
		-lcjson -lm
fuzz-bins: $(FUZZ_BIN)
# The fuzzers are their own sanitized build: a SAN= build of the suite
# leaves them out.
TEST_FUZZ := $(if $(SAN)$(COVERAGE),,$(FUZZ_BIN))
fuzz: fuzz-bins
	$(Q)FLY_BUILD_DIR=$(abspath $(BUILD)) sh tests/fuzz/run-fuzz.sh $(FUZZ_SECONDS)

# ---------------------------------------------------------------- tests
deps:
	$(Q)sh tools/deps.sh

unit: all $(UNIT_BIN)
	$(Q)sh tools/run-tests.sh unit $(UNIT_BIN)
integration: all $(INTEG_BIN)
	$(Q)sh tools/run-tests.sh integration $(INTEG_BIN)
python-test: all
	$(Q)FLY_BUILD_DIR=$(abspath $(BUILD)) python3 tests/integration/test_python.py

# The whole suite: every test binary, the Python client, the systemd units,
# and a summary line that counts them all.
# The GPU kernels' logic on the CPU emulator (tests/gpu/emu: one coroutine
# per GPU thread, warp primitives and mma/ldmatrix/cp.async emulated), so CI
# without a GPU still runs every kernel against a host reference.  The
# *_amd binaries are the same tests in the emulator's AMD model
# (-DFLYK_EMU_AMD=1: wave64, HIP's shuffles and 64-bit ballots, 64 KiB of
# LDS), which compiles the kernels' FLYK_AMD branches (issue 27).
EMU_BIN := $(BUILD)/tests/emu/flyk_emu $(BUILD)/tests/emu/flyk_emu_gemm \
	$(BUILD)/tests/emu/flyk_emu_amd $(BUILD)/tests/emu/flyk_emu_gemm_amd
# The op sources each emulator binary runs.
EMU_KSRC := kernels/gpu/norm/rmsnorm.hip kernels/gpu/topk/topk.hip \
	kernels/gpu/compare.hip
EMU_GSRC := kernels/gpu/gemm/gemm.hip kernels/gpu/gemm/grouped_gemm.hip \
	kernels/gpu/gemm/scaled_gemm.hip kernels/gpu/mqa/mqa_logits.hip \
	kernels/gpu/attn/attention.hip kernels/gpu/compare.hip
# The emulator's device model is force-included: no kernels/ header
# includes a test header (tools/check-layering.sh).
EMU_FLAGS := -std=c++17 -O1 -DFLYK_EMU -Iproto -Ikernels/include -Ikernels/gpu \
	-include tests/gpu/emu/flyk_emu.h
EMU_HDR := tests/gpu/emu/flyk_emu.h tests/gpu/emu/emu_sched.h \
	tests/gpu/emu/emu_half.h tests/gpu/emu/emu_tally.h
# The device model of each binary: NVIDIA, or AMD for the *_amd ones.
EMU_MODEL = $(if $(filter %_amd,$@),-DFLYK_EMU_AMD=1,)
$(BUILD)/tests/emu/flyk_emu $(BUILD)/tests/emu/flyk_emu_amd: \
		tests/gpu/emu/emu_main.cpp $(EMU_HDR) $(EMU_KSRC) $(KGPU_HDR)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CXX     $@")
	$(Q)$(CXX) $(EMU_FLAGS) $(EMU_MODEL) -x c++ tests/gpu/emu/emu_main.cpp \
		$(EMU_KSRC) -o $@
$(BUILD)/tests/emu/flyk_emu_gemm $(BUILD)/tests/emu/flyk_emu_gemm_amd: \
		tests/gpu/emu/emu_gemm.cpp tests/gpu/emu/emu_gemm.h \
		$(EMU_HDR) $(EMU_GSRC) $(KGPU_HDR) \
		$(BUILD)/tests/emu/flyk.o
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CXX     $@")
	$(Q)$(CXX) $(EMU_FLAGS) $(EMU_MODEL) -include tests/gpu/emu/emu_gemm.h \
		-x c++ tests/gpu/emu/emu_gemm.cpp $(EMU_GSRC) \
		-x none $(BUILD)/tests/emu/flyk.o -o $@
# The emulator is never built with a sanitizer (it switches stacks itself,
# emu_sched.h): its own unsanitized copy of kernels/flyk.c.
$(BUILD)/tests/emu/flyk.o: kernels/flyk.c kernels/include/flyk.h
	@mkdir -p $(@D)
	$(Q)$(CC) -std=gnu11 -O1 -D_GNU_SOURCE $(INC_kernels) -c $< -o $@

# The Debian packages: built (GPU=none, nocheck) and checked by lintian
# (tests/pkg/test-deb.sh, about a minute); a sanitizer or coverage run of
# the suite leaves them out.
TEST_DEB := $(if $(SAN)$(COVERAGE),,tests/pkg/test-deb.sh)
# The ASan + UBSan subset (asan-ci) as one test of the suite; its binaries
# are built by test-bins (tools/fly.sh test), outside the test's time limit.
TEST_ASAN := $(if $(SAN)$(COVERAGE),,tests/san/asan-ci.sh)
# The TSan subset (tsan-ci) likewise.
TEST_TSAN := $(if $(SAN)$(COVERAGE),,tests/san/tsan-ci.sh)
EXAMPLES := $(BUILD)/examples/decide
test-bins: all $(UNIT_BIN) $(INTEG_BIN) $(EMU_BIN) $(TEST_FUZZ) $(EXAMPLES) $(if $(TEST_ASAN),asan-ci-bins) $(if $(TEST_TSAN),tsan-ci-bins)
# Python loads the sanitized libflyclient.so: the ASan runtime must come
# first, and Python's own allocations are not ours to leak-check.
ifneq ($(findstring address,$(SAN)),)
PY_ENV := LD_PRELOAD=$(shell $(CC) -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0
endif
test: all $(UNIT_BIN) $(INTEG_BIN) $(EMU_BIN) $(TEST_FUZZ) $(EXAMPLES)
	$(Q)FLY_BUILD_DIR=$(abspath $(BUILD)) FLY_PY_ENV="$(PY_ENV)" \
		FUZZ_SECONDS=$(FUZZ_SECONDS) sh tools/run-tests.sh all \
		$(UNIT_BIN) $(INTEG_BIN) tests/integration/test_python.py \
		tests/torch/test_torch_ops.py tests/integration/test_examples.sh \
		tests/integration/test_metrics.py tests/integration/test_journal.py \
		tests/integration/test_bench_vendor.sh \
		tests/gpu/emu/run-emu-kernels.sh tests/gpu/emu/run-emu-topk1.sh \
		tests/gpu/emu/run-emu-topk2.sh tests/gpu/emu/run-emu-gemm.sh \
		tests/gpu/emu/run-emu-kernels-amd.sh \
		tests/gpu/emu/run-emu-topk1-amd.sh tests/gpu/emu/run-emu-topk2-amd.sh \
		tests/gpu/emu/run-emu-gemm-amd.sh \
		$(if $(TEST_FUZZ),tests/fuzz/run-fuzz.sh) \
		tools/systemd-verify.sh tools/install-check.sh \
		$(TEST_DEB) $(TEST_ASAN) $(TEST_TSAN) tools/check.sh

# Corrupt inputs at full scale (issue 21 item 4): 1,000 mutated DB files,
# shm tables and import files; `make test` runs 200 of each.
corrupt-inputs: all $(BUILD)/tests/integration/test_corrupt_inputs
	$(Q)FLY_CORRUPT_N=$${FLY_CORRUPT_N:-1000} \
		$(BUILD)/tests/integration/test_corrupt_inputs

# Crash torture (issue 21 item 3): TORTURE_KILLS SIGKILLs at random points
# of a stream of imports, forgets and tunes; `make test` runs 200.
TORTURE_KILLS ?= 10000
torture: all $(BUILD)/tests/integration/test_torture
	$(Q)TORTURE_KILLS=$(TORTURE_KILLS) $(BUILD)/tests/integration/test_torture

# Power cuts (issue 21 item 3, RELIABILITY.md F3): the store over
# tests/common/crashvfs.c, cut after each of POWERCUT_POINTS mutating VFS
# calls of successive workloads; `make test` runs 300.
POWERCUT_POINTS ?= 10000
powercut: $(BUILD)/tests/unit/test_powercut
	$(Q)POWERCUT_POINTS=$(POWERCUT_POINTS) $(BUILD)/tests/unit/test_powercut

# Client churn at the rows' scale (RELIABILITY.md L5, F13, L8): 100,000
# connect/close cycles, 10,000 client kills, 10,000 tune requests;
# `make test` runs 2,000 / 200 / 2,000.
CHURN_CYCLES ?= 100000
CHURN_KILLS ?= 10000
CHURN_TUNES ?= 10000
churn: all $(BUILD)/tests/integration/test_churn
	$(Q)CHURN_CYCLES=$(CHURN_CYCLES) CHURN_KILLS=$(CHURN_KILLS) \
		CHURN_TUNES=$(CHURN_TUNES) $(BUILD)/tests/integration/test_churn

# Fault injection (issue 21 item 1): tests/fault/faultsim.c, an LD_PRELOAD
# shim failing the Nth allocation or I/O call, and the sweep over
# "start, decide, tune and commit" (tests/fault/test_faultsim.c).
# FAULTSIM_STRIDE_ALLOC=1 sweeps every allocation (default every 10th).
FAULTSIM_SO := $(BUILD)/faultsim/libfaultsim.so
$(FAULTSIM_SO): tests/fault/faultsim.c
	@mkdir -p $(@D)
	$(Q)$(CC) -std=gnu11 -O1 -g $(WARN) -fPIC -shared -o $@ $< -ldl
$(BUILD)/tests/fault/%: $(BUILD)/obj/tests/fault/%.o $(TCOMMON_OBJ) $(LIBFLYD) $(KTEST_OBJ) $(LIBKCPU) $(LIBCLIENT_A) $(LIBPROTO)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $< $(TEST_LINK)
faultsim: all $(FAULTSIM_SO) $(BUILD)/tests/fault/test_faultsim
	$(Q)FLY_TEST_TIMEOUT_MULTIPLIER=$${FLY_TEST_TIMEOUT_MULTIPLIER:-1} \
		$(BUILD)/tests/fault/test_faultsim

# examples/: the README's C example, built the way the README says (the
# installed header and the static library only), run by
# tests/integration/test_examples.sh against a CPU-backend daemon.
# (EXAMPLES is defined above test-bins: a prerequisite list is expanded
# where the rule is read.)
examples: $(EXAMPLES)
$(BUILD)/examples/%: examples/%.c $(HEADER) $(LIBCLIENT_A)
	@mkdir -p $(@D)
	$(Q)$(CC) -std=gnu11 $(OPT) $(WARN) $(SANFLAGS) -I$(BUILD)/include -o $@ $< \
		$(LIBCLIENT_A) -lcjson -lpthread $(LDFLAGS_ALL)

# GPU=hip builds them against libflykernels_hip.so and the HIP runtime
# (tests/gpu/gpu_rt.h maps the few runtime calls the tests make), any other
# GPU= against libflykernels_cuda.so and cudart.
# ROCm's tree, or none where the distribution's packages put HIP in /usr.
HIP_PATH ?= $(if $(wildcard /opt/rocm/include/hip),/opt/rocm,)
# (HIP alone: where both are built, the tests take CUDA's.)
ifeq ($(BUILD_HIP)-$(BUILD_CUDA),1-)
GPUTEST_KLIB  := flykernels_hip
GPUTEST_FLAGS := -DFLYK_TEST_HIP=1 -D__HIP_PLATFORM_AMD__=1 \
	$(if $(HIP_PATH),-I$(HIP_PATH)/include)
GPUTEST_LIBS  := $(if $(HIP_PATH),-L$(HIP_PATH)/lib) -lamdhip64
else
GPUTEST_KLIB  := flykernels_cuda
GPUTEST_FLAGS := -I$(CUDA_HOME)/include
GPUTEST_LIBS  := -L$(CUDA_HOME)/lib64 -lcudart
endif
test-gpu: all $(GPUTEST_BIN)
	$(Q)sh tools/run-tests.sh gpu $(GPUTEST_BIN)
# Each GPU test links the harness they share (tests/gpu/gpu_harness.c).
$(BUILD)/tests/gpu/%: tests/gpu/%.c tests/gpu/gpu_harness.c \
		tests/gpu/gpu_harness.h tests/gpu/gpu_rt.h tests/common/gemm_ties.h \
		$(BUILD)/lib$(GPUTEST_KLIB).so
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE_CFLAGS) $(INC_kernels) -Itests/common \
		$(GPUTEST_FLAGS) -o $@ $< tests/gpu/gpu_harness.c \
		-L$(BUILD) -l$(GPUTEST_KLIB) -Wl,-rpath,$(abspath $(BUILD)) \
		$(GPUTEST_LIBS) -lm
# The cuDNN attention candidate's own test: the module and the test alone
# (no nvcc), so it builds in seconds on the GPU machine.
$(BUILD)/tests/gpu/test_cudnn_attn: tests/gpu/test_cudnn_attn.c \
		kernels/vendor/cudnn_attn.c kernels/vendor/cudnn_attn.h
	@mkdir -p $(@D)
	$(Q)test -n "$(HAS_CUDNN)" || { echo "$@: cuDNN 9 not found (GPU=cuda," \
		"CUDNN_INC=, CUDNN_LIBDIR=)" >&2; exit 1; }
	$(Q)$(CC) $(BASE_CFLAGS) $(INC_kernels) -Ikernels/vendor \
		-I$(CUDA_HOME)/include $(CUDNN_CFLAGS) -o $@ $< \
		kernels/vendor/cudnn_attn.c $(CUDNN_LIBS) \
		-L$(CUDA_HOME)/lib64 -lcudart -lpthread -lm

# GPU faults in the real daemon (RELIABILITY.md F9, issue 21 item 6; needs
# a GPU, about 4 minutes for 100): the production flytuned on the test
# build of the GPU kernel library, which has kernels/testing/gpu_faulty.hip;
# GPU_FAULTS= how many (tests/gpu/test_gpu_faults.c lists the knobs).  Not
# in test-gpu: it is a daemon test, not a kernel test.
GPU_FAULTS ?= 100
GPUFAULT_KLIB := $(BUILD)/testing/lib$(GPUTEST_KLIB).so
gpu-faults: $(FLYTUNED) $(GPUFAULT_KLIB) $(BUILD)/tests/gpu/test_gpu_faults
	$(Q)GPU_FAULTS=$(GPU_FAULTS) GPU_FAULTS_BACKEND=$(if $(filter \
		flykernels_hip,$(GPUTEST_KLIB)),hip,cuda) \
		$(BUILD)/tests/gpu/test_gpu_faults
# It talks to the daemon over its socket only: the test harness's
# daemon.c, no GPU library, no cmocka.
$(BUILD)/tests/gpu/test_gpu_faults: tests/gpu/test_gpu_faults.c \
		tests/common/daemon.c tests/common/daemon.h
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(BASE_CFLAGS) -Itests/common \
		-DFLY_BUILD_DIR='"$(abspath $(BUILD))"' -o $@ $< \
		tests/common/daemon.c -lcjson -lsqlite3

style:
	$(Q)sh tools/check-style.sh
layering:
	$(Q)sh tools/check-layering.sh . && sh tools/check-layering-selftest.sh
# The whole suite, which runs the checks as its last test (tools/check.sh:
# style, layering with call cycles, the self-test, gen-check); `make
# checks` runs them alone.
check: test
checks:
	$(Q)sh tools/check.sh

asan:
	$(MAKE) BUILD=build/asan SAN=address,undefined GPU=none test
# The ASan + UBSan (+ LSan) subset CI runs after the suite (.ci/run; issue
# 21 item 8): every unit test but test_kernels_cpu (187 s under ASan), and
# the integration tests that meet hostile input -- protocol, client,
# corrupt inputs (50 of each kind).  Measured on the 2-core box, loaded:
# build 122 s, run ~130 s.
ASAN_CI_BIN := $(filter-out %/test_kernels_cpu,$(patsubst tests/unit/%.c,build/asan/tests/unit/%,$(UNIT_SRC))) \
	$(addprefix build/asan/tests/integration/,test_protocol test_client test_corrupt_inputs)
asan-ci-bins:
	$(MAKE) BUILD=build/asan SAN=address,undefined GPU=none all $(ASAN_CI_BIN)
asan-ci: asan-ci-bins
	$(Q)FLY_CORRUPT_N=50 FLY_FORKS=100 POWERCUT_POINTS=60 sh tools/run-tests.sh asan $(ASAN_CI_BIN)
ubsan:
	$(MAKE) BUILD=build/ubsan SAN=undefined GPU=none test
tsan:
	$(MAKE) BUILD=build/tsan SAN=thread GPU=none test
# The TSan subset CI runs (issue 21 item 8): the client library's threaded
# unit tests -- the process cache's lock-free readers against a writer,
# the shm table read while the daemon rewrites slots (seqlock, torn
# slots), the client's table lookups from several threads.  Measured on
# the 2-core box, loaded: build ~85 s, run ~8 s.
TSAN_CI_BIN := $(addprefix build/tsan/tests/unit/,test_cache test_client_shm test_shm)
tsan-ci-bins:
	$(MAKE) BUILD=build/tsan SAN=thread GPU=none $(TSAN_CI_BIN)
tsan-ci: tsan-ci-bins
	$(Q)sh tools/run-tests.sh tsan $(TSAN_CI_BIN)
coverage:
	$(MAKE) BUILD=build/coverage COVERAGE=1 GPU=none test

gen:
	$(Q)python3 tools/gen_proto.py schemas proto/fly_msgs.def proto/fly_record.def
gen-check:
	$(Q)if command -v python3 >/dev/null; then \
		mkdir -p $(BUILD) && \
		python3 tools/gen_proto.py schemas $(BUILD)/fly_msgs.def.check \
			$(BUILD)/fly_record.def.check && \
		cmp -s $(BUILD)/fly_msgs.def.check proto/fly_msgs.def && \
		cmp -s $(BUILD)/fly_record.def.check proto/fly_record.def || \
		{ echo "proto/fly_msgs.def or proto/fly_record.def is stale: run make gen"; exit 1; }; fi

# ---------------------------------------------------------------- run
run: all
	@mkdir -p -m 0755 $(STATE)
	@echo "flytuned: state directory $(STATE) (socket $(STATE)/gpu0.sock, DB $(STATE)/tuning.db)"
	@echo "flytuned: query it with: $(BUILD)/flytune-ctl --socket $(STATE)/gpu0.sock status"
	$(FLYTUNED) --foreground --state-dir $(STATE)

bench: all $(BENCH_BIN)

# ---------------------------------------------------------------- install
BINDIR  := $(PREFIX)/bin
LIBDIR  := $(PREFIX)/lib
INCDIR  := $(PREFIX)/include
DATADIR := $(PREFIX)/share/flytuned
MANDIR  := $(PREFIX)/share/man
UNITDIR ?= $(PREFIX)/lib/systemd/system
# Debian's python3 searches /usr/lib/python3/dist-packages and
# /usr/local/lib/python3/dist-packages; another PREFIX needs PYTHONPATH
# (or PYTHONDIR=$$(python3 -c 'import site; print(site.getsitepackages()[0])')).
PYTHONDIR ?= $(PREFIX)/lib/python3/dist-packages
MANPAGES := $(BUILD)/man/flytune-ctl.1 $(BUILD)/man/flytuned.8
.PHONY: install-data install-python
install: all install-data install-python $(BUILD)/systemd/flytuned@.service
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig \
		$(DESTDIR)$(INCDIR) $(DESTDIR)$(DATADIR)/schemas \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(PREFIX)/lib/sysusers.d \
		$(DESTDIR)$(PREFIX)/lib/tmpfiles.d $(DESTDIR)$(LIBDIR)/flytuned
	install -m 755 $(FLYTUNED) $(CTL) $(DESTDIR)$(BINDIR)/
	install -m 644 $(LIBCLIENT_A) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(LIBCLIENT_SO) $(DESTDIR)$(LIBDIR)/libflyclient.so.0
	ln -sf libflyclient.so.0 $(DESTDIR)$(LIBDIR)/libflyclient.so
	$(if $(LIBKCUDA)$(LIBKHIP),install -m 755 $(LIBKCUDA) $(LIBKHIP) $(DESTDIR)$(LIBDIR)/flytuned/)
	install -m 644 $(HEADER) $(DESTDIR)$(INCDIR)/
	install -m 644 $(BUILD)/systemd/flytuned@.service systemd/flytuned@.socket $(DESTDIR)$(UNITDIR)/
	install -m 644 systemd/flytuned.sysusers $(DESTDIR)$(PREFIX)/lib/sysusers.d/flytuned.conf
	install -m 644 systemd/flytuned.tmpfiles $(DESTDIR)$(PREFIX)/lib/tmpfiles.d/flytuned.conf
# What follows PREFIX besides the binaries (tools/install-check.sh installs
# these two into a temp DESTDIR and checks them).
install-data: $(BUILD)/flyclient.pc $(MANPAGES)
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(DATADIR)/schemas \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8
	install -m 644 $(BUILD)/flyclient.pc $(DESTDIR)$(LIBDIR)/pkgconfig/
	install -m 644 schemas/*.json $(DESTDIR)$(DATADIR)/schemas/
	install -m 644 $(BUILD)/man/flytune-ctl.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(BUILD)/man/flytuned.8 $(DESTDIR)$(MANDIR)/man8/
# The package's other modules (flyclient.kernels) as they are.
PY_MODULES := $(filter-out %/__init__.py,$(wildcard client/python/flyclient/*.py))
# flytuned.torch (client/python/flytuned): the PyTorch custom ops and the
# source of their C++ extension, built by torch at import where torch is.
PY_FT := $(wildcard client/python/flytuned/*.py)
PY_FTT := $(wildcard client/python/flytuned/torch/*.py)
PY_FTC := $(wildcard client/python/flytuned/torch/csrc/*.cpp)
install-python: $(BUILD)/python/flyclient/__init__.py
	install -d $(DESTDIR)$(PYTHONDIR)/flyclient \
		$(DESTDIR)$(PYTHONDIR)/flytuned/torch/csrc
	install -m 644 $< $(PY_MODULES) $(DESTDIR)$(PYTHONDIR)/flyclient/
	install -m 644 $(PY_FT) $(DESTDIR)$(PYTHONDIR)/flytuned/
	install -m 644 $(PY_FTT) $(DESTDIR)$(PYTHONDIR)/flytuned/torch/
	install -m 644 $(PY_FTC) $(DESTDIR)$(PYTHONDIR)/flytuned/torch/csrc/

# ---------------------------------------------------------------- Debian
# `make deb`: the packages (flytuned, libflyclient0, libflyclient-dev,
# python3-flyclient) built by dpkg-buildpackage from debian/ in a copy of
# the tree ($(DEB_DIR)/flytuned: its clean step and build stay out of this
# tree's build/), then checked by lintian (tags not overridden in
# debian/*.lintian-overrides fail).  The .debs land in $(DEB_DIR).
#   GPU=none|cuda|hip|auto   which GPU kernel libraries the package has
#   DEB_BUILD_OPTIONS=nocheck parallel=2 noddebs   as for dpkg-buildpackage
#   DEB_LINTIAN=0            skip lintian
# (The package build does not see this make's command line: MAKEFLAGS is
# dropped, so `make test SAN=...` or BUILD=... cannot leak into it.)
DEB_DIR ?= $(BUILD)/deb
DEB_LINTIAN ?= 1
deb: deb-version
	$(Q)rm -rf $(DEB_DIR) && mkdir -p $(DEB_DIR)/flytuned
	$(Q)tar -cf - --exclude=./build --exclude=./$(BUILD) --exclude=./.git \
		--exclude=./.state --exclude=./.devdeps --exclude=__pycache__ . | \
		tar -C $(DEB_DIR)/flytuned -xf -
	$(Q)cd $(DEB_DIR)/flytuned && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
		GPU=$(GPU) dpkg-buildpackage -us -uc -b \
		> ../build.log 2>&1 || { tail -40 ../build.log; \
		echo "deb: dpkg-buildpackage failed (log: $(DEB_DIR)/build.log)"; exit 1; }
	$(Q)rm -rf $(DEB_DIR)/flytuned
	$(Q)ls $(DEB_DIR)/*.deb
ifneq ($(DEB_LINTIAN),0)
	$(Q)lintian --fail-on error,warning --display-info $(DEB_DIR)/*.changes
endif
# The package's version is the project's: debian/changelog's top entry is
# VERSION, or VERSION+suffix (a local rebuild) or VERSION-N (a Debian
# revision).
deb-version:
	$(Q)v=$$(sed -n '1s/^flytuned (\([^)]*\)).*/\1/p' debian/changelog); \
	case "$$v" in \
	"$(VERSION)"|"$(VERSION)"+*|"$(VERSION)"-*) ;; \
	*) echo "debian/changelog says '$$v', VERSION says $(VERSION)"; exit 1 ;; \
	esac

clean:
	rm -rf build

# (Not the copy of the tree that `make deb` builds in $(DEB_DIR), nor its
# tmpfiles.d and sysusers.d directories.)
-include $(shell find $(BUILD) -path '$(DEB_DIR)' -prune -o -type f -name '*.d' -print 2>/dev/null)
