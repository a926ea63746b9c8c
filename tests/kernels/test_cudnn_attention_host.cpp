// The host-side logic of cuDNN's attention and of the per-shape choice (kernels/cuda/cudnn_attention.h,
// attention_choice.h), which needs no GPU: which shapes cuDNN may take and why not, the plan cache's
// key, and the WF_ATTENTION_BACKEND setting. CUDA builds only (the functions live in the CUDA backend);
// the GPU cases are tests/cuda/test_cudnn_attention.cpp.
#include <catch2/catch.hpp>
#include <vector>

#include "wallfacer/build_info.h"

#if WF_HAVE_CUDA
#include <cstdint>
#include <string>

#include "kernels/cuda/attention_choice.h"
#include "kernels/cuda/cudnn_attention.h"
#include "wallfacer/core/error.h"

namespace {

using namespace wf;
using namespace wf::kernels::cuda;
using wf::kernels::AttentionShape;

AttentionShape shape(std::int64_t q_len, std::int64_t kv_len, std::int64_t head_dim, bool causal,
                     std::int64_t q_offset = 0, std::int64_t kv_offset = 0) {
  AttentionShape s;
  s.batch = 2;
  s.q_len = q_len;
  s.kv_len = kv_len;
  s.heads = 8;
  s.kv_heads = 2;
  s.head_dim = head_dim;
  s.causal = causal;
  s.q_offset = q_offset;
  s.kv_offset = kv_offset;
  return s;
}

bool refused_for(const AttentionShape& s, const std::string& words, DType operands = DType::bf16) {
  const std::string why = cudnn_attention_refusal(s, operands);
  INFO(why);
  return !cudnn_attention_supported(s, operands) && why.find(words) != std::string::npos;
}

}  // namespace

TEST_CASE("cudnn attention: which shapes cuDNN may take, and why not", "[kernels][cudnn]") {
  if (!WF_BUILT_WITH_CUDNN) {
    CHECK(refused_for(shape(64, 64, 64, false), "no cuDNN"));
    return;
  }
  CHECK(cudnn_attention_supported(shape(64, 64, 64, false), DType::bf16));
  CHECK(cudnn_attention_supported(shape(64, 256, 128, false), DType::bf16));
  CHECK(cudnn_attention_supported(shape(256, 256, 64, true), DType::bf16));         // top-left
  CHECK(cudnn_attention_supported(shape(256, 256, 64, true, 512, 512), DType::bf16));  // ring diagonal
  CHECK(cudnn_attention_supported(shape(64, 256, 64, true, 192, 0), DType::bf16));  // bottom-right
  CHECK(cudnn_mask(shape(64, 64, 64, false)) == CudnnMask::none);
  CHECK(cudnn_mask(shape(256, 256, 64, true, 512, 512)) == CudnnMask::top_left);
  CHECK(cudnn_mask(shape(64, 256, 64, true, 192, 0)) == CudnnMask::bottom_right);
  // A ring step's block wholly in the past: causal, but nothing masked, so the full graph.
  CHECK(cudnn_attention_supported(shape(64, 64, 64, true, 64, 0), DType::bf16));
  CHECK(cudnn_mask(shape(64, 64, 64, true, 64, 0)) == CudnnMask::none);
  CHECK(cudnn_mask(shape(64, 64, 64, true, 63, 0)) == CudnnMask::none);  // the last key at the first query

  CHECK(refused_for(shape(64, 64, 64, false), "bf16", DType::f32));
  CHECK(refused_for(shape(64, 64, 60, false), "head_dim"));
  CHECK(refused_for(shape(64, 64, 256, false), "head_dim"));
  CHECK(refused_for(shape(0, 64, 64, false), "empty"));
  CHECK(refused_for(shape(1, 1, 64, false), "q_len = kv_len = 1"));
  // A ring block partly in the future (rows that see nothing), and a diagonal shifted by less than a
  // block (some keys masked for every row) that cuDNN's graph does not express.
  CHECK(refused_for(shape(64, 64, 64, true, 0, 10), "causal diagonal"));
  CHECK(refused_for(shape(64, 64, 64, true, 32, 0), "causal diagonal"));
  CHECK(refused_for(shape(256, 64, 64, true, 0, 192), "causal diagonal"));  // q_len > kv_len, negative shift
  std::vector<wf::kernels::KeyRange> windows(64, {0, 32});
  AttentionShape documents = shape(64, 64, 64, true);
  documents.windows = {windows.data(), 1};
  CHECK(refused_for(documents, "key windows"));
}

TEST_CASE("cudnn attention: the plan key holds what the graph depends on", "[kernels][cudnn]") {
  const AttentionShape s = shape(128, 128, 64, true);
  const CudnnPlanKey forward = cudnn_plan_key(0, s, false);
  CHECK(forward == cudnn_plan_key(0, s, false));
  CHECK(forward != cudnn_plan_key(0, s, true));
  CHECK(forward != cudnn_plan_key(1, s, false));
  AttentionShape scaled = s;  // the scale is a value passed at execution: the same plan
  scaled.scale = 0.5;
  CHECK(forward == cudnn_plan_key(0, scaled, false));
  AttentionShape ring = s;  // the same diagonal at other global positions: the same plan
  ring.q_offset = ring.kv_offset = 1024;
  CHECK(forward == cudnn_plan_key(0, ring, false));
  AttentionShape full = s;
  full.causal = false;
  CHECK(forward != cudnn_plan_key(0, full, false));
  AttentionShape gqa = s;
  gqa.kv_heads = 8;
  CHECK(forward != cudnn_plan_key(0, gqa, false));
  CHECK(cudnn_plan_key_text(forward) == "cuda:0 forward batch 2 q_len 128 kv_len 128 heads 8/2 head_dim 64 "
                                        "causal top-left");
}

TEST_CASE("cudnn attention: WF_ATTENTION_BACKEND takes auto, own, cudnn or sm90 and names them otherwise",
          "[kernels][cudnn]") {
  CHECK(parse_attention_backend(nullptr) == AttentionBackendSetting::automatic);
  CHECK(parse_attention_backend("") == AttentionBackendSetting::automatic);
  CHECK(parse_attention_backend("auto") == AttentionBackendSetting::automatic);
  CHECK(parse_attention_backend("own") == AttentionBackendSetting::own);
  CHECK(parse_attention_backend("cudnn") == AttentionBackendSetting::cudnn);
  CHECK(parse_attention_backend("sm90") == AttentionBackendSetting::sm90);
  CHECK_THROWS_WITH(parse_attention_backend("flash"),
                    Catch::Contains("WF_ATTENTION_BACKEND=flash") && Catch::Contains("auto") &&
                        Catch::Contains("own, cudnn or sm90"));
  CHECK_FALSE(parse_sm90_switch(nullptr));
  CHECK_FALSE(parse_sm90_switch(""));
  CHECK_FALSE(parse_sm90_switch("0"));
  CHECK_FALSE(parse_sm90_switch("off"));
  CHECK(parse_sm90_switch("1"));
  CHECK(parse_sm90_switch("on"));
  CHECK_THROWS_WITH(parse_sm90_switch("yes"), Catch::Contains("WF_ATTENTION_SM90=yes") && Catch::Contains("1 or on"));
  // No choice is made without a call on a GPU.
  CHECK(attention_choice_lines().empty());
  CHECK(cudnn_attention_info().find(WF_BUILT_WITH_CUDNN ? "compiled in" : "not compiled in") != std::string::npos);
}

#endif  // WF_HAVE_CUDA
