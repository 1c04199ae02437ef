/* team.h — the engine's persistent thread team: n threads (the caller plus
 * n-1 workers started once) run one function together per forward pass,
 * meeting at barriers inside it. One fork per forward instead of one
 * OpenMP parallel region per operation (~2,800 per GLM-5 token): waking
 * sleeping threads costs a scheduler tick on some VMs, so the team spins at
 * barriers and sleeps (futex on Linux, a condition variable elsewhere) only
 * after TEAM_SPIN_NS without progress, and between forward passes.
 *
 * Contract: team_run(t, fn, arg) calls fn(arg, tid, n) on every thread of
 * the team, tid 0 on the caller, and returns when all have returned. Inside
 * fn, team_sync(t) is a barrier of all n threads with acquire/release
 * ordering: writes before it are visible to every thread after it. Every
 * thread must reach the same sequence of barriers. A team runs one
 * function at a time; team_run is called from one thread.
 *
 * Prefix: team_. Must not: know what it runs, allocate after team_start,
 * or read the environment. */
#ifndef COLI_TEAM_H
#define COLI_TEAM_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "compat.h"
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TEAM_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define TEAM_PAUSE() __asm__ __volatile__("yield")
#else
#define TEAM_PAUSE() ((void)0)
#endif

#define TEAM_MAX 1024
/* Spin this long at a barrier before sleeping: longer than one
 * operation's imbalance (tens of microseconds), shorter than a disk read
 * (a few milliseconds), so waits on I/O do not burn the cores. */
#define TEAM_SPIN_NS 300000
/* A sleep at a barrier ends after this long even without a wakeup, so a
 * wakeup lost to a bug or an emulator costs 100 ms, not the process; a
 * sleeper that finds the barrier passed at the timeout counts it in
 * team.missed (probably lost: a waker stalled 100 ms counts too). Workers
 * waiting for the next job sleep unbounded (an idle server stays idle). */
#define TEAM_SLEEP_NS 100000000L

typedef void (*team_fn)(void *arg, int tid, int n);

typedef struct {
    int n;                          /* threads, the caller included */
    pthread_t thr[TEAM_MAX];
    int started;                    /* workers running */
    /* barrier: arrivals count down; the last one bumps the generation */
    _Alignas(64) atomic_int left;
    _Alignas(64) atomic_uint gen;
    /* work: a new generation of `job` starts every worker */
    _Alignas(64) atomic_uint job;
    team_fn fn;
    void *arg;
    atomic_int stop;
    _Alignas(64) atomic_int sleepers; /* threads in (or entering) a sleep: wakers skip the syscall when 0 */
    atomic_uint missed;             /* barrier sleeps that timed out after the barrier passed */
    atomic_uint sleeps;             /* sleeps so far */
    double spin_ns;                 /* TEAM_SPIN_NS, or less when the team outnumbers the CPUs */
    int yield;                      /* oversubscribed: yield the CPU while spinning */
#if !defined(__linux__)
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
} team;

static inline double team_now_ns_(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Sleeps while *word == seen, at most TEAM_SLEEP_NS at a barrier (*word
 * is t->gen; spurious wakeups allowed). The sleeper count is raised before the last look at *word and
 * the waker reads it after moving *word with a read-modify-write (both
 * sequentially consistent), so a wakeup is never lost. */
static inline void team_sleep_(team *t, atomic_uint *word, unsigned seen) {
    atomic_fetch_add(&t->sleepers, 1);
    atomic_fetch_add_explicit(&t->sleeps, 1, memory_order_relaxed);
    const int bounded = word == &t->gen;
    int timed_out = 0;
#if defined(__linux__)
    struct timespec ts = {0, TEAM_SLEEP_NS};
    if (atomic_load(word) == seen)
        timed_out = syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, seen, bounded ? &ts : NULL, NULL, 0) == -1 && errno == ETIMEDOUT;
#else
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += TEAM_SLEEP_NS;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&t->mu);
    while (!timed_out && atomic_load(word) == seen)
        timed_out = bounded ? pthread_cond_timedwait(&t->cv, &t->mu, &ts) == ETIMEDOUT : (pthread_cond_wait(&t->cv, &t->mu), 0);
    pthread_mutex_unlock(&t->mu);
#endif
    if (timed_out && atomic_load(word) != seen) atomic_fetch_add(&t->missed, 1);
    atomic_fetch_sub(&t->sleepers, 1);
}

/* Wakes the sleepers on *word after it moved (a no-op when none sleeps). */
static inline void team_wake_(team *t, atomic_uint *word) {
    if (!atomic_load(&t->sleepers)) return;
#if defined(__linux__)
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
#else
    (void)word;
    pthread_mutex_lock(&t->mu);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
#endif
}

