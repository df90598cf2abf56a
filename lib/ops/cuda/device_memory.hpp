// Device memory for the CUDA path: a caching allocator and an owning buffer on top of it.
//
// cudaMalloc and cudaFree synchronise the whole device and cost tens of microseconds to
// milliseconds, so a training loop must never call them per step. DeviceAllocator keeps freed
// blocks in free lists by rounded size and hands them out again; after the first step every
// allocation the loop makes is served from the cache. It also counts what is in use and the peak,
// which meg-pretrain reports in its logs.
//
// Sizes are rounded up to a multiple of 512 bytes below 1 MiB and to a multiple of 2 MiB above,
// so that buffers of nearly the same size share blocks. Every block is aligned to 256 bytes
// (cudaMalloc's guarantee), enough for any vector load.
//
// A block is handed out again as soon as it is freed, without waiting for the device: that is
// safe because all the work of the CUDA path runs in order on one stream, so whatever uses the
// block next is queued after whatever used it before. Not thread-safe: one allocator belongs to
// one host thread driving one device and one stream.
#pragma once

#include <cstddef>
#include <map>
#include <utility>
#include <vector>

namespace meg::cuda {

class DeviceAllocator {
 public:
  DeviceAllocator() = default;
  ~DeviceAllocator();  // returns every cached block to the driver
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // A block of at least BYTES (0 is allowed and gives a valid, distinct pointer). Throws
  // InputError naming the size, the use and the peak, with what to try, when the device is out of
  // memory, after first giving the cached blocks back and retrying once.
  void* allocate(size_t bytes);
  // Returns a block from allocate() to the cache (nullptr is ignored).
  void deallocate(void* ptr);
  // Gives every cached (free) block back to the driver.
  void release_cached();

  size_t in_use() const { return in_use_; }
  size_t peak() const { return peak_; }
  size_t cached() const { return cached_; }

  static size_t round_size(size_t bytes);

 private:
  std::multimap<size_t, void*> free_;  // rounded size -> block
  std::map<void*, size_t> live_;       // block -> rounded size
  size_t in_use_ = 0, peak_ = 0, cached_ = 0;
};

// An owning array of N elements of T in device memory from an allocator (uninitialised).
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(DeviceAllocator& alloc, size_t n)
      : alloc_(&alloc), n_(n), p_(static_cast<T*>(alloc.allocate(n * sizeof(T)))) {}
  ~DeviceArray() { reset(); }
  DeviceArray(DeviceArray&& o) noexcept { *this = std::move(o); }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(alloc_, o.alloc_);
      std::swap(n_, o.n_);
      std::swap(p_, o.p_);
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  void reset() {
    if (alloc_) alloc_->deallocate(p_);
    alloc_ = nullptr;
    p_ = nullptr;
    n_ = 0;
  }

 private:
  DeviceAllocator* alloc_ = nullptr;
  size_t n_ = 0;
  T* p_ = nullptr;
};

}  // namespace meg::cuda
