// The two containers a pickle Value holds, 16 bytes each instead of std::string's 32 and
// std::vector's 24. A 40 000-tensor state dict makes about 400 000 values, and most of them hold
// neither text nor items, so every byte of an empty container is paid 400 000 times (issue 12:
// inspect of bench/'s 40k-key file must stay within 64 MB). Both keep short contents inline: a
// 1- or 2-dim tensor's size and stride tuples, and keys of up to 15 bytes, need no allocation.
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::pickle {

// A vector of trivially copyable values (ValueIds, dims) with two inline slots and 32-bit size and capacity. Pointers
// into it are invalidated by growth, as with std::vector.
template <typename T> class SmallVector {
public:
    using value_type = T;
    using size_type = std::size_t;
    using difference_type = std::ptrdiff_t;
    using reference = T&;
    using const_reference = const T&;
    using pointer = T*;
    using const_pointer = const T*;
    using iterator = T*;
    using const_iterator = const T*;
    using reverse_iterator = std::reverse_iterator<iterator>;
    using const_reverse_iterator = std::reverse_iterator<const_iterator>;

    SmallVector() noexcept {}  // NOLINT(modernize-use-equals-default): the union needs no init
    SmallVector(std::initializer_list<T> init) { assign(init.begin(), init.end()); }
    template <std::input_iterator It> SmallVector(It first, It last) { assign(first, last); }
    // From a std::vector, as every Arena constructor and transform pass builds item lists.
    SmallVector(const std::vector<T>& v) { assign(v.begin(), v.end()); }
    // Callers hand over vectors they are done with (`tuple(std::move(items))`); the contents are
    // copied all the same, since a std::vector's buffer cannot be adopted.
    SmallVector(std::vector<T>&& v) { assign(v.begin(), v.end()); }
    SmallVector(const SmallVector& o) { assign(o.begin(), o.end()); }
    SmallVector(SmallVector&& o) noexcept { steal(o); }
    SmallVector& operator=(const SmallVector& o)
    {
        if (this != &o) {
            assign(o.begin(), o.end());
        }
        return *this;
    }
    SmallVector& operator=(SmallVector&& o) noexcept
    {
        if (this != &o) {
            release();
            steal(o);
        }
        return *this;
    }
    SmallVector& operator=(std::initializer_list<T> init)
    {
        assign(init.begin(), init.end());
        return *this;
    }
    SmallVector& operator=(const std::vector<T>& v)
    {
        assign(v.begin(), v.end());
        return *this;
    }
    ~SmallVector() { release(); }

    template <std::input_iterator It> void assign(It first, It last)
    {
        const auto n = static_cast<std::size_t>(std::distance(first, last));
        size_ = 0;
        reserve(n);
        std::copy(first, last, data());
        size_ = static_cast<std::uint32_t>(n);
    }

    void assign(std::size_t n, T value)
    {
        size_ = 0;
        reserve(n);
        std::fill_n(data(), n, value);
        size_ = static_cast<std::uint32_t>(n);
    }

    [[nodiscard]] std::size_t size() const { return size_; }
    [[nodiscard]] bool empty() const { return size_ == 0; }
    [[nodiscard]] std::size_t capacity() const { return cap_; }
    [[nodiscard]] T* data() { return onHeap() ? u_.heap : u_.inline_; }
    [[nodiscard]] const T* data() const { return onHeap() ? u_.heap : u_.inline_; }
    T* begin() { return data(); }
    T* end() { return data() + size_; }
    [[nodiscard]] const T* begin() const { return data(); }
    [[nodiscard]] const T* end() const { return data() + size_; }
    [[nodiscard]] const T* cbegin() const { return data(); }
    [[nodiscard]] const T* cend() const { return data() + size_; }
    reverse_iterator rbegin() { return reverse_iterator(end()); }
    reverse_iterator rend() { return reverse_iterator(begin()); }
    [[nodiscard]] const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
    [[nodiscard]] const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }
    T& operator[](std::size_t i) { return data()[i]; }
    const T& operator[](std::size_t i) const { return data()[i]; }
    T& front() { return data()[0]; }
    T& back() { return data()[size_ - 1]; }
    [[nodiscard]] const T& front() const { return data()[0]; }
    [[nodiscard]] const T& back() const { return data()[size_ - 1]; }
    operator std::span<const T>() const { return {data(), size_}; }
    [[nodiscard]] std::vector<T> vec() const { return {begin(), end()}; }
    operator std::vector<T>() const { return vec(); }

    void reserve(std::size_t n)
    {
        if (n <= cap_) {
            return;
        }
        if (n > UINT32_MAX) {
            throw std::bad_alloc();
        }
        T* fresh = static_cast<T*>(::operator new(n * sizeof(T)));
        std::copy(begin(), end(), fresh);
        const std::uint32_t kept = size_;
        release();
        size_ = kept;
        u_.heap = fresh;
        cap_ = static_cast<std::uint32_t>(n);
    }
    void push_back(T v)
    {
        if (size_ == cap_) {
            reserve(std::size_t{cap_} * 2);
        }
        data()[size_++] = v;
    }
    void pop_back() { --size_; }
    void clear() { size_ = 0; }
    void resize(std::size_t n, T fill = T{})
    {
        reserve(n);
        std::fill(data() + std::min<std::size_t>(n, size_), data() + n, fill);
        size_ = static_cast<std::uint32_t>(n);
    }
    template <std::input_iterator It> T* insert(const T* pos, It first, It last)
    {
        const auto at = static_cast<std::size_t>(pos - begin());
        const auto n = static_cast<std::size_t>(std::distance(first, last));
        if (size_ + n > cap_) {
            reserve(std::max<std::size_t>(size_ + n, std::size_t{cap_} * 2));
        }
        std::copy_backward(begin() + at, end(), end() + n);
        std::copy(first, last, begin() + at);
        size_ += static_cast<std::uint32_t>(n);
        return begin() + at;
    }
    T* insert(const T* pos, T v) { return insert(pos, &v, &v + 1); }
    T* erase(const T* first, const T* last)
    {
        const auto at = static_cast<std::size_t>(first - begin());
        const auto n = static_cast<std::size_t>(last - first);
        std::copy(begin() + at + n, end(), begin() + at);
        size_ -= static_cast<std::uint32_t>(n);
        return begin() + at;
    }
    T* erase(const T* pos) { return erase(pos, pos + 1); }

    friend bool operator==(const SmallVector& a, const SmallVector& b)
    {
        return std::equal(a.begin(), a.end(), b.begin(), b.end());
    }
    friend bool operator==(const SmallVector& a, const std::vector<T>& b)
    {
        return std::equal(a.begin(), a.end(), b.begin(), b.end());
    }

private:
    static constexpr std::uint32_t kInline = 2;
    [[nodiscard]] bool onHeap() const { return cap_ > kInline; }
    void release()
    {
        if (onHeap()) {
            ::operator delete(u_.heap);
        }
        cap_ = kInline;
        size_ = 0;
    }
    void steal(SmallVector& o) noexcept
    {
        u_ = o.u_;
        size_ = o.size_;
        cap_ = o.cap_;
        o.cap_ = kInline;
        o.size_ = 0;
    }

    union U {
        T inline_[kInline];
        T* heap;
        // Zeroed, so moving an empty inline vector copies defined bytes (GCC's -Wmaybe-uninitialized).
        U() : inline_{} {}
    } u_;
    std::uint32_t size_ = 0;
    std::uint32_t cap_ = kInline;
};

