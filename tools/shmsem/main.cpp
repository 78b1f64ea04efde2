// shmsem/main.cpp: the `shmsem` command: subcommands, --help, and the one
// place where errors become exit codes.
#include "commands.hpp"
#include "common.hpp"

#include <shmsem/version.hpp>

#include <CLI/CLI.hpp>

#include <iostream>
#include <string_view>

int main(int argc, char** argv) {
  CLI::App app{
      "shmsem: take, inspect and administer the fleet-wide semaphores of this host.\n"
      "Exit codes: 0 ok, 1 no seat / timed out (run: -E), 2 usage, 3 no such semaphore,\n"
      "4 segment unusable (untrusted owner included), 5 other failure, 6 in use (rm);\n"
      "run passes COMMAND's status through.",
      "shmsem"};
  app.set_version_flag("-V,--version", std::string("shmsem ") + shmsem::kVersionString);
  app.require_subcommand(1);
  int result = shmsem_cli::kOk;
  shmsem_cli::add_run_command(app, result);
  // `shmsem run` starts once per job, so it builds only its own options;
  // every other command, and a bare --help, needs them all.
  if (argc < 2 || std::string_view(argv[1]) != "run") {
    shmsem_cli::add_inspect_commands(app, result);
    shmsem_cli::add_admin_commands(app, result);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? shmsem_cli::kOk : shmsem_cli::kUsage;
  } catch (const std::exception& e) {
    return shmsem_cli::report_error(e);
  }
  return result;
}
