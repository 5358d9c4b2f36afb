// TransferEngine on the real CPU backend and both tiers: every swapped byte comes back, out- and
// in-queues overlap safely, failures surface at wait/drain and stop the engine, and destroying it
// mid-flight is safe.
#include "runtime/transfer_engine.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/ssd_tier.h"
#include "runtime/swap_test_util.h"

namespace ferry {
namespace {

using test::TempDir;
using test::TensorSet;

enum class TierKind { kHost, kSsdUring, kSsdThreads };

std::string tier_name(TierKind k) {
  switch (k) {
    case TierKind::kHost: return "Host";
    case TierKind::kSsdUring: return "SsdUring";
    case TierKind::kSsdThreads: return "SsdThreads";
  }
  return "?";
}

std::unique_ptr<Backend> cpu_backend() {
  Result<std::unique_ptr<Backend>> be = make_backend("cpu");
  EXPECT_TRUE(be.ok()) << be.status().message();
  return std::move(be).value();
}

std::unique_ptr<SwapTier> make_tier(TierKind kind, const TempDir& dir, uint64_t capacity, SsdFault fault = {}) {
  if (kind == TierKind::kHost) {
    Result<std::unique_ptr<HostTier>> t = HostTier::create({.capacity_bytes = capacity, .checksum = true});
    EXPECT_TRUE(t.ok()) << t.status().message();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  Result<std::unique_ptr<SsdTier>> t =
      SsdTier::create({.directory = dir.path(),
                       .capacity_bytes = capacity,
                       .checksum = true,
                       .chunk_bytes = 16384,
                       .queue_depth = 4,
                       .io = kind == TierKind::kSsdUring ? SsdIo::kUring : SsdIo::kThreads,
                       .fault = fault});
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::unique_ptr<TransferEngine> make_engine(Backend& backend) {
  Result<std::unique_ptr<TransferEngine>> e = TransferEngine::create(backend);
  EXPECT_TRUE(e.ok()) << e.status().message();
  return std::move(e).value();
}

// Records of one queue complete in issue order, each after it was issued and started.
void expect_fifo_and_ordered_times(const std::vector<TransferRecord>& records) {
  double last_end[2] = {-1, -1};
  uint64_t last_ticket[2] = {0, 0};
  for (const TransferRecord& r : records) {
    const int q = r.direction == Direction::kSwapOut ? 0 : 1;
    EXPECT_LE(r.issue_us, r.start_us);
    EXPECT_LE(r.start_us, r.end_us);
    EXPECT_GE(r.start_us, last_end[q]) << "a queue ran two transfers at once";
    EXPECT_GT(r.ticket.id, last_ticket[q]) << "a queue completed out of issue order";
    last_end[q] = r.end_us;
    last_ticket[q] = r.ticket.id;
  }
}

class TransferEngineTest : public ::testing::TestWithParam<TierKind> {};

TEST_P(TransferEngineTest, EverySwappedByteComesBack) {
  TempDir dir;
  auto backend = cpu_backend();
  auto tier = make_tier(GetParam(), dir, 16 << 20);
  ASSERT_NE(tier, nullptr);
  auto engine = make_engine(*backend);
  TensorSet set(*backend, test::edge_and_random_sizes(40, 100000, 5), /*seed=*/5);
  set.upload();

  std::vector<TransferTicket> outs;
  for (size_t i = 0; i < set.size(); ++i)
    outs.push_back(engine->swap_out(static_cast<TensorId>(i), set.ptr(i), set.bytes(i), *tier));
  for (TransferTicket t : outs) EXPECT_TRUE(static_cast<bool>(t));
  ASSERT_TRUE(engine->drain().ok()) << engine->status().message();
  for (TransferTicket t : outs) EXPECT_TRUE(engine->done(t));

  set.scribble();  // the device copies are gone; only the tier has the bytes now
  std::vector<TransferTicket> ins;
  for (size_t i = 0; i < set.size(); ++i)
    ins.push_back(engine->swap_in(static_cast<TensorId>(i), set.ptr(i), set.bytes(i), *tier));
  for (size_t i = 0; i < set.size(); ++i) {
    Status st = engine->wait(ins[i]);  // a consumer waits, then reads
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(set.mismatch(i), "");
  }

  std::vector<TransferRecord> records = engine->take_records();
  ASSERT_EQ(records.size(), 2 * set.size());
  expect_fifo_and_ordered_times(records);
  uint64_t out_bytes = 0, in_bytes = 0;
  for (const TransferRecord& r : records) {
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.tier, tier->name());
    (r.direction == Direction::kSwapOut ? out_bytes : in_bytes) += r.bytes;
  }
  EXPECT_EQ(out_bytes, set.total_bytes());
  EXPECT_EQ(in_bytes, set.total_bytes());
  EXPECT_TRUE(engine->take_records().empty());
  TransferEngineStats s = engine->stats();
  EXPECT_EQ(s.swap_outs, set.size());
  EXPECT_EQ(s.swap_ins, set.size());
  EXPECT_EQ(s.bytes_out, set.total_bytes());
  EXPECT_EQ(s.bytes_in, set.total_bytes());
  EXPECT_EQ(tier->stats().bytes_read, set.total_bytes());
}

TEST_P(TransferEngineTest, OutAndInQueuesOverlap) {
  // Round 1 swaps out A. Then, with nothing waited on: A comes back into a second region while B
  // goes out, and every A swap-in is issued right behind its own swap-out, so it must wait for it.
  TempDir dir;
  auto backend = cpu_backend();
  auto tier = make_tier(GetParam(), dir, 16 << 20);
  ASSERT_NE(tier, nullptr);
  auto engine = make_engine(*backend);
  std::vector<uint64_t> sizes = test::edge_and_random_sizes(25, 80000, 6);
  TensorSet a(*backend, sizes, /*seed=*/6);
  TensorSet a_back(*backend, sizes, /*seed=*/6);  // same reference bytes, other device memory
  TensorSet b(*backend, test::edge_and_random_sizes(25, 80000, 7), /*seed=*/7);
  a.upload();
  b.upload();
  a_back.scribble();
  const TensorId b_base = 1000;

  std::vector<TransferTicket> in_a, out_b;
  for (size_t i = 0; i < a.size(); ++i) {
    engine->swap_out(static_cast<TensorId>(i), a.ptr(i), a.bytes(i), *tier);
    out_b.push_back(engine->swap_out(b_base + static_cast<TensorId>(i), b.ptr(i), b.bytes(i), *tier));
    in_a.push_back(engine->swap_in(static_cast<TensorId>(i), a_back.ptr(i), a.bytes(i), *tier));
  }
  for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(engine->wait(in_a[i]).ok()) << engine->status().message();
  EXPECT_EQ(a_back.first_mismatch(), "");

  // B's device bytes may be overwritten only once their swap-outs are done (the contract).
  for (TransferTicket t : out_b) ASSERT_TRUE(engine->wait(t).ok()) << engine->status().message();
  b.scribble();
  for (size_t i = 0; i < b.size(); ++i) engine->swap_in(b_base + static_cast<TensorId>(i), b.ptr(i), b.bytes(i), *tier);
  ASSERT_TRUE(engine->drain().ok()) << engine->status().message();
  EXPECT_EQ(b.first_mismatch(), "");
  expect_fifo_and_ordered_times(engine->take_records());
}

TEST_P(TransferEngineTest, DiscardWaitsThenDropsTheCopy) {
  TempDir dir;
  auto backend = cpu_backend();
  auto tier = make_tier(GetParam(), dir, 16 << 20);
  ASSERT_NE(tier, nullptr);
  auto engine = make_engine(*backend);
  TensorSet set(*backend, {300000, 300000}, /*seed=*/8);
  set.upload();

  // Nothing waited on: the swap-in depends on the swap-out, and discard on both.
  TransferTicket out = engine->swap_out(0, set.ptr(0), set.bytes(0), *tier);
  TransferTicket in = engine->swap_in(0, set.ptr(1), set.bytes(0), *tier);
  ASSERT_TRUE(engine->discard(0, *tier).ok()) << engine->status().message();
  EXPECT_TRUE(engine->done(out));
  EXPECT_TRUE(engine->done(in));
  EXPECT_EQ(set.download(1), set.expected(0));  // tensor 0's bytes, copied through the tier
  EXPECT_FALSE(tier->find(0).has_value());
  EXPECT_EQ(tier->stats().in_use_bytes, 0u);
  EXPECT_TRUE(engine->discard(42, *tier).ok());  // no copy: nothing to do

  // The slot is gone, so the tensor can be swapped out afresh (as after an update op).
  ASSERT_TRUE(engine->wait(engine->swap_out(0, set.ptr(0), set.bytes(0), *tier)).ok());
  EXPECT_EQ(tier->stats().live_slots, 1u);
}

// A host task (run_on_host, the runtime's host-side optimizer updates) starts after the swap-outs
// of the slots it names, a later swap-in of a slot it writes brings the task's bytes, discard and
// drain wait for it, and a failed task is the engine's sticky error.
TEST_P(TransferEngineTest, HostTasksAreOrderedWithTheCopiesOfTheirSlots) {
  TempDir dir;
  auto backend = cpu_backend();
  auto tier = make_tier(GetParam(), dir, 16 << 20);
  ASSERT_NE(tier, nullptr);
  auto engine = make_engine(*backend);
  TensorSet set(*backend, {200000, 200000}, /*seed=*/5);
  set.upload();
  // Nothing waited on: the task reads tensor 0's copy and overwrites it with its bytes reversed.
  engine->swap_out(0, set.ptr(0), set.bytes(0), *tier);
  std::vector<std::byte> seen;
  TransferTicket task = engine->run_on_host(
      [&]() -> Status {
        std::optional<SwapSlot> slot = tier->find(0);
        if (!slot) return Status::Internal("no copy");
        seen.resize(slot->bytes);
        FERRY_RETURN_IF_ERROR(tier->read(*slot, std::span<std::byte>(seen)));
        std::vector<std::byte> reversed(seen.rbegin(), seen.rend());
        return tier->write(*slot, std::span<const std::byte>(reversed));
      },
      {{tier.get(), 0}}, {{tier.get(), 0}});
  ASSERT_TRUE(task);
  TransferTicket in = engine->swap_in(0, set.ptr(1), set.bytes(0), *tier);
  ASSERT_TRUE(engine->wait(in).ok()) << engine->status().message();
  EXPECT_TRUE(engine->done(task));
  EXPECT_EQ(seen, set.expected(0));  // the task saw the complete swap-out
  std::vector<std::byte> reversed(set.expected(0).rbegin(), set.expected(0).rend());
  EXPECT_EQ(set.download(1), reversed);  // the swap-in waited for the task
  // Discard waits for a task still reading the slot.
  engine->swap_out(1, set.ptr(1), set.bytes(1), *tier);
  TransferTicket reader = engine->run_on_host(
      [&]() -> Status {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        std::vector<std::byte> b(set.bytes(1));
        return tier->read(*tier->find(1), std::span<std::byte>(b));
      },
      {{tier.get(), 1}}, {});
  ASSERT_TRUE(engine->discard(1, *tier).ok()) << engine->status().message();
  EXPECT_TRUE(engine->done(reader));
  EXPECT_EQ(engine->stats().host_tasks, 2u);
  // A failing task: its error is sticky, later work is refused.
  TransferTicket bad = engine->run_on_host([] { return Status::IoError("disk on fire"); }, {}, {});
  Status st = engine->wait(bad);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("host task"), std::string::npos) << st.message();
  EXPECT_FALSE(engine->swap_out(1, set.ptr(1), set.bytes(1), *tier));
  EXPECT_EQ(engine->drain().code(), StatusCode::kIoError);
}

INSTANTIATE_TEST_SUITE_P(Tiers, TransferEngineTest,
                         ::testing::Values(TierKind::kHost, TierKind::kSsdUring, TierKind::kSsdThreads),
                         [](const auto& info) { return tier_name(info.param); });

TEST(TransferEngineBasicsTest, NullTicketIsDoneAndWaitsReturnTheStatus) {
  auto backend = cpu_backend();
  auto engine = make_engine(*backend);
  EXPECT_TRUE(engine->done(TransferTicket{}));
  EXPECT_TRUE(engine->wait(TransferTicket{}).ok());
  EXPECT_TRUE(engine->drain().ok());
  EXPECT_TRUE(engine->take_records().empty());
}

TEST(TransferEngineBasicsTest, SwapInWithoutACopyIsAStickyError) {
  TempDir dir;
  auto backend = cpu_backend();
  auto tier = make_tier(TierKind::kHost, dir, 1 << 20);
  auto engine = make_engine(*backend);
  TensorSet set(*backend, {1000}, /*seed=*/9);
  TransferTicket in = engine->swap_in(3, set.ptr(0), 1000, *tier);
  EXPECT_FALSE(static_cast<bool>(in));
  Status st = engine->wait(in);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor 3 from the host tier: the tier holds no copy"), std::string::npos)
      << st.message();
  // Refused from now on, with the same error.
  TransferTicket out = engine->swap_out(0, set.ptr(0), 1000, *tier);
  EXPECT_FALSE(static_cast<bool>(out));
  EXPECT_EQ(engine->wait(out).message(), st.message());
  EXPECT_EQ(engine->drain().message(), st.message());
  EXPECT_EQ(tier->stats().live_slots, 0u);  // a refused swap-out reserves nothing
}

TEST(TransferEngineBasicsTest, FullHostTierIsOutOfMemoryAtWait) {
  TempDir dir;
  auto backend = cpu_backend();
  auto tier = make_tier(TierKind::kHost, dir, 1 << 20);
  auto engine = make_engine(*backend);
  TensorSet set(*backend, {400 << 10, 400 << 10, 400 << 10}, /*seed=*/10);
  set.upload();
  TransferTicket t0 = engine->swap_out(0, set.ptr(0), set.bytes(0), *tier);
  TransferTicket t1 = engine->swap_out(1, set.ptr(1), set.bytes(1), *tier);
  TransferTicket t2 = engine->swap_out(2, set.ptr(2), set.bytes(2), *tier);
  EXPECT_TRUE(t0 && t1);
  EXPECT_FALSE(static_cast<bool>(t2));
  Status st = engine->wait(t2);
  EXPECT_EQ(st.code(), StatusCode::kOutOfMemory);
  const std::string& msg = st.message();
  EXPECT_NE(msg.find("swap-out: host tier: no room for tensor 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("409600 bytes"), std::string::npos) << msg;   // requested
  EXPECT_NE(msg.find("1048576 bytes"), std::string::npos) << msg;  // capacity
  EXPECT_NE(msg.find("819200 bytes"), std::string::npos) << msg;   // in use
  EXPECT_EQ(engine->wait(t0).code(), StatusCode::kOutOfMemory);   // sticky: every wait reports it
}

class TransferEngineFaultTest : public ::testing::TestWithParam<SsdFault::Kind> {};

TEST_P(TransferEngineFaultTest, SsdFaultSurfacesAtWaitAndStopsTheEngine) {
  TempDir dir;
  auto backend = cpu_backend();
  // Fails inside tensor 3's swap-out (16 KiB chunks, 64 KiB tensors).
  auto tier = make_tier(TierKind::kSsdUring, dir, 16 << 20,
                        SsdFault{.kind = GetParam(), .op = SsdFault::Op::kWrite, .after_bytes = 3 * 65536 + 20000});
  ASSERT_NE(tier, nullptr);
  auto engine = make_engine(*backend);
  TensorSet set(*backend, std::vector<uint64_t>(8, 65536), /*seed=*/11);
  set.upload();
  std::vector<TransferTicket> outs;
  for (size_t i = 0; i < set.size(); ++i)
    outs.push_back(engine->swap_out(static_cast<TensorId>(i), set.ptr(i), set.bytes(i), *tier));

  Status st = engine->wait(outs[3]);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("swap_out: ssd tier:"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("tensor 3"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(dir.path()), std::string::npos) << st.message();  // names the file
  EXPECT_EQ(engine->drain().message(), st.message());
  EXPECT_EQ(engine->status().message(), st.message());
  EXPECT_FALSE(static_cast<bool>(engine->swap_in(0, set.ptr(0), set.bytes(0), *tier)));  // refused

  // Tensors 0..3 were issued before the failure could happen; later ones may have been refused.
  const auto issued = static_cast<size_t>(std::count_if(outs.begin(), outs.end(), [](TransferTicket t) { return t.id != 0; }));
  EXPECT_GE(issued, 4u);
  std::vector<TransferRecord> records = engine->take_records();
  ASSERT_EQ(records.size(), issued);  // the failed one and the skipped ones are recorded too
  for (const TransferRecord& r : records) EXPECT_EQ(r.ok, r.tensor < 3) << "tensor " << r.tensor;
  EXPECT_EQ(tier->stats().num_writes, 3u);  // nothing after the failure touched the disk

  engine.reset();
  tier.reset();
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Faults, TransferEngineFaultTest,
                         ::testing::Values(SsdFault::Kind::kNoSpace, SsdFault::Kind::kIoError,
                                           SsdFault::Kind::kShortTransfer),
                         [](const auto& info) {
                           switch (info.param) {
                             case SsdFault::Kind::kNoSpace: return "DiskFull";
                             case SsdFault::Kind::kIoError: return "Eio";
                             default: return "ShortWrite";
                           }
                         });

TEST(TransferEngineBasicsTest, DestructionWithTransfersInFlightIsSafe) {
  TempDir dir;
  auto backend = cpu_backend();
  auto tier = make_tier(TierKind::kSsdUring, dir, 32 << 20);
  ASSERT_NE(tier, nullptr);
  TensorSet set(*backend, std::vector<uint64_t>(48, 200000), /*seed=*/12);
  set.upload();
  for (int round = 0; round < 3; ++round) {
    auto engine = make_engine(*backend);
    for (size_t i = 0; i < set.size(); ++i) {
      const auto t = static_cast<TensorId>(i);
      if (round == 0 || !tier->find(t)) engine->swap_out(t, set.ptr(i), set.bytes(i), *tier);
      else engine->swap_in(t, set.ptr(i), set.bytes(i), *tier);
    }
    engine.reset();  // mid-flight: queued transfers are skipped, running ones finish
  }
  // Whatever ran, the tier is consistent: every slot is idle (release checks it) and those that
  // hold a copy hold the right bytes.
  auto engine = make_engine(*backend);
  set.scribble();
  std::vector<size_t> with_copy;
  for (size_t i = 0; i < set.size(); ++i) {
    std::optional<SwapSlot> slot = tier->find(static_cast<TensorId>(i));
    if (slot && tier->holds_copy(*slot)) {
      with_copy.push_back(i);
      engine->swap_in(static_cast<TensorId>(i), set.ptr(i), set.bytes(i), *tier);
    }
  }
  ASSERT_TRUE(engine->drain().ok()) << engine->status().message();
  for (size_t i : with_copy) EXPECT_EQ(set.mismatch(i), "");
  for (size_t i = 0; i < set.size(); ++i) ASSERT_TRUE(engine->discard(static_cast<TensorId>(i), *tier).ok());
  EXPECT_EQ(tier->stats().live_slots, 0u);
  engine.reset();
  tier.reset();
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
}

}  // namespace
}  // namespace ferry