// A byte string of up to 15 bytes inline, longer ones on the heap at their exact size. Contents
// are replaced, never grown in place (a pickle's strings are made once); `+=` reallocates.
class Text {
public:
    Text() noexcept { setInline(0); }
    Text(std::string_view s) { set(s); }
    Text(const std::string& s) { set(s); }
    Text(std::string&& s) { set(s); }  // copied, as above
    Text(const char* s) { set(s); }
    Text(const Text& o) { set(o.view()); }
    Text(Text&& o) noexcept { steal(o); }
    Text& operator=(const Text& o)
    {
        if (this != &o) {
            Text copy(o);
            *this = std::move(copy);
        }
        return *this;
    }
    Text& operator=(Text&& o) noexcept
    {
        if (this != &o) {
            release();
            steal(o);
        }
        return *this;
    }
    Text& operator=(std::string_view s)
    {
        Text t(s);
        return *this = std::move(t);
    }
    Text& operator=(const std::string& s) { return *this = std::string_view(s); }
    Text& operator=(const char* s) { return *this = std::string_view(s); }
    Text& operator+=(std::string_view s)
    {
        std::string joined(view());
        joined += s;
        return *this = std::string_view(joined);
    }
    ~Text() { release(); }

    [[nodiscard]] std::string_view view() const { return {data(), size()}; }
    operator std::string_view() const { return view(); }
    [[nodiscard]] std::string str() const { return std::string(view()); }
    operator std::string() const { return str(); }
    [[nodiscard]] const char* data() const { return onHeap() ? heapPtr() : raw_; }
    [[nodiscard]] const char* c_str() const { return data(); }  // always NUL-terminated
    [[nodiscard]] std::size_t size() const
    {
        return onHeap() ? heapSize() : kInline - static_cast<std::size_t>(raw_[kInline]);
    }
    [[nodiscard]] bool empty() const { return size() == 0; }
    [[nodiscard]] const char* begin() const { return data(); }
    [[nodiscard]] const char* end() const { return data() + size(); }
    char operator[](std::size_t i) const { return data()[i]; }
    // std::string's read-only searches, so call sites read as they did.
    static constexpr std::size_t npos = std::string::npos;
    [[nodiscard]] std::size_t find(std::string_view s, std::size_t pos = 0) const { return view().find(s, pos); }
    [[nodiscard]] std::size_t find(char c, std::size_t pos = 0) const { return view().find(c, pos); }
    [[nodiscard]] std::size_t rfind(std::string_view s, std::size_t pos = npos) const { return view().rfind(s, pos); }
    [[nodiscard]] std::size_t rfind(char c, std::size_t pos = npos) const { return view().rfind(c, pos); }
    [[nodiscard]] std::string substr(std::size_t pos, std::size_t n = npos) const
    {
        return std::string(view().substr(pos, n));
    }
    [[nodiscard]] bool starts_with(std::string_view s) const { return view().starts_with(s); }
    [[nodiscard]] bool ends_with(std::string_view s) const { return view().ends_with(s); }

