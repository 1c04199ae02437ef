# colibri — build, test, sanitize.
#   make                 ./colibri for this CPU (ARCH=native)
#   make ARCH=portable   a generic x86-64 / armv8-a binary (kernels still
#                        dispatch at startup on what the CPU offers)
#   make test            every test, warnings as errors, no network/GPU/pip
#   make sanitize        the same tests under ASan + UBSan
#   make bench           benchmark report (bench/results.json; not part of test)
#   make llamacpp        the llama.cpp peer for make bench (tools/install_llamacpp.sh)
CC ?= cc
ARCH ?= native
PYTHON ?= python3

ifeq ($(ARCH),portable)
  ARCHFLAGS :=
else
  ARCHFLAGS := -march=$(ARCH)
endif

# -ffp-contract=off: no silent FMA contraction, so results do not depend on
# what the compiler fuses (token-exactness across builds).
BASEFLAGS := -std=c11 -O2 -fopenmp -ffp-contract=off -Wall -Wextra -Wno-format-truncation -D_GNU_SOURCE
CFLAGS ?=
LDLIBS := -lm

# Optional libraries, used when their headers and libraries are present
# (URING=0 / NUMA=0 build without them).
HASH := \#
probe = $(shell printf '$(HASH)include <$(1)>\nint main(void){return 0;}\n' | $(CC) -x c - $(2) -o /dev/null 2>/dev/null && echo 1)
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
BASEFLAGS += $(OPTDEFS)
LDLIBS += $(OPTLIBS) -lpthread

HEADERS := $(wildcard *.h)
ENGINE_SRC := colibri.c

all: colibri colibri-synth colibri-convert

colibri: $(ENGINE_SRC) $(HEADERS) Makefile
	$(CC) $(BASEFLAGS) $(ARCHFLAGS) $(CFLAGS) -o $@ $(ENGINE_SRC) $(LDLIBS)

# Synthetic GLM-5-shaped containers for tier, I/O and speed tests.
colibri-synth: tools/make_synth.c $(HEADERS) Makefile
	$(CC) $(BASEFLAGS) $(ARCHFLAGS) $(CFLAGS) -I. -o $@ tools/make_synth.c $(LDLIBS)

# Hugging Face GLM-5 (bf16/f16/f32/FP8) -> colibri container.
colibri-convert: tools/convert.c $(HEADERS) Makefile
	$(CC) $(BASEFLAGS) $(ARCHFLAGS) $(CFLAGS) -I. -o $@ tools/convert.c $(LDLIBS)

# ---- tests --------------------------------------------------------------
# Each tests/test_*.c is one program; it includes the header(s) it tests (or
# colibri.c with COLI_NO_MAIN). They run from the repository root.
TEST_SRCS := $(sort $(wildcard tests/test_*.c))
TEST_PY := $(sort $(wildcard tests/test_*.py))

# $(1) = build dir, $(2) = extra flags
define test_rules
$(1)/colibri: $(ENGINE_SRC) $(HEADERS) Makefile | $(1)
	$$(CC) $$(BASEFLAGS) $$(ARCHFLAGS) -Werror $(2) -o $$@ $(ENGINE_SRC) $$(LDLIBS)
$(1)/colibri-synth: tools/make_synth.c $(HEADERS) Makefile | $(1)
	$$(CC) $$(BASEFLAGS) $$(ARCHFLAGS) -Werror $(2) -I. -o $$@ tools/make_synth.c $$(LDLIBS)
$(1)/colibri-convert: tools/convert.c $(HEADERS) Makefile | $(1)
	$$(CC) $$(BASEFLAGS) $$(ARCHFLAGS) -Werror $(2) -I. -o $$@ tools/convert.c $$(LDLIBS)
$(1)/%: tests/%.c $(ENGINE_SRC) $(HEADERS) tests/check.h Makefile | $(1)
	$$(CC) $$(BASEFLAGS) $$(ARCHFLAGS) -Werror $(2) -I. -o $$@ $$< $$(LDLIBS)
$(1):
	mkdir -p $$@
endef

SANFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined

