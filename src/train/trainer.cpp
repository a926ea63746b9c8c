#include "wallfacer/train/trainer.h"

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "wallfacer/autograd/engine.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/graph.h"
#include "wallfacer/core/log.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/reduction.h"
#include "wallfacer/ops/shape_ops.h"
#include "wallfacer/parallel/replica_check.h"
#include "wallfacer/parallel/tensor_parallel.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/device_placement.h"
#include "wallfacer/train/distributed_checkpoint.h"
#include "wallfacer/train/pipeline_runner.h"
#include "wallfacer/train/replica_gradients.h"
#include "wallfacer/train/grad_sync.h"
#include "wallfacer/train/loss_totals.h"
#include "wallfacer/train/peak_flops.h"
#include "wallfacer/train/sharded_state.h"

namespace wf::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Seeds of the two synthetic streams: the validation tokens never repeat the training tokens.
constexpr std::uint64_t kSyntheticValSalt = 0x76616c6964617465ULL;  // "validate"

}  // namespace

std::shared_ptr<data::TokenSource> open_token_source(const config::RunConfig& c, bool validation) {
  if (c.data.source == config::DataSource::synthetic) {
    // Enough tokens that no sample repeats within the run.
    const std::int64_t batches = validation ? std::max<std::int64_t>(c.train.eval_batches, 1) : c.train.steps;
    const std::int64_t tokens = batches * config::global_batch_sequences(c) * c.train.seq_len + 1;
    const auto seed = static_cast<std::uint64_t>(c.train.seed) ^ (validation ? kSyntheticValSalt : 0);
    return data::make_synthetic_source(config::model_facts(c).vocab_size, tokens, seed);
  }
  const std::string& path = validation ? c.data.val_path : c.data.train_path;
  if (path.empty()) return nullptr;
  return data::open_token_file_source(path);
}

namespace {

// A token model's sources: its token files (or synthetic tokens) through the token loader.
std::unique_ptr<models::BatchSource> token_batches(const config::RunConfig& c, comm::CommGrid& grid,
                                                   const models::Model& model, std::shared_ptr<data::TokenSource> source,
                                                   bool validation) {
  if (source == nullptr) return nullptr;
  return std::make_unique<models::TokenBatchSource>(
      data::BatchLoader(std::move(source), models::loader_options(c, grid, model, validation)));
}

const models::Model& required(const std::shared_ptr<models::Model>& model) {
  WF_CHECK(model != nullptr, "Trainer: a model and a training data source are required");
  return *model;
}

// The sources of a run: the model's registered batch factory, or its token files.
std::unique_ptr<models::BatchSource> run_batches(const config::RunConfig& c, comm::CommGrid& grid,
                                                 const models::Model& model, bool validation) {
  if (validation && c.train.eval_every <= 0) return nullptr;
  if (const models::BatchSourceFactory factory = models::batch_source_factory(c.model.name)) {
    return factory(c, grid, model, validation);
  }
  return token_batches(c, grid, model, open_token_source(c, validation), validation);
}

// Dropout draws from the default generator. Each replica (dp, sp and pp coordinate) has its own
// stream, as its tokens differ; the ranks of a tp group share one, since they hold the same
// replicated activations and must drop the same elements (tensor_parallel.h). The index does
// not depend on the grid's order or on tp, so a tp run draws the masks of the tp-1 run. The
// offset advances by the same amount on every rank, so one saved offset restores them all.
std::uint64_t replica_seed(const config::RunConfig& c, const comm::ProcessGrid& grid) {
  const config::ParallelSection& p = c.parallel;
  const std::int64_t replica = (static_cast<std::int64_t>(grid.coord("pp")) * p.dp + grid.coord("dp")) * p.sp +
                               grid.coord("sp");
  return static_cast<std::uint64_t>(c.train.seed) * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(replica) + 1;
}

using TrafficMap = std::map<std::string, comm::Traffic>;

double sent_since(const TrafficMap& now, const TrafficMap& before, const std::string& group) {
  const auto n = now.find(group);
  const auto b = before.find(group);
  return static_cast<double>((n == now.end() ? 0 : n->second.bytes_sent) - (b == before.end() ? 0 : b->second.bytes_sent));
}

double total_sent_since(const TrafficMap& now, const TrafficMap& before) {
  double total = 0;
  for (const auto& [group, traffic] : now) total += sent_since(now, before, group);
  return total;
}

// Whether every element of `params` on every rank of `world` is finite, with one host
// synchronisation: a rank's sum of their sums is NaN or infinite as soon as one element is, so
// total − total is 0 or NaN, and its sum over the world is 0 only when every rank's is. (A sum of
// finite weights overflows only when they average past about 1e29: a run diverged just the same.)
bool all_finite(const std::vector<Tensor>& params, comm::Group& world, Device device) {
  autograd::NoGradGuard no_grad;
  Tensor total = Tensor::zeros({1}, DType::f64, device);
  for (const Tensor& p : params) total = add(total, reshape(sum(p).to(DType::f64), {1}));
  Tensor check = sub(total, total);
  world.all_reduce(check);
  return read_to_host(check).data<double>()[0] == 0.0;  // one host read per checkpoint
}

}  // namespace