/* Waits until *word moves past `seen`: spins (yielding the CPU when the
 * team outnumbers the CPUs) for t->spin_ns, then sleeps. */
static inline void team_wait_(team *t, atomic_uint *word, unsigned seen) {
    double t0 = 0;
    for (unsigned i = 0; t->spin_ns > 0; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != seen) return;
        TEAM_PAUSE();
        if ((i & 255) == 255) {
            double now = team_now_ns_();
            if (!t0) t0 = now;
            else if (now - t0 > t->spin_ns) break;
            if (t->yield) sched_yield();
        }
    }
    while (atomic_load_explicit(word, memory_order_acquire) == seen) team_sleep_(t, word, seen);
}

/* A barrier of the whole team (inside team_run's function). */
static inline void team_sync(team *t) {
    if (t->n == 1) return;
    unsigned g = atomic_load_explicit(&t->gen, memory_order_acquire);
    if (atomic_fetch_sub_explicit(&t->left, 1, memory_order_acq_rel) == 1) {
        atomic_store_explicit(&t->left, t->n, memory_order_relaxed);
        /* an RMW, not a store: qemu-user lets a seq_cst store (stlr) pass
         * the load of sleepers that follows (ldar), which lost wakeups */
        atomic_fetch_add(&t->gen, 1);
        team_wake_(t, &t->gen);
        return;
    }
    team_wait_(t, &t->gen, g);
}

typedef struct {
    team *t;
    int tid;
} team_arg_;

static inline void *team_worker_(void *p) {
    team_arg_ *a = (team_arg_ *)p;
    team *t = a->t;
    int tid = a->tid;
    free(a);
    unsigned seen = 0;
    for (;;) {
        team_wait_(t, &t->job, seen);
        seen = atomic_load_explicit(&t->job, memory_order_acquire);
        if (atomic_load_explicit(&t->stop, memory_order_acquire)) return NULL;
        t->fn(t->arg, tid, t->n);
        team_sync(t); /* the end of the function: the caller returns after it */
    }
}

/* Starts a team of n threads (the caller counts as one; n is clamped to
 * [1, TEAM_MAX]) whose barrier waits spin spin_ns before sleeping (< 0:
 * TEAM_SPIN_NS, a tenth of it when the team outnumbers the CPUs; 0 sleeps
 * at once). Returns 0, or -1 (threads could not be started: the team then
 * runs with the threads it got). */
static inline int team_start_spin(team *t, int n, double spin_ns) {
    memset(t, 0, sizeof *t);
    n = n < 1 ? 1 : n > TEAM_MAX ? TEAM_MAX : n;
    t->n = 1;
    atomic_init(&t->left, 1);
    atomic_init(&t->gen, 0);
    atomic_init(&t->job, 0);
    atomic_init(&t->stop, 0);
    atomic_init(&t->sleepers, 0);
    atomic_init(&t->missed, 0);
    atomic_init(&t->sleeps, 0);
    t->yield = n > compat_cpus(); /* spinning for a thread that waits for this CPU would cost a time slice a barrier */
    t->spin_ns = spin_ns >= 0 ? spin_ns : t->yield ? TEAM_SPIN_NS / 10 : TEAM_SPIN_NS;
#if !defined(__linux__)
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
#endif
    for (int i = 1; i < n; i++) {
        team_arg_ *a = (team_arg_ *)malloc(sizeof *a);
        if (!a) return -1;
        a->t = t, a->tid = i;
        if (pthread_create(&t->thr[i], NULL, team_worker_, a)) {
            free(a);
            return -1;
        }
        t->started++;
        t->n = i + 1;
        atomic_store(&t->left, t->n);
    }
    return 0;
}

/* team_start_spin with the default spin. */
static inline int team_start(team *t, int n) { return team_start_spin(t, n, -1); }

/* Runs fn(arg, tid, n) on every thread of the team; returns when all are
 * done. */
static inline void team_run(team *t, team_fn fn, void *arg) {
    if (t->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    t->fn = fn, t->arg = arg;
    atomic_fetch_add(&t->job, 1);
    team_wake_(t, &t->job);
    fn(arg, 0, t->n);
    team_sync(t);
}

/* Stops and joins the workers (a zeroed, never started team is fine). */
static inline void team_stop(team *t) {
    if (!t->n) return;
    if (t->started) {
        atomic_store(&t->stop, 1);
        atomic_fetch_add(&t->job, 1);
        team_wake_(t, &t->job);
        for (int i = 1; i <= t->started; i++) pthread_join(t->thr[i], NULL);
    }
#if !defined(__linux__)
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
#endif
    t->started = 0;
    t->n = 1;
}

#endif
