// Data-parallel gradient averaging: buckets, overlap with the backward pass, and the helpers
// fit() uses (weight broadcast, metric averaging, batch sharding).
#include "soma/dist/data_parallel.hpp"

#include <algorithm>
#include <cstring>

#include "internal/copy.hpp"
#include "soma/autograd.hpp"
#include "soma/dist/dist.hpp"
#include "soma/error.hpp"
#include "soma/ops.hpp"

namespace soma::dist {

struct GradientReducer::Bucket {
  DType dtype = DType::f32;
  Device device = Device::cpu();        // the parameters'; CUDA buckets go through NCCL
  std::vector<std::size_t> params;      // in the order they were placed
  std::vector<std::int64_t> offsets;    // element offset of each in the buffer
  std::int64_t numel = 0;
  Tensor buffer;                        // fresh every step: the gradients handed out stay valid
  std::size_t pending = 0;              // gradients still to come this step
  std::unique_ptr<Work> work;
};

namespace {

template <class T>
void scaled_copy(const Tensor& src, T* dst, std::int64_t n, double weight) {
  const T* s = src.data<T>();
  const T w = static_cast<T>(weight);
  if (weight == 1.0) std::memcpy(dst, s, std::size_t(n) * sizeof(T));
  else
    for (std::int64_t k = 0; k < n; ++k) dst[k] = s[k] * w;
}

// Data-parallel training is handed the world communicator (MPI, CPU tensors); tensors on a GPU
// take the NCCL communicator of their device instead (dist::communicator_for), device to device.
// Null: keep `comm` (also when `comm` is already a device communicator: the world never is).
CommunicatorRef route(const Communicator& comm, Device device) {
  if (device.is_cpu() || !initialized() || &comm != &world())
    return nullptr;
  return communicator_for(device);
}

}  // namespace

GradientReducer::GradientReducer(CommunicatorRef comm, std::vector<Variable> params,
                                 ReducerOptions options)
    : comm_(std::move(comm)), params_(std::move(params)), options_(options) {
  const char* who = "dist.GradientReducer";
  if (!comm_) fail(who, "the communicator is null");
  if (options_.bucket_bytes < 0)
    fail(who, "bucket_bytes must be >= 0, got ", options_.bucket_bytes);
  bucket_of_.resize(params_.size());
  slot_of_.resize(params_.size());
  // Reverse parameter order: the backward pass finishes the last layers first. One open bucket
  // per dtype; a bucket closes when the next gradient would take it past bucket_bytes.
  std::vector<std::ptrdiff_t> open(kNumDTypes, -1);
  const Device device = params_.empty() ? Device::cpu() : params_[0].value().device();
  for (std::size_t k = params_.size(); k-- > 0;) {
    const Variable& v = params_[k];
    if (!v.defined()) fail(who, "parameter ", k, " is undefined");
    if (v.value().device() != device)
      fail(who, "parameter '", v.name(), "' is on ", v.value().device().str(), " and parameter '",
           params_[0].name(), "' on ", device.str(), "; data-parallel training needs the whole "
           "model on one device per rank");
    const DType dt = v.dtype();
    if (dt != DType::f32 && dt != DType::f64)
      fail(who, "parameter '", v.name(), "' has dtype ", dtype_name(dt),
           "; data-parallel training reduces f32 and f64 gradients");
    const std::int64_t n = v.value().numel();
    const std::int64_t bytes = n * std::int64_t(dtype_size(dt));
    std::ptrdiff_t b = open[std::size_t(dt)];
    if (b >= 0) {
      const Bucket& cur = *buckets_[std::size_t(b)];
      if ((cur.numel * std::int64_t(dtype_size(dt))) + bytes > options_.bucket_bytes) b = -1;
    }
    if (b < 0) {
      buckets_.push_back(std::make_unique<Bucket>());
      buckets_.back()->dtype = dt;
      buckets_.back()->device = device;
      b = std::ptrdiff_t(buckets_.size() - 1);
      open[std::size_t(dt)] = b;
    }
    Bucket& bk = *buckets_[std::size_t(b)];
    bucket_of_[k] = std::size_t(b);
    slot_of_[k] = bk.params.size();
    bk.params.push_back(k);
    bk.offsets.push_back(bk.numel);
    bk.numel += n;
  }
  stats_.buckets = std::int64_t(buckets_.size());
  if (CommunicatorRef r = route(*comm_, device)) comm_ = std::move(r);
}

GradientReducer::~GradientReducer() = default;

std::size_t GradientReducer::num_buckets() const { return buckets_.size(); }

void GradientReducer::begin_step(double weight) {
  if (in_step_) fail("dist.GradientReducer", "begin_step called twice without finish_step");
  if (!(weight >= 0.0)) fail("dist.GradientReducer", "the weight must be >= 0, got ", weight);
  weight_ = weight;
  in_step_ = true;
  next_launch_ = 0;
  stats_.started_during_backward = 0;
  stats_.gradients_pending_at_first_start = 0;
  reported_count_ = 0;
  has_grad_.assign(params_.size(), false);
  reported_.assign(params_.size(), false);
  for (auto& b : buckets_) {
    b->buffer = Tensor::empty({b->numel}, b->dtype, b->device);
    b->pending = b->params.size();
    b->work.reset();
  }
}

void GradientReducer::gradient_ready(std::size_t index, const Tensor& grad) {
  const char* who = "dist.GradientReducer";
  if (!in_step_) fail(who, "gradient_ready outside a step (call begin_step first)");
  if (index >= params_.size())
    fail(who, "parameter index ", index, " out of range (", params_.size(), " parameters)");
  if (reported_[index]) fail(who, "the gradient of parameter ", index, " was reported twice");
  if (grad.defined() && grad.shape() != params_[index].shape())
    fail(who, "the gradient of '", params_[index].name(), "' has shape ", shape_str(grad.shape()),
         ", the parameter ", shape_str(params_[index].shape()));
  reported_[index] = true;
  ++reported_count_;
  Bucket& b = *buckets_[bucket_of_[index]];
  const std::size_t slot = slot_of_[index];
  const std::int64_t n = params_[index].value().numel();
  if (!b.device.is_cpu()) {
    // On the device: scale and copy with soma's kernels (no host round trip).
    const std::int64_t off = b.offsets[slot];
    Tensor dst = b.buffer.slice(0, off, off + n);
    if (grad.defined()) {
      NoGradScope no_grad;
      Tensor g = weight_ == 1.0 ? grad : grad * weight_;
      soma::detail::copy_into(g.contiguous().reshape({n}), dst);
      has_grad_[index] = true;
    } else {
      soma::detail::fill_value(dst, 0.0);  // adds nothing to the sum
    }
  } else {
    char* base = static_cast<char*>(b.buffer.raw_data()) +
                 b.offsets[slot] * std::int64_t(dtype_size(b.dtype));
    if (grad.defined()) {
      Tensor g = grad.dtype() == b.dtype ? grad.contiguous() : grad.cast(b.dtype).contiguous();
      if (b.dtype == DType::f32) scaled_copy(g, reinterpret_cast<float*>(base), n, weight_);
      else scaled_copy(g, reinterpret_cast<double*>(base), n, weight_);
      has_grad_[index] = true;
    } else {
      std::memset(base, 0, std::size_t(n) * dtype_size(b.dtype));  // adds nothing to the sum
    }
  }
  --b.pending;
  if (options_.overlap) {
    const std::size_t before = next_launch_;
    launch_ready_buckets();
    stats_.started_during_backward += std::int64_t(next_launch_ - before);
    // Non-blocking collectives progress only inside MPI calls: give the ones in flight a turn.
    for (std::size_t k = 0; k < next_launch_; ++k)
      if (buckets_[k]->work) buckets_[k]->work->test();
  }
}

// Starts the buckets whose gradients are all in, strictly in bucket order: collectives must be
// issued in the same order on every rank.
void GradientReducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->pending == 0) {
    Bucket& b = *buckets_[next_launch_];
    if (next_launch_ == 0)
      stats_.gradients_pending_at_first_start = std::int64_t(params_.size() - reported_count_);
    b.work = comm_->allreduce_async(b.buffer, ReduceOp::Sum);
    ++next_launch_;
  }
}

