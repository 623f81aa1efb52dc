// pickle.cpp: JSON -> Python pickle, protocol 4 (see include/dtr/core/pickle.h).
//
// Note [Why our own pickler]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Memory snapshots must be pickles (that is what torch.cuda.memory._dump_snapshot writes
// and what PyTorch's readers load), and the simulator writes them too. Debian ships no C++
// pickle library, and libtorch's pickler (torch/csrc/jit/serialization/pickler.h) is part
// of torch, which only integration/ may include: the simulator must build and run without
// torch. The subset we need (dict, list, str, int, float, bool, None) is a dozen opcodes,
// so we write them here, and the tests compare our bytes with Python's.
//
// Note [Pickle like Python]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// The opcodes and their order are those of CPython's C pickler for protocol 4:
//  - PROTO 4 first. Everything after it is framed: FRAME + 8-byte length before each
//    frame; a frame is closed when the save of a value (a dict key too) begins and it
//    holds 64 KiB or more already, and a last frame under 4 bytes gets no FRAME header.
//  - dict: EMPTY_DICT, MEMOIZE, then batches of up to 1000 items: MARK k v ... SETITEMS for
//    a batch of two or more, k v SETITEM for a batch of one. list: EMPTY_LIST, MEMOIZE,
//    MARK x ... APPENDS, or x APPEND.
//  - str: SHORT_BINUNICODE (under 256 UTF-8 bytes) or BINUNICODE, then MEMOIZE; a str seen
//    before is BINGET (memo index < 256) or LONG_BINGET.
//  - int: BININT1 (0..255), BININT2 (256..65535), BININT (signed 32-bit), else LONG1 with
//    the shortest little-endian two's complement (unsigned 64-bit values get a 0x00 byte
//    on top when their high bit is set). float: BINFLOAT (big-endian IEEE double).
//    bool: NEWTRUE/NEWFALSE. null: NONE. Then STOP.
// Two places may differ from pickle.dumps, neither changes the loaded value: Python
// memoizes strings by identity, we by value (two equal but distinct str objects are
// written twice by Python, once and a BINGET by us); and Python writes a str of 64 KiB or
// more outside the current frame, we inside it.
#include "dtr/core/pickle.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

namespace dtr {
namespace {

constexpr char kProto = '\x80';
constexpr char kFrame = '\x95';
constexpr char kStop = '.';
constexpr char kMark = '(';
constexpr char kEmptyDict = '}';
constexpr char kEmptyList = ']';
constexpr char kSetItem = 's';
constexpr char kSetItems = 'u';
constexpr char kAppend = 'a';
constexpr char kAppends = 'e';
constexpr char kShortBinUnicode = '\x8c';
constexpr char kBinUnicode = 'X';
constexpr char kMemoize = '\x94';
constexpr char kBinGet = 'h';
constexpr char kLongBinGet = 'j';
constexpr char kBinInt1 = 'K';
constexpr char kBinInt2 = 'M';
constexpr char kBinInt = 'J';
constexpr char kLong1 = '\x8a';
constexpr char kBinFloat = 'G';
constexpr char kNewTrue = '\x88';
constexpr char kNewFalse = '\x89';
constexpr char kNone = 'N';

constexpr size_t kFrameHeaderBytes = 9;       // FRAME + 8-byte length
constexpr size_t kFrameTargetBytes = 65536;   // close a frame at this size (CPython's target)
constexpr size_t kFrameMinBytes = 4;          // smaller last frames get no header
constexpr size_t kBatchSize = 1000;           // items per SETITEMS / APPENDS

class Pickler {
 public:
  template <class Json>
  std::string dump(const Json& value) {
    out_.push_back(kProto);
    out_.push_back('\x04');
    open_frame();
    save(value);
    out_.push_back(kStop);
    close_frame(/*last=*/true);
    return std::move(out_);
  }

 private:
  void open_frame() {
    frame_start_ = out_.size();
    out_.append(kFrameHeaderBytes, '\0');
  }

  void close_frame(bool last) {
    const size_t frame_len = out_.size() - frame_start_ - kFrameHeaderBytes;
    if (last && frame_len < kFrameMinBytes) {
      out_.erase(frame_start_, kFrameHeaderBytes);
      return;
    }
    out_[frame_start_] = kFrame;
    put_le(frame_start_ + 1, frame_len, 8);
  }

  // Note [Pickle like Python]: a frame may end before the save of any value.
  void opcode_boundary() {
    if (out_.size() - frame_start_ - kFrameHeaderBytes < kFrameTargetBytes) return;
    close_frame(/*last=*/false);
    open_frame();
  }

  void put_le(size_t at, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  }
  void append_le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }

