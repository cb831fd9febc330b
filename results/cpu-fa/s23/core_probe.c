// How fast this VM's cores run integer and memory work right now, for the per-process spread (aslr_spread.sh):
// per thread (two, as the benches use), a 32-bit xorshift/multiply chain over 2^27 steps (compute; an SMT sibling
// or a slower host core shows here) and a 64 MiB sum (memory), printed as ns per step and GB/s, the worse thread's.
//   cc -O2 -pthread core_probe.c -o core_probe && ./core_probe
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9*t.tv_nsec; }

typedef struct { double ns_step, gbs; uint64_t sink; } res_t;

static void * work(void * p) {
    res_t * r = p;
    uint32_t x = 2463534242u, acc = 0;
    const long n = 1L << 27;
    double t0 = now();
    for (long i = 0; i < n; ++i) { x ^= x << 13; x ^= x >> 17; x ^= x << 5; acc += x * 2654435761u; }
    r->ns_step = (now() - t0) * 1e9 / n;
    const size_t m = (64u << 20) / sizeof(uint64_t);
    uint64_t * a = malloc(m * sizeof(uint64_t)), s = 0;
    for (size_t i = 0; i < m; ++i) a[i] = i ^ acc;
    t0 = now();
    for (int rep = 0; rep < 4; ++rep) for (size_t i = 0; i < m; ++i) s += a[i];
    r->gbs = 4.0 * m * sizeof(uint64_t) / (now() - t0) / 1e9;
    r->sink = s + acc;
    free(a);
    return NULL;
}

int main(void) {
    pthread_t th[2]; res_t r[2];
    for (int i = 0; i < 2; ++i) pthread_create(&th[i], NULL, work, &r[i]);
    for (int i = 0; i < 2; ++i) pthread_join(th[i], NULL);
    printf("probe: compute %.3f ns/step, memory %.2f GB/s (worse of 2 threads; sink %llu)\n",
        r[0].ns_step > r[1].ns_step ? r[0].ns_step : r[1].ns_step, r[0].gbs < r[1].gbs ? r[0].gbs : r[1].gbs,
        (unsigned long long) ((r[0].sink ^ r[1].sink) & 1));
    return 0;
}
