#pragma once
// The whole public API.
#include "soma/autograd.hpp"
#include "soma/device.hpp"
#include "soma/dtype.hpp"
#include "soma/error.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"
#include "soma/shape.hpp"
#include "soma/tensor.hpp"
#include "soma/threading.hpp"
#include "soma/variable.hpp"