  void memoize() {
    out_.push_back(kMemoize);
    ++next_memo_;
  }

  void save_str(const std::string& s) {
    auto it = memo_.find(s);
    if (it != memo_.end()) {
      if (it->second < 256) {
        out_.push_back(kBinGet);
        append_le(it->second, 1);
      } else {
        out_.push_back(kLongBinGet);
        append_le(it->second, 4);
      }
      return;
    }
    if (s.size() < 256) {
      out_.push_back(kShortBinUnicode);
      append_le(s.size(), 1);
    } else {
      if (s.size() > UINT32_MAX) throw std::invalid_argument("dtr: to_pickle: string over 4 GiB");
      out_.push_back(kBinUnicode);
      append_le(s.size(), 4);
    }
    out_ += s;
    memo_.emplace(s, next_memo_);
    memoize();
  }

  // LONG1: the shortest little-endian two's complement of the 65-bit value (negative,
  // magnitude) or unsigned `u` when !negative.
  void save_long1(uint64_t bits, bool negative) {
    uint8_t bytes[9];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>((bits >> (8 * i)) & 0xff);
    bytes[8] = negative ? 0xff : 0x00;
    int n = 9;
    // Drop a top byte that only repeats the sign of the byte below it.
    while (n > 1) {
      const uint8_t top = bytes[n - 1];
      const bool below_negative = (bytes[n - 2] & 0x80) != 0;
      if ((top == 0x00 && !below_negative) || (top == 0xff && below_negative))
        --n;
      else
        break;
    }
    out_.push_back(kLong1);
    out_.push_back(static_cast<char>(n));
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>(bytes[i]));
  }

  void save_signed(int64_t v) {
    if (v >= 0) return save_unsigned(static_cast<uint64_t>(v));
    if (v >= INT32_MIN) {
      out_.push_back(kBinInt);
      append_le(static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
      return;
    }
    save_long1(static_cast<uint64_t>(v), /*negative=*/true);
  }

  void save_unsigned(uint64_t v) {
    if (v < 256) {
      out_.push_back(kBinInt1);
      append_le(v, 1);
    } else if (v < 65536) {
      out_.push_back(kBinInt2);
      append_le(v, 2);
    } else if (v <= INT32_MAX) {
      out_.push_back(kBinInt);
      append_le(v, 4);
    } else {
      save_long1(v, /*negative=*/false);
    }
  }

  void save_float(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    out_.push_back(kBinFloat);
    for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  }

  template <class Json>
  void save(const Json& v) {
    using Value = nlohmann::json::value_t;
    opcode_boundary();
    switch (v.type()) {
      case Value::null: out_.push_back(kNone); break;
      case Value::boolean: out_.push_back(v.template get<bool>() ? kNewTrue : kNewFalse); break;
      case Value::number_integer: save_signed(v.template get<int64_t>()); break;
      case Value::number_unsigned: save_unsigned(v.template get<uint64_t>()); break;
      case Value::number_float: save_float(v.template get<double>()); break;
      case Value::string: save_str(v.template get_ref<const std::string&>()); break;
      case Value::object: {
        out_.push_back(kEmptyDict);
        memoize();
        auto it = v.begin();
        size_t left = v.size();
        while (left > 0) {
          const size_t n = left < kBatchSize ? left : kBatchSize;
          if (n > 1) out_.push_back(kMark);
          for (size_t i = 0; i < n; ++i, ++it) {
            opcode_boundary();
            save_str(it.key());
            save(it.value());
          }
          out_.push_back(n > 1 ? kSetItems : kSetItem);
          left -= n;
        }
        break;
      }
      case Value::array: {
        out_.push_back(kEmptyList);
        memoize();
        auto it = v.begin();
        size_t left = v.size();
        while (left > 0) {
          const size_t n = left < kBatchSize ? left : kBatchSize;
          if (n > 1) out_.push_back(kMark);
          for (size_t i = 0; i < n; ++i, ++it) save(*it);
          out_.push_back(n > 1 ? kAppends : kAppend);
          left -= n;
        }
        break;
      }
      case Value::binary:
      case Value::discarded:
        throw std::invalid_argument("dtr: to_pickle: JSON binary values have no pickle here");
    }
  }

  std::string out_;
  size_t frame_start_ = 0;
  uint32_t next_memo_ = 0;
  std::unordered_map<std::string, uint32_t> memo_;  // str value -> memo index
};

}  // namespace

std::string to_pickle(const nlohmann::ordered_json& value) { return Pickler().dump(value); }
std::string to_pickle(const nlohmann::json& value) { return Pickler().dump(value); }

}  // namespace dtr
