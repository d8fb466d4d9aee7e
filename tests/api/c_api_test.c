/* The C API from C: planning a bundled config for a described target, the plan's phases,
 * every serialized form (owned and into a caller's buffer) and read back, and the errors a caller
 * meets (codes and messages), with everything freed (the sanitizer build checks for leaks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tileplan/tileplan.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* Expects `s` to carry `code` and a message containing `text`; frees it. */
static void expect_error(tileplan_status* s, tileplan_code code, const char* text) {
  CHECK(s != NULL);
  if (s == NULL) return;
  if (tileplan_status_code(s) != code || strstr(tileplan_status_message(s), text) == NULL) {
    fprintf(stderr, "expected code %d with \"%s\", got %d: %s\n", (int)code, text,
            (int)tileplan_status_code(s), tileplan_status_message(s));
    ++failures;
  }
  tileplan_status_free(s);
}

static tileplan_plan* plan_of(const char* model, const char* target) {
  const int64_t prefill[] = {16};
  const int64_t decode[] = {32};
  tileplan_plan_options o;
  tileplan_plan_options_init(&o);
  o.model = model;
  o.target = target;
  o.prefill_tokens = prefill;
  o.num_prefill_tokens = 1;
  o.decode_contexts = decode;
  o.num_decode_contexts = 1;
  tileplan_plan* plan = NULL;
  tileplan_status* s = tileplan_plan_create(&o, &plan);
  if (s != NULL) {
    fprintf(stderr, "tileplan_plan_create(%s): %s\n", model, tileplan_status_message(s));
    tileplan_status_free(s);
    ++failures;
  }
  return plan;
}

