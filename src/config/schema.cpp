// The key table: one line per config key. The KEY macro spells each key once, as the member
// of its section struct, so the YAML name and the C++ name cannot drift apart.
#include "src/config/schema.h"

#include "wallfacer/config/model_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

namespace wf::config {

namespace {
const Choices<TokenizerKind> kTokenizers = {{"byte", TokenizerKind::byte}, {"gpt2", TokenizerKind::gpt2}};
const Choices<DataSource> kSources = {{"file", DataSource::file}, {"synthetic", DataSource::synthetic}};
const Choices<DType> kDtypes = {{"f32", DType::f32}, {"bf16", DType::bf16}};
// cuda parses in every build, so that validate can say what is missing (unsupported_by_trainer)
// rather than that the word is unknown.
const Choices<Device> kDevices = {
    {"cpu", Device::cpu()}, {"cuda", Device::cuda()}, {"auto", kAutoDevice}, {"testdev", Device::test()}};

template <typename E>
Choices<E> named_choices(std::initializer_list<E> values, auto name_of) {
  Choices<E> choices;
  for (E value : values) choices.emplace_back(std::string(name_of(value)), value);
  return choices;
}
// The strategy and placement names come from their own modules, so a renamed one stays in step.
const Choices<parallel::SpStrategy> kStrategies = named_choices(
    {parallel::SpStrategy::ring, parallel::SpStrategy::ulysses, parallel::SpStrategy::wallfacer,
     parallel::SpStrategy::ulysses_wallfacer},
    parallel::sp_strategy_name);
const Choices<comm::Placement> kPlacements = named_choices(
    {comm::Placement::collectives_intra, comm::Placement::p2p_intra}, comm::placement_name);
const Choices<parallel::PipelineScheduleKind> kPipelineSchedules = named_choices(
    {parallel::PipelineScheduleKind::gpipe, parallel::PipelineScheduleKind::one_f_one_b,
     parallel::PipelineScheduleKind::interleaved},
    [](parallel::PipelineScheduleKind kind) { return parallel::to_string(kind); });
const Choices<comm::GpuTransport> kGpuTransports = named_choices(
    {comm::GpuTransport::automatic, comm::GpuTransport::nccl, comm::GpuTransport::staged}, comm::gpu_transport_name);

// Stable storage for the names these return as string_views.
template <typename E>
std::string_view choice_name(const Choices<E>& choices, E value) {
  for (const auto& [name, v] : choices) {
    if (v == value) return name;
  }
  return "?";
}
}  // namespace

std::string_view tokenizer_name(TokenizerKind kind) { return choice_name(kTokenizers, kind); }
std::string_view data_source_name(DataSource source) { return choice_name(kSources, source); }

namespace detail {
namespace {

#define KEY(sec, name) #sec, #name, &RunConfig::sec, &decltype(RunConfig::sec)::name

template <typename S, typename T>
using Member = T S::*;

template <typename S, typename T>
Field make_field(std::string section, std::string key, S RunConfig::*sec, Member<S, T> member, std::string expected,
                 std::function<std::string(T&, std::string_view)> parse, std::function<std::string(const T&)> print) {
  Field f;
  f.section = std::move(section);
  f.key = std::move(key);
  f.expected = std::move(expected);
  f.set = [sec, member, parse](RunConfig& c, std::string_view text) { return parse(c.*sec.*member, text); };
  f.get = [sec, member, print](const RunConfig& c) { return print(c.*sec.*member); };
  return f;
}

template <typename S, typename T>
Field integer(std::string section, std::string key, S RunConfig::*sec, Member<S, T> member, std::int64_t min,
              std::int64_t max = std::numeric_limits<T>::max()) {
  return make_field<S, T>(
      std::move(section), std::move(key), sec, member, max == std::numeric_limits<T>::max() ? integer_expected(min) : integer_expected(min, max),
      [min, max](T& out, std::string_view text) -> std::string {
        std::int64_t value = 0;
        std::string problem = parse_integer(text, min, max, value);
        if (problem.empty()) out = static_cast<T>(value);
        return problem;
      },
      [](const T& value) { return fmt::format("{}", value); });
}

// A real number in (lo, hi) with each end open or closed; hi = +inf for none.
template <typename S>
Field number(std::string section, std::string key, S RunConfig::*sec, Member<S, double> member, double lo,
             bool lo_closed, double hi = std::numeric_limits<double>::infinity(), bool hi_closed = false) {
  return make_field<S, double>(
      std::move(section), std::move(key), sec, member, number_expected(lo, lo_closed, hi, hi_closed),
      [=](double& out, std::string_view text) { return parse_number(text, lo, lo_closed, hi, hi_closed, out); },
      [](const double& value) { return number_text(value); });
}

template <typename S>
Field boolean(std::string section, std::string key, S RunConfig::*sec, Member<S, bool> member) {
  return make_field<S, bool>(
      std::move(section), std::move(key), sec, member, kBooleanExpected,
      [](bool& out, std::string_view text) { return parse_boolean(text, out); },
      [](const bool& value) { return std::string(value ? "true" : "false"); });
}

template <typename S>
Field text(std::string section, std::string key, S RunConfig::*sec, Member<S, std::string> member, bool may_be_empty) {
  Field f = make_field<S, std::string>(
      std::move(section), std::move(key), sec, member, may_be_empty ? "a string" : "a non-empty string",
      [may_be_empty](std::string& out, std::string_view value) -> std::string {
        if (value.empty() && !may_be_empty) return "is empty";
        out = std::string(value);
        return "";
      },
      [](const std::string& value) { return value; });
  f.is_text = true;
  return f;
}

// A list of integers >= min: "[3, 5]", "3, 5" or "3,5"; "[]" or "" is the empty list.
template <typename S>
Field integer_list(std::string section, std::string key, S RunConfig::*sec, Member<S, std::vector<std::int64_t>> member,
                   std::int64_t min) {
  Field f = make_field<S, std::vector<std::int64_t>>(
      std::move(section), std::move(key), sec, member, fmt::format("a list of integers >= {}, like [3, 5]", min),
      [min](std::vector<std::int64_t>& out, std::string_view text) -> std::string {
        std::string_view body = text;
        if (!body.empty() && body.front() == '[') {
          if (body.back() != ']') return "has a '[' without its ']'";
          body = body.substr(1, body.size() - 2);
        }
        std::vector<std::int64_t> values;
        while (!body.empty()) {
          const std::size_t comma = body.find(',');
          std::string_view item = body.substr(0, comma);
          while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
          while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
          std::int64_t value = 0;
          const std::string problem = parse_integer(item, min, std::numeric_limits<std::int64_t>::max(), value);
          if (problem.empty() && !item.empty()) {
            values.push_back(value);
          } else if (!(item.empty() && comma == std::string_view::npos && values.empty())) {
            return fmt::format("has the item '{}', which {}", item, item.empty() ? "is empty" : problem);
          }
          if (comma == std::string_view::npos) break;
          body.remove_prefix(comma + 1);
          if (body.empty()) return "ends with a ','";
        }
        out = std::move(values);
        return "";
      },
      [](const std::vector<std::int64_t>& value) { return fmt::format("[{}]", fmt::join(value, ", ")); });
  f.is_list = true;
  return f;
}

template <typename S, typename E>
Field choice(std::string section, std::string key, S RunConfig::*sec, Member<S, E> member, const Choices<E>& choices) {
  return make_field<S, E>(
      std::move(section), std::move(key), sec, member, choices_expected(choices),
      [&choices](E& out, std::string_view value) { return parse_choice(value, choices, out); },
      [&choices](const E& value) { return choice_text(choices, value); });
}

// A field whose "expected ..." also says what the value means, so an out-of-range one names the fix.
Field with_hint(Field field, std::string_view hint) {
  field.expected = fmt::format("{} {}", field.expected, hint);
  return field;
}

std::vector<Field> make_fields() {
  const double inf = std::numeric_limits<double>::infinity();
  // The model section is not here: its keys are the model's own (model_schema.h).
  return {
      integer(KEY(parallel, dp), 1),
      integer(KEY(parallel, tp), 1),
      integer(KEY(parallel, pp), 1),
      integer(KEY(parallel, sp), 1),
      text(KEY(parallel, order), false),
      integer(KEY(parallel, C), 1),
      choice(KEY(parallel, placement), kPlacements),
      choice(KEY(parallel, sp_strategy), kStrategies),
      integer(KEY(parallel, U), 1),
      boolean(KEY(parallel, ulysses_inner)),
      boolean(KEY(parallel, tp_shard_activations)),
      integer(KEY(parallel, zero), 0, 2),
      with_hint(number(KEY(parallel, grad_bucket_mb), kMinGradBucketMb, true, kMaxGradBucketMb, true),
                "(MiB per gradient bucket; the default 25 suits most runs)"),
      choice(KEY(parallel, grad_reduce_dtype), kDtypes),
      choice(KEY(parallel, pp_schedule), kPipelineSchedules),
      integer(KEY(parallel, pp_virtual), 1),
      integer_list(KEY(parallel, pp_layers), 1),

      integer(KEY(train, steps), 1),
      integer(KEY(train, micro_batch_size), 1),
      integer(KEY(train, global_batch_size), 0),
      integer(KEY(train, seq_len), 1),
      number(KEY(train, lr), 0.0, false),
      number(KEY(train, min_lr), 0.0, true),
      integer(KEY(train, warmup_steps), 0),
      number(KEY(train, weight_decay), 0.0, true),
      number(KEY(train, beta1), 0.0, true, 1.0, false),
      number(KEY(train, beta2), 0.0, true, 1.0, false),
      number(KEY(train, grad_clip), 0.0, true, inf),
      number(KEY(train, ema_decay), 0.0, true, 1.0, false),
      boolean(KEY(train, ema_warmup)),
      integer(KEY(train, log_every), 1),
      integer(KEY(train, eval_every), 0),
      integer(KEY(train, eval_batches), 1),
      integer(KEY(train, seed), 0),
      choice(KEY(train, dtype), kDtypes),
      choice(KEY(train, device), kDevices),
      boolean(KEY(train, check_replicas)),
      boolean(KEY(train, cuda_graph)),
      integer(KEY(train, max_skipped_steps), 1),

      choice(KEY(data, source), kSources),
      text(KEY(data, train_path), false),
      text(KEY(data, val_path), true),
      text(KEY(data, train_labels_path), true),
      text(KEY(data, val_labels_path), true),
      choice(KEY(data, tokenizer), kTokenizers),
      boolean(KEY(data, pack)),

      text(KEY(checkpoint, dir), false),
      integer(KEY(checkpoint, every), -1),  // -1: never, not even at the end (benchmarks)
      integer(KEY(checkpoint, keep_last), 0),

      text(KEY(log, dir), false),
      text(KEY(log, metrics_file), false),
      number(KEY(log, peak_gflops), 0.0, true),

      choice(KEY(comm, gpu_transport), kGpuTransports),
  };
}

#undef KEY

std::vector<std::string> keys_of(std::string_view section) {
  std::vector<std::string> keys;
  for (const Field& f : fields()) {
    if (f.section == section) keys.push_back(f.key);
  }
  return keys;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates, std::string_view prefix) {
  const std::string close = closest_spelling(word, candidates);
  return close.empty() ? std::string() : fmt::format(" (did you mean '{}{}'?)", prefix, close);
}

}  // namespace

const std::vector<Field>& fields() {
  static const std::vector<Field> table = make_fields();
  return table;
}

const std::vector<std::string>& section_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out = {"model"};  // the model's own keys (model_schema.h), then the table's
    for (const Field& f : fields()) {
      if (std::find(out.begin(), out.end(), f.section) == out.end()) out.push_back(f.section);
    }
    return out;
  }();
  return names;
}

