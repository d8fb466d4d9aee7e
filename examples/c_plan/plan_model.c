/* Plans a model with tileplan's C API, prints each phase's launches and estimate, and writes
 * the plan as JSON, then reads the JSON back as a runtime that loads a shipped plan would:
 * the example of docs/embedding.md, built against the installed package.
 *
 *   plan_model MODEL [OUT.json] [TARGET]
 *
 * MODEL is a bundled config name or a checkpoint directory; TARGET a bundled target name
 * (default: this machine's GPU, or h200 without one). Exit status 0, or 1 with the error. */
#include <stdio.h>

#include "tileplan/tileplan.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: plan_model MODEL [OUT.json] [TARGET]\n");
    return 2;
  }
  const int64_t prefill[] = {128};
  const int64_t decode[] = {1024};
  tileplan_plan_options o;
  tileplan_plan_options_init(&o);
  o.model = argv[1];
  o.target = argc > 3 ? argv[3] : NULL;
  o.prefill_tokens = prefill;
  o.num_prefill_tokens = 1;
  o.decode_contexts = decode;
  o.num_decode_contexts = 1;
  tileplan_plan* plan = NULL;
  tileplan_status* s = tileplan_plan_create(&o, &plan);
  if (s != NULL) {
    fprintf(stderr, "plan_model: planning failed (code %d): %s\n", (int)tileplan_status_code(s),
            tileplan_status_message(s));
    tileplan_status_free(s);
    return 1;
  }
  printf("tileplan %s (API %d)\n", tileplan_version(), tileplan_api_version());
  for (int i = 0; i < tileplan_plan_num_phases(plan); ++i) {
    printf("%s: %lld launches, %.1f us estimated\n", tileplan_plan_phase_name(plan, i),
           (long long)tileplan_plan_phase_launches(plan, i),
           tileplan_plan_phase_estimated_us(plan, i));
  }
  int status = 0;
  if (argc > 2) {
    char* json = NULL;
    size_t size = 0;
    s = tileplan_plan_serialize(plan, TILEPLAN_PLAN_JSON, &json, &size);
    if (s != NULL) {
      fprintf(stderr, "plan_model: %s\n", tileplan_status_message(s));
      status = 1;
    } else {
      FILE* f = fopen(argv[2], "wb");
      if (f == NULL || fwrite(json, 1, size, f) != size || fclose(f) != 0) {
        fprintf(stderr, "plan_model: cannot write %s\n", argv[2]);
        status = 1;
      } else {
        printf("wrote %s (%zu bytes)\n", argv[2], size);
        /* What a runtime given the file does: read it back, without planning. */
        tileplan_plan* loaded = NULL;
        tileplan_status* d = tileplan_plan_deserialize(json, size, TILEPLAN_PLAN_JSON, &loaded);
        if (d != NULL) {
          fprintf(stderr, "plan_model: reading the plan back: %s\n", tileplan_status_message(d));
          status = 1;
        } else {
          printf("read back: %d phases, %lld launches per decode step\n",
                 tileplan_plan_num_phases(loaded),
                 (long long)tileplan_plan_phase_launches(loaded,
                                                         tileplan_plan_num_phases(loaded) - 1));
        }
        tileplan_status_free(d);
        tileplan_plan_free(loaded);
      }
      tileplan_free(json);
    }
    tileplan_status_free(s);
  }
  tileplan_plan_free(plan);
  return status;
}
