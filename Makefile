# t5train Makefile
#
#   make                 build ./t5train
#   make test            build and run every test (GPU tests are skipped without a GPU) and the floor
#                        check of the includes (scripts/check_floors.sh, docs/layout.md)
#   make test-gpu        build and run only the GPU tests
#   make test-cpu        build and run only the CPU tests
#   make bench           build the benchmarks under test/bench
#   make clean
#
# Overridable: CUDA_HOME, NCCL_HOME, NVCC, CC, CXX, GPU_ARCH (sm_90a; "auto" asks nvidia-smi),
#              BUILD (object folder), DEBUG=1 (-O0 -g -G, synchronising checks), VERBOSE=1,
#              FAST_MATH=1 (--use_fast_math for nvcc), MPI=auto|0|1 with MPI_HOME.
# Dependencies are found with pkg-config (jansson, sentencepiece, cmocka) or a probe
# compile (NCCL, OpenMP, MPI), never with dpkg.

CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= $(CUDA_HOME)
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CC        ?= gcc
CXX       ?= g++
GPU_ARCH  ?= sm_90a
BUILD     ?= build
DEBUG     ?= 0
VERBOSE   ?= 0
FAST_MATH ?= 0
MPI       ?= auto
PKG_CONFIG ?= pkg-config

ifeq ($(origin CC),default)
  CC := gcc
endif
ifeq ($(origin CXX),default)
  CXX := g++
endif

ifeq ($(BUILD),build)
  BIN ?= t5train
else
  BIN ?= $(BUILD)/t5train
endif

ifeq ($(VERBOSE),1)
  Q :=
  say = @true
else
  Q := @
  say = @printf '%s\n'
endif

# ---------------------------------------------------------------------------------------------
# feature detection (printed once, llm.c style)

ifeq ($(GPU_ARCH),auto)
  GPU_CC := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | sort -n | head -1 | tr -d .)
  ifeq ($(GPU_CC),)
    GPU_ARCH := sm_90a
  else ifeq ($(GPU_CC),90)
    GPU_ARCH := sm_90a
  else
    GPU_ARCH := sm_$(GPU_CC)
  endif
endif
GPU_NUM := $(patsubst sm_%,%,$(GPU_ARCH))
NVCC_GENCODE ?= -gencode arch=compute_$(GPU_NUM),code=sm_$(GPU_NUM)

HAVE_NVCC     := $(shell test -x $(NVCC) && echo 1)
HASH := \#
HAVE_NCCL     := $(shell printf '$(HASH)include <nccl.h>\nint main(void){return 0;}\n' | $(CC) -x c - -fsyntax-only -I$(NCCL_HOME)/include -I$(CUDA_HOME)/include 2>/dev/null && echo 1)
HAVE_JANSSON  := $(shell $(PKG_CONFIG) --exists jansson 2>/dev/null && echo 1)
HAVE_SPM      := $(shell $(PKG_CONFIG) --exists sentencepiece 2>/dev/null && echo 1)
HAVE_CMOCKA   := $(shell $(PKG_CONFIG) --exists cmocka 2>/dev/null && echo 1)
HAVE_CURL     := $(shell $(PKG_CONFIG) --exists libcurl 2>/dev/null && echo 1)
HAVE_ARCHIVE  := $(shell $(PKG_CONFIG) --exists libarchive 2>/dev/null && echo 1)
HAVE_PROTOBUF_C := $(shell $(PKG_CONFIG) --exists libprotobuf-c 2>/dev/null && echo 1)
HAVE_OPENMP   := $(shell printf '$(HASH)include <omp.h>\nint main(void){return omp_get_max_threads()<0;}\n' | $(CC) -x c - -fopenmp -o /dev/null 2>/dev/null && echo 1)
ifeq ($(MPI),auto)
  HAVE_MPI := $(shell command -v mpicc >/dev/null 2>&1 && mpicc --showme:version >/dev/null 2>&1 && echo 1)
else ifeq ($(MPI),1)
  HAVE_MPI := 1
endif