int main(void) {
  CHECK(tileplan_api_version() == TILEPLAN_API_VERSION);
  CHECK(strcmp(tileplan_version(), "0.1.0") == 0);
  CHECK(tileplan_status_code(NULL) == TILEPLAN_OK);
  CHECK(strcmp(tileplan_status_message(NULL), "") == 0);

  tileplan_plan* plan = plan_of("qwen3-0.6b", "h200");
  CHECK(plan != NULL);
  if (plan == NULL) return 1;
  CHECK(tileplan_plan_num_phases(plan) == 2);
  CHECK(strcmp(tileplan_plan_phase_name(plan, 0), "prefill T=16") == 0);
  CHECK(strcmp(tileplan_plan_phase_name(plan, 1), "decode B=1") == 0);
  CHECK(strcmp(tileplan_plan_phase_name(plan, 2), "") == 0);
  CHECK(tileplan_plan_phase_launches(plan, 1) == 143); /* docs/plan.md: 5 per layer + 3 */
  CHECK(tileplan_plan_phase_estimated_us(plan, 1) > 0);
  CHECK(tileplan_plan_phase_launches(plan, -1) == 0);

  /* Every form, owned; the binary form again into buffers that do and do not fit. */
  const tileplan_plan_format formats[] = {TILEPLAN_PLAN_TABLE, TILEPLAN_PLAN_TEXTPROTO,
                                          TILEPLAN_PLAN_JSON, TILEPLAN_PLAN_BINARY};
  const char* starts[] = {"plan qwen3-0.6b on h200", "format_version: 1", "{", NULL};
  for (int i = 0; i < 4; ++i) {
    char* data = NULL;
    size_t size = 0;
    tileplan_status* s = tileplan_plan_serialize(plan, formats[i], &data, &size);
    CHECK(s == NULL);
    tileplan_status_free(s);
    CHECK(data != NULL && size > 0);
    if (data == NULL) continue;
    CHECK(data[size] == '\0');
    if (starts[i] != NULL) CHECK(strncmp(data, starts[i], strlen(starts[i])) == 0);
    if (formats[i] != TILEPLAN_PLAN_TABLE) {
      /* Read back, the plan serializes to the same bytes. */
      tileplan_plan* back = NULL;
      tileplan_status* d = tileplan_plan_deserialize(data, size, formats[i], &back);
      CHECK(d == NULL && back != NULL);
      tileplan_status_free(d);
      if (back != NULL) {
        char* again = NULL;
        size_t again_size = 0;
        tileplan_status* s2 = tileplan_plan_serialize(back, formats[i], &again, &again_size);
        CHECK(s2 == NULL && again_size == size && memcmp(again, data, size) == 0);
        tileplan_status_free(s2);
        tileplan_free(again);
        CHECK(tileplan_plan_phase_launches(back, 1) == 143);
        tileplan_plan_free(back);
        back = NULL;
      }
      /* Half of it is no plan, and none is written. */
      expect_error(tileplan_plan_deserialize(data, size / 2, formats[i], &back),
                   TILEPLAN_INVALID_ARGUMENT, "plan");
      CHECK(back == NULL);
    } else {
      tileplan_plan* back = NULL;
      expect_error(tileplan_plan_deserialize(data, size, formats[i], &back),
                   TILEPLAN_INVALID_ARGUMENT, "a plan's table cannot be read back");
      CHECK(back == NULL);
    }
    if (formats[i] == TILEPLAN_PLAN_TEXTPROTO) {
      /* Another format version is refused by name; so is a plan that does not hold together
       * (here: a phase graph with a region reading a value nothing defines). */
      tileplan_plan* back = NULL;
      data[strlen("format_version: ")] = '2';
      expect_error(tileplan_plan_deserialize(data, size, formats[i], &back),
                   TILEPLAN_FAILED_PRECONDITION,
                   "format_version 2; this version of tileplan reads 1");
      const char broken[] =
          "format_version: 1 phases { name: \"decode B=1\" graph { name: \"g\" regions { kind: "
          "\"rms_norm\" "
          "operands: 7 results { name: \"y\" } } } }";
      expect_error(tileplan_plan_deserialize(broken, strlen(broken), formats[i], &back),
                   TILEPLAN_INVALID_ARGUMENT,
                   "decode B=1: graph: regions[0].operands[0]: value id 7 is not defined");
      CHECK(back == NULL);
    }
    if (formats[i] == TILEPLAN_PLAN_BINARY) {
      size_t needed = 0;
      char small[16];
      expect_error(
          tileplan_plan_serialize_into(plan, TILEPLAN_PLAN_BINARY, small, sizeof(small), &needed),
          TILEPLAN_OUT_OF_RANGE, "bytes; the buffer holds 16");
      CHECK(needed == size);
      char* buffer = malloc(size);
      size_t written = 0;
      tileplan_status* into =
          tileplan_plan_serialize_into(plan, TILEPLAN_PLAN_BINARY, buffer, size, &written);
      CHECK(into == NULL);
      tileplan_status_free(into);
      CHECK(written == size && memcmp(buffer, data, size) == 0);
      free(buffer);
    }
    tileplan_free(data);
  }
  char* unused = NULL;
  size_t unused_size = 0;
  expect_error(tileplan_plan_serialize(plan, (tileplan_plan_format)42, &unused, &unused_size),
               TILEPLAN_INVALID_ARGUMENT, "unknown plan format 42");
  tileplan_plan* unread = NULL;
  expect_error(tileplan_plan_deserialize("{}", 2, (tileplan_plan_format)42, &unread),
               TILEPLAN_INVALID_ARGUMENT, "unknown plan format 42");
  expect_error(tileplan_plan_deserialize(NULL, 2, TILEPLAN_PLAN_JSON, &unread),
               TILEPLAN_INVALID_ARGUMENT, "must not be NULL");
  expect_error(tileplan_plan_deserialize("{}", 2, TILEPLAN_PLAN_JSON, NULL),
               TILEPLAN_INVALID_ARGUMENT, "must not be NULL");
  expect_error(tileplan_plan_deserialize("", 0, TILEPLAN_PLAN_BINARY, &unread),
               TILEPLAN_FAILED_PRECONDITION, "format_version 0");
  CHECK(unread == NULL);
  CHECK(unused == NULL);

  /* Running needs a GPU (the test hides it): creating a runtime says so and writes none;
   * the checkpoint is opened first, so a bad one is named even here. */
  CHECK(tileplan_device_count() == 0);
  tileplan_runtime_options ro;
  tileplan_runtime_options_init(&ro);
  CHECK(ro.struct_size == sizeof(ro) && ro.seed == 1 && ro.checkpoint == NULL && ro.device == 0);
  tileplan_runtime* rt = NULL;
  expect_error(tileplan_runtime_create(plan, &ro, &rt), TILEPLAN_FAILED_PRECONDITION,
               "no CUDA device");
  ro.checkpoint = "/nonexistent/checkpoint";
  expect_error(tileplan_runtime_create(plan, &ro, &rt), TILEPLAN_NOT_FOUND,
               "/nonexistent/checkpoint");
  ro.struct_size = 0;
  expect_error(tileplan_runtime_create(plan, &ro, &rt), TILEPLAN_INVALID_ARGUMENT,
               "call tileplan_runtime_options_init");
  expect_error(tileplan_runtime_create(NULL, &ro, &rt), TILEPLAN_INVALID_ARGUMENT,
               "must not be NULL");
  CHECK(rt == NULL);
  int32_t token = 1, position = 0;
  float logit = 0;
  expect_error(tileplan_runtime_prefill(NULL, NULL, &token, 1, 1, &logit),
               TILEPLAN_INVALID_ARGUMENT, "runtime is NULL");
  expect_error(tileplan_runtime_decode(NULL, NULL, &token, &position, 1, &logit),
               TILEPLAN_INVALID_ARGUMENT, "runtime is NULL");
  expect_error(tileplan_runtime_generate(NULL, NULL, &token, 1, 1, 4, &token),
               TILEPLAN_INVALID_ARGUMENT, "runtime is NULL");
  expect_error(tileplan_runtime_synchronize(NULL, NULL), TILEPLAN_INVALID_ARGUMENT,
               "runtime is NULL");
  CHECK(tileplan_runtime_vocab_size(NULL) == 0 && tileplan_runtime_max_context(NULL) == 0 &&
        tileplan_runtime_prefill_batch(NULL) == 0);
  tileplan_runtime_free(NULL);
  tileplan_plan_free(plan);

  /* No target and no GPU (the test hides it): the bundled h200. */
  tileplan_plan* described = plan_of("qwen3-0.6b", NULL);
  if (described != NULL) {
    char* table = NULL;
    size_t table_size = 0;
    tileplan_status* s =
        tileplan_plan_serialize(described, TILEPLAN_PLAN_TABLE, &table, &table_size);
    CHECK(s == NULL && strstr(table, "plan qwen3-0.6b on h200 (NVIDIA H200") != NULL);
    tileplan_status_free(s);
    tileplan_free(table);
    tileplan_plan_free(described);
  }

  /* Errors: each names what is wrong, and writes no plan. */
  tileplan_plan_options o;
  tileplan_plan_options_init(&o);
  tileplan_plan* none = NULL;
  expect_error(tileplan_plan_create(&o, &none), TILEPLAN_INVALID_ARGUMENT,
               "options.model is required");
  o.model = "no-such-model";
  expect_error(tileplan_plan_create(&o, &none), TILEPLAN_NOT_FOUND,
               "--model no-such-model is neither an existing path nor a bundled config");
  o.model = "qwen3-0.6b";
  o.target = "sm_7";
  expect_error(tileplan_plan_create(&o, &none), TILEPLAN_NOT_FOUND, "sm_7");
  o.target = "h200";
  o.freeze = 1;
  expect_error(tileplan_plan_create(&o, &none), TILEPLAN_INVALID_ARGUMENT,
               "options.freeze needs options.tactic_cache");
  o.freeze = 0;
  o.tensor_parallel = 3; /* Qwen3-0.6B's 16 heads do not split over 3 GPUs */
  expect_error(tileplan_plan_create(&o, &none), TILEPLAN_INVALID_ARGUMENT,
               "num_attention_heads (16) is not a multiple of 3");
  o.tensor_parallel = 2;
  o.rank = 2;
  expect_error(tileplan_plan_create(&o, &none), TILEPLAN_INVALID_ARGUMENT, "options.rank (2)");
  o.tensor_parallel = 0;
  o.rank = 0;
  o.tactic_cache = "/nonexistent/tactics.db";
  expect_error(tileplan_plan_create(&o, &none), TILEPLAN_NOT_FOUND, "/nonexistent/tactics.db");
  o.tactic_cache = NULL;
  const int64_t too_long[] = {8192};
  o.prefill_tokens = too_long;
  o.num_prefill_tokens = 1;
  o.max_context = 4096;
  expect_error(tileplan_plan_create(&o, &none), TILEPLAN_INVALID_ARGUMENT, "8192");
  o.struct_size = 4;
  expect_error(tileplan_plan_create(&o, &none), TILEPLAN_INVALID_ARGUMENT,
               "does not cover the model field");
  expect_error(tileplan_plan_create(NULL, &none), TILEPLAN_INVALID_ARGUMENT, "must not be NULL");
  CHECK(none == NULL);
  tileplan_plan_free(NULL);
  tileplan_status_free(NULL);
  tileplan_free(NULL);

  if (failures == 0) printf("c_api_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
