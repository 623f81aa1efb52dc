// options.cpp: parsing, printing and documenting the options of DTR_OPTIONS.
//
// Everything here is generated from the one table in options.h: Config::set and
// Config::get dispatch on the key through the X-macro, each option's C++ type picks its
// parser and printer (OptionType<T> below), and config_markdown() writes docs/config.md
// from the same rows. Adding an option means adding a row; nothing here changes unless
// the row brings a new C++ type.
//
// Invariants:
//   - every default in the table parses (Config::Config goes through the same path as
//     set, so a bad default throws on the first Config built);
//   - set(k, get(k)) leaves every option unchanged (get prints a form set re-parses);
//   - nothing here keeps state between calls; the environment is read with std::getenv
//     only, so apply_environment is safe from an LD_PRELOAD initializer.
//
// Internal parsers report failure as `false` plus a reason rather than throwing, so the
// public entry points can wrap the reason into one message that names the option, the
// source (DTR_CONF or DTR_<NAME>) and the expected form.
#include "dtr/core/options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <system_error>
#include <type_traits>
#include <vector>

namespace dtr {
namespace {

constexpr uint64_t kKiB = uint64_t{1} << 10;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kTiB = uint64_t{1} << 40;

// At most this many fraction digits are honoured in "1.5G"; later ones are ignored.
// 18 keeps 2 * 10^18 inside uint64_t in scaled_fraction().
constexpr size_t kMaxFractionDigits = 18;

constexpr const char* kSizeExpected = "a size such as 512, 4K, 300M, 2G or 1.5G";
constexpr const char* kBudgetExpected =
    "a size such as 512, 300M, 4G, or a ratio in (0,1] such as 0.4 (0 = unlimited)";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
char to_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

// ---- numbers ---------------------------------------------------------------------------

// The leading unsigned decimal of a text: digits, optionally '.' and more digits
// ("300", "1.5", ".5", "2."). No sign, no exponent: those are left for the caller to
// reject, so "1e5" reads as 1 followed by the suffix "e5".
struct Decimal {
  size_t length = 0;            // characters consumed; 0 if there is no number
  bool has_point = false;
  bool overflow = false;        // the integer part does not fit in uint64_t
  uint64_t int_part = 0;
  std::string_view fraction;    // the digits after the point
};

Decimal scan_decimal(std::string_view text) {
  Decimal d;
  size_t i = 0;
  size_t digits = 0;
  for (; i < text.size() && is_digit(text[i]); ++i, ++digits) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (d.int_part > (std::numeric_limits<uint64_t>::max() - digit) / 10) d.overflow = true;
    d.int_part = d.int_part * 10 + digit;
  }
  if (i < text.size() && text[i] == '.') {
    const size_t start = i + 1;
    size_t j = start;
    while (j < text.size() && is_digit(text[j])) ++j;
    if (digits + (j - start) > 0) {  // a lone "." is not a number
      d.has_point = true;
      d.fraction = text.substr(start, j - start);
      digits += j - start;
      i = j;
    }
  }
  d.length = digits > 0 ? i : 0;
  return d;
}

// floor(0.<fraction> * 2^shift), exactly, by binary long division (no floating point,
// so "1.5G" is exactly 1610612736 and "0.1K" is 102).
uint64_t scaled_fraction(std::string_view fraction, unsigned shift) {
  if (fraction.size() > kMaxFractionDigits) fraction = fraction.substr(0, kMaxFractionDigits);
  uint64_t numerator = 0;
  uint64_t denominator = 1;
  for (char c : fraction) {
    numerator = numerator * 10 + static_cast<uint64_t>(c - '0');
    denominator *= 10;
  }
  uint64_t result = 0;
  for (unsigned bit = 0; bit < shift; ++bit) {  // numerator < denominator <= 10^18 throughout
    numerator *= 2;
    result *= 2;
    if (numerator >= denominator) {
      numerator -= denominator;
      result += 1;
    }
  }
  return result;
}

// log2 of the multiplier for a size suffix (case-insensitive), or -1 if unknown.
int suffix_shift(std::string_view suffix) {
  struct Unit {
    const char* names[3];
    int shift;
  };
  static constexpr Unit kUnits[] = {
      {{"", "b", "b"}, 0},           {{"k", "kb", "kib"}, 10}, {{"m", "mb", "mib"}, 20},
      {{"g", "gb", "gib"}, 30},      {{"t", "tb", "tib"}, 40},
  };
  for (const Unit& unit : kUnits) {
    for (const char* name : unit.names) {
      if (iequals(suffix, name)) return unit.shift;
    }
  }
  return -1;
}

// "512", "4K", "300 MiB", "1.5G" -> bytes.
bool parse_size_text(std::string_view text, uint64_t& out, std::string& why) {
  text = trim(text);
  if (text.empty()) {
    why = "empty";
    return false;
  }
  if (text.front() == '-') {
    why = "a size cannot be negative";
    return false;
  }
  const Decimal number = scan_decimal(text);
  if (number.length == 0) {
    why = "not a number";
    return false;
  }
  const std::string_view suffix = trim(text.substr(number.length));
  const int shift = suffix_shift(suffix);
  if (shift < 0) {
    why = "unknown suffix " + quoted(suffix) + " (use K, M, G or T; binary, K = 1024)";
    return false;
  }
  uint64_t fraction_bytes = 0;
  if (number.has_point) {
    fraction_bytes = scaled_fraction(number.fraction, static_cast<unsigned>(shift));
    if (shift == 0 && number.fraction.find_first_not_of('0') != std::string_view::npos) {
      why = "a byte count must be whole (add a suffix, as in 1.5G)";
      return false;
    }
  }
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  if (number.overflow || number.int_part > (max >> shift) ||
      (number.int_part << shift) > max - fraction_bytes) {
    why = "too large";
    return false;
  }
  out = (number.int_part << shift) + fraction_bytes;
  return true;
}

// A whole text that is one unsigned decimal ("0.4", "1", ".5") as a double.
bool parse_plain_decimal(std::string_view text, double& out) {
  const Decimal number = scan_decimal(text);
  if (number.length == 0 || number.length != text.size()) return false;
  const auto result = std::from_chars(text.data(), text.data() + text.size(), out);
  return result.ec == std::errc() && result.ptr == text.data() + text.size() && std::isfinite(out);
}

// Shortest text that reads back as the same double, with ".0" added to whole numbers so
// they still look like reals ("2.0", "0.4", "1e+20").
std::string format_double(double value, std::chars_format format) {
  char buffer[512];  // enough for any double in fixed notation
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, format);
  std::string text(buffer, result.ptr);
  if (text.find_first_not_of("0123456789") == std::string::npos) text += ".0";
  return text;
}

