// Replaces the global operator new so that a test can count C++ heap allocations (a separate file:
// the compiler must not see the malloc behind operator new next to the frees it pairs with).
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

std::atomic<uint64_t> gNews{0};

void* operator new(size_t bytes) {
  gNews.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t bytes) { return operator new(bytes); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
