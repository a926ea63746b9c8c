#pragma once
// Per-model configuration: every registered model declares the keys of its `model:` section
// (type, default, range), its rules across keys and against the layout, and the facts the
// config layer needs without building it (parameter count, FLOPs per token, the attention mask,
// the sequence limit). load_config reads `model.*` through the schema of `model.name`, and
// `wallfacer validate` runs its rules, so a model registered by an embedding program is
// nameable, checked and reported in YAML exactly like GPT (docs/adding-a-model.md).
//
// A model states its keys once, bound to the members of its own options struct, with
// ModelKeys<Options>: the defaults are those of Options{}, and read() turns a config's model
// section into Options:
//
//   const config::ModelKeys<LlamaOptions>& llama_keys() {
//     static const auto keys = config::ModelKeys<LlamaOptions>()
//         .integer("n_layer", &LlamaOptions::n_layer, 1)
//         .number("rope_theta", &LlamaOptions::rope_theta, 0.0, false);
//     return keys;
//   }
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "wallfacer/config/model_config.h"
#include "wallfacer/core/error.h"
#include "wallfacer/config/value_text.h"

namespace wf::config {

struct RunConfig;

// One key of a model's section.
struct ModelKey {
  std::string key;           // "n_layer" (the path is "model.n_layer")
  std::string expected;      // "an integer >= 1"
  std::string default_text;  // the default, as to_yaml writes it
  bool is_text = false;      // a string: a YAML null reads as ""
  // Checks `text`: "" and its canonical spelling in `canonical` when it fits, else the problem.
  std::function<std::string(std::string_view text, std::string& canonical)> check;
};

// The shape of a model's repeated transformer blocks: what a cost model needs to predict a
// training step without building the model (`wallfacer tune`, tune/cost_model.h).
struct BlockShape {
  std::int64_t n_layer = 0, n_head = 0, n_kv_head = 0, d_model = 0, d_ff = 0;
  int feed_forward_matrices = 2;      // d_model × d_ff matrices in the feed-forward: GELU MLP 2, SwiGLU 3
  bool checkpoint_attention = false;  // the activation checkpoint at the attention output
  std::int64_t head_width = 0;        // the output layer's width (a vocabulary; 0: no large head)
  std::int64_t extra_rows = 0;        // rows a sequence carries besides its tokens (DiT's conditioning)
};

// What the config layer knows of a configured model without building it.
struct ModelFacts {
  std::string description;            // for the config summary: "4 layers, d_model 256, 4 heads (4 kv)"
  double parameters = 0;              // elements of the whole model (double: absurd sizes must not wrap)
  double train_flops_per_token = 0;   // forward + backward matmul and attention FLOPs, per token
  bool causal = true;                 // the attention mask; decides the sequence layout (zigzag)
  std::int64_t vocab_size = 0;        // 0: no token vocabulary (then no tokenizer check)
  std::int64_t max_seq_len = 0;       // the longest train.seq_len it supports; 0: no limit
  std::int64_t n_layer = 0;           // blocks, which pipeline stages divide; 0: not divisible
  // Activation bytes one token keeps for the backward through the whole model (f32), for the
  // memory estimate `validate` prints and checks.
  double activation_bytes_per_token = 0;
  // The part of it every tensor-parallel rank holds whole (the residual stream, the norms' and
  // the blocks' d_model-wide inputs and outputs) unless parallel.tp_shard_activations splits it;
  // the rest (heads, the feed-forward's hidden, vocabulary-parallel logits) tp splits.
  double activation_bytes_per_token_tp_replicated = 0;
  // A head whose loss runs fused in chunks of rows when tp does not split the vocabulary
  // (ops/loss.h linear_cross_entropy_sum): at tp = 1 the per-token logits and their gradient
  // (head_logits_bytes_per_token, counted in activation_bytes_per_token for tp > 1's split head)
  // give way to fused_head_bytes_per_token (the f32 dh it holds) and fused_head_bytes, its fixed
  // working set (a chunk's logits and their gradient, and W's f32 gradient). All 0: no such head.
  double head_logits_bytes_per_token = 0;
  double fused_head_bytes_per_token = 0;
  double fused_head_bytes = 0;
  BlockShape blocks;
};

struct ModelSchema {
  std::string name;
  std::vector<ModelKey> keys;
  // Rules across keys and against the layout: appends "model.key: rule; the fix" lines. May be
  // empty. Only called on a config whose layout passed the grid checks.
  std::function<void(const RunConfig&, std::vector<std::string>& problems)> validate;
  // Required; called only when validate found no problem.
  std::function<ModelFacts(const RunConfig&)> facts;
  // What data.train_path and val_path hold: token files (language models) or IDX image files
  // with their labels in data.train_labels_path and val_labels_path (image models).
  bool image_data = false;