    friend bool operator==(const Text& a, const Text& b) { return a.view() == b.view(); }
    friend bool operator==(const Text& a, std::string_view b) { return a.view() == b; }
    friend bool operator==(const Text& a, const char* b) { return a.view() == b; }
    friend bool operator==(const Text& a, const std::string& b) { return a.view() == b; }
    friend auto operator<=>(const Text& a, const Text& b) { return a.view() <=> b.view(); }
    friend auto operator<=>(const Text& a, std::string_view b) { return a.view() <=> b; }
    friend auto operator<=>(const Text& a, const std::string& b) { return a.view() <=> std::string_view(b); }
    friend auto operator<=>(const Text& a, const char* b) { return a.view() <=> std::string_view(b); }
    friend std::string operator+(const Text& a, std::string_view b) { return a.str().append(b); }
    friend std::string operator+(const Text& a, const char* b) { return a.str().append(b); }
    friend std::string operator+(const Text& a, const std::string& b) { return a.str().append(b); }
    friend std::string operator+(std::string_view a, const Text& b) { return std::string(a).append(b.view()); }
    friend std::string operator+(const char* a, const Text& b) { return std::string(a).append(b.view()); }
    friend std::string operator+(const std::string& a, const Text& b) { return std::string(a).append(b.view()); }

private:
    // 16 raw bytes. Inline: up to 15 bytes, then byte 15 holds 15 - size, so a full 15-byte
    // string ends in the NUL it needs. Heap: the pointer in bytes 0-7, the size in bytes 8-14,
    // and byte 15 holds kHeap. Read and written with memcpy: no union punning.
    static constexpr std::size_t kInline = 15;
    static constexpr char kHeap = static_cast<char>(0x80);
    [[nodiscard]] bool onHeap() const { return raw_[kInline] == kHeap; }
    [[nodiscard]] char* heapPtr() const
    {
        char* p = nullptr;
        std::memcpy(&p, raw_, sizeof p);
        return p;
    }
    [[nodiscard]] std::size_t heapSize() const
    {
        std::uint64_t n = 0;
        std::memcpy(&n, raw_ + 8, 7);  // little-endian, as every platform ckptscope builds for
        return n;
    }
    void steal(Text& o) noexcept
    {
        std::memcpy(raw_, o.raw_, sizeof raw_);
        o.setInline(0);
    }
    void setInline(std::size_t n)
    {
        raw_[n] = 0;
        raw_[kInline] = static_cast<char>(kInline - n);
    }
    void set(std::string_view s)
    {
        if (s.size() <= kInline) {
            std::memcpy(raw_, s.data(), s.size());
            setInline(s.size());
            return;
        }
        auto* p = static_cast<char*>(::operator new(s.size() + 1));
        std::memcpy(p, s.data(), s.size());
        p[s.size()] = 0;
        const std::uint64_t n = s.size();
        std::memcpy(raw_, &p, sizeof p);
        std::memcpy(raw_ + 8, &n, 7);
        raw_[kInline] = kHeap;
    }
    void release()
    {
        if (onHeap()) {
            ::operator delete(heapPtr());
            setInline(0);
        }
    }

    char raw_[kInline + 1]{};
};

}  // namespace ckpt::pickle
