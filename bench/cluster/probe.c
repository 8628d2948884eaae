/* probe: checks an (emulated) cluster with plain MPI, no qccl.
 *
 *   probe [--bytes B] [--reps R]     where each rank runs (network namespace, address), a checked
 *                                    MPI_Allreduce, and the rate of a B-byte send from rank 0 to
 *                                    rank 1 (default 256 MiB, best and median of R=3)
 *   probe --allreduce-json [-b MIN] [-e MAX] [-f F] [-n N] [-w W]
 *                                    times MPI_Allreduce of fp32 sums and prints one JSON row per
 *                                    size with the fields of `qccl-bench allreduce --json`
 *                                    (codec "none", algo "mpi"), to exercise bench/run-cluster
 *                                    without qccl
 * Exit status: 0 on success, 1 when a check fails, 2 on bad arguments.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <mpi.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int rank_, size_;

static int die(const char* msg) {
  if (rank_ == 0) fprintf(stderr, "probe: %s\n", msg);
  MPI_Finalize();
  return 2;
}

/* "256M", "1G", "4096" -> bytes; 0 on a malformed value. */
static size_t parseBytes(const char* s) {
  char* end = NULL;
  double v = strtod(s, &end);
  if (end == s || v <= 0) return 0;
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1024.0;
      end++;
      break;
    case 'M':
    case 'm':
      v *= 1024.0 * 1024.0;
      end++;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024.0 * 1024.0;
      end++;
      break;
    default:
      break;
  }
  if (*end == 'B' || *end == 'b') end++;
  return *end ? 0 : (size_t)v;
}

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* First IPv4 address that is not loopback: eth0 inside an emulated host. */
static void localAddress(char* out, size_t len) {
  struct ifaddrs* ifs = NULL;
  snprintf(out, len, "?");
  if (getifaddrs(&ifs) != 0) return;
  for (struct ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || strcmp(i->ifa_name, "lo") == 0) continue;
    inet_ntop(AF_INET, &((struct sockaddr_in*)i->ifa_addr)->sin_addr, out, (socklen_t)len);
    break;
  }
  freeifaddrs(ifs);
}

