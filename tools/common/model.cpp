// common/model.cpp: sampling through the public API, rates, sorting, filtering.
#include "model.hpp"

#include <shmsem/semaphore.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <system_error>

namespace semtop {

shmsem::Semaphore attach_existing(const std::string& key, const shmsem::Options& options) {
  try {
    return shmsem::Semaphore::attach(key, options);
  } catch (const shmsem::SegmentError& e) {
    // A Redis key has no file that could be left uninitialized.
    const bool redis = key.starts_with("redis://") || key.starts_with("redis+unix://");
    struct stat st;
    if (e.code() != shmsem::errc::not_found || redis ||
        ::lstat(shmsem::Semaphore::segment_path(key).c_str(), &st) != 0)
      throw;
    throw uninitialized_segment(make_error_code(shmsem::errc::bad_segment), e.what());
  }
}

std::string describe_error(const std::exception& e) {
  // The library's messages start with "shmsem: "; the row already says so.
  std::string what = e.what();
  if (what.rfind("shmsem: ", 0) == 0) what.erase(0, 8);
  const auto* err = dynamic_cast<const shmsem::Error*>(&e);
  if (!err) return "error: " + what;
  const std::error_code& c = err->code();
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

sample sample_one(const std::string& key) {
  sample s;
  s.key = key;
  try {
    // A fresh handle each time: semtop must not keep segments attached
    // (that would make `shmsem gc` think they are in use), and a removed
    // name must show as vanished rather than as the old, unlinked copy.
    shmsem::Options options;
    options.open_timeout = kInspectOpenTimeout;
    auto sem = attach_existing(key, options);
    s.snap = sem.snapshot();
    s.snap->key = key;
  } catch (const std::exception& e) {
    s.snap.reset();
    s.error = describe_error(e);
  }
  return s;
}

std::vector<sample> sample_server(const std::string& url) {
  std::vector<sample> out;
  try {
    for (const auto& key : shmsem::Semaphore::list(url)) out.push_back(sample_one(key));
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

std::vector<sample> sample_all() {
  std::vector<sample> out;
  for (const auto& key : shmsem::Semaphore::list()) out.push_back(sample_one(key));
  return out;
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
