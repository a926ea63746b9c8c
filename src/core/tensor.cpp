#include "wallfacer/core/tensor.h"

#include <cmath>
#include <ostream>
#include <sstream>

#include "src/core/host_copy.h"
#include "wallfacer/core/device_backend.h"
#include "wallfacer/core/stream.h"

namespace wf {
namespace {

std::shared_ptr<TensorImpl> make_impl(const Shape& shape, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->storage = std::make_shared<Storage>(shape_nbytes(shape, dtype_size(dtype)), device);
  return impl;
}

template <typename Fn>
Tensor generate(const Shape& shape, DType dtype, Fn&& value_at) {
  Tensor t = Tensor::empty(shape, dtype);
  const std::int64_t n = t.numel();
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
#pragma omp parallel for schedule(static) if (n > 32768)
    for (std::int64_t i = 0; i < n; ++i) p[i] = from_double<T>(value_at(static_cast<std::uint64_t>(i)));
  });
  return t;
}

// A new handle on the same storage (a view): no autograd state is shared.
Tensor alias(const TensorImpl& src, std::int64_t offset, Shape shape) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = src.storage;
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->dtype = src.dtype;
  return Tensor(std::move(impl));
}

}  // namespace

// ---- creation ---------------------------------------------------------------------------
Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) { return Tensor(make_impl(shape, dtype, device)); }

Tensor Tensor::empty_pinned(const Shape& shape, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->storage = std::make_shared<Storage>(shape_nbytes(shape, dtype_size(dtype)), Storage::Pinned{device});
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

Tensor Tensor::arange(double start, double end, double step, DType dtype) {
  WF_CHECK(step != 0.0, "arange: step must be non-zero");
  const double count = std::ceil((end - start) / step);
  const auto n = static_cast<std::int64_t>(std::max(0.0, count));
  return generate({n}, dtype, [&](std::uint64_t i) { return start + step * static_cast<double>(i); });
}

Tensor Tensor::randn_at(const Shape& shape, std::uint64_t seed, std::uint64_t first_index, DType dtype) {
  return generate(shape, dtype, [&](std::uint64_t i) { return normal_at(seed, first_index + i); });
}
Tensor Tensor::rand_at(const Shape& shape, std::uint64_t seed, std::uint64_t first_index, DType dtype) {
  // Quantise to the dtype's precision first, so rounding can never produce exactly 1.
  const double steps = is_floating(dtype) ? std::ldexp(1.0, significand_bits(dtype)) : 0x1.0p53;
  return generate(shape, dtype,
                  [&](std::uint64_t i) { return std::floor(uniform_at(seed, first_index + i) * steps) / steps; });
}
Tensor Tensor::randn(const Shape& shape, DType dtype, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  const std::uint64_t first = g.advance(static_cast<std::uint64_t>(shape_numel(shape)));
  return randn_at(shape, g.seed(), first, dtype);
}
Tensor Tensor::rand(const Shape& shape, DType dtype, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  const std::uint64_t first = g.advance(static_cast<std::uint64_t>(shape_numel(shape)));
  return rand_at(shape, g.seed(), first, dtype);
}

// ---- metadata ---------------------------------------------------------------------------
void Tensor::check_defined(const char* what) const {
  WF_CHECK(impl_ != nullptr, "{}() called on an undefined tensor", what);
}
const Shape& Tensor::shape() const {
  check_defined("shape");
  return impl_->shape;
}
std::int64_t Tensor::size(std::int64_t d) const { return shape()[normalize_dim(d, dim())]; }
std::int64_t Tensor::numel() const { return shape_numel(shape()); }
DType Tensor::dtype() const {
  check_defined("dtype");
  return impl_->dtype;
}
Device Tensor::device() const {
  check_defined("device");
  return impl_->storage->device();
}
std::int64_t Tensor::storage_offset() const {
  check_defined("storage_offset");
  return impl_->offset;
}
bool Tensor::shares_storage_with(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage == other.impl_->storage;
}

void* Tensor::raw_data() {
  check_defined("raw_data");
  return static_cast<std::byte*>(impl_->storage->data()) + impl_->offset * static_cast<std::int64_t>(dtype_size(impl_->dtype));
}
const void* Tensor::raw_data() const { return const_cast<Tensor*>(this)->raw_data(); }

// ---- element access ---------------------------------------------------------------------
namespace {
std::int64_t flat_index_of(const Tensor& t, std::initializer_list<std::int64_t> index) {
  WF_CHECK(static_cast<std::int64_t>(index.size()) == t.dim(), "index with {} coordinates into a tensor of shape {}",
           index.size(), shape_str(t.shape()));
  std::int64_t flat = 0, d = 0;
  for (auto i : index) {
    WF_CHECK(i >= 0 && i < t.shape()[d], "index {} out of range for dim {} of shape {}", i, d, shape_str(t.shape()));
    flat = flat * t.shape()[d] + i;
    ++d;
  }
  return flat;
}
}  // namespace

void Tensor::check_host_read(const char* what) const {
  WF_CHECK(device().is_cpu(),
           "{}: the host cannot read a tensor of shape {} on {}; copy it to the host first with "
           "x.to(Device::cpu()) (one host synchronisation: do it once per logged step, not inside the step)",
           what, shape_str(shape()), device().str());
}

double Tensor::at(std::int64_t flat_index) const {
  check_host_read("at()");
  WF_CHECK(flat_index >= 0 && flat_index < numel(), "flat index {} out of range for shape {}", flat_index,
           shape_str(shape()));
  return dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    return to_double(static_cast<const T*>(raw_data())[flat_index]);
  });
}
double Tensor::at(std::initializer_list<std::int64_t> index) const { return at(flat_index_of(*this, index)); }
double Tensor::item() const {
  WF_CHECK(numel() == 1, "item() needs a one-element tensor, got shape {}", shape_str(shape()));
  check_host_read("item()");
  detail::count_host_sync();  // on a GPU the host would wait here for the value
  return at(0);
}
void Tensor::set(std::int64_t flat_index, double value) {
  check_host_read("set()");
  WF_CHECK(flat_index >= 0 && flat_index < numel(), "flat index {} out of range for shape {}", flat_index,
           shape_str(shape()));
  dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    static_cast<T*>(raw_data())[flat_index] = from_double<T>(value);
  });
}
void Tensor::set(std::initializer_list<std::int64_t> index, double value) { set(flat_index_of(*this, index), value); }

