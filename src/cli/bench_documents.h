#pragma once
// `bench attention --documents SPEC`: the packed batch the benchmark runs, as one boundary list
// (AttentionOptions::doc_bounds, shared by every batch row).
//   LEN,LEN,...   document lengths packed in order into the N tokens of the sequence, the list
//                 repeated until N is filled and the last document cut at N ("4096" is N/4096
//                 documents of 4096 tokens; "60000,500" a long one and then short ones)
//   COUNT:mixed   COUNT documents of seeded log-uniform lengths, from a quarter to four times
//                 N/COUNT, scaled to fill N exactly (each at least one token)
//   COUNT:equal   COUNT documents of N/COUNT tokens (rounded to whole tokens)
// wf::UserError naming the spec and the fix when it is none of these, a length is not positive or
// COUNT is not in [1, N].
#include <cstdint>
#include <string>
#include <vector>

namespace wf::cli {

std::vector<std::int64_t> document_bounds_of(const std::string& spec, std::int64_t N);

// "32 documents of 128..4096 tokens".
std::string describe_documents(const std::vector<std::int64_t>& bounds);

}  // namespace wf::cli
