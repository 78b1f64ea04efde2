// shmsem/common.cpp: durations, modes and the exception-to-exit-code mapping.
#include "common.hpp"

#include <shmsem/errors.hpp>

#include <CLI/CLI.hpp>

#include "model.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <iostream>
#include <stdexcept>
#include <string_view>

namespace shmsem_cli {

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::size_t unit_at = text.size();
  while (unit_at > 0 && std::isalpha(static_cast<unsigned char>(text[unit_at - 1]))) --unit_at;
  const std::string number(text.substr(0, unit_at));
  const std::string_view unit = text.substr(unit_at);
  if (number.empty()) return std::nullopt;
  for (char c : number)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.')) return std::nullopt;
  double value = 0;
  try {
    std::size_t used = 0;
    value = std::stod(number, &used);
    if (used != number.size()) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  double ms_per_unit = 0;
  if (unit.empty() || unit == "s")
    ms_per_unit = 1000;
  else if (unit == "ms")
    ms_per_unit = 1;
  else if (unit == "m")
    ms_per_unit = 60'000;
  else if (unit == "h")
    ms_per_unit = 3'600'000;
  else
    return std::nullopt;
  const double ms = value * ms_per_unit;
  if (!std::isfinite(ms) || ms < 0 || ms > 1e15) return std::nullopt;
  return std::chrono::milliseconds(static_cast<long long>(std::llround(ms)));
}

std::optional<unsigned> parse_mode(std::string_view text) {
  unsigned mode = 0;
  const auto* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, mode, 8);
  if (text.empty() || ec != std::errc() || p != end || mode > 0777) return std::nullopt;
  return mode;
}

void error_message(const std::string& message) {
  // Library messages already start with "shmsem: "; say it once.
  constexpr std::string_view kPrefix = "shmsem: ";
  std::string_view text = message;
  if (text.substr(0, kPrefix.size()) == kPrefix) text.remove_prefix(kPrefix.size());
  std::cerr << kPrefix << text << "\n";
}

bool is_server_url(std::string_view text) {
  return shmsem::Semaphore::names_server(text);
}

int report_error(const std::exception& e) {
  error_message(e.what());
  return exit_code_for(e);
}

void add_trust_option(CLI::App* cmd, std::vector<std::string>& owners) {
  cmd->add_option("--trust-owner", owners,
                  "Trust segments of this user on purpose (user name or uid; repeatable): "
                  "by default only your own and root's are used")
      ->check(CLI::Validator(semtop::check_user, "USER"));
}

int exit_code_for(const std::exception& e) {
  if (const auto* err = dynamic_cast<const shmsem::Error*>(&e)) {
    if (err->code() == shmsem::errc::not_found) return kNotFound;
    if (dynamic_cast<const shmsem::SegmentError*>(&e)) return kSegment;
    return kFailure;
  }
  if (dynamic_cast<const std::invalid_argument*>(&e)) return kUsage;
  return kFailure;
}

}  // namespace shmsem_cli
