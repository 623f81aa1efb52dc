// test_packed_mask.cpp: packing a two-valued buffer to bits gives back its exact bytes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "dtr/core/packed_mask.h"

namespace {

template <typename Word>
void round_trip(size_t n, Word one, double p) {
  std::mt19937 rng(static_cast<uint32_t>(n));
  std::bernoulli_distribution draw(p);
  std::vector<Word> mask(n);
  for (Word& w : mask) w = draw(rng) ? one : Word{0};
  std::vector<uint8_t> bits(dtr::packed_mask_bytes(n), 0xAB);
  uint64_t got_one = 12345;
  REQUIRE(dtr::pack_mask(mask.data(), n, sizeof(Word), bits.data(), &got_one));
  const bool any = std::any_of(mask.begin(), mask.end(), [](Word w) { return w != 0; });
  CHECK(got_one == (any ? static_cast<uint64_t>(one) : 0));
  std::vector<Word> back(n, Word{7});
  dtr::unpack_mask(bits.data(), n, sizeof(Word), got_one, back.data());
  CHECK(back == mask);  // words compared as integers: bit for bit
}

}  // namespace

TEST_CASE("packed mask: every itemsize and length round-trips bit for bit", "[core][packed_mask]") {
  const uint32_t float_one = 0x3f800000u;             // 1.0f, what bernoulli_ writes
  const uint32_t scaled = 0x3fb8e38eu;                // 1/(1-0.1) as float: a dropout noise
  const uint64_t double_one = 0x3ff0000000000000ull;  // 1.0
  for (size_t n : {0, 1, 7, 8, 9, 63, 64, 65, 1000, 4099}) {
    CAPTURE(n);
    round_trip<uint8_t>(n, 1, 0.5);        // bool, uint8
    round_trip<uint16_t>(n, 0x3c00, 0.3);  // 1.0 as half
    round_trip<uint16_t>(n, 0x3f80, 0.9);  // 1.0 as bfloat16
    round_trip<uint32_t>(n, float_one, 0.9);
    round_trip<uint32_t>(n, scaled, 0.1);
    round_trip<uint64_t>(n, double_one, 0.5);
    round_trip<uint32_t>(n, float_one, 0.0);  // all zero
    round_trip<uint32_t>(n, float_one, 1.0);  // all one
  }
}

TEST_CASE("packed mask: a buffer of more than two values is no mask", "[core][packed_mask]") {
  std::vector<float> values = {0.0f, 1.0f, 1.0f, 0.5f, 0.0f, 1.0f, 0.0f, 1.0f, 1.0f};
  std::vector<uint8_t> bits(dtr::packed_mask_bytes(values.size()));
  uint64_t one = 0;
  CHECK_FALSE(dtr::pack_mask(values.data(), values.size(), 4, bits.data(), &one));
  values[3] = 1.0f;
  values[8] = -0.0f;  // zero as a float, but not zero bytes: a third bit pattern
  CHECK_FALSE(dtr::pack_mask(values.data(), values.size(), 4, bits.data(), &one));
  values[8] = 0.0f;
  CHECK(dtr::pack_mask(values.data(), values.size(), 4, bits.data(), &one));
  CHECK_FALSE(dtr::pack_mask(values.data(), values.size(), 3, bits.data(), &one));  // no such word
}

TEST_CASE("packed mask: a third value anywhere in a long buffer is found", "[core][packed_mask]") {
  // Note [Vector masks]: 4-byte words go eight at a time through a vector loop, the rest
  // through the scalar tail; a third bit pattern must be caught in either, in any lane.
  const uint32_t one = 0x3f800000u;
  for (size_t n : {8, 16, 1001}) {
    for (uint32_t third : {0x80000000u /* -0.0f */, 0x3f000000u /* 0.5f */, 1u}) {
      for (size_t pos = 0; pos < n; pos += (n > 64 ? 37 : 1)) {
        CAPTURE(n, third, pos);
        std::vector<uint32_t> mask(n);
        for (size_t i = 0; i < n; ++i) mask[i] = (i % 3 == 1) ? one : 0u;
        mask[pos] = third;
        std::vector<uint8_t> bits(dtr::packed_mask_bytes(n));
        uint64_t got_one = 0;
        // Every n here keeps two `one`s besides pos, so a third value first (taken as the
        // buffer's `one`) is caught too.
        CHECK_FALSE(dtr::pack_mask(mask.data(), n, 4, bits.data(), &got_one));
      }
    }
  }
}
