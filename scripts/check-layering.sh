#!/usr/bin/env bash
# Checks that includes point down the layer order (docs/architecture.md, issue 21 point 5):
#
#   core < backend < ops < autograd < graph < {data, image, onnx, dist, optim, nn} < model < apps
#
# For each folder of src/ and include/soma/ it lists the project includes (#include "...") that
# go UP that order. An upward include listed in ALLOWED below (with its reason) is reported but
# accepted; any other one makes the script exit 1. Includes between peers of one level (nn ->
# optim) are not upward. `-v` also prints the layer of every file checked.
#
# Files outside a layer folder get their layer from the tables below: the public headers at the
# top of include/soma/ and the shared internal headers of src/internal/ (each belongs to the
# layer that implements it).
set -euo pipefail
cd "$(dirname "$0")/.."
verbose=0
[[ "${1:-}" == "-v" ]] && verbose=1

declare -A RANK=([core]=0 [backend]=1 [ops]=2 [autograd]=3 [graph]=4
                 [data]=5 [image]=5 [onnx]=5 [dist]=5 [optim]=5 [nn]=5 [model]=6 [apps]=7)

# The layer of a folder of src/ or include/soma/.
declare -A FOLDER=([core]=core [startup]=core [backend]=backend [ops]=ops [autograd]=autograd
                   [graph]=graph [data]=data [image]=image [onnx]=onnx [dist]=dist [optim]=optim
                   [nn]=nn [model]=model)

# The layer of each public header at the top of include/soma/.
declare -A TOP=(
  [autocast.hpp]=core [dtype_info.hpp]=core [version.hpp]=core [cuda.hpp]=core [input_limits.hpp]=core [device.hpp]=core [dtype.hpp]=core [error.hpp]=core
  [random_state.hpp]=core [ref.hpp]=core [runtime_checks.hpp]=core [shape.hpp]=core
  [tensor.hpp]=core [threading.hpp]=core [cpu_isa.hpp]=core
  [op.hpp]=ops [ops.hpp]=ops [nn_ops.hpp]=ops [linalg.hpp]=ops [op_testing.hpp]=ops
  [autograd.hpp]=autograd [variable.hpp]=autograd  # Variable: state every tape watches
  [image.hpp]=image [metrics.hpp]=nn [onnx.hpp]=onnx
  [soma.hpp]=apps  # the whole API in one include: for programs, never included by the library
)

# The layer of each shared internal header in src/internal/ (the layer that implements it).
declare -A INTERNAL=(
  [atomic_file.hpp]=core [cpu_allocator.hpp]=core [cpu_isa.hpp]=core [dispatch.hpp]=core [parallel.hpp]=core
  [runtime_checks.hpp]=core [tensor_alloc.hpp]=core [tensor_vector_pool.hpp]=core
  [copy.hpp]=backend [fast_paths.hpp]=backend [fused_dense.hpp]=backend [vector_math.hpp]=backend
  [attention_composite.hpp]=ops [conv_bias_act.hpp]=ops [registration.hpp]=ops [relu_gradient.hpp]=ops
  [dense_chain.hpp]=nn [fused_inference.hpp]=nn
  [dense_op.hpp]=ops [optim_updates.hpp]=ops [conv3d_op.hpp]=ops [monitor_mode.hpp]=optim
)

# Upward includes accepted for now: "file -> included file | reason". Either side may be a glob.
ALLOWED=(
  "src/backend/* -> include/soma/op.hpp | kernels register themselves into the op registry, and their signature (KernelFn, Attrs) is declared with OpDef"
  "src/backend/* -> src/internal/registration.hpp | kernels register themselves into the op registry (register_cpu_*_kernels)"
  "include/soma/graph/graph.hpp -> include/soma/optim/optimizer.hpp | graph mode's Update node (minimize) holds an optimiser; it holds an update op once optimisers are registered ops (issue 21 point 4)"
  "include/soma/onnx.hpp -> include/soma/model/model.hpp | ONNX import builds a Model and export walks one; onnx moves below model when layers lower themselves to ops (issue 21 point 2)"
  "src/onnx/* -> include/soma/model/* | ONNX import builds Models and export walks their layers (issue 21 point 2)"
  "src/backend/* -> src/ops/elementwise_table.hpp | the scalar formulas of the elementwise ops are data (the header includes no soma header): every backend instantiates them"
  "src/ops/dense.cpp -> include/soma/autograd.hpp | the composite kernel runs its ops under NoGradScope (a kernel records nothing); NoGradScope belongs in ops' dispatch hooks"
  "src/ops/optim_updates.cpp -> include/soma/autograd.hpp | the composite update kernels run their ops under NoGradScope; as above"
  "src/backend/cpu/dense.cpp -> include/soma/autograd.hpp | the fused Dense fast path applies only when no tape records (active_tapes); the dispatch hooks' recording bit would do"
  "src/backend/cpu/dense.cpp -> include/soma/ops.hpp | the dense op's composite kernel for other dtypes is written with ops"
  "src/backend/* -> src/ops/update_formulas.hpp | the optimisers' per-element update formulas are data (SOMA_HD functors; the header includes no soma header): the CPU test and the CUDA kernels instantiate them, as the elementwise table"
  "src/backend/* -> src/ops/quantize_formulas.hpp | quantize_linear's and dequantize_linear's per-element formulas are data (SOMA_HD functors; the header includes no soma header): the CPU and CUDA kernels and the CPU test instantiate them, as the update formulas"
  "src/backend/cuda/dense.cpp -> include/soma/autograd.hpp | as the CPU dense kernel: with the epilogue's ReLU off, the relu op runs after the GEMM under NoGradScope"
  "src/backend/cuda/dense.cpp -> include/soma/ops.hpp | the relu op after cuBLASLt's bias epilogue when its ReLU epilogue is off"
  "src/core/device_backend.cpp -> src/internal/copy.hpp | the CPU stand-in device of the tests (emulated_device_backend) copies and fills with the CPU routines; it sits beside the backend override hook so that device_free knows its blocks whatever table is installed"
  "src/backend/* -> src/internal/dense_op.hpp | the dense op's attribute reader and kernel registration, shared by the op and its CPU kernel (as registration.hpp)"
  "src/backend/* -> src/internal/conv3d_op.hpp | the conv3d ops' composite kernels, which the CPU kernels fall back to for other dtypes, and their registration"
  "src/ops/conv3d.cpp -> include/soma/autograd.hpp | the conv3d composite kernels run their ops under NoGradScope; as dense.cpp"
  "src/backend/* -> src/internal/optim_updates.hpp | the update ops' composite kernels, which the CPU kernels fall back to for other dtypes, and their registration"
  "src/backend/* -> src/internal/attention_composite.hpp | scaled_dot_product_attention's composite kernels, which CUDA's cuDNN fused attention falls back to for what cuDNN does not take"
  "src/nn/config.cpp -> include/soma/model/merge.hpp | the merge layers (Add, Concatenate, ...) are nn layers declared in model/; merge.hpp belongs in include/soma/nn/"
)

