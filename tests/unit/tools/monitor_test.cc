// TensorBoard and CSV monitors (tools/monitor.h): the event file read back by an independent
// reader written here (TFRecord framing, a bitwise CRC-32C as the oracle for both masked CRCs,
// the Event and Summary protobuf fields) holds the values written; the CSV files have
// DeepSpeed's layout.
#include "zt/tools/monitor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zt::tools {
namespace {

uint32_t crc32c_bitwise(const unsigned char* p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

uint64_t read_varint(const std::string& s, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = static_cast<unsigned char>(s[i++]);
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) return v;
  }
}

struct Scalar {
  int64_t step = -1;
  std::string tag;
  float value = 0;
  std::string file_version;
};

// Event{1: wall_time double, 2: step varint, 3: file_version, 5: Summary{1: Value{1: tag,
// 2: simple_value float}}}.
Scalar parse_event(const std::string& e) {
  Scalar out;
  size_t i = 0;
  while (i < e.size()) {
    const uint64_t k = read_varint(e, i);
    const int field = static_cast<int>(k >> 3), wire = static_cast<int>(k & 7);
    if (wire == 1) {
      i += 8;
    } else if (wire == 0) {
      const uint64_t v = read_varint(e, i);
      if (field == 2) out.step = static_cast<int64_t>(v);
    } else if (wire == 2) {
      const size_t n = read_varint(e, i);
      const std::string body = e.substr(i, n);
      i += n;
      if (field == 3) out.file_version = body;
      if (field == 5) {  // Summary: one Value
        size_t j = 0;
        EXPECT_EQ(read_varint(body, j), uint64_t{1 << 3 | 2});
        const size_t vn = read_varint(body, j);
        const std::string v = body.substr(j, vn);
        size_t q = 0;
        while (q < v.size()) {
          const uint64_t vk = read_varint(v, q);
          if ((vk >> 3) == 1) {
            const size_t tn = read_varint(v, q);
            out.tag = v.substr(q, tn);
            q += tn;
          } else {
            EXPECT_EQ(vk, uint64_t{2 << 3 | 5});
            std::memcpy(&out.value, v.data() + q, 4);
            q += 4;
          }
        }
      }
    } else {
      ADD_FAILURE() << "unexpected wire type " << wire;
      break;
    }
  }
  return out;
}

std::vector<Scalar> read_event_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  std::vector<Scalar> out;
  size_t i = 0;
  while (i < s.size()) {
    uint64_t len;
    uint32_t lcrc, dcrc;
    std::memcpy(&len, s.data() + i, 8);
    std::memcpy(&lcrc, s.data() + i + 8, 4);
    EXPECT_EQ(lcrc, tfrecord_mask(crc32c_bitwise(reinterpret_cast<const unsigned char*>(s.data() + i), 8)));
    const std::string data = s.substr(i + 12, len);
    std::memcpy(&dcrc, s.data() + i + 12 + len, 4);
    EXPECT_EQ(dcrc, tfrecord_mask(crc32c_bitwise(reinterpret_cast<const unsigned char*>(data.data()), data.size())));
    out.push_back(parse_event(data));
    i += 12 + len + 4;
  }
  EXPECT_EQ(i, s.size());
  return out;
}

TEST(Monitor, Crc32cEqualsTheBitwiseDefinition) {
  std::string s;
  for (int i = 0; i < 1000; ++i) s.push_back(static_cast<char>(i * 37));
  for (size_t n : {0, 1, 7, 8, 9, 100, 1000}) {
    EXPECT_EQ(crc32c(s.data(), n), crc32c_bitwise(reinterpret_cast<const unsigned char*>(s.data()), n));
  }
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the standard check value
}

TEST(Monitor, TensorBoardEventsReadBackWithTheirValues) {
  const std::string dir = ::testing::TempDir() + "zt_tb_test";
  std::filesystem::remove_all(dir);
  nlohmann::json blocks = {{"tensorboard", {{"enabled", true}, {"output_path", dir}, {"job_name", "job"}}},
                           {"csv_monitor", {{"enabled", true}, {"output_path", dir + "/csv"}, {"job_name", "job"}}}};
  auto mons = monitors_from_config(blocks);
  ASSERT_TRUE(mons.is_ok()) << mons.status().message();
  ASSERT_EQ(mons->size(), 2u);
  for (auto& m : *mons) {
    ASSERT_TRUE(m->write({{"Train/Samples/train_loss", 5.25, 8}, {"Train/Samples/lr", 1e-3, 8}}).is_ok());
    ASSERT_TRUE(m->write({{"Train/Samples/train_loss", 4.5, 16}}).is_ok());
    ASSERT_TRUE(m->flush().is_ok());
  }
  std::string events;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/job")) events = e.path().string();
  ASSERT_NE(events.find("events.out.tfevents."), std::string::npos);
  const auto got = read_event_file(events);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].file_version, "brain.Event:2");
  EXPECT_EQ(got[1].tag, "Train/Samples/train_loss");
  EXPECT_EQ(got[1].step, 8);
  EXPECT_FLOAT_EQ(got[1].value, 5.25f);
  EXPECT_EQ(got[2].tag, "Train/Samples/lr");
  EXPECT_FLOAT_EQ(got[2].value, 1e-3f);
  EXPECT_EQ(got[3].step, 16);
  EXPECT_FLOAT_EQ(got[3].value, 4.5f);
  std::ifstream csv(dir + "/csv/job/Train_Samples_train_loss.csv");
  std::stringstream ss;
  ss << csv.rdbuf();
  EXPECT_EQ(ss.str(), "step,train_loss\n8,5.25\n16,4.5\n");
  std::filesystem::remove_all(dir);
}

TEST(Monitor, NoneWhenDisabled) {
  auto mons = monitors_from_config({{"tensorboard", {{"enabled", false}}}});
  ASSERT_TRUE(mons.is_ok());
  EXPECT_TRUE(mons->empty());
}

}  // namespace
}  // namespace zt::tools