# The build without the optional libraries must keep working: the engine and
# the I/O test are also built and run without liburing and libnuma.
NOLIB_FLAGS := $(filter-out -DCOLI_HAVE_URING -DCOLI_HAVE_NUMA,$(BASEFLAGS))
build/nolibs/colibri: $(ENGINE_SRC) $(HEADERS) Makefile
	@mkdir -p $(@D)
	$(CC) $(NOLIB_FLAGS) $(ARCHFLAGS) -Werror -o $@ $(ENGINE_SRC) -lm -lpthread
# The portable build (no -march): kernels still dispatch at run time.
build/portable/colibri: $(ENGINE_SRC) $(HEADERS) Makefile
	@mkdir -p $(@D)
	$(CC) $(BASEFLAGS) -Werror -o $@ $(ENGINE_SRC) $(LDLIBS)
build/nolibs/test_io: tests/test_io.c $(HEADERS) tests/check.h Makefile
	@mkdir -p $(@D)
	$(CC) $(NOLIB_FLAGS) $(ARCHFLAGS) -Werror -I. -o $@ $< -lm -lpthread
$(eval $(call test_rules,build/test,))
$(eval $(call test_rules,build/asan,$(SANFLAGS)))

TEST_BINS = $(patsubst tests/%.c,$(1)/%,$(TEST_SRCS))

define run_tests
	@set -e; for t in $(patsubst tests/%.c,$(1)/%,$(TEST_SRCS)); do echo "== $$t"; $$t; done
	@set -e; for t in $(TEST_PY); do echo "== $$t"; COLIBRI=$(1)/colibri $(PYTHON) $$t; done
	@echo "all tests passed ($(1))"
endef

test: build/test/colibri build/test/colibri-synth build/test/colibri-convert $(patsubst tests/%.c,build/test/%,$(TEST_SRCS)) build/nolibs/colibri build/nolibs/test_io build/portable/colibri
	$(call run_tests,build/test)
	@echo "== build/portable (ARCH=portable: kernels chosen at run time)"
	@COLIBRI=build/portable/colibri $(PYTHON) tests/test_cli.py Oracle.test_every_fixture_passes Oracle.test_every_kernel_level
	@echo "== build/nolibs (without liburing and libnuma)"
	@build/nolibs/test_io
	@COLIBRI=build/nolibs/colibri $(PYTHON) tests/test_cli.py NoLibs
	@echo "== aarch64 under qemu (NEON, dotprod, i8mm)"
	@sh tests/run_arm.sh

sanitize: build/asan/colibri build/asan/colibri-synth build/asan/colibri-convert $(patsubst tests/%.c,build/asan/%,$(TEST_SRCS))
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 $(MAKE) --no-print-directory run-sanitize

run-sanitize:
	$(call run_tests,build/asan)

# ---- benchmarks (never part of `make test`) -------------------------------
# make bench: bench/run.py measures the machine's limits and the engine's
# workloads and writes bench/results.json (see bench/README.md); models and
# logs go to $(COLI_BENCH_CACHE) (default bench/cache). BENCH_ARGS passes
# options, e.g. make bench BENCH_ARGS="--quick" or "--only iopaths".
BENCH_BINS := build/bench_quant build/bench_io build/bench_mem build/bench_tok
build/bench_quant: bench/bench_quant.c $(HEADERS) Makefile
	@mkdir -p $(@D)
	$(CC) $(BASEFLAGS) $(ARCHFLAGS) $(CFLAGS) -I. -o $@ $< $(LDLIBS)
build/bench_io: bench/bench_io.c Makefile
	@mkdir -p $(@D)
	$(CC) $(BASEFLAGS) $(ARCHFLAGS) $(CFLAGS) -o $@ $< -lpthread
build/bench_mem: bench/bench_mem.c Makefile
	@mkdir -p $(@D)
	$(CC) $(BASEFLAGS) $(ARCHFLAGS) $(CFLAGS) -o $@ $< -lpthread
build/bench_tok: bench/bench_tok.c $(HEADERS) Makefile
	@mkdir -p $(@D)
	$(CC) $(BASEFLAGS) $(ARCHFLAGS) $(CFLAGS) -I. -o $@ $< $(LDLIBS)

bench: colibri colibri-synth $(BENCH_BINS)
	$(PYTHON) bench/run.py $(BENCH_ARGS)

llamacpp:
	tools/install_llamacpp.sh

clean:
	rm -rf build colibri colibri-synth colibri-convert

.PHONY: all test sanitize run-sanitize clean bench llamacpp
.SECONDARY:
