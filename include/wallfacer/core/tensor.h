#pragma once
// wf::Tensor: a handle to an n-dimensional array with a shape, a dtype and a device.
//
// Storage is always contiguous and row-major. A tensor may be a view of shared storage at an
// offset: reshape() and dim-0 slicing (slice0) give views; everything else that rearranges
// elements (permute, transpose, narrow on other dims) materialises a new tensor.
//
// Member functions here are raw data operations and never record autograd history.
// Differentiable functions (matmul, reshape, add, attention, ...) are free functions in
// wallfacer/ops, and their results carry a grad_fn.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "wallfacer/core/device.h"
#include "wallfacer/core/dtype.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/core/shape.h"
#include "wallfacer/core/storage.h"

namespace wf {

namespace autograd {
class Node;
}
struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- creation -------------------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  // A CPU tensor in `device`'s pinned host memory (page-locked for CUDA), which copies to and from
  // that device read and write directly: the staging buffers of transports that carry host memory.
  static Tensor empty_pinned(const Shape& shape, DType dtype, Device device);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::f32);
  static Tensor scalar(double value, DType dtype = DType::f32);
  // Random draws from a generator (default: wf::default_generator()), consuming numel indices.
  static Tensor randn(const Shape& shape, DType dtype = DType::f32, Generator* gen = nullptr);
  static Tensor rand(const Shape& shape, DType dtype = DType::f32, Generator* gen = nullptr);
  // Layout-independent draws: element k is stream element (first_index + k) of `seed`, so any
  // slice of a global random tensor can be generated on its own.
  static Tensor randn_at(const Shape& shape, std::uint64_t seed, std::uint64_t first_index, DType dtype = DType::f32);
  static Tensor rand_at(const Shape& shape, std::uint64_t seed, std::uint64_t first_index, DType dtype = DType::f32);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  // ---- metadata -------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  std::int64_t dim() const { return static_cast<std::int64_t>(shape().size()); }
  std::int64_t size(std::int64_t dim) const;  // negative dims count from the end
  std::int64_t numel() const;
  DType dtype() const;
  Device device() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype()); }
  std::int64_t storage_offset() const;  // in elements
  bool shares_storage_with(const Tensor& other) const;
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- data access ----------------------------------------------------------------------
  // Typed pointer to the first element; wf::Error if T is not this tensor's dtype. For a tensor
  // on a device it points into the device's memory: only that device's kernels may touch it
  // (on the test device, a host access faults).
  template <typename T>
  T* data();
  template <typename T>
  const T* data() const;
  void* raw_data();
  const void* raw_data() const;

  // Element access for tests and debugging (slow): flat index or one index per dim. Host
  // tensors only: for a device's, wf::Error saying to copy it with .to(Device::cpu()) first.
  // item() counts one host synchronisation (wallfacer/core/stream.h).
  double item() const;  // the only element of a one-element tensor
  double at(std::int64_t flat_index) const;
  double at(std::initializer_list<std::int64_t> index) const;
  void set(std::int64_t flat_index, double value);
  void set(std::initializer_list<std::int64_t> index, double value);
  template <typename T>
  std::vector<T> to_vector() const;

  // ---- views (share storage) ------------------------------------------------------------
  Tensor view(const Shape& shape) const;  // same numel; one extent may be -1
  Tensor slice0(std::int64_t start, std::int64_t end) const;  // rows [start, end) of dim 0

  // ---- copies ---------------------------------------------------------------------------
  Tensor clone() const;
  // Copies, conversions and fills run on the tensor's device (its backend's entry points,
  // wallfacer/core/device_backend.h), on the device's current stream.
  Tensor to(DType dtype) const;  // returns *this when already that dtype
  Tensor to(Device device) const;  // returns *this when already on that device
  void copy_(const Tensor& src);  // same shape; converts dtype; across devices too
  void fill_(double value);
  void zero_() { fill_(0.0); }

  // ---- autograd state (graph recording lives in wallfacer/autograd) ----------------------
  bool requires_grad() const;
  // Marks a leaf as needing gradients; wf::Error on a non-leaf.
  Tensor& set_requires_grad(bool requires_grad = true);
  bool is_leaf() const;  // no grad_fn
  Tensor grad() const;   // accumulated gradient of a leaf (undefined until backward)
  void set_grad(const Tensor& grad);
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  int output_nr() const;
  // A tensor sharing this one's data with no history and no requires_grad.
  Tensor detach() const;
  // Runs the backward pass from this tensor; grad defaults to ones for a one-element tensor.
  // Defined in src/autograd (the engine).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  std::string str() const;  // shape, dtype, device and (abbreviated) values
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  void check_defined(const char* what) const;
  void check_host_read(const char* what) const;  // wf::Error unless on the cpu
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Autograd bookkeeping attached to a tensor that takes part in differentiation.
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;  // the node that produced this tensor (non-leaf)
  int output_nr = 0;                        // which output of grad_fn
  // A leaf's gradient sink (autograd::AccumulateGrad) while some recorded graph holds it. Every
  // use of the leaf gets this one node (autograd::gradient_edge), so a backward sums all uses
  // before it runs the sink once. Weak: the graph owns the sink, the leaf only finds it.
  std::weak_ptr<autograd::Node> grad_accumulator;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  std::int64_t offset = 0;  // elements
  Shape shape;
  DType dtype = DType::f32;
  std::unique_ptr<AutogradMeta> autograd;  // null until autograd touches the tensor

  AutogradMeta& autograd_meta() {
    if (!autograd) autograd = std::make_unique<AutogradMeta>();
    return *autograd;
  }
};

// ---- template definitions ---------------------------------------------------------------
template <typename T>
T* Tensor::data() {
  check_defined("data");
  WF_CHECK(dtype() == dtype_v<T>, "data<{}>() on a tensor of dtype {}", dtype_name(dtype_v<T>), dtype_name(dtype()));
  return static_cast<T*>(raw_data());
}
template <typename T>
const T* Tensor::data() const {
  return const_cast<Tensor*>(this)->data<T>();
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  WF_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape),
           "from_vector: {} values do not fill shape {}", values.size(), shape_str(shape));
  Tensor t = empty(shape, dtype_v<T>);
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_host_read("to_vector()");
  const Tensor t = to(dtype_v<T>);
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
}

}  // namespace wf
