// pickle.h: JSON values as Python pickles (protocol 4), for files PyTorch's tools read.
//
// PyTorch's memory tools (torch.cuda._memory_viz, pytorch.org/memory_viz) read memory
// snapshots as pickles. to_pickle writes a JSON value (dict, list, str, int, float, bool,
// None) with the opcodes Python's own pickler emits for protocol 4, framing and string
// memoization included, so that for values of those types the bytes equal
// `pickle.dumps(value, protocol=4)` (Note [Pickle like Python] in core/pickle.cpp has the
// rules and the two places where it may differ). Protocol 4 and not 5: PyTorch's web
// viewer rejects protocol 5.
//
// Why home-made: Note [Why our own pickler] in core/pickle.cpp.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace dtr {

// The pickle of `value`: PROTO 4, a frame (if the body is 4 bytes or more), STOP. JSON
// binary values are not supported (std::invalid_argument). Objects keep their key order.
std::string to_pickle(const nlohmann::ordered_json& value);
std::string to_pickle(const nlohmann::json& value);

}  // namespace dtr
