// Test helpers that ask the kernel about a range of memory: is it mapped, and how much of it is
// resident. Shared by the HostRegion tests and the arena tests built on HostRegion.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry::test {

inline uint64_t page_bytes() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

// Resident pages of [data, data + bytes), or -1 when the range is not mapped (mincore: ENOMEM).
inline int64_t resident_pages(const std::byte* data, uint64_t bytes) {
  uint64_t pages = (bytes + page_bytes() - 1) / page_bytes();
  std::vector<unsigned char> vec(pages);
  if (mincore(const_cast<std::byte*>(data), bytes, vec.data()) != 0) return errno == ENOMEM ? -1 : -2;
  int64_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

}  // namespace ferry::test
