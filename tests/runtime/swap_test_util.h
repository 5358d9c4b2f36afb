// Helpers shared by the swap tests (tiers, SSD tier, transfer engine): deterministic tensor
// contents, device regions from the real backend, and temporary directories whose emptiness the
// tests check after a tier is gone.
//
//   TensorSet set(backend, {0, 1, 4095, 4097, ...}, /*seed=*/7);   // placed in one device region
//   set.upload();                        // every tensor gets its own pattern
//   set.scribble();                      // overwrite the region, so a missed copy is caught
//   EXPECT_EQ(set.first_mismatch(), "") // after swapping everything back in
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "common/units.h"

namespace ferry::test {

// Bytes of tensor `id` under `seed`: independent streams per tensor, so a copy landing at the wrong
// tensor's place shows up.
inline std::vector<std::byte> pattern_bytes(uint64_t id, uint64_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed * 1000003 + id);
  std::vector<std::byte> out(bytes);
  for (uint64_t i = 0; i < bytes; i += 8) {
    uint64_t word = rng();
    for (uint64_t j = 0; j < 8 && i + j < bytes; ++j) out[i + j] = static_cast<std::byte>(word >> (8 * j));
  }
  return out;
}

// ReLU-like float32 values: each word zero with probability `zero_fraction`, else |N(0,1)|; a
// trailing partial word (sizes not a multiple of 4) is random.
inline std::vector<std::byte> relu_bytes(uint64_t bytes, double zero_fraction, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution zero(zero_fraction);
  std::normal_distribution<float> normal;
  std::vector<std::byte> out = pattern_bytes(seed, bytes, seed);
  for (uint64_t i = 0; i + 4 <= bytes; i += 4) {
    const float v = zero(rng) ? 0.0f : std::abs(normal(rng));
    std::memcpy(out.data() + i, &v, 4);
  }
  return out;
}

// Data a codec must give back bitwise: random, all zeros, ReLU-like at 50% and 90% zeros, at sizes
// around the 4 KiB block and the codec chunk `chunk`, and special float bit patterns (-0.0, NaN
// payloads, denormals) that a codec comparing float values would lose.
struct DataCase {
  const char* name;
  std::vector<std::byte> bytes;
};
inline std::vector<DataCase> codec_data_cases(uint64_t chunk) {
  std::vector<DataCase> cases;
  for (uint64_t bytes : {uint64_t{1}, uint64_t{3}, uint64_t{4095}, uint64_t{4097}, chunk, chunk + 1,
                         3 * chunk + 100, uint64_t{60000}}) {
    cases.push_back({"random", pattern_bytes(bytes, bytes, 11)});
    cases.push_back({"zeros", std::vector<std::byte>(bytes)});
    cases.push_back({"relu50", relu_bytes(bytes, 0.5, bytes + 1)});
    cases.push_back({"relu90", relu_bytes(bytes, 0.9, bytes + 2)});
  }
  std::vector<std::byte> special(3 * chunk + 12);
  const uint32_t words[] = {0x80000000u, 0x7fc00001u, 0xffc12345u, 0x00000001u, 0x00000000u, 0x007fffffu};
  for (size_t i = 0; i + 4 <= special.size(); i += 4) std::memcpy(special.data() + i, &words[(i / 4) % 6], 4);
  cases.push_back({"special-floats", special});
  return cases;
}

// A fresh directory under /tmp, removed with its contents at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ferry-swap-test-XXXXXX").string();
    char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr) << "mkdtemp failed";
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // Every file and directory below the directory, for "nothing left behind" checks.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(path_)) out.push_back(e.path().string());
    return out;
  }

 private:
  std::string path_;
};

// Tensors of the given sizes placed back to back (64-byte aligned) in one region of device memory
// from Backend::allocate, with their reference contents kept on the host.
class TensorSet {
 public:
  TensorSet(Backend& backend, std::vector<uint64_t> sizes, uint64_t seed) : backend_(backend), sizes_(std::move(sizes)) {
    uint64_t offset = 0;
    for (uint64_t bytes : sizes_) {
      offsets_.push_back(offset);
      offset = align_up(offset + std::max<uint64_t>(bytes, 1), Backend::kDeviceAlignment);
    }
    region_bytes_ = std::max<uint64_t>(offset, 1);
    Result<DevicePtr> region = backend_.allocate(region_bytes_);
    EXPECT_TRUE(region.ok()) << region.status().message();
    if (region.ok()) base_ = *region;
    for (size_t i = 0; i < sizes_.size(); ++i) expected_.push_back(pattern_bytes(i, sizes_[i], seed));
  }
  ~TensorSet() { backend_.free(base_); }
  TensorSet(const TensorSet&) = delete;
  TensorSet& operator=(const TensorSet&) = delete;

  size_t size() const { return sizes_.size(); }
  uint64_t bytes(size_t i) const { return sizes_[i]; }
  uint64_t total_bytes() const {
    uint64_t n = 0;
    for (uint64_t b : sizes_) n += b;
    return n;
  }
  DevicePtr ptr(size_t i) const { return base_ + offsets_[i]; }
  const std::vector<std::byte>& expected(size_t i) const { return expected_[i]; }

  // Writes every tensor's reference bytes to the device.
  void upload() {
    for (size_t i = 0; i < size(); ++i) {
      if (sizes_[i] == 0) continue;  // an empty span's data() may be null, which memcpy must not get
      Status st = backend_.copy_to_device(ptr(i), expected_[i]);
      ASSERT_TRUE(st.ok()) << st.message();
    }
  }
  // Overwrites the whole region with a byte no pattern is made of alone.
  void scribble() {
    std::vector<std::byte> junk(region_bytes_, std::byte{0xA5});
    Status st = backend_.copy_to_device(base_, junk);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  // The device bytes of tensor i.
  std::vector<std::byte> download(size_t i) {
    std::vector<std::byte> out(sizes_[i]);
    if (out.empty()) return out;
    Status st = backend_.copy_to_host(out, ptr(i));
    EXPECT_TRUE(st.ok()) << st.message();
    return out;
  }
  // "" when tensor i holds its reference bytes, else where it first differs.
  std::string mismatch(size_t i) {
    std::vector<std::byte> got = download(i);
    auto [a, b] = std::mismatch(got.begin(), got.end(), expected_[i].begin());
    if (a == got.end()) return "";
    return fmt::format("tensor {} ({} bytes) differs first at byte {}", i, sizes_[i], a - got.begin());
  }
  // "" when every tensor holds its reference bytes, else the first that does not.
  std::string first_mismatch() {
    for (size_t i = 0; i < size(); ++i)
      if (std::string m = mismatch(i); !m.empty()) return m;
    return "";
  }

 private:
  Backend& backend_;
  std::vector<uint64_t> sizes_;
  std::vector<uint64_t> offsets_;
  std::vector<std::vector<std::byte>> expected_;
  uint64_t region_bytes_ = 0;
  DevicePtr base_{};
};

// Sizes that hit the edges of the tiers' rounding (64 B for memory, 4 KiB for direct I/O) and of
// the SSD tier's chunking, then `extra` random sizes below `max_random` from a fixed seed.
inline std::vector<uint64_t> edge_and_random_sizes(size_t extra, uint64_t max_random, uint64_t seed) {
  std::vector<uint64_t> sizes = {0, 1, 63, 64, 65, 4095, 4096, 4097, 8192, 3 * 8192 + 5, 40000};
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < extra; ++i) sizes.push_back(rng() % max_random + 1);
  return sizes;
}

}  // namespace ferry::test
