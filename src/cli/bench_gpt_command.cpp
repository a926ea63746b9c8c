// `wallfacer bench gpt`: training-step speed of the GPT model (models/gpt.h) in one process:
// forward + backward + AdamW on random tokens, median over the timed steps, with tokens/s and
// model GFLOP/s (Gpt::train_flops_per_token: 6·N per token for the matmuls plus attention),
// beside OpenBLAS sgemm measured in the same run at the model's MLP shape. scripts/bench-gpt.sh
// runs it at GPT-2 124M shapes and at the tiny preset next to PyTorch (scripts/bench_gpt_torch.py).
//
// --profile adds a rough split of the step: every matmul of the model timed alone with our GEMM
// (forward, input grad and weight grad of each linear), the attention kernel timed alone (forward +
// backward), and the rest (norms, GELU, embeddings, loss, AdamW, copies) as the remainder.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
#include "wallfacer/train/peak_flops.h"
#include "src/core/timing.h"
#include "src/cli/commands.h"
#include "src/cli/option_checks.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/core/threading.h"
#include "wallfacer/models/gpt.h"
#include "wallfacer/ops/ops.h"
#include "wallfacer/train/optimizer.h"

namespace wf::cli {
namespace {

struct Options {
  std::int64_t layers = 12, d_model = 768, heads = 12, kv_heads = 0, vocab = 50257;
  std::int64_t batch = 4, seq = 64;
  int steps = 5, warmup = 1, threads = 0;  // threads 0: OMP_NUM_THREADS or the core count
  bool profile = false, json = false;
  std::string dtype = "f32";  // f32, or bf16 mixed precision (f32 masters, nn/precision.h)
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Tensor random_tokens(std::int64_t batch, std::int64_t tokens, std::int64_t vocab, std::uint64_t seed) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(batch * tokens));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int64_t>(uniform_at(seed, i) * static_cast<double>(vocab));
  }
  return Tensor::from_vector(ids, {batch, tokens});
}

struct StepTimes {
  double step = 0, forward = 0, backward = 0, optimizer = 0;  // medians, seconds
  // Host synchronisations (host_sync_count) per timed step: each is a stall on a GPU; the step
  // itself should make none (the trainer reads its metrics once per logged step).
  double host_syncs = 0;
};

StepTimes time_steps(models::Gpt& model, const Options& o) {
  train::AdamW optimizer(model.parameters(), {.lr = 1e-4});
  const Tensor inputs = random_tokens(o.batch, o.seq, o.vocab, 1);
  const Tensor targets = random_tokens(o.batch, o.seq, o.vocab, 2);
  const Tensor positions = Tensor::arange(0.0, static_cast<double>(o.seq), 1.0, DType::i64);
  std::vector<double> step, forward, backward, update;
  std::int64_t syncs_before = 0;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    if (i == o.warmup) syncs_before = host_sync_count();
    const auto start = Clock::now();
    const Tensor loss = model.loss(inputs, targets);  // the mean: the trainer's scale
    const double f = seconds_since(start);
    autograd::backward({loss});
    const double b = seconds_since(start);
    optimizer.step();
    optimizer.zero_grad();
    const double s = seconds_since(start);
    if (i < o.warmup) continue;
    step.push_back(s);
    forward.push_back(f);
    backward.push_back(b - f);
    update.push_back(s - b);
  }
  const double syncs = static_cast<double>(host_sync_count() - syncs_before) / o.steps;
  return {median(step), median(forward), median(backward), median(update), syncs};
}

struct Profile {
  double matmul = 0, attention = 0;  // seconds per step, each timed alone
};

// The three products of one nn::Linear with x[M, K], W[N, K] as our GEMM computes them in a
// training step: y = x·Wᵀ (forward), dx = dy·W and dW = dyᵀ·x (backward); median of 3 each.
double linear_seconds(std::int64_t m, std::int64_t n, std::int64_t k) {
  Tensor x = Tensor::randn({m, k}), w = Tensor::randn({n, k}), y = Tensor::empty({m, n});
  Tensor dx = Tensor::empty({m, k}), dw = Tensor::empty({n, k});
  const float *X = x.data<float>(), *W = w.data<float>(), *DY = y.data<float>();
  return median_seconds(3, [&] { kernels::cpu::gemm<float>(false, true, m, n, k, 1.0f, X, k, W, k, 0.0f, y.data<float>(), n); }) +
         median_seconds(3, [&] { kernels::cpu::gemm<float>(false, false, m, k, n, 1.0f, DY, n, W, k, 0.0f, dx.data<float>(), k); }) +
         median_seconds(3, [&] { kernels::cpu::gemm<float>(true, false, n, k, m, 1.0f, DY, n, X, k, 0.0f, dw.data<float>(), k); });
}

