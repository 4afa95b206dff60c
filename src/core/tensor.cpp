#include "soma/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/device_backend.hpp"
#include "internal/cpu_allocator.hpp"
#include "internal/dispatch.hpp"
#include "internal/runtime_checks.hpp"
#include "internal/tensor_alloc.hpp"

namespace soma {

namespace {
// Per-thread free lists for the shared_ptr blocks of TensorImpl and Storage (make_shared's one
// allocation each), so that a tensor's two control blocks come from a list instead of malloc
// (issue 5: a tiny op's allocations were a third of its time, more while a tape keeps outputs
// alive). A block freed on another thread joins that thread's list; a list holds at most
// kMaxFree blocks; blocks are plain operator new memory, so one freed after its thread's list
// is gone (thread exit, static destruction) simply goes back to operator delete.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kPoolBlocks = false;  // let the checkers see every block
#else
constexpr bool kPoolBlocks = true;
#endif
constexpr std::size_t kMaxFree = 4096;

template <std::size_t Size>
struct FreeList {
  struct Link {
    Link* next;
  };
  Link* head = nullptr;
  std::size_t count = 0;
  ~FreeList();
};
template <std::size_t Size>
// Trivially destructible: still readable after ~FreeList ran. initial-exec: a %fs-relative load
// instead of a __tls_get_addr call (see src/ops/registry.cpp).
[[gnu::tls_model("initial-exec")]] thread_local bool t_list_gone = false;
template <std::size_t Size>
[[gnu::tls_model("initial-exec")]] thread_local FreeList<Size> t_list;
template <std::size_t Size>
FreeList<Size>::~FreeList() {
  t_list_gone<Size> = true;
  while (head) {
    Link* next = head->next;
    ::operator delete(static_cast<void*>(head));
    head = next;
  }
}

template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (kPoolBlocks && n == 1 && !t_list_gone<sizeof(T)>) {
      auto& list = t_list<sizeof(T)>;
      if (auto* link = list.head) {
        list.head = link->next;
        --list.count;
        return reinterpret_cast<T*>(link);
      }
    }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    static_assert(sizeof(T) >= sizeof(void*) && alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
    if (kPoolBlocks && n == 1 && !t_list_gone<sizeof(T)>) {
      auto& list = t_list<sizeof(T)>;
      if (list.count < kMaxFree) {
        auto* link = reinterpret_cast<typename FreeList<sizeof(T)>::Link*>(p);
        link->next = list.head;
        list.head = link;
        ++list.count;
        return;
      }
    }
    ::operator delete(static_cast<void*>(p));
  }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const noexcept {
    return true;
  }
};

std::shared_ptr<TensorImpl> new_impl() {
  return std::allocate_shared<TensorImpl>(PoolAllocator<TensorImpl>());
}
}  // namespace

