#pragma once
// The lines a job prints for its ranks' failures (run_main_reporting_once, rank_agreement.h).
#include <string>
#include <vector>

namespace wf::cli {

// What rank 0 prints for the ranks' failures (by_rank[r]: rank r's message): one line when they
// all agree ("<message> (all 4 ranks agree)"), else each distinct message once with its ranks
// ("[ranks 0-1, 3 of 4] <message>"), in order of the first rank that has it.
std::vector<std::string> failure_report(const std::vector<std::string>& by_rank);

}  // namespace wf::cli
