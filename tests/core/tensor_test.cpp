// wf::Tensor: creation, metadata, views, copies, element access, printing and the errors that
// name the shapes involved.
#include <catch2/catch.hpp>

#include <cstdint>
#include <sstream>
#include <vector>

#include "wallfacer/core/cuda_info.h"
#include "wallfacer/core/tensor.h"

using Catch::Contains;
using wf::DType;
using wf::Tensor;

namespace {

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v;
  for (std::int64_t i = 0; i < t.numel(); ++i) v.push_back(t.at(i));
  return v;
}

}  // namespace

TEST_CASE("creation functions set shape, dtype, device and values", "[core]") {
  const Tensor e = Tensor::empty({2, 3});
  CHECK(e.defined());
  CHECK(e.shape() == wf::Shape{2, 3});
  CHECK(e.dtype() == DType::f32);
  CHECK(e.device() == wf::Device::cpu());
  CHECK(e.storage_offset() == 0);

  CHECK(values_of(Tensor::zeros({2, 3}, DType::f64)) == std::vector<double>(6, 0.0));
  const Tensor ones = Tensor::ones({4}, DType::i32);
  CHECK(ones.dtype() == DType::i32);
  CHECK(values_of(ones) == std::vector<double>(4, 1.0));
  CHECK(values_of(Tensor::full({2, 2}, 2.5, DType::bf16)) == std::vector<double>(4, 2.5));

  CHECK(values_of(Tensor::arange(0, 5)) == std::vector<double>{0, 1, 2, 3, 4});
  CHECK(values_of(Tensor::arange(1, 2, 0.25)) == std::vector<double>{1, 1.25, 1.5, 1.75});
  CHECK(values_of(Tensor::arange(5, 0, -2, DType::i64)) == std::vector<double>{5, 3, 1});
  CHECK(Tensor::arange(3, 3).numel() == 0);
  REQUIRE_THROWS_WITH(Tensor::arange(0, 1, 0), Contains("step"));

  const Tensor s = Tensor::scalar(3.5);
  CHECK(s.dim() == 0);
  CHECK(s.shape().empty());
  CHECK(s.numel() == 1);
  CHECK(s.item() == 3.5);

  const Tensor v = Tensor::from_vector<std::int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(v.dtype() == DType::i32);
  CHECK(v.at({1, 2}) == 6);
  REQUIRE_THROWS_WITH(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), Contains("3 values") && Contains("[2, 2]"));

  CHECK(Tensor::empty({0, 3}).numel() == 0);
  REQUIRE_THROWS_WITH(Tensor::empty({2, -1}), Contains("[2, -1]"));
}

TEST_CASE("an undefined tensor says so instead of crashing", "[core]") {
  const Tensor t;
  CHECK_FALSE(t.defined());
  REQUIRE_THROWS_WITH(t.shape(), Contains("undefined"));
  REQUIRE_THROWS_WITH(t.clone(), Contains("undefined"));
  CHECK(t.str() == "Tensor(undefined)");
}

TEST_CASE("shape, numel and size with negative dims", "[core]") {
  const Tensor t = Tensor::empty({2, 3, 4});
  CHECK(t.dim() == 3);
  CHECK(t.numel() == 24);
  CHECK(t.nbytes() == 96);
  CHECK(t.size(0) == 2);
  CHECK(t.size(-1) == 4);
  CHECK(t.size(-3) == 2);
  REQUIRE_THROWS_WITH(t.size(3), Contains("dimension 3") && Contains("3 dimensions"));
  REQUIRE_THROWS_WITH(t.size(-4), Contains("dimension -4"));
}

TEST_CASE("view shares storage and infers one -1 extent", "[core]") {
  Tensor t = Tensor::arange(0, 12);
  Tensor v = t.view({3, -1});
  CHECK(v.shape() == wf::Shape{3, 4});
  CHECK(v.shares_storage_with(t));
  CHECK(v.storage_offset() == 0);
  CHECK(v.at({2, 1}) == 9);
  v.set({0, 0}, 100);
  CHECK(t.at(0) == 100);  // a write through the view is visible in the base
  CHECK(t.view({2, 2, 3}).at({1, 0, 2}) == 8);
  CHECK(t.view({-1}).shape() == wf::Shape{12});

  REQUIRE_THROWS_WITH(t.view({5, -1}), Contains("[5, -1]") && Contains("12 elements"));
  REQUIRE_THROWS_WITH(t.view({-1, -1}), Contains("only one extent may be -1"));
  REQUIRE_THROWS_WITH(t.view({5, 5}), Contains("[5, 5]") && Contains("[12]"));
}

TEST_CASE("slice0 is a view of rows of dim 0 at the right offset", "[core]") {
  Tensor t = Tensor::arange(0, 24).view({4, 3, 2});
  Tensor s = t.slice0(1, 3);
  CHECK(s.shape() == wf::Shape{2, 3, 2});
  CHECK(s.shares_storage_with(t));
  CHECK(s.storage_offset() == 6);
  CHECK(static_cast<const float*>(s.raw_data()) == t.data<float>() + 6);
  CHECK(s.at(0) == 6);
  CHECK(s.at({1, 2, 1}) == 17);
  s.set(0, -1);
  CHECK(t.at({1, 0, 0}) == -1);

  const Tensor nested = s.slice0(1, 2);  // offsets compose
  CHECK(nested.storage_offset() == 12);
  CHECK(nested.at(0) == 12);
  const Tensor flat = s.view({-1});  // a view of a slice keeps the slice's offset
  CHECK(flat.storage_offset() == 6);
  CHECK(flat.at(11) == 17);
  CHECK(t.slice0(2, 2).numel() == 0);

  REQUIRE_THROWS_WITH(t.slice0(3, 5), Contains("[3, 5)") && Contains("[4, 3, 2]"));
  REQUIRE_THROWS_WITH(t.slice0(2, 1), Contains("[2, 1)"));
  REQUIRE_THROWS_WITH(Tensor::scalar(1).slice0(0, 1), Contains("0-dimensional"));
}

