#pragma once
// Tensor: a cheap handle (shared ownership) to shape, strides, offset, dtype, device and storage.
// Views share storage; contiguous() copies only when needed.
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "soma/device.hpp"
#include "soma/dtype.hpp"
#include "soma/error.hpp"
#include "soma/shape.hpp"

namespace soma {

// A block of device memory. `version` counts in-place writes, so the tape can notice that a
// tensor it saved for the backward pass was overwritten.
struct Storage {
  void* data = nullptr;
  std::size_t nbytes = 0;
  Device device;
  std::atomic<std::uint64_t> version{0};

  static std::shared_ptr<Storage> allocate(std::size_t nbytes, Device device);
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  std::int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  Device device;
  std::uint64_t id = 0;     // unique per handle-creation; the tape keys gradients on it
  bool trainable = false;   // the value of a trainable Variable: tapes watch it automatically
  std::string name;         // set for variables
};

std::uint64_t next_tensor_id();

struct Slice {
  std::optional<std::int64_t> start, stop;
  std::int64_t step = 1;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  // A new handle over `base`'s storage with the given geometry (no copy).
  static Tensor view_of(const Tensor& base, Shape shape, Strides strides, std::int64_t offset);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Strides& strides() const { return impl().strides; }
  std::int64_t offset() const { return impl().offset; }
  std::int64_t rank() const { return std::int64_t(impl().shape.size()); }
  std::int64_t dim(std::int64_t axis) const;  // negative axes count from the end
  std::int64_t numel() const { return soma::numel(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().device; }
  std::uint64_t id() const { return impl().id; }
  bool is_contiguous() const;
  bool is_trainable_variable() const { return impl().trainable; }
  const std::string& name() const { return impl().name; }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  // Inline: every accessor above goes through it (issue 5, per-op overhead).
  TensorImpl& impl() const {
    if (!impl_) [[unlikely]] throw_undefined();
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // Typed pointer to the first element (at the offset). T must match the dtype exactly.
  template <class T> T* data() const {
    check_dtype(dtype_v<T>, "data");
    return static_cast<T*>(impl().storage->data) + impl().offset;
  }
  void* raw_data() const;

  // The single element of a one-element tensor, converted to T.
  template <class T> T item() const;
  // Element at a multi-index (negative indices count from the end), converted to T.
  template <class T> T at(const std::vector<std::int64_t>& index) const;
  // All elements in row-major order, converted to T.
  template <class T> std::vector<T> to_vector() const;

  Tensor contiguous() const;  // this tensor if already contiguous, else a packed copy
  Tensor clone() const;       // always a new storage
  Tensor cast(DType dtype) const;
  Tensor to(DType dtype) const { return cast(dtype); }
  Tensor to(Device device) const;

  // Views (no copy where the layout allows it).
  Tensor reshape(const Shape& shape) const;
  Tensor transpose() const;  // reverses the axes
  Tensor transpose(std::int64_t a, std::int64_t b) const;
  Tensor permute(const std::vector<std::int64_t>& perm) const;
  Tensor slice(const std::vector<Slice>& slices) const;
  Tensor slice(std::int64_t axis, std::optional<std::int64_t> start,
               std::optional<std::int64_t> stop, std::int64_t step = 1) const;
  Tensor squeeze(const std::vector<std::int64_t>& axes = {}) const;
  Tensor expand_dims(std::int64_t axis) const;
  Tensor broadcast_to(const Shape& shape) const;
  Tensor operator[](std::int64_t i) const;  // index along axis 0, dropping it

  std::string str() const;  // NumPy-style text

 private:
  void check_dtype(DType want, const char* what) const;
  [[noreturn]] static void throw_undefined();
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Reads element `i` of contiguous raw memory of dtype `t` as double (used for conversions).
double load_as_double(const void* p, DType t, std::int64_t i);

}  // namespace soma