void TrafficSnapshot::advance(const TrafficSnapshot& from, const TrafficSnapshot& to) {
  const auto shift = [](TrafficMap& base, const TrafficMap& a, const TrafficMap& b) {
    for (const auto& [group, after] : b) {
      const auto was = a.find(group);
      const comm::Traffic before = was == a.end() ? comm::Traffic{} : was->second;
      comm::Traffic& t = base[group];
      t.messages_sent += after.messages_sent - before.messages_sent;
      t.bytes_sent += after.bytes_sent - before.bytes_sent;
      t.messages_received += after.messages_received - before.messages_received;
      t.bytes_received += after.bytes_received - before.bytes_received;
    }
  };
  shift(all, from.all, to.all);
  shift(p2p, from.p2p, to.p2p);
  shift(collectives, from.collectives, to.collectives);
}

TrafficSnapshot TrafficSnapshot::take() {
  const auto& registry = comm::TrafficRegistry::instance();
  return {registry.snapshot(), registry.snapshot(/*p2p_only=*/true), registry.snapshot(false, /*collectives_only=*/true)};
}

Trainer::Trainer(const config::RunConfig& config, comm::CommGrid& grid)
    : Trainer(config, grid, models::create(config, grid)) {}

Trainer::Trainer(const config::RunConfig& config, comm::CommGrid& grid, std::shared_ptr<models::Model> model)
    : Trainer(config, grid, model, run_batches(config, grid, required(model), false),
              run_batches(config, grid, required(model), true)) {}

Trainer::Trainer(const config::RunConfig& config, comm::CommGrid& grid, std::shared_ptr<models::Model> model,
                 std::shared_ptr<data::TokenSource> train, std::shared_ptr<data::TokenSource> val)
    : Trainer(config, grid, model, token_batches(config, grid, required(model), std::move(train), false),
              token_batches(config, grid, required(model), std::move(val), true)) {}

Trainer::Trainer(const config::RunConfig& config, comm::CommGrid& grid, std::shared_ptr<models::Model> model,
                 std::unique_ptr<models::BatchSource> train, std::unique_ptr<models::BatchSource> val)
    : config_(config), grid_(grid), replicas_(grid.group("dp_sp")), model_(std::move(model)) {
  check_supported();
  device_ = resolve_train_device(config_.train.device);
  if (!device_.is_cpu()) {  // collective over the world: every rank builds its Trainer at the same point
    const comm::TransportChoice transport = grid_.use_device(device_, config_.comm.gpu_transport);
    if (grid_.grid().rank() == 0) log::info("comm: {} tensors travel by {}", device_.str(), transport.reason);
  }
  stager_ = std::make_unique<BatchStager>(device_, config::grad_accum_steps(config_));
  if (config_.train.cuda_graph) {
    // check_supported refused the layouts and devices a graph cannot serve; train.device auto may
    // still have resolved to the CPU.
    if (graphs_supported(device_)) {
      graph_ = std::make_unique<MicrobatchGraph>(device_);
    } else {
      log::warn("train.cuda_graph: {} runs no graphs; the step runs without one", device_.str());
    }
  }
  WF_CHECK(model_ != nullptr && train != nullptr, "Trainer: a model and a training data source are required");
  // Built on the CPU (its weights from the seeds alone), then moved: before the gradient buffers
  // and the optimizer take views of the parameters.
  move_to_device(*model_, device());
  params_ = model_->parameters();
  shards_ = model_->parameter_shards();
  if (config_.parallel.tp > 1 && std::none_of(shards_.begin(), shards_.end(), [](const nn::ParameterShard& s) {
        return s.is_sharded();
      })) {
    log::warn("parallel.tp = {} but model '{}' splits no parameter over tp: every tp rank trains the whole model "
              "(correct, but tp {} times the work); build its layers with models::tensor_parallel_layers",
              config_.parallel.tp, model_->name(), config_.parallel.tp);
  }
  set_up_pipeline();
  set_grad_overlap(true, gradient_bucket_bytes(config_));
  const auto& t = config_.train;
  // A run shorter than its warmup (a quick smoke run of a preset) has the warmup cut at its end;
  // config::notes warns about it.
  schedule_ = CosineSchedule{
      .base_lr = t.lr, .min_lr = t.min_lr, .warmup_steps = std::min(t.warmup_steps, t.steps), .total_steps = t.steps};
  train_batches_ = std::move(train);
  val_batches_ = std::move(val);
  checkpoints_ = std::make_unique<CheckpointStore>(config_.checkpoint.dir, config_.checkpoint.keep_last);
  seed_generators({});
}

