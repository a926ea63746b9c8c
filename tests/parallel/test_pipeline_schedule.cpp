// Pipeline schedules: the textbook tables written out by hand, then the invariants every table
// must keep (each step once, backward after forward, no deadlock, the memory bound) and the
// bubble the simulator measures against the closed forms of docs/parallelism.md.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/parallel/pipeline_schedule.h"

using Catch::Contains;
using wf::parallel::parse_pipeline_schedule;
using wf::parallel::pipeline_schedule_problems;
using wf::parallel::PipelineAction;
using wf::parallel::PipelineSchedule;
using wf::parallel::PipelineScheduleKind;
using wf::parallel::PipelineTimeline;
using wf::parallel::simulate;
using Op = PipelineAction::Op;

namespace {

std::string row(const PipelineSchedule& schedule, int rank) {
  return wf::parallel::to_string(schedule.actions(rank), schedule.virtual_stages());
}

// The (kind, p, m, v) the invariants run over: p in {2,4,8}, m in {1,4,8,16}, interleaved with
// v in {2,3} where Megatron's rule (m % p == 0) lets it run.
struct Case {
  PipelineScheduleKind kind;
  int p, m, v;
};
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (int p : {2, 4, 8}) {
    for (int m : {1, 4, 8, 16}) {
      cases.push_back({PipelineScheduleKind::gpipe, p, m, 1});
      cases.push_back({PipelineScheduleKind::one_f_one_b, p, m, 1});
      for (int v : {2, 3}) {
        if (m % p == 0) cases.push_back({PipelineScheduleKind::interleaved, p, m, v});
      }
    }
  }
  return cases;
}

std::string describe(const Case& c) {
  return fmt::format("{} p={} m={} v={}", wf::parallel::to_string(c.kind), c.p, c.m, c.v);
}

// The simulator's rules checked from outside: every rank runs its actions in order, one at a
// time, each starting exactly when the later of its rank and its input is free.
void check_timeline(const PipelineSchedule& schedule, const PipelineTimeline& timeline, double f, double b) {
  const int p = schedule.stages();
  const int last = p * schedule.virtual_stages() - 1;
  std::map<std::pair<int, int>, double> forward_end, backward_end;  // (global stage, microbatch)
  for (int r = 0; r < p; ++r) {
    for (const auto& e : timeline.per_rank[static_cast<std::size_t>(r)]) {
      const int stage = e.action.chunk * p + r;
      (e.action.op == Op::forward ? forward_end : backward_end)[{stage, e.action.microbatch}] = e.end;
    }
  }
  double makespan = 0;
  REQUIRE(timeline.per_rank.size() == static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    const auto& events = timeline.per_rank[static_cast<std::size_t>(r)];
    const auto& actions = schedule.actions(r);
    REQUIRE(events.size() == actions.size());
    double free_at = 0;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const auto& e = events[i];
      REQUIRE(e.action == actions[i]);
      const int stage = e.action.chunk * p + r;
      const int mb = e.action.microbatch;
      double input = 0;
      if (e.action.op == Op::forward) {
        if (stage > 0) input = forward_end.at({stage - 1, mb});
      } else {
        input = stage < last ? backward_end.at({stage + 1, mb}) : forward_end.at({stage, mb});
      }
      REQUIRE(e.start == Approx(std::max(free_at, input)));
      REQUIRE(e.end - e.start == Approx(e.action.op == Op::forward ? f : b));
      free_at = e.end;
      makespan = std::max(makespan, e.end);
    }
  }
  REQUIRE(timeline.makespan == Approx(makespan));
}

}  // namespace

TEST_CASE("pipeline schedule names parse and print", "[pipeline_schedule]") {
  for (auto kind : {PipelineScheduleKind::gpipe, PipelineScheduleKind::one_f_one_b, PipelineScheduleKind::interleaved}) {
    REQUIRE(parse_pipeline_schedule(wf::parallel::to_string(kind)) == kind);
  }
  REQUIRE(wf::parallel::to_string(PipelineScheduleKind::one_f_one_b) == "1f1b");
  REQUIRE_THROWS_AS(parse_pipeline_schedule("zigzag"), wf::UserError);
  REQUIRE_THROWS_WITH(parse_pipeline_schedule("zigzag"),
                      Contains("zigzag") && Contains("gpipe") && Contains("1f1b") && Contains("interleaved") &&
                          Contains("parallel.pp_schedule"));
  REQUIRE_THROWS_AS(parse_pipeline_schedule("1F1B"), wf::UserError);  // names are exact

  REQUIRE(wf::parallel::to_string(PipelineAction{Op::forward, 3, 0}) == "F3");
  REQUIRE(wf::parallel::to_string(PipelineAction{Op::backward, 3, 0}) == "B3");
  REQUIRE(wf::parallel::to_string(PipelineAction{Op::forward, 3, 1}, 2) == "F3.1");
  REQUIRE(wf::parallel::to_string(PipelineAction{Op::backward, 0, 0}, 2) == "B0.0");
}

