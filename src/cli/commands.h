#pragma once
// The subcommands of the `wallfacer` executable. Each lives in its own file and registers
// itself on its parent through one add_*_command function; main.cpp only wires them up.
//
#include <CLI/CLI.hpp>

#include <functional>
#include <string_view>

namespace wf::cli {

// Exit statuses of the executable.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntimeError = 1;  // the command ran and failed
inline constexpr int kExitUsageError = 2;    // the command line was wrong

// What a command does once its arguments have parsed; returns the exit status. Parsing and
// running are separate steps, so that an exception while parsing is a usage error and one
// while running is a runtime error.
using Action = std::function<int()>;

// Makes `action` the one main() runs when `command` is selected on the command line.
void set_action(CLI::App& command, Action action);

// Prints "wallfacer: error: <message>" as a single line on stderr.
void print_error(std::string_view message);

// `wallfacer info [--json]`: the build, backends and libraries this binary runs with.
void add_info_command(CLI::App& app);

// `wallfacer demo --data FILE`: trains a tiny byte-level transformer on this CPU (demo.cpp).
void add_demo_command(CLI::App& app);

// `wallfacer grid --world N ...`: prints the process grid of a parallel layout (grid.cpp).
void add_grid_command(CLI::App& app);

// `wallfacer validate CFG.yaml [-n N] [--set k=v]...`: checks a run config (validate_command.cpp).
void add_validate_command(CLI::App& app);

// `wallfacer prepare-text --input FILE... --output-dir DIR --tokenizer byte|gpt2`: text files to
// token files train.bin and val.bin (prepare_text_command.cpp, docs/data.md).
void add_prepare_text_command(CLI::App& app);

// `wallfacer train CFG.yaml [--set k=v]...`: trains under mpirun, resuming from checkpoints
// (train_command.cpp).
void add_train_command(CLI::App& app);

// `wallfacer generate --checkpoint DIR --prompt TEXT`: samples text from a trained model
// (generate_command.cpp).
void add_generate_command(CLI::App& app);

// `wallfacer sample CFG.yaml --checkpoint DIR --class K --n N --out FILE.png`: draws images from a
// trained diffusion model (sample_command.cpp).
void add_sample_command(CLI::App& app);

// `wallfacer tune --model CFG.yaml --cluster FILE.yaml [--world N] [--seq N] [--sp-only] [--json]`:
// ranks the layouts of a world by predicted step time (tune_command.cpp, docs/tuning.md).
void add_tune_command(CLI::App& app);

// `wallfacer checkpoint info DIR` and `wallfacer checkpoint export DIR OUT.safetensors
// [--optimizer]` (checkpoint_command.cpp).
void add_checkpoint_command(CLI::App& app);

// `wallfacer bench`: a group that only holds the bench subcommands; returns it so that each
// bench subcommand can register itself on it.
CLI::App& add_bench_group(CLI::App& app);
void add_bench_kernels_command(CLI::App& bench);
// `wallfacer bench comm`: Group primitives beside raw MPI, and P2P overlap (bench_comm_command.cpp).
void add_bench_comm_command(CLI::App& bench);
// `wallfacer bench attention`: sequence-parallel attention per strategy and C, measured bytes
// beside the traffic model (bench_attention_command.cpp).
void add_bench_attention_command(CLI::App& bench);
// `wallfacer bench gpt`: GPT training-step speed beside OpenBLAS sgemm (bench_gpt_command.cpp).
void add_bench_gpt_command(CLI::App& bench);
// `wallfacer bench layout CFG.yaml`: every dp x tp x sp layout of the world trained a few steps:
// time, tokens/s, per-rank memory, bytes per group beside train/step_traffic.h (bench_layout_command.cpp).
void add_bench_layout_command(CLI::App& bench);
// `wallfacer bench device --device cuda`: bf16 GEMM and causal attention fwd+bwd through the ops
// layer, TFLOP/s with results checked (bench_device_command.cpp, docs/gpu.md).
void add_bench_device_command(CLI::App& bench);

}  // namespace wf::cli
