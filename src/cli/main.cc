// The `ferry` command. Exit codes: 0 ok, 1 runtime failure, 2 bad usage or input.
#include <csignal>
#include <cstdio>
#include <functional>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  // A write past a file-size limit (ulimit -f) then fails with EFBIG, which the writers report as
  // an I/O error, instead of killing the process with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{
      "Ferry trains deep networks whose training memory does not fit on the accelerator: it analyses a\n"
      "training iteration, models what every op and transfer costs, plans which tensors to keep, swap\n"
      "or recompute, and executes that plan under a hard memory budget.\n"};
  app.name("ferry");
  app.require_subcommand(1);
  app.footer("Run `ferry COMMAND --help` for the options of a command. Docs: README.md and docs/.");
  std::function<int()> action;
  ferry::cli::register_analyze(app, action);
  ferry::cli::register_train(app, action);
  ferry::cli::register_profile(app, action);
  ferry::cli::register_plan(app, action);
  ferry::cli::register_list_models(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ferry: error: %s\nRun `ferry --help` for usage.\n", e.what());
    return 2;
  }
  return action ? action() : 2;
}
