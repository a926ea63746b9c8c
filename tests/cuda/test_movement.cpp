// The CUDA data-movement entries (kernels/cuda/movement.cpp) against the CPU's on the same fresh
// random inputs. They move bits (and, for Ulysses blocks, convert among f32, f64 and bf16 exactly
// as the CPU rounds), so every comparison is of bytes: the whole output buffer, including what
// the entry must leave alone.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/sp_kernel_args.h"
#include "tests/cuda/cuda_test_util.h"

namespace {

using namespace wf;
using namespace wf::cuda_test;
using wf::kernels::BlockMove;
using wf::kernels::UlyssesBlock;
using Dims = std::vector<std::int64_t>;

// n random bytes (a host u8 tensor): elements of any size, any bits.
Tensor random_bytes(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<std::uint8_t> v(static_cast<std::size_t>(n));
  for (auto& b : v) b = static_cast<std::uint8_t>(gen());
  return Tensor::from_vector<std::uint8_t>(v, {n});
}

std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  const auto* p = static_cast<const std::uint8_t*>(host.raw_data());
  return {p, p + host.nbytes()};
}

// REQUIREs the same bytes, naming the first that differs.
void require_same_bytes(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  const std::vector<std::uint8_t> g = bytes_of(got), w = bytes_of(want);
  REQUIRE(g.size() == w.size());
  const auto mismatch = std::mismatch(g.begin(), g.end(), w.begin());
  if (mismatch.first != g.end()) {
    INFO("byte " << (mismatch.first - g.begin()) << " of " << g.size() << ": got " << int(*mismatch.first)
                 << ", want " << int(*mismatch.second));
    REQUIRE(mismatch.first == g.end());
  }
}

Dims contiguous_strides(const Dims& shape) {
  Dims stride(shape.size());
  std::int64_t step = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    stride[d] = step;
    step *= shape[d];
  }
  return stride;
}

// The shape and strides of a permute of a contiguous `shape`.
struct Walk {
  Dims out_shape, src_stride;
};
Walk permuted(const Dims& shape, const Dims& order) {
  const Dims stride = contiguous_strides(shape);
  Walk w;
  for (const std::int64_t d : order) {
    w.out_shape.push_back(shape[static_cast<std::size_t>(d)]);
    w.src_stride.push_back(stride[static_cast<std::size_t>(d)]);
  }
  return w;
}

}  // namespace

TEST_CASE("cuda gather gives the CPU's bytes for permutes, broadcasts and strided walks of every element size",
          "[cuda][movement]") {
  const Walk walks[] = {
      {{}, {}},                                         // rank 0: one element
      {{1000}, {1}},                                    // a plain copy
      {{500}, {2}},                                     // every other element
      {{257, 33}, {1, 257}},                            // a transpose with odd sides
      {{4, 5}, {0, 1}},                                 // a row broadcast down
      {{3, 6, 7}, {7, 0, 1}},                           // a middle dim broadcast
      {{31, 1, 1}, {1, 0, 0}},                          // extent-1 dims
      permuted({2, 3, 4, 5}, {3, 1, 0, 2}),
      permuted({2, 3, 2, 3, 2, 3}, {5, 0, 4, 1, 3, 2}),  // rank 6, nothing merges
      permuted({7, 1, 9, 11}, {0, 1, 3, 2}),            // the last two swapped (attention's heads)
      {{2, 0, 3}, {0, 3, 1}},                           // empty
  };
  const std::size_t elem_size = GENERATE(as<std::size_t>{}, 1, 2, 4, 8);
  std::uint64_t salt = 10;
  for (const Walk& w : walks) {
    std::int64_t n = 1, reach = 1;  // elements out; source elements the walk reaches
    for (std::size_t d = 0; d < w.out_shape.size(); ++d) {
      n *= w.out_shape[d];
      reach += (w.out_shape[d] - 1) * w.src_stride[d];
    }
    const std::int64_t es = static_cast<std::int64_t>(elem_size);
    const Tensor src = random_bytes(std::max<std::int64_t>(reach, 1) * es, fresh_seed(++salt));
    const Tensor dst0 = random_bytes(n * es, fresh_seed(++salt));
    const Tensor src_g = src.to(gpu());
    Tensor want = dst0.clone(), got = dst0.to(gpu());
    cpu_kernels().gather(cpu_stream(), elem_size, src.raw_data(), w.out_shape, w.src_stride, want.raw_data());
    gpu_kernels().gather(gpu_stream(), elem_size, src_g.raw_data(), w.out_shape, w.src_stride, got.raw_data());
    require_same_bytes(got, want,
                       "gather " + Catch::Detail::stringify(w.out_shape) + " strides " +
                           Catch::Detail::stringify(w.src_stride) + ", " + std::to_string(elem_size) + "-byte elements");
  }
}

