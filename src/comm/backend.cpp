// What every backend shares: the names of reduction ops and the portable isendrecv,
// iall_reduce, ireduce_scatter, iall_gather and all_gather_v.
#include "wallfacer/comm/backend.h"

#include <algorithm>

namespace wf::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::avg: return "avg";
    case ReduceOp::min: return "min";
  }
  return "unknown";
}

namespace {

// Several requests completed as one: the portable isendrecv.
class JoinedRequest final : public RequestImpl {
 public:
  explicit JoinedRequest(std::vector<Request> parts) : parts_(std::move(parts)) {}
  void wait() override {
    for (Request& part : parts_) part.wait();
  }
  bool test() override {
    bool all_done = true;
    for (Request& part : parts_) all_done = part.test() && all_done;  // test every part: each may progress
    return all_done;
  }

 private:
  std::vector<Request> parts_;
};

}  // namespace

Request Backend::iall_reduce(Tensor& t, ReduceOp op) {
  all_reduce(t, op);
  return {};
}

Request Backend::ireduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  reduce_scatter(input, output, op);
  return {};
}

Request Backend::iall_gather(const Tensor& input, Tensor& output) {
  all_gather(input, output);
  return {};
}

Request Backend::isendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag) {
  std::vector<Request> parts;
  parts.push_back(irecv(recv, src, tag));
  // The outgoing data must not be overwritten by the incoming while it is sent.
  parts.push_back(isend(send.shares_storage_with(recv) ? send.clone() : send, dst, tag));
  return Request(std::make_shared<JoinedRequest>(std::move(parts)));
}

// Pads each piece to the largest so a plain all_gather can move them, then drops the padding.
// Costs (size · max − sum) rows of extra traffic, which is why MPI overrides it.
void Backend::all_gather_v(const Tensor& input, Tensor& output, const std::vector<std::int64_t>& rows) {
  const std::int64_t max_rows = rows.empty() ? 0 : *std::max_element(rows.begin(), rows.end());
  Shape piece_shape = input.shape();
  piece_shape[0] = max_rows;
  Tensor padded = Tensor::zeros(piece_shape, input.dtype(), input.device());
  if (input.size(0) > 0) padded.slice0(0, input.size(0)).copy_(input);
  Shape gathered_shape = piece_shape;
  gathered_shape[0] = max_rows * size();
  Tensor gathered = Tensor::empty(gathered_shape, input.dtype(), input.device());
  all_gather(padded, gathered);
  std::int64_t offset = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::int64_t first = static_cast<std::int64_t>(r) * max_rows;
    if (rows[r] > 0) output.slice0(offset, offset + rows[r]).copy_(gathered.slice0(first, first + rows[r]));
    offset += rows[r];
  }
}

}  // namespace wf::comm
