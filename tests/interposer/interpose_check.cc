// What the interposer compresses and what it leaves alone, on real ranks.
//
//   interpose_check --case passthrough   (QCCL_CODEC lossy) every call that must not be compressed
//                                        gives PMPI_Allreduce's bytes exactly, in place and not
//   interpose_check --case compress      (QCCL_CODEC=maxmin, QCCL_BITS=8) large float sums are
//                                        compressed: close to exact, identical on every rank
//   interpose_check --case derived       the same signature built differently on each rank
//   interpose_check --case warmup        (QCCL_WARMUP=2) the first two calls are exact
//   interpose_check --case inactive      (QCCL_CODEC unset, QCCL_INTERPOSE_REPORT=1) nothing compressed
//   interpose_check --case settings      (QCCL_BITS differs across ranks) compression turns itself off
#include <functional>

#include "interpose_test_util.hpp"

using namespace itest;

namespace {

constexpr int kLarge = 100000;  // 400 KB of floats: above the default QCCL_MIN_COMPRESS (64 KiB)

// Fills `n` elements of `type` (4- or 8-byte integers and floats) with rank-dependent values.
void fill(std::vector<unsigned char>& buf, MPI_Datatype type, int n) {
  int size = 0;
  MPI_Type_size(type, &size);
  buf.assign(static_cast<size_t>(n) * size, 0);
  for (int i = 0; i < n; ++i) {
    unsigned char* p = &buf[static_cast<size_t>(i) * size];
    const double v = std::sin(0.01 * i + gRank) * 1000.0;
    if (type == MPI_FLOAT) {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
    } else if (type == MPI_DOUBLE) {
      std::memcpy(p, &v, 8);
    } else if (type == MPI_INT) {
      int x = static_cast<int>(v);
      std::memcpy(p, &x, 4);
    } else {
      long long x = static_cast<long long>(v);  // MPI_LONG_LONG and 8-byte derived types of it
      std::memcpy(p, &x, static_cast<size_t>(size) < sizeof(x) ? static_cast<size_t>(size) : sizeof(x));
    }
  }
}

// One call through MPI_Allreduce (the interposer) and the same through PMPI_Allreduce: same bytes
// and the same return code (an error, too, is MPI's own).
void expectUntouched(const char* what, MPI_Datatype type, MPI_Datatype fillType, MPI_Op op, int n, MPI_Comm comm,
                     bool inPlace, bool mustSucceed = true) {
  int typeSize = 0, fillSize = 0;
  MPI_Type_size(type, &typeSize);
  MPI_Type_size(fillType, &fillSize);
  const int fillCount = fillSize > 0 ? n * (typeSize / fillSize) : 0;
  std::vector<unsigned char> in, viaInterposer, viaPmpi;
  fill(in, fillType, fillCount);
  in.push_back(0);  // never empty: count 0 still passes real buffers
  viaInterposer.assign(in.size(), 0);
  viaPmpi.assign(in.size(), 0);
  int rc1, rc2;
  if (inPlace) {
    std::memcpy(viaInterposer.data(), in.data(), in.size());
    std::memcpy(viaPmpi.data(), in.data(), in.size());
    rc1 = MPI_Allreduce(MPI_IN_PLACE, viaInterposer.data(), n, type, op, comm);
    rc2 = PMPI_Allreduce(MPI_IN_PLACE, viaPmpi.data(), n, type, op, comm);
  } else {
    rc1 = MPI_Allreduce(in.data(), viaInterposer.data(), n, type, op, comm);
    rc2 = PMPI_Allreduce(in.data(), viaPmpi.data(), n, type, op, comm);
  }
  EXPECT(rc1 == rc2 && (rc1 == MPI_SUCCESS || !mustSucceed), "%s: rc %d / %d", what, rc1, rc2);
  EXPECT(std::memcmp(viaInterposer.data(), viaPmpi.data(), viaPmpi.size()) == 0, "%s (%s): bytes differ", what,
         inPlace ? "in place" : "out of place");
}

void casePassthrough() {
  // Open MPI refuses predefined operations on derived datatypes (MPI_ERR_OP); passed through, the
  // calls must fail the same way, so they run on a communicator that returns errors.
  MPI_Comm ret;
  MPI_Comm_dup(MPI_COMM_WORLD, &ret);
  MPI_Comm_set_errhandler(ret, MPI_ERRORS_RETURN);
  MPI_Datatype ints4, doubles2;
  MPI_Type_contiguous(4, MPI_INT, &ints4);
  MPI_Type_contiguous(2, MPI_DOUBLE, &doubles2);
  MPI_Type_commit(&ints4);
  MPI_Type_commit(&doubles2);
  MPI_Comm half, inter = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, gRank % 2, gRank, &half);
  if (gSize >= 2) MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, gRank % 2 == 0 ? 1 : 0, 7, &inter);
  const qcclMpiInterposeStats_t s0 = stats();
  int calls = 0;
  for (bool inPlace : {false, true}) {
    expectUntouched("int sum", MPI_INT, MPI_INT, MPI_SUM, kLarge, MPI_COMM_WORLD, inPlace);
    expectUntouched("double sum", MPI_DOUBLE, MPI_DOUBLE, MPI_SUM, kLarge, MPI_COMM_WORLD, inPlace);
    expectUntouched("long long sum", MPI_LONG_LONG, MPI_LONG_LONG, MPI_SUM, kLarge, MPI_COMM_WORLD, inPlace);
    expectUntouched("float max", MPI_FLOAT, MPI_FLOAT, MPI_MAX, kLarge, MPI_COMM_WORLD, inPlace);
    expectUntouched("float min", MPI_FLOAT, MPI_FLOAT, MPI_MIN, kLarge, MPI_COMM_WORLD, inPlace);
    expectUntouched("float prod", MPI_FLOAT, MPI_FLOAT, MPI_PROD, kLarge, MPI_COMM_WORLD, inPlace);
    expectUntouched("small float sum", MPI_FLOAT, MPI_FLOAT, MPI_SUM, 1000, MPI_COMM_WORLD, inPlace);
    expectUntouched("one float", MPI_FLOAT, MPI_FLOAT, MPI_SUM, 1, MPI_COMM_WORLD, inPlace);
    expectUntouched("no float", MPI_FLOAT, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD, inPlace);
    expectUntouched("4 x int", ints4, MPI_INT, MPI_SUM, kLarge / 4, ret, inPlace, false);
    expectUntouched("2 x double", doubles2, MPI_DOUBLE, MPI_SUM, kLarge / 2, ret, inPlace, false);
    expectUntouched("float sum, one rank", MPI_FLOAT, MPI_FLOAT, MPI_SUM, kLarge, MPI_COMM_SELF, inPlace);
    calls += 12;
    if (inter != MPI_COMM_NULL && !inPlace) {  // MPI_IN_PLACE is not allowed on intercommunicators
      expectUntouched("float sum, intercommunicator", MPI_FLOAT, MPI_FLOAT, MPI_SUM, kLarge, inter, false);
      ++calls;
    }
  }
  const qcclMpiInterposeStats_t s1 = stats();
  EXPECT(s1.calls - s0.calls == static_cast<uint64_t>(calls), "%llu calls seen, %d made",
         (unsigned long long)(s1.calls - s0.calls), calls);
  EXPECT(s1.compressed == s0.compressed, "%llu compressed", (unsigned long long)(s1.compressed - s0.compressed));
  EXPECT(s1.passedOp - s0.passedOp == 6, "op %llu", (unsigned long long)(s1.passedOp - s0.passedOp));
  EXPECT(s1.passedType - s0.passedType == 10, "type %llu", (unsigned long long)(s1.passedType - s0.passedType));
  EXPECT(s1.passedSize - s0.passedSize == 6, "size %llu", (unsigned long long)(s1.passedSize - s0.passedSize));
  if (inter != MPI_COMM_NULL) MPI_Comm_free(&inter);
  MPI_Comm_free(&half);
  MPI_Comm_free(&ret);
  MPI_Type_free(&ints4);
  MPI_Type_free(&doubles2);
}

