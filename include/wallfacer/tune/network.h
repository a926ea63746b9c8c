#pragma once
// How long the messages of one communication phase take on a cluster (tune/cluster.h): a
// flow-level model. A phase is a set of messages sent at the same time; each takes at least its
// bytes over its link class's bandwidth, messages that leave (or enter) the same device share
// its link, and messages that leave (or enter) the same node for another share the node's NICs
// (node_egress_gbs). The phase lasts as long as its most loaded resource needs, plus one
// latency of the slowest link class it used. Ring collectives are n − 1 (all-reduce 2(n − 1))
// such phases over the ring of each group, all groups of a kind at once, which is how every
// rank of an SPMD step meets them: ten teams all-gathering on one node share its NICs.
//
// This is the whole of the network model; docs/tuning.md explains why it is enough to rank
// layouts (which links a layout's traffic crosses, and how many flows share them).
#include <cstdint>
#include <vector>

#include "wallfacer/tune/cluster.h"

namespace wf::tune {

struct Flow {
  int src = 0, dst = 0;  // world ranks (src == dst moves nothing)
  double bytes = 0;
};

// Groups of world ranks, each in its ring order (comm::ProcessGrid::all_groups).
using RankGroups = std::vector<std::vector<int>>;

class Network {
 public:
  explicit Network(const ClusterSpec& cluster);

  // Seconds until every flow of one phase of `primitive` has arrived (0 for no bytes).
  double phase_seconds(const std::vector<Flow>& flows, Primitive primitive = Primitive::p2p) const;

  // A ring collective on every group at once, each rank sending `bytes_per_rank` in total over
  // `steps` ring steps (what traffic_model.h counts: an all-gather of an output S over n ranks
  // is (n−1)/n·S in n − 1 steps; an all-reduce 2(n−1)/n·S in 2(n − 1)). 0 for groups of one.
  double ring_seconds(const RankGroups& groups, double bytes_per_rank, int steps,
                      Primitive primitive = Primitive::all_gather) const;
  // An all-to-all on every group at once: each rank sends bytes_per_rank / (n − 1) to each peer.
  double all_to_all_seconds(const RankGroups& groups, double bytes_per_rank) const;
  // Every rank r sends `bytes` to peer[r] (peer[r] == r: nothing), all at once.
  double exchange_seconds(const std::vector<int>& peer, double bytes) const;

  const ClusterSpec& cluster() const { return cluster_; }

 private:
  ClusterSpec cluster_;
};

}  // namespace wf::tune