Trainer::~Trainer() = default;

void Trainer::set_grad_overlap(bool overlap, std::int64_t bucket_bytes) {
  WF_CHECK(step_ == 0 && history_.empty(),
           "Trainer::set_grad_overlap after training started: it rebuilds the optimizer; call it before resume() "
           "and fit()");
  optimizer_.reset();  // holds views of the old gradient buffers
  grads_.reset();      // first: its hooks go before a new instance sets its own
  grads_ = std::make_unique<ReplicaGradients>(replicas_, params_,
                                              ReplicaGradientOptions{.zero = config_.parallel.zero,
                                                                     .bucket_bytes = bucket_bytes,
                                                                     .overlap = overlap,
                                                                     .reduce_dtype = config_.parallel.grad_reduce_dtype,
                                                                     .isolated = shared_params_});
  // The optimizer updates what this replica owns: whole parameters, or under ZeRO its pieces of
  // them, which keep their parameter's weight-decay rule (matrices decay, vectors do not).
  optimizer_shards_.clear();
  counted_in_norm_.clear();
  // The last stage's tied embedding is a copy of the first stage's: counted (and written) once.
  const bool holds_copies = !model_->stage().embedding;
  for (const auto& piece : grads_->pieces()) {
    optimizer_shards_.push_back(shards_[piece.param]);
    const bool shared = std::find(shared_params_.begin(), shared_params_.end(), piece.param) != shared_params_.end();
    counted_in_norm_.push_back(shared && holds_copies ? 0 : 1);
  }
  const auto& t = config_.train;
  optimizer_ = std::make_unique<AdamW>(
      grads_->optimizer_params(),
      AdamWOptions{.lr = t.lr, .beta1 = t.beta1, .beta2 = t.beta2, .weight_decay = t.weight_decay,
                  .ema_decay = t.ema_decay, .ema_warmup = t.ema_warmup});
  for (std::size_t i = 0; i < grads_->pieces().size(); ++i) {
    optimizer_->set_weight_decay(i, params_[grads_->pieces()[i].param].dim() >= 2);
  }
}

std::vector<OptimizerSlot> Trainer::optimizer_slots() const {
  const std::vector<nn::NamedShard> named = model_->named_parameter_shards();
  // One replica writes what every replica holds alike; a piece of a parameter tp does not split
  // is the same on every tp rank, so tp rank 0 writes it.
  const bool sharded_over_replicas = grads_->zero() > 0;
  const bool first_replica = replicas_.rank() == 0;
  const bool first_tp = grid_.group("tp").rank() == 0;
  std::vector<OptimizerSlot> slots;
  for (std::size_t i = 0; i < grads_->pieces().size(); ++i) {
    const auto& piece = grads_->pieces()[i];
    const auto& [name, shard] = named[piece.param];
    slots.push_back({.name = name,
                     .shard = shard,
                     .flat_begin = piece.begin,
                     .flat_end = piece.end,
                     .writer = (sharded_over_replicas || first_replica) && (shard.is_sharded() || first_tp) &&
                               counted_in_norm_[i] != 0});
  }
  return slots;
}

void Trainer::check_supported() const {
  // The same rules `wallfacer validate` applies (config::validate, this_machine).
  const std::vector<std::string> problems = config::unsupported_by_trainer(config_);
  WF_CHECK(problems.empty(), "the trainer cannot run this config: {}", fmt::join(problems, "; "));
}

void Trainer::set_up_pipeline() {
  const config::ParallelSection& p = config_.parallel;
  if (p.pp == 1) return;
  const models::StageRange expected = models::pipeline_stage(config_, grid_.grid());
  const auto describe = [](const models::StageRange& stage) {
    std::vector<std::string> chunks;
    for (const models::BlockRange& c : stage.chunks) chunks.push_back(fmt::format("[{}, {})", c.first, c.end));
    return fmt::format("blocks {}{}{}", fmt::join(chunks, " "), stage.embedding ? " + embedding" : "",
                       stage.head ? " + head" : "");
  };
  WF_USER_CHECK(model_->stage() == expected,
                "parallel.pp = {}: model '{}' holds {} on pp rank {}, but its pipeline stage is {}; a model trained "
                "with pipeline parallelism builds models::pipeline_stage(config, grid) (docs/adding-a-model.md)",
                p.pp, model_->name(), describe(model_->stage()), grid_.grid().coord("pp"), describe(expected));
  const int microbatches = static_cast<int>(config::grad_accum_steps(config_));
  pipeline_ = std::make_unique<PipelineRunner>(
      *model_, grid_.group("pp"), parallel::PipelineSchedule(p.pp_schedule, p.pp, microbatches, p.pp_virtual),
      device(), PipelineLinks::of(grid_));
  shared_params_ = models::pipeline_shared_parameter_indices(*model_);
}

