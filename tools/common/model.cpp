// common/model.cpp: sampling through the public API, rates, sorting, filtering.
#include "model.hpp"

#include <shmsem/semaphore.hpp>

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <system_error>

namespace semtop {

bool has_segment_file(const std::string& key) {
  return shmsem::Semaphore::capabilities_of(key).segment_file;
}

namespace {

// attach() and inspect() say not_found for a file that exists but was never
// fully initialized; the tools tell it apart, since something is there.
template <class Read>
auto existing(const std::string& key, Read read) -> decltype(read()) {
  try {
    return read();
  } catch (const shmsem::SegmentError& e) {
    // A Redis key has no file that could be left uninitialized.
    struct stat st;
    if (e.code() != shmsem::errc::not_found || !has_segment_file(key) ||
        ::lstat(shmsem::Semaphore::segment_path(key).c_str(), &st) != 0)
      throw;
    throw uninitialized_segment(make_error_code(shmsem::errc::bad_segment), e.what());
  }
}

}  // namespace

shmsem::Semaphore attach_existing(const std::string& key, const shmsem::Options& options) {
  return existing(key, [&] { return shmsem::Semaphore::attach(key, options); });
}

shmsem::Snapshot inspect_existing(const std::string& key, const shmsem::Options& trust) {
  return existing(key, [&] { return shmsem::Semaphore::inspect(key, trust); });
}

std::string describe_error(const std::exception& e) {
  // The library's messages start with "shmsem: "; the row already says so.
  std::string what = e.what();
  if (what.rfind("shmsem: ", 0) == 0) what.erase(0, 8);
  const auto* err = dynamic_cast<const shmsem::Error*>(&e);
  if (!err) return "error: " + what;
  const std::error_code& c = err->code();
  if (c == shmsem::errc::untrusted_owner) return "untrusted owner";
  if (c == shmsem::errc::not_found || c == std::errc::no_such_file_or_directory) return "vanished";
  if (c == shmsem::errc::permission_denied || c == std::errc::permission_denied ||
      c == std::errc::operation_not_permitted)
    return "no permission";
  if (dynamic_cast<const uninitialized_segment*>(&e)) return "uninitialized: " + what;
  if (c == shmsem::errc::bad_segment || c == shmsem::errc::truncated) return "corrupt: " + what;
  if (c == shmsem::errc::layout_mismatch) return "incompatible: " + what;
  if (c == shmsem::errc::busy) return "busy: being initialized";
  return "error: " + what;
}

namespace {

// Reads without attaching: a monitor must not keep segments attached (that
// would make `shmsem gc` think they are in use), must never write to one,
// and must read another user's segment without trusting it.
sample read_one(const std::string& key, const shmsem::Options& trust) {
  sample s;
  s.key = key;
  try {
    s.snap = inspect_existing(key, trust);
    s.snap->key = key;
    s.owner = s.snap->owner;
  } catch (const std::exception& e) {
    s.snap.reset();
    s.error = describe_error(e);
    try {
      s.owner = shmsem::Semaphore::owner(key, trust);
    } catch (const std::exception&) {
      // Gone: the error says so.
    }
  }
  return s;
}

}  // namespace

sample sample_one(const std::string& key, const shmsem::Options& trust) {
  sample s = read_one(key, trust);
  try {
    s.users = shmsem::Semaphore::users(key);
  } catch (const std::exception&) {
    // Not knowing who uses it is no reason to hide the rest.
  }
  return s;
}

std::vector<sample> sample_server(const std::string& url) {
  std::vector<sample> out;
  try {
    for (const auto& key : shmsem::Semaphore::list(url)) out.push_back(read_one(key, {}));
  } catch (const std::exception& e) {
    sample s;
    s.key = url;
    s.error = describe_error(e);
    out.push_back(std::move(s));
  }
  return out;
}

const std::string& local_host() {
  static const std::string name = [] {
    if (const char* h = std::getenv("SHMSEM_HOST"); h && *h) return std::string(h);
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0) return std::string();
    return std::string(buf);
  }();
  return name;
}

std::string holder_command(const shmsem::Holder& h) {
  if (!h.host.empty() && h.host != local_host()) return "-";
  return h.pid > 0 ? process_name(h.pid) : "?";
}

std::vector<sample> sample_all(const shmsem::Options& trust) {
  std::vector<sample> out;
  for (const auto& key : shmsem::Semaphore::list()) out.push_back(read_one(key, trust));
  std::vector<shmsem::SegmentUser> users;
  try {
    users = shmsem::Semaphore::all_users();
  } catch (const std::exception&) {
  }
  for (auto& s : out) {
    const std::string path = shmsem::Semaphore::segment_path(s.key);
    for (const auto& u : users)
      if (u.path == path) s.users.push_back(u);
  }
  return out;
}

std::string owner_text(const shmsem::SegmentOwner& o) {
  if (o.user.empty()) return "uid " + std::to_string(o.uid);
  return o.user + " (uid " + std::to_string(o.uid) + ")";
}

shmsem::Options admin_options(const std::string& key, const std::string& action, std::string& whose,
                              shmsem::Options trust) {
  whose.clear();
  // A key with no file has no owner here: the server's access control decides.
  if (!has_segment_file(key)) return trust;
  const shmsem::SegmentOwner o = shmsem::Semaphore::owner(key, trust);
  const uid_t me = ::geteuid();
  if (o.uid == me) return trust;
  if (me != 0)
    throw shmsem::SegmentError(make_error_code(shmsem::errc::permission_denied),
                               "shmsem: " + key + " is a segment of " + owner_text(o) + "; only " +
                                   (o.user.empty() ? "its owner" : o.user) + " or root may " +
                                   action + " it");
  whose = owner_text(o);
  // Root chose to act on this user's segment: trust it for this call.
  trust.trusted_owners.push_back(std::to_string(o.uid));
  return trust;
}

