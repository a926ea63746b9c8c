#pragma once
// All of wf::nn: Module and the transformer layers.
#include "wallfacer/nn/attention_strategy.h"
#include "wallfacer/nn/dropout.h"
#include "wallfacer/nn/embedding.h"
#include "wallfacer/nn/init.h"
#include "wallfacer/nn/linear.h"
#include "wallfacer/nn/mlp.h"
#include "wallfacer/nn/module.h"
#include "wallfacer/nn/norm.h"
#include "wallfacer/nn/self_attention.h"
#include "wallfacer/nn/state_dict.h"
#include "wallfacer/nn/transformer_block.h"
