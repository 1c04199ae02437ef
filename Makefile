# colibri — build, test, sanitize.
#   make                 ./colibri for this CPU (ARCH=native), colibri-convert, colibri-synth
#   make CUDA=1          ./colibri with the CUDA backend (nvcc; runs on the CPU without a GPU)
#   make MPI=1           ./colibri that spreads routed experts over MPI ranks (mpicc; docs/mpi.md)
#   make OPENMP=0        without OpenMP (loading, pinning and conversion on one
#                        thread; the forward pass keeps its threads)
#   make ARCH=portable   a generic x86-64 / armv8-a binary (kernels still
#                        dispatch at startup on what the CPU offers)
#   make test            every test, warnings as errors, no network/GPU/pip
#   make sanitize        the same tests under ASan + UBSan, the threaded paths under TSan
#   make bench           benchmark report (bench/results.json; not part of test)
#   make llamacpp        the llama.cpp peer for make bench (tools/install_llamacpp.sh)
#   make fuzz            the fuzz targets of tests/fuzz (fuzz-long, fuzz-smoke)
#   make CC=x86_64-w64-mingw32-gcc   colibri.exe, colibri-convert.exe,
#                        colibri-synth.exe for Windows (objects in build/win/)
#   make test-windows    that build's tests under wine (tests/run_windows.py)
# Parallel builds work (make -j); objects go to build/<flavour>/, one
# flavour per set of flags, with dependencies tracked by the compiler.
.DEFAULT_GOAL := all
CC ?= cc
AR ?= ar
PYTHON ?= python3
UNAME_S := $(shell uname -s 2>/dev/null)
UNAME_M := $(shell uname -m 2>/dev/null)
# Apple silicon: Apple clang's default CPU (apple-m1) already has dotprod,
# and i8mm (M2 on) is chosen at run time, so no -march.
ifeq ($(UNAME_S)-$(UNAME_M),Darwin-arm64)
  ARCH ?= portable
endif
ARCH ?= native

ifeq ($(ARCH),portable)
  ARCHFLAGS :=
else
  ARCHFLAGS := -march=$(ARCH)
endif

# -ffp-contract=off: no silent FMA contraction, so results do not depend on
# what the compiler fuses (token-exactness across builds).
BASEFLAGS := -std=c11 -O2 -ffp-contract=off -Wall -Wextra -D_GNU_SOURCE -I.
CFLAGS ?=
LIBS := -lm -lpthread
# GCC's -Wformat-truncation flags the bounded snprintf of names into fixed
# buffers, which truncate by design; compilers without the option (clang
# before 18) would reject -Wno- of it under -Werror.
ifeq ($(shell $(CC) -Werror -Wno-format-truncation -x c -c /dev/null -o /dev/null 2>/dev/null && echo 1),1)
  BASEFLAGS += -Wno-format-truncation
endif
# OpenMP runs the loops that load, pin and convert in parallel (the forward
# pass has its own threads, team.h). OPENMP=0, or macOS without Homebrew's
# libomp, builds without it: those loops then run on one thread.
OMPFLAGS := -fopenmp
NOOMPFLAGS := -Wno-unknown-pragmas
NPROC := $(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)

