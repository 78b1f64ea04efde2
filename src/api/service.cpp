// service.cpp: the key-based Service, its two-tier handle cache and the
// process-wide shutdown() contract.
//
// Cache tiers:
//  - per thread: the last kThreadSlots keys this thread used, each with a
//    weak_ptr to the shared entry. A hit compares strings, locks the
//    weak_ptr (an atomic increment) and checks that the entry was not
//    evicted: no lock, no allocation.
//  - shared: kMaxShards shards, each a mutex, a heterogeneous-lookup hash map
//    and an LRU list. Only this tier owns entries, so eviction here really
//    closes the handle once no call in progress uses it; the per-thread
//    weak_ptrs then expire.
//
// A cached handle is checked against the file its key names once it is
// older than recheck_interval: a segment removed (and perhaps created anew
// by someone else) stays valid for the handles that have it mapped, but
// new seats must come from the segment that now has the name.
#include <shmsem/logging.hpp>
#include <shmsem/service.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <functional>
#include <iterator>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/forking.hpp"
#include "base/handle.hpp"
#include "shm/segment.hpp"
#include "sys/clock.hpp"
#include "sys/file.hpp"

namespace shmsem {
namespace detail {

// One cached handle. Owned by the shared tier (and by calls in progress).
struct service_entry {
  service_entry(std::string_view k, Semaphore s) : key(k), sem(std::move(s)) {}
  std::string key;
  Semaphore sem;
  std::atomic<bool> live{true};  // false once evicted from the shared tier
  // When the key last named sem's file (coarse monotonic ns).
  std::atomic<std::int64_t> checked_ns{sys::coarse_now_ns()};
  // Set by per-thread hits, which do not touch the shared LRU list: eviction
  // gives such an entry a second chance (CLOCK) instead of closing a hot key.
  std::atomic<bool> referenced{false};
};

namespace {
// The shard mutexes of every Service of the process, for fork(): they are
// taken around it (forking.hpp).
std::mutex shards_mutex;
std::vector<std::mutex*> all_shards;
}  // namespace

}  // namespace detail

struct Service::impl {
  using entry = detail::service_entry;

  struct key_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };

  struct shard {
    struct slot {
      std::shared_ptr<entry> e;
      std::list<entry*>::iterator lru_pos;
    };
    mutable std::mutex mu;
    std::unordered_map<std::string, slot, key_hash, std::equal_to<>> map;
    std::list<entry*> lru;  // most recently used first
  };

  static constexpr std::size_t kMaxShards = 16;

  explicit impl(ServiceOptions o)
      : options(std::move(o)),
        recheck_ns(std::chrono::nanoseconds(
                       std::max(options.recheck_interval, std::chrono::milliseconds::zero()))
                       .count()) {
    const std::size_t cap = options.cache_capacity < 1 ? 1 : options.cache_capacity;
    shard_count = 1;
    while (shard_count * 2 <= kMaxShards && shard_count * 2 <= cap) shard_count *= 2;
    per_shard = (cap + shard_count - 1) / shard_count;
    detail::handle_fork_once();
    std::lock_guard g(detail::shards_mutex);
    for (std::size_t i = 0; i < shard_count; ++i) detail::all_shards.push_back(&shards[i].mu);
  }

  ~impl() {
    std::lock_guard g(detail::shards_mutex);
    std::erase_if(detail::all_shards, [this](const std::mutex* m) {
      for (std::size_t i = 0; i < shard_count; ++i)
        if (m == &shards[i].mu) return true;
      return false;
    });
  }
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  shard& shard_of(std::string_view key) { return shards[key_hash{}(key) & (shard_count - 1)]; }

  static std::shared_ptr<Semaphore> alias(std::shared_ptr<entry> e) {
    Semaphore* s = &e->sem;
    return std::shared_ptr<Semaphore>(std::move(e), s);
  }

  // The shared tier: returns the entry, opening it with `open` on a miss.
  // `open` runs outside every lock, since it may wait for another process.
  // A template, not std::function: the hit path must not allocate.
  template <class Open>
  std::shared_ptr<entry> lookup(std::string_view key, Open&& open) {
    shard& sh = shard_of(key);
    {
      std::lock_guard lk(sh.mu);
      if (auto it = sh.map.find(key); it != sh.map.end()) {
        sh.lru.splice(sh.lru.begin(), sh.lru, it->second.lru_pos);
        return it->second.e;
      }
    }
    auto fresh = std::make_shared<entry>(key, open());
    std::vector<std::shared_ptr<entry>> evicted;  // closed after the unlock
    std::shared_ptr<entry> result;
    {
      std::lock_guard lk(sh.mu);
      if (auto it = sh.map.find(key); it != sh.map.end()) {
        sh.lru.splice(sh.lru.begin(), sh.lru, it->second.lru_pos);
        result = it->second.e;  // another thread won the race; ours is dropped
        evicted.push_back(std::move(fresh));
      } else {
        sh.lru.push_front(fresh.get());
        sh.map.emplace(std::string(key), shard::slot{fresh, sh.lru.begin()});
        result = std::move(fresh);
        std::size_t chances = sh.lru.size();
        while (sh.map.size() > per_shard) {
          entry* victim = sh.lru.back();
          if (chances > 0 && victim != result.get() &&
              victim->referenced.exchange(false, std::memory_order_relaxed)) {
            --chances;
            sh.lru.splice(sh.lru.begin(), sh.lru, std::prev(sh.lru.end()));
            continue;
          }
          sh.lru.pop_back();
          auto pos = sh.map.find(std::string_view(victim->key));
          victim->live.store(false, std::memory_order_release);
          evicted.push_back(std::move(pos->second.e));
          sh.map.erase(pos);
        }
      }
    }
    return result;
  }

