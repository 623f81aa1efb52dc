// options.h: every runtime option, in one table.
//
// Each option has a name (the key in DTR_CONF), a DTR_* environment variable, a default
// and a one-line doc. The parser, --help texts and docs/config.md all come from the
// table (DTR_OPTIONS below). Options reach the runtime as a Config value passed to
// constructors; there is no global configuration in the libraries.
//
// Sources, later ones overriding earlier ones: defaults, then DTR_CONF="key:value,..."
// (tokenized like PyTorch's PYTORCH_CUDA_ALLOC_CONF: `key:value` pairs separated by
// commas, `key:[a:b]` bracketed values, True/False for booleans), then the individual
// DTR_<NAME> variables. An unknown key or a bad value is a ConfigError that names the
// problem and lists the valid keys.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dtr {

// A memory budget: unlimited, absolute bytes ("4G", "300M", "123456"), or a ratio of the
// baseline peak ("0.4"), which only a simulator that knows the baseline can resolve.
struct Budget {
  enum class Kind : uint8_t { unlimited, bytes, ratio };
  Kind kind = Kind::unlimited;
  uint64_t bytes = 0;
  double ratio = 0.0;

  // Bytes for a run whose unconstrained peak is `baseline_peak_bytes` (UINT64_MAX if unlimited).
  uint64_t resolve(uint64_t baseline_peak_bytes) const;
  std::string to_string() const;
  static Budget parse(std::string_view text);  // throws ConfigError
};

// A size in bytes, with no "unlimited" and no ratio: "4K", "16384", "1.5M".
struct ByteSize {
  uint64_t bytes = 0;
  std::string to_string() const;  // "16 KiB", "100 B": exact, in the largest unit that divides
};

