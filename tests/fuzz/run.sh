#!/bin/sh
# tests/fuzz/run.sh — build and run the fuzz targets (tests/fuzz/README.md).
# Run from the repository root.
#
#   tests/fuzz/run.sh smoke             CI: every target for FUZZ_SMOKE_SECONDS (10)
#                                       under ASan + UBSan; libFuzzer when clang
#                                       can build it, else the plain driver over
#                                       the seeds plus deterministic mutations
#   tests/fuzz/run.sh fuzz SECONDS      every target for SECONDS
#   tests/fuzz/run.sh long EXECS        every target for EXECS executions
#   tests/fuzz/run.sh build             build the targets (both engines when possible)
#   tests/fuzz/run.sh repro TARGET FILE...
#                                       run files through one target (json,
#                                       safetensors, ...) and show its report
#
# Environment:
#   FUZZ_TARGETS        targets to run (default: json safetensors tokenizer config usage format openai kv grammar
#                       anthropic responses route)
#   FUZZ_JOBS           targets run at once (default: CPUs, at most 6)
#   FUZZ_ENGINE         libfuzzer | plain (default: libfuzzer when it builds)
#   FUZZ_CC             compiler for libFuzzer builds (default clang)
#   FUZZ_PLAIN_CC       compiler for plain builds (default gcc, else cc, else clang)
#   FUZZ_CFLAGS         extra compile flags
#   FUZZ_REPORT         write a JSON summary there (rows of targets not run this
#                       time are kept from the file): [{target, execs, execs_per_s,
#                       cov, ft, crashes, seconds}, ...]
#   FUZZ_SMOKE_SECONDS  seconds per target in smoke mode (default 10)
#   FUZZ_MAX_LEN        libFuzzer -max_len (default: from the corpus)
#   FUZZ_ARGS           extra libFuzzer flags
#
# Outputs under build/fuzz/: libfuzzer/ and plain/ (binaries), seeds/ (from
# seeds.py), corpus/<target>/ (the growing corpus of fuzz and long runs),
# tmp/ (the targets' scratch directories, TMPDIR),
# crashes/ (fuzz_<target>-crash-*, -leak-*, -timeout-*, -oom-*), logs/.
# The output ends with one line per target, "fuzz_<name>: N execs, M crashes";
# the exit status is non-zero when any target crashed, leaked, hit a
# sanitizer report or failed to build.
set -u

ALL_TARGETS="json safetensors tokenizer config usage format openai kv grammar anthropic responses route"
TARGETS=${FUZZ_TARGETS:-$ALL_TARGETS}
OUT=build/fuzz
SRC=tests/fuzz
FUZZ_CC=${FUZZ_CC:-clang}
EXTRA_CFLAGS=${FUZZ_CFLAGS:-}
COMMON="-std=c11 -D_GNU_SOURCE -I. -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Wno-unknown-pragmas"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"
LIBS="-lm -lpthread"

# libFuzzer reports through its own death callback and counts an
# allocation over -malloc_limit_mb (= -rss_limit_mb, 2048) as a crash; the
# plain driver needs abort_on_error to write the input (driver.c) and
# max_allocation_size_mb for the same allocation limit.
LF_ASAN="detect_leaks=1"
LF_UBSAN="halt_on_error=1:print_stacktrace=1"
PLAIN_ASAN="detect_leaks=1:abort_on_error=1:max_allocation_size_mb=2048"
PLAIN_UBSAN="halt_on_error=1:abort_on_error=1:print_stacktrace=1"

die() { echo "run.sh: $*" >&2; exit 2; }

[ -f "$SRC/fuzz_json.c" ] || die "run from the repository root"

nproc_() { n=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null || echo 2); [ "$n" -ge 1 ] 2>/dev/null || n=2; echo "$n"; }
JOBS=${FUZZ_JOBS:-$(nproc_)}
[ "$JOBS" -gt 6 ] && JOBS=6
[ "$JOBS" -ge 1 ] 2>/dev/null || JOBS=1

have() { command -v "$1" >/dev/null 2>&1; }

plain_cc() {
    if [ -n "${FUZZ_PLAIN_CC:-}" ]; then echo "$FUZZ_PLAIN_CC"
    elif have gcc; then echo gcc
    elif have cc; then echo cc
    else echo clang; fi
}