std::uint64_t next_tensor_id() {
  static std::atomic<std::uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

namespace {
// What the tensor being allocated is ("tensor [2, 3] f32"), set by empty_tensor for the
// allocation's error message; null for storages allocated by themselves.
thread_local const std::string* t_allocating = nullptr;
}  // namespace

std::shared_ptr<Storage> Storage::allocate(std::size_t nbytes, Device device) {
  if (!device.is_cpu()) return detail::device_storage(nbytes, device);  // core/device_backend
  // Larger than the memory limit or than what the system can still give: a clear error.
  detail::check_allocation(nbytes, device, t_allocating);
  auto s = std::allocate_shared<Storage>(PoolAllocator<Storage>());
  // 64-byte aligned, from the caching allocator (internal/cpu_allocator.hpp).
  try {
    s->data = detail::cpu_allocate(nbytes);
  } catch (const std::bad_alloc&) {
    detail::allocation_failed(nbytes, device, t_allocating);
  }
  s->nbytes = nbytes;
  s->device = device;
  detail::g_cpu_bytes_in_use.fetch_add(nbytes, std::memory_order_relaxed);
  return s;
}

Storage::~Storage() {
  if (device.is_cpu()) {
    if (data) detail::g_cpu_bytes_in_use.fetch_sub(nbytes, std::memory_order_relaxed);
    detail::cpu_free(data, nbytes);
  } else {
    detail::device_free(data, nbytes, device);
  }
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return detail::empty_tensor(Shape(shape), dtype, device);
}

Tensor detail::empty_tensor(Shape&& shape, DType dtype, Device device) {
  for (auto d : shape)
    if (d < 0) fail("empty", "negative dimension in shape ", shape_str(shape));
  const std::int64_t n = soma::numel(shape);  // saturates instead of overflowing
  if (n > (std::int64_t(1) << 48) / std::int64_t(dtype_size(dtype)))
    fail("empty", "tensor of shape ", shape_str(shape), " and dtype ", dtype_name(dtype),
         " is too large to allocate");
  auto impl = new_impl();
  const std::size_t nbytes = std::size_t(n) * dtype_size(dtype);
  if (nbytes >= (std::size_t(1) << 20) && device.is_cpu()) {
    // Big enough that a failure is plausible: name the tensor in the error.
    const std::string what = "tensor " + shape_str(shape) + " " + dtype_name(dtype);
    t_allocating = &what;
    try {
      impl->storage = Storage::allocate(nbytes, device);
    } catch (...) {
      t_allocating = nullptr;
      throw;
    }
    t_allocating = nullptr;
  } else {
    impl->storage = Storage::allocate(nbytes, device);
  }
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  impl->device = device;
  impl->id = next_tensor_id();
  return Tensor(std::move(impl));
}

Tensor Tensor::view_of(const Tensor& base, Shape shape, Strides strides, std::int64_t offset) {
  auto impl = new_impl();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->device = base.device();
  impl->id = next_tensor_id();
  return Tensor(std::move(impl));
}

void Tensor::throw_undefined() {
  throw Error("tensor: use of an undefined (empty) Tensor handle");
}

std::int64_t Tensor::dim(std::int64_t axis) const {
  return shape()[normalize_axis(axis, rank(), "dim")];
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;
  const auto& s = shape();
  const auto& st = strides();
  std::int64_t acc = 1;
  for (std::size_t i = s.size(); i-- > 0;) {
    if (s[i] != 1 && st[i] != acc) return false;
    acc *= s[i];
  }
  return true;
}

// A tensor with elements but no memory is a symbolic graph tensor (graph mode): its values
// exist only when a Session runs the graph.
static void check_has_data(const Tensor& t, const char* what) {
  if (t.storage() && t.storage()->data == nullptr && t.numel() > 0)
    fail(what, "tensor of shape ", shape_str(t.shape()),
         " has no data: it is a symbolic graph tensor; fetch it with Session::run");
}

void* Tensor::raw_data() const {
  check_has_data(*this, "raw_data");
  return static_cast<char*>(impl().storage->data) + impl().offset * std::int64_t(dtype_size(dtype()));
}

void Tensor::check_dtype(DType want, const char* what) const {
  check_has_data(*this, what);
  if (dtype() != want)
    fail(what, "tensor has dtype ", dtype_name(dtype()), " but ", dtype_name(want),
         " was requested");
}

namespace {
// Storage offset (in elements) of the element at row-major linear index `i`.
std::int64_t offset_of(const Tensor& t, std::int64_t i) {
  std::int64_t off = t.offset();
  const auto& s = t.shape();
  const auto& st = t.strides();
  for (std::size_t d = s.size(); d-- > 0;) {
    off += (i % s[d]) * st[d];
    i /= s[d];
  }
  return off;
}

template <class T>
T read_converted(const Tensor& t, std::int64_t storage_offset) {
  if (!t.device().is_cpu())
    fail("read", "tensor is on ", t.device().str(), "; copy it to the CPU first with to(Device::cpu())");
  check_has_data(t, "read");
  return detail::dispatch_dtype(t.dtype(), [&]<class S>() {
    return detail::convert<T>(static_cast<const S*>(t.storage()->data)[storage_offset]);
  });
}
}  // namespace

template <class T>
T Tensor::item() const {
  if (numel() != 1)
    fail("item", "expected a tensor with one element, got shape ", shape_str(shape()));
  return read_converted<T>(*this, offset_of(*this, 0));
}

template <class T>
T Tensor::at(const std::vector<std::int64_t>& index) const {
  if (std::int64_t(index.size()) != rank())
    fail("at", "index has ", index.size(), " entries for a tensor of shape ", shape_str(shape()));
  std::int64_t off = offset();
  for (std::size_t d = 0; d < index.size(); ++d) {
    std::int64_t i = index[d] < 0 ? index[d] + shape()[d] : index[d];
    if (i < 0 || i >= shape()[d])
      fail("at", "index ", index[d], " is out of range for dimension ", d, " of size ",
           shape()[d], " (shape ", shape_str(shape()), ")");
    off += i * strides()[d];
  }
  return read_converted<T>(*this, off);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  std::int64_t n = numel();
  std::vector<T> out(static_cast<std::size_t>(n));
  if (n == 0) return out;
  if (!device().is_cpu())
    fail("to_vector", "tensor is on ", device().str(), "; copy it to the CPU first");
  Tensor c = contiguous();
  detail::dispatch_dtype(c.dtype(), [&]<class S>() {
    const S* p = static_cast<const S*>(c.raw_data());
    for (std::int64_t i = 0; i < n; ++i) out[std::size_t(i)] = detail::convert<T>(p[i]);
  });
  return out;
}

#define SOMA_INSTANTIATE(T)                                             \
  template T Tensor::item<T>() const;                                   \
  template T Tensor::at<T>(const std::vector<std::int64_t>&) const;     \
  template std::vector<T> Tensor::to_vector<T>() const;
SOMA_INSTANTIATE(float)
SOMA_INSTANTIATE(double)
SOMA_INSTANTIATE(Half)
SOMA_INSTANTIATE(BFloat16)
SOMA_INSTANTIATE(std::int32_t)
SOMA_INSTANTIATE(std::int64_t)
SOMA_INSTANTIATE(std::uint8_t)
SOMA_INSTANTIATE(std::int8_t)
SOMA_INSTANTIATE(bool)
#undef SOMA_INSTANTIATE

double load_as_double(const void* p, DType t, std::int64_t i) {
  return detail::dispatch_dtype(t, [&]<class S>() {
    return detail::convert<double>(static_cast<const S*>(p)[i]);
  });
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  return detail::to_device(*this, d);  // explicit host/device copies (core/device_backend)
}

}  // namespace soma
