// The device proof catches what it exists to catch: a fallback to the host planted inside a
// training step on the test device ends the step, for each kind the seam forbids (issue 27):
//   - a direct call of a CPU kernel on a device tensor (kernels::cpu::...): SIGSEGV;
//   - a loop over data<T>() of a device tensor: SIGSEGV;
//   - an item() of a device tensor: an error naming the fix.
// The unplanted step runs. Each case is a fresh process (this executable again, running the hidden
// "[.planted_step]" case with WF_PLANTED set), so a fault ends that process and not this one, and no
// MPI or OpenMP state crosses a fork. The plant sits in a gradient hook of the first parameter: it
// runs inside the backward of Trainer::train_step, as code in nn, parallel or train would.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "kernels/cpu/elementwise.h"
#include "wallfacer/autograd/grad_hooks.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/ops/ops.h"
#include "wallfacer/train/trainer.h"

namespace {

constexpr int kItemRefused = 3;  // the child's exit status when item() was refused as it must be

// A tiny GPT on synthetic tokens, one step on the test device.
wf::config::RunConfig planted_run() {
  wf::config::RunConfig c;
  c.model.set_name("gpt");
  c.model.set("n_layer", 1);
  c.model.set("n_head", 2);
  c.model.set("n_kv_head", 2);
  c.model.set("d_model", 16);
  c.model.set("d_ff", 32);
  c.model.set("vocab_size", 256);
  c.model.set("max_seq_len", 16);
  c.train.seq_len = 16;
  c.train.micro_batch_size = 1;
  c.train.global_batch_size = 1;
  c.train.steps = 1;
  c.train.device = wf::Device::test();
  c.data.source = wf::config::DataSource::synthetic;
  c.checkpoint.dir = (std::filesystem::temp_directory_path() / ("wf-planted-" + std::to_string(getpid()))).string();
  c.log.dir = c.checkpoint.dir;
  return c;
}

// Runs this executable's hidden case with WF_PLANTED=plant; its wait status.
int run_child(const std::string& plant) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string command = "WF_PLANTED=" + plant + " '" + self + "' '[.planted_step]' > /dev/null 2>&1";
  return std::system(command.c_str());
}

}  // namespace

TEST_CASE("a planted step: run by the case below in a process of its own", "[.planted_step]") {
  const char* plant_env = std::getenv("WF_PLANTED");
  const std::string plant = plant_env ? plant_env : "";
  // A fault ends this process with SIGSEGV and no core file, even under a sanitizer that would
  // catch the signal itself.
  const rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigaction(SIGSEGV, &default_action, nullptr);
  sigaction(SIGBUS, &default_action, nullptr);
  auto& runtime = wf::comm::Runtime::init();
  const wf::config::RunConfig config = planted_run();
  wf::comm::CommGrid grid(wf::comm::ProcessGrid(config.parallel.grid(), runtime.world_size(), runtime.rank()));
  wf::train::Trainer trainer(config, grid);
  const wf::Tensor first = trainer.model().parameters().front();
  REQUIRE(first.device() == wf::Device::test());
  wf::autograd::set_grad_accumulated_hook(first, [plant](const wf::Tensor& leaf) {
    wf::Tensor g = leaf.grad();
    if (plant == "kernels_cpu") {
      wf::kernels::cpu::scale<float>(g.numel(), 0.5f, g.data<float>(), g.data<float>());
    } else if (plant == "data_loop") {
      float* p = g.data<float>();
      for (std::int64_t i = 0; i < g.numel(); ++i) p[i] *= 0.5f;
    } else if (plant == "item") {
      try {
        (void)wf::sum(g).item();
      } catch (const wf::Error& e) {
        const bool names_fix = std::string(e.what()).find("x.to(Device::cpu())") != std::string::npos;
        std::_Exit(names_fix ? kItemRefused : 4);
      }
    }
  });
  trainer.train_step();
  std::_Exit(0);  // no MPI_Finalize in a child that may have faulted siblings: exit at once
}

TEST_CASE("a fallback planted inside a training step on the test device ends the step", "[train][testdev]") {
  const int none = run_child("none");
  INFO("the unplanted step's wait status: " << none);
  REQUIRE((WIFEXITED(none) && WEXITSTATUS(none) == 0));

  for (const std::string plant : {"kernels_cpu", "data_loop"}) {
    const int status = run_child(plant);
    INFO(plant << ": wait status " << status);
    // system() runs the child under sh, which reports a signal death as 128 + the signal.
    const bool segfault = (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) ||
                          (WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGSEGV);
    CHECK(segfault);
  }

  const int item = run_child("item");
  INFO("item: wait status " << item);
  CHECK((WIFEXITED(item) && WEXITSTATUS(item) == kItemRefused));
}