// Bytes exactly, in the largest binary unit that divides them: "300 MiB", "123456 B".
std::string exact_size_text(uint64_t bytes) {
  static constexpr struct {
    uint64_t size;
    const char* name;
  } kUnits[] = {{kTiB, "TiB"}, {kGiB, "GiB"}, {kMiB, "MiB"}, {kKiB, "KiB"}};
  for (const auto& unit : kUnits) {
    if (bytes != 0 && bytes % unit.size == 0)
      return std::to_string(bytes / unit.size) + " " + unit.name;
  }
  return std::to_string(bytes) + " B";
}

// Note [Budget syntax]
// ~~~~~~~~~~~~~~~~~~~~
// A budget is either bytes or a ratio of the baseline peak, and the two forms share
// digits, so the rules are:
//   - "", "0" (any zero without an 'x': "0.0", "0M") and "unlimited" mean no budget;
//   - a size suffix (K, M, G, T, with optional B/iB, any case) means bytes: "300M";
//   - a plain integer means bytes: "123456" (and so "1" is one byte, not ratio 1);
//   - a plain number with a decimal point in (0,1] is a ratio: "0.4", "1.0";
//   - a trailing 'x' always means a ratio: "0.4x", "1x" (this is what to_string prints),
//     and "0x" or "0.0x" is refused: docs/config.md says a ratio is in (0,1], and a ratio
//     of zero that quietly meant "no budget" ran the opposite of what was asked;
//   - a plain decimal above 1 ("1.5") is rejected: the user surely meant 1.5G or 0.15,
//     and guessing would silently run with a budget a billion times off.
bool parse_budget_text(std::string_view text, Budget& out, std::string& why) {
  text = trim(text);
  if (text.empty() || iequals(text, "unlimited")) {
    out = Budget{};
    return true;
  }
  if (text.front() == '-') {
    why = "a budget cannot be negative";
    return false;
  }
  const bool ratio_marked = to_lower(text.back()) == 'x';
  const std::string_view body = ratio_marked ? trim(text.substr(0, text.size() - 1)) : text;
  const Decimal number = scan_decimal(body);
  if (number.length == 0) {
    why = "not a size or a ratio";
    return false;
  }
  if (ratio_marked || (number.length == body.size() && number.has_point)) {
    double ratio = 0.0;
    if (!parse_plain_decimal(body, ratio)) {
      why = "not a ratio";
      return false;
    }
    if (ratio == 0.0) {
      // A plain "0.0" is a zero, as "0" is; "0x" a ratio of zero (Note [Budget syntax]).
      if (!ratio_marked) {
        out = Budget{};
        return true;
      }
      why = "a ratio must be in (0,1]; for no budget write 0 or unlimited";
      return false;
    }
    if (ratio > 1.0) {
      const std::string plain(body);
      why = ratio_marked ? "a ratio must be in (0,1]"
                         : quoted(plain) + " is ambiguous: write " + quoted(plain + "G") +
                               " for a size, or a ratio <= 1 such as 0.4";
      return false;
    }
    out = Budget{};
    out.kind = Budget::Kind::ratio;
    out.ratio = ratio;
    return true;
  }
  uint64_t bytes = 0;
  if (!parse_size_text(body, bytes, why)) return false;
  out = Budget{};
  if (bytes > 0) {
    out.kind = Budget::Kind::bytes;
    out.bytes = bytes;
  }
  return true;
}

