#pragma once
// How a model's blocks are cut into pipeline stages: pp ranks × v model chunks each (the
// interleaved schedule's virtual stages), global stage s = chunk · pp + pp rank, holding a
// contiguous run of blocks in global stage order. Pure arithmetic, shared by `validate` (which
// reports the problems) and the model factories (which build the stage).
#include <cstdint>
#include <string>
#include <vector>

namespace wf::parallel {

// Why the blocks cannot be cut: `layers` (parallel.pp_layers, one count >= 1 per global stage)
// must have pp·v entries summing to n_layer; without it n_layer must be a multiple of pp·v.
std::vector<std::string> pipeline_layer_problems(std::int64_t n_layer, int pp, int virtual_stages,
                                                 const std::vector<std::int64_t>& layers);
// The blocks of each global stage, in global stage order: `layers`, or the even split.
// wf::UserError joining pipeline_layer_problems when they cannot be cut.
std::vector<std::int64_t> pipeline_stage_layers(std::int64_t n_layer, int pp, int virtual_stages,
                                                const std::vector<std::int64_t>& layers);

}  // namespace wf::parallel
