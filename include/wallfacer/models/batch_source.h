#pragma once
// Where a model's batches come from. The trainer asks a BatchSource for this rank's part of
// micro batch `micro` of step `step`, as the named tensors the model reads (models::Batch).
// Language models read token windows (TokenBatchSource over data::BatchLoader, the default for
// a registered model); a model with other inputs (DiT: images, labels and diffusion draws)
// registers its own factory with its schema (ModelRegistration). Sources are stateless in the
// step, like the token loader: any step in any order gives the same batch, so a resumed run
// needs only its step, and every layout draws the same samples.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/data/loader.h"

namespace wf::models {

class Batch;
class Model;

class BatchSource {
 public:
  virtual ~BatchSource();
  virtual Batch get(std::int64_t step, std::int64_t micro) const = 0;
  virtual std::string describe() const = 0;  // for messages: "token file 'data/kjv/train.bin'"
};

// The training (validation = false) or validation source of a run on this rank of the grid;
// null when the run has no validation data.
using BatchSourceFactory = std::function<std::unique_ptr<BatchSource>(const config::RunConfig&, comm::CommGrid&,
                                                                      const Model&, bool validation)>;

// A language model's token windows: data::BatchLoader's batches as "tokens", "targets" and
// "positions", with the documents when the loader packs them (models::token_batch).
class TokenBatchSource final : public BatchSource {
 public:
  explicit TokenBatchSource(data::BatchLoader loader) : loader_(std::move(loader)) {}
  Batch get(std::int64_t step, std::int64_t micro) const override;
  std::string describe() const override { return loader_.source().describe(); }
  const data::BatchLoader& loader() const { return loader_; }

 private:
  data::BatchLoader loader_;
};

// The sample order options every layout derives the same way: the run's micro batch, gradient
// accumulation and dp slice, and this rank's sp shard of a sequence for the model's mask.
data::LoaderOptions loader_options(const config::RunConfig& config, comm::CommGrid& grid, const Model& model,
                                   bool validation);

}  // namespace wf::models
