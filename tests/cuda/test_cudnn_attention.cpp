// cuDNN's fused attention (kernels/cuda/cudnn_attention.cpp) against the CPU's bf16 attention on the
// same fresh random bf16 inputs: o and lse, and dq, dk, dv written and accumulated; full and causal
// (top-left, a ring diagonal, bottom-right, a ring's earlier block), GQA, head_dim 64 and 128. Then the per-shape choice
// (attention_choice.h) through the backend's entries: the first call measures both and the second
// runs the cached choice, both with the CPU's results.
//
// Tolerances (parity_tolerance.h's form: |gpu − cpu| <= rtol·|cpu| + floor·max|cpu|):
//   o and lse 2e-2 + 2e-2·max: the CUDA suite's bf16 attention tolerance (tests/cuda/test_attention.cpp:
//     P rounded to bf16 before P·V on both sides, one bf16 step apart where the f32 values straddle a
//     rounding boundary), which also covers cuDNN's O written in bf16 (one more rounding, 2^-9).
//   dq, dk, dv 3e-2 + 3e-2·max: the same, plus cuDNN's gradients written in bf16 (2^-9) after a sum of
//     q_len (or kv_len) products that cancels: a bf16 step of the largest term on top of 2e-2.
// Not run without a GPU (CTest reports the suite as not run); never run as of this writing.
#include <string>
#include <vector>

#include "kernels/cuda/attention_choice.h"
#include "kernels/cuda/cudnn_attention.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/parity_tolerance.h"
#include "wallfacer/build_info.h"
#include "wallfacer/ops/arithmetic.h"

namespace {

using namespace wf;
using namespace wf::cuda_test;
using kernels::AttentionShape;

constexpr Tolerance kForward{2e-2, 2e-2};
constexpr Tolerance kGradient{3e-2, 3e-2};

AttentionShape shape(std::int64_t batch, std::int64_t q_len, std::int64_t kv_len, std::int64_t heads,
                     std::int64_t kv_heads, std::int64_t head_dim, bool causal, std::int64_t q_offset = 0,
                     std::int64_t kv_offset = 0) {
  AttentionShape s;
  s.batch = batch;
  s.q_len = q_len;
  s.kv_len = kv_len;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.causal = causal;
  s.q_offset = q_offset;
  s.kv_offset = kv_offset;
  return s;
}

std::vector<AttentionShape> shapes() {
  return {
      shape(2, 128, 128, 4, 4, 64, false),         // full, d 64
      shape(1, 200, 200, 8, 2, 128, false),        // full, GQA 4:1, d 128, lengths off the tiles
      shape(2, 64, 256, 4, 2, 64, false),          // q_len != kv_len
      shape(1, 256, 256, 4, 1, 64, true),          // causal top-left, MQA
      shape(2, 100, 100, 2, 2, 128, true),         // causal, d 128
      shape(1, 128, 128, 4, 2, 64, true, 512, 512),  // a zigzag ring's diagonal block
      shape(1, 64, 256, 4, 2, 64, true, 192, 0),   // causal bottom-right
      shape(1, 64, 128, 4, 2, 64, true, 128, 0),   // a ring step's earlier block: causal, nothing masked
  };
}

Shape q_shape(const AttentionShape& s) { return {s.batch, s.q_len, s.heads, s.head_dim}; }
Shape kv_shape(const AttentionShape& s) { return {s.batch, s.kv_len, s.kv_heads, s.head_dim}; }
Shape lse_shape(const AttentionShape& s) { return {s.batch, s.heads, s.q_len}; }

struct Case {
  Tensor q, k, v, d_o;       // bf16 on the CPU
  Tensor o, lse;             // the CPU's forward (f32)
  Tensor dq, dk, dv;         // the CPU's backward, written
  Tensor start_q, start_kv;  // what accumulated gradients start from
};

Case cpu_case(const AttentionShape& s, std::uint64_t seed) {
  Case c;
  c.q = random_normal(q_shape(s), seed + 1, DType::bf16);
  c.k = random_normal(kv_shape(s), seed + 2, DType::bf16);
  c.v = random_normal(kv_shape(s), seed + 3, DType::bf16);
  c.d_o = random_normal(q_shape(s), seed + 4, DType::bf16);
  c.o = Tensor::empty(q_shape(s), DType::f32, Device::cpu());
  c.lse = Tensor::empty(lse_shape(s), DType::f32, Device::cpu());
  cpu_kernels().attention_forward(cpu_stream(), DType::bf16, s, c.q.raw_data(), c.k.raw_data(), c.v.raw_data(),
                                  c.o.raw_data(), c.lse.raw_data());
  c.dq = Tensor::empty(q_shape(s), DType::f32, Device::cpu());
  c.dk = Tensor::empty(kv_shape(s), DType::f32, Device::cpu());
  c.dv = Tensor::empty(kv_shape(s), DType::f32, Device::cpu());
  cpu_kernels().attention_backward(cpu_stream(), DType::bf16, s, c.q.raw_data(), c.k.raw_data(), c.v.raw_data(),
                                   c.o.raw_data(), c.lse.raw_data(), c.d_o.raw_data(), c.dq.raw_data(),
                                   c.dk.raw_data(), c.dv.raw_data(), false, nullptr);
  c.start_q = random_normal(q_shape(s), seed + 5, DType::f32);
  c.start_kv = random_normal(kv_shape(s), seed + 6, DType::f32);
  return c;
}

// A build without cuDNN refuses every shape (the own kernels run them): what these cases check there.
bool refused_without_cudnn() {
  if (WF_BUILT_WITH_CUDNN) return false;
  CHECK(!kernels::cuda::cudnn_attention_supported(shape(1, 64, 64, 2, 2, 64, false), DType::bf16));
  return true;
}

std::string describe(const AttentionShape& s) {
  return kernels::cuda::cudnn_plan_key_text(kernels::cuda::cudnn_plan_key(0, s, false)) + " offsets " +
         std::to_string(s.q_offset) + "/" + std::to_string(s.kv_offset);
}

}  // namespace

