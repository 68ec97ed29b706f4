// Chapter 07, Task 4: the causal tile rule
// (exercises/07_flash_attention/flash_attention.cpp, causal_tile_mask).
#include <gtest/gtest.h>

#include "flash_attention.h"
#include "lio/error.h"

namespace {
using lio::cpu::causal_tile_mask;
using lio::cpu::TileMask;

TEST(Ch07Task4, DiagonalBelowAndAbove) {
  // Query tile 64..127 against key tiles of 64.
  EXPECT_EQ(causal_tile_mask(64, 127, 0, 63), TileMask::Full);
  EXPECT_EQ(causal_tile_mask(64, 127, 64, 127), TileMask::Partial);
  EXPECT_EQ(causal_tile_mask(64, 127, 128, 191), TileMask::Skip);
}

TEST(Ch07Task4, CornersDecide) {
  EXPECT_EQ(causal_tile_mask(10, 20, 0, 10), TileMask::Full);     // the first query sees key 10
  EXPECT_EQ(causal_tile_mask(10, 20, 0, 11), TileMask::Partial);  // ... but not key 11
  EXPECT_EQ(causal_tile_mask(10, 20, 20, 30), TileMask::Partial); // the last query sees key 20
  EXPECT_EQ(causal_tile_mask(10, 20, 21, 30), TileMask::Skip);
  EXPECT_EQ(causal_tile_mask(5, 5, 5, 5), TileMask::Full);        // one query, its own key
  EXPECT_EQ(causal_tile_mask(5, 5, 0, 5), TileMask::Full);        // a decode row sees everything
}

TEST(Ch07Task4, AboutHalfTheTilesOfACausalPrefillAreSkipped) {
  // N = 1,024 in tiles of 64 x 64: 16 x 16 pairs; 120 above the diagonal, 16 on it, 120 below.
  int skip = 0, full = 0, partial = 0;
  for (int qi = 0; qi < 16; ++qi) {
    for (int kj = 0; kj < 16; ++kj) {
      switch (causal_tile_mask(qi * 64, qi * 64 + 63, kj * 64, kj * 64 + 63)) {
        case TileMask::Skip: ++skip; break;
        case TileMask::Full: ++full; break;
        case TileMask::Partial: ++partial; break;
      }
    }
  }
  EXPECT_EQ(skip, 120);
  EXPECT_EQ(full, 120);
  EXPECT_EQ(partial, 16);
}

TEST(Ch07Task4, RejectsInvertedOrNegativeRanges) {
  EXPECT_THROW(causal_tile_mask(10, 9, 0, 5), lio::InvalidArgument);
  EXPECT_THROW(causal_tile_mask(0, 9, 6, 5), lio::InvalidArgument);
  EXPECT_THROW(causal_tile_mask(-1, 9, 0, 5), lio::InvalidArgument);
}

}  // namespace