// Large float sums are compressed: close to the exact sum, bit-identical on every rank.
void caseCompress() {
  const std::vector<float> exact = exactSum(kLarge);
  std::vector<float> in(kLarge), out(kLarge, -1.0f), inPlace(kLarge);
  for (int i = 0; i < kLarge; ++i) in[i] = inPlace[i] = input(gRank, i);
  const qcclMpiInterposeStats_t s0 = stats();
  EXPECT(MPI_Allreduce(in.data(), out.data(), kLarge, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "rc");
  EXPECT(MPI_Allreduce(MPI_IN_PLACE, inPlace.data(), kLarge, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "rc");
  // MPI_REAL, Fortran's float, seen from C.
  std::vector<float> real(in);
  EXPECT(MPI_Allreduce(MPI_IN_PLACE, real.data(), kLarge, MPI_REAL, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "rc");
  const qcclMpiInterposeStats_t s1 = stats();
  EXPECT(s1.compressed - s0.compressed == 3, "%llu compressed", (unsigned long long)(s1.compressed - s0.compressed));
  EXPECT(s1.wireBytes - s0.wireBytes < (s1.ringBytes - s0.ringBytes) / 3, "wire %llu vs ring %llu",
         (unsigned long long)(s1.wireBytes - s0.wireBytes), (unsigned long long)(s1.ringBytes - s0.ringBytes));
  for (const std::vector<float>* r : {&out, &inPlace, &real}) {
    const double e = relErr(r->data(), exact.data(), kLarge);
    EXPECT(e < 0.01, "relative error %g (maxmin 8-bit)", e);
    EXPECT(e > 0, "bit-exact: not compressed?");
    EXPECT(sameOnAllRanks(r->data(), r->size() * 4), "results differ across ranks");
  }
}

// Logical float i of a buffer laid out by `type` (count elements of 10 floats each).
struct Layout {
  MPI_Datatype type;
  std::function<size_t(size_t)> offset;  // float index in memory of logical float i
  size_t floatsInMemory;
};

Layout layoutFor(int variant, size_t n) {
  Layout l;
  if (variant == 0) {
    l.type = MPI_FLOAT;
    l.offset = [](size_t i) { return i; };
    l.floatsInMemory = n;
    return l;
  }
  MPI_Datatype t;
  if (variant == 1) {
    MPI_Type_contiguous(10, MPI_FLOAT, &t);
    l.offset = [](size_t i) { return i; };
    l.floatsInMemory = n;
  } else if (variant == 2) {  // every other float, 20 floats of extent per element
    MPI_Datatype v;
    MPI_Type_vector(10, 1, 2, MPI_FLOAT, &v);
    MPI_Type_create_resized(v, 0, 20 * sizeof(float), &t);
    MPI_Type_free(&v);
    l.offset = [](size_t i) { return 2 * i; };
    l.floatsInMemory = 2 * n;
  } else {  // the 10 floats of an element stored in reverse order
    int blocks[10], displs[10];
    for (int j = 0; j < 10; ++j) blocks[j] = 1, displs[j] = 9 - j;
    MPI_Type_indexed(10, blocks, displs, MPI_FLOAT, &t);
    l.offset = [](size_t i) { return i / 10 * 10 + (9 - i % 10); };
    l.floatsInMemory = n;
  }
  MPI_Type_commit(&t);
  l.type = t;
  return l;
}

void caseDerived() {
  const size_t n = kLarge;
  const std::vector<float> exact = exactSum(n);
  const int variant = gRank % 4;
  Layout l = layoutFor(variant, n);
  const int count = variant == 0 ? static_cast<int>(n) : static_cast<int>(n / 10);
  std::vector<float> mem(l.floatsInMemory, 0.0f);
  for (size_t i = 0; i < n; ++i) mem[l.offset(i)] = input(gRank, i);
  const qcclMpiInterposeStats_t s0 = stats();
  EXPECT(MPI_Allreduce(MPI_IN_PLACE, mem.data(), count, l.type, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "rc");
  const qcclMpiInterposeStats_t s1 = stats();
  EXPECT(s1.compressed - s0.compressed == 1, "not compressed (variant %d)", variant);
  std::vector<float> logical(n);
  for (size_t i = 0; i < n; ++i) logical[i] = mem[l.offset(i)];
  const double e = relErr(logical.data(), exact.data(), n);
  EXPECT(e < 0.01, "variant %d: relative error %g", variant, e);
  EXPECT(sameOnAllRanks(logical.data(), n * 4), "logical results differ across ranks");
  if (variant == 2)
    for (size_t i = 1; i < mem.size(); i += 2) EXPECT(mem[i] == 0.0f, "a hole of the vector type was written");
  if (l.type != MPI_FLOAT) MPI_Type_free(&l.type);
}

// QCCL_WARMUP=2: the first two compressible calls of the communicator go to PMPI_Allreduce.
void caseWarmup() {
  std::vector<float> in(kLarge), a(kLarge), b(kLarge);
  for (int i = 0; i < kLarge; ++i) in[i] = input(gRank, i);
  for (int call = 0; call < 4; ++call) {
    MPI_Allreduce(in.data(), a.data(), kLarge, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    PMPI_Allreduce(in.data(), b.data(), kLarge, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const bool same = std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
    EXPECT(same == (call < 2), "call %d: %s", call, same ? "exact after the warm-up" : "inexact during the warm-up");
  }
  const qcclMpiInterposeStats_t s = stats();
  EXPECT(s.passedWarmup == 2 && s.compressed == 2, "warm-up %llu, compressed %llu", (unsigned long long)s.passedWarmup,
         (unsigned long long)s.compressed);
}

// Large float sums go through untouched when compression is off (no codec, or settings that
// differ across ranks); `reason` says which counter must count them.
void caseOff(uint64_t qcclMpiInterposeStats_t::*reason) {
  for (bool inPlace : {false, true})
    expectUntouched("float sum, compression off", MPI_FLOAT, MPI_FLOAT, MPI_SUM, kLarge, MPI_COMM_WORLD, inPlace);
  const qcclMpiInterposeStats_t s = stats();
  EXPECT(s.calls == 2 && s.compressed == 0 && s.*reason == 2, "calls %llu, compressed %llu, counted %llu",
         (unsigned long long)s.calls, (unsigned long long)s.compressed, (unsigned long long)(s.*reason));
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  const std::string which = caseArg(argc, argv);
  if (which == "passthrough") {
    casePassthrough();
  } else if (which == "compress") {
    caseCompress();
  } else if (which == "derived") {
    caseDerived();
  } else if (which == "warmup") {
    caseWarmup();
  } else if (which == "inactive" || which == "settings") {
    caseOff(&qcclMpiInterposeStats_t::passedOff);
  } else {
    EXPECT(false, "unknown case '%s'", which.c_str());
  }
  return finish(("interpose_check " + which).c_str());
}
