// Cross-key checks of a run config against the world size. Every problem is collected as
// "key: rule" in a fixed order and reported in ONE message, so a misconfigured job fails on
// every rank with the same text and the user fixes everything in one round.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "src/config/schema.h"
#include "wallfacer/core/error.h"
#include "wallfacer/parallel/sequence_layout.h"

namespace wf::config {
namespace {

const char* const kGridKeys = "parallel.dp, parallel.tp, parallel.pp, parallel.sp, parallel.C, parallel.order";

// GPT is causal: every strategy shards with the zigzag layout so ranks get equal work.
constexpr parallel::SequenceLayout kGptLayout = parallel::SequenceLayout::zigzag;

// The team size the sequence layout is cut with: WallFacer's C; ring and Ulysses have no teams.
int layout_team_size(const ParallelSection& p) { return p.sp_strategy == parallel::SpStrategy::wallfacer ? p.C : 1; }

void check_layout(const RunConfig& c, int world_size, std::vector<std::string>& problems) {
  const ParallelSection& p = c.parallel;
  try {
    comm::ProcessGrid::validate(p.grid(), world_size);
  } catch (const Error& e) {
    // The grid's own "invalid parallel layout for a world of N ranks: " would repeat ours.
    std::string rule = detail::without_location(e.what());
    if (const std::size_t colon = rule.find(" ranks: "); rule.starts_with("invalid parallel layout") &&
                                                        colon != std::string::npos) {
      rule.erase(0, colon + 8);
    }
    problems.push_back(fmt::format("{}: {}", kGridKeys, rule));
    return;  // the checks below divide by these sizes
  }
  if (p.C > 1 && p.sp_strategy != parallel::SpStrategy::wallfacer) {
    problems.push_back(fmt::format(
        "parallel.C: C = {} is the WallFacer team size, but parallel.sp_strategy {} has no teams: set C to 1 or "
        "sp_strategy to wallfacer",
        p.C, parallel::sp_strategy_name(p.sp_strategy)));
  }
  try {
    parallel::check_sequence_length(kGptLayout, c.train.seq_len, p.sp, layout_team_size(p));
  } catch (const Error& e) {
    problems.push_back(fmt::format("train.seq_len: sp_strategy {} over parallel.sp = {} ranks: {}",
                                   parallel::sp_strategy_name(p.sp_strategy), p.sp,
                                   detail::without_location(e.what())));
  }
}

void check_model(const RunConfig& c, std::vector<std::string>& problems) {
  const ModelConfig& m = c.model;
  const ParallelSection& p = c.parallel;
  const auto require = [&](bool ok, std::string message) {
    if (!ok) problems.push_back(std::move(message));
  };
  require(m.n_head % m.n_kv_head == 0,
          fmt::format("model.n_kv_head: n_head = {} is not a multiple of n_kv_head = {}: each kv head must serve "
                      "the same number of query heads",
                      m.n_head, m.n_kv_head));
  require(m.d_model % m.n_head == 0,
          fmt::format("model.d_model: d_model = {} is not a multiple of n_head = {}: every head needs the same "
                      "head dimension",
                      m.d_model, m.n_head));
  if (m.positions == PositionKind::rope && m.d_model % m.n_head == 0) {
    require((m.d_model / m.n_head) % 2 == 0,
            fmt::format("model.positions: rope rotates pairs of channels, but the head dimension d_model / n_head "
                        "= {} is odd",
                        m.d_model / m.n_head));
  }
  require(c.train.seq_len <= m.max_seq_len,
          fmt::format("train.seq_len: seq_len = {} exceeds model.max_seq_len = {}: raise max_seq_len or shorten the "
                      "sequences",
                      c.train.seq_len, m.max_seq_len));
  const std::int64_t min_vocab = c.data.tokenizer == TokenizerKind::byte ? 256 : 50257;
  require(m.vocab_size >= min_vocab,
          fmt::format("model.vocab_size: vocab_size = {} is smaller than the {} tokenizer's {} tokens",
                      m.vocab_size, tokenizer_name(c.data.tokenizer), min_vocab));
  if (p.tp < 1 || p.pp < 1 || p.sp < 1) return;  // reported by the layout check
  require(m.n_head % p.tp == 0 && m.n_kv_head % p.tp == 0,
          fmt::format("model.n_head: n_head = {} and n_kv_head = {} must both be multiples of parallel.tp = {}: "
                      "tensor parallelism splits the heads",
                      m.n_head, m.n_kv_head, p.tp));
  require(m.d_ff % p.tp == 0,
          fmt::format("model.d_ff: d_ff = {} is not a multiple of parallel.tp = {}: tensor parallelism splits the "
                      "MLP",
                      m.d_ff, p.tp));
  require(m.n_layer % p.pp == 0,
          fmt::format("model.n_layer: n_layer = {} is not a multiple of parallel.pp = {}: every pipeline stage "
                      "holds the same number of layers",
                      m.n_layer, p.pp));
  if (p.sp_strategy == parallel::SpStrategy::ulysses && m.n_head % p.tp == 0 && m.n_kv_head % p.tp == 0) {
    require((m.n_head / p.tp) % p.sp == 0 && (m.n_kv_head / p.tp) % p.sp == 0,
            fmt::format("model.n_head: sp_strategy ulysses shards heads over parallel.sp = {}, but the heads per "
                        "tp rank, n_head = {} and n_kv_head = {}, are not both multiples of it: use ring or "
                        "wallfacer, or an sp that divides both",
                        p.sp, m.n_head / p.tp, m.n_kv_head / p.tp));
  }
}

void check_train(const RunConfig& c, std::vector<std::string>& problems) {
  const TrainConfig& t = c.train;
  const std::int64_t per_step = static_cast<std::int64_t>(c.parallel.dp) * t.micro_batch_size;
  if (t.global_batch_size != 0 && c.parallel.dp >= 1 && t.global_batch_size % per_step != 0) {
    problems.push_back(fmt::format(
        "train.global_batch_size: {} sequences is not a multiple of parallel.dp x train.micro_batch_size = {} x {} = "
        "{}: nearest valid values {} or {}",
        t.global_batch_size, c.parallel.dp, t.micro_batch_size, per_step,
        std::max<std::int64_t>(per_step, t.global_batch_size / per_step * per_step),
        (t.global_batch_size / per_step + 1) * per_step));
  }
  if (t.min_lr > t.lr) {
    problems.push_back(fmt::format("train.min_lr: min_lr = {} exceeds lr = {}: the schedule decays from lr down to "
                                   "min_lr",
                                   t.min_lr, t.lr));
  }
  if (t.warmup_steps > t.steps) {
    problems.push_back(fmt::format("train.warmup_steps: {} warmup steps exceed train.steps = {}: the learning rate "
                                   "would never reach lr; lower warmup_steps or raise steps",
                                   t.warmup_steps, t.steps));
  }
  if (t.eval_every > 0 && c.data.val_path.empty() && c.data.source == DataSource::file) {
    problems.push_back(fmt::format("train.eval_every: eval_every = {} but data.val_path is empty: give a validation "
                                   "file or set eval_every to 0",
                                   t.eval_every));
  }
}

}  // namespace

void validate(const RunConfig& config, int world_size) {
  std::vector<std::string> problems;
  check_layout(config, world_size, problems);
  check_model(config, problems);
  check_train(config, problems);
  WF_USER_CHECK(problems.empty(), "invalid config for a world of {} ranks: {}", world_size, fmt::join(problems, "; "));
}

std::int64_t global_batch_sequences(const RunConfig& config) {
  return config.train.global_batch_size != 0 ? config.train.global_batch_size
                                             : static_cast<std::int64_t>(config.parallel.dp) * config.train.micro_batch_size;
}

std::int64_t grad_accum_steps(const RunConfig& config) {
  return global_batch_sequences(config) / (static_cast<std::int64_t>(config.parallel.dp) * config.train.micro_batch_size);
}

namespace {
// Weights of the GPT the config describes: embeddings, attention (q and o full width, k and v
// n_kv_head wide), MLP, two norms per layer and a final one, plus an untied output head.
std::int64_t parameter_count(const ModelConfig& m) {
  const std::int64_t head_dim = m.d_model / m.n_head, kv_width = m.n_kv_head * head_dim;
  const std::int64_t norm = m.norm == NormKind::layernorm ? 2 * m.d_model : m.d_model;
  const std::int64_t attention = 2 * m.d_model * m.d_model + 2 * m.d_model * kv_width;
  const std::int64_t mlp = 2 * m.d_model * m.d_ff;
  std::int64_t total = m.vocab_size * m.d_model + m.n_layer * (attention + mlp + 2 * norm) + norm;
  if (m.positions == PositionKind::learned) total += m.max_seq_len * m.d_model;
  if (!m.tie_embeddings) total += m.vocab_size * m.d_model;
  return total;
}

std::string human_count(std::int64_t n) {
  if (n >= 1'000'000'000) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1'000'000) return fmt::format("{:.1f}M", n / 1e6);
  return fmt::format("{:.1f}K", n / 1e3);
}
}  // namespace

std::string summary(const RunConfig& c, int world_size) {
  const ParallelSection& p = c.parallel;
  std::string strategy = parallel::sp_strategy_name(p.sp_strategy);
  if (p.sp_strategy == parallel::SpStrategy::wallfacer) {
    strategy += fmt::format(" C {} ({})", p.C, comm::placement_name(p.placement));
  }
  return fmt::format(
      "{} {} layers, d_model {}, {} heads ({} kv), {} parameters; world {} = dp {} x tp {} x pp {} x sp {}, "
      "order {}, sp_strategy {}; seq_len {} ({} tokens per sp rank, zigzag); {} sequences per step = dp {} x "
      "micro_batch {} x accumulation {}; {}",
      c.model.name, c.model.n_layer, c.model.d_model, c.model.n_head, c.model.n_kv_head,
      human_count(parameter_count(c.model)), world_size, p.dp, p.tp, p.pp, p.sp, p.order, strategy, c.train.seq_len,
      c.train.seq_len / p.sp, global_batch_sequences(c), p.dp, c.train.micro_batch_size, grad_accum_steps(c),
      dtype_name(c.train.dtype));
}

}  // namespace wf::config