// ---- per-type parsing and printing ---------------------------------------------------

// OptionType<T>: how an option of C++ type T is parsed, printed and documented.
//   expected: what a good value looks like, for error messages;
//   label, syntax: a line of docs/config.md.
template <typename T>
struct OptionType;

template <>
struct OptionType<Budget> {
  static constexpr const char* expected = kBudgetExpected;
  static constexpr const char* label = "budgets";
  static constexpr const char* syntax =
      "`0`, empty or `unlimited` = no budget. Bytes: an integer with an optional binary "
      "suffix `K`, `M`, `G` or `T` (also `KB`/`KiB` and so on, any case; `K` = 1024), such "
      "as `300M`, `4G`, `1.5G` or `123456`. Ratio: a number in (0,1] written with a decimal "
      "point, such as `0.4` or `1.0`, or with a trailing `x`, such as `0.4x` (`0x` and "
      "`0.0x` are refused, not read as no budget); in the "
      "simulator of the baseline peak, in a PyTorch run (`budget` only) of the peak over "
      "the first two training steps, set from the end of the second. A plain fraction above 1 such "
      "as `1.5` is rejected as "
      "ambiguous: write `1.5G` or a ratio <= 1. `get` prints bytes exactly, in the largest "
      "unit that divides them (`300 MiB`, `123456 B`), and ratios as `0.4x`.";
  static bool parse(std::string_view text, Budget& out, std::string& why) {
    return parse_budget_text(text, out, why);
  }
  static std::string format(const Budget& value) { return value.to_string(); }
};

template <>
struct OptionType<ByteSize> {
  static constexpr const char* expected = "a size such as 4096, 4K or 1.5M";
  static constexpr const char* label = "sizes";
  static constexpr const char* syntax =
      "bytes: an integer with an optional binary suffix, as for budgets (`4096`, `4K`, "
      "`1.5M`); `0` is zero bytes, not unlimited, and there are no ratios. `get` prints them "
      "as budgets' bytes (`4 KiB`).";
  static bool parse(std::string_view text, ByteSize& out, std::string& why) {
    return parse_size_text(text, out.bytes, why);
  }
  static std::string format(const ByteSize& value) { return value.to_string(); }
};

template <>
struct OptionType<std::string> {
  static constexpr const char* expected = "any text";
  static constexpr const char* label = "text";
  static constexpr const char* syntax =
      "taken as is; those that take one of a few words list them under range, and any other "
      "value is an error.";
  static bool parse(std::string_view text, std::string& out, std::string& why) {
    out = std::string(text);
    return true;
  }
  static std::string format(const std::string& value) { return value; }
};

