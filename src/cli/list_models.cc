// `ferry list-models`: the model zoo.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "graph/zoo/zoo.h"

namespace ferry::cli {

void register_list_models(CLI::App& app, std::function<int()>& action) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("list-models", "List the models of the built-in zoo");
  cmd->add_flag("--json", *json, "Print the list as JSON");
  cmd->callback([json, &action] {
    action = [json] {
      if (*json) {
        nlohmann::json j = nlohmann::json::array();
        for (const ModelEntry& e : model_zoo())
          j.push_back({{"name", e.name},
                       {"family", e.family == ModelFamily::kCnn ? "cnn" : "transformer"},
                       {"description", e.description},
                       {"default_size", e.default_size},
                       {"reference_params", e.reference_params}});
        std::printf("%s\n", j.dump(2).c_str());
        return 0;
      }
      std::printf("%-20s %-12s %-13s %s\n", "model", "family", "default size", "description");
      for (const ModelEntry& e : model_zoo())
        std::printf("%-20s %-12s %-13s %s\n", e.name.c_str(), e.family == ModelFamily::kCnn ? "cnn" : "transformer",
                    (e.family == ModelFamily::kCnn ? fmt::format("image {}", e.default_size)
                                                   : fmt::format("seq {}", e.default_size))
                        .c_str(),
                    e.description.c_str());
      return 0;
    };
  });
}

}  // namespace ferry::cli
