// service_test_util.hpp: helpers shared by the service-layer tests: a log
// capture for the "shmsem" logger, a key whose segment cannot be opened, and
// RAII removal of keys made from templates.
#pragma once

#include <shmsem/logging.hpp>
#include <shmsem/semaphore.hpp>

#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_support.hpp"

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace shmsem::test {

/// Routes the shmsem logger into a string for the lifetime of the object.
class log_capture {
 public:
  log_capture() {
    sink_ = std::make_shared<string_sink>();
    sink_->set_pattern("%l %v");
    auto l = std::make_shared<spdlog::logger>("shmsem", sink_);
    l->set_level(spdlog::level::warn);
    set_logger(l);
  }
  ~log_capture() { set_logger(nullptr); }
  log_capture(const log_capture&) = delete;
  log_capture& operator=(const log_capture&) = delete;

  std::string text() { return sink_->text(); }
  /// Occurrences of `needle` in the captured text.
  int count(const std::string& needle) {
    const std::string t = text();
    int n = 0;
    for (auto pos = t.find(needle); pos != std::string::npos; pos = t.find(needle, pos + 1)) ++n;
    return n;
  }

 private:
  class string_sink : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::string text() {
      std::lock_guard lk(mutex_);
      return text_;
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
      spdlog::memory_buf_t buf;
      formatter_->format(msg, buf);
      text_.append(buf.data(), buf.size());
    }
    void flush_() override {}

   private:
    std::string text_;
  };
  std::shared_ptr<string_sink> sink_;
};

/// Puts a directory where `key`'s segment belongs, so that opening the key
/// fails with SegmentError whoever the caller is (root included). On Redis,
/// a string where the semaphore's hash belongs.
class unopenable_key {
 public:
  explicit unopenable_key(std::string key) : key_(std::move(key)) {
    if (on_redis()) {
      occupy_in_redis(key_, true);  // a key of another type
      return;
    }
    if (on_fake()) {
      block_in_fake(key_, true);
      return;
    }
    path_ = Semaphore::segment_path(key_);
    if (::mkdir(path_.c_str(), 0700) != 0) throw std::runtime_error("mkdir " + path_);
  }
  ~unopenable_key() {
    if (on_redis())
      occupy_in_redis(key_, false);
    else if (on_fake())
      block_in_fake(key_, false);
    else
      ::rmdir(path_.c_str());
  }
  unopenable_key(const unopenable_key&) = delete;
  unopenable_key& operator=(const unopenable_key&) = delete;
  const std::string& str() const { return key_; }

 private:
  std::string key_;
  std::string path_;
};

/// Removes the listed keys' segments on destruction (keys a test makes
/// from templates, which unique_key does not know about).
class key_remover {
 public:
  key_remover() = default;
  explicit key_remover(std::vector<std::string> keys) : keys_(std::move(keys)) {}
  ~key_remover() {
    for (const auto& k : keys_) {
      try {
        Semaphore::remove(k);
      } catch (...) {
      }
    }
  }
  key_remover(const key_remover&) = delete;
  key_remover& operator=(const key_remover&) = delete;
  void add(std::string k) { keys_.push_back(std::move(k)); }

 private:
  std::vector<std::string> keys_;
};

}  // namespace shmsem::test
