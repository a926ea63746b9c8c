// The per-shape choice's decisions (kernels/cuda/attention_choice_logic.h) on the host, with a bench
// whose "device" is host memory, whose timings are preset per implementation and whose runners
// write known values: which implementation a first use keeps, what a mismatch, a refusal, a failure
// or a call it does not take does, what later calls run, and the forced settings. CUDA builds only
// (the logic lives in the CUDA backend); the same decisions on a GPU: tests/cuda/test_attention.cpp
// and test_cudnn_attention.cpp.
#include <catch2/catch.hpp>

#include "wallfacer/build_info.h"

#if WF_HAVE_CUDA
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "kernels/cuda/attention_choice_logic.h"
#include "wallfacer/core/error.h"

namespace {

using namespace wf::kernels::cuda;

constexpr float kInf = std::numeric_limits<float>::infinity();
using Setting = AttentionBackendSetting;

// Host memory for the outputs; time_ms runs the implementation once and returns its preset time
// (the implementation that ran last names itself through `running`).
class FakeBench final : public ChoiceBench {
 public:
  // sampled: counts the outputs copied to the host (it outlives the bench, which the table drops).
  FakeBench(std::map<std::string, double> times, int& sampled) : sampled_(sampled), times_(std::move(times)) {}
  float* scratch(std::int64_t floats) override {
    held_.emplace_back(static_cast<std::size_t>(floats), std::nanf(""));  // unwritten reads as NaN
    return held_.back().data();
  }
  double time_ms(const std::function<void()>& run) override {
    run();
    ++timed;
    return times_.at(running);
  }
  std::vector<float> sample(const ChoiceOutput& out, const float* data) override {
    ++sampled_;
    return std::vector<float>(data, data + out.size());
  }
  void copy_out(const float* src, float* dst, std::int64_t n, bool accumulate) override {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = accumulate ? dst[i] + src[i] : src[i];
  }

  std::string running;  // set by the runners
  int timed = 0;

 private:
  int& sampled_;
  std::map<std::string, double> times_;
  std::deque<std::vector<float>> held_;
};

// One output of 2 rows × 3 values; each implementation writes `value` everywhere (or what
// `values` says), counts its runs and names itself on the bench while it runs.
struct Implementation {
  std::string name;
  std::vector<float> values = std::vector<float>(6, 1.0f);
  bool takes_calls = true;  // false: it returns false (no plan for this call)
  bool fails = false;       // true: it throws wf::Error
  int runs = 0;
};

ChoiceRunner runner(Implementation& impl, FakeBench*& bench) {
  return [&impl, &bench](const std::vector<float*>& outputs, bool accumulate) {
    ++impl.runs;
    if (bench) bench->running = impl.name;
    if (impl.fails) WF_FAIL("{} failed on purpose", impl.name);
    if (!impl.takes_calls) return false;
    for (std::size_t i = 0; i < impl.values.size(); ++i)
      outputs[0][i] = accumulate ? outputs[0][i] + impl.values[i] : impl.values[i];
    return true;
  };
}

struct Call {
  Implementation own{"own"}, cudnn{"cudnn"}, sm90{"sm90"};
  std::string cudnn_refusal, sm90_refusal;
  std::vector<float> destination = std::vector<float>(6, 0.0f);
  std::map<std::string, double> times = {{"own", 2.0}, {"cudnn", 1.5}, {"sm90", 1.0}};
  FakeBench* bench = nullptr;  // a first use's, while the table measures (the table owns it)
  int measured = 0;            // first uses measured
  int sampled = 0;             // outputs copied to the host for the comparisons, over every first use

