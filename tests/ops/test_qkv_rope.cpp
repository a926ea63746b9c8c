// split_qkv_rope: q, k, v and the projection's gradient bit for bit those of the composition it
// replaced in SelfAttention (reshape, narrow, reshape, then rope on q and k) in f32, f64 and bf16,
// on the CPU and the test device, GQA G = 1, 2, 4, positions [T] and [B, T] in i64 and i32, rope on
// and off; f64 gradcheck; errors.
#include <catch2/catch.hpp>

#include "ops/ops_testing.h"
#include "src/ops/qkv_rope_composed.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/ops/ops.h"

using namespace wf;
using namespace wf::testing;

namespace {

struct Layout {
  std::int64_t batch, tokens, groups, group_size, head_dim;
  Shape projected() const { return {batch, tokens, groups * (group_size + 2) * head_dim}; }
};

// {q, k, v, d projected} for upstream gradients drawn from fixed seeds, on `device`.
TensorList run(bool fused, const Layout& l, DType dtype, const Tensor& positions, Device device) {
  Tensor projected = random(l.projected(), 1, dtype).to(device);
  projected.set_requires_grad(true);
  const Tensor pos = positions.defined() ? positions.to(device) : Tensor();
  const double theta = 500.0;
  const QkvHeads h = fused ? split_qkv_rope(projected, l.groups, l.group_size, l.head_dim, pos, theta)
                           : ops::composed_split_qkv_rope(projected, l.groups, l.group_size, l.head_dim, pos, theta);
  const auto grad_for = [&](const Tensor& t, std::uint64_t seed) { return random(t.shape(), seed, dtype).to(device); };
  autograd::backward({h.q, h.k, h.v}, {grad_for(h.q, 2), grad_for(h.k, 3), grad_for(h.v, 4)});
  return {h.q.detach(), h.k.detach(), h.v.detach(), projected.grad()};
}

Tensor shared_positions(std::int64_t tokens, DType dtype) {
  Tensor p = Tensor::empty({tokens}, DType::i64);
  for (std::int64_t t = 0; t < tokens; ++t) p.set(t, static_cast<double>(t % 2 == 0 ? 3 * t : 4001 - t));
  return p.to(dtype);
}

Tensor per_row_positions(std::int64_t batch, std::int64_t tokens, DType dtype) {
  Tensor p = Tensor::empty({batch, tokens}, DType::i64);
  for (std::int64_t i = 0; i < batch * tokens; ++i) p.set(i, static_cast<double>((i * 7) % 5));  // packed documents
  return p.to(dtype);
}

}  // namespace

TEST_CASE("split_qkv_rope is bitwise the narrow + reshape + rope composition, gradients included", "[ops][rope]") {
  for (const Layout l : {Layout{2, 5, 3, 1, 8}, Layout{1, 7, 2, 2, 6}, Layout{2, 3, 1, 4, 4}}) {
    for (const DType dtype : {DType::f32, DType::f64, DType::bf16}) {
      for (const Device device : {Device::cpu(), Device::test()}) {
        const std::vector<Tensor> positions = {Tensor(), shared_positions(l.tokens, DType::i64),
                                               shared_positions(l.tokens, DType::i32),
                                               per_row_positions(l.batch, l.tokens, DType::i64),
                                               per_row_positions(l.batch, l.tokens, DType::i32)};
        for (std::size_t p = 0; p < positions.size(); ++p) {
          CAPTURE(l.batch, l.tokens, l.groups, l.group_size, l.head_dim, dtype_name(dtype), device.str(), p);
          const TensorList got = run(true, l, dtype, positions[p], device);
          const TensorList want = run(false, l, dtype, positions[p], device);
          for (std::size_t i = 0; i < got.size(); ++i) {
            CAPTURE(i);  // q, k, v, d projected
            require_bitwise(got[i], want[i]);
          }
        }
      }
    }
  }
}

TEST_CASE("split_qkv_rope gradients (f64 gradcheck), rope on and off", "[ops][rope]") {
  const Tensor pos = shared_positions(3, DType::i64);
  for (const bool rotate : {true, false}) {
    CAPTURE(rotate);
    require_gradcheck(
        [&](const TensorList& in) {
          const QkvHeads h = split_qkv_rope(in[0], 2, 2, 4, rotate ? pos : Tensor(), 100.0);
          return TensorList{h.q, h.k, h.v};
        },
        {random_leaf({2, 3, 2 * 4 * 4}, 7)});
  }
}

TEST_CASE("split_qkv_rope: argument errors name the problem", "[ops][rope]") {
  const Tensor projected = random({1, 3, 2 * 4 * 4}, 5);
  const Tensor pos = shared_positions(3, DType::i64);
  CHECK_THROWS_WITH(split_qkv_rope(projected, 2, 2, 2, pos), Catch::Contains("groups·(group_size + 2)·head_dim"));
  CHECK_THROWS_WITH(split_qkv_rope(random({3, 32}, 5), 2, 2, 4, pos), Catch::Contains("must be [batch, tokens"));
  CHECK_THROWS_WITH(split_qkv_rope(projected, 2, 2, 4, shared_positions(2, DType::i64)),
                    Catch::Contains("positions must be [tokens] = [3]"));
  CHECK_THROWS_WITH(split_qkv_rope(projected, 2, 2, 4, Tensor::zeros({3})), Catch::Contains("must be i64 or i32"));
  // An odd head_dim splits without rope and is an error with it.
  const Tensor odd = random({1, 3, 1 * 3 * 3}, 6);
  CHECK(split_qkv_rope(odd, 1, 1, 3, Tensor()).q.shape() == Shape{1, 3, 1, 3});
  CHECK_THROWS_WITH(split_qkv_rope(odd, 1, 1, 3, pos), Catch::Contains("head_dim 3 is odd"));
}