TEST_CASE("GPipe p=2 m=3: all forwards, then all backwards in the same order", "[pipeline_schedule]") {
  PipelineSchedule s(PipelineScheduleKind::gpipe, 2, 3);
  REQUIRE(s.kind() == PipelineScheduleKind::gpipe);
  REQUIRE(s.stages() == 2);
  REQUIRE(s.microbatches() == 3);
  REQUIRE(s.virtual_stages() == 1);
  REQUIRE(row(s, 0) == "F0 F1 F2 B0 B1 B2");
  REQUIRE(row(s, 1) == "F0 F1 F2 B0 B1 B2");
  REQUIRE(s.warmup(0) == 3);
  REQUIRE(s.peak_in_flight(1) == 3);
  REQUIRE(s.ideal_bubble() == Approx(1.0 / 3));
  REQUIRE_THROWS_AS(s.actions(2), wf::Error);
  REQUIRE_THROWS_AS(s.actions(-1), wf::Error);

  // f=1, b=2: rank 1 forwards at 1..4, backwards at 4..10; rank 0 backwards B0 6..8, B1 8..10, B2 10..12.
  const PipelineTimeline t = simulate(s, 1, 2);
  REQUIRE(t.makespan == Approx(12));
  REQUIRE(t.per_rank[0][3].start == Approx(6));
  REQUIRE(t.per_rank[1][3].start == Approx(4));
  REQUIRE(t.bubble_fraction() == Approx(1 - 9.0 / 12));
}