static int checkPlacement(void) {
  struct stat st;
  unsigned long long ino = stat("/proc/self/ns/net", &st) == 0 ? (unsigned long long)st.st_ino : 0;
  char addr[64];
  localAddress(addr, sizeof addr);
  unsigned long long* inos = malloc(sizeof *inos * (size_t)size_);
  char* addrs = malloc(64 * (size_t)size_);
  MPI_Gather(&ino, 1, MPI_UNSIGNED_LONG_LONG, inos, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  MPI_Gather(addr, 64, MPI_CHAR, addrs, 64, MPI_CHAR, 0, MPI_COMM_WORLD);
  int distinct = 0;
  if (rank_ == 0) {
    for (int r = 0; r < size_; r++) {
      int seen = 0;
      for (int q = 0; q < r; q++) seen |= inos[q] == inos[r];
      distinct += !seen;
      printf("rank %d: netns %llu addr %s\n", r, inos[r], addrs + 64 * r);
    }
    printf("ranks: %d in %d distinct network namespaces\n", size_, distinct);
  }
  free(inos);
  free(addrs);
  MPI_Bcast(&distinct, 1, MPI_INT, 0, MPI_COMM_WORLD);

  /* value = rank + 1 at every index: the sum is known exactly. */
  enum { kCount = 1 << 16 };
  int* v = malloc(sizeof(int) * kCount);
  for (int i = 0; i < kCount; i++) v[i] = rank_ + 1 + i;
  MPI_Allreduce(MPI_IN_PLACE, v, kCount, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int bad = 0;
  for (int i = 0; i < kCount; i++) bad += v[i] != size_ * (size_ + 1) / 2 + size_ * i;
  free(v);
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_ == 0) printf("allreduce: %s\n", bad ? "WRONG" : "ok");
  return bad ? 1 : 0;
}

static int sendRate(size_t bytes, int reps) {
  if (size_ < 2) return 0;
  char* buf = malloc(bytes);
  if (!buf) return die("out of memory");
  memset(buf, rank_, bytes);
  double* t = malloc(sizeof(double) * (size_t)reps);
  char ack = 0;
  for (int r = 0; r < reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    /* MPI counts are int: send in pieces of at most 1 GiB. */
    for (size_t off = 0; off < bytes; off += (size_t)1 << 30) {
      int n = (int)(bytes - off < ((size_t)1 << 30) ? bytes - off : (size_t)1 << 30);
      if (rank_ == 0) MPI_Send(buf + off, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
      if (rank_ == 1) MPI_Recv(buf + off, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    /* The ack makes the sender's clock cover delivery, not just the local copy into the socket. */
    if (rank_ == 1) MPI_Send(&ack, 1, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    if (rank_ == 0) MPI_Recv(&ack, 1, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    t[r] = MPI_Wtime() - t0;
  }
  int bad = 0;
  if (rank_ == 1)
    for (size_t i = 0; i < bytes; i += 4093) bad += buf[i] != 0;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_ == 0) {
    qsort(t, (size_t)reps, sizeof(double), cmpDouble);
    printf("send %zu bytes rank 0 -> 1: best %.3f Gbit/s, median %.3f Gbit/s over %d reps%s\n", bytes,
           bytes * 8.0 / t[0] / 1e9, bytes * 8.0 / t[reps / 2] / 1e9, reps, bad ? " (DATA WRONG)" : "");
  }
  free(t);
  free(buf);
  return bad ? 1 : 0;
}

static int allreduceJson(size_t minBytes, size_t maxBytes, double factor, int iters, int warmup) {
  for (size_t bytes = minBytes; bytes <= maxBytes;) {
    size_t count = bytes / sizeof(float);
    float* v = malloc(count * sizeof(float));
    if (!v) return die("out of memory");
    double* t = malloc(sizeof(double) * (size_t)iters);
    for (int it = -warmup; it < iters; it++) {
      for (size_t i = 0; i < count; i++) v[i] = (float)(i % 1024) + (float)rank_;
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, v, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double dt = MPI_Wtime() - t0;
      /* The slowest rank defines the collective's time. */
      MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (it >= 0) t[it] = dt;
    }
    long wrong = 0;
    for (size_t i = 0; i < count; i++)
      wrong += v[i] != (float)size_ * (float)(i % 1024) + (float)(size_ * (size_ - 1) / 2);
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    qsort(t, (size_t)iters, sizeof(double), cmpDouble);
    double med = t[iters / 2], algbw = bytes / med / 1e9, bus = 2.0 * (size_ - 1) / size_;
    if (rank_ == 0)
      printf(
          "{\"size\": %zu, \"count\": %zu, \"codec\": \"none\", \"bits\": 32, \"algo\": \"mpi\", "
          "\"transport\": \"mpi\", \"nranks\": %d, \"time_s\": %.9g, \"algbw\": %.6g, \"busbw\": %.6g, "
          "\"wire_bytes\": %.0f, \"ratio\": 1, \"rel_err\": 0, \"wrong\": %ld, \"peak_mem_bytes\": 0, "
          "\"mpi_time_s\": %.9g, \"fp16_time_s\": null, \"speedup_vs_mpi\": 1, \"speedup_vs_fp16\": null}\n",
          bytes, count, size_, med, algbw, algbw * bus, bus * bytes, wrong, med);
    fflush(stdout);
    free(t);
    free(v);
    size_t next = (size_t)(bytes * factor);
    if (next <= bytes) break;
    bytes = next;
  }
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  size_t bytes = (size_t)256 << 20, minB = 1 << 20, maxB = (size_t)64 << 20;
  int reps = 3, iters = 5, warmup = 1, json = 0;
  double factor = 2;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--allreduce-json") == 0) {
      json = 1;
      continue;
    }
    if (!v) return die("every option except --allreduce-json takes a value");
    i++;
    if (strcmp(a, "--bytes") == 0) {
      if (!(bytes = parseBytes(v))) return die("--bytes: expected a size such as 256M");
    } else if (strcmp(a, "--reps") == 0) {
      if ((reps = atoi(v)) < 1) return die("--reps: expected a positive integer");
    } else if (strcmp(a, "-b") == 0) {
      if (!(minB = parseBytes(v))) return die("-b: expected a size such as 1M");
    } else if (strcmp(a, "-e") == 0) {
      if (!(maxB = parseBytes(v))) return die("-e: expected a size such as 64M");
    } else if (strcmp(a, "-f") == 0) {
      if ((factor = atof(v)) <= 1) return die("-f: expected a factor above 1");
    } else if (strcmp(a, "-n") == 0) {
      if ((iters = atoi(v)) < 1) return die("-n: expected a positive integer");
    } else if (strcmp(a, "-w") == 0) {
      if ((warmup = atoi(v)) < 0) return die("-w: expected a non-negative integer");
    } else {
      return die("unknown option (see the comment at the top of probe.c)");
    }
  }
  int rc;
  if (json) {
    if (minB > maxB || maxB / sizeof(float) > 0x7fffffff) return die("need -b <= -e < 8 GiB");
    rc = allreduceJson(minB, maxB, factor, iters, warmup);
  } else {
    rc = checkPlacement();
    if (!rc) rc = sendRate(bytes, reps);
  }
  MPI_Finalize();
  return rc;
}