layer_of() {  # path -> layer name ("" when the path is not in a layer)
  local p=$1 rest dir
  case $p in
    src/internal/*) echo "${INTERNAL[${p#src/internal/}]:-}" ;;
    include/soma/*/*) rest=${p#include/soma/}; dir=${rest%%/*}; echo "${FOLDER[$dir]:-}" ;;
    include/soma/*) echo "${TOP[${p#include/soma/}]:-}" ;;
    src/*/*) rest=${p#src/}; dir=${rest%%/*}; echo "${FOLDER[$dir]:-}" ;;
    *) echo "" ;;
  esac
}

# Where an include names: include/soma/..., src/..., or a file beside the includer.
resolve() {
  local from=$1 inc=$2
  if [[ $inc == soma/* ]]; then echo "include/$inc"
  elif [[ -e src/$inc ]]; then echo "src/$inc"
  elif [[ -e $(dirname "$from")/$inc ]]; then echo "$(dirname "$from")/$inc"
  else echo ""  # generated (protobuf) or not ours
  fi
}

allowed_reason() {
  local key=$1 entry
  for entry in "${ALLOWED[@]}"; do
    local pair=${entry%% | *}
    # shellcheck disable=SC2053  # the allowlist's sides are globs
    if [[ ${key%% -> *} == ${pair%% -> *} && ${key#* -> } == ${pair#* -> } ]]; then
      echo "$pair"$'\t'"${entry#* | }"
      return
    fi
  done
}

unknown=()
declare -A seen_allowed=()
declare -A report=()  # folder -> lines
bad=0
while IFS= read -r file; do
  from_layer=$(layer_of "$file")
  if [[ -z $from_layer ]]; then unknown+=("$file"); continue; fi
  ((verbose)) && echo "$file: $from_layer"
  while IFS= read -r inc; do
    target=$(resolve "$file" "$inc")
    [[ -z $target ]] && continue
    to_layer=$(layer_of "$target")
    if [[ -z $to_layer ]]; then unknown+=("$target"); continue; fi
    if (( RANK[$to_layer] > RANK[$from_layer] )); then
      key="$file -> $target"
      match=$(allowed_reason "$key")
      folder=$(dirname "$file")
      if [[ -n $match ]]; then
        seen_allowed[${match%%$'\t'*}]=1
        reason=${match#*$'\t'}
        report[$folder]+="  $key  ($from_layer -> $to_layer)  allowed: $reason"$'\n'
      else
        bad=$((bad + 1))
        report[$folder]+="  $key  ($from_layer -> $to_layer)  UPWARD"$'\n'
      fi
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(find src include/soma -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \
           -o -name '*.cu' -o -name '*.cuh' \) | sort)

for folder in $(printf '%s\n' "${!report[@]}" | sort); do
  echo "$folder:"
  printf '%s' "${report[$folder]}"
done
if ((${#unknown[@]})); then
  echo "files in no layer (add them to a table in $0):"
  printf '  %s\n' "${unknown[@]}" | sort -u
  bad=$((bad + 1))
fi
for entry in "${ALLOWED[@]}"; do
  key=${entry%% | *}
  [[ -n ${seen_allowed[$key]:-} ]] || echo "stale allowlist entry (no such include now): $key"
done
if ((bad)); then
  echo "check-layering: $bad upward include(s) not in the allowlist"
  exit 1
fi
echo "check-layering: no upward include outside the allowlist (${#seen_allowed[@]} allowed)"
