#pragma once
// Umbrella header: everything a program that embeds wallfacer needs.
#include "wallfacer/build_info.h"
#include "wallfacer/core/device.h"
#include "wallfacer/core/dtype.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/core/shape.h"
#include "wallfacer/core/storage.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/core/threading.h"
