#pragma once
// The --device and --transport options of the commands that measure on a device (`wallfacer bench
// attention`, `wallfacer tune --calibrate`): the words of train.device and comm.gpu_transport,
// resolved as training resolves them, and the clock that stops only when the device is done.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "wallfacer/comm/transport.h"
#include "wallfacer/core/device.h"

namespace wf::cli {

// Adds --device (cpu, cuda, testdev or auto) and --transport (auto, nccl or staged) to `command`,
// storing the words; `what` says what runs there (e.g. "the measurements"). CLI11 refuses any
// other word with a message that lists the choices.
void add_device_options(CLI::App& command, std::string& device, std::string& transport, const std::string& what);

// --device as train.device resolves (train::resolve_train_device): cuda is this rank's GPU (the
// one of its local rank); auto is that GPU where one is visible, else the CPU; cuda with no GPU
// visible is a wf::UserError in the option's words, naming why and the fix.
Device resolve_device_option(const std::string& name);

// --transport's word as a comm::GpuTransport (wf::UserError for another word).
comm::GpuTransport parse_transport_option(const std::string& name);

// Seconds of fn on `device`: idle before, drained after (synchronize), so a device's time is
// what it took to run, not how long the host took to enqueue it.
double device_seconds(Device device, const std::function<void()>& fn);

}  // namespace wf::cli
