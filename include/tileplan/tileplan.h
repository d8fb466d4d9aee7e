/* tileplan's C API: plan a decoder model for a GPU, read the plan, and run it on the caller's
 * CUDA stream with the caller's buffers (docs/embedding.md).
 *
 * A plain C header; the C++ library stays behind it and no C++ exception crosses it.
 *
 * Conventions.
 *  - Every call that can fail returns a tileplan_status*: NULL on success, else an object the
 *    caller frees with tileplan_status_free, holding a code (tileplan_code, the values of
 *    absl::StatusCode) and a message. On failure no output parameter is written.
 *  - Objects are opaque handles, created by a *_create call and freed by the matching *_free
 *    (NULL is accepted and ignored by every *_free).
 *  - Parameter structs carry their own size first (struct_size), set by their *_init
 *    function: a newer library reads only the fields an older caller's size covers, so
 *    structs can grow without breaking callers.
 *  - Thread safety, per function below: "any thread" functions may run concurrently on
 *    different objects and, for const objects, on the same one.
 */
#ifndef TILEPLAN_TILEPLAN_H_
#define TILEPLAN_TILEPLAN_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define TILEPLAN_EXPORT __attribute__((visibility("default")))
#else
#define TILEPLAN_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header's API; tileplan_api_version() is the library's. 2 added
 * tileplan_plan_deserialize. */
#define TILEPLAN_API_VERSION 2

typedef enum tileplan_code {
  TILEPLAN_OK = 0,
  TILEPLAN_CANCELLED = 1,
  TILEPLAN_UNKNOWN = 2,
  TILEPLAN_INVALID_ARGUMENT = 3,
  TILEPLAN_DEADLINE_EXCEEDED = 4,
  TILEPLAN_NOT_FOUND = 5,
  TILEPLAN_ALREADY_EXISTS = 6,
  TILEPLAN_PERMISSION_DENIED = 7,
  TILEPLAN_RESOURCE_EXHAUSTED = 8,
  TILEPLAN_FAILED_PRECONDITION = 9,
  TILEPLAN_ABORTED = 10,
  TILEPLAN_OUT_OF_RANGE = 11,
  TILEPLAN_UNIMPLEMENTED = 12,
  TILEPLAN_INTERNAL = 13,
  TILEPLAN_UNAVAILABLE = 14,
  TILEPLAN_DATA_LOSS = 15,
  TILEPLAN_UNAUTHENTICATED = 16,
  /* Not a code: makes the enum int-sized in C and C++ alike, so any int a caller passes is a
   * valid value of the type. */
  TILEPLAN_CODE_MAX_ENUM = 0x7fffffff
} tileplan_code;

typedef struct tileplan_status tileplan_status;

/* TILEPLAN_OK for NULL. Any thread. */
TILEPLAN_EXPORT tileplan_code tileplan_status_code(const tileplan_status* status);
/* "" for NULL; valid until the status is freed. Any thread. */
TILEPLAN_EXPORT const char* tileplan_status_message(const tileplan_status* status);
/* Any thread. */
TILEPLAN_EXPORT void tileplan_status_free(tileplan_status* status);

/* The library's version ("0.1.0") and API version (TILEPLAN_API_VERSION of its build). Any
 * thread. */
TILEPLAN_EXPORT const char* tileplan_version(void);
TILEPLAN_EXPORT int tileplan_api_version(void);

/* Frees memory the library returned to the caller (tileplan_plan_serialize). Any thread. */
TILEPLAN_EXPORT void tileplan_free(void* memory);

/* ------------------------------------------------------------------------------------------
 * Planning (no GPU needed). */

