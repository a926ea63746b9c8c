#include "wallfacer/models/batch_source.h"

#include "wallfacer/models/model.h"

namespace wf::models {

BatchSource::~BatchSource() = default;

Batch TokenBatchSource::get(std::int64_t step, std::int64_t micro) const {
  return token_batch(loader_.get(step, micro), loader_.options().pack);
}

data::LoaderOptions loader_options(const config::RunConfig& c, comm::CommGrid& grid, const Model& model,
                                   bool validation) {
  data::LoaderOptions o;
  o.seq_len = c.train.seq_len;
  o.micro_batch_size = c.train.micro_batch_size;
  o.grad_accum_steps = config::grad_accum_steps(c);
  o.dp_size = c.parallel.dp;
  o.dp_rank = grid.grid().coord("dp");
  o.shard = parallel::sp_shard(sp_attention_config(c, model.causal()), grid);
  o.seed = static_cast<std::uint64_t>(c.train.seed);
  o.shuffle = !validation;  // validation reads the samples in order
  o.pack = c.data.pack;
  return o;
}

}  // namespace wf::models
