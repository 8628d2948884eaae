// Memory and ALU probe for bench/RESULTS.md, "onebit's slow mode and the host's memory bandwidth".
// Prints one JSON line: the triad bandwidth (a = b + s c over three 64 MiB arrays, out of cache)
// of one thread on CPU 0 alone and of two threads on CPUs 0 and 1 together, and the time of a
// register-only loop alone and together (a ratio near 2 would mean the two vCPUs share a core).
// build: cc -O3 -march=native -pthread probe.c -o probe
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { kFloats = 16 << 20, kPasses = 6 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct {
  int cpu, alu;
  float *a, *b, *c;
  double secs;
  uint64_t sink;
} job_t;

static void* work(void* p) {
  job_t* j = p;
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(j->cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
  double t0 = now();
  if (j->alu) {
    uint64_t x = 1, y = 2, z = 3, w = 4;
    for (long i = 0; i < 200000000; i++) {
      x = x * 3 + y;
      y = y * 5 + z;
      z = z * 7 + w;
      w = w * 9 + x;
    }
    j->sink = x + y + z + w;
  } else {
    for (int r = 0; r < kPasses; r++)
      for (size_t i = 0; i < kFloats; i++) j->a[i] = j->b[i] + 0.5f * j->c[i];
    j->sink = (uint64_t)j->a[kFloats / 3];
  }
  j->secs = now() - t0;
  return NULL;
}

static double gbs(double secs) { return 3.0 * kPasses * kFloats * 4.0 / secs / 1e9; }

int main(void) {
  job_t j[2] = {{0}, {0}};
  for (int k = 0; k < 2; k++) {
    j[k].cpu = k;
    j[k].a = aligned_alloc(64, kFloats * 4);
    j[k].b = aligned_alloc(64, kFloats * 4);
    j[k].c = aligned_alloc(64, kFloats * 4);
    for (size_t i = 0; i < kFloats; i++) j[k].a[i] = j[k].b[i] = j[k].c[i] = 1.0f;
  }
  double mem_alone, mem_together, alu_alone, alu_together;
  pthread_t t[2];
  for (int alu = 0; alu < 2; alu++) {
    j[0].alu = j[1].alu = alu;
    work(&j[0]);
    double alone = j[0].secs;
    for (int k = 0; k < 2; k++) pthread_create(&t[k], NULL, work, &j[k]);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    double together = (j[0].secs > j[1].secs) ? j[0].secs : j[1].secs;
    if (alu) {
      alu_alone = alone;
      alu_together = together;
    } else {
      mem_alone = gbs(alone);
      mem_together = 2 * gbs(together);
    }
  }
  printf("{\"triad_gbs_alone\": %.2f, \"triad_gbs_two\": %.2f, \"alu_s_alone\": %.3f, \"alu_s_two\": %.3f}\n",
         mem_alone, mem_together, alu_alone, alu_together);
  return (int)(j[0].sink & 0) + (int)(j[1].sink & 0);
}