template <typename Int>
struct UnsignedOptionType {
  static bool parse(std::string_view text, Int& out, std::string& why) {
    text = trim(text);
    if (text.empty()) {
      why = "empty";
      return false;
    }
    if (text.front() == '-') {
      why = "must not be negative";
      return false;
    }
    if (text.find_first_not_of("0123456789") != std::string_view::npos) {
      why = "not a decimal integer";
      return false;
    }
    const auto result = std::from_chars(text.data(), text.data() + text.size(), out);
    if (result.ec == std::errc::result_out_of_range) {
      why = "too large (at most " + std::to_string(std::numeric_limits<Int>::max()) + ")";
      return false;
    }
    return result.ec == std::errc() && result.ptr == text.data() + text.size();
  }
  static std::string format(Int value) { return std::to_string(value); }
};

template <>
struct OptionType<uint32_t> : UnsignedOptionType<uint32_t> {
  static constexpr const char* expected = "an integer from 0 to 4294967295";
  static constexpr const char* label = "32-bit integers";
  static constexpr const char* syntax = "decimal, 0 to 4294967295, no sign.";
};

template <>
struct OptionType<uint64_t> : UnsignedOptionType<uint64_t> {
  static constexpr const char* expected = "an integer from 0 to 18446744073709551615";
  static constexpr const char* label = "64-bit integers";
  static constexpr const char* syntax = "decimal, 0 to 18446744073709551615, no sign.";
};

template <>
struct OptionType<double> {
  static constexpr const char* expected = "a non-negative number such as 2.0";
  static constexpr const char* label = "numbers";
  static constexpr const char* syntax =
      "non-negative decimal, such as `2`, `2.0` or `1.5e3`; no `inf` or `nan`.";
  static bool parse(std::string_view text, double& out, std::string& why) {
    text = trim(text);
    if (text.empty()) {
      why = "empty";
      return false;
    }
    if (text.front() == '-') {
      why = "must not be negative";
      return false;
    }
    // from_chars takes no sign, whitespace or locale; requiring a leading digit or '.'
    // also rules out "inf", "nan" and "+1".
    if (!is_digit(text.front()) && text.front() != '.') {
      why = "not a number";
      return false;
    }
    double value = 0.0;
    const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
    if (result.ec != std::errc() || result.ptr != text.data() + text.size() || !std::isfinite(value)) {
      why = result.ec == std::errc::result_out_of_range ? "out of range" : "not a number";
      return false;
    }
    out = value;
    return true;
  }
  static std::string format(double value) { return format_double(value, std::chars_format::general); }
};

template <>
struct OptionType<bool> {
  static constexpr const char* expected = "True or False (also true/false, 1/0)";
  static constexpr const char* label = "booleans";
  static constexpr const char* syntax =
      "`True` or `False` (PyTorch style), also `true`/`false` and `1`/`0`.";
  static bool parse(std::string_view text, bool& out, std::string& why) {
    text = trim(text);
    if (text == "True" || text == "true" || text == "1") {
      out = true;
      return true;
    }
    if (text == "False" || text == "false" || text == "0") {
      out = false;
      return true;
    }
    why = "not a boolean";
    return false;
  }
  static std::string format(bool value) { return value ? "True" : "False"; }
};

// ---- dispatch on the key ---------------------------------------------------------------

[[noreturn]] void throw_unknown_option(std::string_view key, std::string_view origin) {
  throw ConfigError("dtr: unknown option " + quoted(key) + std::string(origin) +
                    "; valid keys: " + valid_option_keys());
}

// Note [Option ranges]
// ~~~~~~~~~~~~~~~~~~~~
// A number option's type rules out negatives and, for integers, fractions; a narrower
// range is a row of DTR_OPTION_RANGES, checked here for every source (defaults, DTR_CONF,
// DTR_<NAME>) after the value parsed. The rows exist where a value outside would run but
// mean something other than the user wrote: `max_overhead:0.5` read as "50% more" would act
// on the first remat (it is a multiple of the program's compute, 1.5 for 50% more);
// `dead_lineage_factor` below 1 would favour the storages the mark is there to spare.
constexpr double kNoLimit = std::numeric_limits<double>::infinity();

