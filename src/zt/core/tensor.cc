#include "zt/core/tensor.h"

#include <cstring>

#if __has_include("zt/build_config.h")
#include "zt/build_config.h"
#endif

namespace zt {

Shape::Shape(std::initializer_list<int64_t> dims) {
  ZT_ASSERT(dims.size() <= kMaxDims, "too many dims: {}", dims.size());
  for (int64_t d : dims) d_[n_++] = d;
}

Shape::Shape(const std::vector<int64_t>& dims) {
  ZT_ASSERT(dims.size() <= kMaxDims, "too many dims: {}", dims.size());
  for (int64_t d : dims) d_[n_++] = d;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < n_; ++i) n *= d_[i];
  return n;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < n_; ++i) s += fmt::format("{}{}", i ? ", " : "", d_[i]);
  return s + "]";
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.n_ != b.n_) return false;
  for (int i = 0; i < a.n_; ++i) {
    if (a.d_[i] != b.d_[i]) return false;
  }
  return true;
}

struct Tensor::Storage {
  void* ptr = nullptr;
  size_t nbytes = 0;
  Device device;
  bool owned = false;
  bool pinned = false;  // from memory_allocate_pinned
  ~Storage() {
    if (!owned) return;
    if (pinned) {
      memory_free_pinned(ptr, nbytes);
    } else {
      memory_free(device, ptr, nbytes);
    }
  }
};

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, const Stream& stream) {
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->nbytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  t.storage_->device = device;
  t.storage_->ptr = memory_allocate(device, t.storage_->nbytes, stream);
  t.storage_->owned = true;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::empty_pinned(const Shape& shape, DType dtype) {
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->nbytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  t.storage_->device = Device::cpu();
  t.storage_->ptr = memory_allocate_pinned(t.storage_->nbytes);
  t.storage_->owned = true;
  t.storage_->pinned = true;
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, const Stream& stream) {
  Tensor t = empty(shape, dtype, device, stream);
  t.zero(stream);
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->ptr = data;
  t.storage_->nbytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  t.storage_->device = device;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::from_floats(const std::vector<float>& values, const Shape& shape, DType dtype,
                           Device device) {
  ZT_ASSERT(static_cast<int64_t>(values.size()) == shape.numel(), "{} values for shape {}",
            values.size(), shape.str());
  Tensor host = empty(shape, dtype, Device::cpu());
  convert_host(host.data(), dtype, values.data(), DType::f32, shape.numel());
  return device.is_cpu() ? host : host.to(device);
}

Tensor Tensor::from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype,
                            Device device) {
  ZT_ASSERT(static_cast<int64_t>(values.size()) == shape.numel(), "{} values for shape {}",
            values.size(), shape.str());
  Tensor host = empty(shape, dtype, Device::cpu());
  convert_host(host.data(), dtype, values.data(), DType::f64, shape.numel());
  return device.is_cpu() ? host : host.to(device);
}

void* Tensor::data() const {
  ZT_ASSERT(storage_ != nullptr, "data() of an undefined tensor");
  return static_cast<char*>(storage_->ptr) + offset_bytes_;
}

Tensor Tensor::view(int64_t elem_offset, const Shape& shape) const {
  ZT_ASSERT(defined(), "view of an undefined tensor");
  ZT_ASSERT(elem_offset >= 0 && elem_offset + shape.numel() <= numel(),
            "view [{}, +{}) out of range of tensor with {} elements", elem_offset, shape.numel(),
            numel());
  Tensor t = *this;
  t.offset_bytes_ += static_cast<size_t>(elem_offset) * dtype_size(dtype_);
  t.shape_ = shape;
  return t;
}

Tensor Tensor::extend(const Shape& shape) const {
  ZT_ASSERT(defined(), "extend of an undefined tensor");
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype_);
  ZT_ASSERT(offset_bytes_ + bytes <= storage_->nbytes,
            "extend to {} ({} bytes) from byte {} passes the end of its storage ({} bytes)",
            shape.str(), bytes, offset_bytes_, storage_->nbytes);
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  ZT_ASSERT(shape.numel() == numel(), "reshape {} -> {}", shape_.str(), shape.str());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  ZT_ASSERT(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "slice_rows");
  Shape s = shape_;
  s[0] = end - begin;
  return view(begin * (numel() / std::max<int64_t>(shape_[0], 1)), s);
}