void Trainer::sum_shared_gradients() {
  comm::Group& embedding = grid_.group("pp.embedding");
  if (shared_params_.empty() || embedding.size() == 1) return;
  // Both stages laid the shared parameter out alone (ReplicaGradientOptions::isolated), so their
  // replicas own the same pieces of it, in the same order: summed element for element.
  for (std::size_t i = 0; i < grads_->pieces().size(); ++i) {
    const std::size_t param = grads_->pieces()[i].param;
    if (std::find(shared_params_.begin(), shared_params_.end(), param) == shared_params_.end()) continue;
    Tensor grad = grads_->optimizer_params()[i].grad();
    embedding.all_reduce(grad);
  }
}

void Trainer::seed_generators(const RngOffsets& offsets) {
  // The default generator: one stream per replica, the same over tp (replicated activations).
  // The tracker's tensor-parallel stream: one per tp rank of each replica (split activations).
  // Every rank's offsets advance alike, so the ones rank 0 saves restore all of them.
  const std::uint64_t seed = replica_seed(config_, grid_.grid());
  default_generator().set_state({seed, offsets.replicated});
  parallel::seed_tensor_parallel_rng(seed, grid_.group("tp"));
  const std::uint64_t tp_seed = generator_tracker().state(parallel::kTensorParallelRng).seed;
  generator_tracker().set_state(parallel::kTensorParallelRng, {tp_seed, offsets.tensor_parallel});
}

std::int64_t Trainer::tokens_per_step() const {
  return config::global_batch_sequences(config_) * config_.train.seq_len;
}

models::Batch Trainer::batch(const models::BatchSource& source, std::int64_t index, std::int64_t micro) {
  // Validation batches come one evaluation at a time: no prefetch past them.
  return stager_->get(source, index, micro, /*prefetch_next=*/&source == train_batches_.get());
}

DeviceLossTotals Trainer::run_microbatches() {
  const std::int64_t accum = config::grad_accum_steps(config_);
  if (pipeline_) {
    // The schedule orders the microbatches' forwards and backwards; the reducer brackets each
    // backward as below, the last one starting the replica reduction.
    return pipeline_->train_step(
        [&](int micro) { return batch(*train_batches_, step_, micro); },
        {.before = [&](bool last) { grads_->begin_backward(last); }, .after = [&] { grads_->end_backward(); }});
  }
  // One micro batch's forward and backward: the gradient of its loss SUM (normalised below, once,
  // by the global count). Replayed as a graph with train.cuda_graph.
  const auto forward_backward = [&](const models::Batch& inputs) {
    const models::LossSum loss = model_->loss_sum(inputs);
    autograd::backward({loss.sum});
    return models::LossSum(loss.sum.detach(), loss.count);  // not keeping the autograd graph alive
  };
  DeviceLossTotals local(device());
  for (std::int64_t micro = 0; micro < accum; ++micro) {
    const models::Batch b = batch(*train_batches_, step_, micro);
    // The reducer's brackets stay outside the graph, so that they run for every micro batch,
    // replayed or not (with a graph there is one process: they communicate nothing).
    grads_->begin_backward(/*last_microbatch=*/micro + 1 == accum);
    const models::LossSum loss = graph_ ? graph_->run(b, forward_backward) : forward_backward(b);
    grads_->end_backward();
    local.add(loss.sum, loss.count);  // on the device: no host read per microbatch
  }
  return local;
}

double Trainer::compute_gradients() { return read_to_host(compute_gradients_on_device()).data<double>()[0]; }

Tensor Trainer::compute_gradients_on_device() {
  model_->train();
  DeviceLossTotals local = run_microbatches();
  // From here on the gradients are the optimizer's: whole parameters', or this replica's pieces
  // of them under ZeRO (the same positions on every tp rank: their shards have equal shapes).
  const std::vector<Tensor>& grads = grads_->optimizer_params();
  // With activation sharding the norms (and row biases) saw 1/tp of the tokens each.
  parallel::reduce_partial_gradients(grads, optimizer_shards_, grid_.group("tp"));
  // The tied embedding's two copies get one gradient: after the replica reduction (which has
  // completed for every bucket), before clipping and the update read it.
  sum_shared_gradients();
  // Only the last stage computed losses: every stage learns the totals it normalises by.
  if (pipeline_) local = local.sum_over(grid_.group("pp"));
  return normalise_gradients_on_device(replicas_, grads, local);
}

void Trainer::zero_grad() { grads_->zero_grad(); }