ifeq ($(MAKELEVEL),0)
ifeq ($(filter clean,$(MAKECMDGOALS)),)
  $(info ---------------------------------------------)
  $(info $(if $(HAVE_NVCC),✓ nvcc found ($(NVCC)),✗ nvcc not found at $(NVCC): set CUDA_HOME))
  $(info → GPU target $(GPU_ARCH))
  $(info $(if $(HAVE_NCCL),✓ NCCL found,✗ NCCL not found: set NCCL_HOME))
  $(info $(if $(HAVE_JANSSON),✓ jansson found,✗ jansson not found: run scripts/install_deps.sh))
  $(info $(if $(HAVE_SPM),✓ SentencePiece found,✗ SentencePiece not found: run scripts/install_deps.sh))
  $(info $(if $(HAVE_OPENMP),✓ OpenMP found,✗ OpenMP not found))
  $(info $(if $(HAVE_CURL),✓ libcurl found (downloads; loaded at run time),✗ libcurl not found: no Hub/dataset download; run scripts/install_deps.sh))
  $(info $(if $(HAVE_ARCHIVE),✓ libarchive found (dataset extraction; loaded at run time),✗ libarchive not found: no dataset extraction; run scripts/install_deps.sh))
  $(info $(if $(HAVE_PROTOBUF_C),✓ protobuf-c found (TensorBoard event files; linked statically),✗ protobuf-c not found: no --report_to tensorboard; run scripts/install_deps.sh))
  $(info $(if $(HAVE_CMOCKA),✓ cmocka found (tests),✗ cmocka not found: tests cannot build; run scripts/install_deps.sh))
  $(info $(if $(HAVE_MPI),✓ MPI found,✗ MPI not found (multi-process launch disabled)))
  $(info ---------------------------------------------)
endif
endif

# ---------------------------------------------------------------------------------------------
# flags

INCLUDES := -I. -I$(CUDA_HOME)/include -I$(NCCL_HOME)/include
PKG_CFLAGS := $(shell $(PKG_CONFIG) --cflags jansson sentencepiece 2>/dev/null)
PKG_LIBS   := $(shell $(PKG_CONFIG) --libs jansson sentencepiece 2>/dev/null)
CMOCKA_CFLAGS := $(shell $(PKG_CONFIG) --cflags cmocka 2>/dev/null)
CMOCKA_LIBS   := $(shell $(PKG_CONFIG) --libs cmocka 2>/dev/null)

ifeq ($(DEBUG),1)
  OPT := -O0 -g -DT5_DEBUG=1
  NVOPT := -O0 -g -G -DT5_DEBUG=1
else
  OPT := -O2 -g
  NVOPT := -O3 -lineinfo
endif
ifeq ($(FAST_MATH),1)
  NVOPT += --use_fast_math
endif
# compressed fatbins (nvcc >= 12.8): every binary links the whole kernel library statically, and the device
# machine takes at most 64 MiB of binaries per call; decompression happens once, at module load
NVCC_COMPRESS ?= $(shell $(NVCC) --help 2>/dev/null | grep -q -- '--compress-mode' && echo --compress-mode=size)
NVOPT += $(NVCC_COMPRESS)

DEFS := -D_GNU_SOURCE -DT5_GPU_ARCH=\"$(GPU_ARCH)\"
ifeq ($(HAVE_MPI),1)
  DEFS += -DT5_HAVE_MPI=1
  # src/launch/mpi_boot.c: mpicc's own flags, or MPI_HOME's include/lib
  ifneq ($(MPI_HOME),)
    MPI_CFLAGS ?= -I$(MPI_HOME)/include
    MPI_LIBS   ?= -L$(MPI_HOME)/lib -Wl,-rpath,$(MPI_HOME)/lib -lmpi
  else
    MPI_CFLAGS ?= $(shell mpicc --showme:compile 2>/dev/null)
    MPI_LIBS   ?= $(shell mpicc --showme:link 2>/dev/null)
  endif