// ---- views ------------------------------------------------------------------------------
Tensor Tensor::view(const Shape& new_shape) const {
  check_defined("view");
  Shape resolved = new_shape;
  std::int64_t infer = -1;
  for (std::size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      WF_CHECK(infer < 0, "view {}: only one extent may be -1", shape_str(new_shape));
      infer = static_cast<std::int64_t>(i);
      resolved[i] = 1;  // for the product of the known extents below
    } else {
      WF_CHECK(resolved[i] >= 0, "view {}: negative extent", shape_str(new_shape));
    }
  }
  const std::optional<std::int64_t> known = checked_numel(resolved);
  WF_CHECK(known.has_value(), "view {}: the product of its extents exceeds 2^63 - 1 elements; this tensor has {}",
           shape_str(new_shape), numel());
  if (infer >= 0) {
    WF_CHECK(*known > 0 && numel() % *known == 0, "view: cannot infer -1 in {} for {} elements", shape_str(new_shape),
             numel());
    resolved[infer] = numel() / *known;
  }
  WF_CHECK(shape_numel(resolved) == numel(), "view: shape {} ({} elements) does not match {} ({} elements)",
           shape_str(new_shape), shape_numel(resolved), shape_str(shape()), numel());
  return alias(*impl_, impl_->offset, std::move(resolved));
}

Tensor Tensor::slice0(std::int64_t start, std::int64_t end) const {
  check_defined("slice0");
  WF_CHECK(dim() >= 1, "slice0 on a 0-dimensional tensor");
  WF_CHECK(0 <= start && start <= end && end <= shape()[0], "slice0 [{}, {}) out of range for dim 0 of shape {}", start,
           end, shape_str(shape()));
  const std::int64_t row = numel() / std::max<std::int64_t>(shape()[0], 1);
  Shape sliced = shape();
  sliced[0] = end - start;
  return alias(*impl_, impl_->offset + start * row, std::move(sliced));
}