struct OptionRange {
  double least = 0.0;
  double most = kNoLimit;
  bool off_at_zero = false;
};

#define DTR_OPTION_RANGE_CHECK(member, k, least, most, off)                                        \
  static_assert(std::is_arithmetic_v<decltype(Config::member)>, "a range is for a number option");
DTR_OPTION_RANGES(DTR_OPTION_RANGE_CHECK)
#undef DTR_OPTION_RANGE_CHECK

const OptionRange* range_of(std::string_view key) {
  static constexpr struct {
    const char* key;
    OptionRange range;
  } kRanges[] = {
#define DTR_OPTION_RANGE_ROW(member, k, least, most, off) {k, OptionRange{least, most, off}},
      DTR_OPTION_RANGES(DTR_OPTION_RANGE_ROW)
#undef DTR_OPTION_RANGE_ROW
  };
  for (const auto& row : kRanges) {
    if (key == row.key) return &row.range;
  }
  return nullptr;
}

std::string range_text(const OptionRange& range) {
  const auto number = [](double value) {
    std::string text = format_double(value, std::chars_format::general);
    if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0)
      text.resize(text.size() - 2);
    return text;
  };
  std::string text = range.most == kNoLimit ? "at least " + number(range.least)
                                            : number(range.least) + " to " + number(range.most);
  return range.off_at_zero ? "0 (off) or " + text : text;
}

bool in_range(const OptionRange& range, double value) {
  return (range.off_at_zero && value == 0.0) || (value >= range.least && value <= range.most);
}

// Note [Option choices]
// ~~~~~~~~~~~~~~~~~~~~~~
// A text option that takes one of a few words (DTR_OPTION_CHOICES) is checked when it is
// set, from any source, as a number against its range. Before, each layer checked its own
// word where it first used it: the PyTorch host at its first op, the simulator in the
// replay. So `dtr-run --conf search:nope` started the command, which failed only once it
// imported torch, and `allocator:nope` ran a PyTorch script without a word (the host has
// no use for it).
const char* choices_of(std::string_view key) {
  static constexpr struct {
    const char* key;
    const char* words;
  } kChoices[] = {
#define DTR_OPTION_CHOICE_ROW(member, k, words) {k, words},
      DTR_OPTION_CHOICES(DTR_OPTION_CHOICE_ROW)
#undef DTR_OPTION_CHOICE_ROW
  };
  for (const auto& row : kChoices) {
    if (key == row.key) return row.words;
  }
  return nullptr;
}

#define DTR_OPTION_CHOICE_CHECK(member, k, words)                                                  \
  static_assert(std::is_same_v<decltype(Config::member), std::string>,                             \
                "choices are for a text option");
DTR_OPTION_CHOICES(DTR_OPTION_CHOICE_CHECK)
#undef DTR_OPTION_CHOICE_CHECK

bool is_choice(std::string_view words, std::string_view value) {
  while (!words.empty()) {
    const size_t comma = words.find(',');
    if (trim(words.substr(0, comma)) == value) return true;
    words = comma == std::string_view::npos ? std::string_view() : words.substr(comma + 1);
  }
  return false;
}

// `origin` says where the text came from, for messages: "", " in DTR_CONF",
// " from DTR_SAMPLE", " (table default)".
template <typename T>
void assign(T& member, const char* key, std::string_view value, std::string_view origin) {
  std::string why;
  T parsed{};
  bool ok = OptionType<T>::parse(value, parsed, why);
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    const OptionRange* range = range_of(key);  // Note [Option ranges]
    if (ok && range && !in_range(*range, static_cast<double>(parsed))) {
      // The range alone: "expected an integer from 0 to 4294967295" after it read as a
      // second, wider rule.
      throw ConfigError("dtr: bad value " + quoted(value) + " for option " + quoted(key) +
                        std::string(origin) + ": must be " + range_text(*range));
    }
  }
  if constexpr (std::is_same_v<T, std::string>) {
    const char* words = choices_of(key);  // Note [Option choices]
    if (ok && words && !is_choice(words, parsed)) {
      const std::string_view first =
          std::string_view(words).substr(0, std::string_view(words).find(','));
      throw ConfigError("dtr: bad value " + quoted(value) + " for option " + quoted(key) +
                        std::string(origin) + ": expected one of " + words +
                        " (as in DTR_CONF=" + key + ":" + std::string(first) + ")");
    }
  }
  if (!ok) {
    throw ConfigError("dtr: bad value " + quoted(value) + " for option " + quoted(key) +
                      std::string(origin) + ": " + (why.empty() ? "" : why + "; ") + "expected " +
                      OptionType<T>::expected);
  }
  member = std::move(parsed);
}

