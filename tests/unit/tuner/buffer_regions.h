// A device buffer laid out as regions one after another (the block masks' shapes): each
// starts 16-byte aligned and ends before the next begins, the last within `total`.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

struct BufferRegion {
  int64_t offset, size;
};

inline void expectRegionsAlignedAndApart(const std::vector<BufferRegion> &regions,
                                         int64_t total) {
  for (size_t i = 0; i < regions.size(); ++i) {
    EXPECT_EQ(regions[i].offset % 16, 0) << "region " << i;
    const int64_t next = i + 1 < regions.size() ? regions[i + 1].offset : total;
    EXPECT_LE(regions[i].offset + regions[i].size, next) << "region " << i;
  }
}
