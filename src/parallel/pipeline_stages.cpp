#include "wallfacer/parallel/pipeline_stages.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <numeric>

#include "wallfacer/core/error.h"

namespace wf::parallel {

std::vector<std::string> pipeline_layer_problems(std::int64_t n_layer, int pp, int virtual_stages,
                                                 const std::vector<std::int64_t>& layers) {
  std::vector<std::string> problems;
  const std::int64_t stages = static_cast<std::int64_t>(pp) * virtual_stages;
  if (pp < 1 || virtual_stages < 1) return problems;  // the grid's and the schedule's rules say why
  if (layers.empty()) {
    if (n_layer % stages != 0) {
      problems.push_back(fmt::format(
          "model.n_layer: n_layer = {} does not split evenly over parallel.pp x parallel.pp_virtual = {} x {} = {} "
          "pipeline stages; choose n_layer a multiple of {}, or give each stage's blocks in parallel.pp_layers",
          n_layer, pp, virtual_stages, stages, stages));
    }
    return problems;
  }
  const std::int64_t total = std::accumulate(layers.begin(), layers.end(), std::int64_t{0});
  if (static_cast<std::int64_t>(layers.size()) != stages || total != n_layer) {
    problems.push_back(fmt::format(
        "parallel.pp_layers: [{}] must give the blocks of each of the pp x pp_virtual = {} x {} = {} pipeline "
        "stages, in stage order, summing to model.n_layer = {} (it has {} entries summing to {})",
        fmt::join(layers, ", "), pp, virtual_stages, stages, n_layer, layers.size(), total));
  }
  return problems;
}

std::vector<std::int64_t> pipeline_stage_layers(std::int64_t n_layer, int pp, int virtual_stages,
                                                const std::vector<std::int64_t>& layers) {
  WF_CHECK(pp >= 1 && virtual_stages >= 1, "pipeline_stage_layers: pp = {} and virtual_stages = {} must be >= 1", pp,
           virtual_stages);
  const std::vector<std::string> problems = pipeline_layer_problems(n_layer, pp, virtual_stages, layers);
  WF_USER_CHECK(problems.empty(), "{}", fmt::join(problems, "; "));
  if (!layers.empty()) return layers;
  const std::int64_t stages = static_cast<std::int64_t>(pp) * virtual_stages;
  return std::vector<std::int64_t>(static_cast<std::size_t>(stages), n_layer / stages);
}

}  // namespace wf::parallel
