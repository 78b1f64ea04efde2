// Pins the shared-memory format. If a test here fails, you changed the
// segment layout: bump layout::kLayoutVersion, then update the numbers.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "layout.hpp"

namespace shmsem::detail::layout {
namespace {

TEST(Layout, HeaderFieldOffsetsArePinned) {
  EXPECT_EQ(offsetof(segment_header, magic), 0u);
  EXPECT_EQ(offsetof(segment_header, layout_version), 8u);
  EXPECT_EQ(offsetof(segment_header, format), 12u);
  EXPECT_EQ(offsetof(segment_header, init_state), 16u);
  EXPECT_EQ(offsetof(segment_header, key_size), 20u);
  EXPECT_EQ(offsetof(segment_header, created_realtime_ns), 24u);
  EXPECT_EQ(offsetof(segment_header, key), 32u);
  EXPECT_EQ(offsetof(segment_header, mutex), 320u);
  EXPECT_EQ(offsetof(segment_header, capacity), 384u);
  EXPECT_EQ(offsetof(segment_header, used), 388u);
  EXPECT_EQ(offsetof(segment_header, waiters), 392u);
  EXPECT_EQ(offsetof(segment_header, holder_slots), 396u);
  EXPECT_EQ(offsetof(segment_header, waiter_slots), 400u);
  EXPECT_EQ(offsetof(segment_header, lease_slots), 404u);
  EXPECT_EQ(offsetof(segment_header, lease_hwm), 408u);
  EXPECT_EQ(offsetof(segment_header, earliest_expiry_ns), 416u);
  EXPECT_EQ(offsetof(segment_header, ewma), 424u);
  EXPECT_EQ(offsetof(segment_header, ewma_ns), 440u);
  EXPECT_EQ(offsetof(segment_header, idle_seq), 448u);
  EXPECT_EQ(offsetof(segment_header, idle_waiters), 452u);
  EXPECT_EQ(offsetof(segment_header, free_lease), 456u);
  EXPECT_EQ(offsetof(segment_header, queue_head), 460u);
  EXPECT_EQ(offsetof(segment_header, queue_tail), 464u);
  EXPECT_EQ(offsetof(segment_header, next_permit_id), 472u);
  EXPECT_EQ(offsetof(segment_header, next_ticket), 480u);
  EXPECT_EQ(offsetof(segment_header, stats), 512u);
  EXPECT_EQ(sizeof(shared_stats), 12 * 8u + 2 * (14 * 8u));
  EXPECT_EQ(sizeof(segment_header), 832u);
}

TEST(Layout, SlotFieldOffsetsArePinned) {
  EXPECT_EQ(offsetof(holder_record, state), 0u);
  EXPECT_EQ(offsetof(holder_record, generation), 4u);
  EXPECT_EQ(offsetof(holder_record, pid), 8u);
  EXPECT_EQ(offsetof(holder_record, uid), 12u);
  EXPECT_EQ(offsetof(holder_record, pid_ns), 16u);
  EXPECT_EQ(offsetof(holder_record, start_time), 24u);
  EXPECT_EQ(offsetof(holder_record, leases), 32u);
  EXPECT_EQ(offsetof(holder_record, waiting), 36u);
  EXPECT_EQ(offsetof(holder_record, comm), 40u);

  EXPECT_EQ(offsetof(waiter_slot, seq), 0u);
  EXPECT_EQ(offsetof(waiter_slot, state), 4u);
  EXPECT_EQ(offsetof(waiter_slot, holder), 8u);
  EXPECT_EQ(offsetof(waiter_slot, weight), 12u);
  EXPECT_EQ(offsetof(waiter_slot, prev), 16u);
  EXPECT_EQ(offsetof(waiter_slot, next), 20u);
  EXPECT_EQ(offsetof(waiter_slot, lease), 24u);
  EXPECT_EQ(offsetof(waiter_slot, permit_id), 32u);
  EXPECT_EQ(offsetof(waiter_slot, ttl_ms), 40u);
  EXPECT_EQ(offsetof(waiter_slot, enqueued_ns), 48u);
  EXPECT_EQ(offsetof(waiter_slot, ticket), 56u);

  EXPECT_EQ(offsetof(lease_slot, id), 0u);
  EXPECT_EQ(offsetof(lease_slot, expires_ns), 8u);
  EXPECT_EQ(offsetof(lease_slot, acquired_ns), 16u);
  EXPECT_EQ(offsetof(lease_slot, weight), 24u);
  EXPECT_EQ(offsetof(lease_slot, holder), 28u);
  EXPECT_EQ(offsetof(lease_slot, next_free), 32u);
  EXPECT_EQ(offsetof(lease_slot, lost_reason), 36u);
  EXPECT_EQ(offsetof(lease_slot, lost_id), 40u);
  EXPECT_EQ(offsetof(lease_slot, lost_ns), 48u);
}

TEST(Layout, RegionsArePinned) {
  EXPECT_EQ(kHoldersOffset, 4096u);
  EXPECT_EQ(kWaitersOffset, 4096u + 64u * 4096u);
  EXPECT_EQ(kLeasesOffset, 4096u + 64u * 4096u + 64u * 16384u);
  EXPECT_EQ(kLayoutVersion, 1u);
  EXPECT_EQ(kMagic, 0x314d45534d4853ULL);
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
  h->capacity.store(capacity);
  h->lease_slots.store(static_cast<std::uint32_t>(capacity));
  h->holder_slots.store(kInitialHolders);
  h->waiter_slots.store(kInitialWaiters);
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
  h->capacity.store(0);
  EXPECT_EQ(validate(img.data(), img.size()), problem::bad_header);
  h->capacity.store(5);  // more than its lease table
  EXPECT_EQ(validate(img.data(), img.size()), problem::bad_header);
  h->capacity.store(4);
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
