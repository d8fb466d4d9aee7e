/* tileplan's C API: plan a decoder model for a GPU and read the plan (docs/embedding.md).
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

/* The version of this header's API; tileplan_api_version() is the library's. */
#define TILEPLAN_API_VERSION 1

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

/* What the plan says, without parsing it: its phases and, per phase, its name ("decode
 * B=1"; valid while the plan lives), launches per step and estimated microseconds. Phase
 * indices run over prefill phases in bucket order, then decode phases; an index out of range
 * gives 0 or "". Any thread. */
TILEPLAN_EXPORT int tileplan_plan_num_phases(const tileplan_plan* plan);
TILEPLAN_EXPORT const char* tileplan_plan_phase_name(const tileplan_plan* plan, int phase);
TILEPLAN_EXPORT int64_t tileplan_plan_phase_launches(const tileplan_plan* plan, int phase);
TILEPLAN_EXPORT double tileplan_plan_phase_estimated_us(const tileplan_plan* plan, int phase);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TILEPLAN_TILEPLAN_H_ */