// X(member, type, "key", "DTR_ENV", "default", "doc")
#define DTR_OPTIONS(X)                                                                             \
  X(budget, Budget, "budget", "DTR_BUDGET", "0",                                                   \
    "hard cap on live bytes: bytes with K/M/G suffix, or a ratio (0,1] of the baseline peak "      \
    "(in a PyTorch run: of the peak over the first two training steps, set from then on); "        \
    "0 = unlimited")                                                                               \
  X(policy, std::string, "policy", "DTR_POLICY", "auto",                                           \
    "eviction heuristic, by registry name (see `dtr-sim policies`)")                               \
  X(trial, std::string, "trial", "DTR_TRIAL", "replay",                                            \
    "policy auto: how it picks among its candidates. `replay`: at the end of the second training " \
    "step it replays the steps so far in the simulator under each candidate at the run's budget, " \
    "and runs the cheapest from the third step on (Note [Trial by replay]); `live`: it runs each " \
    "candidate for one step and then the cheapest (Note [Policy trial])")                          \
  X(search, std::string, "search", "DTR_SEARCH", "full",                                           \
    "candidate search: `full` scans every evictable storage, `sample` scores a random subset")     \
  X(sample, uint32_t, "sample", "DTR_SAMPLE", "0",                                                 \
    "candidates scored per eviction when search=sample; 0 = ceil(sqrt(pool size))")                \
  X(dead_first, bool, "dead_first", "DTR_DEAD_FIRST", "False",                                     \
    "evict storages only lineage still holds (rematerialized intermediates) before live ones, "    \
    "within dead_first_ratio (Note [Dead storages first]: better on chains and summed "            \
    "gradients, and near the least memory a training step needs); False = as DTR's simulator "     \
    "(simrd) does")                                                                                \
  X(dead_first_ratio, double, "dead_first_ratio", "DTR_DEAD_FIRST_RATIO", "16",                    \
    "with dead_first: take the best dead storage only while its score is at most this many "       \
    "times the best score of the usual search over the whole pool (Note [Dead storages first]); "  \
    "0 = always")                                                                                  \
  X(dead_lineage_factor, double, "dead_lineage_factor", "DTR_DEAD_LINEAGE_FACTOR", "1",            \
    "dtr_eq and dtr_eq_keep (and `auto` while it runs them): a live storage made by an op that "   \
    "read a storage the program has dropped costs this many times its score, at least 1: its "     \
    "remat goes through lineage that grows as the program drops more (Note [Live storages on "     \
    "dead lineage]); 1 = as DTR's simulator (simrd) does")                                         \
  X(remake_factor, double, "remake_factor", "DTR_REMAKE_FACTOR", "0",                              \
    "dtr_eq and dtr_eq_keep (and `auto` while it runs them): a storage remade more than twice in " \
    "one training step costs 1 + remake_factor x (remakes - 2) times its score, so what the "      \
    "policy keeps dropping and remaking stays (Note [Storages remade again and again]: 1 helps "   \
    "recurrent models that thrash, and is not the default as it cost some other thrashing runs "   \
    "more); 0 = as DTR's simulator (simrd) does")                                                  \
  X(keep_near_large, double, "keep_near_large", "DTR_KEEP_NEAR_LARGE", "0",                        \
    "keep a storage the program drops to the end of the training step while a storage the "        \
    "program holds, at most two ops downstream of it, is at least this many times its size, up "   \
    "to a 16th of the budget a step (Note "                                                        \
    "[Dropped inputs of large results]: a large result stays cheap to remake from small inputs; "  \
    "it cost more where many small storages sit near a large one; without optimizer steps it "     \
    "keeps to the end of the run); 0 = as the policy does: off, as DTR's simulator (simrd) does, " \
    "except under policy dtr_eq_keep (8), which `auto` tries as its fourth candidate")             \
  X(lazy_release, bool, "lazy_release", "DTR_LAZY_RELEASE", "False",                               \
    "simulator: keep a storage whose last reference goes until the next eviction request, "        \
    "which evicts all such first, as the PyTorch host does (Note [Lazy release]); the host "       \
    "refuses it")                                                                                  \
  X(relax_locks, bool, "relax_locks", "DTR_RELAX_LOCKS", "True",                                   \
    "when a nested remat finds nothing to evict, the frames below it let go of their parents "     \
    "and remake what is evicted meanwhile, instead of running out of memory (Note [Relaxed "       \
    "remat locks]); False = as DTR's simulator (simrd) does")                                      \
  X(seed, uint64_t, "seed", "DTR_SEED", "0", "seed for sampling and the random heuristic")         \
  X(max_overhead, double, "max_overhead", "DTR_MAX_OVERHEAD", "2.0",                               \
    "give up (status `thrash`) once total compute exceeds this multiple of the baseline; "         \
    "PyTorch: act (on_thrash) once remats since the budget was set (at most the last one to two "  \
    "minutes of ops) took more than (max_overhead - 1) times the program's own ops (Note "         \
    "[Thrashing in a live run]), and stop an op whose inputs' remats pass 10 s and 5 x "           \
    "max_overhead times all its ops (Note [Runaway cascades]); 0 = never")                         \
  X(on_thrash, std::string, "on_thrash", "DTR_ON_THRASH", "warn",                                  \
    "PyTorch: what a run does once max_overhead is passed: `warn` prints one line saying what "    \
    "to try; `raise` raises PyTorch's out-of-memory error at the next op, or stops a cascade of "  \
    "remats inside one op with it (once per budget); a runaway cascade is stopped either way")     \
  X(reserved_limit, Budget, "reserved_limit", "DTR_RESERVED_LIMIT", "0",                           \
    "PyTorch: cap on reserved bytes, what the allocator holds from the system (live blocks, "      \
    "cached free ones, small allocations): bytes with K/M/G suffix; 0 = unlimited. A request "     \
    "that would pass it releases cached segments, then moves live blocks (compact), then "         \
    "evicts to free a contiguous block. Under it each segment is its request's size, rounded "     \
    "to 2 MiB (Note [Segments under a reserved limit]). Simulator (allocator fake or host): the "  \
    "fake device's size, bytes or a ratio of the baseline peak (unset: the budget's size for "     \
    "fake, none for host)")                                                                        \
  X(compact, bool, "compact", "DTR_COMPACT", "True",                                               \
    "PyTorch: when the reserved limit refuses a segment, first copy live blocks out of the "       \
    "emptiest segments into free space elsewhere, so those segments can go back, and evict only "  \
    "if that is not enough; a block no running op holds and whose address was not handed out "     \
    "(numpy, non-aten ops) may move (Note [Compaction]); False = evict only. Simulator: the same " \
    "under its own reserved_limit (Note [Compaction in the engine])")                              \
  X(allocator, std::string, "allocator", "DTR_ALLOCATOR", "fake",                                  \
    "simulator's memory model: `fake` replays through the caching allocator over a fake "          \
    "device of exactly the budget (blocks, segments, fragmentation), as on a GPU; `host` over "    \
    "a fake device with no size, the budget capping allocated bytes only, as the PyTorch CPU "     \
    "host runs (Note [Host device]); `none` counts bytes only, as DTR's simulator does")           \
  X(debug, uint32_t, "debug", "DTR_DEBUG", "0",                                                    \
    "0..3; at 3 the engine checks all its invariants after every operation (slow)")                \
  X(trace, std::string, "trace", "DTR_TRACE", "", "record the run to this trace file")             \
  X(trace_constants, std::string, "trace_constants", "DTR_TRACE_CONSTANTS", "read",                \
    "PyTorch, with `trace`: where the trace declares a storage the run did not make (a "           \
    "parameter, a batch): `read`, where an op first reads it, as the run registers it (plans "     \
    "need this); `allocated`, where its memory was allocated, so a replay holds it as the run "    \
    "did (Note [Constants where they were allocated])")                                            \
  X(plan, std::string, "plan", "DTR_PLAN", "",                                                     \
    "warm start: follow this static plan (`dtr-plan --out`) made for the trace being run: drop "   \
    "what it recomputes, keep its checkpoints, fall back to the policy where the run departs "     \
    "from it (docs/planner.md)")                                                                   \
  X(plan_trace, std::string, "plan_trace", "DTR_PLAN_TRACE", "",                                   \
    "PyTorch: the trace the plan was made for (a DTR_TRACE of an earlier run of the same "         \
    "script); empty = the trace file the plan names, in the plan's directory")                     \
  X(remat, bool, "remat", "DTR_REMAT", "True",                                                     \
    "PyTorch: record lineage, evict and rematerialize under the budget; False = the caching "      \
    "allocator and its hard budget only (a baseline run)")                                         \
  X(pack_masks, bool, "pack_masks", "DTR_PACK_MASKS", "True",                                      \
    "PyTorch: once the budget binds, keep each dropout mask (bernoulli_) packed to one bit per "   \
    "element and unpack it at a remat instead of drawing it again (Note [Packed masks]); False "   \
    "= replay the draw")                                                                           \
  X(min_evictable, ByteSize, "min_evictable", "DTR_MIN_EVICTABLE", "16K",                          \
    "PyTorch: the least size of an op's result that may be evicted; smaller ones are pinned "      \
    "when recorded and freed when they die, so a small result the script keeps (a loss, a "        \
    "weight gradient) holds no lineage (Note [Small storages]); lower it for deep, narrow models " \
    "whose activations are all smaller; 0 = every result that holds memory")                       \
  X(op_cost, std::string, "op_cost", "DTR_OP_COST", "measured",                                    \
    "PyTorch: the remat cost the policy scores: `measured` = the op's own run time, as DTR's "     \
    "prototype; `median` = the median of the last runs of ops with the same operator, shapes "     \
    "and scalars (Note [Noisy op times])")                                                         \
  X(snapshot, std::string, "snapshot", "DTR_SNAPSHOT", "",                                         \
    "at exit, write a memory snapshot here: a pickle PyTorch's memory tools read (segments, "      \
    "blocks, device_traces; docs/observability.md)")                                               \
  X(snapshot_format, std::string, "snapshot_format", "DTR_SNAPSHOT_FORMAT", "dict",                \
    "`dict`: {segments, device_traces} as torch.cuda.memory._dump_snapshot writes since 2.0 "      \
    "(pytorch.org/memory_viz); `list`: the segment list of 1.13's memory_snapshot(), which "       \
    "1.13's `python -m torch.cuda._memory_viz` reads")                                             \
  X(snapshot_entries, uint32_t, "snapshot_entries", "DTR_SNAPSHOT_ENTRIES", "100000",              \
    "device_traces keeps the last this many allocator events (PyTorch's max_entries)")             \
  X(timeline, std::string, "timeline", "DTR_TIMELINE", "",                                         \
    "at exit, write a Chrome-trace/Perfetto JSON timeline here: ops, remats, evictions, "          \
    "allocated bytes and the budget")                                                              \
  X(report, bool, "report", "DTR_REPORT", "False", "print a summary of the run at exit")

