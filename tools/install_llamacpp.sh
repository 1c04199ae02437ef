#!/bin/sh
# install_llamacpp.sh — the peer for `make bench`: llama.cpp built from source
# at a pinned version, and a virtualenv with the `gguf` package for
# tools/export_gguf.py. Nothing in `make test` or the engine depends on it.
#
#   tools/install_llamacpp.sh            (or: make llamacpp)
#
# Where things go (all outside git):
#   $COLI_BENCH_CACHE   default bench/cache: the sdist, the llama.cpp source
#                       tree and its build (llama.cpp/build/bin/llama-bench,
#                       llama-server)
#   $COLI_BENCH_VENV    default $COLI_BENCH_CACHE/venv: python venv with the
#                       packages pinned in bench/requirements-bench.txt
#
# Source: llama.cpp is taken from the source distribution of the PyPI
# package llama-cpp-python (pinned version and sha256 below), which vendors
# the llama.cpp tree under vendor/llama.cpp; only PyPI is needed, no git.
# The build is CPU-only, without curl, tests or examples; llama-bench and
# llama-server (make bench's batch section: --parallel N) are built. The instruction sets are this CPU's (read from
# /proc/cpuinfo: AVX2, FMA, F16C, AVX-VNNI, AVX-512 and its VNNI/VBMI/BF16
# extensions) except AMX: with AMX buffers, this llama.cpp aborts
# (GGML_ASSERT in ggml_backend_sched_split_graph) on the Q8_0 2-D weights of
# the exported GLM-5-shaped models, and colibri has no AMX kernels either.
# LLAMA_NATIVE=1 builds with GGML_NATIVE instead (AMX included where present).
set -eu

LCP_VERSION=0.3.36
LCP_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${COLI_BENCH_CACHE:-$ROOT/bench/cache}
VENV=${COLI_BENCH_VENV:-$CACHE/venv}
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
mkdir -p "$CACHE"

say() { printf 'install_llamacpp: %s\n' "$*" >&2; }

# 1. venv with gguf + numpy (for tools/export_gguf.py)
if [ ! -x "$VENV/bin/python" ]; then
    say "creating venv $VENV"
    "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import gguf, numpy' 2>/dev/null; then
    say "installing bench/requirements-bench.txt into $VENV"
    "$VENV/bin/python" -m pip install -q -r "$ROOT/bench/requirements-bench.txt"
fi

# 2. the pinned sdist
SDIST="$CACHE/llama_cpp_python-$LCP_VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
    say "downloading llama-cpp-python==$LCP_VERSION (source distribution)"
    "$VENV/bin/python" -m pip download -q --no-deps --no-binary :all: -d "$CACHE" "llama-cpp-python==$LCP_VERSION"
fi
got=$(sha256sum "$SDIST" | cut -d' ' -f1)
if [ "$got" != "$LCP_SHA256" ]; then
    say "$SDIST: sha256 $got, expected $LCP_SHA256; remove it and retry"
    exit 2
fi

# 3. the vendored llama.cpp tree
SRC="$CACHE/llama.cpp"
if [ ! -f "$SRC/CMakeLists.txt" ] || [ "$(cat "$SRC/.colibri-pin" 2>/dev/null)" != "$LCP_VERSION" ]; then
    say "extracting vendor/llama.cpp from the sdist"
    rm -rf "$SRC" "$CACHE/llama_cpp_python-$LCP_VERSION"
    tar xzf "$SDIST" -C "$CACHE" "llama_cpp_python-$LCP_VERSION/vendor/llama.cpp"
    mv "$CACHE/llama_cpp_python-$LCP_VERSION/vendor/llama.cpp" "$SRC"
    rm -rf "$CACHE/llama_cpp_python-$LCP_VERSION"
    echo "$LCP_VERSION" > "$SRC/.colibri-pin"
fi

# 4. build (CPU only)
if [ ! -x "$SRC/build/bin/llama-bench" ] || [ ! -x "$SRC/build/bin/llama-server" ] || [ ! -f "$SRC/build-isa.txt" ]; then
    command -v cmake >/dev/null || { say "cmake is missing (apt-get install cmake g++)"; exit 2; }
    say "building llama-bench with $JOBS jobs (several minutes)"
    if [ "${LLAMA_NATIVE:-0}" = 1 ]; then
        ISA="-DGGML_NATIVE=ON"
    else
        flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
        has() { case "$flags" in *" $1 "*) echo ON ;; *) echo OFF ;; esac; }
        ISA="-DGGML_NATIVE=OFF -DGGML_AVX=$(has avx) -DGGML_AVX2=$(has avx2) -DGGML_FMA=$(has fma) -DGGML_F16C=$(has f16c)"
        ISA="$ISA -DGGML_BMI2=$(has bmi2) -DGGML_AVX_VNNI=$(has avx_vnni) -DGGML_AVX512=$(has avx512bw)"
        ISA="$ISA -DGGML_AVX512_VBMI=$(has avx512vbmi) -DGGML_AVX512_VNNI=$(has avx512_vnni) -DGGML_AVX512_BF16=$(has avx512_bf16)"
        ISA="$ISA -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
    fi
    echo "$ISA" > "$SRC/build-isa.txt"
    # shellcheck disable=SC2086
    cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release $ISA -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DGGML_CUDA=OFF >"$SRC/build-cmake.log" 2>&1 \
        || { say "cmake failed, see $SRC/build-cmake.log"; exit 2; }
    cmake --build "$SRC/build" --target llama-bench llama-server -j "$JOBS" >"$SRC/build.log" 2>&1 \
        || { say "build failed, see $SRC/build.log"; tail -20 "$SRC/build.log" >&2; exit 2; }
fi
say "ready: $SRC/build/bin/llama-bench and llama-server (llama-cpp-python $LCP_VERSION's llama.cpp), venv $VENV"
