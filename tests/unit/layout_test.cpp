// Pins the shared-memory format. If a test here fails, you changed the
// segment layout: bump layout::kLayoutVersion, then update the numbers.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "shm/layout.hpp"

namespace shmsem::detail::layout {
namespace {

TEST(Layout, HeaderFieldOffsetsArePinned) {
  EXPECT_EQ(offsetof(segment_header, magic), 0u);
  EXPECT_EQ(offsetof(segment_header, layout_version), 8u);
  EXPECT_EQ(offsetof(segment_header, format), 12u);
  EXPECT_EQ(offsetof(segment_header, init_state), 16u);
  EXPECT_EQ(offsetof(segment_header, key_size), 20u);
  EXPECT_EQ(offsetof(segment_header, created_realtime_ns), 24u);
  EXPECT_EQ(offsetof(segment_header, ewma_base_ns), 32u);
  EXPECT_EQ(offsetof(segment_header, key), 40u);
  EXPECT_EQ(offsetof(segment_header, fencing), 296u);
  EXPECT_EQ(offsetof(segment_header, fairness), 300u);
  EXPECT_EQ(offsetof(segment_header, mutex), 320u);
  EXPECT_EQ(offsetof(segment_header, gate), 4032u);
  EXPECT_EQ(offsetof(segment_header, earliest_expiry_ns), 4040u);
  EXPECT_EQ(offsetof(segment_header, idle_waiters), 4048u);
  EXPECT_EQ(offsetof(segment_header, next_fence), 4056u);
  EXPECT_EQ(offsetof(segment_header, waiters), 384u);
  EXPECT_EQ(offsetof(segment_header, holder_slots), 388u);
  EXPECT_EQ(offsetof(segment_header, waiter_slots), 392u);
  EXPECT_EQ(offsetof(segment_header, thread_slots), 396u);
  EXPECT_EQ(offsetof(segment_header, lease_slots), 400u);
  EXPECT_EQ(offsetof(segment_header, lease_hwm), 404u);
  EXPECT_EQ(offsetof(segment_header, ewma), 408u);
  EXPECT_EQ(offsetof(segment_header, idle_seq), 416u);
  EXPECT_EQ(offsetof(segment_header, grants_due), 420u);
  EXPECT_EQ(offsetof(segment_header, left_waiters), 424u);
  EXPECT_EQ(offsetof(segment_header, free_lease), 428u);
  EXPECT_EQ(offsetof(segment_header, queue_head), 432u);
  EXPECT_EQ(offsetof(segment_header, queue_tail), 436u);
  EXPECT_EQ(offsetof(segment_header, free_holder), 440u);
  EXPECT_EQ(offsetof(segment_header, next_permit_id), 448u);
  EXPECT_EQ(offsetof(segment_header, next_ticket), 456u);
  EXPECT_EQ(offsetof(segment_header, resettle_due_ns), 464u);
  EXPECT_EQ(offsetof(segment_header, resettle_backoff_ns), 472u);
  EXPECT_EQ(offsetof(segment_header, free_waiter), 480u);
  EXPECT_EQ(offsetof(segment_header, stats), 512u);

  EXPECT_EQ(offsetof(holder_record, state), 0u);
  EXPECT_EQ(offsetof(holder_record, generation), 4u);
  EXPECT_EQ(offsetof(holder_record, pid), 8u);
  EXPECT_EQ(offsetof(holder_record, uid), 12u);
  EXPECT_EQ(offsetof(holder_record, pid_ns), 16u);
  EXPECT_EQ(offsetof(holder_record, start_time), 24u);
  EXPECT_EQ(offsetof(holder_record, waiting), 32u);
  EXPECT_EQ(offsetof(holder_record, threads), 36u);
  EXPECT_EQ(offsetof(holder_record, comm), 40u);
  EXPECT_EQ(offsetof(holder_record, leases), 56u);
  EXPECT_EQ(offsetof(holder_record, next_free), 60u);
  EXPECT_EQ(offsetof(holder_record, lifeline), 64u);
  EXPECT_EQ(offsetof(holder_record, lifeline_state), 104u);
  EXPECT_EQ(offsetof(holder_record, prev_free), 108u);
  EXPECT_EQ(offsetof(holder_record, token_shared), 112u);
  EXPECT_EQ(sizeof(holder_record), 128u);

  EXPECT_EQ(offsetof(thread_record, state), 0u);
  EXPECT_EQ(offsetof(thread_record, holder), 4u);
  EXPECT_EQ(offsetof(thread_record, acquired), 8u);
  EXPECT_EQ(offsetof(thread_record, hold_sum_ns), 16u);
  EXPECT_EQ(offsetof(thread_record, hold_counts), 24u);

  EXPECT_EQ(offsetof(waiter_slot, seq), 0u);
  EXPECT_EQ(offsetof(waiter_slot, state), 4u);
  EXPECT_EQ(offsetof(waiter_slot, holder), 8u);
  EXPECT_EQ(offsetof(waiter_slot, weight), 12u);
  EXPECT_EQ(offsetof(waiter_slot, prev), 16u);
  EXPECT_EQ(offsetof(waiter_slot, next), 20u);
  EXPECT_EQ(offsetof(waiter_slot, lease), 24u);
  EXPECT_EQ(offsetof(waiter_slot, ttl_ms), 28u);
  EXPECT_EQ(offsetof(waiter_slot, permit_id), 32u);
  EXPECT_EQ(offsetof(waiter_slot, lease_gen), 40u);
  EXPECT_EQ(offsetof(waiter_slot, enqueued_ns), 48u);
  EXPECT_EQ(offsetof(waiter_slot, ticket), 56u);

  EXPECT_EQ(offsetof(lease_slot, state), 0u);
  EXPECT_EQ(offsetof(lease_slot, id), 8u);
  EXPECT_EQ(offsetof(lease_slot, expires_ns), 16u);
  EXPECT_EQ(offsetof(lease_slot, acquired_ns), 24u);
  EXPECT_EQ(offsetof(lease_slot, weight), 32u);
  EXPECT_EQ(offsetof(lease_slot, holder), 36u);
  EXPECT_EQ(offsetof(lease_slot, next_free), 40u);
  EXPECT_EQ(offsetof(lease_slot, lost_reason), 44u);
  EXPECT_EQ(offsetof(lease_slot, lost_id), 48u);
  EXPECT_EQ(offsetof(lease_slot, lost_ns), 56u);
}

TEST(Layout, RegionsArePinned) {
  EXPECT_EQ(kHoldersOffset, 4096u);
  EXPECT_EQ(kWaitersOffset, 4096u + 128u * 4096u);
  // Half a page off, and then back on a page boundary: see kThreadsOffset.
  EXPECT_EQ(kThreadsOffset, 4096u + 128u * 4096u + 64u * 16384u + 2048u);
  EXPECT_EQ(kLeasesOffset, 4096u + 128u * 4096u + 64u * 16384u + 128u * 4096u + 4096u);
  EXPECT_EQ(kThreadsOffset % 4096u, 2048u);
  EXPECT_EQ(kLeasesOffset % 4096u, 0u);
  EXPECT_EQ(kMaxLeases, 1'000'000u + 4096u * 17u);
  EXPECT_EQ(kLayoutVersion, 10u);
  // Which token file holds a holder's token, and where the header keeps
  // the token files' name and secret.
  EXPECT_EQ(kHoldersPerTokenFile, 128u);
  EXPECT_EQ(offsetof(segment_header, token_nonce), 304u);
  EXPECT_EQ(offsetof(segment_header, token_secret), 312u);
  EXPECT_EQ(kMagic, 0x314d45534d4853ULL);
}

// The histograms' bucket bounds are counted into shared counters: changing
// one changes what every segment's counts mean, and the format word.
TEST(Layout, HistogramBoundsArePinned) {
  const std::vector<std::int64_t> ns(kHistogramBoundsNs.begin(), kHistogramBoundsNs.end());
  EXPECT_EQ(ns, (std::vector<std::int64_t>{100'000, 1'000'000, 5'000'000, 10'000'000, 50'000'000,
                                           100'000'000, 500'000'000, 1'000'000'000, 5'000'000'000,
                                           10'000'000'000, 60'000'000'000, 300'000'000'000}));
  ASSERT_EQ(Histogram::kBounds.size(), kHistogramBoundsNs.size());
  for (std::size_t i = 0; i < kHistogramBoundsNs.size(); ++i)
    EXPECT_DOUBLE_EQ(Histogram::kBounds[i] * 1e9, static_cast<double>(kHistogramBoundsNs[i]));
}

TEST(Layout, GateWordHoldsSeatsCapacityAndFlags) {
  const std::uint64_t g = make_gate(7, 1'000'000, kGateQueued);
  EXPECT_EQ(gate_used(g), 7);
  EXPECT_EQ(gate_capacity(g), 1'000'000);
  EXPECT_EQ(g & kGateFlags, kGateQueued);
  EXPECT_TRUE(gate_fits(g, 999'993));
  EXPECT_FALSE(gate_fits(g, 999'994));
  // No weight can overflow the check, whatever the gate holds.
  EXPECT_FALSE(gate_fits(g, INT32_MAX));
  EXPECT_FALSE(gate_fits(make_gate(1, 4, 0), INT32_MAX));
  EXPECT_FALSE(gate_fits(make_gate(static_cast<std::int32_t>(kSeatMask), 4, 0), 1));
  EXPECT_FALSE(gate_fits(make_gate(5, 4, 0), 1));  // above a shrunk capacity
  EXPECT_TRUE(gate_fits(make_gate(3, 4, 0), 1));
  EXPECT_FALSE(gate_fits(make_gate(3, 4, 0), 2));
  // The fast path adds and removes seats with plain arithmetic on the word.
  EXPECT_EQ(gate_used(g + 3), 10);
  EXPECT_EQ(gate_capacity(g + 3), 1'000'000);
  EXPECT_EQ(make_gate(gate_used(g), gate_capacity(g), kGateFrozen) & kGateFlags, kGateFrozen);
}

TEST(Layout, SlotStateWordHoldsKindReasonAndGeneration) {
  const std::uint64_t gen = (std::uint64_t{1} << 56) - 1;
  const std::uint64_t s = slot_state(gen, kSlotEnding, kLostForceReleased);
  EXPECT_EQ(state_kind(s), kSlotEnding);
  EXPECT_EQ(state_reason(s), kLostForceReleased);
  EXPECT_EQ(state_gen(s), gen);
  EXPECT_NE(slot_state(5, kSlotHeld), slot_state(6, kSlotHeld));
}

TEST(Layout, EwmaWordHoldsValueAndTime) {
  const std::uint64_t w = ewma_word(0.625f, 123'456'789u);
  EXPECT_EQ(ewma_value(w), 0.625f);
  EXPECT_EQ(ewma_ms(w), 123'456'789u);
  EXPECT_EQ(ewma_value(ewma_word(0.0f, 0)), 0.0f);
}

// A minimal valid image, for the validation tests below.
std::vector<unsigned char> valid_image(int capacity) {
  std::vector<unsigned char> img(file_size_for(static_cast<std::uint32_t>(capacity)), 0);
  auto* h = reinterpret_cast<segment_header*>(img.data());
  h->magic = kMagic;
  h->layout_version = kLayoutVersion;
  h->format = format_word();
  h->init_state.store(kReady);
  h->key_size = 3;
  std::memcpy(h->key, "abc", 3);
  h->gate.store(make_gate(0, capacity, 0));
  h->lease_slots.store(static_cast<std::uint32_t>(capacity));
  h->holder_slots.store(kInitialHolders);
  h->waiter_slots.store(kInitialWaiters);
  h->thread_slots.store(kInitialThreads);
  return img;
}

TEST(Layout, ValidImageValidates) {
  auto img = valid_image(4);
  EXPECT_EQ(validate(img.data(), img.size()), problem::none);
  bool mismatch = false;
  EXPECT_EQ(validate(img.data(), img.size(), &mismatch, "abc", 3), problem::none);
  EXPECT_EQ(validate(img.data(), img.size(), &mismatch, "abd", 3), problem::bad_header);
  EXPECT_TRUE(mismatch);
}

TEST(Layout, EachDefectIsNamed) {
  auto img = valid_image(4);
  auto* h = reinterpret_cast<segment_header*>(img.data());
  EXPECT_EQ(validate(img.data(), 4), problem::too_small);
  EXPECT_EQ(validate(img.data(), 100), problem::too_small);
  EXPECT_EQ(validate(img.data(), img.size() - 1), problem::truncated);
  h->layout_version = 99;
  EXPECT_EQ(validate(img.data(), img.size()), problem::bad_version);
  h->layout_version = kLayoutVersion;
  h->format ^= 1;
  EXPECT_EQ(validate(img.data(), img.size()), problem::bad_format);
  h->format ^= 1;
  h->init_state.store(kInitializing);
  EXPECT_EQ(validate(img.data(), img.size()), problem::initializing);
  h->init_state.store(kReady);
  h->gate.store(make_gate(0, 0, 0));
  EXPECT_EQ(validate(img.data(), img.size()), problem::bad_header);
  h->gate.store(make_gate(0, 5, 0));  // more than its lease table
  EXPECT_EQ(validate(img.data(), img.size()), problem::bad_header);
  h->gate.store(make_gate(0, 4, 0) | (std::uint64_t{1} << 50));  // bits no field owns
  EXPECT_EQ(validate(img.data(), img.size()), problem::bad_header);
  h->gate.store(make_gate(0, 4, kGateWaiting | kGateWoken));  // barging's flags are the gate's
  EXPECT_EQ(validate(img.data(), img.size()), problem::none);
  h->gate.store(make_gate(0, 4, 0));
  h->fairness = 2;  // no such policy
  EXPECT_EQ(validate(img.data(), img.size()), problem::bad_header);
  h->fairness = kFairnessBarging;
  EXPECT_EQ(validate(img.data(), img.size()), problem::none);
  h->fairness = kFairnessFifo;
  h->thread_slots.store(kMaxThreads + 1);
  EXPECT_EQ(validate(img.data(), img.size()), problem::bad_header);
  h->thread_slots.store(kInitialThreads);
  h->free_holder = kInitialHolders + 1;  // a free list that leaves the table
  EXPECT_EQ(validate(img.data(), img.size()), problem::bad_header);
  h->free_holder = kNil;
  h->free_waiter = kInitialWaiters + 1;
  EXPECT_EQ(validate(img.data(), img.size()), problem::bad_header);
  h->free_waiter = kNil;
  h->key_size = 0;
  EXPECT_EQ(validate(img.data(), img.size()), problem::bad_header);
  h->key_size = 3;
  h->key[1] = '\0';
  EXPECT_EQ(validate(img.data(), img.size()), problem::bad_header);
  h->key[1] = 'b';
  h->magic = 0x1234;
  EXPECT_EQ(validate(img.data(), img.size()), problem::bad_magic);
  h->magic = 0;
  EXPECT_EQ(validate(img.data(), img.size()), problem::uninitialized);
}

}  // namespace
}  // namespace shmsem::detail::layout