Profile profile(const models::GptOptions& g, const Options& o) {
  const std::int64_t tokens = o.batch * o.seq, d = g.d_model, hd = d / g.n_head;
  Profile p;
  const double layer = linear_seconds(tokens, (g.n_head + 2 * g.n_kv_head) * hd, d) + linear_seconds(tokens, d, d) +
                       linear_seconds(tokens, g.d_ff, d) + linear_seconds(tokens, d, g.d_ff);
  p.matmul = static_cast<double>(g.n_layer) * layer + linear_seconds(tokens, g.vocab_size, d);

  kernels::cpu::AttentionShape shape;
  shape.batch = o.batch;
  shape.q_len = shape.kv_len = o.seq;
  shape.heads = g.n_head;
  shape.kv_heads = g.n_kv_head;
  shape.head_dim = hd;
  shape.causal = true;
  const Shape qs{o.batch, o.seq, g.n_head, hd}, ks{o.batch, o.seq, g.n_kv_head, hd};
  Tensor q = Tensor::randn(qs), k = Tensor::randn(ks), v = Tensor::randn(ks), d_o = Tensor::randn(qs);
  Tensor out = Tensor::empty(qs), lse = Tensor::empty({o.batch, g.n_head, o.seq});
  Tensor dq = Tensor::empty(qs), dk = Tensor::empty(ks), dv = Tensor::empty(ks);
  const double attention = median_seconds(3, [&] {
    kernels::cpu::attention_forward<float>(shape, q.data<float>(), k.data<float>(), v.data<float>(),
                                           out.data<float>(), lse.data<float>());
    kernels::cpu::attention_backward<float>(shape, q.data<float>(), k.data<float>(), v.data<float>(),
                                            out.data<float>(), lse.data<float>(), d_o.data<float>(), dq.data<float>(),
                                            dk.data<float>(), dv.data<float>());
  });
  p.attention = static_cast<double>(g.n_layer) * attention;
  return p;
}