# 0 when $FUZZ_CC links a libFuzzer + ASan + UBSan program here
libfuzzer_works() {
    have "$FUZZ_CC" || return 1
    mkdir -p "$OUT/probe"
    printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$OUT/probe/p.c"
    "$FUZZ_CC" -fsanitize=fuzzer,address,undefined "$OUT/probe/p.c" -o "$OUT/probe/p" >/dev/null 2>&1 &&
        "$OUT/probe/p" -runs=1 >/dev/null 2>&1
}

pick_engine() {
    case "${FUZZ_ENGINE:-}" in
    libfuzzer) libfuzzer_works || die "FUZZ_ENGINE=libfuzzer but $FUZZ_CC cannot build a libFuzzer target"; ENGINE=libfuzzer ;;
    plain) ENGINE=plain ;;
    "") if libfuzzer_works; then ENGINE=libfuzzer; else ENGINE=plain; fi ;;
    *) die "FUZZ_ENGINE must be libfuzzer or plain" ;;
    esac
}

# flag if the compiler accepts it (quietly), else nothing
cc_flag() {
    printf 'int x;\n' | "$1" -x c -c -Werror "$2" -o /dev/null - >/dev/null 2>&1 && echo "$2"
}

# build_one ENGINE TARGET: build/fuzz/<engine>/fuzz_<target>
build_one() {
    e=$1 t=$2
    mkdir -p "$OUT/$e" "$OUT/logs"
    bin="$OUT/$e/fuzz_$t" log="$OUT/logs/build-$e-$t.log"
    if [ "$e" = libfuzzer ]; then
        cc=$FUZZ_CC flags="$COMMON -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all" extra=""
    else
        cc=$(plain_cc) flags="$COMMON $SAN $(cc_flag "$(plain_cc)" -Wno-format-truncation)" extra="$SRC/driver.c"
    fi
    # shellcheck disable=SC2086
    if ! $cc $flags $EXTRA_CFLAGS "$SRC/fuzz_$t.c" $extra -o "$bin" $LIBS >"$log" 2>&1; then
        # model.h declares the matmul kernels: link them if a target needs them
        # shellcheck disable=SC2086
        $cc $flags $EXTRA_CFLAGS "$SRC/fuzz_$t.c" $extra kernels/*.c -o "$bin" $LIBS >>"$log" 2>&1 ||
            { echo "run.sh: building $bin failed (see $log):" >&2; tail -20 "$log" >&2; return 1; }
    fi
    return 0
}

build_all() {
    e=$1 fail=0 pids=""
    for t in $TARGETS; do
        build_one "$e" "$t" &
        pids="$pids $!"
    done
    for p in $pids; do wait "$p" || fail=1; done
    return $fail
}

seeds() {
    if have python3; then
        python3 "$SRC/seeds.py" "$OUT/seeds" >"$OUT/logs/seeds.log" 2>&1 || { cat "$OUT/logs/seeds.log" >&2; die "seeds.py failed"; }
    else
        echo "run.sh: no python3: seed corpora are empty" >&2
        for t in $TARGETS; do mkdir -p "$OUT/seeds/$t"; done
    fi
}

# count_crashes PREFIX: how many crash, leak, timeout or oom artifacts start
# with PREFIX (libFuzzer's slow-unit-* files record slow inputs, not faults)
count_crashes() {
    echo $(($(count_files "$1crash-") + $(count_files "$1leak-") + $(count_files "$1timeout-") + $(count_files "$1oom-")))
}

# count_files PREFIX: how many files match PREFIX*
count_files() {
    n=0
    for f in "$1"*; do [ -e "$f" ] && n=$((n + 1)); done
    echo $n
}

# run_one MODE ARG TARGET: runs it, writes $OUT/logs/<t>.result:
# "execs execs_per_s cov ft crashes seconds"
run_one() {
    mode=$1 arg=$2 t=$3
    log="$OUT/logs/$t.log" res="$OUT/logs/$t.result"
    crashdir="$OUT/crashes"
    mkdir -p "$crashdir"
    before=$(count_crashes "$crashdir/fuzz_$t-")
    start=$(date +%s)
    if [ "$ENGINE" = libfuzzer ]; then
        if [ "$mode" = smoke ]; then
            corpus="$OUT/smoke-corpus/$t"
            rm -rf "$corpus"
        else
            corpus="$OUT/corpus/$t"
        fi
        mkdir -p "$corpus"
        case $mode in
        smoke | fuzz) limit="-max_total_time=$arg" ;;
        long) limit="-runs=$arg" ;;
        esac
        dict=""
        [ -f "$SRC/dicts/$t.dict" ] && dict="-dict=$SRC/dicts/$t.dict"
        maxlen=""
        [ -n "${FUZZ_MAX_LEN:-}" ] && maxlen="-max_len=$FUZZ_MAX_LEN"
        # shellcheck disable=SC2086
        ASAN_OPTIONS=${ASAN_OPTIONS:-$LF_ASAN} UBSAN_OPTIONS=${UBSAN_OPTIONS:-$LF_UBSAN} \
            "$OUT/libfuzzer/fuzz_$t" $limit $dict $maxlen -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
            -artifact_prefix="$crashdir/fuzz_$t-" ${FUZZ_ARGS:-} "$corpus" "$OUT/seeds/$t" >"$log" 2>&1
        rc=$?
    else
        case $mode in
        smoke) opts="--mutate=1000000 --max-time=$arg --seed=1" ;;
        fuzz) opts="--mutate=1000000000 --max-time=$arg --seed=$(date +%s)" ;;
        long)
            n=$(count_files "$OUT/seeds/$t/")
            [ "$n" -ge 1 ] || n=1
            opts="--mutate=$(((arg + n - 1) / n)) --seed=1"
            ;;
        esac
        # shellcheck disable=SC2086
        ASAN_OPTIONS=${ASAN_OPTIONS:-$PLAIN_ASAN} UBSAN_OPTIONS=${UBSAN_OPTIONS:-$PLAIN_UBSAN} \
            FUZZ_ARTIFACT_PREFIX="$crashdir/fuzz_$t-" "$OUT/plain/fuzz_$t" $opts "$OUT/seeds/$t" >"$log" 2>&1
        rc=$?
    fi
    secs=$(($(date +%s) - start))
    after=$(count_crashes "$crashdir/fuzz_$t-")
    crashes=$((after - before))
    bad=0
    [ "$rc" -ne 0 ] && bad=1
    grep -Eq "ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error:|property failed" "$log" && bad=1
    [ "$bad" -eq 1 ] && [ "$crashes" -eq 0 ] && crashes=1
    if [ "$ENGINE" = libfuzzer ]; then
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
        cov=$(sed -n 's/.* cov: \([0-9]*\) .*/\1/p' "$log" | tail -1)
        ft=$(sed -n 's/.* ft: \([0-9]*\) .*/\1/p' "$log" | tail -1)
    else
        execs=$(sed -n 's/^fuzz_[a-z]*: \([0-9]*\) execs.*/\1/p' "$log" | tail -1)
        eps=$(sed -n 's/.*(\([0-9]*\) execs\/s).*/\1/p' "$log" | tail -1)
        cov=null ft=null
    fi
    echo "${execs:-0} ${eps:-0} ${cov:-null} ${ft:-null} $crashes $secs" >"$res"
}