// ---- copies -----------------------------------------------------------------------------
Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype(), device());
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(DType target) const {
  check_defined("to");
  if (target == dtype()) return *this;
  Tensor t = empty(shape(), target, device());
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(Device target) const {
  check_defined("to");
  if (target == device()) return *this;
  WF_CHECK(find_device_backend(target.type) != nullptr,
           "cannot move a tensor from {} to {}: this build has no backend for {} devices (built in: cpu, testdev); "
           "keep tensors on the cpu",
           device().str(), target.str(), device_type_name(target.type));
  Tensor t = empty(shape(), dtype(), target);
  t.copy_(*this);
  return t;
}

namespace {

// dst.copy_(src) for tensors of the same shape on two different devices.
void copy_across_devices(Tensor& dst, const Tensor& src) {
  if (dst.dtype() != src.dtype()) {
    // Converts on the source's device, then moves the bytes.
    dst.copy_(src.to(dst.dtype()));
    return;
  }
  if (!src.device().is_cpu() && !dst.device().is_cpu()) {
    // Between two devices: through the host (peer copies are the backends' business, later).
    dst.copy_(src.to(Device::cpu()));
    return;
  }
  const std::size_t nbytes = dst.nbytes();
  if (nbytes == 0) return;
  if (src.device().is_cpu()) {
    device_backend(dst.device()).copy_from_host(dst.raw_data(), src.raw_data(), nbytes, Stream::current(dst.device()));
  } else {
    const Stream stream = Stream::current(src.device());
    device_backend(src.device()).copy_to_host(dst.raw_data(), src.raw_data(), nbytes, stream);
    stream.synchronize();  // the host reads dst next
  }
}

}  // namespace

void Tensor::copy_(const Tensor& src) {
  check_defined("copy_");
  WF_CHECK(src.defined(), "copy_ from an undefined tensor");
  WF_CHECK(src.shape() == shape(), "copy_: source shape {} does not match destination shape {}", shape_str(src.shape()),
           shape_str(shape()));
  const Device here = device();
  if (src.device() != here) {
    copy_across_devices(*this, src);
    return;
  }
  // The copy runs in parallel blocks, so partly overlapping views of one storage would race.
  const auto* dst_begin = static_cast<const char*>(raw_data());
  const auto* src_begin = static_cast<const char*>(src.raw_data());
  if (dst_begin == src_begin && dtype() == src.dtype()) return;  // copying a tensor onto itself
  const std::size_t dst_bytes = static_cast<std::size_t>(numel()) * dtype_size(dtype());
  const std::size_t src_bytes = static_cast<std::size_t>(numel()) * dtype_size(src.dtype());
  WF_CHECK(numel() == 0 || dst_begin + dst_bytes <= src_begin || src_begin + src_bytes <= dst_begin,
           "copy_: source and destination overlap in memory (views of one storage); copy from src.clone() instead");
  if (here.is_cpu()) {
    detail::host_convert(src.raw_data(), src.dtype(), raw_data(), dtype(), numel());
  } else {
    device_backend(here).convert(src.raw_data(), src.dtype(), raw_data(), dtype(), numel(), Stream::current(here));
  }
}

void Tensor::fill_(double value) {
  check_defined("fill_");
  const Device here = impl_->storage->device();
  if (here.is_cpu()) {
    detail::host_fill(raw_data(), dtype(), numel(), value);
  } else {
    device_backend(here).fill(raw_data(), dtype(), numel(), value, Stream::current(here));
  }
}

// ---- autograd state ---------------------------------------------------------------------
bool Tensor::requires_grad() const { return impl_ && impl_->autograd && impl_->autograd->requires_grad; }

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  check_defined("set_requires_grad");
  WF_CHECK(is_leaf(), "set_requires_grad on a non-leaf tensor (it already carries history); detach() it first");
  WF_CHECK(!requires_grad || is_floating(dtype()), "only floating-point tensors can require gradients, not {}",
           dtype_name(dtype()));
  impl_->autograd_meta().requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return !impl_ || !impl_->autograd || !impl_->autograd->grad_fn; }

Tensor Tensor::grad() const { return (impl_ && impl_->autograd) ? impl_->autograd->grad : Tensor(); }

void Tensor::set_grad(const Tensor& grad) {
  check_defined("set_grad");
  WF_CHECK(!grad.defined() || grad.shape() == shape(), "set_grad: gradient shape {} does not match tensor shape {}",
           grad.defined() ? shape_str(grad.shape()) : "undefined", shape_str(shape()));
  impl_->autograd_meta().grad = grad;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  return (impl_ && impl_->autograd) ? impl_->autograd->grad_fn : none;
}

int Tensor::output_nr() const { return (impl_ && impl_->autograd) ? impl_->autograd->output_nr : 0; }

Tensor Tensor::detach() const {
  check_defined("detach");
  return alias(*impl_, impl_->offset, impl_->shape);
}

// ---- printing ---------------------------------------------------------------------------
std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype()) << ", device=" << device().str();
  if (requires_grad()) os << ", requires_grad";
  os << ", values=[";
  const std::int64_t n = numel(), shown = std::min<std::int64_t>(n, 8);
  // A device's values are copied to the host: printing is for debugging, and a message that
  // cannot show them helps nobody.
  const Tensor host = shown > 0 ? view({n}).slice0(0, shown).to(Device::cpu()) : Tensor();
  for (std::int64_t i = 0; i < shown; ++i) os << (i ? ", " : "") << host.at(i);
  if (n > shown) os << ", ... (" << n << " total)";
  os << "])";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace wf