TEST_CASE("cuda gather refuses more independent dims than its kernel walks", "[cuda][movement]") {
  const Walk w = permuted(Dims(9, 2), {8, 7, 6, 5, 4, 3, 2, 1, 0});  // reversed: no two dims merge
  const Tensor src = Tensor::zeros({512}, DType::f32, gpu());
  Tensor dst = Tensor::empty({512}, DType::f32, gpu());
  REQUIRE_THROWS_WITH(gpu_kernels().gather(gpu_stream(), 4, src.raw_data(), w.out_shape, w.src_stride, dst.raw_data()),
                      Catch::Contains("at most 8"));
}

TEST_CASE("cuda copy_blocks gives the CPU's bytes through cudaMemcpy2D and through its kernel", "[cuda][movement]") {
  struct Case {
    std::size_t elem_size;
    std::int64_t src_block, src_start, dst_block, dst_start, outer, count;
    const char* what;
  };
  const Case cases[] = {
      {4, 257, 31, 100, 0, 33, 100, "narrow: a column range of every row"},
      {2, 50, 0, 257, 100, 7, 50, "copy_into_range: rows into a wider tensor"},
      {8, 0, 3, 0, 5, 1, 1000, "one block: a plain copy"},
      {1, 1001, 1, 1000, 0, 3, 1000, "bytes"},
      {3, 10, 2, 7, 1, 5, 5, "3-byte elements through cudaMemcpy2D"},
      {4, 3, 0, 10, 2, 31, 8, "overlapping source rows: the kernel"},
      {4, 0, 0, 33, 0, 5, 33, "one source row to every block: the kernel"},
      {3, 2, 1, 6, 0, 9, 5, "3-byte elements through the kernel"},
      {8, 5, 0, 5, 0, 0, 5, "no blocks"},
  };
  std::uint64_t salt = 40;
  for (const Case& c : cases) {
    const auto es = static_cast<std::int64_t>(c.elem_size);
    const std::int64_t outer = std::max<std::int64_t>(c.outer, 1);
    const std::int64_t src_elems = (outer - 1) * c.src_block + c.src_start + c.count;
    const std::int64_t dst_elems = (outer - 1) * c.dst_block + c.dst_start + c.count;
    const Tensor src = random_bytes(src_elems * es, fresh_seed(++salt));
    const Tensor dst0 = random_bytes(dst_elems * es, fresh_seed(++salt));
    const Tensor src_g = src.to(gpu());
    Tensor want = dst0.clone(), got = dst0.to(gpu());
    cpu_kernels().copy_blocks(cpu_stream(), c.elem_size, src.raw_data(), c.src_block, c.src_start, want.raw_data(),
                              c.dst_block, c.dst_start, c.outer, c.count);
    gpu_kernels().copy_blocks(gpu_stream(), c.elem_size, src_g.raw_data(), c.src_block, c.src_start, got.raw_data(),
                              c.dst_block, c.dst_start, c.outer, c.count);
    require_same_bytes(got, want, std::string("copy_blocks: ") + c.what);
  }
}

TEST_CASE("cuda select_rows gives the CPU's bytes for every element size", "[cuda][movement]") {
  const std::size_t elem_size = GENERATE(as<std::size_t>{}, 1, 2, 3, 4, 8);
  const std::int64_t outer = GENERATE(as<std::int64_t>{}, 1, 3);
  const std::int64_t rows = GENERATE(as<std::int64_t>{}, 5, 257);
  const std::int64_t row_elems = GENERATE(as<std::int64_t>{}, 1, 33);
  const std::int64_t n = GENERATE(as<std::int64_t>{}, 1, 31);
  const auto es = static_cast<std::int64_t>(elem_size);
  const std::uint64_t seed = fresh_seed(static_cast<std::uint64_t>(((es * 7 + outer) * 1000 + rows) * 100 + n));
  std::mt19937_64 gen(seed);
  std::vector<std::int64_t> positions(static_cast<std::size_t>(n));
  for (auto& p : positions) p = static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(rows));  // repeats too
  const Tensor pos = Tensor::from_vector<std::int64_t>(positions, {n});
  const Tensor x = random_bytes(outer * rows * row_elems * es, seed + 1);
  const Tensor out0 = random_bytes(outer * n * row_elems * es, seed + 2);
  const Tensor pos_g = pos.to(gpu()), x_g = x.to(gpu());
  Tensor want = out0.clone(), got = out0.to(gpu());
  cpu_kernels().select_rows(cpu_stream(), elem_size, outer, rows, row_elems, x.raw_data(), n,
                            pos.data<std::int64_t>(), want.raw_data());
  gpu_kernels().select_rows(gpu_stream(), elem_size, outer, rows, row_elems, x_g.raw_data(), n,
                            pos_g.data<std::int64_t>(), got.raw_data());
  require_same_bytes(got, want,
                     "select_rows outer " + std::to_string(outer) + " rows " + std::to_string(rows) + " row elements " +
                         std::to_string(row_elems) + " n " + std::to_string(n) + ", " + std::to_string(elem_size) +
                         "-byte elements");
}

