#pragma once
// DiT's batches: images with their labels and the diffusion draws, for this rank's part of a
// micro batch. Sample b of (step, micro) is sample_at(s) of the data (data/sample_order.h, s
// its stream index); from s alone come its diffusion time (uniform, Diffusion::time_from_uniform),
// its noise (normal, element k of stream s·(elements per sample) + k) and its label dropout
// (uniform < model.class_dropout → the null class), each from its own seeded stream. So every
// dp × sp × tp × pp layout draws the same numbers for the same sample, and a resumed run draws
// them again. Every rank of an sp group holds the whole (small) images; "positions" names its
// patches (the contiguous layout of a full-attention model).
//
// Batch tensors: "images" [B, C, H, W] f32 in [−1, 1] ([B, F, C, H, W] for video), "noise" like
// it, "times" [B] f64, "labels" [B] i64, "positions" [n_local] i64.
#include <memory>

#include "wallfacer/data/idx_images.h"
#include "wallfacer/data/sample_order.h"
#include "wallfacer/models/dit.h"

namespace wf::models {

struct DitDrawSeeds {
  std::uint64_t time = 0, noise = 0, label_drop = 0;
  // The streams of a run: from train.seed, distinct for training and validation.
  static DitDrawSeeds for_run(std::uint64_t seed, bool validation);
};

class DitBatchSource final : public BatchSource {
 public:
  // `videos`: frames > 1 reads sample i as images [i·F, (i+1)·F) of the dataset.
  DitBatchSource(std::shared_ptr<const data::ImageDataset> data, const DitOptions& model, data::SampleOrderOptions order,
                 std::vector<std::int64_t> positions, DitDrawSeeds seeds, bool drop_labels);
  Batch get(std::int64_t step, std::int64_t micro) const override;
  std::string describe() const override { return data_->description; }

 private:
  std::shared_ptr<const data::ImageDataset> data_;
  DitOptions model_;
  Diffusion diffusion_;
  data::SampleOrder order_;
  std::vector<std::int64_t> positions_;
  DitDrawSeeds seeds_;
  bool drop_labels_;
};

// The BatchSourceFactory DiT registers: the IDX files of data.train_path / train_labels_path
// (val_path / val_labels_path), resized to model.image_size when they differ, or synthetic
// images for data.source synthetic.
std::unique_ptr<BatchSource> make_dit_batches(const config::RunConfig& config, comm::CommGrid& grid,
                                              const Model& model, bool validation);

// model.image_size against what make_dit_batches can load (the IDX loader's largest resize, the
// synthetic set's size): a "model.image_size: ..." line naming the limit, or "" when it fits.
std::string dit_image_size_problem(const DitOptions& options, const config::RunConfig& config);

}  // namespace wf::models