  bool run(ChoiceTable<int>& table, Setting setting, int key, bool accumulate = false) {
    const std::vector<ChoiceOutput> outputs = {{"o", 2, 3, 0.02, destination.data()}};
    const std::vector<ChoiceCandidate> candidates = {{AttentionRoute::cudnn, cudnn_refusal, runner(cudnn, bench)},
                                                     {AttentionRoute::sm90, sm90_refusal, runner(sm90, bench)}};
    const bool written = table.route(
        setting, key, "shape " + std::to_string(key), outputs, accumulate, runner(own, bench), candidates,
        [&] {
          auto b = std::make_unique<FakeBench>(times, sampled);
          bench = b.get();
          ++measured;
          return b;
        },
        [](AttentionRoute r) { return r == AttentionRoute::cudnn ? std::string("the composite graph") : ""; });
    bench = nullptr;  // gone with the table's measurement
    return written;
  }
};

}  // namespace

TEST_CASE("attention choice: a first use keeps the fastest implementation whose results match the own kernel's, "
          "and later calls run it",
          "[kernels][attention_choice]") {
  ChoiceTable<int> table;
  Call call;
  CHECK(call.run(table, Setting::automatic, 1));  // the first use writes the call's outputs itself
  CHECK(call.measured == 1);
  CHECK(call.sampled == 3);                       // the own kernel's output once, then each candidate's
  CHECK(call.destination == call.own.values);     // the own kernel's
  CHECK(call.own.runs == 2);                      // warm-up, then timed
  CHECK(call.sm90.runs == 2);
  CHECK(call.cudnn.runs == 2);
  const auto choice = table.find(1);
  REQUIRE(choice);
  CHECK(choice->which == "sm90");
  CHECK(choice->own_ms == 2.0);
  CHECK(choice->cudnn_ms == 1.5);
  CHECK(choice->sm90_ms == 1.0);
  CHECK_THAT(choice->reason, Catch::Contains("cudnn matched (the composite graph)") &&
                                 Catch::Contains("sm90 matched"));

  // A later call runs the choice alone, into the call's outputs, added to under accumulate.
  call.sm90.values = std::vector<float>(6, 3.0f);
  CHECK(call.run(table, Setting::automatic, 1, /*accumulate=*/true));
  CHECK(call.sm90.runs == 3);
  CHECK(call.own.runs == 2);
  CHECK(call.measured == 1);
  CHECK(call.destination == std::vector<float>(6, 4.0f));
  // ... unless this call's pointers are refused: then the caller's own kernel runs.
  call.sm90_refusal = "q, k or v is not 16-byte aligned";
  CHECK_FALSE(call.run(table, Setting::automatic, 1));
  CHECK(table.choices().size() == 1);
}

TEST_CASE("attention choice: a mismatch, a failure, a refusal or a call not taken disables that implementation "
          "for the shape",
          "[kernels][attention_choice]") {
  ChoiceTable<int> table;
  SECTION("results that differ beyond the tolerance") {
    Call call;
    call.sm90.values[4] = 1.1f;  // 0.1 > 0.02 · 1 + 1e-3
    call.cudnn.values[0] = 1.015f;  // within 0.02 · 1 + 1e-3
    CHECK(call.run(table, Setting::automatic, 1));
    const auto choice = table.find(1);
    REQUIRE(choice);
    CHECK(choice->which == "cudnn");
    CHECK(choice->sm90_ms < 0);
    CHECK_THAT(choice->reason, Catch::Contains("o: max |sm90 - own| 0.1"));
  }
  SECTION("an infinity the own kernel does not have (a row that sees no key is -inf in both)") {
    Call call;
    call.own.values[2] = call.cudnn.values[2] = -kInf;
    call.sm90.values[2] = 0.0f;
    CHECK(call.run(table, Setting::automatic, 1));
    CHECK(table.find(1)->which == "cudnn");
    CHECK_THAT(table.find(1)->reason, Catch::Contains("where the own kernel has -inf"));
  }
  SECTION("a failure, and a call it does not take") {
    Call call;
    call.sm90.fails = true;
    call.cudnn.takes_calls = false;
    CHECK(call.run(table, Setting::automatic, 1));
    const auto choice = table.find(1);
    CHECK(choice->which == "own");
    CHECK_THAT(choice->reason, Catch::Contains("sm90 failed: sm90 failed on purpose") &&
                                   Catch::Contains("cudnn did not take this call"));
    CHECK(call.destination == call.own.values);
    // Cached as own: later calls run the caller's kernel, nothing else.
    CHECK_FALSE(call.run(table, Setting::automatic, 1));
    CHECK(call.sm90.runs == 1);
  }
  SECTION("a refusal is noted, never run") {
    Call call;
    call.cudnn_refusal = "key windows (packed documents)";
    call.times["sm90"] = 3.0;  // slower than the own kernel: not chosen
    CHECK(call.run(table, Setting::automatic, 1));
    CHECK(call.cudnn.runs == 0);
    const auto choice = table.find(1);
    CHECK(choice->which == "own");
    CHECK(choice->cudnn_ms < 0);
    CHECK(choice->sm90_ms == 3.0);
    CHECK_THAT(choice->reason, Catch::Contains("cudnn: key windows (packed documents)"));
  }
}