StepResult Trainer::apply_gradients(double loss) {
  StepResult result;
  const Tensor norm = update(result);
  result.loss = loss;
  result.grad_norm = read_to_host(norm).data<double>()[0];  // the one host read of this form
  count_skipped_step(result);
  return result;
}

Tensor Trainer::update(StepResult& result) {
  result.step = step_ + 1;
  // After the all-reduce every replica holds the same gradient shards; the norm of the whole
  // model sums the split parameters' shards over tp and counts the replicated ones once.
  const double max_norm = config_.train.grad_clip > 0 ? config_.train.grad_clip : std::numeric_limits<double>::infinity();
  // Under ZeRO each replica holds other pieces: the norm sums them over the replicas as well.
  const Tensor norm = clip_grad_norm_on_device(grads_->optimizer_params(), optimizer_shards_, grid_.group("tp"),
                                               GradNormScope{.replicas = grads_->zero() > 0 ? &replicas_ : nullptr,
                                                             .stages = pipeline_ ? &grid_.group("pp") : nullptr,
                                                             .counted = &counted_in_norm_},
                                               max_norm);
  result.lr = schedule_.lr_at(result.step);
  // A norm that is not finite (the same on every rank) skips the update on the device: the
  // parameters, moments and step counts stay as they were, so the gather below and the replica
  // check see the weights of the last step that applied. The host learns of the skip when it
  // reads the norm (count_skipped_step).
  optimizer_->set_lr(result.lr);
  optimizer_->step(norm);
  grads_->gather_parameters();
  if (config_.train.check_replicas) parallel::check_tp_replicas(*model_, grid_.group("tp"));
  zero_grad();
  step_ = result.step;
  return norm;
}

void Trainer::count_skipped_step(const StepResult& result) {
  if (std::isfinite(result.grad_norm)) {  // the same on every rank: all take the same branch
    skipped_in_a_row_ = 0;
    return;
  }
  skipped_in_a_row_ += 1;
  // "NaN" whatever its sign bit: printf's "-nan" reads as a negative number.
  const std::string norm = std::isnan(result.grad_norm) ? "NaN" : fmt::format("{}", result.grad_norm);
  log::warn("step {}: the gradient norm is {}; skipping the update", result.step, norm);
  const auto& t = config_.train;
  WF_USER_CHECK(skipped_in_a_row_ < t.max_skipped_steps,
                "step {}: the gradient norm has not been finite for {} steps in a row (the last {}), "
                "train.max_skipped_steps = {}: the run has diverged and would skip its updates forever; lower "
                "train.lr (now {}), set train.grad_clip (now {}), check the data, then resume from the last "
                "checkpoint in {} (or raise train.max_skipped_steps to wait longer)",
                result.step, skipped_in_a_row_, norm, t.max_skipped_steps, t.lr, t.grad_clip,
                config_.checkpoint.dir);
}

StepResult Trainer::train_step() {
  train_step_on_device();
  read_pending_steps();
  return history_.back();
}

StepResult Trainer::train_step_on_device() {
  const auto start = Clock::now();
  const Tensor loss = compute_gradients_on_device();
  StepResult result;
  const Tensor norm = update(result);
  result.seconds = seconds_since(start);
  history_.push_back(result);
  // [loss, norm]: the pair read_pending_steps copies with the other steps' pairs.
  pending_.push_back(reshape(loss, {1}));
  pending_.push_back(reshape(norm, {1}));
  // A long interval between logged steps (train.log_every of thousands) is read in parts, so the
  // pairs held on the device stay bounded: one read per kMaxPendingSteps steps at most.
  constexpr std::size_t kMaxPendingSteps = 1024;
  if (pending_.size() >= 2 * kMaxPendingSteps) read_pending_steps();
  return result;
}

void Trainer::read_pending_steps() {
  if (pending_.empty()) return;
  // One copy of the steps' losses and gradient norms since the last read, whatever their number.
  const Tensor read = read_to_host(cat(pending_, 0));
  const double* values = read.data<double>();
  const std::size_t steps = pending_.size() / 2;
  pending_.clear();
  const std::size_t first = history_.size() - steps;
  for (std::size_t i = 0; i < steps; ++i) {
    history_[first + i].loss = values[2 * i];
    history_[first + i].grad_norm = values[2 * i + 1];
  }
  // In step order, once every step read is filled in: may end the run.
  for (std::size_t i = first; i < history_.size(); ++i) count_skipped_step(history_[i]);
}

