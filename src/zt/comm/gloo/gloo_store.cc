// GlooStore (gloo_store.h): prefixes keys, forwards to the TCP store, turns failures into
// StoreFailure exceptions for Gloo to propagate.
#include "zt/comm/gloo/gloo_store.h"

#include <charconv>

namespace zt {
namespace {

// The rank a Gloo rendezvous key belongs to ("3" or "rank_3"), or -1.
int rank_of_key(std::string_view key) {
  if (key.starts_with("rank_")) key.remove_prefix(5);
  int r = -1;
  auto res = std::from_chars(key.data(), key.data() + key.size(), r);
  if (res.ec != std::errc() || res.ptr != key.data() + key.size()) return -1;
  return r;
}

}  // namespace

void GlooStore::raise(const Status& s, const std::vector<std::string>& keys,
                      std::chrono::milliseconds timeout) const {
  if (s.is_ok()) return;
  if (s.code() == StatusCode::kTimeout && keys.size() == 1 && rank_of_key(keys[0]) >= 0) {
    throw StoreFailure(
        Status(StatusCode::kTimeout,
               fmt::format("rank {} never published its address (waited {} s); check that it was "
                           "started, that it reached communicator creation, and its log",
                           rank_of_key(keys[0]), static_cast<double>(timeout.count()) / 1000.0)));
  }
  throw StoreFailure(s);
}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  raise(store_->set(prefix_ + key, std::string(data.begin(), data.end())), {key},
        store_->timeout());
}

std::vector<char> GlooStore::get(const std::string& key) {
  Result<std::string> v = store_->get(prefix_ + key);
  raise(v.status(), {key}, store_->timeout());
  return std::vector<char>(v->begin(), v->end());
}

void GlooStore::wait(const std::vector<std::string>& keys) {
  wait(keys, store_->timeout());
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& k : keys) full.push_back(prefix_ + k);
  raise(store_->wait(full, timeout), keys, timeout);
}

}  // namespace zt