typedef struct tileplan_plan_options {
  size_t struct_size; /* sizeof(tileplan_plan_options), set by tileplan_plan_options_init */
  /* Required: a bundled config name ("qwen3-0.6b"), a checkpoint directory, or its
   * config.json. */
  const char* model;
  /* A bundled target name or alias ("h200", "sm_90") or a target .textproto path; NULL or "":
   * the current GPU's (device 0), or h200 when there is none. */
  const char* target;
  /* One prefill phase per token count; NULL/0: {128, 512, 2048}, as the tools. */
  const int64_t* prefill_tokens;
  size_t num_prefill_tokens;
  /* Decode contexts: the longest sets the decode estimates' context; NULL/0: {128, 512,
   * 2048}, as the tools. */
  const int64_t* decode_contexts;
  size_t num_decode_contexts;
  int64_t batch;       /* sequences per phase; 0: 1 */
  int64_t max_context; /* KV-cache rows per sequence; 0: the longest prefill or decode length */
  /* Nonzero: prefill phases compute each sequence's last token's logits only. */
  int prefill_last_token_logits;
  /* A tactic store (docs/tuner.md) whose measured tactics the plan takes; NULL: none. */
  const char* tactic_cache;
  /* Nonzero (with tactic_cache): fail with FAILED_PRECONDITION when a lookup finds no
   * measured tactic. */
  int freeze;
  /* Tensor parallelism (docs/plan.md): plan rank `rank` of `tensor_parallel` GPUs of one
   * host, each on its share of the heads, widths and vocabulary, with all_reduce and
   * all_gather steps; 0: one GPU, the whole model. INVALID_ARGUMENT naming the field when a
   * count does not divide or rank is outside [0, tensor_parallel). */
  int64_t tensor_parallel;
  int64_t rank;
} tileplan_plan_options;

/* Sets struct_size and the defaults above (everything else zero or NULL). Any thread. */
TILEPLAN_EXPORT void tileplan_plan_options_init(tileplan_plan_options* options);

typedef struct tileplan_plan tileplan_plan;

/* Plans options->model; *plan receives the plan on success. Errors: INVALID_ARGUMENT for
 * options the planner refuses (naming the option) or a NULL argument, NOT_FOUND for a model
 * that is neither a path nor a bundled config, the config's own errors (naming the field),
 * FAILED_PRECONDITION for a region no kernel family can implement or a frozen store's miss.
 * Any thread; plans nothing twice. */
TILEPLAN_EXPORT tileplan_status* tileplan_plan_create(const tileplan_plan_options* options,
                                                      tileplan_plan** plan);
/* Any thread (not concurrently with other calls on the same plan). */
TILEPLAN_EXPORT void tileplan_plan_free(tileplan_plan* plan);

typedef enum tileplan_plan_format {
  TILEPLAN_PLAN_TABLE = 0,     /* --show-plan's table, identical layers folded */
  TILEPLAN_PLAN_TEXTPROTO = 1, /* protobuf text */
  TILEPLAN_PLAN_JSON = 2,      /* protobuf JSON, field names as in the .proto */
  TILEPLAN_PLAN_BINARY = 3,    /* protobuf wire bytes, deterministic */
  /* Not a format: makes the enum int-sized, so an unknown value a caller passes is refused
   * (INVALID_ARGUMENT) rather than undefined. */
  TILEPLAN_PLAN_FORMAT_MAX_ENUM = 0x7fffffff
} tileplan_plan_format;

/* The plan in `format` (docs/plan.md: the format and its versioning), in memory the library
 * allocates: *data receives it (NUL-terminated, the terminator not counted in *size; binary
 * data may contain NULs) and the caller frees it with tileplan_free. Any thread. */
TILEPLAN_EXPORT tileplan_status* tileplan_plan_serialize(const tileplan_plan* plan,
                                                         tileplan_plan_format format, char** data,
                                                         size_t* size);
/* The same into the caller's buffer of `capacity` bytes: *size receives the bytes needed
 * (without a terminator), written when they fit; OUT_OF_RANGE naming both sizes when they do
 * not (then *size is still set, and nothing is written). Any thread. */
TILEPLAN_EXPORT tileplan_status* tileplan_plan_serialize_into(const tileplan_plan* plan,
                                                              tileplan_plan_format format,
                                                              void* buffer, size_t capacity,
                                                              size_t* size);