  // True if `e` may serve a lookup: checked within recheck_ns, or its key
  // still names the file it has mapped. Otherwise `e` leaves the cache.
  bool current(const std::shared_ptr<entry>& e) {
    const std::int64_t now = sys::coarse_now_ns();
    if (now - e->checked_ns.load(std::memory_order_relaxed) < recheck_ns) return true;
    const detail::attachment* att = detail::semaphore_access::of(e->sem).att;
    if (!att) {
      // A Redis handle maps no file: each call asks the server, and a
      // semaphore removed there is created again from open()'s permits.
      e->checked_ns.store(now, std::memory_order_relaxed);
      return true;
    }
    const detail::attachment& a = *att;
    dev_t dev = 0;
    ino_t ino = 0;
    const int err = sys::name_identity(a.path, dev, ino);
    // Any error but "no such file" leaves the question open: keep the handle.
    const bool same =
        err == 0 ? sys::file_id{dev, ino} == a.file_identity : err != ENOENT && err != ENOTDIR;
    if (same) {
      e->checked_ns.store(now, std::memory_order_relaxed);
      return true;
    }
    drop(e);
    return false;
  }

  // Takes `e` out of the shared tier (the per-thread tiers see it is no
  // longer live). Calls in progress keep it alive.
  void drop(const std::shared_ptr<entry>& e) {
    e->live.store(false, std::memory_order_release);
    shard& sh = shard_of(e->key);
    std::shared_ptr<entry> dropped;  // closed after the unlock
    std::lock_guard lk(sh.mu);
    auto it = sh.map.find(std::string_view(e->key));
    if (it == sh.map.end() || it->second.e != e) return;
    sh.lru.erase(it->second.lru_pos);
    dropped = std::move(it->second.e);
    sh.map.erase(it);
  }

  void clear() {
    for (std::size_t i = 0; i < shard_count; ++i) {
      std::unordered_map<std::string, shard::slot, key_hash, std::equal_to<>> dropped;
      {
        std::lock_guard lk(shards[i].mu);
        for (auto& [k, s] : shards[i].map) s.e->live.store(false, std::memory_order_release);
        dropped.swap(shards[i].map);
        shards[i].lru.clear();
      }
    }
  }

  std::size_t cached() const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < shard_count; ++i) {
      std::lock_guard lk(shards[i].mu);
      n += shards[i].map.size();
    }
    return n;
  }

  const std::uint64_t id = next_id.fetch_add(1, std::memory_order_relaxed);
  const ServiceOptions options;
  const std::int64_t recheck_ns;
  std::size_t shard_count;
  std::size_t per_shard;
  std::array<shard, kMaxShards> shards;

  static inline std::atomic<std::uint64_t> next_id{1};
};

namespace detail {

void lock_services_for_fork() noexcept {
  shards_mutex.lock();
  // The shards' own mutexes, through pointers: held until after fork(), not
  // local (cppcheck's localMutex reads the loop variable as the mutex).
  // cppcheck-suppress localMutex
  for (std::mutex* m : all_shards) m->lock();
}

void unlock_services_after_fork() noexcept {
  for (std::mutex* m : all_shards) m->unlock();
  shards_mutex.unlock();
}

}  // namespace detail

