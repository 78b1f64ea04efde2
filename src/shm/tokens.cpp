// tokens.cpp: the token files (see tokens.hpp).

#include "shm/tokens.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "shm/key.hpp"
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
  char hex[20];
  std::snprintf(hex, sizeof hex, "%016llx.", static_cast<unsigned long long>(nonce));
  return std::string(kTokenFilePrefix) + hex;
}

std::string token_file_name(std::uint64_t nonce, std::uint32_t file) {
  return token_file_prefix(nonce) + std::to_string(file);
}

namespace {
// The nonce in the name of a token file, exactly as token_file_name()
// writes it; none for any other name.
std::optional<std::uint64_t> nonce_of(const std::string& name) {
  const std::string_view rest = std::string_view(name).substr(kTokenFilePrefix.size());
  std::uint64_t nonce = 0;
  std::uint32_t file = 0;
  const char* end = rest.data() + rest.size();
  if (rest.size() < 18 || rest[16] != '.' ||
      std::from_chars(rest.data(), rest.data() + 16, nonce, 16).ptr != rest.data() + 16 ||
      std::from_chars(rest.data() + 17, end, file).ptr != end ||
      token_file_name(nonce, file) != name)
    return std::nullopt;
  return nonce;
}
}  // namespace

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
  close_retired();
}

void token_files::close_retired() noexcept {
  for (retired_file* r = retired_.exchange(nullptr, std::memory_order_acq_rel); r;)
    delete std::exchange(r, r->next);
}

token_files::currency token_files::check_current(std::uint32_t index, sys::shm_file* f) const {
  const int err = f->at_name(token_file_name(nonce_, index));
  if (err == 0) return currency::current;
  if (err != ENOENT && err != ESTALE) return currency::unknown;
  sys::shm_file* expected = f;
  if (files_[index].compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) {
    auto* r = new retired_file{std::unique_ptr<sys::shm_file>(f), index, nullptr};
    r->next = retired_.load(std::memory_order_relaxed);
    while (!retired_.compare_exchange_weak(r->next, r, std::memory_order_acq_rel)) {
    }
  }
  return currency::replaced;
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
  // A file swept (and perhaps made again) between our open and our lock
  // would hide the token from everyone who opens the name: taken only
  // once the name is seen to lead to it. From then on no sweep can move
  // the name (it needs the whole file).
  for (int tries = 0; tries < 3; ++tries) {
    int err = 0;
    sys::shm_file* f = file(index, true, err);
    if (!f) fail(index, err);
    if (!f->try_lock(kTokenBase + h, true)) return false;
    const currency c = check_current(index, f);
    if (c == currency::current) return true;
    f->unlock(kTokenBase + h);
    if (c == currency::unknown) return false;
  }
  return false;
}

void token_files::give_back(std::uint32_t h) noexcept {
  const std::uint32_t index = h / kHoldersPerTokenFile;
  if (sys::shm_file* f = files_[index].load(std::memory_order_acquire)) f->unlock(kTokenBase + h);
  // The file our token was in may have been retired since (its name was
  // removed by hand): unlocking where we hold nothing is harmless.
  for (retired_file* r = retired_.load(std::memory_order_acquire); r; r = r->next)
    if (r->index == index) r->file->unlock(kTokenBase + h);
}

bool token_files::held_in(std::uint32_t index, std::uint64_t first, std::uint64_t count) const {
  // Free in the file we have open says nothing if a sweep replaced it:
  // its holders took their tokens in the file at the name.
  for (int tries = 0; tries < 2; ++tries) {
    int err = 0;
    sys::shm_file* f = file(index, false, err);
    if (!f) return err != ENOENT;
    if (f->locked_by_other(first, count)) return true;
    const currency c = check_current(index, f);
    if (c != currency::replaced) return c == currency::unknown;
  }
  return true;  // replaced twice while we looked: cannot tell
}

bool token_files::held_by_other(std::uint32_t h) const noexcept {
  try {
    return held_in(h / kHoldersPerTokenFile, kTokenBase + h, 1);
  } catch (...) {  // out of memory: cannot tell
    return true;
  }
}

bool token_files::any_held_by_other(std::uint32_t records) const noexcept {
  try {
    for (std::uint32_t i = 0; i < files_for(records); ++i)
      if (held_in(i, kTokenBase + std::uint64_t{i} * kHoldersPerTokenFile, kHoldersPerTokenFile))
        return true;
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
  close_retired();
  for (auto& r : refused_) r.store(0, std::memory_order_relaxed);
  try {
    for (std::uint32_t i = 0; i < files_for(records); ++i) {
      int err = 0;
      (void)file(i, false, err);
    }
  } catch (...) {  // out of memory: opened when needed
  }
}

bool token_files::sweep(const std::string& name) noexcept {
  try {
    int err = 0;
    const auto f = sys::shm_file::open_for_locks(name, err);
    if (!f) return false;
    // Locked whole while we look and remove: a token taken before fails
    // the lock, one taken after finds the name gone (take()). The lock
    // goes when `f` closes, after the removal.
    if (!f->try_lock(0, 0, true) || f->at_name(name) != 0) return false;
    return sys::shm_remove(name) == 0;
  } catch (...) {  // out of memory: the file stays, harmless
    return false;
  }
}

void token_files::sweep_all(std::uint64_t nonce, std::uint32_t records) noexcept {
  const std::uint32_t files = files_for(records);
  try {
    for (std::uint32_t i = 0; i < files; ++i) (void)sweep(token_file_name(nonce, i));
  } catch (...) {  // out of memory: the files stay, harmless
  }
}

std::vector<std::string> token_files::sweep_orphans(bool dry_run) {
  std::vector<std::uint64_t> there;
  for (const std::string& name : sys::shm_list(std::string(kNamePrefix))) {
    alignas(segment_header) unsigned char bytes[sizeof(segment_header)];
    std::size_t got = 0;
    std::uint64_t size = 0;
    if (sys::shm_read_prefix(name, bytes, sizeof bytes, got, size) != 0 || got < sizeof bytes)
      continue;
    // A later layout keeps the nonce where version 9 put it (Layout tests):
    // the token files of a newer library's segment are not orphans either.
    const segment_header* h = header(bytes);
    if (h->magic == kMagic && h->layout_version >= kFirstTokenFileLayout)
      there.push_back(h->token_nonce);
  }
  std::sort(there.begin(), there.end());
  std::vector<std::string> out;
  for (const std::string& name : sys::shm_list(std::string(kTokenFilePrefix))) {
    const auto nonce = nonce_of(name);
    if (!nonce || std::binary_search(there.begin(), there.end(), *nonce)) continue;
    if (dry_run) {
      int err = 0;
      const auto f = sys::shm_file::open_read_only(name, err);
      if (!f || f->locked_by_other(0, 0)) continue;
    } else if (!sweep(name)) {
      continue;
    }
    out.push_back(sys::shm_path(name));
  }
  return out;
}

}  // namespace shmsem::detail
