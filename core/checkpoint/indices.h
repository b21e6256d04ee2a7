// Typed indices into a Checkpoint's tables, after heaptrack's util/indices.h: a node, a tensor, a
// storage and an object index are different types, so passing one where another is meant, or
// looking one up in another's table, does not compile. The default value is the invalid one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

namespace ckpt {

template <class Tag> class Index {
public:
    constexpr Index() = default;
    constexpr explicit Index(std::uint32_t value) : value_(value) {}

    [[nodiscard]] constexpr bool valid() const { return value_ != kInvalid; }
    [[nodiscard]] constexpr std::uint32_t value() const { return value_; }

    friend constexpr bool operator==(Index a, Index b) { return a.value_ == b.value_; }
    friend constexpr bool operator<(Index a, Index b) { return a.value_ < b.value_; }

private:
    static constexpr std::uint32_t kInvalid = std::numeric_limits<std::uint32_t>::max();
    std::uint32_t value_ = kInvalid;
};

using NodeIndex = Index<struct NodeTag>;
using TensorIndex = Index<struct TensorTag>;
using StorageIndex = Index<struct StorageTag>;
using ObjectIndex = Index<struct ObjectTag>;

// A std::vector that is looked up with its own index type only.
template <class Id, class T> class IndexedVector {
public:
    T& operator[](Id i) { return items_[i.value()]; }
    const T& operator[](Id i) const { return items_[i.value()]; }
    T& at(Id i) { return items_.at(i.value()); }
    [[nodiscard]] const T& at(Id i) const { return items_.at(i.value()); }
    [[nodiscard]] bool contains(Id i) const { return i.valid() && i.value() < items_.size(); }
    // The index the next push_back gets.
    [[nodiscard]] Id nextIndex() const { return Id{static_cast<std::uint32_t>(items_.size())}; }

    [[nodiscard]] std::size_t size() const { return items_.size(); }
    [[nodiscard]] bool empty() const { return items_.empty(); }
    void reserve(std::size_t n) { items_.reserve(n); }
    void clear() { items_.clear(); }
    void push_back(T item) { items_.push_back(std::move(item)); }
    T& back() { return items_.back(); }
    [[nodiscard]] const T& back() const { return items_.back(); }
    auto begin() { return items_.begin(); }
    auto end() { return items_.end(); }
    [[nodiscard]] auto begin() const { return items_.begin(); }
    [[nodiscard]] auto end() const { return items_.end(); }

private:
    std::vector<T> items_;
};

}  // namespace ckpt

template <class Tag> struct std::hash<ckpt::Index<Tag>> {
    std::size_t operator()(ckpt::Index<Tag> i) const noexcept { return std::hash<std::uint32_t>{}(i.value()); }
};
