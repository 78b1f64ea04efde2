// metrics.cpp: the Prometheus text exposition of every semaphore on the host
// (format 0.0.4) and its textfile writer (the file system calls are in
// sys/file.cpp). Everything is read through the public introspection API
// (list, inspect), as a tool would.
#include <shmsem/metrics.hpp>
#include <shmsem/semaphore.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string_view>
#include <system_error>
#include <unordered_set>

#include <fmt/format.h>

#include "sys/file.hpp"

namespace shmsem {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not one
// (overlong forms, surrogates and code points above U+10FFFF are invalid).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  std::size_t len;
  std::uint32_t cp;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    cp = b0 & 0x1Fu;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    cp = b0 & 0x0Fu;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    cp = b0 & 0x07u;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  static constexpr std::uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// A key as a label value: valid UTF-8, as the format requires, with
// backslash, double quote and newline escaped. A byte that is not UTF-8
// becomes U+FFFD and its two hex digits, and a U+FFFD of the key becomes
// U+FFFD and "U", so that every key keeps a label value of its own; keys
// that are valid UTF-8 without a U+FFFD are their own label value.
std::string label_value(std::string_view key) {
  std::string out;
  out.reserve(key.size() + 8);
  for (std::size_t i = 0; i < key.size();) {
    const std::size_t len = utf8_sequence_length(key, i);
    if (len == 0) {
      fmt::format_to(std::back_inserter(out), "{}{:02X}", kReplacement,
                     static_cast<unsigned char>(key[i]));
      ++i;
      continue;
    }
    if (key.substr(i, len) == kReplacement) {
      out += kReplacement;
      out += 'U';
      i += len;
      continue;
    }
    if (len == 1) {
      switch (key[i]) {
        case '\\':
          out += "\\\\";
          break;
        case '"':
          out += "\\\"";
          break;
        case '\n':
          out += "\\n";
          break;
        default:
          out += key[i];
      }
    } else {
      out.append(key.substr(i, len));
    }
    i += len;
  }
  return out;
}

// A sample value as Prometheus (Go's ParseFloat) reads it.
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

void family_header(std::string& out, std::string_view name, std::string_view type,
                   std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

struct Series {
  std::string label;  // the escaped key
  const Snapshot* snap;
};

void histogram(std::string& out, std::string_view name, std::string_view help,
               const std::vector<Series>& series, Histogram Stats::*member) {
  family_header(out, name, "histogram", help);
  auto it = std::back_inserter(out);
  for (const auto& s : series) {
    const Histogram& h = s.snap->stats.*member;
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < Histogram::kBounds.size(); ++i) {
      cumulative += h.counts[i];
      fmt::format_to(it, "{}_bucket{{key=\"{}\",le=\"{}\"}} {}\n", name, s.label,
                     number(Histogram::kBounds[i]), cumulative);
    }
    cumulative += h.counts[Histogram::kBounds.size()];
    fmt::format_to(it, "{}_bucket{{key=\"{}\",le=\"+Inf\"}} {}\n", name, s.label, cumulative);
    fmt::format_to(it, "{}_sum{{key=\"{}\"}} {}\n", name, s.label, number(h.sum_seconds));
    fmt::format_to(it, "{}_count{{key=\"{}\"}} {}\n", name, s.label, cumulative);
  }
}

template <class Value>
void simple(std::string& out, std::string_view name, std::string_view type, std::string_view help,
            const std::vector<Series>& series, Value value) {
  family_header(out, name, type, help);
  for (const auto& s : series)
    fmt::format_to(std::back_inserter(out), "{}{{key=\"{}\"}} {}\n", name, s.label, value(*s.snap));
}

}  // namespace