/* A plan read back from `size` bytes of `format` (TEXTPROTO, JSON or BINARY, as
 * tileplan_plan_serialize writes them, here or by another build of the same format_version),
 * to inspect, serialize or run like a plan of tileplan_plan_create; *plan receives it on
 * success. The bytes are checked as far as running needs without a GPU: every phase's graph
 * parses and verifies, the phases share one KV-cache layout, the weights' shapes agree.
 * Errors: INVALID_ARGUMENT for TABLE or an unknown format, a NULL argument, bytes that do not
 * parse (naming the first error) or a plan that fails those checks (naming what);
 * FAILED_PRECONDITION for another format_version (docs/plan.md, "Versioning"). Any thread. */
TILEPLAN_EXPORT tileplan_status* tileplan_plan_deserialize(const void* data, size_t size,
                                                           tileplan_plan_format format,
                                                           tileplan_plan** plan);

/* What the plan says, without parsing it: its phases and, per phase, its name ("decode
 * B=1"; valid while the plan lives), launches per step and estimated microseconds. Phase
 * indices run over prefill phases in bucket order, then decode phases; an index out of range
 * gives 0 or "". Any thread. */
TILEPLAN_EXPORT int tileplan_plan_num_phases(const tileplan_plan* plan);
TILEPLAN_EXPORT const char* tileplan_plan_phase_name(const tileplan_plan* plan, int phase);
TILEPLAN_EXPORT int64_t tileplan_plan_phase_launches(const tileplan_plan* plan, int phase);
TILEPLAN_EXPORT double tileplan_plan_phase_estimated_us(const tileplan_plan* plan, int phase);

/* ------------------------------------------------------------------------------------------
 * Running a plan (needs a GPU and its driver).
 *
 * A runtime does every expensive thing once, in tileplan_runtime_create: it uploads the
 * weights, allocates the KV cache and the plan's arena, compiles the plan's kernels with NVRTC
 * (or takes them from the disk cache) and captures each phase as a CUDA Graph. Its calls then
 * enqueue work on a stream the caller owns and read and write buffers the caller owns, each
 * device memory of the runtime's device or host memory (told apart by unified addressing):
 *  - with device memory only, a call returns once the work is enqueued, without waiting;
 *  - given any host pointer, a call returns when the stream has run the work, and reports
 *    the kernels' errors as tileplan_runtime_synchronize does.
 * Arguments are checked before anything is enqueued (INVALID_ARGUMENT, nothing run). Errors
 * the kernels find in device-resident inputs (a token id outside the vocabulary, a position
 * outside the KV cache: the row is skipped) are reported by the next
 * tileplan_runtime_synchronize.
 * The runtime's KV cache and arena are shared by all its calls: use one stream per runtime,
 * or order its work on several streams yourself (events). */

/* A CUDA stream: cudaStream_t and CUstream are `struct CUstream_st*`, so either may be passed;
 * NULL is the legacy default stream. */
typedef struct CUstream_st* tileplan_stream;

/* The CUDA devices this process can use; 0 without a GPU or driver (never fails). Any
 * thread. */
TILEPLAN_EXPORT int tileplan_device_count(void);

typedef struct tileplan_runtime_options {
  size_t struct_size; /* sizeof(tileplan_runtime_options), set by tileplan_runtime_options_init */
  /* A checkpoint directory (config.json + safetensors) whose weights the runtime loads; it
   * must hold the model the plan was made for. NULL or "": random weights of the plan's
   * shapes (seed). */
  const char* checkpoint;
  uint64_t seed; /* the random weights' seed; 0: 1 */
  int device;    /* the CUDA device's ordinal */
  /* Nonzero: launch every kernel from the host on every call instead of replaying the
   * phases' CUDA Graphs (for comparison and debugging). */
  int host_launches;
} tileplan_runtime_options;

