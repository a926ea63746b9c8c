// The shared op case list (tests/support/op_cases.h).
#include "support/op_cases.h"

#include <cmath>

#include "wallfacer/ops/ops.h"

namespace wf::parity {

std::vector<Tensor> make_op_inputs(const std::vector<OpInput>& inputs, DType dtype, std::uint64_t seed) {
  std::vector<Tensor> out;
  for (const OpInput& in : inputs) {
    if (in.floating) {
      out.push_back(Tensor::randn_at(in.shape, seed++, 0, DType::f64).to(dtype));
    } else {
      Tensor u = Tensor::rand_at(in.shape, seed++, 0, DType::f64);
      Tensor ids = Tensor::empty(in.shape, DType::i64);
      for (std::int64_t i = 0; i < u.numel(); ++i) ids.set(i, std::floor(u.at(i) * double(in.high)));
      out.push_back(ids);
    }
  }
  return out;
}

std::vector<Tensor> op_outputs_on(const OpCase& c, const std::vector<Tensor>& host_inputs, Device device,
                                  std::uint64_t seed) {
  std::vector<Tensor> inputs;
  for (std::size_t i = 0; i < host_inputs.size(); ++i) {
    Tensor t = host_inputs[i].to(device);
    if (c.inputs[i].floating) t.set_requires_grad(true);
    inputs.push_back(t);
  }
  const Tensor out = c.run(inputs);
  std::vector<Tensor> results{out.detach().to(Device::cpu())};
  if (is_floating(out.dtype())) {
    const Tensor upstream = Tensor::randn_at(out.shape(), seed, 0, DType::f64).to(out.dtype()).to(device);
    out.backward(upstream);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (c.inputs[i].floating) results.push_back(inputs[i].grad().defined() ? inputs[i].grad().to(Device::cpu())
                                                                              : Tensor());
    }
  }
  return results;
}

namespace {

Tensor qkv_side_by_side(const Tensor& projected, const Tensor& positions) {
  const QkvHeads h = split_qkv_rope(projected, 2, 2, 4, positions);
  const auto flat = [](const Tensor& t) { return wf::reshape(t, {t.size(0), t.size(1), -1}); };
  return wf::cat({flat(h.q), flat(h.k), flat(h.v)}, -1);
}

}  // namespace