TEST_CASE("cudnn attention: forward and backward match the CPU's bf16 attention", "[cuda][cudnn]") {
  if (refused_without_cudnn()) return;
  std::uint64_t salt = 0;
  for (const AttentionShape& s : shapes()) {
    INFO(describe(s));
    REQUIRE(kernels::cuda::cudnn_attention_supported(s, DType::bf16));
    const Case c = cpu_case(s, fresh_seed(++salt));
    const Tensor q = c.q.to(gpu()), k = c.k.to(gpu()), v = c.v.to(gpu()), d_o = c.d_o.to(gpu());
    Tensor o = Tensor::empty(q_shape(s), DType::f32, gpu()), lse = Tensor::empty(lse_shape(s), DType::f32, gpu());
    REQUIRE(kernels::cuda::cudnn_attention_forward(gpu_stream(), s, q.raw_data(), k.raw_data(), v.raw_data(),
                                                   o.data<float>(), lse.data<float>()));
    gpu_stream().synchronize();
    CHECK(mismatch(o, c.o, kForward) == "");
    CHECK(mismatch(lse, c.lse, kForward) == "");

    // The backward from the CPU's o and lse (the same for both), written over garbage and accumulated.
    const Tensor o_in = c.o.to(gpu()), lse_in = c.lse.to(gpu());
    for (const bool accumulate : {false, true}) {
      INFO((accumulate ? "accumulated" : "written"));
      Tensor dq = accumulate ? c.start_q.clone().to(gpu()) : Tensor::full(q_shape(s), 1e6, DType::f32, gpu());
      Tensor dk = accumulate ? c.start_kv.clone().to(gpu()) : Tensor::full(kv_shape(s), 1e6, DType::f32, gpu());
      Tensor dv = accumulate ? c.start_kv.clone().to(gpu()) : Tensor::full(kv_shape(s), 1e6, DType::f32, gpu());
      REQUIRE(kernels::cuda::cudnn_attention_backward(gpu_stream(), s, q.raw_data(), k.raw_data(), v.raw_data(),
                                                      o_in.data<float>(), lse_in.data<float>(), d_o.raw_data(),
                                                      dq.data<float>(), dk.data<float>(), dv.data<float>(),
                                                      accumulate));
      gpu_stream().synchronize();
      const Tensor want_dq = accumulate ? c.dq + c.start_q : c.dq;
      const Tensor want_dk = accumulate ? c.dk + c.start_kv : c.dk;
      const Tensor want_dv = accumulate ? c.dv + c.start_kv : c.dv;
      CHECK(mismatch(dq, want_dq, kGradient) == "");
      CHECK(mismatch(dk, want_dk, kGradient) == "");
      CHECK(mismatch(dv, want_dv, kGradient) == "");
    }
  }
}