namespace {

double load_as_double(const void* p, DType d, int64_t i) {
  switch (d) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::bf16: return bf16_to_float(static_cast<const bf16_t*>(p)[i]);
    case DType::f16: return f16_to_float(static_cast<const f16_t*>(p)[i]);
    case DType::i32: return static_cast<const int32_t*>(p)[i];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::u16: return static_cast<const uint16_t*>(p)[i];
    case DType::u8: return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

void store_from_double(void* p, DType d, int64_t i, double v) {
  switch (d) {
    case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::bf16: static_cast<bf16_t*>(p)[i] = float_to_bf16(static_cast<float>(v)); break;
    case DType::f16: static_cast<f16_t*>(p)[i] = float_to_f16(static_cast<float>(v)); break;
    case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::i64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::u16: static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v); break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
  }
}

}  // namespace

void convert_host(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n) {
  if (n == 0) return;  // an empty tensor may have no storage: nothing to read or write
  if (dst_dtype == src_dtype) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(dst_dtype));
    return;
  }
  if (dst_dtype == DType::f32 && src_dtype == DType::bf16) {
    auto* d = static_cast<float*>(dst);
    auto* s = static_cast<const bf16_t*>(src);
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_float(s[i]);
    return;
  }
  if (dst_dtype == DType::bf16 && src_dtype == DType::f32) {
    auto* d = static_cast<bf16_t*>(dst);
    auto* s = static_cast<const float*>(src);
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(s[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_from_double(dst, dst_dtype, i, load_as_double(src, src_dtype, i));
}

void Tensor::copy_from(const Tensor& src, const Stream& stream) {
  ZT_ASSERT(src.numel() == numel(), "copy_from: {} elements into {}", src.numel(), numel());
  if (src.dtype() == dtype_) {
    memory_copy(data(), device_, src.data(), src.device(), nbytes(), stream);
    return;
  }
  ZT_ASSERT(dtype_is_float(src.dtype()) && dtype_is_float(dtype_),
            "copy_from converts only between float dtypes ({} -> {})", dtype_name(src.dtype()),
            dtype_name(dtype_));
  // Conversion through the host: for tests and one-off set-up, never inside a training step
  // (device code uses kernels::cast).
  Tensor s = src.device().is_cpu() ? src : src.to(Device::cpu(), stream);
  if (device_.is_cpu()) {
    convert_host(data(), dtype_, s.data(), s.dtype(), numel());
  } else {
    Tensor h = Tensor::empty(shape_, dtype_, Device::cpu());
    convert_host(h.data(), dtype_, s.data(), s.dtype(), numel());
    memory_copy(data(), device_, h.data(), Device::cpu(), nbytes(), stream);
    stream.synchronize();
  }
}

Tensor Tensor::to(Device device, const Stream& stream) const {
  Tensor t = empty(shape_, dtype_, device, stream);
  memory_copy(t.data(), device, data(), device_, nbytes(), stream);
  return t;
}

Tensor Tensor::clone(const Stream& stream) const { return to(device_, stream); }

void Tensor::zero(const Stream& stream) { memory_zero(data(), device_, nbytes(), stream); }

void Tensor::record_stream(const Stream& stream) const {
  if (storage_ == nullptr || !storage_->owned || !device_.is_cuda()) return;
  memory_record_stream(device_, storage_->ptr, stream);
}

std::vector<double> Tensor::to_doubles() const {
  Tensor h = device_.is_cpu() ? *this : to(Device::cpu());
  std::vector<double> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[i] = load_as_double(h.data(), dtype_, i);
  return out;
}

std::vector<float> Tensor::to_floats() const {
  // One pass per dtype, no double detour: generation reads (B, vocab) logits every step.
  Tensor h = device_.is_cpu() ? *this : to(Device::cpu());
  std::vector<float> out(static_cast<size_t>(numel()));
  const int64_t n = numel();
  if (n == 0) return out;
  switch (dtype_) {
    case DType::f32:
      std::memcpy(out.data(), h.data(), static_cast<size_t>(n) * sizeof(float));
      break;
    case DType::bf16: {
      const auto* p = static_cast<const bf16_t*>(h.data());
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(p[i]);
      break;
    }
    default:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(load_as_double(h.data(), dtype_, i));
  }
  return out;
}

double Tensor::item() const {
  ZT_ASSERT(numel() == 1, "item() of a tensor with {} elements", numel());
  return to_doubles()[0];
}

}  // namespace zt