void set_option(Config& config, std::string_view key, std::string_view value, std::string_view origin) {
#define DTR_OPTIONS_SET(member, type, k, env, def, doc) \
  if (key == k) {                                       \
    assign<type>(config.member, k, value, origin);      \
    return;                                             \
  }
  DTR_OPTIONS(DTR_OPTIONS_SET)
#undef DTR_OPTIONS_SET
  throw_unknown_option(key, origin);
}

}  // namespace

// Note [DTR_CONF tokenizing]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// As PYTORCH_CUDA_ALLOC_CONF: `key:value` pairs separated by commas, whitespace around
// keys and values ignored. A value that must hold commas is bracketed, `key:[a:b,c:d]`,
// and the text between the brackets (commas included, brackets not) is the value;
// brackets nest. Differences from PyTorch, all lenient: an unbracketed value runs to the
// next comma and may hold ':' (so `trace:/tmp/a:b.trace` works), and empty entries (a
// trailing comma, ",,") are skipped. A non-empty entry without ':' is an error.
std::vector<ConfEntry> split_conf(std::string_view conf) {
  std::vector<ConfEntry> entries;
  size_t pos = 0;
  const auto skip_space = [&] {
    while (pos < conf.size() && is_space(conf[pos])) ++pos;
  };
  while (pos < conf.size()) {
    skip_space();
    if (pos >= conf.size()) break;
    if (conf[pos] == ',') {  // empty entry
      ++pos;
      continue;
    }
    const size_t key_start = pos;
    while (pos < conf.size() && conf[pos] != ':' && conf[pos] != ',') ++pos;
    const std::string_view key = trim(conf.substr(key_start, pos - key_start));
    if (pos >= conf.size() || conf[pos] != ':') {
      throw ConfigError("dtr: bad DTR_CONF entry " + quoted(key) +
                        ": expected key:value, as in \"budget:300M,policy:dtr_eq\"");
    }
    if (key.empty()) throw ConfigError("dtr: bad DTR_CONF entry: missing key before ':'");
    ++pos;  // ':'
    skip_space();
    std::string_view value;
    if (pos < conf.size() && conf[pos] == '[') {
      const size_t value_start = ++pos;
      int depth = 1;
      for (; pos < conf.size(); ++pos) {
        if (conf[pos] == '[') ++depth;
        if (conf[pos] == ']' && --depth == 0) break;
      }
      if (pos >= conf.size()) {
        throw ConfigError("dtr: bad DTR_CONF value for " + quoted(key) + ": missing ']'");
      }
      value = trim(conf.substr(value_start, pos - value_start));
      ++pos;  // ']'
      skip_space();
      if (pos < conf.size() && conf[pos] != ',') {
        throw ConfigError("dtr: bad DTR_CONF value for " + quoted(key) +
                          ": expected ',' after ']', got " + quoted(conf.substr(pos, 1)));
      }
    } else {
      const size_t value_start = pos;
      while (pos < conf.size() && conf[pos] != ',') ++pos;
      value = trim(conf.substr(value_start, pos - value_start));
    }
    entries.push_back(ConfEntry{std::string(key), std::string(value)});
    if (pos < conf.size()) ++pos;  // ','
  }
  return entries;
}

