// tune::Network: the flow-level phase model of tune/network.h.
#include "wallfacer/tune/network.h"

#include <algorithm>
#include <vector>

#include "wallfacer/core/error.h"

namespace wf::tune {

Network::Network(const ClusterSpec& cluster) : cluster_(cluster) {
  WF_CHECK(cluster.nodes >= 1 && cluster.devices_per_node >= 1 && cluster.intra_node.bandwidth_gbs > 0,
           "tune::Network: cluster '{}' needs nodes, devices_per_node and an intra-node bandwidth", cluster.name);
  WF_CHECK(cluster.nodes == 1 || (cluster.inter_node.bandwidth_gbs > 0 && cluster.node_egress_gbs > 0),
           "tune::Network: cluster '{}' has {} nodes but no inter-node bandwidth", cluster.name, cluster.nodes);
}

double Network::phase_seconds(const std::vector<Flow>& flows, Primitive primitive) const {
  const ClusterSpec& c = cluster_;
  const LinkRate intra = c.intra_node.rate(primitive), inter = c.inter_node.rate(primitive);
  // Bytes per resource: a device's link out and in (one per link class), a node's NICs out and in;
  // only up to the highest rank the flows touch, so that a phase costs what its world does, not
  // what the cluster file lists (a search of 8 ranks on 131,072 nodes is a search of 8 ranks).
  int top = -1;
  for (const Flow& f : flows) {
    WF_CHECK(f.src >= 0 && f.dst >= 0 && f.src < c.devices() && f.dst < c.devices(),
             "tune::Network: a flow {} -> {} leaves the cluster's {} devices", f.src, f.dst, c.devices());
    top = std::max({top, f.src, f.dst});
  }
  const auto devices = static_cast<std::size_t>(top + 1);
  const auto nodes = static_cast<std::size_t>(top < 0 ? 0 : c.node_of(top) + 1);
  std::vector<double> device_out_intra(devices), device_in_intra(devices), device_out_inter(devices),
      device_in_inter(devices), node_out(nodes), node_in(nodes);
  const auto at = [](std::vector<double>& load, int i) -> double& { return load[static_cast<std::size_t>(i)]; };
  bool any = false, crosses = false;
  for (const Flow& f : flows) {
    if (f.src == f.dst || f.bytes <= 0) continue;
    any = true;
    if (c.node_of(f.src) == c.node_of(f.dst)) {
      at(device_out_intra, f.src) += f.bytes;
      at(device_in_intra, f.dst) += f.bytes;
    } else {
      crosses = true;
      at(device_out_inter, f.src) += f.bytes;
      at(device_in_inter, f.dst) += f.bytes;
      at(node_out, c.node_of(f.src)) += f.bytes;
      at(node_in, c.node_of(f.dst)) += f.bytes;
    }
  }
  if (!any) return 0;
  double seconds = 0;
  const auto worst = [&](const std::vector<double>& load, double gbs) {
    for (const double bytes : load) seconds = std::max(seconds, bytes / (gbs * 1e9));
  };
  worst(device_out_intra, intra.bandwidth_gbs);
  worst(device_in_intra, intra.bandwidth_gbs);
  if (crosses) {
    worst(device_out_inter, inter.bandwidth_gbs);
    worst(device_in_inter, inter.bandwidth_gbs);
    worst(node_out, c.node_egress_gbs);
    worst(node_in, c.node_egress_gbs);
  }
  const double latency = crosses ? std::max(inter.latency_us, intra.latency_us) : intra.latency_us;
  return seconds + latency * 1e-6;
}

double Network::ring_seconds(const RankGroups& groups, double bytes_per_rank, int steps, Primitive primitive) const {
  if (steps <= 0 || bytes_per_rank <= 0) return 0;
  std::vector<Flow> flows;
  for (const std::vector<int>& g : groups) {
    const std::size_t n = g.size();
    if (n < 2) continue;
    for (std::size_t i = 0; i < n; ++i) flows.push_back({g[i], g[(i + 1) % n], bytes_per_rank / steps});
  }
  return steps * phase_seconds(flows, primitive);
}

double Network::all_to_all_seconds(const RankGroups& groups, double bytes_per_rank) const {
  if (bytes_per_rank <= 0) return 0;
  std::vector<Flow> flows;
  std::size_t largest = 1;
  for (const std::vector<int>& g : groups) {
    const std::size_t n = g.size();
    largest = std::max(largest, n);
    if (n < 2) continue;
    for (int src : g) {
      for (int dst : g) {
        if (src != dst) flows.push_back({src, dst, bytes_per_rank / static_cast<double>(n - 1)});
      }
    }
  }
  if (flows.empty()) return 0;
  // One phase for the bandwidth; its latency once per peer (NCCL posts a send and a receive
  // for each).
  const double one = phase_seconds(flows, Primitive::all_to_all);
  const bool crosses = std::any_of(flows.begin(), flows.end(), [&](const Flow& f) {
    return cluster_.node_of(f.src) != cluster_.node_of(f.dst);
  });
  const double intra = cluster_.intra_node.rate(Primitive::all_to_all).latency_us;
  const double latency = (crosses ? std::max(cluster_.inter_node.rate(Primitive::all_to_all).latency_us, intra) : intra) * 1e-6;
  return one + latency * static_cast<double>(largest - 2);
}

double Network::exchange_seconds(const std::vector<int>& peer, double bytes) const {
  std::vector<Flow> flows;
  for (std::size_t r = 0; r < peer.size(); ++r) flows.push_back({static_cast<int>(r), peer[r], bytes});
  return phase_seconds(flows);
}

}  // namespace wf::tune
