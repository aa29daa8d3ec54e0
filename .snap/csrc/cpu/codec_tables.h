// Lookup tables the CPU kernels decode E4M3 and NVFP4 with (built once from the exact scalar codecs in
// msa/nvfp4_codec.h, so they are bit-exact to shared/SPEC.md §2 by construction).
#pragma once

#include <cstdint>

#include "msa/nvfp4_codec.h"

namespace msa::cpu {

// Every E4M3 byte as fp32 (exact).
struct E4M3Table {
  float value[256];
  E4M3Table() {
    for (int i = 0; i < 256; ++i) value[i] = nvfp4::e4m3_to_float(static_cast<uint8_t>(i));
  }
};
inline const E4M3Table& e4m3_table() {
  static const E4M3Table table;
  return table;
}

// Every (E4M3 scale byte, E2M1 code) as the value the MSA Q8KV4 kernels multiply: the NVFP4 -> E4M3 dequant
// of SPEC §2, e4m3_rne_satfinite(e2m1 * scale) (the product is exact in fp32), widened to fp32.
struct Nvfp4Table {
  float value[256][16];
  Nvfp4Table() {
    for (int s = 0; s < 256; ++s) {
      const float scale = nvfp4::e4m3_to_float(static_cast<uint8_t>(s));
      for (uint32_t code = 0; code < 16; ++code) {
        value[s][code] = nvfp4::e4m3_to_float(nvfp4::e4m3_rne_satfinite(nvfp4::e2m1_value(code) * scale));
      }
    }
  }
};
inline const Nvfp4Table& nvfp4_table() {
  static const Nvfp4Table table;
  return table;
}

// One row of n NVFP4 codes (element 2i in the low nibble of byte i) with its n/16 scales -> fp32 values of
// the E4M3 dequant above.
inline void decode_nvfp4_row(const uint8_t* codes, const uint8_t* scales, int64_t n, float* row) {
  const auto& value = nvfp4_table().value;
  for (int64_t d = 0; d < n; d += 2) {
    const float* group = value[scales[d / nvfp4::kGroup]];
    row[d] = group[codes[d / 2] & 0xF];
    row[d + 1] = group[codes[d / 2] >> 4];
  }
}

// One row of n E4M3 bytes -> fp32 (exact).
inline void decode_e4m3_row(const uint8_t* src, int64_t n, float* row) {
  const float* value = e4m3_table().value;
  for (int64_t d = 0; d < n; ++d) row[d] = value[src[d]];
}

}  // namespace msa::cpu
