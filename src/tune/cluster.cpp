// tune::ClusterSpec: the cluster files under clusters/ and the device presets they name.
#include "wallfacer/tune/cluster.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>

#include "src/config/schema.h"
#include "src/config/yaml_input.h"
#include "wallfacer/core/error.h"

namespace wf::tune {

double DeviceSpec::matmul_flops(DType dtype) const {
  return 1e12 * matmul_efficiency * (dtype == DType::bf16 ? matmul_tflops_bf16 : matmul_tflops_f32);
}

double DeviceSpec::attention_flops(DType dtype, bool backward) const {
  const double peak = dtype == DType::bf16 ? matmul_tflops_bf16 : matmul_tflops_f32;
  return 1e12 * peak * (backward ? attention_efficiency_backward : attention_efficiency_forward);
}

const char* primitive_name(Primitive primitive) {
  switch (primitive) {
    case Primitive::p2p: return "p2p";
    case Primitive::all_gather: return "all_gather";
    case Primitive::reduce_scatter: return "reduce_scatter";
    case Primitive::all_reduce: return "all_reduce";
    case Primitive::all_to_all: return "all_to_all";
  }
  return "?";
}

LinkRate LinkSpec::rate(Primitive primitive) const {
  const auto it = per_primitive.find(primitive);
  return it != per_primitive.end() ? it->second : LinkRate{bandwidth_gbs, latency_us};
}

namespace {

// The most devices a cluster may have: ranks are ints, and no layout search needs more.
constexpr std::int64_t kMaxDevices = std::int64_t{1} << 30;

constexpr Primitive kPrimitives[] = {Primitive::p2p, Primitive::all_gather, Primitive::reduce_scatter,
                                     Primitive::all_reduce, Primitive::all_to_all};

// Datasheet numbers, dense (no 2:4 sparsity), SXM parts. Efficiencies: large bf16 GEMMs reach
// ~70% of peak with cuBLAS on A100 and H100; FlashAttention-2 reports 50–73% of A100 peak in the
// forward and 45–63% in the backward (Dao 2023, fig. 4–6), FlashAttention on H100 about the
// same fraction (FA2, not FA3, as the paper ran).
const std::map<std::string, DeviceSpec, std::less<>>& presets() {
  static const std::map<std::string, DeviceSpec, std::less<>> table = {
      // NVIDIA A100 Tensor Core GPU datasheet: 312 TFLOPS bf16, 19.5 FP32, HBM2 1,555 GB/s (40GB),
      // HBM2e 2,039 GB/s (80GB).
      {"a100-40gb", {"A100-SXM4-40GB", 40, 312, 19.5, 0.7, 0.6, 0.45, 1555}},
      {"a100-80gb", {"A100-SXM4-80GB", 80, 312, 19.5, 0.7, 0.6, 0.45, 2039}},
      // NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989 TFLOPS bf16 dense, 67 FP32, HBM3 3.35 TB/s.
      {"h100-80gb", {"H100-SXM5-80GB", 80, 989, 67, 0.7, 0.35, 0.3, 3350}},
      // NVIDIA H200 datasheet: the H100's compute with 141 GB HBM3e at 4.8 TB/s.
      {"h200", {"H200-SXM-141GB", 141, 989, 67, 0.7, 0.35, 0.3, 4800}},
  };
  return table;
}

// Reads the keys of one YAML mapping strictly: every key must be known, every value a positive
// number (or what the reader takes), and a misspelt key names the closest valid one.
class MappingReader {
 public:
  MappingReader(const YAML::Node& node, std::string path, std::string_view source)
      : node_(node), path_(std::move(path)), source_(source) {
    WF_USER_CHECK(node.IsMap(), "{}: '{}' must be a mapping of keys to values (see clusters/h100-8x8.yaml)", source_,
                  path_);
  }
  // A positive number at `key`, into `out`; `required` says whether it may be left out (`out`
  // keeps its default then). `meaning`, when given, says in the message of a missing key what it is.
  MappingReader& number(const std::string& key, double& out, bool required = true, std::string_view meaning = "") {
    known_.push_back(key);
    const YAML::Node v = node_[key];
    if (!v) {
      WF_USER_CHECK(!required, "{}: '{}' is missing{}; give it a positive number (see clusters/h100-8x8.yaml)",
                    source_, name(key), meaning.empty() ? "" : fmt::format(" ({})", meaning));
      return *this;
    }
    double x = 0;
    try {
      x = v.as<double>();
    } catch (const YAML::Exception&) {
      WF_USER_FAIL("{}: '{}' must be a number, got '{}'", source_, name(key), v.IsScalar() ? v.Scalar() : "a collection");
    }
    WF_USER_CHECK(std::isfinite(x) && x > 0, "{}: '{}' must be a positive number, got {}", source_, name(key), x);
    out = x;
    return *this;
  }
  // A required whole number at `key`.
  MappingReader& integer(const std::string& key, int& out, std::string_view meaning) {
    double x = out;
    number(key, x, true, meaning);
    WF_USER_CHECK(x == std::floor(x) && x <= 1 << 24, "{}: '{}' must be a whole number of at most 2^24, got {}",
                  source_, name(key), x);
    out = static_cast<int>(x);
    return *this;
  }
  MappingReader& fraction(const std::string& key, double& out) {
    number(key, out, false);
    WF_USER_CHECK(out <= 1, "{}: '{}' is a fraction in (0, 1], got {}", source_, name(key), out);
    return *this;
  }
  MappingReader& text(const std::string& key, std::string& out) {
    known_.push_back(key);
    if (const YAML::Node v = node_[key]) {
      WF_USER_CHECK(v.IsScalar(), "{}: '{}' must be a string", source_, name(key));
      out = v.Scalar();
    }
    return *this;
  }
  // Declares `key` as known without reading it (an optional child that is absent).
  void child_optional(const std::string& key) { known_.push_back(key); }
  MappingReader& child(const std::string& key, const std::function<void(MappingReader&)>& read) {
    known_.push_back(key);
    const YAML::Node v = node_[key];
    WF_USER_CHECK(v.IsDefined(), "{}: '{}' is missing (see clusters/h100-8x8.yaml)", source_, name(key));
    MappingReader inner(v, name(key), source_);
    read(inner);
    inner.check_unknown();
    return *this;
  }
  // After every key was read: refuses the keys nobody asked for.
  void check_unknown() const {
    for (const auto& kv : node_) {
      const std::string key = kv.first.as<std::string>();
      if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
      const std::string guess = config::detail::closest_spelling(key, known_);
      WF_USER_FAIL("{}: unknown key '{}'{}; the keys here are {}", source_, name(key),
                   guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess), fmt::join(known_, ", "));
    }
  }
  const YAML::Node& node() const { return node_; }