double Trainer::evaluate() {
  WF_CHECK(val_batches_ != nullptr, "evaluate: no validation data (set data.val_path)");
  autograd::NoGradGuard no_grad;
  model_->eval();
  const std::int64_t accum = config::grad_accum_steps(config_);
  DeviceLossTotals local(device());
  for (std::int64_t batch_index = 0; batch_index < config_.train.eval_batches; ++batch_index) {
    if (pipeline_) {
      // The stage's totals of this batch, added as one more term (the order the host summed in).
      const DeviceLossTotals stage = pipeline_->forward_only(
          [&](int micro) { return batch(*val_batches_, batch_index, micro); }, static_cast<int>(accum));
      local.add(stage.totals().slice0(0, 1), stage.totals().slice0(1, 2));
      continue;
    }
    for (std::int64_t micro = 0; micro < accum; ++micro) {
      const models::LossSum loss = model_->loss_sum(batch(*val_batches_, batch_index, micro));
      local.add(loss.sum, loss.count);
    }
  }
  model_->train();
  if (pipeline_) local = local.sum_over(grid_.group("pp"));
  return local.sum_over(replicas_).read().mean();  // one host read per validation
}

std::string Trainer::save_checkpoint() {
  // A diverged run must not replace its good checkpoints with NaNs: every rank checks its weights
  // and all learn whether any rank's are not finite.
  WF_USER_CHECK(all_finite(model_->parameters(), grid_.group("world"), device()),
                "checkpoint: the weights at step {} are not all finite (NaN or infinity): not saved, so the "
                "checkpoints in {} stay as they were; the run has diverged: lower train.lr (now {}) or set "
                "train.grad_clip (now {}), then resume from the last checkpoint",
                step_, config_.checkpoint.dir, config_.train.lr, config_.train.grad_clip);
  // A distributed checkpoint (distributed_checkpoint.h): every rank writes the pieces it is the
  // writer of (one replica per piece), rank 0 the manifest; collective and atomic.
  const int replica = replicas_.rank(), tp = grid_.group("tp").rank();
  ShardedStateDict pieces = sharded_state_dict(*model_, *optimizer_, optimizer_slots(), replica, tp);
  if (!model_->stage().embedding) {
    // The last stage's copy of a shared parameter: the first stage writes it.
    for (const std::string& name : model_->pipeline_shared_parameters()) {
      for (ShardedTensor& piece : pieces) {
        if (piece.key == name) piece.writer = false;
      }
    }
  }
  const std::map<std::string, std::string> state = {
      {"rng.offset", std::to_string(default_generator().offset())},
      {"rng.tensor_parallel.offset", std::to_string(generator_tracker().state(parallel::kTensorParallelRng).offset)},
      {"world_size", std::to_string(grid_.grid().world_size())}};
  const std::string where =
      save_sharded_checkpoint(*checkpoints_, step_, pieces, state, config::to_yaml(config_), grid_.group("world"));
  if (grid_.grid().rank() == 0) log::info("checkpoint: step {} saved to {}", step_, where);
  return where;
}

bool Trainer::resume() {
  // Each candidate is loaded into this rank's pieces (any layout wrote it: the reader reshards),
  // so a checkpoint that does not fit the model (or has a bad RNG offset) is skipped like a
  // corrupt one. The last candidate accepted is the one found, so the model holds that one.
  const int replica = replicas_.rank(), tp = grid_.group("tp").rank();
  const std::vector<OptimizerSlot> slots = optimizer_slots();  // this replica's ZeRO pieces, or whole parameters
  RngOffsets offsets;
  std::int64_t loaded_step = 0;
  const auto try_load = [&](const std::string& dir) {
    CheckpointReader reader(dir);
    const Checkpoint c = reader.header();
    // Parsed first: a bad value rejects the checkpoint before anything is loaded.
    offsets = {.replicated = state_uint(c, "rng.offset").value_or(0),
               .tensor_parallel = state_uint(c, "rng.tensor_parallel.offset").value_or(0)};
    load_sharded_state(reader, *model_, *optimizer_, slots, replica, tp, /*whole_model=*/!pipeline_);
    loaded_step = c.step;
  };
  // Every rank must restore the same step, yet each decides alone which checkpoint fits its
  // shards. Each proposes its newest fitting step; while they differ, every rank looks again at
  // the steps up to the smallest proposed (which strictly decreases, so this ends). One
  // max-reduction of (step, -step, failed) gives the largest and smallest proposal, and whether a
  // rank found none that loads: then all fail together, as one rank throwing alone would leave
  // the others waiting in the reduction.
  std::optional<std::int64_t> at_most;
  for (;;) {
    std::optional<std::string> checkpoint;
    std::string failure;
    try {
      checkpoint = checkpoints_->find_latest(try_load, at_most);
    } catch (const Error& e) {
      failure = e.what();
    }
    const double step = checkpoint ? static_cast<double>(loaded_step) : -1.0;
    Tensor seen = Tensor::from_vector(std::vector<double>{step, -step, failure.empty() ? 0.0 : 1.0}, {3});
    grid_.group("world").all_reduce(seen, comm::ReduceOp::max);
    const double newest = seen.data<double>()[0], oldest = -seen.data<double>()[1];
    WF_USER_CHECK(failure.empty(), "resume: {}", failure);
    WF_USER_CHECK(seen.data<double>()[2] == 0.0,
                  "resume: another rank found no checkpoint in {} that loads (its log says why)",
                  config_.checkpoint.dir);
    // Every branch below is taken by every rank alike: it depends on reduced values only.
    if (newest == oldest) {
      // (Checkpoints that vanished while the ranks agreed are no reason to start from scratch.)
      WF_CHECK(checkpoint || !at_most, "resume: the checkpoints in {} changed while the ranks chose one; resume again",
               config_.checkpoint.dir);
      if (!checkpoint) return false;
      step_ = loaded_step;
      seed_generators(offsets);
      log::info("resumed from the step-{} checkpoint in {}", step_, config_.checkpoint.dir);
      return true;
    }
    // A rank with no checkpoint at all (up to the steps the others proposed) sees another directory.
    WF_CHECK(oldest >= 0,
             "resume: the ranks found different checkpoints in {} (steps {} to {}); every rank must see the same "
             "checkpoint directory (a shared filesystem)",
             config_.checkpoint.dir, oldest, newest);
    at_most = static_cast<std::int64_t>(oldest);
  }
}

