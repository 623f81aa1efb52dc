// packed_mask.h: a buffer whose elements take two values, zero and one other bit pattern
// (a dropout mask: bernoulli_ writes 0 and 1), kept as one bit per element.
//
// The integration keeps a mask this way so that re-making it is a pass over memory rather
// than drawing it again (Note [Packed masks] in integration/torch/lineage.cpp). Elements
// are compared and rewritten as bit patterns of `itemsize` bytes, so unpacking gives back
// exactly the bytes that were packed, whatever the dtype.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dtr {

// Bytes of packed bits for n elements.
inline size_t packed_mask_bytes(size_t n) { return (n + 7) / 8; }

// Packs the n elements of `itemsize` bytes (1, 2, 4 or 8) at `data` into `bits` (bit i of
// byte i / 8 is set when element i is not all zero bytes). Every nonzero element must have
// the same bit pattern, which goes to `*one` (0 when all are zero); returns false, with
// `bits` unspecified, when two differ or `itemsize` is not one of those, so the buffer is
// no mask.
bool pack_mask(const void* data, size_t n, size_t itemsize, uint8_t* bits, uint64_t* one);

// Writes n elements of `itemsize` bytes at `data`: `one`'s low bytes where the bit is set,
// zero bytes elsewhere. The inverse of pack_mask.
void unpack_mask(const uint8_t* bits, size_t n, size_t itemsize, uint64_t one, void* data);

}  // namespace dtr
