// sample_dit: classifier-free guided sampling from a DiT (include/wallfacer/models/dit.h).
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/models/dit.h"
#include "wallfacer/ops/ops.h"

namespace wf::models {

Tensor sample_dit(Dit& model, const DitSampleOptions& options) {
  const DitOptions& o = model.options();
  const auto n = static_cast<std::int64_t>(options.labels.size());
  WF_USER_CHECK(n > 0, "sample: no images asked for (give at least one label)");
  for (const std::int64_t label : options.labels) {
    WF_USER_CHECK(label >= 0 && label < o.num_classes, "sample: class {} is outside the model's classes 0..{}", label,
                  o.num_classes - 1);
  }
  const bool guided = options.guidance != 1.0;
  WF_USER_CHECK(!guided || o.class_dropout > 0,
                "sample: classifier-free guidance {} needs the null class, which a model trained with "
                "model.class_dropout 0 does not have; use guidance 1",
                options.guidance);
  autograd::NoGradGuard no_grad;
  model.eval();
  Shape shape = {n, o.in_channels, o.image_size, o.image_size};
  if (o.frames > 1) shape.insert(shape.begin() + 1, o.frames);
  const Tensor noise = Tensor::randn_at(shape, options.seed, 0);
  // With guidance the batch runs twice over: first with the labels, then with the null class.
  std::vector<std::int64_t> labels = options.labels;
  if (guided) labels.insert(labels.end(), static_cast<std::size_t>(n), o.num_classes);
  const Tensor label_tensor = Tensor::from_vector(labels, {static_cast<std::int64_t>(labels.size())});
  const std::int64_t channel_dim = o.frames > 1 ? 2 : 1;
  const Diffusion::Denoiser denoise = [&](const Tensor& x, const std::vector<double>& times) {
    const Tensor input = guided ? cat({x, x}, 0) : x;
    std::vector<double> all_times = times;
    if (guided) all_times.insert(all_times.end(), times.begin(), times.end());
    // The times and labels are built on the host: they join x on its device.
    const Tensor times_tensor = Tensor::from_vector(all_times, {static_cast<std::int64_t>(all_times.size())});
    Tensor out = model.forward(input, times_tensor.to(x.device()), label_tensor.to(x.device()));
    if (out.dtype() != DType::f32) out = out.to(DType::f32);
    out = narrow(out, channel_dim, 0, o.in_channels);  // the prediction, without learn_sigma's variance
    if (!guided) return out;
    const Tensor cond = narrow(out, 0, 0, n), uncond = narrow(out, 0, n, n);
    return add(uncond, scale(sub(cond, uncond), options.guidance));
  };
  return model.diffusion().sample(denoise, noise, options.steps, options.clip);
}

}  // namespace wf::models
