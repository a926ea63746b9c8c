#pragma once
// All differentiable tensor functions.
#include "wallfacer/ops/activation.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/attention.h"
#include "wallfacer/ops/count.h"
#include "wallfacer/ops/embedding.h"
#include "wallfacer/ops/linalg.h"
#include "wallfacer/ops/loss.h"
#include "wallfacer/ops/norm.h"
#include "wallfacer/ops/reduction.h"
#include "wallfacer/ops/rope.h"
#include "wallfacer/ops/shape_ops.h"