// Defaults of the PyTorch host where they differ from the table's (Config::for_pytorch). The
// table's defaults are the simulator's, which replay DTR's logs as DTR's simulator (simrd)
// does (Note [Faithful to simrd] in eviction/engine.cpp); these were measured better in live
// training runs (docs/pytorch.md, "Dead storages first by default"). A replay that models
// the host sets them in its DTR_CONF (dtr.runs.HOST_MODEL).
// X(member, "key", "value")
#define DTR_PYTORCH_DEFAULTS(X)                                                                    \
  X(dead_first, "dead_first", "True") X(dead_lineage_factor, "dead_lineage_factor", "30")

// Ranges of the number options that have one, beyond what their type allows (no negatives,
// no fractions in an integer). A value outside is a ConfigError that names the range;
// docs/config.md prints it. `off_at_zero`: 0 is allowed too, and turns the option off.
// X(member, "key", least, most, off_at_zero)
#define DTR_OPTION_RANGES(X)                                                                       \
  X(dead_lineage_factor, "dead_lineage_factor", 1.0, kNoLimit, false)                              \
  X(keep_near_large, "keep_near_large", 1.0, kNoLimit, true)                                       \
  X(max_overhead, "max_overhead", 1.0, kNoLimit, true)                                             \
  X(debug, "debug", 0.0, 3.0, false)

