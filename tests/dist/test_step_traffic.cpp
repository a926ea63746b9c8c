// train/step_traffic.h against the traffic counters: one optimizer step of the Trainer on every
// dp × tp × sp layout of this world that config::validate accepts (tp joins in once the trainer
// runs it), for every sp strategy and WallFacer team size, with and without the attention
// checkpoint, with two microbatches per step; and every pipelined layout of pp 2 and 4 under each
// schedule: each rank's bytes on each group equal the prediction exactly.
#include <map>
#include <tuple>
#include <string>
#include <utility>

#include "dist_testing.h"
#include "train_testing.h"
#include "wallfacer/comm/traffic.h"
#include "wallfacer/models/decoder.h"
#include "wallfacer/train/step_traffic.h"
#include "wallfacer/train/trainer.h"

using wf::comm::Traffic;
using wf::comm::TrafficRegistry;
using namespace wf::test;

namespace {

std::string describe(const wf::config::ParallelSection& l, bool checkpointed) {
  return "dp " + std::to_string(l.dp) + ", tp " + std::to_string(l.tp) + ", sp " + std::to_string(l.sp) + " " +
         wf::parallel::sp_strategy_name(l.sp_strategy) + " C " + std::to_string(l.C) +
         (l.sp_strategy == wf::parallel::SpStrategy::ulysses_wallfacer
              ? " U " + std::to_string(l.U) + (l.ulysses_inner ? " (Ulysses inner)" : " (WallFacer inner)")
              : "") +
         (checkpointed ? ", checkpoint_attention" : "") + (l.tp_shard_activations ? ", activations sharded" : "") +
         (l.zero > 0 ? ", ZeRO-" + std::to_string(l.zero) : "");
}

// Bytes each group sent and received since `before`.
std::map<std::string, Traffic> since(const std::map<std::string, Traffic>& before) {
  std::map<std::string, Traffic> delta;
  for (const auto& [group, now] : TrafficRegistry::instance().snapshot()) {
    const auto was = before.find(group);
    const Traffic b = was == before.end() ? Traffic{} : was->second;
    delta[group] = {0, now.bytes_sent - b.bytes_sent, 0, now.bytes_received - b.bytes_received};
  }
  return delta;
}

// One optimizer step of the Trainer of `config` on this world: each group's bytes sent and
// received equal the prediction, and no other group moves anything.
void check_one_step(const wf::config::RunConfig& config, int world) {
  wf::comm::CommGrid grid(wf::comm::ProcessGrid(config.parallel.grid(), world, runtime().rank()));
  wf::train::Trainer trainer(config, grid);
  const auto& decoder = dynamic_cast<const wf::models::DecoderLM&>(trainer.model());
  const wf::train::GroupBytes predicted =
      wf::train::predicted_step_traffic(config, decoder.options(), grid.grid(), trainer.model());
  const auto before = TrafficRegistry::instance().snapshot();
  trainer.train_step();
  std::map<std::string, Traffic> measured = since(before);
  for (const auto& [group, bytes] : predicted) {
    INFO("group " << group);
    REQUIRE(bytes.has_value());  // every group is predicted
    CHECK(measured[group].bytes_sent == *bytes);
    CHECK(measured[group].bytes_received == *bytes);
    measured.erase(group);
  }
  for (const auto& [group, traffic] : measured) {  // no other group may move anything
    INFO("unpredicted group " << group);
    CHECK(traffic == Traffic{});
  }
}

}  // namespace

TEST_CASE("a training step sends on each group exactly the bytes step_traffic.h predicts", "[dist][layout_traffic]") {
  const int world = runtime().world_size();
  int ran = 0;
  for (const wf::config::ParallelSection& candidate : wf::config::candidate_layouts(world)) {
    // With tp, each also with its activations sharded over tp (all-gathers / reduce-scatters).
    for (const bool shard_activations : {false, true}) {
      if (shard_activations && candidate.tp == 1) continue;
      for (const auto& [checkpointed, zero] : {std::pair{false, 0}, {true, 0}, {false, 1}, {false, 2}}) {
        if (zero > 0 && candidate.dp * candidate.sp == 1) continue;  // no replicas to shard over
        wf::config::ParallelSection l = candidate;
        l.tp_shard_activations = shard_activations;
        l.zero = zero;
        // ZeRO: small buckets, so several are padded to the replica count.
        if (zero > 0) l.grad_bucket_mb = 16.0 / 1024;
        wf::config::RunConfig config = small_gpt_run(l.dp, l.sp, checkpointed, "wf_test_step_traffic");
        config.parallel = l;
        config.train.steps = 1;
        config.train.global_batch_size = 2 * l.dp;  // two microbatches per step
        if (!error_of([&] { wf::config::validate(config, world); }).empty()) continue;  // the same on every rank
        INFO(describe(l, checkpointed));
        check_one_step(config, world);
        ++ran;
      }
    }
  }
  CHECK(ran >= 2);  // at least dp = world, with and without the checkpoint
}

// A family whose norms act on split heads (parallel_residual's QK-norms) has gradients partial
// over tp with the residual stream replicated too: their sum is counted whenever it exists.
TEST_CASE("a training step of a model with norms over split heads sends the predicted bytes",
          "[dist][layout_traffic]") {
  const int world = runtime().world_size();
  int ran = 0;
  for (const wf::config::ParallelSection& candidate : wf::config::candidate_layouts(world)) {
    if (candidate.tp == 1) continue;
    for (const auto& [shard_activations, zero] : {std::pair{false, 0}, {true, 0}, {false, 1}}) {
      if (zero > 0 && candidate.dp * candidate.sp == 1) continue;
      wf::config::ParallelSection l = candidate;
      l.tp_shard_activations = shard_activations;
      l.zero = zero;
      wf::config::RunConfig config =
          small_gpt_run(l.dp, l.sp, false, "wf_test_step_traffic_qk_norm", "parallel_residual");
      config.parallel = l;
      config.train.steps = 1;
      config.train.global_batch_size = 2 * l.dp;
      if (!error_of([&] { wf::config::validate(config, world); }).empty()) continue;  // the same on every rank
      INFO(describe(l, false) << ", parallel_residual");
      check_one_step(config, world);
      ++ran;
    }
  }
  if (world % 2 == 0) CHECK(ran >= 2);  // tp 2, with and without activation sharding
}