run_all() {
    mode=$1 arg=$2
    # shellcheck disable=SC2086
    set -- $TARGETS
    while [ $# -gt 0 ]; do
        pids="" k=0
        while [ $# -gt 0 ] && [ $k -lt "$JOBS" ]; do
            run_one "$mode" "$arg" "$1" &
            pids="$pids $!"
            k=$((k + 1))
            shift
        done
        for p in $pids; do wait "$p"; done
    done
}

# result T: sets execs eps cov ft crashes secs from the target's result file
result() {
    execs=0 eps=0 cov=null ft=null crashes=1 secs=0
    if [ -f "$OUT/logs/$1.result" ]; then read -r execs eps cov ft crashes secs <"$OUT/logs/$1.result"; fi
}

report() {
    mode=$1 status=0 json="" sep=""
    echo
    printf '%-18s %12s %10s %8s %8s %8s %8s\n' target execs "execs/s" cov ft crashes seconds
    for t in $TARGETS; do
        result "$t"
        printf '%-18s %12s %10s %8s %8s %8s %8s\n' "fuzz_$t" "$execs" "$eps" "$cov" "$ft" "$crashes" "$secs"
        json="$json$sep{\"target\": \"fuzz_$t\", \"execs\": $execs, \"execs_per_s\": $eps, \"cov\": $cov, \"ft\": $ft, \"crashes\": $crashes, \"seconds\": $secs}"
        sep=",
  "
        [ "$crashes" -ne 0 ] && status=1
    done
    if [ -n "${FUZZ_REPORT:-}" ]; then
        mkdir -p "$(dirname "$FUZZ_REPORT")"
        printf '[\n  %s\n]\n' "$json" >"$FUZZ_REPORT.new"
        # a campaign over some targets keeps the other targets' earlier rows
        if [ -f "$FUZZ_REPORT" ] && have python3; then
            python3 - "$FUZZ_REPORT" "$FUZZ_REPORT.new" <<'PY' || true
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    rows = []
fresh = json.load(open(sys.argv[2]))
names = {r["target"] for r in fresh}
keep = [r for r in rows if isinstance(r, dict) and r.get("target") not in names] if isinstance(rows, list) else []
with open(sys.argv[2], "w") as f:
    json.dump(keep + fresh, f, indent=1)
PY
        fi
        mv "$FUZZ_REPORT.new" "$FUZZ_REPORT"
        echo "run.sh: summary written to $FUZZ_REPORT"
    fi
    if [ $status -ne 0 ]; then
        echo
        for t in $TARGETS; do
            result "$t"
            [ "$crashes" -eq 0 ] && continue
            echo "run.sh: fuzz_$t FAILED: log $OUT/logs/$t.log; reproducers:"
            for f in "$OUT/crashes/fuzz_$t-"*; do [ -e "$f" ] && echo "    $f"; done
            grep -E -m 3 "ERROR:|runtime error:|property failed|SUMMARY" "$OUT/logs/$t.log" | sed 's/^/    /'
        done
        echo "run.sh: reproduce with: tests/fuzz/run.sh repro <target> <file>"
    fi
    echo
    for t in $TARGETS; do
        result "$t"
        echo "fuzz_$t: $execs execs, $crashes crashes"
    done
    return $status
}

mode=${1:-}
case $mode in
smoke)
    arg=${FUZZ_SMOKE_SECONDS:-10}
    ;;
fuzz | long)
    arg=${2:-}
    case $arg in '' | *[!0-9]*) die "usage: $0 $mode N" ;; esac
    ;;