bool Trainer::logs_step(std::int64_t step, bool validated) const {
  const auto& t = config_.train;
  return step % t.log_every == 0 || step == t.steps || validated;
}

void Trainer::log_step(double val_loss) {
  const auto& t = config_.train;
  if (!logs_step(history_.back().step, val_loss >= 0)) return;
  read_pending_steps();  // the step's one host read: every loss and norm since the last logged step
  const StepResult& result = history_.back();
  StepMetrics m;
  if (pipeline_) {
    // Every stage's waits over its compute, summed over the pp group: the mean bubble. Its
    // all-reduce is no training step's traffic.
    const TrafficSnapshot before = TrafficSnapshot::take();
    Tensor totals = Tensor::from_vector(std::vector<double>{interval_.pp_wait, interval_.pp_compute}, {2});
    grid_.group("pp").all_reduce(totals);
    interval_.traffic.advance(before, TrafficSnapshot::take());
    const double wait = totals.data<double>()[0], compute = totals.data<double>()[1];
    m.pp_bubble = compute > 0 ? wait / compute : 0.0;
    m.pp_bubble_ideal = pipeline_->schedule().ideal_bubble();
    write_pipeline_timeline();
  }

  m.step = result.step;
  m.total_steps = t.steps;
  m.loss = result.loss;
  m.val_loss = val_loss;
  m.lr = result.lr;
  m.grad_norm = result.grad_norm;
  const double steps = static_cast<double>(std::max<std::int64_t>(interval_.steps, 1));
  m.step_seconds = interval_.seconds / steps;
  m.tokens_per_s = m.step_seconds > 0 ? static_cast<double>(tokens_per_step()) / m.step_seconds : 0.0;
  m.flops_per_s = m.tokens_per_s * model_->train_flops_per_token(t.seq_len);
  const double peak = peak_.gflops_per_rank * 1e9 * grid_.grid().world_size();
  m.mfu = peak > 0 ? m.flops_per_s / peak : 0.0;
  const TrafficSnapshot now = TrafficSnapshot::take();
  for (const auto& [group, traffic] : now.all) {
    m.bytes_by_group[group] = static_cast<std::int64_t>(sent_since(now.all, interval_.traffic.all, group) / steps);
  }
  m.p2p_bytes = static_cast<std::int64_t>(total_sent_since(now.p2p, interval_.traffic.p2p) / steps);
  m.collective_bytes = static_cast<std::int64_t>(total_sent_since(now.collectives, interval_.traffic.collectives) / steps);
  const MemoryStats memory = memory_stats(device());
  m.allocated_mem_bytes = memory.live_bytes;
  m.reserved_mem_bytes = memory.live_bytes + memory.cached_bytes;
  m.peak_mem_bytes = memory.peak_bytes;
  m.cached_mem_bytes = memory.cached_bytes;
  m.elapsed_seconds = run_seconds_;
  const std::int64_t staging = staging_sync_count() - interval_.staging_syncs;
  m.host_syncs_per_step = static_cast<double>(host_sync_count() - interval_.host_syncs - staging) / steps;
  m.staging_syncs_per_step = static_cast<double>(staging) / steps;
  if (metrics_) metrics_->write(m);
  log::info("{}", progress_line(m));
  start_interval(now);
}