  const ModelKey* find(std::string_view key) const;  // nullptr when the model has no such key
  std::vector<std::string> key_names() const;
};

// Registers the schema of a model; wf::Error when the name is taken. models::register_model
// calls it with the factory, so a model is registered once.
void register_model_schema(ModelSchema schema);
const ModelSchema* find_model_schema(std::string_view name);
// wf::Error naming the registered models (with a close spelling) when there is none.
const ModelSchema& model_schema(std::string_view name);
std::vector<std::string> model_schema_names();  // sorted
// The facts of the model config.model describes.
ModelFacts model_facts(const RunConfig& config);

// The rule for a size that tensor parallelism splits into equal whole parts over parallel.tp
// (query heads, kv heads, feed-forward units), for a model's validate: "" when tp divides
// `value`, else "model.<key>: tensor parallelism splits <what> over parallel.tp = T, but <key> =
// V<why>; use tp in {..} or <key> a multiple of T", the tp values listed being those that divide
// both `value` and the world (dp x tp x pp x sp). `why`, when given, is inserted as is.
std::string tp_split_problem(const RunConfig& config, std::string_view key, std::int64_t value,
                             std::string_view what, std::string_view why = "");

// ---- declaring keys on an options struct -------------------------------------------------

template <class Options>
class ModelKeys {
 public:
  ModelKeys& integer(std::string key, std::int64_t Options::*member, std::int64_t min,
                     std::int64_t max = std::numeric_limits<std::int64_t>::max()) {
    return add(std::move(key), integer_expected(min, max), member,
               [min, max](std::string_view text, std::int64_t& out) { return parse_integer(text, min, max, out); },
               [](std::int64_t v) { return fmt::format("{}", v); });
  }
  ModelKeys& number(std::string key, double Options::*member, double lo, bool lo_closed,
                    double hi = std::numeric_limits<double>::infinity(), bool hi_closed = false) {
    return add(std::move(key), number_expected(lo, lo_closed, hi, hi_closed), member,
               [=](std::string_view text, double& out) { return parse_number(text, lo, lo_closed, hi, hi_closed, out); },
               [](double v) { return number_text(v); });
  }
  ModelKeys& boolean(std::string key, bool Options::*member) {
    return add(std::move(key), kBooleanExpected, member, [](std::string_view text, bool& out) { return parse_boolean(text, out); },
               [](bool v) { return std::string(v ? "true" : "false"); });
  }
  // A string; may_be_empty false refuses "" (a YAML null reads as "").
  ModelKeys& text(std::string key, std::string Options::*member, bool may_be_empty = true) {
    add(std::move(key), may_be_empty ? "a string" : "a non-empty string", member,
        [may_be_empty](std::string_view text, std::string& out) -> std::string {
          if (text.empty() && !may_be_empty) return "is empty";
          out = std::string(text);
          return "";
        },
        [](const std::string& v) { return v; });
    bindings_.back().key.is_text = true;
    return *this;
  }
  template <class E>
  ModelKeys& choice(std::string key, E Options::*member, Choices<E> choices) {
    const std::string expected = choices_expected(choices);
    return add(std::move(key), expected, member,
               [choices](std::string_view text, E& out) { return parse_choice(text, choices, out); },
               [choices](E v) { return choice_text(choices, v); });
  }

  std::vector<ModelKey> keys() const {
    std::vector<ModelKey> out;
    for (const Binding& b : bindings_) out.push_back(b.key);
    return out;
  }
  // Options{} with every value the section gives (each already checked when it was set).
  Options read(const ModelConfig& model) const;

 private:
  struct Binding {
    ModelKey key;
    std::function<void(Options&, std::string_view)> apply;
  };

  template <class T, class Parse, class Print>
  ModelKeys& add(std::string key, std::string expected, T Options::*member, Parse parse, Print print) {
    Binding b;
    b.key.key = std::move(key);
    b.key.expected = std::move(expected);
    b.key.default_text = print(Options{}.*member);
    b.key.check = [parse, print](std::string_view text, std::string& canonical) {
      T value{};
      std::string problem = parse(text, value);
      if (problem.empty()) canonical = print(value);
      return problem;
    };
    b.apply = [parse, member, key = b.key.key](Options& options, std::string_view text) {
      // Values were checked when they were set (ModelConfig::set); one that no longer parses is
      // a bug, never a silent default.
      const std::string problem = parse(text, options.*member);
      WF_CHECK(problem.empty(), "model.{}: stored value '{}' {}", key, text, problem);
    };
    bindings_.push_back(std::move(b));
    return *this;
  }

  std::vector<Binding> bindings_;
};

template <class Options>
Options ModelKeys<Options>::read(const ModelConfig& model) const {
  Options options{};
  for (const Binding& b : bindings_) {
    if (const auto it = model.values.find(b.key.key); it != model.values.end()) b.apply(options, it->second);
  }
  return options;
}

}  // namespace wf::config
