// An outside program built against the installed wallfacer package (find_package) that defines
// its own model, registers it with its own config keys, and trains it from YAML with its own loop
// under mpirun with sequence parallelism, and with tensor parallelism:
//
//   mpirun -np 4 consumer consumer.yaml      # sp 4, WallFacer C 2
//   mpirun -np 4 consumer consumer-tp.yaml   # tp 2 x sp 2
//
// The model is a small causal LM assembled from wallfacer's blocks with a feed-forward of its own
// (a tanh-gated unit). Every weight-holding layer comes from the run's layer factory
// (ParallelTraining::layers) with its tensor-parallel role, which is all tp needs of a model. The data is a fixed cyclic sequence, so a working loop must drive the loss
// far below its start (ln vocab). Exits 0 when training worked and the config checks hold.
#include <wallfacer/wallfacer.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace {

using wf::Tensor;

struct ConsumerOptions {
  std::int64_t vocab_size = 32;
  std::int64_t max_seq_len = 128;
  std::int64_t n_layer = 2;
  std::int64_t n_head = 4;
  std::int64_t d_model = 32;
  double gate_scale = 1.0;
  std::uint64_t seed = 0;
};

const wf::config::ModelKeys<ConsumerOptions>& consumer_keys() {
  static const auto keys = wf::config::ModelKeys<ConsumerOptions>()
                               .integer("vocab_size", &ConsumerOptions::vocab_size, 2)
                               .integer("max_seq_len", &ConsumerOptions::max_seq_len, 1)
                               .integer("n_layer", &ConsumerOptions::n_layer, 1, 64)
                               .integer("n_head", &ConsumerOptions::n_head, 1)
                               .integer("d_model", &ConsumerOptions::d_model, 2)
                               .number("gate_scale", &ConsumerOptions::gate_scale, 0.0, false, 10.0, true);
  return keys;
}

ConsumerOptions consumer_options(const wf::config::RunConfig& config) {
  ConsumerOptions o = consumer_keys().read(config.model);
  o.seed = static_cast<std::uint64_t>(config.train.seed);
  return o;
}

// The program's own feed-forward: tanh(gate(x)) · scale ⊙ up(x), projected back.
class TanhGate final : public wf::nn::FeedForward {
 public:
  TanhGate(const wf::nn::MLPOptions& o, double scale) : FeedForward(o.seed), scale_(scale) {
    using wf::nn::LinearRole;
    gate_ = projection(o, "gate", o.d_model, o.d_ff, LinearRole::column);
    up_ = projection(o, "up", o.d_model, o.d_ff, LinearRole::column);
    down_ = projection(o, "down", o.d_ff, o.d_model, LinearRole::row);
  }
  Tensor forward(const Tensor& x) override {
    return down_->forward(wf::mul(wf::scale(wf::tanh(gate_->forward(x)), scale_), up_->forward(x)));
  }

 private:
  std::shared_ptr<wf::nn::Linear> projection(const wf::nn::MLPOptions& o, const char* name, std::int64_t in,
                                             std::int64_t out, wf::nn::LinearRole role) {
    return register_module(name, wf::nn::layers_or_default(o.layers).linear(
                                     {.in_features = in, .out_features = out, .bias = false, .seed = child_seed(name)},
                                     role));
  }

  double scale_;
  std::shared_ptr<wf::nn::Linear> gate_, up_, down_;
};

class ConsumerLM final : public wf::models::Model {
 public:
  ConsumerLM(const ConsumerOptions& o, std::shared_ptr<const wf::nn::LayerFactory> layers)
      : Model(o.seed), options_(o), layers_(std::move(layers)) {
    const wf::nn::LayerFactory& factory = wf::nn::layers_or_default(layers_);
    embedding_ = register_module(
        "embedding", factory.embedding({.num_embeddings = o.vocab_size, .dim = o.d_model, .seed = child_seed("embedding")},
                                       wf::nn::EmbeddingRole::vocabulary));
    auto blocks = register_module("blocks", std::make_shared<wf::nn::ModuleList>(child_seed("blocks")));
    for (std::int64_t i = 0; i < o.n_layer; ++i) {
      wf::nn::TransformerBlockOptions b{.d_model = o.d_model, .n_head = o.n_head, .d_ff = 2 * o.d_model};
      b.norm = wf::nn::NormType::rms_norm;
      b.bias = false;
      b.rope = true;
      b.checkpoint_attention = i % 2 == 1;  // the attention-output checkpoint works on any block
      b.seed = blocks->next_seed();
      b.layers = layers_;
      b.make_feed_forward = [scale = o.gate_scale](const wf::nn::MLPOptions& m) {
        return std::make_shared<TanhGate>(m, scale);
      };
      blocks_.push_back(blocks->append(std::make_shared<wf::nn::TransformerBlock>(b)));
    }
    norm_ = register_module("norm", factory.norm(wf::nn::NormType::rms_norm, o.d_model, 1e-5));
  }

  std::string name() const override { return "consumer_lm"; }
  wf::models::LossSum loss_sum(const wf::models::Batch& batch) override {
    const Tensor& positions = batch.at("positions");
    Tensor x = embedding_->forward(batch.at("tokens"));
    for (auto& block : blocks_) x = block->forward(x, positions);
    // The tied head; under tp its logits are this rank's vocabulary columns, which the factory's
    // loss reads without gathering them.
    const Tensor logits = embedding_->attend(norm_->forward(x));
    const Tensor& targets = batch.at("targets");
    return {wf::nn::layers_or_default(layers_).vocabulary_loss_sum(logits, targets, options_.vocab_size),
            wf::count_targets(targets)};
  }
  double train_flops_per_token(std::int64_t) const override { return 0; }
  bool causal() const override { return true; }