# macOS (Apple clang): OpenMP and libmicrohttpd from Homebrew when present
# (/opt/homebrew on Apple silicon, /usr/local on Intel); the linker has no
# --wrap, so the fault-injection builds are left out.
ifeq ($(UNAME_S),Darwin)
  MACOS := 1
  BREW ?= $(firstword $(wildcard /opt/homebrew /usr/local))
  LIBOMP ?= $(firstword $(wildcard $(BREW)/opt/libomp))
  BASEFLAGS += -D_DARWIN_C_SOURCE $(if $(BREW),-I$(BREW)/include)
  LIBS += $(if $(BREW),-L$(BREW)/lib)
  ifneq ($(LIBOMP),)
    OMPFLAGS := -Xpreprocessor -fopenmp -I$(LIBOMP)/include
    LIBS += -L$(LIBOMP)/lib -lomp
  else
    OMPFLAGS := $(NOOMPFLAGS)
    $(info macOS without Homebrew's libomp (brew install libomp): building without OpenMP; loading, pinning and conversion run on one thread)
  endif
endif
ifeq ($(OPENMP),0)
  OMPFLAGS := $(NOOMPFLAGS)
endif
BASEFLAGS += $(OMPFLAGS)

# Windows through MinGW-w64 (a cross compiler, or MSYS2's gcc): programs end
# in .exe and link statically (libgomp, winpthreads: nothing to install
# beside them). -iquote: the repository's io.h must not hide the CRT's
# <io.h>. -Wno-format: GCC checks format(printf) attributes against the
# Microsoft CRT's printf, while compat.h's stdio is MinGW's C99 one (%zu,
# %lld); the Linux build checks the same formats. compat.h maps the POSIX calls; io_uring, libnuma and
# libmicrohttpd do not exist there, so the probes below find nothing.
ifneq ($(findstring mingw,$(shell $(CC) -dumpmachine 2>/dev/null)),)
  WINDOWS := 1
  EXE := .exe
  BASEFLAGS := $(subst -I.,-iquote .,$(BASEFLAGS)) -D_FILE_OFFSET_BITS=64 -Wno-format
  LIBS := -static -lm -lpthread -lshell32
endif

# Optional libraries, used when their headers and libraries are present
# (URING=0 / NUMA=0 / MHD=0 build without them). libmicrohttpd serves the
# HTTP API (--serve): a maintained HTTP/1.1 implementation rather than a
# hand-written parser facing the network.
HASH := \#
probe = $(shell printf '$(HASH)include <$(1)>\nint main(void){return 0;}\n' | $(CC) -x c - $(BASEFLAGS) $(2) $(LIBS) -o /dev/null 2>/dev/null && echo 1)
ifneq ($(URING),0)
  ifeq ($(call probe,liburing.h,-luring),1)
    OPTDEFS += -DCOLI_HAVE_URING
    OPTLIBS += -luring
  endif
endif
ifneq ($(NUMA),0)
  ifeq ($(call probe,numa.h,-lnuma),1)
    OPTDEFS += -DCOLI_HAVE_NUMA
    OPTLIBS += -lnuma
  endif
endif
ifneq ($(MHD),0)
  ifeq ($(call probe,microhttpd.h,-lmicrohttpd),1)
    OPTDEFS += -DCOLI_HAVE_MHD
    OPTLIBS += -lmicrohttpd
  endif
endif

# CUDA (backend_cuda.cu, behind backend_cuda.h's C ABI): make CUDA=1 builds
# ./colibri with it (build/rel-cuda); make test builds build/cuda (colibri
# and test_cuda) wherever nvcc is found, so the CUDA code compiles warning
# free on every build machine and runs where a GPU is. The runtime is linked
# statically: without a driver or GPU the binary runs on the CPU and says so.
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
ifeq ($(CUDA)$(NVCC),1)
  $(error CUDA=1: nvcc was not found on PATH or in /usr/local/cuda/bin (set NVCC=/path/to/nvcc))
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCHS ?= 75 80 86 89 90 100 120
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
                -gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS))
NVCCFLAGS := -O2 -std=c++17 -I. -DCOLI_HAVE_CUDA -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror $(CUDA_GENCODE)
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lpthread -lstdc++
build/%/backend_cuda.o: backend_cuda.cu backend_cuda.h fmath.h Makefile
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<
build/%/libcolicuda.a: build/%/backend_cuda.o
	@rm -f $@
	$(AR) rcs $@ $^

