#include "wallfacer/train/grad_sync.h"

#include <cstring>

#include "wallfacer/core/error.h"

namespace wf::train {
namespace {

// Defined gradients for every parameter (zeros where backward left none).
std::vector<Tensor> grads_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) {
      g = Tensor::zeros(p.shape(), p.dtype());
      Tensor(p).set_grad(g);
    }
    WF_CHECK(g.dtype() == p.dtype() && g.shape() == p.shape(),
             "all_reduce_gradients: a gradient must have its parameter's dtype and shape");
    grads.push_back(g);
  }
  return grads;
}

// One all-reduce over grads[first, last): packed into one buffer unless it is a single tensor.
void reduce_bucket(comm::Group& group, std::vector<Tensor>& grads, std::size_t first, std::size_t last) {
  if (last - first == 1) {
    group.all_reduce(grads[first]);
    return;
  }
  std::int64_t numel = 0;
  for (std::size_t i = first; i < last; ++i) numel += grads[i].numel();
  Tensor bucket = Tensor::empty({numel}, grads[first].dtype());
  auto* data = static_cast<char*>(bucket.raw_data());
  std::size_t offset = 0;
  for (std::size_t i = first; i < last; ++i) {
    std::memcpy(data + offset, grads[i].raw_data(), grads[i].nbytes());
    offset += grads[i].nbytes();
  }
  group.all_reduce(bucket);
  offset = 0;
  for (std::size_t i = first; i < last; ++i) {
    std::memcpy(grads[i].raw_data(), data + offset, grads[i].nbytes());
    offset += grads[i].nbytes();
  }
}

}  // namespace

void all_reduce_gradients(comm::Group& group, const std::vector<Tensor>& params, std::int64_t bucket_bytes) {
  WF_CHECK(bucket_bytes > 0, "all_reduce_gradients: bucket_bytes must be positive, got {}", bucket_bytes);
  if (group.size() == 1) return;
  std::vector<Tensor> grads = grads_of(params);
  std::size_t first = 0;
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const bool dtype_changes = i > first && grads[i].dtype() != grads[first].dtype();
    const auto size = static_cast<std::int64_t>(grads[i].nbytes());
    if (i > first && (dtype_changes || bytes + size > bucket_bytes)) {
      reduce_bucket(group, grads, first, i);
      first = i;
      bytes = 0;
    }
    bytes += size;
  }
  if (first < grads.size()) reduce_bucket(group, grads, first, grads.size());
}

}  // namespace wf::train
