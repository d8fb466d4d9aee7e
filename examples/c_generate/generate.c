/* Greedy generation with tileplan's C API on the caller's CUDA stream and buffers: the
 * runtime example of docs/embedding.md, built against the installed package.
 *
 *   generate CHECKPOINT_DIR NEW_TOKENS TOKEN_ID...
 *
 * Plans the checkpoint for this machine's GPU with one prefill phase of exactly the prompt's
 * length, creates a runtime with its weights, then generates NEW_TOKENS tokens twice on a
 * stream of its own, from buffers it allocated itself:
 *  - "device loop": tileplan_runtime_generate, the whole loop on the device;
 *  - "host steps": tileplan_runtime_prefill, then one tileplan_runtime_decode per token,
 *    each argmax taken here on the host from logits copied out of the caller's buffer.
 * Prints both token lists. Exit status 0 when they agree, 1 on any error or disagreement, 77
 * when there is no GPU (nothing to run). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "tileplan/tileplan.h"

static int failed(const char* what, tileplan_status* s) {
  if (s == NULL) return 0;
  fprintf(stderr, "generate: %s failed (code %d): %s\n", what, (int)tileplan_status_code(s),
          tileplan_status_message(s));
  tileplan_status_free(s);
  return 1;
}

static int cuda_failed(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "generate: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

static int32_t argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = i;
  }
  return (int32_t)best;
}

static void print_tokens(const char* name, const int32_t* t, int64_t n) {
  printf("%s:", name);
  for (int64_t i = 0; i < n; ++i) printf(" %d", (int)t[i]);
  printf("\n");
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: generate CHECKPOINT_DIR NEW_TOKENS TOKEN_ID...\n");
    return 2;
  }
  const int64_t new_tokens = atoll(argv[2]);
  const int64_t prompt_len = argc - 3;
  if (new_tokens < 1) {
    fprintf(stderr, "generate: NEW_TOKENS must be at least 1\n");
    return 2;
  }
  if (tileplan_device_count() == 0) {
    printf("generate: no CUDA device here; nothing to run\n");
    return 77;
  }
  int32_t* prompt = malloc((size_t)prompt_len * sizeof(int32_t));
  int32_t* loop = malloc((size_t)new_tokens * sizeof(int32_t));
  int32_t* steps = malloc((size_t)new_tokens * sizeof(int32_t));
  for (int64_t i = 0; i < prompt_len; ++i) prompt[i] = (int32_t)atoi(argv[3 + i]);

  /* The plan: this GPU, one prefill phase of the prompt's length, batch 1, a KV cache that
   * holds the prompt and every new token. */
  const int64_t prefill[] = {prompt_len};
  const int64_t decode[] = {prompt_len + new_tokens};
  tileplan_plan_options o;
  tileplan_plan_options_init(&o);
  o.model = argv[1];
  o.prefill_tokens = prefill;
  o.num_prefill_tokens = 1;
  o.decode_contexts = decode;
  o.num_decode_contexts = 1;
  o.max_context = prompt_len + new_tokens;
  tileplan_plan* plan = NULL;
  if (failed("planning", tileplan_plan_create(&o, &plan))) return 1;

  tileplan_runtime_options ro;
  tileplan_runtime_options_init(&ro);
  ro.checkpoint = argv[1];
  tileplan_runtime* rt = NULL;
  tileplan_status* s = tileplan_runtime_create(plan, &ro, &rt);
  tileplan_plan_free(plan); /* the runtime holds its own copy */
  if (failed("creating the runtime", s)) return 1;
  const int64_t vocab = tileplan_runtime_vocab_size(rt);

  /* The caller's stream and device buffers. */
  cudaStream_t stream = NULL;
  int32_t *d_prompt = NULL, *d_out = NULL, *d_token = NULL, *d_position = NULL;
  float* d_logits = NULL;
  float* row = malloc((size_t)vocab * sizeof(float));
  if (cuda_failed("stream", cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) ||
      cuda_failed("malloc", cudaMalloc((void**)&d_prompt, (size_t)prompt_len * 4)) ||
      cuda_failed("malloc", cudaMalloc((void**)&d_out, (size_t)new_tokens * 4)) ||
      cuda_failed("malloc", cudaMalloc((void**)&d_token, 4)) ||
      cuda_failed("malloc", cudaMalloc((void**)&d_position, 4)) ||
      cuda_failed("malloc", cudaMalloc((void**)&d_logits, (size_t)(prompt_len * vocab) * 4))) {
    return 1;
  }
  int status = 0;

  /* The device loop: enqueued behind the prompt's upload, one wait at the end. */
  if (cuda_failed("upload", cudaMemcpyAsync(d_prompt, prompt, (size_t)prompt_len * 4,
                                            cudaMemcpyHostToDevice, stream)) ||
      failed("generate",
             tileplan_runtime_generate(rt, stream, d_prompt, 1, prompt_len, new_tokens, d_out)) ||
      cuda_failed("download", cudaMemcpyAsync(loop, d_out, (size_t)new_tokens * 4,
                                              cudaMemcpyDeviceToHost, stream)) ||
      failed("synchronize", tileplan_runtime_synchronize(rt, stream))) {
    status = 1;
  }

  /* Host steps: prefill into the caller's logits, then decode token by token. */
  if (status == 0 &&
      failed("prefill", tileplan_runtime_prefill(rt, stream, d_prompt, 1, prompt_len, d_logits))) {
    status = 1;
  }
  for (int64_t i = 0; status == 0 && i < new_tokens; ++i) {
    const float* last = i == 0 ? d_logits + (prompt_len - 1) * vocab : d_logits;
    if (cuda_failed("logits", cudaMemcpyAsync(row, last, (size_t)vocab * 4,
                                              cudaMemcpyDeviceToHost, stream)) ||
        failed("synchronize", tileplan_runtime_synchronize(rt, stream))) {
      status = 1;
      break;
    }
    steps[i] = argmax(row, vocab);
    if (i + 1 == new_tokens) break;
    const int32_t position = (int32_t)(prompt_len + i);
    if (cuda_failed("token", cudaMemcpyAsync(d_token, &steps[i], 4, cudaMemcpyHostToDevice,
                                             stream)) ||
        cuda_failed("position", cudaMemcpyAsync(d_position, &position, 4,
                                                cudaMemcpyHostToDevice, stream)) ||
        failed("decode", tileplan_runtime_decode(rt, stream, d_token, d_position, 1, d_logits))) {
      status = 1;
    }
  }
  if (status == 0) {
    print_tokens("device loop", loop, new_tokens);
    print_tokens("host steps", steps, new_tokens);
    for (int64_t i = 0; i < new_tokens; ++i) {
      if (loop[i] != steps[i]) {
        fprintf(stderr, "generate: the two disagree at token %lld\n", (long long)i);
        status = 1;
        break;
      }
    }
  }
  cudaStreamSynchronize(stream);
  tileplan_runtime_free(rt);
  cudaFree(d_prompt);
  cudaFree(d_out);
  cudaFree(d_token);
  cudaFree(d_position);
  cudaFree(d_logits);
  cudaStreamDestroy(stream);
  free(row);
  free(prompt);
  free(loop);
  free(steps);
  return status;
}