TEST_CASE("attention choice: the first use under accumulate adds the own kernel's results; shapes are chosen apart",
          "[kernels][attention_choice]") {
  ChoiceTable<int> table;
  Call call;
  call.destination = std::vector<float>(6, 5.0f);
  CHECK(call.run(table, Setting::automatic, 7, /*accumulate=*/true));
  CHECK(call.destination == std::vector<float>(6, 6.0f));
  call.times["cudnn"] = 0.5;
  CHECK(call.run(table, Setting::automatic, 8));
  CHECK(table.find(7)->which == "sm90");
  CHECK(table.find(8)->which == "cudnn");
  CHECK(table.choices().size() == 2);
}

TEST_CASE("attention choice: WF_ATTENTION_BACKEND own runs nothing else; cudnn and sm90 run that one unmeasured",
          "[kernels][attention_choice]") {
  ChoiceTable<int> table;
  Call call;
  CHECK_FALSE(call.run(table, Setting::own, 1));
  CHECK(table.choices().empty());
  CHECK(call.sm90.runs + call.cudnn.runs + call.own.runs == 0);

  CHECK(call.run(table, Setting::sm90, 2));
  CHECK(call.sm90.runs == 1);
  CHECK(call.own.runs == 0);
  CHECK(call.measured == 0);
  CHECK(table.find(2)->which == "sm90");
  CHECK_THAT(table.find(2)->reason, Catch::Contains("unmeasured, unverified"));

  call.cudnn_refusal = "head_dim above 128";
  CHECK_FALSE(call.run(table, Setting::cudnn, 3));
  CHECK(table.find(3)->which == "own");
  CHECK_THAT(table.find(3)->reason, Catch::Contains("WF_ATTENTION_BACKEND=cudnn, which does not take this shape"));
}

TEST_CASE("attention choice: outputs are compared with NaNs and infinities matched exactly and the rest against "
          "rtol times the largest plus 1e-3",
          "[kernels][attention_choice]") {
  const std::vector<float> want = {1.0f, -2.0f, -kInf, std::nanf("")};
  CHECK(choice_mismatch("o", "x", want, want, 0.02) == "");
  CHECK(choice_mismatch("o", "x", want, {1.03f, -2.0f, -kInf, std::nanf("")}, 0.02) == "");  // 0.03 <= 0.04 + 1e-3
  CHECK_THAT(choice_mismatch("o", "x", want, {1.05f, -2.0f, -kInf, std::nanf("")}, 0.02),
             Catch::Contains("o: max |x - own| 0.05"));
  CHECK_THAT(choice_mismatch("lse", "x", want, {1.0f, -2.0f, kInf, std::nanf("")}, 0.02),
             Catch::Contains("lse: inf at sampled element 2 where the own kernel has -inf"));
  CHECK_THAT(choice_mismatch("o", "x", want, {1.0f, std::nanf(""), -kInf, std::nanf("")}, 0.02),
             Catch::Contains("NaN at sampled element 1"));
  CHECK_THAT(choice_mismatch("o", "x", want, {1.0f}, 0.02), Catch::Contains("1 samples where the own kernel has 4"));
  CHECK(choice_mismatch("o", "x", {}, {}, 0.02) == "");
}

#endif  // WF_HAVE_CUDA