bool is_section(std::string_view section) {
  const auto& names = section_names();
  return std::find(names.begin(), names.end(), section) != names.end();
}

const Field* find_field(std::string_view section, std::string_view key) {
  for (const Field& f : fields()) {
    if (f.section == section && f.key == key) return &f;
  }
  return nullptr;
}

std::string unknown_section_message(std::string_view section) {
  return fmt::format("unknown section '{}'{}; the sections are {}", section,
                     did_you_mean(section, section_names(), ""), fmt::join(section_names(), ", "));
}

std::string unknown_key_message(std::string_view section, std::string_view key) {
  const std::vector<std::string> keys = keys_of(section);
  return fmt::format("unknown key '{}.{}'{}; the keys of section '{}' are {}", section, key,
                     did_you_mean(key, keys, std::string(section) + "."), section, fmt::join(keys, ", "));
}

std::string value_message(const Field& field, std::string_view text, std::string_view problem) {
  return fmt::format("{}: '{}' {}; expected {}", field.path(), text, problem, field.expected);
}

std::string closest_spelling(std::string_view word, const std::vector<std::string>& candidates) {
  // Optimal string alignment distance: insertions, deletions, substitutions, adjacent swaps.
  const auto distance = [](std::string_view a, std::string_view b) {
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
    return d[a.size()][b.size()];
  };
  std::string best;
  std::size_t best_distance = 3;
  for (const std::string& candidate : candidates) {
    const std::size_t dist = distance(word, candidate);
    if (dist < best_distance) best = candidate, best_distance = dist;
  }
  return best;
}

std::string without_location(std::string message) {
  const std::size_t open = message.rfind(" (");
  if (open != std::string::npos && message.ends_with(')') && message.find(':', open) != std::string::npos &&
      message.find('.', open) != std::string::npos && message.find(' ', open + 2) == std::string::npos) {
    message.erase(open);
  }
  return message;
}

}  // namespace detail

std::vector<std::string> config_keys() {
  std::vector<std::string> keys = {"model.name"};
  for (const std::string& key : model_schema(ModelConfig{}.name).key_names()) keys.push_back("model." + key);
  for (const detail::Field& f : detail::fields()) keys.push_back(f.path());
  return keys;
}

}  // namespace wf::config
