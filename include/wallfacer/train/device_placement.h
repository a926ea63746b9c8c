#pragma once
// Where the training step runs (train.device): the model's tensors and each batch moved there,
// and the one counted read of the step's metrics back to the host.
#include "wallfacer/core/device.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/models/model.h"
#include "wallfacer/nn/module.h"

namespace wf::train {

// The device this rank's step runs on for train.device: the CPU or the test device as named; for
// cuda, this rank's GPU (the one comm::Runtime picked: cuda:local_rank, round robin when ranks
// outnumber the node's GPUs; cuda:0 without a runtime); for auto, that GPU when one is visible,
// else the CPU. wf::UserError for cuda when no GPU is visible, naming why and the fix.
Device resolve_train_device(Device configured);

// Moves every parameter and buffer of `module` to `device` in place: each TensorImpl stays (the
// layers' handles and the autograd graph see the new storage), its values are copied bit for bit.
// The weights are initialised on the CPU first, from the seeds alone, so every device and layout
// starts from the same ones. Call before anything holds views of the parameters (the gradient
// buffers, the optimizer).
void move_to_device(nn::Module& module, Device device);

// The batch with every tensor on `device` (the same tensors when they are already there).
models::Batch batch_on(const models::Batch& batch, Device device);

// `t` copied to the host: one host synchronisation, counted (host_sync_count) on every device,
// the CPU included, so that a CPU run counts the reads a device run would make.
Tensor read_to_host(const Tensor& t);

}  // namespace wf::train