endif
# libcurl / libarchive: headers only (types and constants); the libraries are dlopen'ed on first use
# (src/download/dynlib.c, docs/download.md "Linking"), so no link flags
ifeq ($(HAVE_CURL),1)
  DEFS += -DT5_HAVE_CURL=1
  PKG_DL_CFLAGS += $(shell $(PKG_CONFIG) --cflags libcurl 2>/dev/null)
endif
ifeq ($(HAVE_ARCHIVE),1)
  DEFS += -DT5_HAVE_ARCHIVE=1
  PKG_DL_CFLAGS += $(shell $(PKG_CONFIG) --cflags libarchive 2>/dev/null)
endif

# protobuf-c: --report_to tensorboard (src/report/tb_writer.c and the committed tb_event.pb-c.c, generated from
# tb_event.proto by `make proto`); the static archive, so the binary needs no libprotobuf-c on the GPU machine
ifeq ($(HAVE_PROTOBUF_C),1)
  DEFS += -DT5_HAVE_PROTOBUF_C=1
  PKG_DL_CFLAGS += $(shell $(PKG_CONFIG) --cflags libprotobuf-c 2>/dev/null)
  PROTOBUF_C_LIBS := -Wl,-Bstatic $(shell $(PKG_CONFIG) --libs libprotobuf-c 2>/dev/null) -Wl,-Bdynamic
endif

CFLAGS   := -std=gnu11 $(OPT) -Wall -Wextra -fopenmp $(DEFS) $(INCLUDES) $(PKG_CFLAGS) $(PKG_DL_CFLAGS) $(MPI_CFLAGS)
CXXFLAGS := -std=c++17 $(OPT) -Wall -Wextra -fopenmp $(DEFS) $(INCLUDES) $(PKG_CFLAGS) $(PKG_DL_CFLAGS)
NVCCFLAGS := -std=c++17 $(NVOPT) $(NVCC_GENCODE) $(DEFS) $(INCLUDES) -Xcompiler -Wall
LDFLAGS  := -L$(CUDA_HOME)/lib64 -L$(NCCL_HOME)/lib64 -L$(NCCL_HOME)/lib -Wl,-rpath,$(CUDA_HOME)/lib64
LDLIBS   := -lcudart -lcublasLt -lcublas -lnccl $(PKG_LIBS) $(PROTOBUF_C_LIBS) $(MPI_LIBS) -fopenmp -lm -lpthread -ldl -lrt

# ---------------------------------------------------------------------------------------------
# sources: every file of every room is built (docs/layout.md: src/base, cuda, model, data, src/zero,
# src/report, src/eval, src/train, src/cli); src/cli/main.c is kept out of the library