namespace {

void apply_conf_text(Config& config, std::string_view conf) {
  for (const ConfEntry& entry : split_conf(conf))
    set_option(config, entry.key, entry.value, " in DTR_CONF");
}

// Keys of the options whose C++ type is T, in table order, as "`a`, `b`".
template <typename T>
std::string keys_of_type() {
  std::string out;
#define DTR_OPTIONS_KEYS(member, type, k, env, def, doc)    \
  if (std::is_same<T, type>::value) {                       \
    out += (out.empty() ? "`" : ", `") + std::string(k) + "`"; \
  }
  DTR_OPTIONS(DTR_OPTIONS_KEYS)
#undef DTR_OPTIONS_KEYS
  return out;
}

template <typename T>
void append_syntax_line(std::string& out) {
  const std::string keys = keys_of_type<T>();
  if (keys.empty()) return;
  out += std::string("- **") + OptionType<T>::label + "** (" + keys + "): " + OptionType<T>::syntax + "\n";
}

std::string markdown_cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

// ---- ByteSize --------------------------------------------------------------------------

std::string ByteSize::to_string() const { return exact_size_text(bytes); }

// ---- Budget ----------------------------------------------------------------------------

uint64_t Budget::resolve(uint64_t baseline_peak_bytes) const {
  switch (kind) {
    case Kind::unlimited:
      return std::numeric_limits<uint64_t>::max();
    case Kind::bytes:
      return bytes;
    case Kind::ratio: {
      // int(baseline * ratio), as DTR's simulator computes it: a double product, truncated.
      const double product = static_cast<double>(baseline_peak_bytes) * ratio;
      if (!(product > 0.0)) return 0;
      if (product >= 18446744073709551616.0) return std::numeric_limits<uint64_t>::max();
      return static_cast<uint64_t>(product);
    }
  }
  return std::numeric_limits<uint64_t>::max();
}

std::string Budget::to_string() const {
  switch (kind) {
    case Kind::unlimited:
      return "unlimited";
    case Kind::bytes: return exact_size_text(bytes);
    case Kind::ratio:
      return format_double(ratio, std::chars_format::fixed) + "x";
  }
  return "unlimited";
}

Budget Budget::parse(std::string_view text) {
  Budget budget;
  std::string why;
  if (!parse_budget_text(text, budget, why)) {
    throw ConfigError("dtr: bad budget " + quoted(text) + ": " + why + "; expected " + kBudgetExpected);
  }
  return budget;
}

uint64_t parse_size(std::string_view text) {
  uint64_t bytes = 0;
  std::string why;
  if (!parse_size_text(text, bytes, why)) {
    throw ConfigError("dtr: bad size " + quoted(text) + ": " + why + "; expected " + kSizeExpected);
  }
  return bytes;
}

// ---- Config ----------------------------------------------------------------------------

Config::Config() {
#define DTR_OPTIONS_DEFAULT(member, type, k, env, def, doc) \
  assign<type>(member, k, def, " (table default)");
  DTR_OPTIONS(DTR_OPTIONS_DEFAULT)
#undef DTR_OPTIONS_DEFAULT
}

Config Config::for_pytorch() {
  Config config;
#define DTR_PYTORCH_DEFAULT(member, k, value)                                                      \
  assign<decltype(config.member)>(config.member, k, value, " (PyTorch default)");
  DTR_PYTORCH_DEFAULTS(DTR_PYTORCH_DEFAULT)
#undef DTR_PYTORCH_DEFAULT
  return config;
}

void Config::set(std::string_view key, std::string_view value) { set_option(*this, key, value, ""); }

void Config::apply_conf(std::string_view conf) { apply_conf_text(*this, conf); }

void Config::apply_environment() {
  check_misspelled_variables();  // Note [Misspelled variables]
  if (const char* conf = std::getenv("DTR_CONF")) apply_conf_text(*this, conf);
#define DTR_OPTIONS_ENV(member, type, k, env, def, doc)                                            \
  if (const char* text = std::getenv(env); text && !trim(text).empty()) {                          \
    assign<type>(member, k, text, std::string(" from ") + env);                                    \
  }
  DTR_OPTIONS(DTR_OPTIONS_ENV)
#undef DTR_OPTIONS_ENV
}

std::string Config::get(std::string_view key) const {
#define DTR_OPTIONS_GET(member, type, k, env, def, doc) \
  if (key == k) return OptionType<type>::format(member);
  DTR_OPTIONS(DTR_OPTIONS_GET)
#undef DTR_OPTIONS_GET
  throw_unknown_option(key, "");
}

// ---- the table and its documentation ----------------------------------------------------

const std::vector<OptionInfo>& option_table() {
  // Immutable after its first (thread-safe) initialization.
  static const std::vector<OptionInfo> table = [] {
    std::vector<OptionInfo> rows = {
#define DTR_OPTIONS_INFO(member, type, k, env, def, doc) OptionInfo{k, env, def, doc, nullptr, {}},
        DTR_OPTIONS(DTR_OPTIONS_INFO)
#undef DTR_OPTIONS_INFO
    };
    for (OptionInfo& row : rows) {
#define DTR_PYTORCH_INFO(member, k, value)                                                         \
  if (std::string_view(row.key) == k) row.pytorch_default = value;
      DTR_PYTORCH_DEFAULTS(DTR_PYTORCH_INFO)
#undef DTR_PYTORCH_INFO
      if (const OptionRange* range = range_of(row.key)) row.range = range_text(*range);
      if (const char* words = choices_of(row.key)) row.range = std::string("one of ") + words;
    }
    return rows;
  }();
  return table;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (to_lower(a[i]) != to_lower(b[i])) return false;
  }
  return true;
}