void Trainer::write_pipeline_timeline() const {
  // Every rank its own file, replaced whole (written aside, then renamed): the latest logged step.
  const std::filesystem::path dir = std::filesystem::path(config_.log.dir) / "pp-timeline";
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  const std::filesystem::path file = dir / fmt::format("pp-timeline-rank{}.json", grid_.grid().rank());
  const std::filesystem::path partial = file.string() + ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    out << pipeline_->timeline_json() << '\n';
    if (!out) {
      log::warn("could not write the pipeline timeline {}: {}", file.string(), std::strerror(errno));
      return;
    }
  }
  std::filesystem::rename(partial, file, error);
  if (error) log::warn("could not write the pipeline timeline {}: {}", file.string(), error.message());
}

void Trainer::start_interval(TrafficSnapshot traffic) {
  interval_ = Interval{};
  interval_.traffic = std::move(traffic);
}

// Whether any rank's stop request answers nonzero at this step boundary: the largest answer, the
// same on every rank. Its all-reduce is no training step's traffic.
int Trainer::agreed_stop_request() {
  if (!stop_request_) return 0;
  const TrafficSnapshot before = TrafficSnapshot::take();
  Tensor answer = Tensor::full({1}, static_cast<double>(stop_request_()), DType::f64);
  grid_.group("world").all_reduce(answer, comm::ReduceOp::max);
  interval_.traffic.advance(before, TrafficSnapshot::take());
  // A host tensor the host all-reduced: reading it waits for no device (item() would count it).
  return static_cast<int>(answer.data<double>()[0]);
}

void Trainer::fit(std::int64_t stop_after) {
  const auto& t = config_.train;
  const auto started = std::chrono::steady_clock::now();
  summary_ = FitSummary{};
  summary_.first_step = step_ + 1;
  summary_.last_step = step_;
  if (grid_.grid().rank() == 0) {
    metrics_ = std::make_unique<MetricsLog>(config_.log.dir + "/" + config_.log.metrics_file, step_);
  }
  // Rank 0 alone measures (or reads the cached figure), so that ranks sharing the cores do not
  // measure each other, and every rank's MFU is against the same figure.
  if (grid_.grid().rank() == 0) peak_ = peak_flops(config_.log);
  Tensor peak = Tensor::full({1}, peak_.gflops_per_rank, DType::f64);
  grid_.group("world").broadcast(peak, 0);
  peak_.gflops_per_rank = peak.item();
  if (grid_.grid().rank() == 0) {
    log::info("mfu is measured against {:.1f} GFLOP/s per rank ({})", peak_.gflops_per_rank, peak_.source);
  }
  start_interval(TrafficSnapshot::take());
  const std::size_t first = history_.size();  // this fit's first step in history_
  while (step_ < t.steps && (stop_after <= 0 || step_ < stop_after)) {
    const StepResult result = train_step_on_device();  // its loss is read at the next logged step
    interval_.steps += 1;
    interval_.seconds += result.seconds;
    if (pipeline_) {
      interval_.pp_wait += pipeline_->wait_seconds();
      interval_.pp_compute += pipeline_->step_seconds() - pipeline_->wait_seconds();
    }
    run_seconds_ += result.seconds;
    summary_.last_step = step_;
    summary_.tokens += tokens_per_step();
    const bool eval_now = val_batches_ && t.eval_every > 0 && (step_ % t.eval_every == 0 || step_ == t.steps);
    // A logged step reads its loss and gradient norm (and those of the steps since the last one)
    // before validating: a skipped update is reported, and train.max_skipped_steps of them in a row
    // end the run, as soon as the host learns of them.
    if (logs_step(step_, eval_now)) read_pending_steps();
    const double val_loss = eval_now ? evaluate() : -1.0;
    if (val_loss >= 0 && (summary_.best_val_loss < 0 || val_loss < summary_.best_val_loss)) {
      summary_.best_val_loss = val_loss;
      summary_.best_val_step = step_;
    }
    log_step(val_loss);
    const auto& c = config_.checkpoint;
    summary_.stopped_for = agreed_stop_request();
    // checkpoint.every -1: none at all (a benchmark, whose run is thrown away: a 1.3B model's
    // weights and AdamW state are 16 GB to write).
    if (c.every >= 0 && ((c.every > 0 && step_ % c.every == 0) || step_ == t.steps || summary_.stopped_for != 0)) {
      // A checkpoint between logged steps reads their norms first: a run past
      // train.max_skipped_steps stops before it writes one.
      read_pending_steps();
      // The checkpoint's collectives (its agreement, the manifest's gather) are not a training
      // step's traffic: the interval's baseline moves past them.
      const TrafficSnapshot before = TrafficSnapshot::take();
      summary_.last_checkpoint = save_checkpoint();
      interval_.traffic.advance(before, TrafficSnapshot::take());
    }
    if (summary_.stopped_for != 0) break;
  }
  read_pending_steps();  // a run stopped between logged steps: its last losses (none otherwise)
  if (history_.size() > first) {
    summary_.first_loss = history_[first].loss;
    summary_.last_loss = history_.back().loss;
  }
  summary_.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

}  // namespace wf::train