std::string metrics_text(const std::vector<Snapshot>& snapshots, int skipped_segments) {
  std::vector<Series> series;
  series.reserve(snapshots.size());
  std::unordered_set<std::string> seen;
  for (const auto& snap : snapshots) {
    std::string label = label_value(snap.key);
    if (!seen.insert(label).second) {
      ++skipped_segments;  // the same key given twice
      continue;
    }
    series.push_back({std::move(label), &snap});
  }

  std::string out;
  out.reserve(256 + series.size() * 4096);
  auto it = std::back_inserter(out);

  family_header(out, "shmsem_acquisitions_total", "counter",
                "Acquisition attempts by outcome, fleet-wide since the segment was created.");
  for (const auto& s : series) {
    const Stats& st = s.snap->stats;
    const std::pair<const char*, std::uint64_t> rows[] = {
        {"acquired", st.acquired},  {"timeout", st.timeouts}, {"cancelled", st.cancelled},
        {"shutdown", st.shutdowns}, {"error", st.rejected},   {"unavailable", st.try_failures}};
    for (const auto& [status, value] : rows)
      fmt::format_to(it, "shmsem_acquisitions_total{{key=\"{}\",status=\"{}\"}} {}\n", s.label,
                     status, value);
  }

  histogram(out, "shmsem_wait_duration_seconds", "Time from acquire call to grant, granted leases.",
            series, &Stats::wait);
  histogram(out, "shmsem_hold_duration_seconds", "Time from grant to release, released leases.",
            series, &Stats::hold);
  simple(out, "shmsem_permits_active", "gauge", "Seats in use now.", series,
         [](const Snapshot& s) { return s.used; });
  simple(out, "shmsem_permits_capacity", "gauge", "Capacity of the semaphore.", series,
         [](const Snapshot& s) { return s.capacity; });
  simple(out, "shmsem_waiters", "gauge", "Callers blocked in acquire now, fleet-wide.", series,
         [](const Snapshot& s) { return s.waiters; });
  simple(out, "shmsem_created_timestamp_seconds", "gauge",
         "When the segment was created, in seconds since the epoch. A new value means the key "
         "was removed and created again: its counters restarted at 0.",
         series, [](const Snapshot& s) {
           return number(std::chrono::duration<double>(s.created.time_since_epoch()).count());
         });

  family_header(out, "shmsem_reclaimed_total", "counter",
                "Leases taken back from their holder, by cause.");
  for (const auto& s : series) {
    const Stats& st = s.snap->stats;
    const std::pair<const char*, std::uint64_t> rows[] = {
        {"dead_holder", st.reaped}, {"expired", st.expired}, {"force_released", st.force_released}};
    for (const auto& [cause, value] : rows)
      fmt::format_to(it, "shmsem_reclaimed_total{{key=\"{}\",cause=\"{}\"}} {}\n", s.label, cause,
                     value);
  }
  simple(out, "shmsem_recoveries_total", "counter",
         "Repairs after a process died holding the segment lock or inside a lock-free "
         "acquire or release.",
         series, [](const Snapshot& s) { return s.stats.recoveries; });

  family_header(out, "shmsem_scrape_skipped_segments", "gauge",
                "Segments listed but not readable in this scrape.");
  fmt::format_to(it, "shmsem_scrape_skipped_segments {}\n", skipped_segments);
  return out;
}

std::string metrics_text() {
  std::vector<Snapshot> snapshots;
  int skipped = 0;
  std::vector<std::string> keys;
  try {
    keys = Semaphore::list();
  } catch (const std::exception&) {
    ++skipped;  // /dev/shm itself unreadable: report that, not an exception
  }
  for (const auto& key : keys) {
    try {
      // Read-only: a scrape never writes to a segment, whoever owns it.
      snapshots.push_back(Semaphore::inspect(key));
    } catch (const SegmentError& e) {
      // Removed between list() and inspect(): gone, not unreadable.
      if (e.code() != make_error_code(errc::not_found)) ++skipped;
    } catch (const std::exception&) {
      ++skipped;
    }
  }
  return metrics_text(snapshots, skipped);
}

void write_metrics_textfile(const std::string& path) {
  const std::string text = metrics_text();
  sys::replace_step step{};
  const int err = sys::replace_file(path, text, 0644, step);
  if (err == 0) return;
  const char* what = "cannot write";
  switch (step) {
    case sys::replace_step::create:
      what = "cannot create a temporary file beside";
      break;
    case sys::replace_step::write:
      what = "cannot write";
      break;
    case sys::replace_step::sync:
      what = "cannot flush to disk the temporary file of";
      break;
    case sys::replace_step::chmod:
      what = "cannot chmod the temporary file of";
      break;
    case sys::replace_step::close:
      what = "cannot close the temporary file of";
      break;
    case sys::replace_step::rename:
      what = "cannot rename a temporary file to";
      break;
    case sys::replace_step::sync_directory:
      what = "cannot flush to disk the directory of";
      break;
  }
  throw std::system_error(err, std::system_category(),
                          fmt::format("write_metrics_textfile: {} {}", what, path));
}

}  // namespace shmsem