std::string valid_option_keys() {
  std::string out;
  for (const OptionInfo& option : option_table()) {
    if (!out.empty()) out += ", ";
    out += option.key;
  }
  return out;
}

std::string config_markdown() {
  const std::vector<OptionInfo>& table = option_table();
  std::string out;
  out += "# Configuration\n\n";
  out += "<!-- Generated by dtr::config_markdown() from the DTR_OPTIONS table in "
         "include/dtr/core/options.h. Do not edit by hand; tests/core/test_options.cpp checks "
         "that this page matches. -->\n\n";
  out += "Every option has a key, an environment variable, a default and a description, all "
         "in the table below. A run's configuration comes from three sources, each overriding "
         "the ones before it: the defaults, then `DTR_CONF` (several options in one string), "
         "then the individual `DTR_<NAME>` variables, such as `";
  out += table.empty() ? "DTR_BUDGET" : table.front().env;
  out +=
      "`. In short: defaults < `DTR_CONF` < `DTR_<NAME>`. An empty `DTR_<NAME>` variable, "
      "or one of whitespace only, counts as unset; one whose name is near an option's "
      "variable or `DTR_CONF` (`DTR_BUGDET`, `DTR_Budget`, `DTR_CONFIG`: Note [Misspelled "
      "variables]) is an error that names the one meant. An unknown key or a value that "
      "does not parse is an error that names the option and lists the valid keys. Options "
      "reach the runtime as a `Config` value; the libraries hold no global "
      "configuration.\n\n";
  out +=
      "The defaults are the simulator's (`dtr-sim`), which replay DTR's logs as DTR's own "
      "simulator does. The PyTorch host starts from a few defaults of its own, measured "
      "better for live training runs; the default column gives them as \"(PyTorch: ...)\", "
      "and a replay that models the host sets them in its `DTR_CONF`.\n\n";
  out += "## DTR_CONF syntax\n\n";
  out += "`DTR_CONF` is tokenized like PyTorch's `PYTORCH_CUDA_ALLOC_CONF`: comma-separated "
         "`key:value` pairs, with whitespace around keys and values ignored. A value that holds "
         "commas is bracketed: `key:[a:b,c:d]` gives the value `a:b,c:d`. For example:\n\n";
  out += "```sh\nDTR_CONF=\"budget:300M,policy:dtr_eq,search:sample\"\n```\n\n";
  out += "## Value syntax\n\n";
  append_syntax_line<Budget>(out);
  append_syntax_line<ByteSize>(out);
  append_syntax_line<uint32_t>(out);
  append_syntax_line<uint64_t>(out);
  append_syntax_line<double>(out);
  append_syntax_line<bool>(out);
  append_syntax_line<std::string>(out);
  out += "\n## Options\n\n";
  out += "| key | environment | default | range | description |\n";
  out += "| --- | --- | --- | --- | --- |\n";
  for (const OptionInfo& option : table) {
    const std::string_view def = option.default_value;
    std::string cell = def.empty() ? std::string("(empty)") : "`" + markdown_cell(def) + "`";
    if (option.pytorch_default)
      cell += " (PyTorch: `" + markdown_cell(option.pytorch_default) + "`)";
    out += "| `" + markdown_cell(option.key) + "` | `" + markdown_cell(option.env) + "` | " + cell +
           " | " + markdown_cell(option.range) + " | " + markdown_cell(option.doc) + " |\n";
  }
  return out;
}

}  // namespace dtr