TEST_CASE("cuda select_rows reports a position outside the table at the next synchronisation", "[cuda][movement]") {
  const Tensor pos = Tensor::from_vector<std::int64_t>({1, 7, 0}, {3}).to(gpu());
  const Tensor x = Tensor::zeros({5 * 4}, DType::f32, gpu());
  Tensor out = Tensor::zeros({3 * 4}, DType::f32, gpu());
  gpu_kernels().select_rows(gpu_stream(), 4, 1, 5, 4, x.raw_data(), 3, pos.data<std::int64_t>(), out.raw_data());
  REQUIRE_THROWS_WITH(gpu_stream().synchronize(), Catch::Contains("position 7 is outside the 5 rows"));
  gpu_stream().synchronize();  // raised once: the record is clear again
}

TEST_CASE("cuda ulysses_block packs, unpacks and adds the CPU's bytes for every dtype and wire at any offset",
          "[cuda][movement]") {
  const DType types[] = {DType::f32, DType::f64, DType::bf16};
  const std::int64_t batch = 2, tokens = 37, heads = 6;
  std::vector<std::int64_t> contiguous(20), two_runs, scattered;
  std::iota(contiguous.begin(), contiguous.end(), std::int64_t{0});
  for (std::int64_t t = 30; t < 37; ++t) two_runs.push_back(t);  // a zigzag rank's two pieces
  for (std::int64_t t = 3; t < 10; ++t) two_runs.push_back(t);
  for (std::int64_t i = 0; i < 10; ++i) {  // 20 runs of one: uploaded as a list
    scattered.push_back(36 - 2 * i);
    scattered.push_back(2 * i);
  }
  const std::vector<std::int64_t>* row_lists[] = {&contiguous, &two_runs, &scattered};
  std::uint64_t salt = 700;
  for (const DType dtype : types) {
    for (const DType wire : types) {
      for (const BlockMove move : {BlockMove::pack, BlockMove::unpack, BlockMove::unpack_add}) {
        if (move == BlockMove::unpack_add && dtype == DType::bf16) continue;  // refused: a sum needs f32 or f64
        for (const bool heads_first : {false, true}) {
          for (const auto* rows : row_lists) {
            for (const std::int64_t offset : {std::int64_t{0}, std::int64_t{3}, std::int64_t{6}}) {
              UlyssesBlock block;
              block.dtype = dtype;
              block.wire = wire;
              block.batch = batch;
              block.tokens = tokens;
              block.heads = heads;
              block.width = heads_first ? 1 : 5;
              block.heads_first = heads_first;
              block.first_head = 2;
              block.block_heads = 3;
              block.rows = *rows;
              block.move = move;
              const Dims shape = heads_first ? Dims{batch, heads, tokens} : Dims{batch, tokens, heads, block.width};
              const std::int64_t bytes = block.bytes();
              const std::int64_t elements = bytes / static_cast<std::int64_t>(dtype_size(wire));
              // Tensor and message hold numbers (no NaN payloads to tell apart): the message's
              // block is a random tensor in the wire dtype, between random slack bytes.
              const Tensor tensor = random_normal(shape, fresh_seed(++salt), dtype);
              std::vector<std::uint8_t> message = bytes_of(random_bytes(offset + bytes + 5, fresh_seed(++salt)));
              const std::vector<std::uint8_t> payload = bytes_of(random_normal({elements}, fresh_seed(++salt), wire));
              std::memcpy(message.data() + offset, payload.data(), payload.size());
              const Tensor msg = Tensor::from_vector<std::uint8_t>(message, {static_cast<std::int64_t>(message.size())});

              Tensor want_t = tensor.clone(), got_t = tensor.to(gpu());
              Tensor want_m = msg.clone(), got_m = msg.to(gpu());
              cpu_kernels().ulysses_block(cpu_stream(), block, want_t.raw_data(),
                                          static_cast<std::uint8_t*>(want_m.raw_data()) + offset);
              gpu_kernels().ulysses_block(gpu_stream(), block, got_t.raw_data(),
                                          static_cast<std::uint8_t*>(got_m.raw_data()) + offset);
              const std::string what = std::string("ulysses_block ") +
                                       (move == BlockMove::pack ? "pack" : move == BlockMove::unpack ? "unpack" : "add") +
                                       " " + dtype_name(dtype) + " tensor, " + dtype_name(wire) + " wire, " +
                                       (heads_first ? "heads first" : "tokens first") + ", " +
                                       std::to_string(rows->size()) + " rows (" +
                                       (rows == &scattered ? "a list" : "runs") + "), message at byte " +
                                       std::to_string(offset);
              require_same_bytes(got_m, want_m, what + ": the message");
              require_same_bytes(got_t, want_t, what + ": the tensor");
            }
          }
        }
      }
    }
  }
}