# MPI (ranks.h): make MPI=1 builds ./colibri with mpicc (build/rel-mpi), so
# that mpirun -np N ./colibri MODEL spreads the routed experts over N
# processes; make test builds build/mpi wherever mpicc and mpirun are found
# (tests/test_mpi.py). A build without it refuses to run under mpirun.
MPICC ?= $(shell command -v mpicc 2>/dev/null)
MPIRUN ?= $(shell command -v mpirun 2>/dev/null)
ifeq ($(MPI)$(MPICC),1)
  $(error MPI=1: mpicc was not found on PATH (Debian: apt-get install libopenmpi-dev openmpi-bin, or set MPICC=/path/to/mpicc))
endif
ifeq ($(MPI)$(CUDA),11)
  $(error MPI=1 and CUDA=1 together are not supported yet: build one of them)
endif

# The matmul kernels: one translation unit per instruction-set family,
# compiled once per flavour into an archive every multiplying program links.
KERNEL_SRC := $(sort $(wildcard kernels/*.c))
TEST_SRCS := $(sort $(wildcard tests/test_*.c))
TEST_PY := $(sort $(wildcard tests/test_*.py))
BENCH_C := bench_quant bench_io bench_mem bench_tok bench_grammar bench_peak bench_kv
DEPFLAGS = -MMD -MP -MF $@.d

# $(1) = build directory, $(2) = compile flags, $(3) = libraries, $(4) = the
# flavour whose kernel archive it links (kernels use no optional library),
# $(5) and $(6) = a compiler and archiver other than $(CC) and $(AR) (the
# aarch64 cross build)
#
# $(1)/.flags holds the flavour's compiler, flags and libraries, rewritten
# only when they change: every object depends on it, so a library found
# (or lost) since the last build rebuilds what it changes.
define flavour
$(1)/.flags: FORCE
	@mkdir -p $$(@D)
	@printf '%s\n' '$(or $(5),$(CC)) $(2) $(3)' | cmp -s - $$@ || printf '%s\n' '$(or $(5),$(CC)) $(2) $(3)' > $$@
$(1)/kernels/%.o: kernels/%.c Makefile $(1)/.flags
	@mkdir -p $$(@D)
	$(or $(5),$$(CC)) $(2) $$(DEPFLAGS) -c -o $$@ $$<
$(1)/libkernels.a: $(patsubst kernels/%.c,$(1)/kernels/%.o,$(KERNEL_SRC))
	@rm -f $$@
	$(or $(6),$$(AR)) rcs $$@ $$^
$(1)/colibri.o: colibri.c Makefile $(1)/.flags
	@mkdir -p $$(@D)
	$(or $(5),$$(CC)) $(2) $$(DEPFLAGS) -c -o $$@ $$<
$(1)/colibri$(EXE): $(1)/colibri.o $(4)/libkernels.a
	$(or $(5),$$(CC)) $(2) -o $$@ $$^ $(3)
$(1)/colibri-synth$(EXE): tools/make_synth.c Makefile $(1)/.flags
	@mkdir -p $$(@D)
	$(or $(5),$$(CC)) $(2) $$(DEPFLAGS) -o $$@ $$< $(3)
$(1)/colibri-convert$(EXE): tools/convert.c Makefile $(1)/.flags
	@mkdir -p $$(@D)
	$(or $(5),$$(CC)) $(2) $$(DEPFLAGS) -o $$@ $$< $(3)
$(1)/test_%$(EXE): tests/test_%.c $(4)/libkernels.a Makefile $(1)/.flags
	@mkdir -p $$(@D)
	$(or $(5),$$(CC)) $(2) $$(DEPFLAGS) -o $$@ $$< $(4)/libkernels.a $(3)
$(1)/fault.o: tests/fault.c Makefile $(1)/.flags
	@mkdir -p $$(@D)
	$(or $(5),$$(CC)) $(2) $$(DEPFLAGS) -c -o $$@ $$<
$(1)/colibri-fault: $(1)/colibri.o $(1)/fault.o $(4)/libkernels.a
	$(or $(5),$$(CC)) $(2) $$(WRAPS) -o $$@ $$^ $(3)
$(1)/colibri-convert-fault: tools/convert.c $(1)/fault.o Makefile $(1)/.flags
	$(or $(5),$$(CC)) $(2) $$(WRAPS) -o $$@ $$< $(1)/fault.o $(3)
$(1)/bench_%: bench/bench_%.c $(4)/libkernels.a Makefile $(1)/.flags
	@mkdir -p $$(@D)
	$(or $(5),$$(CC)) $(2) $$(DEPFLAGS) -o $$@ $$< $(4)/libkernels.a $(3)
-include $(wildcard $(1)/*.d $(1)/kernels/*.d)
endef

# The fault-loop builds (tests/fault.c, tests/test_faults.py): every
# allocation, read and write of the engine and the converter goes through
# the injector.
WRAPS := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign,--wrap=aligned_alloc,--wrap=strdup,--wrap=strndup,--wrap=pread,--wrap=write,--wrap=fsync,--wrap=rename

RELFLAGS := $(BASEFLAGS) $(OPTDEFS) $(ARCHFLAGS) $(CFLAGS)
TESTFLAGS := $(BASEFLAGS) $(OPTDEFS) $(ARCHFLAGS) -Werror

ifeq ($(WINDOWS),1)
# The Windows flavours: release and tests (warnings as errors).
$(eval $(call flavour,build/win/rel,$(RELFLAGS),$(LIBS),build/win/rel))
$(eval $(call flavour,build/win/test,$(TESTFLAGS),$(LIBS),build/win/test))
WIN_PROGS := colibri.exe colibri-synth.exe colibri-convert.exe
all: $(WIN_PROGS)
$(WIN_PROGS): %: build/win/rel/%
	cp $< $@
# The C tests that run on Windows (not the CUDA one) and the programs.
WIN_TESTS := $(filter-out test_cuda,$(patsubst tests/%.c,%,$(TEST_SRCS)))
win-test-build: $(foreach t,$(WIN_TESTS) colibri colibri-synth colibri-convert,build/win/test/$(t).exe)
.PHONY: all win-test-build
else
SANFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
# ThreadSanitizer does not see inside libgomp, so its build has no OpenMP:
# one compute thread beside the real reader pool and io_uring completions.
TSANFLAGS := $(filter-out $(OMPFLAGS),$(BASEFLAGS)) $(NOOMPFLAGS) $(OPTDEFS) $(ARCHFLAGS) -Werror -O1 -g -fsanitize=thread

$(eval $(call flavour,build/rel,$(RELFLAGS),$(LIBS) $(OPTLIBS),build/rel))
$(eval $(call flavour,build/test,$(TESTFLAGS),$(LIBS) $(OPTLIBS),build/test))
$(eval $(call flavour,build/asan,$(TESTFLAGS) $(SANFLAGS),$(LIBS) $(OPTLIBS),build/asan))
$(eval $(call flavour,build/tsan,$(TSANFLAGS),$(LIBS) $(OPTLIBS),build/tsan))
# Without liburing, libnuma, libmicrohttpd and OpenMP (what macOS builds
# without Homebrew): that build must keep working.
$(eval $(call flavour,build/nolibs,$(filter-out $(OMPFLAGS),$(BASEFLAGS)) $(NOOMPFLAGS) $(ARCHFLAGS) -Werror,$(LIBS),build/nolibs))
# ARCH=portable (no -march): kernels still dispatch at run time.
$(eval $(call flavour,build/portable,$(BASEFLAGS) $(OPTDEFS) -Werror,$(LIBS) $(OPTLIBS),build/portable))
# aarch64 (portable armv8-a; dotprod and i8mm reached through dispatch),
# cross-compiled without the optional libraries and run under qemu-user by
# tests/run_arm.sh, which builds it (make arm-build) where the tools exist.
ARM_CC ?= aarch64-linux-gnu-gcc
ARM_AR ?= aarch64-linux-gnu-ar
$(eval $(call flavour,build/arm,$(BASEFLAGS) -march=armv8-a -Werror,$(LIBS),build/arm,$(ARM_CC),$(ARM_AR)))
# aarch64 as Apple clang builds it for Apple silicon: clang 16 (Apple clang
# 15 is LLVM 16), -mcpu=apple-m1 (dotprod in the baseline, i8mm through its
# target attribute), no OpenMP; run under qemu by tests/run.py, whose
# tokens must equal the x86-64 build's (README: macOS).
ARM_CLANG ?= clang-16
$(eval $(call flavour,build/arm-clang,$(filter-out $(OMPFLAGS) -Wno-format-truncation,$(BASEFLAGS)) $(NOOMPFLAGS) -mcpu=apple-m1 -Werror,$(LIBS),build/arm-clang,$(ARM_CLANG) --target=aarch64-linux-gnu,$(ARM_AR)))
arm-clang-build: build/arm-clang/test_quant build/arm-clang/colibri build/arm-clang/qemu/colibri
build/arm-clang/qemu/%: tests/qemu_arm.sh
	@mkdir -p $(@D)
	ln -sf ../../../tests/qemu_arm.sh $@

# The MPI builds: make test's and make MPI=1's (mpicc wraps this CC).
$(eval $(call flavour,build/mpi,$(TESTFLAGS) -DCOLI_MPI,$(LIBS) $(OPTLIBS),build/test,$(MPICC)))
$(eval $(call flavour,build/rel-mpi,$(RELFLAGS) -DCOLI_MPI,$(LIBS) $(OPTLIBS),build/rel,$(MPICC)))
# ThreadSanitizer over the ranks (make sanitize): rank 0's MPI calls on
# thread 0 of the team while the others compute, the followers' loop.
$(eval $(call flavour,build/tsan-mpi,$(TSANFLAGS) -DCOLI_MPI,$(LIBS) $(OPTLIBS),build/tsan,$(MPICC)))

# The CUDA builds: make test's (test flags) and make CUDA=1's.
$(eval $(call flavour,build/cuda,$(TESTFLAGS) -DCOLI_HAVE_CUDA,build/cuda/libcolicuda.a $(CUDA_LIBS) $(LIBS) $(OPTLIBS),build/test))
$(eval $(call flavour,build/rel-cuda,$(RELFLAGS) -DCOLI_HAVE_CUDA,build/rel-cuda/libcolicuda.a $(CUDA_LIBS) $(LIBS) $(OPTLIBS),build/rel))
build/cuda/colibri build/cuda/test_cuda build/cuda/test_batch build/cuda/colibri-convert build/cuda/colibri-synth: build/cuda/libcolicuda.a
build/rel-cuda/colibri build/rel-cuda/bench_cuda build/rel-cuda/colibri-convert build/rel-cuda/colibri-synth: build/rel-cuda/libcolicuda.a

# The CUDA build with tests/cuda_host.c in place of backend_cuda.cu (host
# memory, kernels.h's reference integer path): make test runs the engine's
# side of the backend with it on machines without a GPU (tests/run.py).
$(eval $(call flavour,build/cuda-host,$(TESTFLAGS) -DCOLI_HAVE_CUDA,build/cuda-host/libcolicuda.a build/test/libkernels.a $(LIBS) $(OPTLIBS),build/test))
build/cuda-host/cuda_host.o: tests/cuda_host.c Makefile
	@mkdir -p $(@D)
	$(CC) $(TESTFLAGS) -DCOLI_HAVE_CUDA $(DEPFLAGS) -c -o $@ $<
build/cuda-host/libcolicuda.a: build/cuda-host/cuda_host.o
	@rm -f $@
	$(AR) rcs $@ $^
build/cuda-host/colibri build/cuda-host/test_cuda build/cuda-host/test_batch: build/cuda-host/libcolicuda.a
build/cuda-host/colibri-synth: build/cuda-host/libcolicuda.a build/test/libkernels.a # on its link line with the flavour's libraries
# The same under ThreadSanitizer (make sanitize): the GPU tier's barriers,
# copies and fallback with the team's threads.
$(eval $(call flavour,build/tsan-cuda-host,$(TSANFLAGS) -DCOLI_HAVE_CUDA,build/tsan-cuda-host/libcolicuda.a build/tsan/libkernels.a $(LIBS) $(OPTLIBS),build/tsan))
build/tsan-cuda-host/cuda_host.o: tests/cuda_host.c Makefile
	@mkdir -p $(@D)
	$(CC) $(TSANFLAGS) -DCOLI_HAVE_CUDA $(DEPFLAGS) -c -o $@ $<
build/tsan-cuda-host/libcolicuda.a: build/tsan-cuda-host/cuda_host.o
	@rm -f $@
	$(AR) rcs $@ $^
build/tsan-cuda-host/colibri: build/tsan-cuda-host/libcolicuda.a

all: colibri colibri-synth colibri-convert

ifeq ($(CUDA),1)
colibri: build/rel-cuda/colibri
	cp $< $@
colibri-synth colibri-convert: %: build/rel/%
	cp $< $@
else ifeq ($(MPI),1)
colibri: build/rel-mpi/colibri
	cp $< $@
colibri-synth colibri-convert: %: build/rel/%
	cp $< $@
else
colibri colibri-synth colibri-convert: %: build/rel/%
	cp $< $@
endif
endif # WINDOWS

# ---- tests --------------------------------------------------------------
# Each tests/test_*.c is one program: it includes the header(s) it tests (or
# colibri.c with COLI_NO_MAIN) and links the kernels. Python tests drive the
# binaries. Everything runs from the repository root; tests/run.py prints
# each part's passed and skipped checks and fails when a part that
# COLI_REQUIRE names was skipped.
# The builds run with one job per CPU even when make was started without -j.
TEST_BINS = $(patsubst tests/%.c,$(1)/%,$(TEST_SRCS)) $(1)/colibri $(1)/colibri-synth $(1)/colibri-convert \
            $(if $(MACOS),,$(1)/colibri-fault $(1)/colibri-convert-fault)

CUDA_TEST_BINS := $(if $(filter 0,$(CUDA)),,$(if $(NVCC),build/cuda/colibri build/cuda/test_cuda build/cuda/test_batch))
MPI_TEST_BINS := $(if $(filter 0,$(MPI)),,$(if $(and $(MPICC),$(MPIRUN)),build/mpi/colibri))
MPI_SAN_BINS := $(if $(filter 0,$(MPI)),,$(if $(and $(MPICC),$(MPIRUN)),build/tsan-mpi/colibri))
# the aarch64 build where the cross compiler and qemu are (tests/run_arm.sh
# builds it too, and says SKIP aarch64 where they are not)
ARM_QEMU ?= qemu-aarch64
ARM_TEST_BINS := $(if $(and $(shell command -v $(ARM_CC) 2>/dev/null),$(shell command -v $(ARM_QEMU) 2>/dev/null)),arm-build \
                   $(if $(shell command -v $(ARM_CLANG) 2>/dev/null),arm-clang-build))
# The Windows build (tests/run_windows.py runs it) with the others, where
# MinGW-w64 and wine are installed: its part of make test then only runs.
WIN_CC ?= x86_64-w64-mingw32-gcc
WIN_PREBUILD := $(if $(and $(shell command -v $(WIN_CC) 2>/dev/null),$(shell command -v wine 2>/dev/null)),win-prebuild)
win-prebuild:
	@$(MAKE) --no-print-directory CC=$(WIN_CC) win-test-build
test-build: $(WIN_PREBUILD) $(call TEST_BINS,build/test) build/nolibs/colibri build/nolibs/colibri-convert build/nolibs/test_io build/portable/colibri build/cuda-host/colibri build/cuda-host/colibri-synth build/cuda-host/test_cuda build/cuda-host/test_batch $(CUDA_TEST_BINS) $(MPI_TEST_BINS) $(ARM_TEST_BINS)
ARM_WRAPPED := colibri colibri-synth colibri-convert colibri-fault colibri-convert-fault
arm-build: $(call TEST_BINS,build/arm) $(addprefix build/arm/qemu/,$(ARM_WRAPPED))
build/arm/qemu/%: tests/qemu_arm.sh
	@mkdir -p $(@D)
	ln -sf ../../../tests/qemu_arm.sh $@
sanitize-build: $(call TEST_BINS,build/asan) build/tsan/colibri build/tsan/colibri-synth build/tsan/test_team build/tsan/test_io build/tsan/test_store build/tsan/test_engine build/tsan/test_fronts build/tsan-cuda-host/colibri $(MPI_SAN_BINS)

test:
	@$(MAKE) --no-print-directory -j$(NPROC) test-build
	@$(PYTHON) tests/run.py build/test

# The Windows build's tests under wine, compared with this build's tokens
# (also a part of make test; SKIP windows without MinGW-w64 or wine).
test-windows:
	@$(MAKE) --no-print-directory -j$(NPROC) build/test/colibri build/test/colibri-convert build/test/colibri-synth
	@$(PYTHON) tests/run_windows.py build/test

sanitize:
	@$(MAKE) --no-print-directory -j$(NPROC) sanitize-build
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 TSAN_OPTIONS=halt_on_error=1:exitcode=66 \
	  $(PYTHON) tests/run.py --sanitize build/asan --tsan build/tsan

# ---- benchmarks (never part of `make test`) -------------------------------
# make bench: bench/run.py measures the machine's limits and the engine's
# workloads and writes bench/results.json (see bench/README.md); models and
# logs go to $(COLI_BENCH_CACHE) (default bench/cache). BENCH_ARGS passes
# options, e.g. make bench BENCH_ARGS="--quick" or "--only iopaths".
BENCH_BINS := $(addprefix build/rel/,$(BENCH_C))

bench: colibri colibri-synth $(BENCH_BINS) $(if $(filter 0,$(CUDA)),,$(if $(NVCC),build/rel-cuda/colibri build/rel-cuda/bench_cuda)) \
       $(if $(filter 0,$(MPI)),,$(if $(and $(MPICC),$(MPIRUN)),build/rel-mpi/colibri))
	$(PYTHON) bench/run.py $(BENCH_ARGS)

llamacpp:
	tools/install_llamacpp.sh

# ---- fuzzing (tests/fuzz/README.md; never part of `make test`) ------------
#   make fuzz         each target FUZZ_SECONDS with libFuzzer (clang), or the
#                     plain driver with mutations where clang is missing
#   make fuzz-long    each target FUZZ_EXECS executions; execs/s, coverage and
#                     crashes in bench/fuzz.json
#   make fuzz-smoke   the CI run: ~10 s per target under ASan + UBSan
FUZZ_SECONDS ?= 60
FUZZ_EXECS ?= 10000000
fuzz:
	sh tests/fuzz/run.sh fuzz $(FUZZ_SECONDS)
fuzz-long:
	FUZZ_REPORT=bench/fuzz.json sh tests/fuzz/run.sh long $(FUZZ_EXECS)
fuzz-smoke:
	sh tests/fuzz/run.sh smoke

clean:
	rm -rf build colibri colibri-synth colibri-convert

.PHONY: all test test-build win-prebuild arm-build arm-clang-build test-windows sanitize sanitize-build clean bench llamacpp fuzz fuzz-long fuzz-smoke FORCE
FORCE:
.SECONDARY:
.DELETE_ON_ERROR:
