// Bad configs: each is written to a file, loaded and validated for its world size, and must fail
// with one message that names the key and the rule (and, for typos, the likely spelling).
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <string>
#include <vector>

#include "config/config_test_util.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/cuda_info.h"

namespace wf::config {
namespace {

using test::error_of;
using test::TempYaml;
using test::with_data_file;

struct BadConfig {
  std::string name;
  std::string yaml;
  int world = 1;
  std::vector<std::string> overrides;
  std::vector<std::string> expected;  // substrings of the message
};

// Loads and validates `yaml` as the file `name`.yaml, its data files readable; returns the error
// message.
std::string load_error(const BadConfig& bad) {
  TempYaml file(bad.name + ".yaml", bad.yaml), data("data.bin", "");
  return error_of([&] { validate(with_data_file(load_config(file.path(), bad.overrides), data.path()), bad.world); });
}

const std::vector<BadConfig>& load_time_cases() {
  static const std::vector<BadConfig> cases = {
      {"steps_not_integer", "train:\n  steps: ten\n", 1, {},
       {"steps_not_integer.yaml:2: ", "train.steps: 'ten' is not an integer; expected an integer >= 1"}},
      {"steps_negative", "train:\n  steps: -5\n", 1, {}, {"train.steps: '-5' is out of range; expected an integer >= 1"}},
      {"steps_fraction", "train:\n  steps: 2.5\n", 1, {}, {"train.steps: '2.5' is not an integer"}},
      {"dp_zero", "parallel:\n  dp: 0\n", 1, {}, {"parallel.dp: '0' is out of range; expected an integer >= 1"}},
      {"lr_zero", "train:\n  lr: 0\n", 1, {}, {"train.lr: '0' is out of range; expected a number > 0"}},
      {"lr_text", "train:\n  lr: fast\n", 1, {}, {"train.lr: 'fast' is not a number; expected a number > 0"}},
      {"dropout_one", "model:\n  dropout: 1.0\n", 1, {}, {"model.dropout: '1.0' is out of range", "a number >= 0 and < 1"}},
      {"beta2_negative", "train:\n  beta2: -0.1\n", 1, {}, {"train.beta2", "a number >= 0 and < 1"}},
      {"unknown_section", "trian:\n  steps: 3\n", 1, {},
       {"unknown_section.yaml:1: ", "unknown section 'trian' (did you mean 'train'?)",
        "the sections are model, parallel, train, data, checkpoint, log"}},
      {"unknown_key_typo", "train:\n  stpes: 3\n", 1, {},
       {"unknown key 'train.stpes' (did you mean 'train.steps'?)", "the keys of section 'train' are steps, "}},
      {"unknown_key_case", "parallel:\n  c: 2\n", 1, {}, {"unknown key 'parallel.c' (did you mean 'parallel.C'?)"}},
      {"unknown_key_far", "log:\n  verbosity: 3\n", 1, {},
       {"unknown key 'log.verbosity'; the keys of section 'log' are dir, metrics_file"}},
      {"bad_strategy", "parallel:\n  sp_strategy: zigzag\n", 1, {},
       {"parallel.sp_strategy: 'zigzag' is not a valid choice; expected one of ring, ulysses, wallfacer"}},
      {"bad_pp_schedule", "parallel:\n  pp_schedule: zb\n", 1, {},
       {"parallel.pp_schedule: 'zb' is not a valid choice; expected one of gpipe, 1f1b, interleaved"}},
      {"bad_pp_layers", "parallel:\n  pp_layers: [2, x]\n", 1, {},
       {"parallel.pp_layers: '[2, x]'", "has the item 'x', which is not an integer"}},
      {"pp_layers_zero", "parallel:\n  pp_layers: 0, 4\n", 1, {}, {"parallel.pp_layers", "has the item '0'"}},
      {"bad_placement", "parallel:\n  placement: intra\n", 1, {},
       {"parallel.placement", "one of collectives-intra, p2p-intra"}},
      {"bad_norm", "model:\n  norm: batchnorm\n", 1, {}, {"model.norm: 'batchnorm'", "one of layernorm, rmsnorm"}},
      {"bad_positions", "model:\n  positions: alibi\n", 1, {}, {"model.positions", "one of learned, rope"}},
      {"bad_dtype", "train:\n  dtype: f16\n", 1, {}, {"train.dtype: 'f16'", "one of f32, bf16"}},
      {"bad_grad_reduce_dtype", "parallel:\n  grad_reduce_dtype: f16\n", 1, {},
       {"parallel.grad_reduce_dtype: 'f16' is not a valid choice; expected one of f32, bf16"}},
      {"bad_tokenizer", "data:\n  tokenizer: bpe\n", 1, {}, {"data.tokenizer", "one of byte, gpt2"}},
      {"bad_gpu_transport", "comm:\n  gpu_transport: ncl\n", 1, {},
       {"comm.gpu_transport: 'ncl' is not a valid choice; expected one of auto, nccl, staged"}},
      {"bad_bool", "model:\n  tie_embeddings: maybe\n", 1, {}, {"model.tie_embeddings: 'maybe' is not a boolean; expected true or false"}},
      // A bucket size whose bytes overflow (or round to none) is refused at load, naming the range.
      {"grad_bucket_huge", "parallel:\n  grad_bucket_mb: 1e15\n", 1, {},
       {"parallel.grad_bucket_mb: '1e15' is out of range; expected a number >= 0.001 and <= 1000000 (MiB per "
        "gradient bucket; the default 25 suits most runs)"}},
      {"grad_bucket_tiny", "parallel:\n  grad_bucket_mb: 1e-9\n", 1, {},
       {"parallel.grad_bucket_mb: '1e-9' is out of range; expected a number >= 0.001 and <= 1000000"}},
      {"max_skipped_steps_zero", "train:\n  max_skipped_steps: 0\n", 1, {},
       {"train.max_skipped_steps: '0' is out of range; expected an integer >= 1"}},
      // DiT's own rules: its sequence is its patches; the flow process has no variance to learn;
      // its modulation needs every token on each tp rank.
      {"dit_seq_len", "model:\n  name: dit\n  image_size: 32\n  patch_size: 4\ndata:\n  source: synthetic\n", 1, {},
       {"train.seq_len: DiT's sequence is its patches", "set train.seq_len: 64"}},
      {"dit_flow_sigma", "model:\n  name: dit\n  diffusion: flow\n  learn_sigma: true\ntrain:\n  seq_len: 256\ndata:\n  source: synthetic\n",
       1, {}, {"model.learn_sigma: the flow process predicts a velocity"}},
      {"dit_tp_shard", "model:\n  name: dit\ntrain:\n  seq_len: 256\nparallel:\n  tp: 2\n  tp_shard_activations: true\ndata:\n  source: synthetic\n",
       2, {}, {"parallel.tp_shard_activations: DiT's adaLN modulation"}},
      // The image loader's limits: the IDX resize, the synthetic set's size.
      {"dit_image_size_file", "model:\n  name: dit\n  image_size: 8192\n  patch_size: 8192\ntrain:\n  seq_len: 1\n", 1,
       {},
       {"model.image_size: 8192 is larger than the 4096 pixels a side the IDX image loader resizes to; set "
        "model.image_size to at most 4096"}},
      {"dit_image_size_synthetic",
       "model:\n  name: dit\n  image_size: 2048\n  patch_size: 2048\ntrain:\n  seq_len: 1\n"
       "data:\n  source: synthetic\n",
       1, {},
       {"model.image_size: 2048 is larger than the synthetic image set holds (1024 images of 1 channel(s)",
        "so at most 1448 pixels a side); set model.image_size to at most 1448"}},
      {"dit_missing_labels", "model:\n  name: dit\ntrain:\n  seq_len: 256\ndata:\n  train_path: /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz\n",
       1, {}, {"data.train_labels_path: is empty but data.train_path is", "give both the images and their labels"}},
      {"bad_model_name", "model:\n  name: unet\n", 1, {},
       {"bad_model_name.yaml:2: model.name: 'unet' is not a registered model", "the registered models are dit, gpt, llama"}},
      {"misspelt_model_name", "model:\n  name: lama\n", 1, {}, {"(did you mean 'llama'?)"}},
      // A model's keys are its own: LLaMA has no learned positions and no norm choice.
      {"key_of_another_model", "model:\n  name: llama\n  positions: rope\n", 1, {},
       {"key_of_another_model.yaml:3: unknown key 'model.positions'", "the keys of model 'llama' are name, n_layer"}},
      {"model_key_typo", "model:\n  n_layr: 2\n", 1, {}, {"unknown key 'model.n_layr' (did you mean 'model.n_layer'?)"}},
      {"name_override_orphans_key", "model:\n  positions: rope\n", 1, {"model.name=llama"},
       {"--set model.name=llama: model.name: model 'llama' has no key 'model.positions'"}},
      {"llama_bad_theta", "model:\n  name: llama\n  rope_theta: -1\n", 1, {},
       {"model.rope_theta: '-1' is out of range; expected a number > 0"}},
      {"empty_train_path", "data:\n  train_path: \"\"\n", 1, {}, {"data.train_path: '' is empty; expected a non-empty string"}},
      {"null_count", "train:\n  steps:\n", 1, {}, {"train.steps: expected an integer >= 1, got no value"}},
      {"list_value", "train:\n  steps: [1, 2]\n", 1, {}, {"train.steps: expected an integer >= 1, got a list"}},
      {"section_scalar", "train: 5\n", 1, {}, {"section 'train' must be a mapping of keys", "the value '5'"}},
      {"top_level_list", "- model\n- train\n", 1, {}, {"the top level must be a mapping of sections", "got a list"}},
      {"duplicate_key", "train:\n  steps: 3\n  steps: 4\n", 1, {},
       {"duplicate_key.yaml:3: duplicate key 'train.steps'"}},
      {"duplicate_section", "log:\n  dir: a\nlog:\n  dir: b\n", 1, {}, {"duplicate key 'log'"}},
      {"yaml_syntax", "train:\n  steps: [1\n", 1, {}, {"yaml_syntax.yaml:3:", "YAML syntax error"}},
      {"yaml_indent", "train:\n  steps: 1\n lr: 2\n", 1, {}, {"yaml_indent.yaml:", "YAML syntax error"}},
      {"override_unknown_key", "", 1, {"train.lrr=1"},
       {"--set train.lrr=1: unknown key 'train.lrr' (did you mean 'train.lr'?)"}},
      {"override_unknown_section", "", 1, {"paralel.sp=2"},
       {"--set paralel.sp=2: unknown section 'paralel' (did you mean 'parallel'?)"}},
      {"override_no_equals", "", 1, {"train.steps"}, {"--set train.steps: expected section.key=value"}},
      {"override_no_dot", "", 1, {"steps=3"}, {"--set steps=3: expected section.key=value"}},
      {"override_bad_value", "", 1, {"train.steps=ten"},
       {"--set train.steps=ten: train.steps: 'ten' is not an integer; expected an integer >= 1"}},
  };
  return cases;
}

std::vector<BadConfig> layout_case_list() {
  std::vector<BadConfig> cases = {
      {"world_mismatch", "parallel:\n  dp: 2\n  sp: 2\n", 8, {},
       {"invalid config for a world of 8 ranks", "parallel.dp, parallel.tp, parallel.pp, parallel.sp",
        "dp 2 x tp 1 x pp 1 x sp 2 = 4 ranks, but the world has 8", "must multiply to the world size"}},
      {"team_does_not_fit", "parallel:\n  sp: 2\n  C: 2\n", 2, {},
       {"parallel.C", "C = 2 does not fit sp = 2", "C*C dividing sp", "valid C for sp = 2: 1"}},
      {"bad_order", "parallel:\n  order: tp-sp-dp\n", 1, {}, {"parallel.order", "tp-sp-dp"}},
      {"seq_len_zigzag", "parallel:\n  sp: 4\ntrain:\n  seq_len: 100\n", 4, {},
       {"train.seq_len: sp_strategy wallfacer over parallel.sp = 4 ranks", "zigzag", "N = 100",
        "nearest valid N: 96 or 104"}},
      {"seq_len_wallfacer_teams", "parallel:\n  sp: 16\n  C: 2\ntrain:\n  seq_len: 1000\n", 16, {},
       {"train.seq_len", "in teams of C = 2", "nearest valid N: 992 or 1008"}},
      {"team_without_wallfacer", "parallel:\n  sp: 4\n  C: 2\n  sp_strategy: ring\n", 4, {},
       {"parallel.C: C = 2 is the WallFacer team size, but parallel.sp_strategy ring has no teams: set C to 1 or "
        "sp_strategy to wallfacer (or ulysses-wallfacer)"}},
      // The ulysses-wallfacer hybrid: U | sp, C² | sp/U, U only with the hybrid, its heads for U,
      // the sequence length for its layout.
      {"hybrid_u_not_dividing", "parallel:\n  sp: 8\n  U: 3\n  sp_strategy: ulysses-wallfacer\n", 8, {},
       {"parallel.dp, parallel.tp, parallel.pp, parallel.sp, parallel.C, parallel.U, parallel.order: U = 3 does not "
        "divide sp = 8: the Ulysses degree of ulysses-wallfacer must be a divisor of sp (the sp group is U Ulysses "
        "ranks times sp/U WallFacer ranks); valid U for sp = 8: 1, 2, 4, 8"}},
      {"hybrid_team_does_not_fit", "parallel:\n  sp: 8\n  U: 4\n  C: 2\n  sp_strategy: ulysses-wallfacer\n", 8, {},
       {"C = 2 does not fit sp / U = 8 / 4 = 2: WallFacer runs over groups of sp/U ranks and needs C >= 1 with C*C "
        "dividing sp/U; valid C for sp/U = 2: 1 (or choose another U)"}},
      {"u_without_hybrid", "parallel:\n  sp: 4\n  U: 2\n  sp_strategy: wallfacer\n", 4, {},
       {"parallel.U: U = 2 is the Ulysses degree of the ulysses-wallfacer hybrid, but parallel.sp_strategy is "
        "wallfacer: set U to 1 or sp_strategy to ulysses-wallfacer"}},
      {"hybrid_heads", "model:\n  n_head: 6\n  n_kv_head: 6\n  d_model: 384\nparallel:\n  sp: 8\n  U: 4\n"
       "  sp_strategy: ulysses-wallfacer\n", 8, {},
       {"model.n_head: sp_strategy ulysses-wallfacer over parallel.U = 4 scatters the heads of each tp rank, n_head / "
        "parallel.tp = 6 / 1 = 6 query heads and n_kv_head / parallel.tp = 6 / 1 = 6 kv heads (h and h_kv below; "
        "n_head and n_kv_head are tp times them): h = 6 query heads and h_kv = 6 kv heads do not split over the sp "
        "size P = 4"}},
      {"hybrid_heads_per_tp_rank", "model:\n  n_head: 4\n  n_kv_head: 4\nparallel:\n  tp: 2\n  sp: 8\n  U: 4\n"
       "  sp_strategy: ulysses-wallfacer\n", 16, {},
       {"model.n_head: sp_strategy ulysses-wallfacer over parallel.U = 4 scatters the heads of each tp rank, n_head / "
        "parallel.tp = 4 / 2 = 2 query heads"}},
      {"hybrid_seq_len", "parallel:\n  sp: 4\n  U: 2\n  sp_strategy: ulysses-wallfacer\ntrain:\n  seq_len: 100\n", 4,
       {},
       {"train.seq_len: sp_strategy ulysses-wallfacer over parallel.sp = 4 ranks: zigzag sequence layout: N = 100 "
        "tokens cannot be split over P = 4 ranks as U = 2 Ulysses ranks times P/U = 2 WallFacer ranks in teams of C "
        "= 1: it needs N divisible by 8 = 2·P (each WallFacer shard's tokens in 2·U chunks); nearest valid N: 96 or "
        "104"}},
      // Tensor parallelism: whole heads and d_ff units per tp rank; the tp values listed divide
      // the value and the world. (Each message is among the problems beside the trainer's own
      // "parallel.tp" one while the trainer has no tensor parallelism.)
      {"heads_tp", "model:\n  n_head: 6\n  n_kv_head: 6\n  d_model: 384\nparallel:\n  tp: 4\n", 4, {},
       {"model.n_head: tensor parallelism splits whole query heads over parallel.tp = 4, but n_head = 6; use tp in "
        "{1, 2} or n_head a multiple of 4"}},
      {"kv_heads_tp", "model:\n  n_head: 12\n  n_kv_head: 6\n  d_model: 384\nparallel:\n  tp: 4\n", 4, {},
       {"model.n_kv_head: tensor parallelism splits whole kv heads over parallel.tp = 4, but n_kv_head = 6; use tp in "
        "{1, 2} or n_kv_head a multiple of 4"}},
      {"kv_heads_fewer_than_tp", "model:\n  n_head: 8\n  n_kv_head: 2\nparallel:\n  tp: 4\n", 4, {},
       {"model.n_kv_head: tensor parallelism splits whole kv heads over parallel.tp = 4, but n_kv_head = 2 (fewer kv "
        "heads than tp ranks: kv heads are split over tp, never replicated); use tp in {1, 2} or n_kv_head a multiple "
        "of 4"}},
      {"d_ff_tp", "model:\n  d_ff: 1001\nparallel:\n  tp: 2\n", 2, {},
       {"model.d_ff: tensor parallelism splits the MLP feed-forward's d_ff units (up columns, down rows) over "
        "parallel.tp = 2, but d_ff = 1001; use tp in {1} or d_ff a multiple of 2"}},
      {"d_ff_tp_swiglu", "model:\n  name: llama\n  d_ff: 1002\nparallel:\n  tp: 4\n", 4, {},
       {"model.d_ff: tensor parallelism splits the SwiGLU feed-forward's d_ff units (gate and up columns, down rows) "
        "over parallel.tp = 4, but d_ff = 1002; use tp in {1, 2} or d_ff a multiple of 4"}},
      {"ulysses_heads_per_tp_rank",
       "model:\n  n_head: 4\n  n_kv_head: 4\nparallel:\n  tp: 2\n  sp: 4\n  sp_strategy: ulysses\n", 8, {},
       {"model.n_head: sp_strategy ulysses over parallel.sp = 4 scatters the heads of each tp rank, n_head / "
        "parallel.tp = 4 / 2 = 2 query heads and n_kv_head / parallel.tp = 4 / 2 = 2 kv heads",
        "h = 2 query heads and h_kv = 2 kv heads do not split over the sp size P = 4", "use ring or wallfacer"}},
      {"ulysses_kv_heads_per_tp_rank",
       "model:\n  n_head: 12\n  n_kv_head: 6\n  d_model: 384\nparallel:\n  tp: 2\n  sp: 2\n  sp_strategy: ulysses\n",
       4, {},
       {"n_kv_head / parallel.tp = 6 / 2 = 3 kv heads", "h = 6 query heads and h_kv = 3 kv heads do not split over "
        "the sp size P = 2", "with h = 6 at P = 2, h_kv can be 1, 2, 6"}},
      {"tp_exceeds_world", "parallel:\n  tp: 8\n", 4, {},
       {"dp 1 x tp 8 x pp 1 x sp 1 = 8 ranks, but the world has 4: the four sizes must multiply to the world size; "
        "tp = 8 exceeds the world (each size must be one of 4's divisors: 1, 2, 4); keeping the other sizes, tp = 4 "
        "would fit"}},
      {"tp_not_dividing_world", "parallel:\n  tp: 3\n", 4, {},
       {"tp = 3 does not divide the world (each size must be one of 4's divisors: 1, 2, 4); keeping the other sizes, "
        "tp = 4 would fit"}},
      {"tp_added_to_full_world", "parallel:\n  dp: 2\n  tp: 2\n", 2, {},
       {"dp 2 x tp 2 x pp 1 x sp 1 = 4 ranks, but the world has 2", "keeping the other sizes, dp = 1 or tp = 1 would fit"}},
      {"tp_shard_activations_tokens", "parallel:\n  tp: 4\n  tp_shard_activations: true\ntrain:\n  seq_len: 66\n", 4, {},
       {"parallel.tp_shard_activations: each rank's seq_len / sp = 66 / 1 = 66 tokens do not split over "
        "parallel.tp = 4", "a multiple of sp x tp = 4", "(nearest valid seq_len: 64 or 68)"}},
      // The lengths offered fit the zigzag layout too: 6 would split over sp x tp, not zigzag's 4.
      {"tp_shard_activations_layout",
       "model:\n  n_head: 6\n  n_kv_head: 6\n  d_model: 384\nparallel:\n  tp: 3\n  sp: 2\n  tp_shard_activations: "
       "true\ntrain:\n  seq_len: 20\n",
       6, {},
       {"parallel.tp_shard_activations: each rank's seq_len / sp = 20 / 2 = 10 tokens do not split over parallel.tp = "
        "3; choose a seq_len that is a multiple of sp x tp = 6 and of the zigzag layout's 4 (nearest valid seq_len: 12 "
        "or 24), or turn tp_shard_activations off"}},
      {"layers_pp", "model:\n  n_layer: 5\nparallel:\n  pp: 2\n", 2, {},
       {"model.n_layer: n_layer = 5 does not split evenly over parallel.pp x parallel.pp_virtual = 2 x 1 = 2",
        "or give each stage's blocks in parallel.pp_layers"}},
      {"pp_layers_sum", "model:\n  n_layer: 4\nparallel:\n  pp: 2\n  pp_layers: [1, 2]\n", 2, {},
       {"parallel.pp_layers: [1, 2] must give the blocks of each of the pp x pp_virtual = 2 x 1 = 2 pipeline stages",
        "summing to model.n_layer = 4 (it has 2 entries summing to 3)"}},
      {"pp_layers_count", "model:\n  n_layer: 4\nparallel:\n  pp: 2\n  pp_layers: [4]\n", 2, {},
       {"parallel.pp_layers: [4] must give the blocks of each of the pp x pp_virtual = 2 x 1 = 2"}},
      {"interleaved_microbatches", "parallel:\n  pp: 2\n  pp_schedule: interleaved\n  pp_virtual: 2\n"
       "train:\n  global_batch_size: 3\n", 2, {},
       {"parallel.pp_schedule", "3"}},
      {"virtual_without_interleaving", "parallel:\n  pp: 2\n  pp_virtual: 2\n", 2, {}, {"parallel.pp_virtual"}},
      {"virtual_without_pipeline", "parallel:\n  pp_virtual: 2\n", 1, {},
       {"parallel.pp_virtual: pp_virtual = 2 model chunks per rank need a pipeline"}},
      {"ulysses_heads", "model:\n  n_head: 6\n  n_kv_head: 6\n  d_model: 384\nparallel:\n  sp: 4\n  sp_strategy: ulysses\n",
       4, {}, {"model.n_head: sp_strategy ulysses over parallel.sp = 4", "use ring or wallfacer"}},
      {"ulysses_kv_heads", "model:\n  n_head: 8\n  n_kv_head: 3\n  d_model: 384\nparallel:\n  sp: 4\n  sp_strategy: ulysses\n",
       4, {}, {"model.n_kv_head: n_head = 8 is not a multiple of n_kv_head = 3"}},
      // Absurd sizes: refused with the memory a rank would need, never a wrapped number.
      {"huge_d_ff", "model:\n  d_ff: 4611686018427387904\n", 1, {},
       {"model: a rank would need about", "GiB for weights, gradients and AdamW state", "a machine of this job has"}},
      {"huge_layers", "model:\n  n_layer: 1000000000\n", 1, {}, {"model: a rank would need about"}},
      {"huge_vocab", "model:\n  vocab_size: 4611686018427387904\n", 1, {}, {"model: a rank would need about"}},
      {"huge_context", "model:\n  max_seq_len: 4611686018427387904\n", 1, {}, {"model: a rank would need about"}},
      {"huge_batch", "train:\n  micro_batch_size: 4611686018427387904\n", 1, {},
       {"train.micro_batch_size:", "does not fit in 64 bits"}},
      {"kv_heads", "model:\n  n_head: 6\n  n_kv_head: 4\n  d_model: 384\n", 1, {},
       {"model.n_kv_head: n_head = 6 is not a multiple of n_kv_head = 4"}},
      {"head_dim", "model:\n  n_head: 3\n  n_kv_head: 3\n  d_model: 256\n", 1, {},
       {"model.d_model: d_model = 256 is not a multiple of n_head = 3"}},
      {"rope_odd_head_dim", "model:\n  n_head: 4\n  n_kv_head: 4\n  d_model: 36\n  positions: rope\n", 1, {},
       {"model.positions: rope", "d_model / n_head = 9 is odd"}},
      {"global_batch", "parallel:\n  dp: 2\ntrain:\n  micro_batch_size: 3\n  global_batch_size: 10\n", 2, {},
       {"train.global_batch_size: 10 sequences is not a multiple of parallel.dp x train.micro_batch_size = 2 x 3 = 6",
        "nearest valid values 6 or 12"}},
      // The next multiple past 2^63 - 1 does not exist: only the one below is offered.
      {"global_batch_huge",
       "parallel:\n  dp: 2\ntrain:\n  micro_batch_size: 3\n  global_batch_size: 9223372036854775807\n", 2, {},
       {"train.global_batch_size: 9223372036854775807 sequences is not a multiple of parallel.dp x "
        "train.micro_batch_size = 2 x 3 = 6: nearest valid value 9223372036854775806"}},
      {"seq_over_max", "model:\n  max_seq_len: 512\ntrain:\n  seq_len: 1024\n", 1, {},
       {"train.seq_len: seq_len = 1024 exceeds model.max_seq_len = 512"}},
      {"vocab_byte", "model:\n  vocab_size: 100\n", 1, {},
       {"model.vocab_size: vocab_size = 100 is smaller than the byte tokenizer's 256 tokens"}},
      {"vocab_gpt2", "data:\n  tokenizer: gpt2\n", 1, {}, {"model.vocab_size", "gpt2 tokenizer's 50257 tokens"}},
      {"min_lr", "train:\n  lr: 1e-4\n  min_lr: 1e-3\n", 1, {}, {"train.min_lr: min_lr = 0.001 exceeds lr = 0.0001"}},
      {"eval_without_val", "train:\n  eval_every: 50\n", 1, {},
       {"train.eval_every: eval_every = 50 but data.val_path is empty"}},
      {"override_breaks_layout", "parallel:\n  dp: 2\n", 2, {"parallel.dp=3"}, {"but the world has 2"}},
      {"device_unknown", "train:\n  device: tpu\n", 1, {},
       {"train.device: 'tpu' is not a valid choice; expected one of cpu, cuda, auto, testdev"}},
  };
  // cuda where this build has no CUDA backend or the machine no GPU: validate refuses it as train
  // would, naming why and the fix. (Where a GPU is visible cuda is valid: tests/cuda.)
  if (cuda_devices().empty()) {
    cases.push_back({"device_cuda", "train:\n  device: cuda\n", 1, {}, {"train.device is cuda, but", "set train.device: cpu"}});
  }
  return cases;
}
const std::vector<BadConfig>& layout_cases() {
  static const std::vector<BadConfig> cases = layout_case_list();
  return cases;
}

void check_cases(const std::vector<BadConfig>& cases) {
  for (const BadConfig& bad : cases) {
    DYNAMIC_SECTION(bad.name) {
      const std::string message = load_error(bad);
      INFO("message: " << message);
      REQUIRE_FALSE(message.empty());
      for (const std::string& part : bad.expected) CHECK_THAT(message, Catch::Contains(part));
      // No message prints an overflowed number, and a message that names the key and the fix
      // ends without a source location.
      CHECK_THAT(message, !Catch::Contains("-92233720368547") && !Catch::Contains("18446744073709"));
    }
  }
}

TEST_CASE("config: bad values, keys and YAML are load errors that name the key", "[config]") {
  check_cases(load_time_cases());
}

TEST_CASE("config: impossible combinations are validation errors that name the key and the rule", "[config]") {
  check_cases(layout_cases());
}

TEST_CASE("config: a run shorter than its warmup trains with a note that the warmup is cut", "[config]") {
  const RunConfig c = parse_config("train:\n  steps: 30\n  warmup_steps: 100\n");
  TempYaml data("data.bin", "");
  CHECK_NOTHROW(validate(with_data_file(c, data.path()), 1));
  const std::vector<std::string> n = notes(c);
  REQUIRE(n.size() == 1);
  CHECK_THAT(n[0], Catch::Contains("train.warmup_steps: 100 warmup steps exceed train.steps = 30") &&
                       Catch::Contains("the warmup is cut at step 30"));
  // The hybrid at U = 1 or U = sp is one of its parts, and validate says so.
  const RunConfig hybrid_u1 = parse_config("parallel:\n  sp: 4\n  sp_strategy: ulysses-wallfacer\n");
  CHECK_THAT(notes(hybrid_u1).at(0), Catch::Contains("parallel.U: with U = 1 the ulysses-wallfacer hybrid is exactly "
                                                     "wallfacer (no Ulysses part)"));
  // sp = C x C: a placement the config chooses cannot matter, and validate says so; the default
  // placement nobody chose is no reason to remark (nor is a default warmup nobody shortened).
  const RunConfig square = parse_config("parallel:\n  sp: 4\n  C: 2\n  placement: p2p-intra\n");
  CHECK_THAT(notes(square).at(0), Catch::Contains("with sp = 4 = C x C ranks") && Catch::Contains("the placement cannot matter"));
  CHECK(notes(parse_config("parallel:\n  sp: 4\n  C: 2\n")).empty());
  CHECK(notes(parse_config("parallel:\n  sp: 4\n  C: 2\n", {"parallel.placement=collectives-intra"})).size() == 1);
  RunConfig short_run;
  short_run.train.steps = 30;  // set in code: neither the steps nor the warmup was given
  CHECK(notes(short_run).empty());
  // The hybrid's WallFacer group is sp / U: there the note names it.
  const RunConfig square_group =
      parse_config("parallel:\n  sp: 8\n  U: 2\n  C: 2\n  sp_strategy: ulysses-wallfacer\n  placement: p2p-intra\n");
  CHECK_THAT(notes(square_group).at(0), Catch::Contains("with the WallFacer group of sp / U = 8 / 2 = 4 = C x C ranks"));
  CHECK(notes(RunConfig{}).empty());
}

TEST_CASE("config: a vocabulary tensor parallelism does not divide is padded, not refused", "[config]") {
  // GPT-2's 50257 tokens over tp = 2 (the vocabulary-parallel embedding and head pad to a
  // multiple of tp): the config is valid as a config, and no problem names the vocabulary.
  const RunConfig c = parse_config("model:\n  vocab_size: 50257\nparallel:\n  tp: 2\ndata:\n  tokenizer: gpt2\n");
  CHECK_NOTHROW(validate(c, 2, ValidateScope::any_machine));
  TempYaml data("data.bin", "");
  const std::string message = error_of([&] { validate(with_data_file(c, data.path()), 2); });
  CHECK_THAT(message, !Catch::Contains("vocab"));
}

TEST_CASE("config: the memory check counts every rank that shares the machine", "[config]") {
  // A probe's DiT of about 1.07 B parameters (some 16 GiB a rank) as 4 dp ranks on one 23.5 GiB machine.
  const RunConfig c = parse_config(
      "model:\n  name: dit\n  d_model: 2048\n  n_layer: 14\n  n_head: 16\n  image_size: 32\n  patch_size: 2\n"
      "train:\n  seq_len: 256\ndata:\n  source: synthetic\nparallel:\n  dp: 4\n  sp: 1\n");
  const double machine = 23.5 * double(1 << 30);
  // One rank a machine fits; four on one do not, and the message gives the numbers and the fixes.
  CHECK(validation_problems(c, 4, ValidateScope::this_machine, machine, 1).empty());
  const std::vector<std::string> shared = validation_problems(c, 4, ValidateScope::this_machine, machine, 4);
  REQUIRE(shared.size() == 1);
  CHECK_THAT(shared[0], Catch::Contains("model: a rank would need about 16.") &&
                            Catch::Contains("and 4 ranks share a machine of 23.5 GiB: 4 x 16.") &&
                            Catch::Contains("does not fit; run at most 1 rank per machine (spread the job over more "
                                            "machines), or shrink the model's sizes"));
  CHECK_THAT(error_of([&] { validate(c, 4, ValidateScope::this_machine, machine, 4); }),
             Catch::Contains("4 ranks share a machine of 23.5 GiB"));
  // The config alone (any machine) does not know which ranks share one.
  CHECK(validation_problems(c, 4, ValidateScope::any_machine, machine, 4).empty());
}

TEST_CASE("config: a bucket size set in code is range-checked by validate, naming the key", "[config]") {
  for (const double mb : {1e15, 1e-9}) {
    RunConfig c;
    c.data.source = DataSource::synthetic;
    c.parallel.grad_bucket_mb = mb;
    const std::vector<std::string> problems = validation_problems(c, 1, ValidateScope::any_machine);
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0], Catch::Contains(fmt::format("parallel.grad_bucket_mb: {} MiB is out of range: set it from "
                                                        "0.001 to 1000000 (MiB per gradient bucket",
                                                        mb)));
  }
}

TEST_CASE("config: validate refuses data files this machine cannot read, as train does", "[config]") {
  RunConfig c;
  c.data.train_path = "/no/such/dir/train.bin";
  CHECK_THAT(error_of([&] { validate(c, 1); }),
             Catch::Contains("data.train_path: cannot read the token file '/no/such/dir/train.bin': No such file or "
                             "directory; write it with `wallfacer prepare-text --input TEXT.txt --output-dir "
                             "/no/such/dir --tokenizer byte` (train.bin and val.bin), point data.train_path at an "
                             "existing token file, or set data.source to synthetic"));
  // Another machine of the job may hold the files; synthetic tokens read none.
  CHECK_NOTHROW(validate(c, 1, ValidateScope::any_machine));
  c.data.source = DataSource::synthetic;
  CHECK_NOTHROW(validate(c, 1));

  // A directory is no token file; the validation file is checked too.
  TempYaml data("data.bin", "");
  RunConfig dir = with_data_file(RunConfig{}, data.path());
  dir.data.val_path = std::filesystem::path(data.path()).parent_path().string();
  const std::string message = error_of([&] { validate(dir, 1); });
  CHECK_THAT(message, Catch::Contains(fmt::format("data.val_path: cannot read the token file '{}': it is a directory",
                                                  dir.data.val_path)) &&
                          Catch::Contains("point data.val_path at an existing token file"));
  CHECK_THAT(message, !Catch::Contains("data.train_path"));
}

TEST_CASE("config: data.pack needs the document indexes of token files", "[config]") {
  const auto problems_of = [](const RunConfig& c, ValidateScope scope) {
    return fmt::format("{}", fmt::join(validation_problems(c, 1, scope), "; "));
  };
  RunConfig synthetic;
  synthetic.data.source = DataSource::synthetic;
  synthetic.data.pack = true;
  CHECK_THAT(problems_of(synthetic, ValidateScope::any_machine),
             Catch::Contains("data.pack: synthetic tokens have no documents: set data.source: file"));
  RunConfig images;
  images.model.name = "dit";
  images.data.source = DataSource::synthetic;
  images.data.pack = true;
  CHECK_THAT(problems_of(images, ValidateScope::any_machine),
             Catch::Contains("data.pack: packs documents of token files, but model dit reads images"));

  TempYaml tokens("packed.bin", "");
  RunConfig packed = with_data_file(RunConfig{}, tokens.path());
  packed.data.pack = true;
  const std::string index = (std::filesystem::path(tokens.path()).parent_path() / "packed.docs").string();
  CHECK_THAT(problems_of(packed, ValidateScope::this_machine),
             Catch::Contains(fmt::format("data.pack: cannot read the document index '{}' of token file '{}': No such "
                                         "file or directory; re-run `wallfacer prepare-text`",
                                         index, tokens.path())));
  TempYaml docs("packed.docs", "");
  // With its index beside it the packed run is valid: the trainer packs (no unsupported_by_trainer).
  CHECK(problems_of(packed, ValidateScope::this_machine).empty());
  CHECK(problems_of(packed, ValidateScope::any_machine).empty());
}

