/* test_team.c — the thread team: every thread runs each function once,
 * barriers order memory (what one thread wrote before a barrier every
 * thread reads after it), across thousands of phases, with threads that
 * arrive late enough for the others to fall asleep, with sleeps between
 * runs, and with more threads than CPUs; with every wait a sleep, no
 * wakeup is lost (team.missed). Also run under ThreadSanitizer. */
#include "team.h"

#include "check.h"

#include <stdio.h>

enum { PHASES = 4000 };

typedef struct {
    team *t;
    int phases;
    long a[64];          /* a[tid]: what thread tid wrote this phase */
    atomic_int runs[64]; /* calls per thread */
    atomic_int bad;
    int slow_every;      /* a thread sleeps 1 ms before some barriers (others go to sleep) */
} job;

static void phases(void *arg, int tid, int n) {
    job *j = (job *)arg;
    atomic_fetch_add(&j->runs[tid], 1);
    for (int p = 0; p < j->phases; p++) {
        j->a[tid] = (long)p * 1000 + tid;
        if (j->slow_every && p % j->slow_every == 0 && tid == p % n) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        team_sync(j->t);
        for (int k = 0; k < n; k++)
            if (j->a[k] != (long)p * 1000 + k) atomic_fetch_add(&j->bad, 1);
        team_sync(j->t);
    }
}

static void run_team(int n, int nphases, int slow_every, int runs, int pause_us) {
    team t;
    CHECK(team_start(&t, n) == 0);
    CHECK(t.n == n);
    job j;
    memset(&j, 0, sizeof j);
    j.t = &t, j.phases = nphases, j.slow_every = slow_every;
    for (int r = 0; r < runs; r++) {
        team_run(&t, phases, &j);
        if (pause_us) {
            struct timespec ts = {0, pause_us * 1000L};
            nanosleep(&ts, NULL);
        }
    }
    CHECK(atomic_load(&j.bad) == 0);
    for (int i = 0; i < n; i++) CHECK(atomic_load(&j.runs[i]) == runs);
    team_stop(&t);
    printf("team of %d: %d runs x %d phases%s%s ok\n", n, runs, nphases, slow_every ? ", late arrivals" : "", pause_us ? ", sleeps between runs" : "");
}

/* Every barrier wait a sleep (spin_ns 0), so every barrier goes through
 * the sleep/wake handshake. A lost wakeup shows as team.missed, since
 * barrier sleeps end after TEAM_SLEEP_NS. The one that hung a run under
 * qemu (a store before team_sync's wake) needs a sleeper and the last
 * arrival to cross within a few instructions: too rare to catch here in
 * 40,000 barriers, so this checks the handshake, not that reordering. */
static void run_sleepy(int n, int nphases) {
    team t;
    CHECK(team_start_spin(&t, n, 0) == 0);
    job j;
    memset(&j, 0, sizeof j);
    j.t = &t, j.phases = nphases;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    team_run(&t, phases, &j);
    clock_gettime(CLOCK_MONOTONIC, &b);
    CHECK(atomic_load(&j.bad) == 0);
    unsigned missed = atomic_load(&t.missed), sleeps = atomic_load(&t.sleeps);
    CHECK(missed == 0);
    CHECK(sleeps >= (unsigned)nphases); /* most of the 2·nphases barriers had a sleeper */
    team_stop(&t);
    printf("team of %d, every wait asleep: %d barriers in %.2f s, %u sleeps, %u wakeups lost\n", n, 2 * nphases,
           (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec), sleeps, missed);
}

int main(void) {
    run_team(1, 100, 0, 3, 0);
    run_team(2, PHASES, 0, 5, 0);
    run_team(3, PHASES, 0, 3, 0);
    run_team(2, 20, 4, 3, 0);         /* the others sleep at the barrier */
    run_team(4, 200, 0, 20, 2000);    /* workers sleep between runs */
    run_team(8, 500, 50, 3, 500);     /* more threads than CPUs here */
    run_sleepy(2, 20000);
    run_sleepy(3, 20000);
    team t;
    CHECK(team_start(&t, 0) == 0 && t.n == 1); /* clamped */
    team_stop(&t);
#if defined(__linux__)
    /* confined to one CPU (taskset, a cpuset): a team of 2 yields while it
     * spins, where spinning for a descheduled partner cost a time slice
     * per barrier (25x slower decode measured), and still runs right */
    cpu_set_t was, one;
    CHECK(sched_getaffinity(0, sizeof was, &was) == 0);
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &was)) {
            CPU_SET(c, &one);
            break;
        }
    CHECK(sched_setaffinity(0, sizeof one, &one) == 0 && compat_cpus() == 1);
    CHECK(team_start(&t, 2) == 0 && t.yield && t.spin_ns < TEAM_SPIN_NS);
    team_stop(&t);
    run_team(2, PHASES, 0, 3, 0);
    CHECK(sched_setaffinity(0, sizeof was, &was) == 0 && compat_cpus() == CPU_COUNT(&was));
#endif
    return check_report("test_team");
}
