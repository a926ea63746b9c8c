#include "src/parallel/sp_strategy_base.h"

#include "src/ops/common.h"
#include "src/ops/document_attention.h"
#include "wallfacer/core/error.h"

namespace wf::parallel::detail {

DType compute_dtype_of(DType activation) { return activation == DType::f64 ? DType::f64 : DType::f32; }

DType multiply_dtype_of(DType activation, Device device) {
  return kernels::backend_for(device).attention_operand_dtype(activation);
}

namespace {
std::vector<int> identity(int P) {
  std::vector<int> out(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) out[static_cast<std::size_t>(r)] = r;
  return out;
}
}  // namespace

SpStrategyBase::SpStrategyBase(std::string name, const SpAttentionConfig& config, comm::Group& sp)
    : SpStrategyBase(std::move(name), config, sp, 1, 1, identity(sp.size())) {}

SpStrategyBase::SpStrategyBase(std::string name, const SpAttentionConfig& config, comm::Group& sp, int C, int U,
                               const std::vector<int>& logical)
    : name_(std::move(name)), config_(config), sp_(sp), P_(sp.size()), rank_(sp.rank()), C_(C), U_(U),
      logical_(logical) {
  check_sequence_length(config_.layout, config_.seq_len, P_, C, U);
  WF_CHECK(static_cast<int>(logical.size()) == P_, "{} attention: {} logical indices for {} sp ranks", name_,
           logical.size(), P_);
  runs_.reserve(static_cast<std::size_t>(P_));
  for (int l : logical) runs_.push_back(rank_tokens(config_.layout, config_.seq_len, P_, C, l, U));
}

std::shared_ptr<const ChunkAssignment> DocumentChunkCache::get(SequenceLayout layout, const DocumentBounds& documents,
                                                               std::int64_t N, int P, int C, int U, bool* changed) {
  const bool same = valid_ && documents == documents_;
  if (!same) {
    chunks_ = document_chunks(layout, documents, N, P, C, U);
    documents_ = documents;
    valid_ = true;
  }
  if (changed != nullptr) *changed = !same;
  return chunks_;
}

const std::vector<std::vector<TokenRun>>& SpStrategyBase::runs_for(const AttentionOptions& options) {
  bool changed = false;
  const std::shared_ptr<const ChunkAssignment> chunks =
      chunks_.get(config_.layout, options.doc_bounds, config_.seq_len, P_, C_, U_, &changed);
  if (chunks == nullptr) return runs_;
  if (changed) {
    document_runs_.clear();
    for (int l : logical_) {
      document_runs_.push_back(rank_tokens(config_.layout, config_.seq_len, P_, C_, l, U_, chunks.get()));
    }
  }
  return document_runs_;
}

void SpStrategyBase::check_call(const Tensor& q, const Tensor& k, const Tensor& v,
                                const AttentionOptions& options) const {
  const char* what = name_.c_str();
  WF_CHECK(q.defined() && k.defined() && v.defined(), "{} attention: q, k and v must be defined", what);
  WF_CHECK(q.device() == k.device() && q.device() == v.device(),
           "{} attention: q, k and v must be on one device, got {}, {}, {}; move them with .to(...)", what,
           q.device().str(), k.device().str(), v.device().str());
  WF_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype() &&
               (q.dtype() == DType::f32 || q.dtype() == DType::f64 || q.dtype() == DType::bf16),
           "{} attention: q, k and v must all be f32, all f64 or all bf16, got {}, {}, {} (convert with cast())", what,
           dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  const std::int64_t n = config_.seq_len / P_;
  WF_CHECK(q.dim() == 4 && k.dim() == 4 && k.shape() == v.shape() && q.size(1) == n && k.size(1) == n &&
               q.size(0) == k.size(0) && q.size(3) == k.size(3) && k.size(2) >= 1 && q.size(2) % k.size(2) == 0,
           "{} attention: this rank's shard must be q [B, N/P, h, d] and k, v [B, N/P, h_kv, d] with h_kv dividing "
           "h, N/P = {} / {} = {}; got q {}, k {}, v {}",
           what, config_.seq_len, P_, n, shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  WF_CHECK(options.q_offset == 0 && options.kv_offset == 0,
           "{} attention: AttentionOptions offsets must be 0 (got q_offset {}, kv_offset {}); the sequence layout "
           "gives every token's global position",
           what, options.q_offset, options.kv_offset);
  ops::check_document_bounds((name_ + " attention").c_str(), options.doc_bounds, q.size(0), config_.seq_len);
}

AttentionResult SpStrategyBase::forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const AttentionOptions& options) {
  check_call(q, k, v, options);
  return run(q, k, v, options, std::nullopt);
}

AttentionResult SpStrategyBase::replay(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const AttentionOptions& options, const AttentionResult& saved) {
  check_call(q, k, v, options);
  AttentionResult replayed = check_replayed((name_ + " attention").c_str(), q, saved);
  work_->forward = {};
  return run(q, k, v, options, std::move(replayed));
}

AttentionResult check_replayed(const char* what, const Tensor& q, const AttentionResult& saved) {
  WF_CHECK(saved.out.defined() && saved.lse.defined(),
           "{} replay: the saved result must hold out and lse, as forward returned them", what);
  const Shape lse_shape{q.size(0), q.size(2), q.size(1)};
  WF_CHECK(saved.out.shape() == q.shape() && saved.lse.shape() == lse_shape && saved.out.dtype() == q.dtype() &&
               saved.lse.dtype() == q.dtype() && saved.out.device() == q.device() &&
               saved.lse.device() == q.device(),
           "{} replay: the saved result must be what forward returned for these q, k, v: out {} {} and "
           "lse {} {}, got out {} {} and lse {} {}",
           what, dtype_name(q.dtype()), shape_str(q.shape()), dtype_name(q.dtype()), shape_str(lse_shape),
           dtype_name(saved.out.dtype()), shape_str(saved.out.shape()), dtype_name(saved.lse.dtype()),
           shape_str(saved.lse.shape()));
  return {saved.out.detach(), saved.lse.detach()};
}

Tensor pack_pair(const Tensor& a, const Tensor& b) {
  WF_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), "pack_pair: {} {} and {} {} differ", dtype_name(a.dtype()),
           shape_str(a.shape()), dtype_name(b.dtype()), shape_str(b.shape()));
  Shape shape = a.shape();
  shape.insert(shape.begin(), 2);
  Tensor pair = Tensor::empty(shape, a.dtype(), a.device());
  pair_half(pair, 0).copy_(a);
  pair_half(pair, 1).copy_(b);
  return pair;
}

Tensor pair_half(const Tensor& pair, int i) {
  const Shape& shape = pair.shape();
  return pair.slice0(i, i + 1).view(Shape(shape.begin() + 1, shape.end()));
}

void add_into(Tensor& acc, const Tensor& x) {
  WF_CHECK(acc.shape() == x.shape() && acc.dtype() == x.dtype(), "add_into: {} {} and {} {} differ",
           dtype_name(acc.dtype()), shape_str(acc.shape()), dtype_name(x.dtype()), shape_str(x.shape()));
  const ops::Kernels k = ops::kernels_for("add_into", {acc, x});
  // acc + 1·x: the product is exact, so this is acc + x bit for bit.
  k->add_scaled(k.stream, acc.dtype(), acc.numel(), 1.0, x.raw_data(), acc.raw_data());
}

}  // namespace wf::parallel::detail
