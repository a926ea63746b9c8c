// The algorithm doc's headline traffic ratio at its own scale, P = 16: forward P2P bytes of
// WallFacer over ring attention, summed over ranks, C = 2 → 248/480 and C = 4 → 96/480
// (docs/sequence-parallelism.md). Measured by the counters (run_sp_case also checks every rank
// against traffic_model.h and the results against the f64 reference) and compared with the
// formula ratio exactly. Runs only in a world of 16 (ctest: dist_np16, which selects
// "[np16]"); other world sizes return at once so their launches stay fast.
#include <cstdio>
#include <utility>

#include "sp_testing.h"

using wf::DType;
using wf::parallel::Pass;
using wf::parallel::SpStrategy;
using namespace wf::test;

TEST_CASE("forward P2P ratio WallFacer / ring at P = 16 equals the formula", "[dist][sp][np16]") {
  constexpr int kP = 16;
  const int P = runtime().world_size();
  if (P != kP) {
    if (runtime().rank() == 0) std::printf("np16 traffic test: skipped (world size %d, needs %d)\n", P, kP);
    return;
  }
  // Tiny: the ratio does not depend on the sizes. N = 32 is a zigzag multiple for C = 1, 2, 4.
  SpCase ring;
  ring.strategy = SpStrategy::ring;
  ring.h = ring.h_kv = 1;
  ring.d = 2;
  ring.N = 32;
  ring.dtype = DType::f32;
  const SpCaseResult r = run_sp_case(ring);
  const std::int64_t E_kv = ring.B * (ring.N / kP) * ring.h_kv * ring.d;
  REQUIRE(r.total_forward.p2p_sent == 480 * E_kv * 4);  // 480 = 2·(P−1)·P in the doc's units (E_kv·a = 1)

  const std::pair<int, std::int64_t> expected_over_480[] = {{2, 248}, {4, 96}};
  for (const auto& [C, numerator] : expected_over_480) {
    INFO("C = " << C);
    SpCase wallfacer = ring;
    wallfacer.strategy = SpStrategy::wallfacer;
    wallfacer.C = C;
    const SpCaseResult w = run_sp_case(wallfacer);
    const std::int64_t formula = expected_sp_traffic_total(wallfacer, kP, Pass::forward).p2p_sent;
    CHECK(w.total_forward.p2p_sent == formula);
    CHECK(w.total_forward.p2p_sent * 480 == numerator * r.total_forward.p2p_sent);
    if (runtime().rank() == 0) {
      std::printf("P = 16, C = %d: forward P2P WallFacer / ring = %lld / %lld = %.4f (doc: %lld/480 = %.4f)\n", C,
                  static_cast<long long>(w.total_forward.p2p_sent), static_cast<long long>(r.total_forward.p2p_sent),
                  double(w.total_forward.p2p_sent) / double(r.total_forward.p2p_sent),
                  static_cast<long long>(numerator), double(numerator) / 480.0);
    }
  }
}
