#pragma once
// All data-set readers: IDX (MNIST, Fashion-MNIST, EMNIST), CIFAR-10 binary and CSV.
#include "soma/data/cifar.hpp"
#include "soma/data/csv.hpp"
#include "soma/data/idx.hpp"
#include "soma/data/train_test.hpp"
