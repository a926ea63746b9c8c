// tune::ClusterSpec (the cluster files and their errors) and tune::Network (the phase model),
// against hand-computed times.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "wallfacer/core/error.h"
#include "wallfacer/tune/cluster.h"
#include "wallfacer/tune/network.h"

namespace wf::tune {
namespace {

namespace fs = std::filesystem;

// 2 nodes × 2 devices: intra 100 GB/s and 1 µs, inter 10 GB/s per flow and 5 µs, 15 GB/s a node.
ClusterSpec two_by_two() {
  return parse_cluster(R"(
name: test
nodes: 2
devices_per_node: 2
device: {preset: a100-40gb}
links:
  intra_node: {bandwidth_gbs: 100, latency_us: 1}
  inter_node: {bandwidth_gbs: 10, latency_us: 5}
  node_egress_gbs: 15
)");
}

std::string error_of(const std::string& yaml) {
  try {
    parse_cluster(yaml, "bad.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("every cluster file under clusters/ loads with its datasheet numbers", "[tune]") {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(WF_SOURCE_DIR) / "clusters")) {
    const ClusterSpec c = load_cluster(entry.path().string());
    INFO(entry.path());
    CHECK(c.name == entry.path().stem().string());
    CHECK(c.devices() >= 32);
    CHECK(c.device.matmul_flops(DType::bf16) > 1e14);
    CHECK(c.inter_node.bandwidth_gbs > 0);
    ++files;
  }
  CHECK(files == 4);
  const ClusterSpec h100 = load_cluster(std::string(WF_SOURCE_DIR) + "/clusters/h100-8x8.yaml");
  CHECK(h100.nodes == 8);
  CHECK(h100.devices_per_node == 8);
  CHECK(h100.device.memory_gib == 80);
  CHECK(h100.device.matmul_tflops_bf16 == 989);
  CHECK(h100.node_egress_gbs == 368);
  // NVLS: the all-reduce has its own rate; the other primitives take the link's.
  CHECK(h100.intra_node.rate(Primitive::all_reduce).bandwidth_gbs == 480);
  CHECK(h100.intra_node.rate(Primitive::all_gather).bandwidth_gbs == 370);
  CHECK(h100.intra_node.rate(Primitive::p2p).latency_us == 3.7);
  const ClusterSpec a100 = load_cluster(std::string(WF_SOURCE_DIR) + "/clusters/a100-16x2.yaml");
  CHECK(a100.nodes == 2);
  CHECK(a100.devices_per_node == 16);
  CHECK(a100.device.memory_gib == 40);
}

TEST_CASE("a cluster file round-trips through to_yaml", "[tune]") {
  ClusterSpec c = two_by_two();
  c.inter_node.per_primitive[Primitive::all_to_all] = {7, 9};
  const ClusterSpec back = parse_cluster(to_yaml(c, {"a comment"}));
  CHECK(back.inter_node.rate(Primitive::all_to_all).bandwidth_gbs == 7);
  CHECK(back.inter_node.rate(Primitive::all_to_all).latency_us == 9);
  CHECK(back.inter_node.rate(Primitive::p2p).bandwidth_gbs == 10);
  CHECK(back.nodes == c.nodes);
  CHECK(back.devices_per_node == c.devices_per_node);
  CHECK(back.device.matmul_tflops_bf16 == c.device.matmul_tflops_bf16);
  CHECK(back.device.attention_efficiency_backward == c.device.attention_efficiency_backward);
  CHECK(back.inter_node.latency_us == c.inter_node.latency_us);
  CHECK(back.node_egress_gbs == c.node_egress_gbs);
}

TEST_CASE("a bad cluster file names the key and the fix", "[tune]") {
  const std::string head = "nodes: 2\ndevices_per_node: 8\ndevice: {preset: h100-80gb}\n";
  const std::string links = "links:\n  intra_node: {bandwidth_gbs: 370, latency_us: 3}\n"
                            "  inter_node: {bandwidth_gbs: 46, latency_us: 5}\n  node_egress_gbs: 368\n";
  CHECK(error_of(head + links).empty());
  CHECK_THAT(error_of(head + links + "overlapp: 1\n"),
             Catch::Contains("unknown key 'overlapp' (did you mean 'overlap'?)"));
  CHECK_THAT(error_of("nodes: 2\ndevices_per_node: 8\ndevice: {preset: h900}\n" + links),
             Catch::Contains("device.preset: unknown device preset 'h900'; the presets are a100-40gb"));
  CHECK_THAT(error_of("nodes: 2\ndevices_per_node: 8\ndevice: {memory_gib: 80}\n" + links),
             Catch::Contains("'device.matmul_tflops_bf16' is missing; give it a positive number"));
  CHECK_THAT(error_of(head + "links:\n  intra_node: {bandwidth_gbs: 370, latency_us: 3}\n"),
             Catch::Contains("'links.inter_node' is missing"));
  CHECK_THAT(error_of("nodes: 0\n" + head.substr(9) + links), Catch::Contains("'nodes' must be a positive number, got 0"));
  // nodes and devices_per_node are required: a file that forgot one would be ranked as one node
  // (or one device a node) it is not.
  CHECK_THAT(error_of(head.substr(9) + links),
             Catch::Contains("bad.yaml: 'nodes' is missing (how many machines the cluster has, e.g. 'nodes: 8'); "
                             "give it a positive number (see clusters/h100-8x8.yaml)"));
  CHECK_THAT(error_of("nodes: 2\ndevice: {preset: h100-80gb}\n" + links),
             Catch::Contains("bad.yaml: 'devices_per_node' is missing (the GPUs (ranks) of each machine, e.g. "
                             "'devices_per_node: 8'); give it a positive number"));
  const std::string one_node = "links: {intra_node: {bandwidth_gbs: 1, latency_us: 1}}\n";
  CHECK_THAT(error_of("nodes: 1\ndevice: {preset: h100-80gb}\n" + one_node),
             Catch::Contains("'devices_per_node' is missing"));
  CHECK_THAT(error_of("nodes: 16777216\ndevices_per_node: 16777216\n" + head.substr(head.find("device:")) + links),
             Catch::Contains("nodes x devices_per_node is 16777216 x 16777216 devices, above the 1073741824"));
  CHECK_THAT(error_of(head + links + "overlap: 2\n"), Catch::Contains("'overlap' is a fraction in (0, 1], got 2"));
  CHECK_THAT(error_of("- a list\n"), Catch::Contains("a cluster file is a mapping"));
  CHECK_THAT(error_of(head + links.substr(0, links.find('}')) + ", all_reduse: {bandwidth_gbs: 1, latency_us: 1}}\n" +
                      links.substr(links.find('}') + 2)),
             Catch::Contains("unknown key 'links.intra_node.all_reduse' (did you mean 'all_reduce'?)"));
  CHECK_THROWS_WITH(load_cluster("/nonexistent/cluster.yaml"), Catch::Contains("/nonexistent/cluster.yaml"));
}

TEST_CASE("a phase lasts as long as its most loaded link, plus one latency", "[tune]") {
  const Network net(two_by_two());
  constexpr double GB = 1e9;
  // One message inside a node: 1 GB at 100 GB/s, 1 µs.
  CHECK(net.phase_seconds({{0, 1, GB}}) == Approx(0.01 + 1e-6));
  // Two from the same device share its link.
  CHECK(net.phase_seconds({{0, 1, GB}, {0, 1, GB}}) == Approx(0.02 + 1e-6));
  // Two from different devices to different devices do not.
  CHECK(net.phase_seconds({{0, 1, GB}, {1, 0, GB}}) == Approx(0.01 + 1e-6));
  // Across nodes: 10 GB/s per flow and the slower latency.
  CHECK(net.phase_seconds({{0, 2, GB}}) == Approx(0.1 + 5e-6));
  // Two devices of a node leaving it share its 15 GB/s: 2 GB / 15 GB/s.
  CHECK(net.phase_seconds({{0, 2, GB}, {1, 3, GB}}) == Approx(2.0 / 15 + 5e-6));
  // Sending to yourself moves nothing.
  CHECK(net.phase_seconds({{3, 3, GB}}) == 0);
  // A ring collective: 4 steps of a quarter each inside a node.
  CHECK(net.ring_seconds({{0, 1}}, GB, 4) == Approx(4 * (0.25 * GB / (100 * GB) + 1e-6)));
  // The same over nodes: every ring step has a flow leaving each node.
  CHECK(net.ring_seconds({{0, 2}}, GB, 1) == Approx(0.1 + 5e-6));
  // Groups of one rank move nothing.
  CHECK(net.ring_seconds({{0}, {1}}, GB, 3) == 0);
  // All-to-all over 4 ranks: each sends a third of 3 GB to each peer; device 0 sends 1 GB inside
  // its node (0.01 s) and 2 GB out (0.2 s per flow link); node 0 sends 4 GB out at 15 GB/s.
  CHECK(net.all_to_all_seconds({{0, 1, 2, 3}}, 3 * GB) == Approx(4.0 / 15 + 5e-6 * 3));
  CHECK_THROWS_WITH(net.phase_seconds({{0, 9, GB}}), Catch::Contains("leaves the cluster's 4 devices"));
  CHECK(net.phase_seconds({}) == 0);
  // A primitive with its own rate: the all-reduce at 200 GB/s inside a node.
  ClusterSpec fast = two_by_two();
  fast.intra_node.per_primitive[Primitive::all_reduce] = {200, 2};
  const Network nvls(fast);
  CHECK(nvls.ring_seconds({{0, 1}}, GB, 2, Primitive::all_reduce) == Approx(2 * (0.5 * GB / (200 * GB) + 2e-6)));
  CHECK(nvls.ring_seconds({{0, 1}}, GB, 2, Primitive::all_gather) == Approx(2 * (0.5 * GB / (100 * GB) + 1e-6)));
}

}  // namespace
}  // namespace wf::tune
