// Each subcommand registers its options on the app and, when selected, sets `action`.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace ferry::cli {

void register_analyze(CLI::App& app, std::function<int()>& action);
void register_train(CLI::App& app, std::function<int()>& action);
void register_profile(CLI::App& app, std::function<int()>& action);
void register_plan(CLI::App& app, std::function<int()>& action);
void register_list_models(CLI::App& app, std::function<int()>& action);

}  // namespace ferry::cli
