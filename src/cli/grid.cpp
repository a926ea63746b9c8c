// `wallfacer grid`: prints the process grid a parallel configuration gives on a world of N
// ranks (every group's rank lists, every rank's WallFacer peers) without launching anything,
// so a layout can be checked before a run. An invalid layout prints the same validation
// message a distributed run would fail with, and exits 1.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "src/cli/option_checks.h"
#include "wallfacer/comm/nccl.h"
#include "wallfacer/comm/process_grid.h"
#include "wallfacer/comm/transport.h"

namespace wf::cli {

void add_grid_command(CLI::App& app);  // declared here until commands.h lists it

namespace {

// The grid is built and printed rank by rank, so its size bounds the memory and the output;
// 2^20 ranks is past the largest machines (ProcessGrid itself takes any int).
constexpr int kMaxWorld = 1 << 20;

struct GridOptions {
  int world = 0;
  comm::ParallelConfig config;
  std::string placement = "collectives-intra";
  bool as_json = false;
  int gpus_per_node = 0;   // 0: not asked; else the GPU transport is printed
  int ranks_per_node = 0;  // 0: gpus_per_node
};

// Which transport GPU tensors would take (comm::choose_gpu_transport), for ranks placed node by node
// and on the GPUs of a node round robin, as comm::Runtime places them (cuda:local_rank % GPUs).
std::string gpu_transport_line(const GridOptions& o) {
  const int per_node = o.ranks_per_node > 0 ? o.ranks_per_node : o.gpus_per_node;
  std::vector<comm::RankDevice> ranks;
  for (int r = 0; r < o.world; ++r) {
    ranks.push_back({fmt::format("node{}", r / per_node), (r % per_node) % o.gpus_per_node});
  }
  const comm::TransportChoice choice =
      comm::choose_gpu_transport(comm::GpuTransport::automatic, Device::cuda(0), comm::nccl_available(), ranks);
  return fmt::format("GPU tensors ({} ranks a node, {} GPUs a node; comm.gpu_transport auto): {}{}\n", per_node,
                     o.gpus_per_node, choice.reason,
                     choice.transport == comm::GpuTransport::nccl && o.config.pp > 1
                         ? "; the pipeline's messages on an edge per direction and neighbour"
                         : "");
}

}  // namespace

void add_grid_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "grid", "Print the process grid (groups, WallFacer teams, sub-rings and peers) of a parallel layout");
  auto options = std::make_shared<GridOptions>();
  command->add_option("--world", options->world, "Number of ranks the run would launch with")
      ->required()
      ->check(in_range(1, kMaxWorld, fmt::format("wallfacer grid lays out at most 2^20 = {} ranks", kMaxWorld)));
  command->add_option("--dp", options->config.dp, "Data-parallel size")->capture_default_str();
  command->add_option("--tp", options->config.tp, "Tensor-parallel size")->capture_default_str();
  command->add_option("--pp", options->config.pp, "Pipeline-parallel size")->capture_default_str();
  command->add_option("--sp", options->config.sp, "Sequence-parallel size (P)")->capture_default_str();
  command->add_option("-C,--C", options->config.C, "WallFacer team size; C*C must divide sp (1 = ring attention)")
      ->capture_default_str();
  command->add_option("--U", options->config.U,
                      "Ulysses degree of sp_strategy ulysses-wallfacer: U | sp, C*C | sp/U (1: no Ulysses part)")
      ->capture_default_str();
  command->add_flag("!--ulysses-outer", options->config.ulysses_inner,
                    "With --U: put the WallFacer ranks adjacent instead of the Ulysses ranks");
  command
      ->add_option("--placement", options->placement,
                   "collectives-intra (team members adjacent) or p2p-intra (sub-ring members adjacent)")
      ->capture_default_str();
  command->add_option("--order", options->config.order, "Rank decomposition, innermost axis first")
      ->capture_default_str();
  command->add_flag("--json", options->as_json, "Print the layout as one JSON document");
  command
      ->add_option("--gpus-per-node", options->gpus_per_node,
                   "Also print how GPU tensors would travel (nccl or staged) with this many GPUs a node")
      ->check(in_range(1, 1 << 16, "--gpus-per-node must be at least 1"));
  command
      ->add_option("--ranks-per-node", options->ranks_per_node,
                   "Ranks a node with --gpus-per-node (default: one a GPU); more than GPUs share them")
      ->check(in_range(1, 1 << 16, "--ranks-per-node must be at least 1"));
  set_action(*command, [options] {
    comm::ParallelConfig config = options->config;
    config.placement = comm::parse_placement(options->placement);
    // Rank 0 is as good as any: the printed layout covers every rank.
    const comm::ProcessGrid grid(config, options->world, 0);
    const std::string text = options->as_json ? grid.to_json(2) + "\n" : grid.to_table();
    std::fputs(text.c_str(), stdout);
    if (options->gpus_per_node > 0 && !options->as_json) std::fputs(gpu_transport_line(*options).c_str(), stdout);
    // On stderr, so that --json output stays one document.
    if (const std::string note = comm::placement_note(config.sp, config.C, config.U); !note.empty()) {
      std::fprintf(stderr, "note: %s\n", note.c_str());
    }
    return kExitOk;
  });
}

}  // namespace wf::cli