std::string check_user(const std::string& user) {
  if (!user.empty() &&
      std::all_of(user.begin(), user.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return {};
  std::vector<char> buf(16384);
  struct passwd pw;
  struct passwd* found = nullptr;
  if (!user.empty() && ::getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) == 0 &&
      found)
    return {};
  return "no user named '" + user + "' on this host (give a user name or a uid)";
}

int row::split_processes() const {
  int n = 0;
  for (const auto& u : users) n += u.removed_copy ? 1 : 0;
  return n;
}

const char* to_string(sort_key k) {
  switch (k) {
    case sort_key::key:
      return "key";
    case sort_key::util:
      return "util";
    case sort_key::waiters:
      return "waiters";
    case sort_key::acquire_rate:
      return "acq/s";
  }
  return "?";
}

sort_key next(sort_key k) {
  switch (k) {
    case sort_key::key:
      return sort_key::util;
    case sort_key::util:
      return sort_key::waiters;
    case sort_key::waiters:
      return sort_key::acquire_rate;
    case sort_key::acquire_rate:
      return sort_key::key;
  }
  return sort_key::key;
}

void model::update(std::vector<sample> samples, clock::time_point now) {
  std::map<std::string, previous> next_prev;
  rows_.clear();
  rows_.reserve(samples.size());
  for (auto& s : samples) {
    row r;
    r.key = s.key;
    r.error = std::move(s.error);
    r.snap = std::move(s.snap);
    r.owner = std::move(s.owner);
    r.users = std::move(s.users);
    if (r.snap) {
      const auto& st = r.snap->stats;
      auto it = prev_.find(r.key);
      if (it != prev_.end() && now > it->second.at) {
        const double dt = std::chrono::duration<double>(now - it->second.at).count();
        const auto& p = it->second.stats;
        // A counter that went backwards means the segment was removed and
        // recreated between samples: start over rather than show nonsense.
        if (st.acquired >= p.acquired && st.timeouts >= p.timeouts &&
            st.reclaimed_seats >= p.reclaimed_seats) {
          r.acquire_rate = static_cast<double>(st.acquired - p.acquired) / dt;
          r.timeout_rate = static_cast<double>(st.timeouts - p.timeouts) / dt;
          r.reclaimed_interval = st.reclaimed_seats - p.reclaimed_seats;
        }
      }
      std::optional<clock::time_point> oldest;
      for (const auto& h : r.snap->holders)
        if (!oldest || h.acquired_at < *oldest) oldest = h.acquired_at;
      if (oldest) r.oldest_hold = std::max(clock::duration::zero(), now - *oldest);
      next_prev[r.key] = previous{st, now};
    }
    rows_.push_back(std::move(r));
  }
  prev_ = std::move(next_prev);
  now_ = now;
}

std::vector<row> model::rows() const {
  std::vector<row> out;
  for (const auto& r : rows_)
    if (filter_.empty() || r.key.find(filter_) != std::string::npos) out.push_back(r);
  auto by_key = [](const row& a, const row& b) { return a.key < b.key; };
  // Descending for the numeric orders (busiest first, like top), ties by key.
  auto desc = [&](auto value) {
    return [=](const row& a, const row& b) {
      const double va = value(a), vb = value(b);
      if (va != vb) return va > vb;
      return a.key < b.key;
    };
  };
  switch (sort_) {
    case sort_key::key:
      std::sort(out.begin(), out.end(), by_key);
      break;
    case sort_key::util:
      std::sort(out.begin(), out.end(), desc([](const row& r) { return r.utilization(); }));
      break;
    case sort_key::waiters:
      std::sort(out.begin(), out.end(),
                desc([](const row& r) { return static_cast<double>(r.waiters()); }));
      break;
    case sort_key::acquire_rate:
      std::sort(out.begin(), out.end(),
                desc([](const row& r) { return r.acquire_rate.value_or(-1.0); }));
      break;
  }
  return out;
}

totals model::sum() const {
  totals t;
  for (const auto& r : rows()) {
    ++t.semaphores;
    if (!r.snap) {
      ++t.unreadable;
      continue;
    }
    t.used += r.snap->used;
    t.capacity += r.snap->capacity;
    t.waiters += r.snap->waiters;
    t.reclaimed_interval += r.reclaimed_interval;
  }
  return t;
}

std::optional<row> model::find(const std::string& key) const {
  for (const auto& r : rows())
    if (r.key == key) return r;
  return std::nullopt;
}

std::string format_age(std::optional<clock::duration> d) {
  if (!d) return "-";
  const long long s = std::chrono::duration_cast<std::chrono::seconds>(*d).count();
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%llds", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else if (s < 86400)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  else
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", s / 86400, (s % 86400) / 3600);
  return buf;
}

std::string format_rate(std::optional<double> r) {
  if (!r) return "-";
  char buf[32];
  if (*r < 10)
    std::snprintf(buf, sizeof buf, "%.1f", *r);
  else
    std::snprintf(buf, sizeof buf, "%.0f", *r);
  return buf;
}

std::string process_name(int pid) {
  if (pid <= 0) return "?";
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  if (!in || !std::getline(in, name)) return "?";
  return name;
}

}  // namespace semtop