std::vector<OpCase> op_cases() {
  using V = const std::vector<Tensor>&;
  const OpInput x{{3, 5, 8}}, row{{8}}, w{{6, 8}}, ids{{3, 5}, false, 6};
  wf::AttentionOptions causal;
  causal.causal = true;
  wf::AttentionOptions offset;
  offset.causal = true;
  offset.q_offset = 4;
  return {
      {"add (broadcast)", {x, row}, [](V t) { return wf::add(t[0], t[1]); }},
      {"sub", {x, x}, [](V t) { return wf::sub(t[0], t[1]); }},
      {"mul (broadcast)", {x, {{5, 1}}}, [](V t) { return wf::mul(t[0], t[1]); }},
      {"div", {x, x}, [](V t) { return wf::div(t[0], wf::add_scalar(wf::mul(t[1], t[1]), 1.0)); }},
      {"neg, scale, add_scalar", {x}, [](V t) { return wf::add_scalar(wf::scale(wf::neg(t[0]), 0.3), 0.7); }},
      {"bias_residual_add", {x, row, x}, [](V t) { return wf::bias_residual_add(t[0], t[1], t[2]); }},
      {"gelu", {x}, [](V t) { return wf::gelu(t[0]); }},
      {"silu", {x}, [](V t) { return wf::silu(t[0]); }},
      {"exp", {x}, [](V t) { return wf::exp(t[0]); }},
      {"ln", {x}, [](V t) { return wf::ln(wf::add_scalar(wf::mul(t[0], t[0]), 0.5)); }},
      {"tanh", {x}, [](V t) { return wf::tanh(t[0]); }},
      {"softmax over dim 1", {x}, [](V t) { return wf::softmax(t[0], 1); }},
      {"log_softmax", {x}, [](V t) { return wf::log_softmax(t[0]); }},
      {"dropout", {x}, [](V t) {
         wf::Generator gen(11);
         return wf::dropout(t[0], 0.25, true, &gen);
       }},
      {"dropout_slice", {x}, [](V t) {
         wf::Generator gen(12);
         return wf::dropout_slice(t[0], 0.5, true, 1, 3, 2, &gen);
       }},
      {"sum", {x}, [](V t) { return wf::sum(t[0]); }},
      {"sum over dim", {x}, [](V t) { return wf::sum(t[0], 1, true); }},
      {"mean", {x}, [](V t) { return wf::mean(t[0], -1); }},
      {"max", {x}, [](V t) { return wf::max(t[0], 2); }},
      {"argmax", {x}, [](V t) { return wf::argmax(t[0], 1); }},
      {"sum_to_shape", {x}, [](V t) { return wf::sum_to_shape(t[0], {5, 1}); }},
      {"matmul (batched, shared b)", {x, {{8, 4}}}, [](V t) { return wf::matmul(t[0], t[1]); }},
      {"matmul (transposed)", {x, {{3, 6, 8}}}, [](V t) { return wf::matmul(t[0], t[1], false, true); }},
      {"linear", {x, w, {{6}}}, [](V t) { return wf::linear(t[0], t[1], t[2]); }},
      // linear_gelu twice: 6 outputs take cuda's unfused path (its GELU epilogue needs a multiple of 8),
      // 16 the epilogue.
      {"linear_gelu", {x, w, {{6}}}, [](V t) { return wf::linear_gelu(t[0], t[1], t[2]); }},
      {"linear_gelu (16 outputs)", {x, {{16, 8}}, {{16}}}, [](V t) { return wf::linear_gelu(t[0], t[1], t[2]); }},
      {"linear_add", {x, w, {{6}}, {{3, 5, 6}}}, [](V t) { return wf::linear_add(t[0], t[1], t[2], t[3]); }},
      {"layer_norm", {x, row, row}, [](V t) { return wf::layer_norm(t[0], t[1], t[2]); }},
      {"rms_norm", {x, row}, [](V t) { return wf::rms_norm(t[0], t[1]); }},
      // The fused residual add: both outputs side by side, so both carry gradient.
      {"add_layer_norm", {x, x, row, row}, [](V t) {
         const wf::AddNorm r = wf::add_layer_norm(t[0], t[1], t[2], t[3]);
         return wf::cat({r.sum, r.y}, -1);
       }},
      {"add_rms_norm", {x, x, row}, [](V t) {
         const wf::AddNorm r = wf::add_rms_norm(t[0], t[1], t[2]);
         return wf::cat({r.sum, r.y}, -1);
       }},
      {"embedding", {ids, w}, [](V t) { return wf::embedding(t[0], t[1]); }},
      {"cross_entropy", {{{3, 5, 6}}, ids}, [](V t) { return wf::cross_entropy(t[0], t[1], 2); }},
      {"cross_entropy_sum", {{{3, 5, 6}}, ids}, [](V t) { return wf::cross_entropy_sum(t[0], t[1]); }},
      // 15 rows in chunks of 4 (the last one short), class 2 ignored.
      {"linear_cross_entropy_sum", {x, w, ids}, [](V t) { return wf::linear_cross_entropy_sum(t[0], t[1], t[2], 2, 4); }},
      {"rope", {{{2, 5, 3, 8}}, {{5}, false, 100}}, [](V t) { return wf::rope(t[0], t[1]); }},
      // The QKV split with RoPE (2 kv groups of 2 query heads, head_dim 4), and the plain split: q, k
      // and v side by side, so all three carry gradient.
      {"split_qkv_rope", {{{2, 5, 32}}, {{5}, false, 100}}, [](V t) { return qkv_side_by_side(t[0], t[1]); }},
      {"split_qkv_rope (no rope)", {{{2, 5, 32}}}, [](V t) { return qkv_side_by_side(t[0], Tensor()); }},
      {"attention (causal, grouped heads, lse used)", {{{2, 6, 4, 8}}, {{2, 6, 2, 8}}, {{2, 6, 2, 8}}},
       [causal](V t) {
         const wf::AttentionResult r = wf::attention(t[0], t[1], t[2], causal);
         return wf::add(wf::sum(r.out, -1), wf::permute(r.lse, {0, 2, 1}));
       }},
      {"attention (offset block)", {{{1, 4, 2, 8}}, {{1, 6, 2, 8}}, {{1, 6, 2, 8}}},
       [offset](V t) { return wf::attention(t[0], t[1], t[2], offset).out; }},
      {"permute, transpose, reshape", {x}, [](V t) {
         return wf::reshape(wf::transpose(wf::permute(t[0], {2, 0, 1}), 0, 1), {-1, 8});
       }},
      {"narrow, cat, split", {x, x}, [](V t) {
         const std::vector<Tensor> parts = wf::split(wf::cat({t[0], t[1]}, 1), 2, 1);
         return wf::add(wf::narrow(parts[1], 2, 1, 4), wf::narrow(parts[4], 2, 3, 4));
       }},
      {"cast", {x}, [](V t) { return wf::cast(wf::cast(t[0], DType::f64), DType::f32); }},
  };
}

}  // namespace wf::parity