namespace {

// The per-thread tier. Service ids are never reused, so a slot of a
// destroyed Service can only miss (and its weak_ptr has expired anyway).
constexpr std::size_t kThreadSlots = 8;

// The key is kept inline so that refilling a slot never allocates either.
constexpr std::size_t kMaxKey = 255;

struct thread_slot {
  std::uint64_t service = 0;
  std::array<char, kMaxKey> key;
  std::size_t key_len = 0;
  std::weak_ptr<detail::service_entry> e;
  std::uint64_t stamp = 0;
  std::string_view key_view() const { return {key.data(), key_len}; }
};

struct thread_cache {
  std::array<thread_slot, kThreadSlots> slots;
  std::uint64_t clock = 0;
};

// On the heap, allocated at a thread's first insert: the library's
// thread-local data shares one TLS block, which must stay small enough to
// fit the static TLS that dlopen can still get (see entry_mru in
// fastpath.hpp); this cache alone is 2.4 KB.
thread_local std::unique_ptr<thread_cache> t_cache;

std::shared_ptr<detail::service_entry> thread_lookup(std::uint64_t service, std::string_view key) {
  if (!t_cache) return nullptr;
  thread_cache& c = *t_cache;
  for (auto& s : c.slots) {
    if (s.service != service || s.key_view() != key) continue;
    auto e = s.e.lock();
    if (e && e->live.load(std::memory_order_acquire)) {
      if (!e->referenced.load(std::memory_order_relaxed))
        e->referenced.store(true, std::memory_order_relaxed);
      s.stamp = ++c.clock;
      return e;
    }
    s.service = 0;
    s.e.reset();
    return nullptr;
  }
  return nullptr;
}

void thread_insert(std::uint64_t service, std::string_view key,
                   const std::shared_ptr<detail::service_entry>& e) {
  if (key.size() > kMaxKey) return;  // invalid anyway: open() rejected it
  if (!t_cache) t_cache = std::make_unique<thread_cache>();
  thread_cache& c = *t_cache;
  thread_slot* victim = &c.slots[0];
  for (auto& s : c.slots) {
    if (s.service == 0) {
      victim = &s;
      break;
    }
    if (s.stamp < victim->stamp) victim = &s;
  }
  victim->service = service;
  key.copy(victim->key.data(), key.size());
  victim->key_len = key.size();
  victim->e = e;
  victim->stamp = ++c.clock;
}

std::atomic<bool> g_shutdown{false};

bool is_not_found(const SegmentError& e) {
  return e.code() == make_error_code(errc::not_found);
}

}  // namespace

Service::Service(ServiceOptions options) : impl_(std::make_unique<impl>(std::move(options))) {}

Service::~Service() {
  impl_->clear();
}

Service& Service::instance() {
  // Leaked on purpose: usable from static destructors and atexit handlers.
  static Service* const s = new Service();
  return *s;
}

std::shared_ptr<Semaphore> Service::semaphore(std::string_view key, int permits) {
  if (auto e = thread_lookup(impl_->id, key); e && impl_->current(e))
    return impl::alias(std::move(e));
  auto open = [&] { return Semaphore::open(key, permits, impl_->options.handle_options); };
  auto e = impl_->lookup(key, open);
  if (!impl_->current(e)) e = impl_->lookup(key, open);  // the shared tier had the old one
  thread_insert(impl_->id, key, e);
  return impl::alias(std::move(e));
}

std::shared_ptr<Semaphore> Service::existing(std::string_view key) {
  if (auto e = thread_lookup(impl_->id, key); e && impl_->current(e))
    return impl::alias(std::move(e));
  try {
    auto attach = [&] { return Semaphore::attach(key, impl_->options.handle_options); };
    auto e = impl_->lookup(key, attach);
    if (!impl_->current(e)) e = impl_->lookup(key, attach);
    thread_insert(impl_->id, key, e);
    return impl::alias(std::move(e));
  } catch (const SegmentError& err) {
    if (is_not_found(err)) return nullptr;
    throw;
  }
}

std::shared_ptr<Semaphore> Service::semaphore_for_acquire(std::string_view key, int permits) {
  try {
    return semaphore(key, permits);
  } catch (const SegmentError& e) {
    throw AcquisitionError(
        shutdown_requested() ? Reason::shutdown : Reason::error,
        std::string("cannot open semaphore '") + std::string(key) + "': " + e.what(),
        std::current_exception());
  }
}

Permit Service::acquire(std::string_view key, int permits, const AcquireOptions& opts) {
  return semaphore_for_acquire(key, permits)->acquire(1, opts);
}

std::optional<Permit> Service::try_acquire(std::string_view key, int permits,
                                           const AcquireOptions& opts) {
  return semaphore_for_acquire(key, permits)->try_acquire(1, opts);
}

int Service::used_permits(std::string_view key) {
  auto sem = existing(key);
  return sem ? sem->used() : 0;
}

int Service::available_permits(std::string_view key, int permits) {
  return semaphore(key, permits)->available();
}

int Service::force_release_all(std::string_view key) {
  auto sem = existing(key);
  return sem ? sem->force_release_all() : 0;
}

void Service::clear() {
  impl_->clear();
}

std::size_t Service::cached() const {
  return impl_->cached();
}

void shutdown() {
  g_shutdown.store(true, std::memory_order_release);
  shutdown_all();
}

bool shutdown_requested() noexcept {
  return g_shutdown.load(std::memory_order_acquire);
}

}  // namespace shmsem
