#include "wallfacer/models/dit_batches.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "wallfacer/core/rng.h"
#include "wallfacer/nn/init.h"

namespace wf::models {
namespace {

// Samples of a synthetic image set: enough variety for a benchmark, small enough to hold.
constexpr std::int64_t kSyntheticSamples = 1024;

}  // namespace

DitDrawSeeds DitDrawSeeds::for_run(std::uint64_t seed, bool validation) {
  const std::uint64_t root = nn::derive_seed(seed, validation ? "dit.validation" : "dit.train");
  return {nn::derive_seed(root, "time"), nn::derive_seed(root, "noise"), nn::derive_seed(root, "label_drop")};
}

DitBatchSource::DitBatchSource(std::shared_ptr<const data::ImageDataset> data, const DitOptions& model,
                               data::SampleOrderOptions order, std::vector<std::int64_t> positions, DitDrawSeeds seeds,
                               bool drop_labels)
    : data_(std::move(data)),
      model_(model),
      diffusion_(model.diffusion_options()),
      order_(order),
      positions_(std::move(positions)),
      seeds_(seeds),
      drop_labels_(drop_labels) {
  const Tensor& images = data_->images;
  WF_USER_CHECK(images.dim() == 4 && images.size(1) == model.in_channels && images.size(2) == model.image_size &&
                    images.size(3) == model.image_size,
                "DiT: {} holds images {}, but the model takes [N, model.in_channels = {}, model.image_size = {}, {}]; "
                "set model.in_channels and model.image_size to the data's",
                data_->description, shape_str(images.shape()), model.in_channels, model.image_size, model.image_size);
  WF_USER_CHECK(data_->num_classes <= model.num_classes,
                "DiT: {} has labels up to {}, but model.num_classes is {}; raise model.num_classes",
                data_->description, data_->num_classes - 1, model.num_classes);
}

Batch DitBatchSource::get(std::int64_t step, std::int64_t micro) const {
  const DitOptions& o = model_;
  const std::int64_t B = order_.options().micro_batch_size, F = o.frames;
  const std::int64_t per_image = o.in_channels * o.image_size * o.image_size, per_sample = F * per_image;
  Shape shape = {B, o.in_channels, o.image_size, o.image_size};
  if (F > 1) shape.insert(shape.begin() + 1, F);
  // The batch is assembled on the host (the loader's images, the counter RNG's times, labels and
  // noise), as every batch source's; a run on a device moves it there as a whole.
  Tensor images = Tensor::empty(shape, DType::f32);
  Tensor times = Tensor::empty({B}, DType::f64);
  Tensor labels = Tensor::empty({B}, DType::i64);
  Tensor noise = Tensor::empty(shape, DType::f32);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t s = order_.stream_index(step, micro, b), sample = order_.sample_at(s);
    const auto stream = static_cast<std::uint64_t>(s);
    std::memcpy(images.data<float>() + b * per_sample, data_->images.data<float>() + sample * per_sample,
                static_cast<std::size_t>(per_sample) * sizeof(float));
    times.data<double>()[b] = diffusion_.time_from_uniform(uniform_at(seeds_.time, stream));
    const bool dropped = drop_labels_ && o.class_dropout > 0 && uniform_at(seeds_.label_drop, stream) < o.class_dropout;
    labels.data<std::int64_t>()[b] = dropped ? o.num_classes : data_->labels.data<std::int64_t>()[sample * F];
    const Tensor e = Tensor::randn_at({per_sample}, seeds_.noise, stream * static_cast<std::uint64_t>(per_sample));
    std::memcpy(noise.data<float>() + b * per_sample, e.data<float>(), static_cast<std::size_t>(per_sample) * sizeof(float));
  }
  Batch batch;
  batch.set("images", images).set("noise", noise).set("times", times).set("labels", labels);
  batch.set("positions", Tensor::from_vector(positions_, {static_cast<std::int64_t>(positions_.size())}));
  return batch;
}

std::unique_ptr<BatchSource> make_dit_batches(const config::RunConfig& c, comm::CommGrid& grid, const Model& model,
                                              bool validation) {
  const auto* dit = dynamic_cast<const Dit*>(&model);
  WF_CHECK(dit != nullptr, "DiT batches: model '{}' is not a DiT", model.name());
  const DitOptions& o = dit->options();
  std::shared_ptr<data::ImageDataset> dataset;
  if (c.data.source == config::DataSource::synthetic) {
    const std::uint64_t seed = nn::derive_seed(static_cast<std::uint64_t>(c.train.seed), validation ? "val" : "train");
    dataset = std::make_shared<data::ImageDataset>(
        data::synthetic_images(kSyntheticSamples * o.frames, o.in_channels, o.image_size, o.num_classes, seed));
  } else {
    const std::string& images = validation ? c.data.val_path : c.data.train_path;
    const std::string& labels = validation ? c.data.val_labels_path : c.data.train_labels_path;
    if (images.empty()) return nullptr;  // no validation set
    dataset = std::make_shared<data::ImageDataset>(data::load_idx_dataset(images, labels, o.image_size));
  }
  const data::LoaderOptions loader = loader_options(c, grid, model, validation);
  const std::int64_t samples = dataset->images.size(0) / o.frames;
  WF_USER_CHECK(samples > 0, "DiT: {} holds fewer than model.frames = {} images: no sample", dataset->description,
                o.frames);
  return std::make_unique<DitBatchSource>(std::move(dataset), o, data::sample_order_options(loader, samples),
                                          parallel::run_positions(loader.shard.runs()),
                                          DitDrawSeeds::for_run(static_cast<std::uint64_t>(c.train.seed), validation),
                                          /*drop_labels=*/!validation);
}

std::string dit_image_size_problem(const DitOptions& o, const config::RunConfig& c) {
  if (c.data.source == config::DataSource::file) {
    if (o.image_size <= data::kIdxMaxResize) return "";
    return fmt::format("model.image_size: {} is larger than the {} pixels a side the IDX image loader resizes to; "
                       "set model.image_size to at most {}",
                       o.image_size, data::kIdxMaxResize, data::kIdxMaxResize);
  }
  // The synthetic set: kSyntheticSamples x frames images of in_channels x image_size² f32 values.
  const double per_side = std::sqrt(static_cast<double>(data::kIdxMaxResizedElements) /
                                    static_cast<double>(kSyntheticSamples * o.frames * o.in_channels));
  const auto largest = static_cast<std::int64_t>(std::floor(per_side));
  if (o.image_size <= largest) return "";
  return fmt::format("model.image_size: {} is larger than the synthetic image set holds ({} images of {} channel(s) "
                     "and at most {} values in all, so at most {} pixels a side); set model.image_size to at most {}",
                     o.image_size, kSyntheticSamples * o.frames, o.in_channels, data::kIdxMaxResizedElements, largest,
                     largest);
}

}  // namespace wf::models