C_SRCS   := $(filter-out src/cli/main.c,$(wildcard src/*/*.c model/*.c data/*.c))
ifneq ($(HAVE_PROTOBUF_C),1)
  C_SRCS := $(filter-out %.pb-c.c,$(C_SRCS))
endif
CXX_SRCS := $(wildcard data/*.cc)
CU_SRCS  := $(wildcard src/base/*.cu cuda/*.cu)
OBJS     := $(C_SRCS:%.c=$(BUILD)/%.o) $(CXX_SRCS:%.cc=$(BUILD)/%.o) $(CU_SRCS:%.cu=$(BUILD)/%.o)
LIB      := $(BUILD)/libt5train.a

TEST_SRCS  := $(wildcard test/test_*.c)
TEST_BINS  := $(TEST_SRCS:test/%.c=$(BUILD)/test/%)
GPU_TESTS  := $(filter $(BUILD)/test/test_gpu_%,$(TEST_BINS))
CPU_TESTS  := $(filter-out $(GPU_TESTS),$(TEST_BINS))
BENCH_SRCS := $(wildcard test/bench/*.c) $(wildcard test/bench/*.cu)
BENCH_BINS := $(patsubst test/bench/%.c,$(BUILD)/bench/%,$(patsubst test/bench/%.cu,$(BUILD)/bench/%,$(BENCH_SRCS)))

.PHONY: all test test-cpu test-gpu test-ops tests bench clean
all: $(BIN)
ifneq ($(BIN),t5train)
.PHONY: t5train
t5train: $(BIN)
endif

$(BUILD)/%.o: %.c
	$(say) "Compiling $< > $@"
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cc
	$(say) "Compiling $< > $@"
	@mkdir -p $(dir $@)
	$(Q)$(CXX) $(CXXFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cu
	$(say) "Compiling $< > $@"
	@mkdir -p $(dir $@)
	$(Q)$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

# the commit goes into version.o (t5train --version, t5train env); version.o is rebuilt when it changes
GIT_COMMIT := $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
$(shell mkdir -p $(BUILD) && (echo '$(GIT_COMMIT)' | cmp -s - $(BUILD)/git_commit || echo '$(GIT_COMMIT)' > $(BUILD)/git_commit))
$(BUILD)/src/cli/version.o: $(BUILD)/git_commit
$(BUILD)/src/cli/version.o: CFLAGS += -DT5_GIT_COMMIT=\"$(GIT_COMMIT)\"

$(LIB): $(OBJS)
	$(say) "Archiving $@"
	@rm -f $@
	$(Q)ar rcs $@ $^

$(BIN): $(BUILD)/src/cli/main.o $(LIB)
	$(say) "Linking $@"
	$(Q)$(CXX) -o $@ $^ $(LDFLAGS) $(LDLIBS)

$(BUILD)/test/t5test.o: test/t5test.c
	$(say) "Compiling $< > $@"
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(CMOCKA_CFLAGS) -Itest -MMD -MP -c $< -o $@

$(BUILD)/test/%: test/%.c $(BUILD)/test/t5test.o $(LIB)
	$(say) "Compiling $< > $@"
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(CMOCKA_CFLAGS) -Itest -MMD -MP -MT $@ -c $< -o $@.o
	$(Q)$(CXX) -o $@ $@.o $(BUILD)/test/t5test.o $(LIB) $(LDFLAGS) $(CMOCKA_LIBS) $(LDLIBS)

$(BUILD)/bench/%: test/bench/%.c $(LIB)
	$(say) "Compiling $< > $@"
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -Itest -c $< -o $@.o
	$(Q)$(CXX) -o $@ $@.o $(LIB) $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/%: test/bench/%.cu $(LIB)
	$(say) "Compiling $< > $@"
	@mkdir -p $(dir $@)
	$(Q)$(NVCC) $(NVCCFLAGS) -Itest -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

tests: $(TEST_BINS) $(BIN)
bench: $(BENCH_BINS) $(BIN)

# the test runner prints one line "N passed, N failed, N skipped" and exits non-zero on failure;
# scripts/check_floors.sh (TAP, one test) fails when a source file includes from a higher floor
FLOOR_CHECK := scripts/check_floors.sh
# the long-run comparison's tools (Python, standard library only; TAP like the rest)
PY_TESTS := test/test_long_run_tools.py
test: $(TEST_BINS) $(BIN)
	@T5TRAIN_BIN=$(abspath $(BIN)) bash test/run_tests.sh $(TEST_BINS) $(FLOOR_CHECK) $(PY_TESTS)

test-cpu: $(CPU_TESTS) $(BIN)
	@T5TRAIN_BIN=$(abspath $(BIN)) bash test/run_tests.sh $(CPU_TESTS) $(FLOOR_CHECK) $(PY_TESTS)

test-gpu: $(GPU_TESTS) $(BIN)
	@T5TRAIN_BIN=$(abspath $(BIN)) T5TRAIN_REQUIRE_GPU=1 bash test/run_tests.sh $(GPU_TESTS)

test-ops: test-gpu

# regenerates the committed protobuf-c code of the TensorBoard event messages (needs protobuf-c-compiler)
.PHONY: proto
proto:
	cd src/report && protoc-c --c_out=. tb_event.proto

clean:
	rm -rf $(BUILD) $(BIN)

-include $(OBJS:.o=.d) $(BUILD)/src/cli/main.d $(TEST_BINS:%=%.d)