TEST_CASE("config: a missing file is named", "[config]") {
  CHECK_THROWS_WITH(load_config("/no/such/dir/run.yaml"),
                    Catch::Contains("cannot read config file '/no/such/dir/run.yaml'"));
}

TEST_CASE("config: every problem is listed in one message, the same every time", "[config]") {
  const BadConfig bad{"many", "model:\n  n_head: 6\n  n_kv_head: 4\n  d_model: 384\ntrain:\n  min_lr: 0.1\n", 1,
                      {}, {}};
  const std::string message = load_error(bad);
  CHECK_THAT(message, Catch::Contains("model.n_kv_head") && Catch::Contains("; train.min_lr"));
  CHECK(load_error(bad) == message);  // deterministic: every rank prints the same text
  // The world size itself is checked through the grid.
  CHECK_THROWS_WITH(validate(RunConfig{}, 0), Catch::Contains("world size 0 must be at least 1"));
}

}  // namespace
}  // namespace wf::config

namespace wf::config {
namespace {

// issue 26: "sp = 6 would fit" was offered for llama-tiny at 6 ranks, which then failed on C and
// on the sequence length. A layout is suggested only when the whole config validates under it.
TEST_CASE("config: a layout suggested for another world passes validation itself", "[config]") {
  TempYaml data("data.bin", "");
  const auto config_of = [&](const std::string& yaml) { return with_data_file(parse_config(yaml), data.path()); };
  // sp 4, C 2 (llama-tiny's layout) at 6 ranks: sp = 6 cannot hold C = 2, and no one size fits.
  const RunConfig llama = config_of("model:\n  name: llama\nparallel:\n  sp: 4\n  C: 2\ntrain:\n  seq_len: 256\n"
                                    "  micro_batch_size: 8\n  global_batch_size: 16\n");
  const std::string message = error_of([&] { validate(llama, 6); });
  CHECK_THAT(message, Catch::Contains("sp = 4 does not divide the world"));
  CHECK_THAT(message, !Catch::Contains("sp = 6 would fit"));
  for (const LayoutChange& change : fitting_layouts(llama, 6)) {
    RunConfig changed = llama;
    changed.parallel = change.layout;
    CHECK(validation_problems(changed, 6).empty());
  }
  // At 2 ranks a layout does fit (sp 2, C 1): offered with its keys, and valid.
  const std::vector<LayoutChange> two = fitting_layouts(llama, 2);
  REQUIRE(!two.empty());
  CHECK(two.front().set_flags() == "--set parallel.sp=2 --set parallel.C=1");
  CHECK_THAT(error_of([&] { validate(llama, 2); }),
             Catch::Contains("a layout of 2 ranks that validates: --set parallel.sp=2 --set parallel.C=1"));
  // One size changed alone comes first, when it validates.
  const RunConfig gpt = config_of("parallel:\n  dp: 2\n  sp: 2\n");
  CHECK(fitting_layouts(gpt, 2).front().keys == std::vector<std::string>{"parallel.dp=1"});
  CHECK(ranks_needed(gpt.parallel) == 4);
}

}  // namespace
}  // namespace wf::config

namespace wf::config {
namespace {

TEST_CASE("config: train.device auto validates everywhere and reads back as auto", "[config]") {
  test::TempYaml file("auto.yaml", "train:\n  device: auto\n"), data("data.bin", "");
  const RunConfig c = test::with_data_file(load_config(file.path()), data.path());
  CHECK(c.train.device == kAutoDevice);
  CHECK_NOTHROW(validate(c, 1));
  CHECK_THAT(to_yaml(c), Catch::Contains("device: auto"));
  test::TempYaml again("auto-again.yaml", to_yaml(c));
  CHECK(test::with_data_file(load_config(again.path()), data.path()) == c);
}

TEST_CASE("config: train.device testdev validates and reads back from to_yaml", "[config]") {
  test::TempYaml file("testdev.yaml", "train:\n  device: testdev\n"), data("data.bin", "");
  const RunConfig c = test::with_data_file(load_config(file.path()), data.path());
  CHECK(c.train.device == Device::test());
  CHECK_NOTHROW(validate(c, 1));
  test::TempYaml again("testdev-again.yaml", to_yaml(c));
  CHECK(test::with_data_file(load_config(again.path()), data.path()) == c);
}

}  // namespace
}  // namespace wf::config