int run(const Options& o) {
  if (o.threads > 0) set_num_threads(o.threads);
  models::GptOptions g;
  g.vocab_size = o.vocab;
  g.max_seq_len = o.seq;
  g.n_layer = o.layers;
  g.n_head = o.heads;
  g.n_kv_head = o.kv_heads;
  g.d_model = o.d_model;
  models::Gpt model(g);
  g = model.options();  // with n_kv_head and d_ff resolved
  // The precision policy train.dtype applies (models::create), applied here the same way.
  const nn::PrecisionPolicy precision = nn::PrecisionPolicy::for_train_dtype(parse_dtype(o.dtype));
  if (precision.mixed()) model.set_compute_dtype(precision.compute);

  const std::int64_t tokens = o.batch * o.seq;
  const StepTimes t = time_steps(model, o);
  const double flops = model.train_flops_per_token(o.seq) * static_cast<double>(tokens);
  const double gflops = flops / t.step * 1e-9;
  // The yardstick: one thread of the GEMM backend the model runs, at the MLP's first product (the
  // model's commonest shape).
  const double sgemm = train::sgemm_gflops(tokens, g.d_ff, g.d_model, 3);
  const std::string gemm = train::default_gemm_description();
  const int threads = num_threads();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  Profile p;
  if (o.profile) p = profile(g, o);

  if (o.json) {
    nlohmann::ordered_json j;
    j["layers"] = g.n_layer;
    j["d_model"] = g.d_model;
    j["heads"] = g.n_head;
    j["kv_heads"] = g.n_kv_head;
    j["vocab"] = g.vocab_size;
    j["batch"] = o.batch;
    j["seq"] = o.seq;
    j["parameters"] = model.num_parameters();
    j["threads"] = threads;
    j["dtype"] = o.dtype;
    j["steps"] = o.steps;
    j["ms_per_step"] = t.step * 1e3;
    j["forward_ms"] = t.forward * 1e3;
    j["backward_ms"] = t.backward * 1e3;
    j["adamw_ms"] = t.optimizer * 1e3;
    j["host_syncs_per_step"] = t.host_syncs;
    j["tokens_per_s"] = static_cast<double>(tokens) / t.step;
    j["gflop_per_step"] = flops * 1e-9;
    j["gflops"] = gflops;
    j["sgemm_gflops_1thread"] = sgemm;
    j["sgemm_shape"] = fmt::format("{}x{}x{}", tokens, g.d_ff, g.d_model);
    j["blas"] = blas_info();
    j["gemm"] = gemm;
    j["openblas_coretype"] = coretype ? coretype : "";
    if (o.profile) {
      j["profile_matmul_ms"] = p.matmul * 1e3;
      j["profile_attention_ms"] = p.attention * 1e3;
    }
    std::printf("%s\n", j.dump().c_str());
    return kExitOk;
  }
  std::printf("wallfacer bench gpt: %lld layers, d %lld, %lld heads (%lld kv), vocab %lld, B %lld, T %lld: "
              "%.1fM parameters, %lld tokens/step, %s\n",
              static_cast<long long>(g.n_layer), static_cast<long long>(g.d_model), static_cast<long long>(g.n_head),
              static_cast<long long>(g.n_kv_head), static_cast<long long>(g.vocab_size),
              static_cast<long long>(o.batch), static_cast<long long>(o.seq),
              static_cast<double>(model.num_parameters()) * 1e-6, static_cast<long long>(tokens),
              precision.mixed() ? "bf16 (f32 masters)" : "f32");
  if (precision.mixed()) std::printf("bf16 products: %s\n", kernels::cpu::gemm_bf16_path());
  std::printf("threads %d, %s, OPENBLAS_CORETYPE=%s\n", threads, blas_info(), coretype ? coretype : "(unset)");
  std::printf("gemm: %s\n", gemm.c_str());
  std::printf("step (forward+backward+AdamW): %.1f ms (median of %d; forward %.1f, backward %.1f, AdamW %.1f ms)\n",
              t.step * 1e3, o.steps, t.forward * 1e3, t.backward * 1e3, t.optimizer * 1e3);
  std::printf("host synchronisations per step: %.1f\n", t.host_syncs);
  std::printf("tokens/s: %.1f\n", static_cast<double>(tokens) / t.step);
  std::printf("model GFLOP/step (6·N·tokens + attention): %.2f -> %.1f GFLOP/s\n", flops * 1e-9, gflops);
  std::printf("sgemm (the gemm above, 1 thread, %lldx%lldx%lld): %.1f GFLOP/s; x %d thread(s) = %.1f -> step at %.2f of it\n",
              static_cast<long long>(tokens), static_cast<long long>(g.d_ff), static_cast<long long>(g.d_model), sgemm,
              threads, sgemm * threads, gflops / (sgemm * threads));
  if (o.profile) {
    const double rest = t.step - p.matmul - p.attention;
    std::printf("rough profile per step: matmuls %.1f ms (every product timed alone: forward, dx, dW), attention "
                "%.1f ms (kernel fwd+bwd alone), rest %.1f ms%s\n",
                p.matmul * 1e3, p.attention * 1e3, rest * 1e3,
                rest < 0 ? " (negative: the parts timed alone took longer than the step; rerun on a quieter machine)"
                         : "");
  }
  return kExitOk;
}

}  // namespace

void add_bench_gpt_command(CLI::App& bench) {
  auto o = std::make_shared<Options>();
  CLI::App* command = bench.add_subcommand(
      "gpt", "GPT training step (forward+backward+AdamW): ms/step, tokens/s, GFLOP/s beside OpenBLAS sgemm");
  command->add_option("--layers", o->layers, "transformer blocks (default: GPT-2 124M's 12)")->check(positive());
  command->add_option("--d-model", o->d_model, "model width")->check(positive());
  command->add_option("--heads", o->heads, "attention heads (must divide --d-model)")->check(positive());
  command->add_option("--kv-heads", o->kv_heads, "key/value heads for GQA (0: --heads)")->check(non_negative());
  command->add_option("--vocab", o->vocab, "vocabulary size")->check(positive());
  command->add_option("--batch", o->batch, "sequences per step")->check(positive());
  command->add_option("--seq", o->seq, "tokens per sequence")->check(positive());
  command->add_option("--steps", o->steps, "timed steps (the median is printed)")->check(positive());
  command->add_option("--warmup", o->warmup, "untimed steps first")->check(non_negative());
  command->add_option("--threads", o->threads, "CPU threads (default: OMP_NUM_THREADS or the core count)")
      ->check(non_negative());
  command->add_option("--dtype", o->dtype, "f32, or bf16: mixed precision as train.dtype: bf16 runs it")
      ->check(CLI::IsMember({"f32", "bf16"}));
  command->add_flag("--profile", o->profile, "add a rough split: matmuls, attention, rest (f32 products)");
  command->add_flag("--json", o->json, "one JSON object instead of the text");
  set_action(*command, [o] { return run(*o); });
}

}  // namespace wf::cli