std::vector<Tensor> GradientReducer::finish_step() {
  const char* who = "dist.GradientReducer";
  if (!in_step_) fail(who, "finish_step without begin_step");
  in_step_ = false;
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (!reported_[i])
      fail(who, "the gradient of parameter ", i, " ('", params_[i].name(),
           "') was never reported; every rank must report every parameter each step");
  if (!options_.overlap) {
    // After the backward pass: blocking all-reduces, which MPI runs faster than non-blocking
    // ones when there is nothing to overlap.
    for (auto& b : buckets_) comm_->allreduce(b->buffer, ReduceOp::Sum);
    next_launch_ = buckets_.size();
  }
  launch_ready_buckets();  // (overlap) any bucket not started yet, then wait in order
  for (auto& b : buckets_) {
    if (b->work) b->work->wait();
    b->work.reset();
  }
  std::vector<Tensor> out(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!has_grad_[i]) continue;
    Bucket& b = *buckets_[bucket_of_[i]];
    const std::int64_t off = b.offsets[slot_of_[i]];
    out[i] = b.buffer.slice(0, off, off + params_[i].value().numel()).reshape(params_[i].shape());
  }
  for (auto& b : buckets_) b->buffer = Tensor();
  return out;
}

std::function<void(std::size_t, const Tensor&)> GradientReducer::hook() {
  return [this](std::size_t i, const Tensor& g) { gradient_ready(i, g); };
}

void broadcast_parameters(Communicator& comm, const std::vector<Tensor>& tensors, int root) {
  for (const Tensor& t : tensors) {
    Tensor x = t;
    if (!x.is_contiguous())
      fail("dist.broadcast_parameters", "a parameter of shape ", shape_str(t.shape()),
           " is not contiguous");
    if (CommunicatorRef device_comm = route(comm, x.device())) device_comm->broadcast(x, root);
    else comm.broadcast(x, root);
  }
}

std::map<std::string, double> average_over_ranks(Communicator& comm,
                                                 const std::map<std::string, double>& values,
                                                 double weight) {
  if (comm.size() == 1) return values;
  std::vector<double> packed;
  packed.reserve(values.size() + 1);
  for (const auto& [k, v] : values) packed.push_back(weight > 0.0 ? v * weight : 0.0);
  packed.push_back(weight);
  Tensor t = Tensor::empty({std::int64_t(packed.size())}, DType::f64);
  std::memcpy(t.raw_data(), packed.data(), packed.size() * sizeof(double));
  comm.allreduce(t, ReduceOp::Sum);
  const double* r = t.data<double>();
  const double total = r[packed.size() - 1];
  std::map<std::string, double> out;
  std::size_t i = 0;
  for (const auto& [k, v] : values) {
    out[k] = total > 0.0 ? r[i] / total : v;
    ++i;
  }
  return out;
}

std::pair<std::int64_t, std::int64_t> shard_range(std::int64_t n, int rank, int size) {
  if (size <= 0 || rank < 0 || rank >= size)
    fail("dist.shard_range", "rank ", rank, " is not in [0, ", size, ")");
  return {n * rank / size, n * (rank + 1) / size};
}

}  // namespace soma::dist
