// The C API fuzz target without libFuzzer (any compiler): replays corpus files, so the
// kept corpus runs in every build's tests, and writes the seed corpus
// (tests/fuzz/corpus/api/) from the cases below when the struct layout changes:
//   api_fuzz_replay FILE_OR_DIR...
//   api_fuzz_replay --write-seeds DIR
#include "api_fuzz_input.h"

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {

using flashjit::fuzz::ApiFuzzInput;
namespace fs = std::filesystem;

void *fakePointer(uintptr_t index) {
  return reinterpret_cast<void *>((uintptr_t)0x7f0000000000 + index * 0x10000000);
}

// bf16, d128, 8 q heads over 2 kv heads, causal; BSHD batch 2, 128 x 256.
ApiFuzzInput baseline() {
  ApiFuzzInput in;
  fj_attention_desc_init(&in.desc);
  in.desc.dtype = FJ_DTYPE_BF16;
  in.desc.head_dim = 128;
  in.desc.causal = 1;
  in.desc.num_heads_q = 8;
  in.desc.num_heads_kv = 2;
  fj_forward_args &a = in.args;
  fj_forward_args_init(&a);
  a.q = fakePointer(1), a.k = fakePointer(2), a.v = fakePointer(3), a.o = fakePointer(4);
  a.batch = 2, a.seqlen_q = 128, a.seqlen_k = 256;
  a.q_head_stride = 128, a.q_seq_stride = 8 * 128, a.q_batch_stride = 128 * 8 * 128;
  a.k_head_stride = 128, a.k_seq_stride = 2 * 128, a.k_batch_stride = 256 * 2 * 128;
  a.v_head_stride = 128, a.v_seq_stride = 2 * 128, a.v_batch_stride = 256 * 2 * 128;
  a.o_head_stride = 128, a.o_seq_stride = 8 * 128, a.o_batch_stride = 128 * 8 * 128;
  return in;
}

struct Seed {
  const char *name;
  std::function<void(ApiFuzzInput &)> mutate;
};

std::vector<Seed> seeds() {
  using I = ApiFuzzInput;
  return {
      {"valid_bf16_d128_gqa_causal", [](I &) {}},
      {"valid_fp16_d64_mha", [](I &in) {
         in.desc.dtype = FJ_DTYPE_FP16, in.desc.head_dim = 64, in.desc.causal = 0;
         in.desc.num_heads_kv = 8;
         fj_forward_args &a = in.args;
         a.q_head_stride = 64, a.q_seq_stride = 512, a.q_batch_stride = 128 * 512;
         a.k_head_stride = 64, a.k_seq_stride = 512, a.k_batch_stride = 256 * 512;
         a.v_head_stride = 64, a.v_seq_stride = 512, a.v_batch_stride = 256 * 512;
         a.o_head_stride = 64, a.o_seq_stride = 512, a.o_batch_stride = 128 * 512;
       }},
      {"valid_mqa_decode", [](I &in) {
         in.desc.num_heads_kv = 1;
         in.args.seqlen_q = 1, in.args.k_head_stride = 0, in.args.v_head_stride = 0;
       }},
      {"valid_head_dim_v_differs", [](I &in) { in.desc.head_dim_v = 64; }},
      {"valid_varlen_lse", [](I &in) {
         in.args.cu_seqlens_q = (const int32_t *)fakePointer(6);
         in.args.cu_seqlens_k = (const int32_t *)fakePointer(7);
         in.args.lse = (float *)fakePointer(8);
         in.args.total_q = 200;
       }},
      {"valid_lse", [](I &in) { in.args.lse = (float *)fakePointer(8); }},
      {"valid_hints_and_scale", [](I &in) {
         in.desc.seqlen_q_hint = 4096, in.desc.seqlen_k_hint = 8192, in.desc.batch_hint = 4;
         in.desc.softmax_scale = 0.0625f;
       }},
      {"noop_batch0", [](I &in) { in.args.batch = 0, in.args.q = in.args.o = nullptr; }},
      {"noop_seqlen_q0", [](I &in) { in.args.seqlen_q = 0; }},
      {"no_keys", [](I &in) { in.args.seqlen_k = 0, in.args.k = in.args.v = nullptr; }},
      {"newer_desc_zero_tail", [](I &in) {
         in.flags = flashjit::fuzz::kFlagDescTail;
         in.tail.assign(16, 0);
       }},
      {"newer_args_nonzero_tail", [](I &in) {
         in.flags = flashjit::fuzz::kFlagArgsTail;
         in.tail.assign(24, 0), in.tail[5] = 7;
       }},
      {"desc_size_small", [](I &in) {
         in.flags = flashjit::fuzz::kFlagDescSize, in.descSize = 12;
       }},
      // A 0.1 caller: the description ends before `backward` (accepted, reads as 0).
      {"desc_size_0_1", [](I &in) {
         in.flags = flashjit::fuzz::kFlagDescSize;
         in.descSize = offsetof(fj_attention_desc, backward);
         in.desc.backward = 1;  // beyond its struct_size: must not be read
       }},
      // Backward arguments that differ from the forward's: a dv stride off by 4, and
      // deterministic = 3 (tail bytes 23 and 24; backwardArgsOf).
      {"backward_strides_and_flags", [](I &in) {
         in.tail.assign(26, 0), in.tail[23] = 4, in.tail[24] = 3, in.tail[25] = 0x21;
       }},
      // Attention features (0.3). User code: the pointer's value is the text's length,
      // the tail its bytes (api_fuzz_args.cpp, fuzzedText).
      {"valid_features", [](I &in) {
         in.desc.window = 1, in.desc.window_left = 256, in.desc.window_right = 0;
         in.desc.softcap = 30.0f, in.desc.alibi = 1;
         in.args.alibi_slopes = (const float *)fakePointer(9);
         in.args.alibi_batch_stride = 8;
       }},
      {"valid_user_code", [](I &in) {
         const char text[] = "return score * args.scalar[0];";
         in.tail.assign(text, text + sizeof(text) - 1);
         in.desc.score_mod = (const char *)(uintptr_t)(sizeof(text) - 1);
         in.desc.mask_mod = (const char *)(uintptr_t)(sizeof(text) - 1);
         in.args.mod_args.scalar[0] = 0.5f;
         in.desc.tuning_mod_args = (const fj_mod_args *)1;
       }},
      {"score_mod_too_long", [](I &in) {
         in.tail.assign(1, 'x');
         in.desc.score_mod = (const char *)(uintptr_t)(64 * 1024 + 1);
       }},
      {"window_both_unbounded", [](I &in) {
         in.desc.window = 1, in.desc.window_left = -1, in.desc.window_right = -1;
       }},
      {"window_left_negative", [](I &in) { in.desc.window = 1, in.desc.window_left = -5; }},
      {"window_sides_without_window", [](I &in) { in.desc.window_right = 64; }},
      {"softcap_nan", [](I &in) { in.desc.softcap = __builtin_nanf(""); }},
      {"alibi_without_slopes", [](I &in) { in.desc.alibi = 1; }},
      {"alibi_stride_negative", [](I &in) {
         in.desc.alibi = 1;
         in.args.alibi_slopes = (const float *)fakePointer(9);
         in.args.alibi_batch_stride = -8;
       }},
      {"backward_with_feature", [](I &in) { in.desc.backward = 1, in.desc.softcap = 30.0f; }},
      // A 0.2 caller: the description ends with `backward` and its padding, where
      // `window` now is; garbage there (and in the features after it) is not read.
      {"desc_size_0_2", [](I &in) {
         in.flags = flashjit::fuzz::kFlagDescSize;
         in.descSize = (offsetof(fj_attention_desc, backward) + 4 + 7) / 8 * 8;
         in.desc.window = 1, in.desc.window_left = in.desc.window_right = -1;
         in.desc.softcap = __builtin_nanf("");
       }},
      {"args_size_0_2", [](I &in) {
         in.flags = flashjit::fuzz::kFlagArgsSize;
         in.argsSize = offsetof(fj_forward_args, alibi_slopes);
       }},
      {"args_size_garbage", [](I &in) {
         in.flags = flashjit::fuzz::kFlagArgsSize, in.argsSize = 0xdeadbeefcafeULL;
       }},
      {"desc_size_0_4", [](I &in) {  // 0.5's fields read as zero: tune_lengths AUTO
         in.flags = flashjit::fuzz::kFlagDescSize;
         in.descSize = offsetof(fj_attention_desc, reserved_04) + sizeof(int32_t);
       }},
      {"desc_size_cuts_mask_mod", [](I &in) {
         in.flags = flashjit::fuzz::kFlagDescSize;
         in.desc.mask_mod = "return true;";
         in.descSize = offsetof(fj_attention_desc, mask_mod) + 3;
       }},
      {"tune_lengths_ladder", [](I &in) { in.desc.tune_lengths = FJ_TUNE_LENGTHS_LADDER; }},
      {"tune_lengths_unknown", [](I &in) { in.desc.tune_lengths = 7; }},
      // Block masks (0.6): args->block_mask is a handle the checks never dereference;
      // it needs a mask_mod, and a 0.5 caller's struct_size ends before it.
      {"block_mask_without_mask_mod", [](I &in) {
         in.args.block_mask = (fj_block_mask)fakePointer(10);
       }},
      {"valid_block_mask", [](I &in) {
         const char text[] = "return kv_idx <= q_idx || kv_idx < args.integer[0];";
         in.tail.assign(text, text + sizeof(text) - 1);
         in.desc.mask_mod = (const char *)(uintptr_t)(sizeof(text) - 1);
         in.args.mod_args.integer[0] = 16;
         in.args.block_mask = (fj_block_mask)fakePointer(10);
       }},
      {"args_size_0_5", [](I &in) {  // block_mask beyond the size: read as NULL
         in.flags = flashjit::fuzz::kFlagArgsSize;
         in.argsSize = offsetof(fj_forward_args, block_mask);
         in.args.block_mask = (fj_block_mask)fakePointer(10);
       }},
      {"args_size_cuts_block_mask", [](I &in) {
         in.flags = flashjit::fuzz::kFlagArgsSize;
         in.argsSize = offsetof(fj_forward_args, block_mask) + 3;
         in.args.block_mask = (fj_block_mask)fakePointer(10);
       }},
      {"desc_null", [](I &in) { in.flags = flashjit::fuzz::kFlagDescNull; }},
      {"args_null", [](I &in) { in.flags = flashjit::fuzz::kFlagArgsNull; }},
      {"dtype_unset", [](I &in) { in.desc.dtype = 0; }},
      {"head_dim_100", [](I &in) { in.desc.head_dim = 100; }},
      {"head_dim_264", [](I &in) { in.desc.head_dim = 264; }},
      {"head_dim_negative", [](I &in) { in.desc.head_dim = -8; }},
      {"heads_not_multiple", [](I &in) { in.desc.num_heads_kv = 3; }},
      {"heads_zero", [](I &in) { in.desc.num_heads_q = 0; }},
      {"scale_nan", [](I &in) { in.desc.softmax_scale = __builtin_nanf(""); }},
      {"scale_huge", [](I &in) { in.desc.softmax_scale = 3e38f; }},
      {"batch_negative", [](I &in) { in.args.batch = -1; }},
      {"seqlen_k_huge", [](I &in) { in.args.seqlen_k = 0x7fffffff; }},
      {"q_null", [](I &in) { in.args.q = nullptr; }},
      {"v_misaligned", [](I &in) { in.args.v = (const char *)in.args.v + 8; }},
      {"lse_misaligned", [](I &in) { in.args.lse = (float *)((char *)fakePointer(8) + 1); }},
      {"q_seq_stride_zero", [](I &in) { in.args.q_seq_stride = 0; }},
      {"k_head_stride_negative", [](I &in) { in.args.k_head_stride = -128; }},
      {"o_batch_stride_odd", [](I &in) { in.args.o_batch_stride = 1001; }},
      {"stride_overflow", [](I &in) { in.args.v_batch_stride = 0x7ffffffffffffff8LL; }},
      {"cu_seqlens_q_only", [](I &in) { in.args.cu_seqlens_q = (const int32_t *)fakePointer(6); }},
      {"cu_seqlens_without_max", [](I &in) {
         in.args.cu_seqlens_q = (const int32_t *)fakePointer(6);
         in.args.cu_seqlens_k = (const int32_t *)fakePointer(7);
         in.args.seqlen_q = 0, in.args.batch = 3;
       }},
      {"varlen_lse_without_total", [](I &in) {
         in.args.cu_seqlens_q = (const int32_t *)fakePointer(6);
         in.args.cu_seqlens_k = (const int32_t *)fakePointer(7);
         in.args.lse = (float *)fakePointer(8);
       }},
  };
}

int writeSeeds(const fs::path &dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  int written = 0;
  for (const Seed &seed : seeds()) {
    ApiFuzzInput in = baseline();
    seed.mutate(in);
    std::vector<uint8_t> bytes = in.encode();
    std::ofstream out(dir / seed.name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(bytes.data()), (std::streamsize)bytes.size());
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", (dir / seed.name).c_str());
      return 1;
    }
    ++written;
  }
  std::printf("wrote %d seeds to %s\n", written, dir.c_str());
  return 0;
}

int replay(const fs::path &file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 3 && std::strcmp(argv[1], "--write-seeds") == 0)
    return writeSeeds(argv[2]);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR... | --write-seeds DIR\n", argv[0]);
    return 2;
  }
  int files = 0;
  for (int i = 1; i < argc; ++i) {
    fs::path path = argv[i];
    if (fs::is_directory(path)) {
      for (const auto &entry : fs::directory_iterator(path))
        if (entry.is_regular_file())
          replay(entry.path()), ++files;
    } else {
      replay(path), ++files;
    }
  }
  std::printf("replayed %d inputs: no failure\n", files);
  return files > 0 ? 0 : 1;  // an empty corpus is a broken setup, not a pass
}