// The candidates put the hybrid's Ulysses ranks inner; here its WallFacer ranks are, which moves
// every group's ranks but none of the bytes (sp.ulysses, sp.wallfacer, sp.team, sp.ring).
TEST_CASE("a training step with ulysses-wallfacer, WallFacer ranks inner, sends the predicted bytes",
          "[dist][layout_traffic][ulysses_wallfacer]") {
  const int world = runtime().world_size();
  for (const wf::config::ParallelSection& candidate : wf::config::candidate_layouts(world)) {
    if (candidate.sp_strategy != wf::parallel::SpStrategy::ulysses_wallfacer || candidate.tp > 1) continue;
    for (const bool checkpointed : {false, true}) {
      wf::config::ParallelSection l = candidate;
      l.ulysses_inner = false;
      wf::config::RunConfig config = small_gpt_run(l.dp, l.sp, checkpointed, "wf_test_step_traffic_hybrid");
      config.parallel = l;
      config.train.steps = 1;
      config.train.global_batch_size = 2 * l.dp;
      if (!error_of([&] { wf::config::validate(config, world); }).empty()) continue;  // the same on every rank
      INFO(describe(l, checkpointed));
      check_one_step(config, world);
    }
  }
}

TEST_CASE("a pipelined training step sends on each group exactly the bytes step_traffic.h predicts",
          "[dist][layout_traffic][pp]") {
  using wf::parallel::PipelineScheduleKind;
  const int world = runtime().world_size();
  int ran = 0;
  for (const int pp : {2, 4}) {
    if (world % pp != 0) continue;
    const int rest = world / pp;
    // The rest of the world as dp, sp or tp; every schedule; ZeRO 0 and 2; the attention checkpoint.
    for (const auto& [dp, tp, sp] : {std::tuple{rest, 1, 1}, {1, 1, rest}, {1, rest, 1}}) {
      for (const PipelineScheduleKind schedule :
           {PipelineScheduleKind::one_f_one_b, PipelineScheduleKind::gpipe, PipelineScheduleKind::interleaved}) {
        for (const auto& [checkpointed, zero] : {std::pair{false, 0}, {true, 0}, {false, 2}}) {
          wf::config::RunConfig config = small_gpt_run(dp, sp, checkpointed, "wf_test_step_traffic_pp");
          config.model.set("n_layer", 4 * (schedule == PipelineScheduleKind::interleaved ? 2 : 1));
          config.parallel.pp = pp;
          config.parallel.tp = tp;
          config.parallel.pp_schedule = schedule;
          config.parallel.pp_virtual = schedule == PipelineScheduleKind::interleaved ? 2 : 1;
          config.parallel.zero = zero;
          if (zero > 0) config.parallel.grad_bucket_mb = 16.0 / 1024;
          config.train.steps = 1;
          config.train.global_batch_size = 4 * dp;  // four microbatches per step
          if (!error_of([&] { wf::config::validate(config, world); }).empty()) continue;  // the same on every rank
          INFO(describe(config.parallel, checkpointed) << ", pp " << pp << " " << wf::parallel::to_string(schedule));
          check_one_step(config, world);
          ++ran;
        }
      }
    }
  }
  if (world >= 2 && world % 2 == 0) CHECK(ran >= 3);
}

// bf16 mixed precision moves bf16 activations (tp, pp, and every sp strategy's Q, K, V, O and
// their gradients), f32 gradients (or bf16 ones, parallel.grad_reduce_dtype), statistics and
// partial sums: the formula knows each.
TEST_CASE("a bf16 mixed-precision training step sends exactly the bytes step_traffic.h predicts",
          "[dist][layout_traffic][bf16][pp]") {
  const int world = runtime().world_size();
  int ran = 0;
  for (const wf::config::ParallelSection& candidate : wf::config::candidate_layouts(world)) {
    for (const int pp : {1, 2}) {
      wf::config::ParallelSection l = candidate;
      if (pp == 2) {  // the same world with two stages: halve dp, or else sp
        if (l.dp % 2 == 0) l.dp /= 2;
        else if (l.sp % 2 == 0 && l.sp / 2 >= 1 && l.C == 1) l.sp /= 2;
        else continue;
        l.pp = 2;
      }
      // Without pipelining, gradients reduced in f32 and in bf16 (parallel.grad_reduce_dtype).
      for (const wf::DType reduce : {wf::DType::f32, wf::DType::bf16}) {
        if (pp == 2 && reduce == wf::DType::bf16) continue;
        wf::config::RunConfig config = small_gpt_run(l.dp, l.sp, false, "wf_test_step_traffic_bf16");
        config.parallel = l;
        config.parallel.grad_reduce_dtype = reduce;
        config.train.dtype = wf::DType::bf16;
        config.train.steps = 1;
        config.train.global_batch_size = 2 * l.dp;
        if (!error_of([&] { wf::config::validate(config, world); }).empty()) continue;  // the same on every rank
        INFO(describe(l, false) << ", pp " << l.pp << ", bf16, gradients reduced in " << wf::dtype_name(reduce));
        check_one_step(config, world);
        ++ran;
      }
    }
  }
  CHECK(ran >= 1);
}
