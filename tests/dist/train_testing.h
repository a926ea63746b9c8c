#pragma once
// The small GPT run the distributed training tests share: 2 layers, d_model 32, 4 heads with 2
// K/V heads, the byte vocabulary, 48-token sequences (a multiple of every zigzag layout's unit
// for P in {2, 3, 4, 8}) of synthetic tokens, one sequence per microbatch, lr 3e-3. Each test
// sets its layout, steps, batch, schedule and seed on top.
#include <filesystem>
#include <memory>
#include <string>

#include "wallfacer/config/run_config.h"
#include "wallfacer/models/model.h"
#include "wallfacer/train/trainer.h"

namespace wf::test {

// `dir_name` names the checkpoint and log directory under the system's temporary directory.
// `model`: "gpt" or "llama" (the same sizes; LLaMA's SwiGLU, RMSNorm, RoPE and untied head).
inline config::RunConfig small_gpt_run(int dp, int sp, bool checkpoint_attention, const std::string& dir_name,
                                       const std::string& model = "gpt") {
  config::RunConfig c;
  c.model.set_name(model);
  c.model.set("n_layer", 2);
  c.model.set("n_head", 4);
  c.model.set("n_kv_head", 2);
  c.model.set("d_model", 32);
  c.model.set("d_ff", 64);
  c.model.set("vocab_size", 256);  // the byte tokenizer's (validate checks it)
  c.model.set("max_seq_len", 48);
  c.model.set("checkpoint_attention", checkpoint_attention);
  c.parallel.dp = dp;
  c.parallel.sp = sp;
  c.train.seq_len = 48;
  c.train.micro_batch_size = 1;
  c.train.lr = 3e-3;
  c.data.source = config::DataSource::synthetic;
  c.checkpoint.dir = (std::filesystem::temp_directory_path() / dir_name).string();
  c.log.dir = c.checkpoint.dir;
  return c;
}

// A trainer of `config` over `grid` whose model is in `dtype` (f64 for tight parity bounds), on
// the tokens the Trainer would draw itself.
inline std::unique_ptr<train::Trainer> trainer_in(const config::RunConfig& config, comm::CommGrid& grid, DType dtype) {
  auto model = models::create(config, grid);
  model->to(dtype);
  return std::make_unique<train::Trainer>(config, grid, std::move(model), train::open_token_source(config, false),
                                          nullptr);
}

}  // namespace wf::test
