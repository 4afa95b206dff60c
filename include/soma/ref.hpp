#pragma once
// Ref<Base>: a shared handle to a polymorphic object that can be built from any value of a
// derived type, so that APIs read like Keras: compile(optim::Adam({...}), nn::MeanSquaredError(),
// {metrics::Accuracy()}) copies each object into shared ownership. Copies of a Ref share.
#include <concepts>
#include <memory>
#include <type_traits>

namespace soma {

// A type that is not derived from Base can still stand for one when its namespace provides
// `std::shared_ptr<Base> ref_adapt(std::shared_ptr<T>)`, found by argument-dependent lookup: an
// adapter that shares the object (callbacks::LambdaCallback, an aggregate so that designated
// initialisers work, becomes a Callback this way).
template <class T, class Base>
concept RefAdaptable = !std::derived_from<T, Base> && requires(std::shared_ptr<T> p) {
  { ref_adapt(std::move(p)) } -> std::convertible_to<std::shared_ptr<Base>>;
};

template <class Base>
class Ref {
 public:
  Ref() = default;
  Ref(std::shared_ptr<Base> p) : p_(std::move(p)) {}  // NOLINT: implicit by design
  template <class D>
    requires(std::derived_from<std::decay_t<D>, Base> && !std::is_same_v<std::decay_t<D>, Ref>)
  Ref(D&& value)  // NOLINT: implicit by design
      : p_(std::make_shared<std::decay_t<D>>(std::forward<D>(value))) {}
  template <class D>
    requires std::derived_from<D, Base>
  Ref(std::shared_ptr<D> p) : p_(std::move(p)) {}  // NOLINT
  template <class D>
    requires RefAdaptable<std::decay_t<D>, Base>
  Ref(D&& value)  // NOLINT: implicit by design
      : p_(ref_adapt(std::make_shared<std::decay_t<D>>(std::forward<D>(value)))) {}
  template <class D>
    requires RefAdaptable<D, Base>
  Ref(std::shared_ptr<D> p) : p_(ref_adapt(std::move(p))) {}  // NOLINT

  Base* operator->() const { return p_.get(); }
  Base& operator*() const { return *p_; }
  Base* get() const { return p_.get(); }
  const std::shared_ptr<Base>& ptr() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  std::shared_ptr<Base> p_;
};

}  // namespace soma
