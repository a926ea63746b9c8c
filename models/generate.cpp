#include "wallfacer/models/generate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/ops/ops.h"

namespace wf::models {

std::int64_t sample_token(const float* logits, std::int64_t vocab, double temperature, std::int64_t top_k, double u) {
  WF_CHECK(vocab > 0, "sample_token: empty vocabulary");
  if (temperature <= 0) return std::max_element(logits, logits + vocab) - logits;
  std::vector<std::int64_t> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const std::int64_t k = top_k > 0 ? std::min(top_k, vocab) : vocab;
  // The k likeliest first; ties broken by id so the result does not depend on the sort.
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int64_t a, std::int64_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  // Softmax over the k candidates at this temperature, in f64, shifted by the maximum.
  std::vector<double> weights(static_cast<std::size_t>(k));
  const double top = logits[order[0]];
  double total = 0;
  for (std::int64_t i = 0; i < k; ++i) total += weights[i] = std::exp((logits[order[i]] - top) / temperature);
  double target = u * total;
  for (std::int64_t i = 0; i < k; ++i) {
    target -= weights[i];
    if (target < 0) return order[i];
  }
  return order[k - 1];
}

std::vector<std::uint32_t> generate(Model& model, const std::vector<std::uint32_t>& prompt, const GenerateOptions& options,
                                    const std::function<void(std::uint32_t)>& on_token) {
  require_logits(model);
  WF_CHECK(!prompt.empty(), "generate: the prompt is empty; give at least one token");
  const std::int64_t vocab = model.vocab_size();
  const std::int64_t window = model.max_context() > 0 ? model.max_context() : std::numeric_limits<std::int64_t>::max();
  for (std::uint32_t id : prompt) {
    WF_CHECK(id < vocab, "generate: prompt token {} is outside the model's vocabulary of {}", id, vocab);
  }
  autograd::NoGradGuard no_grad;
  model.eval();
  std::vector<std::uint32_t> tokens = prompt;
  // The context is built on the host and joins the parameters on their device; each new token is
  // drawn on the host from the last position's logits (one read per token: it picks the next input).
  const Device device = model.parameters().empty() ? Device::cpu() : model.parameters().front().device();
  for (std::int64_t i = 0; i < options.max_new_tokens; ++i) {
    const std::int64_t n = std::min<std::int64_t>(static_cast<std::int64_t>(tokens.size()), window);
    std::vector<std::int64_t> context(tokens.end() - n, tokens.end());
    const Tensor positions = Tensor::arange(0.0, static_cast<double>(n), 1.0, DType::i64).to(device);
    const Tensor logits = model.logits(Tensor::from_vector(context, {1, n}).to(device), positions);  // [1, n, vocab]
    WF_CHECK(logits.dtype() == DType::f32, "generate: expects an f32 model, got {} logits", dtype_name(logits.dtype()));
    const std::vector<float> last = narrow(logits, 1, n - 1, 1).to(Device::cpu()).to_vector<float>();
    const double u = uniform_at(options.seed, static_cast<std::uint64_t>(i));
    tokens.push_back(
        static_cast<std::uint32_t>(sample_token(last.data(), vocab, options.temperature, options.top_k, u)));
    if (on_token) on_token(tokens.back());
  }
  return tokens;
}

}  // namespace wf::models