build)
    mkdir -p "$OUT/logs"
    pick_engine
    seeds
    st=0
    if [ "$ENGINE" = libfuzzer ]; then build_all libfuzzer || st=1; fi
    build_all plain || st=1
    [ $st -eq 0 ] && echo "run.sh: built $TARGETS in $OUT/plain/ (driver)$([ "$ENGINE" = libfuzzer ] && echo " and $OUT/libfuzzer/")"
    exit $st
    ;;
repro)
    [ $# -ge 3 ] || die "usage: $0 repro TARGET FILE..."
    t=$2
    shift 2
    mkdir -p "$OUT/logs"
    pick_engine
    TARGETS=$t
    [ -x "$OUT/$ENGINE/fuzz_$t" ] || build_all "$ENGINE" || exit 2
    if [ "$ENGINE" = libfuzzer ]; then exec "$OUT/libfuzzer/fuzz_$t" -runs=1 "$@"; fi
    exec "$OUT/plain/fuzz_$t" "$@"
    ;;
*)
    die "usage: $0 smoke | fuzz SECONDS | long EXECS | build | repro TARGET FILE..."
    ;;
esac

mkdir -p "$OUT/logs"
# the targets' scratch directories (one per process; a crash leaves its own behind)
rm -rf "$OUT/tmp"
mkdir -p "$OUT/tmp"
TMPDIR="$PWD/$OUT/tmp"
export TMPDIR
for t in $TARGETS; do
    case " $ALL_TARGETS " in *" $t "*) ;; *) die "unknown target '$t' (targets: $ALL_TARGETS)" ;; esac
    rm -f "$OUT/logs/$t.result"
done
pick_engine
echo "run.sh: $mode ${arg}$([ "$mode" = long ] && echo " execs" || echo " s") per target, engine $ENGINE, $JOBS at once"
seeds
build_all "$ENGINE" || {
    for t in $TARGETS; do echo "fuzz_$t: 0 execs, 1 crashes"; done
    exit 1
}
run_all "$mode" "$arg"
report "$mode"