TEST_CASE("cudnn attention: the per-shape choice measures at first use, caches, and keeps the CPU's results",
          "[cuda][cudnn]") {
  if (refused_without_cudnn()) return;
  // A shape no other case uses, so that its first call here is its first use in the process.
  const AttentionShape s = shape(1, 96, 96, 4, 2, 64, true);
  const Case c = cpu_case(s, fresh_seed(100));
  const Tensor q = c.q.to(gpu()), k = c.k.to(gpu()), v = c.v.to(gpu()), d_o = c.d_o.to(gpu());
  const auto count_entries = [&] {
    int n = 0;
    for (const auto& choice : kernels::cuda::attention_choices()) {
      if (choice.shape.find("q_len 96 kv_len 96 heads 4/2") != std::string::npos) {
        ++n;
        INFO(choice.shape << ": " << choice.which << " (" << choice.reason << ")");
        CHECK((choice.which == "cudnn" || choice.which == "own" || choice.which == "sm90"));
        if (kernels::cuda::attention_backend_setting() == kernels::cuda::AttentionBackendSetting::automatic) {
          CHECK(choice.own_ms > 0);
        }
      }
    }
    return n;
  };
  for (int call = 0; call < 2; ++call) {
    INFO("call " << call);
    Tensor o = Tensor::empty(q_shape(s), DType::f32, gpu()), lse = Tensor::empty(lse_shape(s), DType::f32, gpu());
    gpu_kernels().attention_forward(gpu_stream(), DType::bf16, s, q.raw_data(), k.raw_data(), v.raw_data(),
                                    o.raw_data(), lse.raw_data());
    Tensor dq = c.start_q.clone().to(gpu()), dk = c.start_kv.clone().to(gpu()), dv = c.start_kv.clone().to(gpu());
    const Tensor o_in = c.o.to(gpu()), lse_in = c.lse.to(gpu());
    gpu_kernels().attention_backward(gpu_stream(), DType::bf16, s, q.raw_data(), k.raw_data(), v.raw_data(),
                                     o_in.raw_data(), lse_in.raw_data(), d_o.raw_data(), dq.raw_data(),
                                     dk.raw_data(), dv.raw_data(), true, nullptr);
    gpu_stream().synchronize();
    CHECK(mismatch(o, c.o, kForward) == "");
    CHECK(mismatch(lse, c.lse, kForward) == "");
    CHECK(mismatch(dq, c.dq + c.start_q, kGradient) == "");
    CHECK(mismatch(dk, c.dk + c.start_kv, kGradient) == "");
    CHECK(mismatch(dv, c.dv + c.start_kv, kGradient) == "");
    // One entry per direction, made at the first call and kept (none under WF_ATTENTION_BACKEND=own).
    if (kernels::cuda::attention_backend_setting() != kernels::cuda::AttentionBackendSetting::own) {
      CHECK(count_entries() == 2);
    }
  }
  CHECK(!kernels::cuda::attention_choice_lines().empty());
}