// The text options that take one of a few words, and the words. Any other value is a
// ConfigError that lists them, at parse time, from every source (Note [Option choices] in
// core/options.cpp); docs/config.md prints them. Policy names are not here: they are the
// eviction layer's registry's (HeuristicRegistry::find).
// X(member, "key", "word, word, ...")
#define DTR_OPTION_CHOICES(X)                                                                      \
  X(trial, "trial", "replay, live")                                                                \
  X(search, "search", "full, sample")                                                              \
  X(on_thrash, "on_thrash", "warn, raise")                                                         \
  X(allocator, "allocator", "fake, host, none")                                                    \
  X(trace_constants, "trace_constants", "read, allocated")                                         \
  X(op_cost, "op_cost", "median, measured")                                                        \
  X(snapshot_format, "snapshot_format", "dict, list")

struct Config {
#define DTR_OPTIONS_MEMBER(member, type, key, env, def, doc) type member{};
  DTR_OPTIONS(DTR_OPTIONS_MEMBER)
#undef DTR_OPTIONS_MEMBER

  Config();  // all defaults from the table
  // The table's defaults with the PyTorch host's own (DTR_PYTORCH_DEFAULTS) over them; the
  // host applies DTR_CONF and DTR_* to this.
  static Config for_pytorch();

  // Sets one option from its text form; throws ConfigError (unknown key lists the valid keys).
  void set(std::string_view key, std::string_view value);
  // Applies a DTR_CONF string: "budget:4G,policy:dtr_eq,sample:64".
  void apply_conf(std::string_view conf);
  // Applies DTR_CONF, then each DTR_<NAME> variable that is set. Uses getenv only, safe
  // to call from a library initializer under LD_PRELOAD.
  void apply_environment();
  // Text form of one option's current value.
  std::string get(std::string_view key) const;
};

struct OptionInfo {
  const char* key;
  const char* env;
  const char* default_value;
  const char* doc;
  const char* pytorch_default = nullptr;  // the host's own default, if it has one
  std::string range;                      // "at least 1", "0 to 3"; empty: any value of its type
};
const std::vector<OptionInfo>& option_table();

// Throws ConfigError for a DTR_ variable in the environment whose name is near an option's
// (or DTR_CONF's) and is not one (Note [Misspelled variables] in
// core/misspelled_variables.cpp). Config::apply_environment calls it first.
void check_misspelled_variables();

// One `key:value` entry of a DTR_CONF string, brackets taken off (Note [DTR_CONF
// tokenizing] in core/options.cpp).
struct ConfEntry {
  std::string key;
  std::string value;
};
// The entries of a DTR_CONF string in order, keys not yet checked; throws ConfigError
// for an entry that does not parse (no ':', no key, an unclosed '[').
std::vector<ConfEntry> split_conf(std::string_view conf);

// Comma-separated list of valid keys, for error messages.
std::string valid_option_keys();
// The markdown page docs/config.md, generated from the table.
std::string config_markdown();

// "512", "4K", "300M", "2G", "1.5G" (binary multiples). Throws ConfigError.
uint64_t parse_size(std::string_view text);

// Equal but for the case of ASCII letters: option keys, size suffixes, "unlimited", and
// variables near an option's (Note [Misspelled variables]).
bool iequals(std::string_view a, std::string_view b);

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace dtr