TEST_CASE("1F1B p=4 m=8: the textbook table", "[pipeline_schedule]") {
  PipelineSchedule s(PipelineScheduleKind::one_f_one_b, 4, 8);
  REQUIRE(row(s, 0) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  REQUIRE(row(s, 1) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  REQUIRE(row(s, 2) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  REQUIRE(row(s, 3) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  for (int r = 0; r < 4; ++r) {
    REQUIRE(s.warmup(r) == 4 - r);
    REQUIRE(s.peak_in_flight(r) == 4 - r);
  }
  REQUIRE(s.ideal_bubble() == Approx(3.0 / 8));
}

TEST_CASE("1F1B with fewer microbatches than stages", "[pipeline_schedule]") {
  PipelineSchedule two(PipelineScheduleKind::one_f_one_b, 4, 2);
  REQUIRE(row(two, 0) == "F0 F1 B0 B1");  // warm-up min(3, 2) = 2 forwards, no steady state
  REQUIRE(row(two, 2) == "F0 F1 B0 B1");  // warm-up 1, one steady F1 B0
  REQUIRE(row(two, 3) == "F0 B0 F1 B1");

  REQUIRE(pipeline_schedule_problems(PipelineScheduleKind::one_f_one_b, 8, 1, 1).empty());
  PipelineSchedule one(PipelineScheduleKind::one_f_one_b, 8, 1);
  for (int r = 0; r < 8; ++r) REQUIRE(row(one, r) == "F0 B0");
  // One microbatch through 8 stages and back: 8 forwards then 8 backwards, nothing overlaps.
  const PipelineTimeline t = simulate(one, 1, 2);
  check_timeline(one, t, 1, 2);
  REQUIRE(t.makespan == Approx(8 * 3));
  REQUIRE(t.bubble_fraction() == Approx(7.0 / 8));
}

TEST_CASE("interleaved p=2 v=2 m=4 and p=4 v=2 m=8: Megatron's order", "[pipeline_schedule]") {
  // Units k = 0..7: forward (mb, chunk) = (k/4*2 + k%2, k/2%2), backward the chunk reversed.
  // Warm-up min((p-r-1)*2 + (v-1)*p, m*v): rank 0 4, rank 1 2.
  PipelineSchedule s(PipelineScheduleKind::interleaved, 2, 4, 2);
  REQUIRE(row(s, 0) == "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  REQUIRE(row(s, 1) == "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  REQUIRE(s.warmup(0) == 5);
  REQUIRE(s.warmup(1) == 3);
  REQUIRE(s.ideal_bubble() == Approx(1.0 / 8));

  // Warm-ups 10, 8, 6, 4 of 16 units.
  PipelineSchedule big(PipelineScheduleKind::interleaved, 4, 8, 2);
  REQUIRE(row(big, 0) ==
          "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 "
          "F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 "
          "B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  REQUIRE(row(big, 3) ==
          "F0.0 F1.0 F2.0 F3.0 "
          "F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 F6.0 B2.0 F7.0 B3.0 "
          "F4.1 B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 "
          "B4.0 B5.0 B6.0 B7.0");
}

TEST_CASE("every schedule runs each step once, backward after forward, without deadlock", "[pipeline_schedule]") {
  for (const Case& c : all_cases()) {
    INFO(describe(c));
    PipelineSchedule s(c.kind, c.p, c.m, c.v);
    for (int r = 0; r < c.p; ++r) {
      INFO("rank " << r << ": " << row(s, r));
      const auto& actions = s.actions(r);
      REQUIRE(actions.size() == static_cast<std::size_t>(2 * c.m * c.v));
      std::map<std::pair<int, int>, int> forward_at, backward_at;  // (mb, chunk) -> position
      for (std::size_t i = 0; i < actions.size(); ++i) {
        const PipelineAction& a = actions[i];
        REQUIRE(a.microbatch >= 0);
        REQUIRE(a.microbatch < c.m);
        REQUIRE(a.chunk >= 0);
        REQUIRE(a.chunk < c.v);
        auto& seen = a.op == Op::forward ? forward_at : backward_at;
        REQUIRE(seen.emplace(std::pair{a.microbatch, a.chunk}, static_cast<int>(i)).second);
      }
      REQUIRE(forward_at.size() == static_cast<std::size_t>(c.m * c.v));
      REQUIRE(backward_at.size() == static_cast<std::size_t>(c.m * c.v));
      for (const auto& [key, position] : backward_at) REQUIRE(forward_at.at(key) < position);
    }
    const PipelineTimeline t = simulate(s, 1, 2);
    check_timeline(s, t, 1, 2);
  }
}

TEST_CASE("activation memory: 1F1B holds at most p - r microbatches, GPipe all m", "[pipeline_schedule]") {
  for (const Case& c : all_cases()) {
    INFO(describe(c));
    PipelineSchedule s(c.kind, c.p, c.m, c.v);
    for (int r = 0; r < c.p; ++r) {
      INFO("rank " << r);
      switch (c.kind) {
        case PipelineScheduleKind::gpipe:
          REQUIRE(s.peak_in_flight(r) == c.m);
          REQUIRE(s.warmup(r) == c.m);
          break;
        case PipelineScheduleKind::one_f_one_b:
          REQUIRE(s.peak_in_flight(r) == std::min(c.p - r, c.m));
          REQUIRE(s.peak_in_flight(r) <= c.p);
          REQUIRE(s.warmup(r) == std::min(c.p - r, c.m));
          break;
        case PipelineScheduleKind::interleaved: {
          // Megatron's warm-up plus the steady state's first forward, in chunks of 1/v stage.
          const int expected = std::min((c.p - r - 1) * 2 + (c.v - 1) * c.p + 1, c.m * c.v);
          REQUIRE(s.peak_in_flight(r) == expected);
          REQUIRE(s.warmup(r) == expected);
          break;
        }
      }
    }
  }
}

TEST_CASE("simulated bubble: idle over makespan is x/(1+x) of the textbook x = idle over compute",
          "[pipeline_schedule]") {
  // With equal stages every schedule here ends at (m + (p-1)/v')(f+b) (v' = v interleaved, else
  // 1): each rank computes m(f+b) and idles (p-1)(f+b)/v', so idle/compute = (p-1)/(v'm) = x and
  // idle/makespan = x/(1+x). For 1F1B with f = b = 1 that is (p-1)/(m+p-1).
  for (const Case& c : all_cases()) {
    INFO(describe(c));
    PipelineSchedule s(c.kind, c.p, c.m, c.v);
    const double vv = c.kind == PipelineScheduleKind::interleaved ? c.v : 1;
    const double x = s.ideal_bubble();
    REQUIRE(x == Approx((c.p - 1) / (vv * c.m)));
    for (const auto& [f, b] : {std::pair{1.0, 1.0}, std::pair{1.0, 2.0}}) {
      const PipelineTimeline t = simulate(s, f / vv, b / vv);
      REQUIRE(t.makespan == Approx((c.m + (c.p - 1) / vv) * (f + b)));
      REQUIRE(t.bubble_fraction() == Approx(x / (1 + x)));
      if (c.kind == PipelineScheduleKind::one_f_one_b && f == b && c.m >= c.p) {
        REQUIRE(t.bubble_fraction() == Approx(double(c.p - 1) / (c.m + c.p - 1)));
      }
    }
  }
}

TEST_CASE("interleaving shortens the step for the same total work", "[pipeline_schedule]") {
  for (int p : {2, 4, 8}) {
    for (int m : {4, 8, 16}) {
      if (m % p != 0) continue;
      const double plain = simulate(PipelineSchedule(PipelineScheduleKind::one_f_one_b, p, m), 1, 2).makespan;
      double previous = plain;
      for (int v : {2, 3}) {
        INFO("p=" << p << " m=" << m << " v=" << v);
        const double chunked =
            simulate(PipelineSchedule(PipelineScheduleKind::interleaved, p, m, v), 1.0 / v, 2.0 / v).makespan;
        REQUIRE(chunked < plain);
        REQUIRE(chunked < previous);  // more chunks, smaller bubble
        previous = chunked;
      }
    }
  }
}

TEST_CASE("pipeline_schedule_problems names the keys to change", "[pipeline_schedule]") {
  using K = PipelineScheduleKind;
  REQUIRE(pipeline_schedule_problems(K::gpipe, 4, 3, 1).empty());
  REQUIRE(pipeline_schedule_problems(K::one_f_one_b, 1, 1, 1).empty());
  REQUIRE(pipeline_schedule_problems(K::interleaved, 4, 8, 2).empty());

  auto odd = pipeline_schedule_problems(K::interleaved, 4, 6, 2);
  REQUIRE(odd.size() == 1);
  CHECK_THAT(odd[0], Contains("parallel.pp_schedule") && Contains("train.global_batch_size") &&
                         Contains("parallel.dp x train.micro_batch_size") && Contains("= 6") && Contains("= 4"));

  auto virtual_1f1b = pipeline_schedule_problems(K::one_f_one_b, 4, 8, 2);
  REQUIRE(virtual_1f1b.size() == 1);
  CHECK_THAT(virtual_1f1b[0], Contains("parallel.pp_virtual") && Contains("1f1b") && Contains("interleaved"));
  REQUIRE(pipeline_schedule_problems(K::gpipe, 4, 8, 3).size() == 1);

  CHECK_THAT(pipeline_schedule_problems(K::interleaved, 1, 4, 2).at(0), Contains("parallel.pp"));
  CHECK_THAT(pipeline_schedule_problems(K::interleaved, 4, 8, 1).at(0), Contains("parallel.pp_virtual"));
  CHECK_THAT(pipeline_schedule_problems(K::gpipe, 0, 4, 1).at(0), Contains("parallel.pp"));
  CHECK_THAT(pipeline_schedule_problems(K::gpipe, 2, 0, 1).at(0), Contains("train.global_batch_size"));
  CHECK_THAT(pipeline_schedule_problems(K::one_f_one_b, 2, 4, 0).at(0), Contains("parallel.pp_virtual"));
  REQUIRE(pipeline_schedule_problems(K::interleaved, 1, 3, 1).size() == 2);  // p and v; m % 1 is fine

  REQUIRE_THROWS_AS(PipelineSchedule(K::interleaved, 4, 6, 2), wf::UserError);
  REQUIRE_THROWS_WITH(PipelineSchedule(K::one_f_one_b, 4, 8, 2), Contains("parallel.pp_virtual"));
}

TEST_CASE("simulate reports a deadlocking order", "[pipeline_schedule]") {
  // Rank 0 wants B0 before F0, but B0 needs stage 1's backward, which needs rank 0's F0.
  const std::vector<std::vector<PipelineAction>> order = {
      {{Op::backward, 0, 0}, {Op::forward, 0, 0}},
      {{Op::forward, 0, 0}, {Op::backward, 0, 0}},
  };
  REQUIRE_THROWS_AS(simulate(1, order, 1, 2), wf::Error);
  REQUIRE_THROWS_WITH(simulate(1, order, 1, 2), Contains("deadlock") && Contains("rank 0 at B0") &&
                                                    Contains("rank 1 at F0"));

  // The same order with rank 0 fixed runs, and matches the 1F1B table.
  const std::vector<std::vector<PipelineAction>> fixed = {
      {{Op::forward, 0, 0}, {Op::backward, 0, 0}},
      {{Op::forward, 0, 0}, {Op::backward, 0, 0}},
  };
  PipelineSchedule s(PipelineScheduleKind::one_f_one_b, 2, 1);
  REQUIRE(simulate(1, fixed, 1, 2).makespan == Approx(simulate(s, 1, 2).makespan));
}