 private:
  ConsumerOptions options_;
  std::shared_ptr<const wf::nn::LayerFactory> layers_;  // null: the plain layers
  std::shared_ptr<wf::nn::Embedding> embedding_;
  std::vector<std::shared_ptr<wf::nn::TransformerBlock>> blocks_;
  std::shared_ptr<wf::nn::Normalization> norm_;
};

wf::config::ModelSchema consumer_schema() {
  wf::config::ModelSchema schema;
  schema.name = "consumer_lm";
  schema.keys = consumer_keys().keys();
  schema.validate = [](const wf::config::RunConfig& c, std::vector<std::string>& problems) {
    const ConsumerOptions o = consumer_options(c);
    if (o.d_model % o.n_head != 0 || (o.d_model / o.n_head) % 2 != 0) {
      problems.push_back(fmt::format("model.n_head: d_model = {} must split into n_head = {} heads of an even width "
                                     "(rope rotates pairs)",
                                     o.d_model, o.n_head));
    }
  };
  schema.facts = [](const wf::config::RunConfig& c) {
    const ConsumerOptions o = consumer_options(c);
    wf::config::ModelFacts facts;
    facts.description = fmt::format("{} layers, d_model {}", o.n_layer, o.d_model);
    facts.parameters = double(o.vocab_size * o.d_model + o.n_layer * (10 * o.d_model * o.d_model + 2 * o.d_model) +
                              o.d_model);
    facts.causal = true;
    facts.vocab_size = o.vocab_size;
    facts.max_seq_len = o.max_seq_len;
    facts.n_layer = o.n_layer;
    return facts;
  };
  return schema;
}

std::shared_ptr<wf::models::Model> make_consumer_lm(const wf::config::RunConfig& config, wf::comm::CommGrid& grid) {
  auto model = std::make_shared<ConsumerLM>(consumer_options(config), wf::models::tensor_parallel_layers(config, grid));
  wf::models::install_sp_attention(*model, config, grid);
  return model;
}

// The cyclic corpus: token i is cycle[i mod 11]; row r starts at offset 5r + 11·step.
void make_batch(std::int64_t rows, std::int64_t seq_len, std::int64_t step, Tensor& tokens, Tensor& targets) {
  static const std::int64_t cycle[] = {3, 17, 9, 30, 1, 22, 14, 5, 27, 11, 8};
  std::vector<std::int64_t> in, out;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < seq_len; ++i) {
      const std::int64_t at = 5 * r + 11 * step + i;
      in.push_back(cycle[at % 11]);
      out.push_back(cycle[(at + 1) % 11]);
    }
  }
  tokens = Tensor::from_vector(in, {rows, seq_len});
  targets = Tensor::from_vector(out, {rows, seq_len});
}

int train(const std::string& config_path) {
  const wf::config::RunConfig config = wf::config::load_config(config_path);
  wf::train::ParallelTraining parallel(config);
  const bool root = wf::comm::Runtime::get().rank() == 0;
  if (root) std::printf("consumer: %s\n", wf::config::summary(config, wf::comm::Runtime::get().world_size()).c_str());

  // Its own keys are checked like GPT's, in YAML and in --set.
  try {
    wf::config::parse_config("model:\n  name: consumer_lm\n  gate_scale: 11\n", {}, "bad.yaml");
    std::printf("consumer: FAIL: gate_scale 11 was accepted\n");
    return 1;
  } catch (const wf::Error& e) {
    if (std::string(e.what()).find("bad.yaml:3: model.gate_scale: '11' is out of range") == std::string::npos) {
      std::printf("consumer: FAIL: unexpected message: %s\n", e.what());
      return 1;
    }
  }

  auto model = wf::models::create(config, parallel.grid());
  wf::train::AdamW optimizer(model->parameters(), {.lr = config.train.lr, .weight_decay = 0.0});
  const std::int64_t rows = config.parallel.dp * config.train.micro_batch_size;
  double first = 0, last = 0;
  for (std::int64_t step = 0; step < config.train.steps; ++step) {
    Tensor tokens, targets;
    make_batch(rows, config.train.seq_len, step, tokens, targets);
    const wf::models::LossSum loss = model->loss_sum(parallel.shard(tokens, targets));
    wf::autograd::backward({loss.sum});
    last = parallel.sync_gradients(*model, loss);  // over dp x sp (and partial norms over tp)
    if (step == 0) first = last;
    optimizer.step();
    optimizer.zero_grad();
    if (root && (step % 10 == 0 || step + 1 == config.train.steps)) {
      std::printf("consumer: step %lld loss %.4f\n", static_cast<long long>(step + 1), last);
    }
  }
  const bool learned = last < 0.3 * first && first > 0.8 * std::log(32.0);
  if (root) {
    std::printf("consumer: wallfacer %s, %s model '%s' on %d ranks, loss %.3f -> %.3f: %s\n", WF_VERSION,
                learned ? "trained" : "FAILED to train", model->name().c_str(),
                wf::comm::Runtime::get().world_size(), first, last, learned ? "ok" : "FAIL");
  }
  return learned ? 0 : 1;
}

const wf::models::ModelRegistration kRegisterConsumer(consumer_schema(), make_consumer_lm);

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer CONFIG.yaml (under mpirun)\n");
    return 2;
  }
  return wf::comm::run_main(argc, argv, [&] { return train(argv[1]); });
}
