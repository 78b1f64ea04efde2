// segment_fuzz.cpp: libFuzzer target over the segment attach/validation path,
// fed arbitrary file contents and sizes.
//
// Input: byte 0 = flags, bytes 1..4 = file size selector, the rest = the
// first page of the file. The flags optionally patch in the right magic,
// layout version and format word, a ready init_state and the attaching key,
// so the fuzzer reaches the deeper checks without guessing a hash.
//
// 1. layout::validate() over the image, in a buffer of exactly the bytes
//    it may read (ASan catches any read past them). When it says `none`,
//    every structural promise is re-checked independently.
// 2. The same image written to a real /dev/shm file of the chosen size and
//    attached with Semaphore::attach(): it must either succeed with a usable
//    semaphore (capacity in range, nothing held, a seat can be taken and
//    given back) or throw SegmentError. Anything else aborts.
#include <shmsem/shmsem.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "shm/layout.hpp"

namespace layout = shmsem::detail::layout;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

const std::string& fuzz_key() {
  static const std::string k = "fuzz.segment." + std::to_string(::getpid());
  return k;
}

void check_valid_image(const layout::segment_header* h, std::uint64_t file_size) {
  check(h->magic == layout::kMagic);
  check(h->layout_version == layout::kLayoutVersion);
  check(h->format == layout::format_word());
  check(h->init_state.load() == layout::kReady);
  check(h->key_size >= 1 && h->key_size <= layout::kMaxKeySize);
  const auto cap = layout::gate_capacity(h->gate.load());
  check(cap >= 1 && cap <= shmsem::kMaxCapacity);
  const auto leases = h->lease_slots.load();
  check(leases >= static_cast<std::uint32_t>(cap) && leases <= layout::kMaxLeases);
  check(h->holder_slots.load() >= 1 && h->holder_slots.load() <= layout::kMaxHolders);
  check(h->waiter_slots.load() >= 1 && h->waiter_slots.load() <= layout::kMaxWaiters);
  check(h->thread_slots.load() >= 1 && h->thread_slots.load() <= layout::kMaxThreads);
  check(h->lease_hwm.load() <= leases);
  check(file_size >= layout::file_size_for(leases));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 5) return 0;
  const std::uint8_t flags = data[0];
  std::uint32_t sel;
  std::memcpy(&sel, data + 1, 4);
  data += 5;
  size -= 5;
  const std::string& key = fuzz_key();

  // The file size: small sizes around the header, or the size the image's
  // own lease table needs (+/- a little), or anything up to the maximum.
  std::vector<std::uint8_t> page(layout::kHeaderRegion, 0);
  std::memcpy(page.data(), data, std::min(size, page.size()));
  auto* h = reinterpret_cast<layout::segment_header*>(page.data());
  if (flags & 1) h->magic = layout::kMagic;
  if (flags & 2) {
    h->layout_version = layout::kLayoutVersion;
    h->format = layout::format_word();
  }
  if (flags & 4) h->init_state.store(layout::kReady);
  if (flags & 8) {
    h->key_size = static_cast<std::uint32_t>(key.size());
    std::memcpy(h->key, key.data(), key.size());
  }
  std::uint64_t file_size;
  switch ((flags >> 4) & 3) {
    case 0:
      file_size = sel % (2 * layout::kHeaderRegion + 1);
      break;
    case 1: {
      const std::uint32_t leases = std::min(h->lease_slots.load(), layout::kMaxLeases);
      file_size = layout::file_size_for(leases) + (sel % 129) - 64;
      break;
    }
    default:
      file_size = sel % (layout::file_size_for(layout::kMaxLeases) + 1);
      break;
  }

  // 1. Pure validation over exactly the bytes it may read.
  const std::size_t readable =
      static_cast<std::size_t>(std::min<std::uint64_t>(file_size, layout::kHeaderRegion));
  std::vector<std::uint8_t> exact(page.begin(), page.begin() + readable);
  bool mismatch = false;
  const auto p = layout::validate(exact.data(), file_size, &mismatch, key.data(), key.size());
  if (p == layout::problem::none) check_valid_image(h, file_size);
  check(layout::to_string(p) != nullptr);

  // 2. A real attach of the same image.
  shmsem::Semaphore::remove(key);
  const std::string path = shmsem::Semaphore::segment_path(key);
  int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  bool written = ::ftruncate(fd, static_cast<off_t>(file_size)) == 0;
  if (written && readable > 0)
    written = ::pwrite(fd, page.data(), readable, 0) == static_cast<ssize_t>(readable);
  ::close(fd);
  if (written) {
    try {
      shmsem::Semaphore sem = shmsem::Semaphore::attach(key);
      check(p == layout::problem::none);
      check(sem.capacity() >= 1 && sem.capacity() <= shmsem::kMaxCapacity);
      check(sem.used() == 0 && sem.holders().empty() && sem.waiters() == 0);
      (void)sem.stats();
      auto permit = sem.try_acquire(1);
      check(permit.has_value());
      permit->release();
      check(sem.used() == 0);
    } catch (const shmsem::SegmentError&) {
      check(p != layout::problem::none);
    }
  }
  shmsem::Semaphore::remove(key);
  return 0;
}
