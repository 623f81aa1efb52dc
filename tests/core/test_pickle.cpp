// test_pickle.cpp: to_pickle writes the bytes Python's pickler writes (protocol 4).
//
// The expected bytes come from Debian's /usr/bin/python3 (3.11), once, by
//   print(''.join('\\x%02x' % b for b in pickle.dumps(VALUE, protocol=4)))
// for the VALUE in each test's comment; the long case compares the length and FNV-1a 64 hash
// of pickle.dumps(d, protocol=4) for the `d` given there. Whether the bytes load in Python is
// checked by tests/sim/test_snapshot_viz.py, which also re-pickles a whole snapshot in
// Python and compares the bytes.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "dtr/core/pickle.h"

using nlohmann::ordered_json;

namespace {

template <size_t N>
std::string bytes(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

TEST_CASE("to_pickle: scalars as Python pickles them", "[core][pickle]") {
  // [None, True, False, 0, 255, 256, 65535, 65536, 2**31-1, 2**31, -1, -2**31, -2**31-1,
  //  2**63-1, -2**63, 2**64-1, 1.5, -0.0]
  ordered_json v = ordered_json::array();
  v.push_back(nullptr);
  v.push_back(true);
  v.push_back(false);
  for (uint64_t u : {0ull, 255ull, 256ull, 65535ull, 65536ull, 2147483647ull, 2147483648ull})
    v.push_back(u);
  for (int64_t i : {int64_t{-1}, int64_t{INT32_MIN}, int64_t{INT32_MIN} - 1}) v.push_back(i);
  v.push_back(int64_t{INT64_MAX});
  v.push_back(int64_t{INT64_MIN});
  v.push_back(uint64_t{UINT64_MAX});
  v.push_back(1.5);
  v.push_back(-0.0);
  const std::string expected = bytes(
      "\x80\x04\x95\x65\x00\x00\x00\x00\x00\x00\x00\x5d\x94\x28\x4e\x88\x89\x4b\x00\x4b\xff\x4d"
      "\x00\x01\x4d\xff\xff\x4a\x00\x00\x01\x00\x4a\xff\xff\xff\x7f\x8a\x05\x00\x00\x00\x80\x00"
      "\x4a\xff\xff\xff\xff\x4a\x00\x00\x00\x80\x8a\x05\xff\xff\xff\x7f\xff\x8a\x08\xff\xff\xff"
      "\xff\xff\xff\xff\x7f\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80\x8a\x09\xff\xff\xff\xff\xff"
      "\xff\xff\xff\x00\x47\x3f\xf8\x00\x00\x00\x00\x00\x00\x47\x80\x00\x00\x00\x00\x00\x00\x00"
      "\x65\x2e");
  CHECK(dtr::to_pickle(v) == expected);
}

TEST_CASE("to_pickle: nested dicts, memoized strings, SETITEM for one item", "[core][pickle]") {
  // {"segments": [{"address": 4096, "blocks": [{"size": 512, "state": "inactive"}]}],
  //  "state": "inactive", "": "\u00e9"}
  const ordered_json v = ordered_json::parse(
      R"({"segments": [{"address": 4096, "blocks": [{"size": 512, "state": "inactive"}]}],
          "state": "inactive", "": "\u00e9"})");
  const std::string expected = bytes(
      "\x80\x04\x95\x5d\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x08\x73\x65\x67\x6d\x65\x6e"
      "\x74\x73\x94\x5d\x94\x7d\x94\x28\x8c\x07\x61\x64\x64\x72\x65\x73\x73\x94\x4d\x00\x10\x8c"
      "\x06\x62\x6c\x6f\x63\x6b\x73\x94\x5d\x94\x7d\x94\x28\x8c\x04\x73\x69\x7a\x65\x94\x4d\x00"
      "\x02\x8c\x05\x73\x74\x61\x74\x65\x94\x8c\x08\x69\x6e\x61\x63\x74\x69\x76\x65\x94\x75\x61"
      "\x75\x61\x68\x09\x68\x0a\x8c\x00\x94\x8c\x02\xc3\xa9\x94\x75\x2e");
  CHECK(dtr::to_pickle(v) == expected);
  // {"a": [1]}: single-item batches use SETITEM and APPEND.
  CHECK(dtr::to_pickle(ordered_json::parse(R"({"a": [1]})")) ==
        bytes("\x80\x04\x95\x0d\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x8c\x01\x61\x94\x5d\x94\x4b"
              "\x01\x61\x73\x2e"));
  // nlohmann::json (sorted keys) goes through the same writer.
  CHECK(dtr::to_pickle(nlohmann::json::parse(R"({"a": [1]})")) ==
        dtr::to_pickle(ordered_json::parse(R"({"a": [1]})")));
}

TEST_CASE("to_pickle: short values are not framed, long strings use BINUNICODE",
          "[core][pickle]") {
  CHECK(dtr::to_pickle(ordered_json(1)) == bytes("\x80\x04\x4b\x01\x2e"));  // 1
  CHECK(dtr::to_pickle(ordered_json(nullptr)) == bytes("\x80\x04\x4e\x2e"));  // None
  // "x" * 300
  const std::string long_str = dtr::to_pickle(ordered_json(std::string(300, 'x')));
  CHECK(long_str == bytes("\x80\x04\x95\x33\x01\x00\x00\x00\x00\x00\x00\x58\x2c\x01\x00\x00") +
                        std::string(300, 'x') + bytes("\x94\x2e"));
}

TEST_CASE("to_pickle: big values are split into 64 KiB frames and batches of 1000 like Python",
          "[core][pickle]") {
  // keys = ['k%d' % j for j in range(300)]
  // d = [{'action': 'alloc', 'addr': i * 1000003, 'size': i, 'f': i * 0.5,
  //       's': keys[i % 300]} for i in range(6000)]
  // pickle.dumps(d, protocol=4): 228947 bytes, FNV-1a 0x32f583a13d873442, frames at
  // offsets 2, 65552, 131099, 196645.
  ordered_json d = ordered_json::array();
  for (uint64_t i = 0; i < 6000; ++i) {
    ordered_json e = ordered_json::object();
    e["action"] = "alloc";
    e["addr"] = i * 1000003;
    e["size"] = i;
    e["f"] = double(i) * 0.5;
    e["s"] = "k" + std::to_string(i % 300);
    d.push_back(std::move(e));
  }
  const std::string p = dtr::to_pickle(d);
  CHECK(p.size() == 228947);
  CHECK(fnv1a(p) == 0x32f583a13d873442ull);
  for (size_t at : {size_t{2}, size_t{65552}, size_t{131099}, size_t{196645}})
    CHECK(p[at] == '\x95');
}

TEST_CASE("to_pickle: binary JSON values are refused", "[core][pickle]") {
  CHECK_THROWS_AS(dtr::to_pickle(ordered_json::binary({1, 2, 3})), std::invalid_argument);
}
