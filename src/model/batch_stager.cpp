#include "model/batch_stager.hpp"

#include <cstring>
#include <utility>

#include "soma/error.hpp"

namespace soma::detail {

std::unique_ptr<BatchStager> BatchStager::make(Device device, const std::vector<Tensor>& x,
                                               const std::vector<Tensor>& y, const Tensor& sw,
                                               std::int64_t max_rows) {
  if (device.is_cpu() || max_rows <= 0 || x.empty()) return nullptr;
  const DeviceBackend* b = device_backend(device.kind);
  if (!has_async_copies(b) || !b->unavailable_reason().empty()) return nullptr;
  auto usable = [](const Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.rank() >= 1 && t.is_contiguous();
  };
  for (const Tensor& t : x)
    if (!usable(t)) return nullptr;
  for (const Tensor& t : y)
    if (!usable(t)) return nullptr;
  if (sw.defined() && !usable(sw)) return nullptr;

  std::unique_ptr<BatchStager> s(new BatchStager(device, b));
  auto add = [&](const Tensor& t) {
    std::size_t per_row = dtype_size(t.dtype());
    for (std::size_t d = 1; d < t.shape().size(); ++d) per_row *= std::size_t(t.shape()[d]);
    // 64-byte aligned pieces: the device copies and the host gathers run on whole lines.
    const std::size_t bytes = (per_row * std::size_t(max_rows) + 63) / 64 * 64;
    s->sources_.push_back({t.numel() > 0 ? static_cast<const std::uint8_t*>(t.raw_data()) : nullptr,
                           per_row, t.shape(), t.dtype(), s->slot_bytes_});
    s->slot_bytes_ += bytes;
  };
  for (const Tensor& t : x) add(t);
  for (const Tensor& t : y) add(t);
  if (sw.defined()) add(sw);
  s->nx_ = x.size();
  s->ny_ = y.size();
  if (s->slot_bytes_ == 0) return nullptr;
  for (Slot& slot : s->slots_) {  // freed by the destructor if a later one fails
    slot.host = b->allocate_pinned(s->slot_bytes_);
    slot.event = b->create_event(device.index);
  }
  return s;
}

BatchStager::~BatchStager() {
  for (Slot& slot : slots_) {
    // The buffer may go back to a cache and be handed out again: no copy may still read it.
    if (slot.recorded) {
      try {
        b_->wait_event(slot.event, device_.index);
      } catch (...) {  // a failed device: nothing more will run on its stream
      }
    }
    if (slot.event) b_->destroy_event(slot.event, device_.index);
    if (slot.host) b_->free_pinned(slot.host, slot_bytes_);
  }
}

void BatchStager::stage(std::int64_t start, std::int64_t stop, const Tensor& perm) {
  if (pending_ >= 2) fail("fit", "internal: a third batch staged before the first was taken");
  const std::int64_t rows = stop - start;
  const std::int64_t* idx = nullptr;
  Tensor perm_c;
  if (perm.defined()) {
    if (perm.dtype() != DType::i64 || !perm.device().is_cpu() || perm.rank() != 1 ||
        stop > perm.shape()[0])
      fail("fit", "internal: the permutation must be an i64 host vector of at least ", stop,
           " entries, got ", shape_str(perm.shape()));
    perm_c = perm.contiguous();
    idx = static_cast<const std::int64_t*>(perm_c.raw_data()) + start;
  }
  Slot& slot = slots_[next_];
  // The copy queued from this buffer two batches ago must have read it.
  if (slot.recorded) b_->wait_event(slot.event, device_.index);
  auto* host = static_cast<std::uint8_t*>(slot.host);
  StagedBatch batch;
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    const Source& src = sources_[i];
    std::uint8_t* dst = host + src.offset;
    const std::int64_t n_src = src.shape[0];
    const std::size_t nbytes = src.row_bytes * std::size_t(rows);
    if (nbytes > 0) {
      if (!idx) {
        std::memcpy(dst, src.data + std::size_t(start) * src.row_bytes, nbytes);
      } else {
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::int64_t k = idx[r];
          if (k < 0 || k >= n_src)
            fail("fit", "internal: row index ", k, " out of range for ", n_src, " rows");
          std::memcpy(dst + std::size_t(r) * src.row_bytes,
                      src.data + std::size_t(k) * src.row_bytes, src.row_bytes);
        }
      }
    }
    Shape shape = src.shape;
    shape[0] = rows;
    Tensor t = Tensor::empty(shape, src.dtype, device_);
    if (nbytes > 0) {
      b_->copy_to_device_async(t.raw_data(), device_, dst, nbytes);
      count_transfer(true, nbytes);
    }
    if (i < nx_)
      batch.x.push_back(std::move(t));
    else if (i < nx_ + ny_)
      batch.y.push_back(std::move(t));
    else
      batch.sw = std::move(t);
  }
  b_->record_event(slot.event, device_.index);
  slot.recorded = true;
  slot.batch = std::move(batch);
  next_ ^= 1;
  ++pending_;
}

StagedBatch BatchStager::take() {
  if (pending_ == 0) fail("fit", "internal: no staged batch to take");
  Slot& slot = slots_[(next_ + 2 - pending_) % 2];
  --pending_;
  return std::move(slot.batch);
}

}  // namespace soma::detail
