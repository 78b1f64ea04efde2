// redis/scripts.cpp: the Lua library of the Redis backend (see scripts.hpp),
// put together from the files in redis/lua/, which the build compiles in.

#include "redis/scripts.hpp"

#include "redis/hash.hpp"
#include "redis/lua_scripts.inc"

#include <string>
#include <vector>

namespace shmsem::detail::redis::scripts {

namespace {

// The library: the prelude once, then each script as a function that
// binds its call's keys and arguments first. Its name and its functions'
// names carry a hash of the code, so servers shared by several versions of
// shmsem keep one library per version, and a call never runs another
// version's code.
const library& the_library() {
  static const library* lib = [] {
    struct entry {
      const char* name;
      const char* body;
    };
    static constexpr entry kScripts[] = {
        {"open", lua::open},      {"acquire", lua::acquire}, {"release", lua::release},
        {"extend", lua::extend},  {"held", lua::held},       {"renew", lua::renew},
        {"cancel", lua::cancel},  {"resize", lua::resize},   {"force_release", lua::force_release},
        {"reap", lua::reap},      {"info", lua::info},       {"idle", lua::idle},
        {"destroy", lua::destroy}};
    std::string code = lua::prelude;
    for (const entry& e : kScripts)
      code += std::string("\nredis.register_function(NAME .. '_") + e.name +
              "', function(keys, args)\nbind(keys, args)\n" + e.body + "end)\n";
    const std::string name = "shmsem_" + sha1_hex(code).substr(0, 16);
    // Never destroyed, so a thread still running at exit can use it.
    return new library(name, "#!lua name=" + name + "\nlocal NAME = '" + name + "'\n" + code);
  }();
  return *lib;
}

const script& make(const char* function) {
  // One object per function for the life of the process.
  return *new script(the_library(), the_library().name() + "_" + function);
}

}  // namespace

std::vector<std::string> keys(const std::string& meta) {
  std::vector<std::string> out{meta};
  for (const char* suffix : {":leases", ":expiry", ":sessions", ":queue", ":waiters", ":idle",
                             ":own", ":marks", ":marks-due"})
    out.push_back(meta + suffix);
  return out;
}

const script& open() {
  static const script& s = make("open");
  return s;
}
const script& acquire() {
  static const script& s = make("acquire");
  return s;
}
const script& release() {
  static const script& s = make("release");
  return s;
}
const script& extend() {
  static const script& s = make("extend");
  return s;
}
const script& held() {
  static const script& s = make("held");
  return s;
}
const script& renew() {
  static const script& s = make("renew");
  return s;
}
const script& cancel() {
  static const script& s = make("cancel");
  return s;
}
const script& resize() {
  static const script& s = make("resize");
  return s;
}
const script& force_release() {
  static const script& s = make("force_release");
  return s;
}
const script& reap() {
  static const script& s = make("reap");
  return s;
}
const script& info() {
  static const script& s = make("info");
  return s;
}
const script& idle() {
  static const script& s = make("idle");
  return s;
}
const script& destroy() {
  static const script& s = make("destroy");
  return s;
}

}  // namespace shmsem::detail::redis::scripts
