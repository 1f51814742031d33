// Tensor: a shape, a dtype and a device over bytes that it either owns or views. Views share the
// owner's storage (a parameter is a view into its unit's flat buffer; a shard is a slice). Tensors
// are always contiguous, row-major; there are no strides: layers that need a permuted layout
// write it out explicitly.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "zt/core/assert.h"
#include "zt/core/device.h"
#include "zt/core/dtype.h"

namespace zt {

class Shape {
 public:
  static constexpr int kMaxDims = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);
  int ndim() const { return n_; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  int64_t numel() const;
  std::string str() const;  // "[4, 64, 128]"
  std::vector<int64_t> to_vector() const { return {d_.begin(), d_.begin() + n_}; }
  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<int64_t, kMaxDims> d_{};
  int n_ = 0;
};

class Tensor {
 public:
  Tensor() = default;

  // New owning tensors. Device memory comes from the caching allocator (core/device.h) and is
  // associated with `stream` for reuse.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu(),
                      const Stream& stream = {});
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu(),
                      const Stream& stream = {});
  // A host tensor in page-locked memory (core/device.h memory_allocate_pinned), for buffers the
  // GPU copies to and from asynchronously. Its device is the CPU; everything else is as empty().
  static Tensor empty_pinned(const Shape& shape, DType dtype);
  // Non-owning tensor over memory the caller keeps alive.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device);
  // Host values converted to `dtype` and placed on `device` (tests, small constants).
  static Tensor from_floats(const std::vector<float>& values, const Shape& shape, DType dtype,
                            Device device = Device::cpu());
  static Tensor from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype,
                             Device device = Device::cpu());

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t size(int dim) const { return shape_[dim < 0 ? dim + shape_.ndim() : dim]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

  void* data() const;
  template <typename T>
  T* data() const {
    ZT_ASSERT(dtype_of<T>() == dtype_, "tensor is {}, accessed as {}", dtype_name(dtype_),
              dtype_name(dtype_of<T>()));
    return static_cast<T*>(data());
  }

  // A view of `shape.numel()` elements starting `elem_offset` elements into this tensor.
  Tensor view(int64_t elem_offset, const Shape& shape) const;
  // A view of `shape` starting where this tensor starts and reaching past its end into the same
  // storage, bounded by the storage (parameters that lie back to back in one flat buffer, read
  // as one matrix).
  Tensor extend(const Shape& shape) const;
  // Same elements, another shape (numel must match).
  Tensor reshape(const Shape& shape) const;
  // Rows [begin, end) of dimension 0.
  Tensor slice_rows(int64_t begin, int64_t end) const;

  // Copies `src` (same numel; dtypes must match unless both are float types, in which case the
  // values are converted) into this tensor. Cross-device copies go through memory_copy.
  void copy_from(const Tensor& src, const Stream& stream = {});
  Tensor to(Device device, const Stream& stream = {}) const;
  Tensor clone(const Stream& stream = {}) const;
  void zero(const Stream& stream = {});
  // Marks the storage as used by work queued on `stream` (memory_record_stream in device.h): once
  // the last reference goes, its device block is reused only after that work completed. Call it
  // when this tensor is read or written on a stream other than the one it was allocated on. A
  // no-op on the CPU and for storage the tensor does not own.
  void record_stream(const Stream& stream) const;

  // Values as host doubles/floats, converted from any dtype (tests, logging, small scalars).
  std::vector<double> to_doubles() const;
  std::vector<float> to_floats() const;
  double item() const;  // numel must be 1

 private:
  struct Storage;
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
};

// Converts `n` elements between host buffers of float dtypes (f32, f64, bf16, f16).
void convert_host(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n);

}  // namespace zt
