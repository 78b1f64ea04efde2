// tokens.cpp: the token files (see tokens.hpp).

#include "shm/tokens.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <utility>

#include "shm/segment.hpp"

namespace shmsem::detail {

using namespace layout;

namespace {
// The token files that records [0, records) may have made.
std::uint32_t files_for(std::uint32_t records) {
  return (std::min(records, kMaxHolders) + kHoldersPerTokenFile - 1) / kHoldersPerTokenFile;
}
}  // namespace

std::string token_file_prefix(std::uint64_t nonce) {
  char prefix[40];
  std::snprintf(prefix, sizeof prefix, "shmsem-tokens.%016llx.",
                static_cast<unsigned long long>(nonce));
  return prefix;
}

std::string token_file_name(std::uint64_t nonce, std::uint32_t file) {
  return token_file_prefix(nonce) + std::to_string(file);
}

token_files::token_files(std::string key, std::string segment_path, std::uint64_t nonce,
                         std::uint64_t secret, mode_t mode, uid_t uid, gid_t gid)
    : key_(std::move(key)),
      segment_path_(std::move(segment_path)),
      nonce_(nonce),
      secret_(secret),
      mode_(mode & 0666),
      uid_(uid),
      gid_(gid),
      read_only_(false) {}

token_files::token_files(std::string key, std::string segment_path, std::uint64_t nonce,
                         std::uint64_t secret)
    : key_(std::move(key)),
      segment_path_(std::move(segment_path)),
      nonce_(nonce),
      secret_(secret),
      mode_(0),
      uid_(static_cast<uid_t>(-1)),
      gid_(static_cast<gid_t>(-1)),
      read_only_(true) {}

token_files::~token_files() {
  for (auto& f : files_) delete f.load(std::memory_order_relaxed);
}

sys::shm_file* token_files::file(std::uint32_t index, bool make, int& err) const {
  err = 0;
  if (sys::shm_file* f = files_[index].load(std::memory_order_acquire)) return f;
  if ((err = refused_[index].load(std::memory_order_relaxed)) != 0) return nullptr;
  const std::string name = token_file_name(nonce_, index);
  std::unique_ptr<sys::shm_file> f;
  for (int attempt = 0; attempt < 2 && !f; ++attempt) {
    f = read_only_ ? sys::shm_file::open_read_only(name, err)
                   : sys::shm_file::open_for_locks(name, err);
    if (f || err != ENOENT || !make || read_only_) break;
    // Published whole, or not at all: nobody opens it before it holds the
    // secret. A process that published it first is as good as us.
    err = sys::shm_publish(name, &secret_, sizeof secret_, mode_, uid_, gid_);
    if (err != 0 && err != EEXIST) return nullptr;
  }
  if (!f) {
    if (err == EACCES || err == EPERM) refused_[index].store(err, std::memory_order_relaxed);
    return nullptr;
  }
  struct ::stat st;
  std::uint64_t held = 0;
  if ((err = f->stat(st)) != 0) return nullptr;
  if (!S_ISREG(st.st_mode) || f->read_at(0, &held, sizeof held) != 0 || held != secret_) {
    err = kUntrusted;
    refused_[index].store(err, std::memory_order_relaxed);
    return nullptr;
  }
  sys::shm_file* expected = nullptr;
  if (files_[index].compare_exchange_strong(expected, f.get(), std::memory_order_acq_rel))
    return f.release();
  return expected;  // another thread of ours opened it meanwhile
}

void token_files::fail(std::uint32_t index, int err) const {
  const std::string path = sys::shm_path(token_file_name(nonce_, index));
  const std::string which = "semaphore '" + key_ + "' (" + segment_path_ + "): ";
  if (err == kUntrusted)
    throw SegmentError(make_error_code(errc::untrusted_owner),
                       "shmsem: " + which + "its token file " + path +
                           " does not hold the segment's secret (refused: it was not made by a "
                           "user of the semaphore)");
  throw_segment_errno(path, which + "cannot open its token file", err);
}

bool token_files::take(std::uint32_t h) {
  const std::uint32_t index = h / kHoldersPerTokenFile;
  int err = 0;
  sys::shm_file* f = file(index, true, err);
  if (!f) fail(index, err);
  return f->try_lock(kTokenBase + h, true);
}

void token_files::give_back(std::uint32_t h) noexcept {
  if (sys::shm_file* f = files_[h / kHoldersPerTokenFile].load(std::memory_order_acquire))
    f->unlock(kTokenBase + h);
}

bool token_files::held_by_other(std::uint32_t h) const noexcept {
  int err = 0;
  try {
    const sys::shm_file* f = file(h / kHoldersPerTokenFile, false, err);
    if (!f) return err != ENOENT;
    return f->locked_by_other(kTokenBase + h);
  } catch (...) {  // out of memory: cannot tell
    return true;
  }
}

bool token_files::any_held_by_other(std::uint32_t records) const noexcept {
  const std::uint32_t files = files_for(records);
  try {
    for (std::uint32_t i = 0; i < files; ++i) {
      int err = 0;
      const sys::shm_file* f = file(i, false, err);
      if (!f) {
        if (err != ENOENT) return true;
        continue;
      }
      if (f->locked_by_other(kTokenBase + std::uint64_t{i} * kHoldersPerTokenFile,
                             kHoldersPerTokenFile))
        return true;
    }
  } catch (...) {
    return true;
  }
  return false;
}

int token_files::dup_description(std::uint32_t h) const {
  const sys::shm_file* f = files_[h / kHoldersPerTokenFile].load(std::memory_order_acquire);
  if (!f) {
    errno = EBADF;
    return -1;
  }
  return f->dup_description();
}

std::string token_files::path_of(std::uint32_t h) const {
  return sys::shm_path(token_file_name(nonce_, h / kHoldersPerTokenFile));
}

void token_files::reopen_after_fork(std::uint32_t records) noexcept {
  for (auto& f : files_) delete f.exchange(nullptr, std::memory_order_relaxed);
  for (auto& r : refused_) r.store(0, std::memory_order_relaxed);
  try {
    for (std::uint32_t i = 0; i < files_for(records); ++i) {
      int err = 0;
      (void)file(i, false, err);
    }
  } catch (...) {  // out of memory: opened when needed
  }
}

void token_files::remove_all(std::uint64_t nonce, std::uint32_t records) noexcept {
  const std::uint32_t files = files_for(records);
  try {
    for (std::uint32_t i = 0; i < files; ++i) (void)sys::shm_remove(token_file_name(nonce, i));
  } catch (...) {  // out of memory: the files are left behind, harmless
  }
}

}  // namespace shmsem::detail