/* Sets struct_size and the defaults above (everything else zero or NULL). Any thread. */
TILEPLAN_EXPORT void tileplan_runtime_options_init(tileplan_runtime_options* options);

typedef struct tileplan_runtime tileplan_runtime;

/* Creates a runtime for `plan` (which it copies; the plan may be freed) on options->device.
 * Errors: FAILED_PRECONDITION without a usable GPU ("no CUDA device: ...") or for a plan made
 * for another architecture; RESOURCE_EXHAUSTED naming the bytes asked and free; the
 * checkpoint's errors naming the tensor; the NVRTC log of a kernel that does not compile.
 * Any thread. */
TILEPLAN_EXPORT tileplan_status* tileplan_runtime_create(const tileplan_plan* plan,
                                                         const tileplan_runtime_options* options,
                                                         tileplan_runtime** runtime);
/* Waits for nothing: the caller finishes the runtime's work on its streams first. One
 * thread, not concurrently with other calls on the runtime. */
TILEPLAN_EXPORT void tileplan_runtime_free(tileplan_runtime* runtime);

/* The logits' width, the KV-cache rows per sequence and the prefill phases' batch (the plan's
 * options); 0 for NULL. Any thread. */
TILEPLAN_EXPORT int64_t tileplan_runtime_vocab_size(const tileplan_runtime* runtime);
TILEPLAN_EXPORT int64_t tileplan_runtime_max_context(const tileplan_runtime* runtime);
TILEPLAN_EXPORT int64_t tileplan_runtime_prefill_batch(const tileplan_runtime* runtime);

/* The calls below: one thread at a time per runtime. */

/* Runs prompts `tokens` [batch, num_tokens] (int32, row-major; batch the plan's prefill
 * batch) from an empty KV cache at positions 0..num_tokens-1, in the smallest prefill phase
 * holding num_tokens. `logits` (NULL: not copied out) receives float32 [batch, num_tokens, V],
 * or [batch, 1, V] (each prompt's last token) for a plan made with prefill_last_token_logits.
 * INVALID_ARGUMENT when no prefill phase holds num_tokens for this batch. */
TILEPLAN_EXPORT tileplan_status* tileplan_runtime_prefill(tileplan_runtime* runtime,
                                                          tileplan_stream stream,
                                                          const int32_t* tokens, int64_t batch,
                                                          int64_t num_tokens, float* logits);
/* One decode step for a decode phase of exactly `batch` sequences: token b at position
 * positions[b], attending to cache rows 0..positions[b] of sequence b. `logits` receives
 * float32 [batch, V]. */
TILEPLAN_EXPORT tileplan_status* tileplan_runtime_decode(tileplan_runtime* runtime,
                                                         tileplan_stream stream,
                                                         const int32_t* tokens,
                                                         const int32_t* positions, int64_t batch,
                                                         float* logits);
/* Greedy generation on the device: the prefill of `prompts` [batch, num_tokens], the argmax
 * of each prompt's last logits, then new_tokens - 1 replays of the decode phase's
 * decode-and-argmax graph with no host work between tokens. `tokens_out` receives int32
 * [batch, new_tokens]. Needs a decode phase of `batch` sequences; INVALID_ARGUMENT when
 * num_tokens + new_tokens - 1 exceeds the KV cache. */
TILEPLAN_EXPORT tileplan_status* tileplan_runtime_generate(tileplan_runtime* runtime,
                                                           tileplan_stream stream,
                                                           const int32_t* prompts, int64_t batch,
                                                           int64_t num_tokens, int64_t new_tokens,
                                                           int32_t* tokens_out);
/* Waits for `stream`, then reports (and clears) an error the kernels raised since the last
 * report: INVALID_ARGUMENT naming the flat token index. */
TILEPLAN_EXPORT tileplan_status* tileplan_runtime_synchronize(tileplan_runtime* runtime,
                                                              tileplan_stream stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TILEPLAN_TILEPLAN_H_ */
