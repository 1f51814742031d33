// The wire format of the rendezvous store (tcp_store.h), shared by client and server. A frame is a
// little-endian u32 payload length and the payload. A request payload is: u8 op, str token, then
// the op's fields; a reply payload is: u8 code, then the op's results. str = u32 length + bytes,
// i64 = 8 bytes little-endian. kHello's reply carries kStoreMagic so a client that dialled some
// other service on the port says so instead of misreading it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace zt::store_wire {

inline constexpr std::string_view kStoreMagic = "zt-store-1";
// Larger frames are refused: store values are small (addresses, ids), so a huge length means the
// peer is not speaking this protocol.
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;

enum class Op : uint8_t {
  kHello = 1,   // -> str magic
  kSet = 2,     // str key, str value -> ()
  kGet = 3,     // str key -> str value (waits)
  kAdd = 4,     // str key, i64 delta -> i64 new value
  kWait = 5,    // u32 n, n x str key -> () (waits)
  kCheck = 6,   // u32 n, n x str key -> u8 all present
  kDelete = 7,  // str key -> u8 existed
};

enum class Reply : uint8_t { kOk = 0, kBadToken = 1, kBadRequest = 2 };

class Writer {
 public:
  void u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void i64(int64_t v) {
    auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    buf_.append(s);
  }
  // The payload with its length prefix.
  std::string frame() const {
    Writer w;
    w.u32(static_cast<uint32_t>(buf_.size()));
    return w.buf_ + buf_;
  }

 private:
  std::string buf_;
};

// Reads fields in order; a short or malformed payload sets ok() to false and yields zeros.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == data_.size(); }
  uint8_t u8() {
    if (!need(1)) return 0;
    return static_cast<uint8_t>(data_[pos_++]);
  }
  uint32_t u32() {
    if (!need(4)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
      v |= static_cast<uint32_t>(static_cast<uint8_t>(data_[pos_++])) << (8 * i);
    return v;
  }
  int64_t i64() {
    if (!need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_++])) << (8 * i);
    return static_cast<int64_t>(v);
  }
  std::string_view str() {
    uint32_t n = u32();
    if (!need(n)) return {};
    std::string_view s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  bool need(size_t n) {
    if (!ok_ || data_.size() - pos_ < n) {
      ok_ = false;
      return false;
    }
    return true;
  }
  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// Decodes the u32 length prefix at the start of `buf` (which holds at least 4 bytes).
inline uint32_t frame_length(std::string_view buf) {
  Reader r(buf.substr(0, 4));
  return r.u32();
}

}  // namespace zt::store_wire
