// DevicePtr: an address in a backend's device memory.
//
// Opaque above the backend: code outside src/backend/<device>/ may compare, offset, subtract and
// print a DevicePtr but never dereference it, because a CUDA backend's addresses are not host
// addresses. The CPU backend is the one place that turns it into a host pointer.
#pragma once

#include <compare>
#include <cstdint>

namespace ferry {

struct DevicePtr {
  uint64_t address = 0;

  explicit operator bool() const { return address != 0; }
  DevicePtr operator+(uint64_t offset) const { return DevicePtr{address + offset}; }
  friend uint64_t operator-(DevicePtr a, DevicePtr b) { return a.address - b.address; }
  friend auto operator<=>(DevicePtr, DevicePtr) = default;
};

}  // namespace ferry