TEST_CASE("clone, copy_ and fill_", "[core]") {
  const Tensor a = Tensor::arange(0, 6).view({2, 3});
  Tensor c = a.clone();
  CHECK_FALSE(c.shares_storage_with(a));
  CHECK(values_of(c) == values_of(a));
  c.set(0, 9);
  CHECK(a.at(0) == 0);

  const Tensor row = a.slice0(1, 2).clone();  // clones only the slice
  CHECK(row.shape() == wf::Shape{1, 3});
  CHECK(row.storage_offset() == 0);
  CHECK(values_of(row) == std::vector<double>{3, 4, 5});

  Tensor d = Tensor::zeros({2, 3}, DType::f64);
  d.copy_(a);  // converts f32 → f64
  CHECK(values_of(d) == values_of(a));
  Tensor wrong = Tensor::zeros({3, 2});
  REQUIRE_THROWS_WITH(wrong.copy_(a), Contains("[2, 3]") && Contains("[3, 2]"));

  Tensor z = Tensor::zeros({3, 2});
  z.slice0(1, 2).fill_(5);  // touches only the sliced row
  CHECK(values_of(z) == std::vector<double>{0, 0, 5, 5, 0, 0});
  z.fill_(7);
  CHECK(values_of(z) == std::vector<double>(6, 7.0));
  z.zero_();
  CHECK(values_of(z) == std::vector<double>(6, 0.0));
}

TEST_CASE("large fill_, copy_ and dtype conversions are split over threads and cover every element", "[core]") {
  // Sizes around the 65536-element blocks of the parallel copy: one short, exact, one over, and
  // several blocks with a partial last one.
  for (const std::int64_t n : {std::int64_t{65535}, std::int64_t{65536}, std::int64_t{65537}, std::int64_t{3 * 65536 + 7}}) {
    CAPTURE(n);
    Tensor a = Tensor::empty({n}, DType::f32);
    a.fill_(2.5);
    Tensor ramp = Tensor::arange(0, static_cast<double>(n));  // f32, exact up to 2^24
    Tensor copied = Tensor::empty({n}, DType::f32);
    copied.copy_(ramp);
    const Tensor widened = ramp.to(DType::f64), narrowed = widened.to(DType::f32);
    bool ok = true;
    for (std::int64_t i = 0; i < n; ++i) {
      ok = ok && a.data<float>()[i] == 2.5f && copied.data<float>()[i] == float(i) &&
           widened.data<double>()[i] == double(i) && narrowed.data<float>()[i] == float(i);
    }
    CHECK(ok);
  }
}

TEST_CASE("copy_ between partly overlapping views is refused; onto itself it is a no-op", "[core]") {
  const Tensor base = Tensor::arange(0, 10);
  Tensor head = base.slice0(0, 6);
  const Tensor tail = base.slice0(4, 10);
  REQUIRE_THROWS_WITH(head.copy_(tail), Contains("overlap"));
  head.copy_(head);
  CHECK(base.at(5) == 5);
  Tensor front = base.slice0(0, 4);
  front.copy_(base.slice0(6, 10));  // disjoint views of one storage are fine
  CHECK(base.at(0) == 6);
}

TEST_CASE("element access by flat index and by coordinates", "[core]") {
  Tensor t = Tensor::zeros({2, 3}, DType::i64);
  t.set({1, 2}, 7);
  CHECK(t.at(5) == 7);
  CHECK(t.at({1, 2}) == 7);
  t.set(1, -3);
  CHECK(t.at({0, 1}) == -3);
  CHECK(t.to_vector<float>() == std::vector<float>{0, -3, 0, 0, 0, 7});

  REQUIRE_THROWS_WITH(t.at({2, 0}), Contains("index 2") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(t.at({0}), Contains("1 coordinates") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(t.at(6), Contains("6") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(t.set(-1, 0), Contains("-1") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(t.item(), Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(t.data<double>(), Contains("f64") && Contains("i64"));
}

TEST_CASE("str shows shape, dtype, device and the first values", "[core]") {
  const std::string s = Tensor::arange(0, 3).str();
  CHECK_THAT(s, Contains("shape=[3]") && Contains("dtype=f32") && Contains("device=cpu") &&
                    Contains("values=[0, 1, 2]"));
  CHECK_THAT(Tensor::arange(0, 20, 1, DType::i32).str(), Contains("dtype=i32") && Contains("... (20 total)"));
  std::ostringstream os;
  os << Tensor::ones({2});
  CHECK(os.str() == Tensor::ones({2}).str());
}

TEST_CASE("moving a tensor to a CUDA device it cannot reach is a clear error", "[core]") {
  const Tensor t = Tensor::ones({2});
  CHECK(t.to(wf::Device::cpu()).is_same(t));
  // No machine has 1000 GPUs: this fails with or without a CUDA backend.
  REQUIRE_THROWS_AS(t.to(wf::Device::cuda(999)), wf::Error);
  REQUIRE_THROWS_WITH(t.to(wf::Device::cuda(999)), Contains("cuda:999"));
  std::string why;
  if (wf::cuda_devices(&why).empty()) {
    REQUIRE_THROWS_WITH(t.to(wf::Device::cuda()), Contains("cpu") && Contains("cuda:0"));
    REQUIRE_THROWS_WITH(Tensor::empty({2}, DType::f32, wf::Device::cuda()), Contains("cuda:0"));
  }
}