 private:
  std::string name(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  YAML::Node node_;
  std::string path_;
  std::string_view source_;
  std::vector<std::string> known_;
};

void read_link(MappingReader& r, LinkSpec& link) {
  r.number("bandwidth_gbs", link.bandwidth_gbs).number("latency_us", link.latency_us);
  // Optional per primitive: `all_reduce: {bandwidth_gbs: 480, latency_us: 6}`.
  for (const Primitive p : kPrimitives) {
    if (!r.node()[primitive_name(p)]) {
      r.child_optional(primitive_name(p));
      continue;
    }
    r.child(primitive_name(p), [&](MappingReader& x) {
      LinkRate rate;
      x.number("bandwidth_gbs", rate.bandwidth_gbs).number("latency_us", rate.latency_us);
      link.per_primitive[p] = rate;
    });
  }
}

std::string link_yaml(const LinkSpec& link) {
  std::string out = fmt::format("{{bandwidth_gbs: {:.6g}, latency_us: {:.6g}", link.bandwidth_gbs, link.latency_us);
  for (const auto& [p, rate] : link.per_primitive) {
    out += fmt::format(", {}: {{bandwidth_gbs: {:.6g}, latency_us: {:.6g}}}", primitive_name(p), rate.bandwidth_gbs,
                       rate.latency_us);
  }
  return out + "}";
}

}  // namespace

DeviceSpec device_preset(std::string_view name) {
  const auto it = presets().find(name);
  WF_USER_CHECK(it != presets().end(), "unknown device preset '{}'; the presets are {} (or give every device key)",
                name, fmt::join(device_preset_names(), ", "));
  return it->second;
}

std::vector<std::string> device_preset_names() {
  std::vector<std::string> names;
  for (const auto& kv : presets()) names.push_back(kv.first);
  return names;
}

ClusterSpec parse_cluster(std::string_view yaml, std::string_view source) {
  const YAML::Node root = config::detail::parse_yaml_document(yaml, source);
  WF_USER_CHECK(root.IsMap(), "{}: a cluster file is a mapping with nodes, devices_per_node, device and links "
                              "(see clusters/h100-8x8.yaml)", source);
  ClusterSpec c;
  c.source = std::string(source);
  MappingReader r(root, "", source);
  // Both required: a cluster of one node or one device per node says so rather than defaulting
  // to it, as a file that forgot the key would otherwise rank layouts for a cluster it is not.
  r.text("name", c.name)
      .integer("nodes", c.nodes, "how many machines the cluster has, e.g. 'nodes: 8'")
      .integer("devices_per_node", c.devices_per_node, "the GPUs (ranks) of each machine, e.g. 'devices_per_node: 8'");
  WF_USER_CHECK(static_cast<std::int64_t>(c.nodes) * c.devices_per_node <= kMaxDevices,
                "{}: nodes x devices_per_node is {} x {} devices, above the {} wallfacer tune lays out; describe "
                "fewer nodes", source, c.nodes, c.devices_per_node, kMaxDevices);
  r.child("device", [&](MappingReader& d) {
    std::string preset;
    d.text("preset", preset);
    if (!preset.empty()) {
      try {
        c.device = device_preset(preset);
      } catch (const Error& e) {
        WF_USER_FAIL("{}: device.preset: {}", source, e.what());
      }
    }
    const bool all = preset.empty();  // without a preset every number is required
    d.text("name", c.device.name)
        .number("memory_gib", c.device.memory_gib, all)
        .number("matmul_tflops_bf16", c.device.matmul_tflops_bf16, all)
        .number("matmul_tflops_f32", c.device.matmul_tflops_f32, all)
        .fraction("matmul_efficiency", c.device.matmul_efficiency)
        .fraction("attention_efficiency_forward", c.device.attention_efficiency_forward)
        .fraction("attention_efficiency_backward", c.device.attention_efficiency_backward)
        .number("memory_gbs", c.device.memory_gbs, all);
  });
  r.child("links", [&](MappingReader& l) {
    l.child("intra_node", [&](MappingReader& x) { read_link(x, c.intra_node); });
    if (c.nodes > 1) {
      l.child("inter_node", [&](MappingReader& x) { read_link(x, c.inter_node); });
      l.number("node_egress_gbs", c.node_egress_gbs);
    } else {
      // One node: the inter-node link is never used; accept (and keep) it when given.
      if (l.node()["inter_node"]) l.child("inter_node", [&](MappingReader& x) { read_link(x, c.inter_node); });
      l.number("node_egress_gbs", c.node_egress_gbs, false);
    }
  });
  r.fraction("overlap", c.overlap);
  r.check_unknown();
  return c;
}

ClusterSpec load_cluster(const std::string& path) {
  ClusterSpec c = parse_cluster(config::detail::read_config_file(path), path);
  if (c.name.empty()) {
    const auto slash = path.find_last_of('/');
    std::string stem = path.substr(slash == std::string::npos ? 0 : slash + 1);
    if (const auto dot = stem.rfind('.'); dot != std::string::npos) stem.resize(dot);
    c.name = stem;
  }
  return c;
}

std::string to_yaml(const ClusterSpec& c, const std::vector<std::string>& comment) {
  std::string out;
  for (const std::string& line : comment) out += "# " + line + "\n";
  const DeviceSpec& d = c.device;
  out += fmt::format("name: {}\nnodes: {}\ndevices_per_node: {}\n", c.name, c.nodes, c.devices_per_node);
  out += fmt::format(
      "device:\n  name: {}\n  memory_gib: {:.6g}\n  matmul_tflops_bf16: {:.6g}\n  matmul_tflops_f32: {:.6g}\n"
      "  matmul_efficiency: {:.6g}\n  attention_efficiency_forward: {:.6g}\n  attention_efficiency_backward: {:.6g}\n"
      "  memory_gbs: {:.6g}\n",
      d.name, d.memory_gib, d.matmul_tflops_bf16, d.matmul_tflops_f32, d.matmul_efficiency,
      d.attention_efficiency_forward, d.attention_efficiency_backward, d.memory_gbs);
  out += fmt::format("links:\n  intra_node: {}\n", link_yaml(c.intra_node));
  if (c.inter_node.bandwidth_gbs > 0) out += fmt::format("  inter_node: {}\n", link_yaml(c.inter_node));
  if (c.node_egress_gbs > 0) out += fmt::format("  node_egress_gbs: {:.6g}\n", c.node_egress_gbs);
  out += fmt::format("overlap: {:.6g}\n", c.overlap);
  return out;
}

}  // namespace wf::tune
