// shmsem/commands.hpp: each group of commands registers its subcommands on
// the CLI11 app. A subcommand's callback stores its exit code in `result`;
// exceptions propagate to main, which maps them (common.hpp).
#pragma once

namespace CLI {
class App;
}

namespace shmsem_cli {

/// run: hold a seat while a command runs (run_command.cpp).
void add_run_command(CLI::App& app, int& result);
/// ls, info, metrics (inspect_commands.cpp).
void add_inspect_commands(CLI::App& app, int& result);
/// create, resize, drain, reap, wait-idle, rm, gc (admin_commands.cpp).
void add_admin_commands(CLI::App& app, int& result);

}  // namespace shmsem_cli
