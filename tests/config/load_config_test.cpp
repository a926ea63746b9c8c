// Loading run configs: defaults, a full file, the YAML round trip and --set overrides.
#include <catch2/catch.hpp>

#include "config/config_test_util.h"
#include "wallfacer/config/run_config.h"

namespace wf::config {
namespace {

using test::error_of;
using test::TempYaml;
using test::with_data_file;

const char* const kFullConfig = R"(# a complete config
model:
  name: gpt
  n_layer: 6
  n_head: 8
  n_kv_head: 2
  d_model: 512
  d_ff: 2048
  vocab_size: 50304
  max_seq_len: 4096
  norm: rmsnorm
  positions: rope
  tie_embeddings: false
  dropout: 0.1
  checkpoint_attention: yes
parallel:
  dp: 2
  tp: 2
  pp: 1
  sp: 4
  order: sp-tp-dp-pp
  C: 2
  placement: p2p-intra
  sp_strategy: wallfacer
train:
  steps: 500
  micro_batch_size: 2
  global_batch_size: 16
  seq_len: 2048
  lr: 6e-4
  min_lr: 0
  warmup_steps: 50
  weight_decay: 0.01
  beta1: 0.8
  beta2: 0.99
  grad_clip: 0
  log_every: 5
  eval_every: 100
  seed: 7
  dtype: bf16
data:
  train_path: data/x/train.bin
  val_path: "data/x/val.bin"
  tokenizer: gpt2
checkpoint:
  dir: ck
  every: 100
  keep_last: 0
log:
  dir: out
  metrics_file: m.jsonl
)";

TEST_CASE("config: an empty file and empty sections give the defaults", "[config]") {
  TempYaml empty("empty.yaml", "");
  CHECK(load_config(empty.path()) == RunConfig{});
  TempYaml sections("sections.yaml", "model:\ntrain:\n");
  CHECK(load_config(sections.path()) == RunConfig{});
  TempYaml data("data.bin", "");
  CHECK_NOTHROW(validate(with_data_file(RunConfig{}, data.path()), 1));
}

TEST_CASE("config: every key of a full file is read", "[config]") {
  TempYaml file("full.yaml", kFullConfig);
  const RunConfig c = load_config(file.path());
  CHECK(c.model.get("n_layer") == "6");
  CHECK(c.model.get("n_kv_head") == "2");
  CHECK(c.model.get("norm") == "rmsnorm");
  CHECK(c.model.get("positions") == "rope");
  CHECK(c.model.get("tie_embeddings") == "false");
  CHECK(c.model.get("dropout") == "0.1");
  CHECK(c.model.get("checkpoint_attention") == "true");
  CHECK(c.parallel.grid().dp == 2);
  CHECK(c.parallel.grid().tp == 2);
  CHECK(c.parallel.grid().sp == 4);
  CHECK(c.parallel.grid().C == 2);
  CHECK(c.parallel.grid().order == "sp-tp-dp-pp");
  CHECK(c.parallel.placement == comm::Placement::p2p_intra);
  CHECK(c.parallel.sp_strategy == parallel::SpStrategy::wallfacer);
  CHECK(c.train.lr == 6e-4);
  CHECK(c.train.min_lr == 0.0);
  CHECK(c.train.dtype == DType::bf16);
  CHECK(c.train.seed == 7);
  CHECK(c.data.val_path == "data/x/val.bin");
  CHECK(c.data.tokenizer == TokenizerKind::gpt2);
  CHECK(c.checkpoint.keep_last == 0);
  CHECK(c.log.metrics_file == "m.jsonl");
  CHECK(grad_accum_steps(c) == 4);  // 16 / (dp 2 x micro 2)
  CHECK_NOTHROW(validate(c, 16, ValidateScope::any_machine));  // bf16 mixed precision trains here too
  CHECK_THAT(summary(c, 16), Catch::Contains("world 16 = dp 2 x tp 2 x pp 1 x sp 4") &&
                                 Catch::Contains("wallfacer C 2 (p2p-intra)"));
}

TEST_CASE("config: to_yaml reads back to the same config", "[config]") {
  TempYaml file("full.yaml", kFullConfig);
  const RunConfig full = load_config(file.path());
  CHECK(parse_config(to_yaml(full)) == full);
  CHECK(parse_config(to_yaml(RunConfig{})) == RunConfig{});

  // Strings YAML would otherwise read as something else stay strings; awkward numbers survive.
  RunConfig odd;
  odd.data.val_path = "";
  odd.data.train_path = "yes";
  odd.log.dir = "a: b # c";
  odd.checkpoint.dir = "123";
  odd.train.lr = 1.0 / 3.0;
  odd.train.min_lr = 1e-300;
  odd.train.seed = 9'000'000'000'000'000'000;
  CHECK(parse_config(to_yaml(odd)) == odd);

  // The pipeline's keys, its list of stage sizes included.
  RunConfig pipeline;
  pipeline.parallel.pp = 2;
  pipeline.parallel.pp_schedule = parallel::PipelineScheduleKind::interleaved;
  pipeline.parallel.pp_virtual = 2;
  pipeline.parallel.pp_layers = {3, 5, 1, 7};
  CHECK(parse_config(to_yaml(pipeline)) == pipeline);
  CHECK(parse_config("parallel:\n  pp: 2\n  pp_layers: [3, 5]\n").parallel.pp_layers == std::vector<std::int64_t>{3, 5});
  RunConfig listed;
  apply_override(listed, "parallel.pp_layers=3,5");
  CHECK(listed.parallel.pp_layers == std::vector<std::int64_t>{3, 5});
  apply_override(listed, "parallel.pp_layers=[]");
  CHECK(listed.parallel.pp_layers.empty());

  // The hybrid's keys: parallel.U and parallel.ulysses_inner, and the grid they give.
  RunConfig hybrid;
  hybrid.parallel.sp = 8;
  hybrid.parallel.C = 2;
  hybrid.parallel.U = 2;
  hybrid.parallel.ulysses_inner = false;
  hybrid.parallel.sp_strategy = parallel::SpStrategy::ulysses_wallfacer;
  CHECK(parse_config(to_yaml(hybrid)) == hybrid);
  CHECK_THAT(to_yaml(hybrid), Catch::Contains("sp_strategy: ulysses-wallfacer") && Catch::Contains("U: 2") &&
                                  Catch::Contains("ulysses_inner: false"));
  const RunConfig read =
      parse_config("parallel:\n  sp: 8\n  U: 4\n  ulysses_inner: no\n  sp_strategy: ulysses-wallfacer\n");
  CHECK(read.parallel.U == 4);
  CHECK_FALSE(read.parallel.ulysses_inner);
  CHECK(read.parallel.grid().U == 4);
  CHECK_FALSE(read.parallel.grid().ulysses_inner);
  CHECK(RunConfig{}.parallel.U == 1);
  CHECK(RunConfig{}.parallel.ulysses_inner);
  hybrid.data.source = DataSource::synthetic;
  CHECK_THAT(summary(hybrid, 8), Catch::Contains("sp_strategy ulysses-wallfacer U 2 (WallFacer inner) C 2"));

  // The summary names the schedule, its microbatches and the bubble it implies.
  RunConfig pp2;
  pp2.parallel.pp = 2;
  pp2.data.source = DataSource::synthetic;
  pp2.train.global_batch_size = 4;
  CHECK_THAT(summary(pp2, 2), Catch::Contains("world 2 = dp 1 x tp 1 x pp 2 x sp 1") &&
                                  Catch::Contains("pp_schedule 1f1b over 4 microbatches (ideal bubble 0.250)"));
}

TEST_CASE("config: --set overrides apply in order, before validation", "[config]") {
  // The file's layout needs 4 ranks; the overrides turn it into a valid 8-rank one.
  TempYaml file("base.yaml", "parallel:\n  dp: 2\n  sp: 2\ntrain:\n  steps: 10\n  warmup_steps: 5\n");
  const RunConfig c = load_config(file.path(), {"parallel.sp=4", "parallel.C=2", "train.steps=20", "train.steps=30",
                                                "parallel.sp_strategy=wallfacer", "model.tie_embeddings=false",
                                                "train.lr=1e-3", "data.val_path=v.bin"});
  CHECK(c.parallel.sp == 4);
  CHECK(c.parallel.C == 2);
  CHECK(c.train.steps == 30);
  CHECK(c.model.get("tie_embeddings") == "false");
  CHECK(c.train.lr == 1e-3);
  CHECK(c.data.val_path == "v.bin");
  TempYaml data("data.bin", "");
  CHECK_NOTHROW(validate(with_data_file(c, data.path()), 8));
  CHECK_THROWS_WITH(validate(c, 4), Catch::Contains("but the world has 4"));

  RunConfig direct;
  apply_override(direct, "parallel.placement=p2p-intra");
  CHECK(direct.parallel.placement == comm::Placement::p2p_intra);
  // A value may itself contain '='.
  apply_override(direct, "checkpoint.dir=a=b");
  CHECK(direct.checkpoint.dir == "a=b");
}

TEST_CASE("config: config_keys lists the issue's key names", "[config]") {
  const std::vector<std::string> keys = config_keys();
  for (const char* key : {"train.steps", "train.log_every", "log.dir", "checkpoint.dir", "checkpoint.every",
                          "parallel.sp", "parallel.sp_strategy", "parallel.C", "parallel.dp", "log.metrics_file"}) {
    CHECK(std::find(keys.begin(), keys.end(), key) != keys.end());
  }
}

}  // namespace
}  // namespace wf::config
