// checkpoint/safetensors.h: a file written here is the format's bytes (checked by hand against
// the format's definition, not by our reader), reads back exactly, and every way a header can be
// damaged is one error naming the file, never a crash or a read outside the file.
#include "zt/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/test_util.h"

namespace zt::ckpt {
namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string with_header(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

TEST(Safetensors, WritesTheFormatsBytesAndReadsThemBack) {
  testing::TempDir dir;
  const std::vector<float> a = {1.5f, -2.0f, 3.25f};
  const std::vector<float> b = {};
  const std::string path = dir.file("t.safetensors");
  auto w = safetensors_write(path, {{.name = "a", .dtype = DType::f32, .shape = {3}, .data = a.data(), .produce = {}},
                                    {.name = "empty", .dtype = DType::f32, .shape = {0}, .data = b.data(), .produce = {}}},
                             {{"format", "pt"}});
  ASSERT_TRUE(w.is_ok()) << w.status().message();
  const std::string bytes = read_bytes(path);
  EXPECT_EQ(static_cast<int64_t>(bytes.size()), w->bytes);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);  // the data starts aligned
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["a"]["dtype"], "F32");
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json({0, 12}));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  float back[3];
  std::memcpy(back, bytes.data() + 8 + n, 12);
  EXPECT_EQ(std::vector<float>(back, back + 3), a);

  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  float two[2];
  ASSERT_TRUE(f->read("a", 1, 2, two).is_ok());
  EXPECT_EQ(two[0], -2.0f);
  EXPECT_EQ(two[1], 3.25f);
  EXPECT_FALSE(f->read("a", 2, 2, two).is_ok());  // past the tensor's end
  EXPECT_FALSE(f->find("missing").is_ok());
  EXPECT_EQ(f->tensors().at("empty").numel, 0);
  auto h = file_xxh3(path);
  ASSERT_TRUE(h.is_ok());
  EXPECT_EQ(*h, w->xxh3);
}

TEST(Safetensors, DamagedHeadersAreOneErrorNamingTheFile) {
  testing::TempDir dir;
  const std::string data(12, '\0');
  const std::string ok = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "[";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"short length", std::string("\x05\x00", 2)},
      {"huge length", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + ok},
      {"length past the end", with_header(ok, data).substr(0, 20)},
      {"not json", with_header("{nope", data)},
      {"not an object", with_header("[1,2]", data)},
      {"deep nesting", with_header(deep, data)},
      {"unknown dtype", with_header(R"({"a":{"dtype":"Q8","shape":[3],"data_offsets":[0,12]}})", data)},
      {"offsets past the data", with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", data)},
      {"offsets reversed", with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[12,0]}})", data)},
      {"size mismatch", with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", data)},
      {"negative shape", with_header(R"({"a":{"dtype":"F32","shape":[-3],"data_offsets":[0,12]}})", data)},
      {"huge shape", with_header(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,12]}})", data)},
      {"missing field", with_header(R"({"a":{"dtype":"F32","shape":[3]}})", data)},
      {"string offsets", with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":["0","12"]}})", data)},
      {"bad metadata", with_header(R"({"__metadata__":{"x":1}})", data)},
  };
  for (const auto& [name, bytes] : cases) {
    const std::string path = dir.file("bad.safetensors");
    write_bytes(path, bytes);
    auto f = SafetensorsFile::open(path);
    ASSERT_FALSE(f.is_ok()) << name;
    EXPECT_NE(f.status().message().find(path), std::string::npos)
        << name << ": " << f.status().message();
  }
  write_bytes(dir.file("good.safetensors"), with_header(ok, data));
  EXPECT_TRUE(SafetensorsFile::open(dir.file("good.safetensors")).is_ok());
}

}  // namespace
}  // namespace zt::ckpt
