#pragma once
// A cluster as `wallfacer tune` sees it: nodes of identical devices, a link class inside a node
// and one between nodes. One file per cluster under clusters/ (docs/tuning.md), never fitted to
// an experiment: device rates and memory from datasheets, links from published nccl-tests
// figures, each with its source in a comment. `wallfacer tune --calibrate` writes the same
// format for the machine it runs on, with measured numbers (calibration.yaml).
//
// Units: bandwidths in GB/s (1e9 bytes per second), latencies in microseconds, rates in
// TFLOP/s, memory in GiB. Bandwidths follow NCCL's bus-bandwidth convention
// (nccl-tests doc/PERFORMANCE.md): a ring collective over n ranks moving an output (all-gather)
// or input (reduce-scatter) of S bytes takes (n−1)/n·S / busbw, an all-reduce twice that; one
// point-to-point message of S bytes takes S / bandwidth. Those are exactly the bytes
// parallel/traffic_model.h counts per rank, so the two meet without conversion.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/core/dtype.h"

namespace wf::tune {

// What one device (a GPU, or one rank's share of a CPU) computes and holds.
struct DeviceSpec {
  std::string name;
  double memory_gib = 0;       // usable memory per device
  double matmul_tflops_bf16 = 0;  // dense peak, bf16 inputs with f32 accumulation
  double matmul_tflops_f32 = 0;   // dense peak, f32 (TF32 off)
  // The fraction of peak the model's kernels reach on large shapes: GEMMs, and the flash
  // attention kernel's forward and backward (FlashAttention-2 reaches less of peak than a GEMM,
  // and less in the backward).
  double matmul_efficiency = 0.7;
  double attention_efficiency_forward = 0.6;
  double attention_efficiency_backward = 0.45;
  double memory_gbs = 0;  // memory bandwidth: the elementwise ops, norms and optimizer are bound by it

  // Achieved FLOP/s of a GEMM / the attention kernel in `dtype` (f32 or bf16).
  double matmul_flops(DType dtype) const;
  double attention_flops(DType dtype, bool backward) const;
};

// The communication primitives, each with its own α–β where a link class says so (NCCL's
// all-reduce on NVSwitch runs in-switch at a higher bus bandwidth than a ring all-gather; a P2P
// pays its own latency).
enum class Primitive { p2p, all_gather, reduce_scatter, all_reduce, all_to_all };
const char* primitive_name(Primitive primitive);  // "p2p", "all_gather", ...

struct LinkRate {
  double bandwidth_gbs = 0;  // bus bandwidth of a collective, and one P2P flow's bandwidth
  double latency_us = 0;     // α: per message, and per step of a ring collective
};

// One link class: its rate for every primitive, unless a primitive has its own.
struct LinkSpec {
  double bandwidth_gbs = 0;
  double latency_us = 0;
  std::map<Primitive, LinkRate> per_primitive;
  LinkRate rate(Primitive primitive) const;
};

struct ClusterSpec {
  std::string name;    // the file's stem, or what it says
  std::string source;  // the file it was read from ("" for a built-in)
  int nodes = 1;
  int devices_per_node = 1;
  DeviceSpec device;
  LinkSpec intra_node;
  LinkSpec inter_node;
  // What a whole node can send (and receive) between nodes at once: the NICs' total. Flows that
  // leave a node share it; one flow alone gets at most inter_node.bandwidth_gbs.
  double node_egress_gbs = 0;
  // Whether the machine overlaps communication with computation (a GPU's copy engines and
  // NCCL's kernels do; CPU ranks that copy their own messages through shared memory partly
  // do): the fraction of a P2P or collective hidden behind the compute it is scheduled beside.
  double overlap = 1.0;

  int devices() const { return nodes * devices_per_node; }
  int node_of(int rank) const { return rank / devices_per_node; }
};

// The devices a cluster file may name by preset (`device: h100`), from their datasheets; a file
// may override any field after naming one. Names: a100-40gb, a100-80gb, h100-80gb, h200.
DeviceSpec device_preset(std::string_view name);
std::vector<std::string> device_preset_names();

// Reads a cluster file (YAML). wf::UserError naming the file, key and fix for a missing or
// unknown key, a non-positive number, or an unknown device preset. `nodes` and
// `devices_per_node` are required, even for one node or one device per node.
ClusterSpec load_cluster(const std::string& path);
ClusterSpec parse_cluster(std::string_view yaml, std::string_view source = "<string>");
// The same keys back as YAML (parse_cluster(to_yaml(c)) == c up to rounding), with `comment`
// lines first: what --calibrate writes.
std::string to_yaml(const ClusterSpec& cluster, const std::vector<std::string>& comment = {});

}  // namespace wf::tune
