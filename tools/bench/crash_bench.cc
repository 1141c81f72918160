// crash_bench: how fast the crash checker (crash/crash_check.h) runs
// recovery on crash images, and how many images its lazy exploration needs
// against the exhaustive count. The log: 64 unflushed 8-byte writes (one
// per unit) into a persistent region, so one crash point with 64 pending
// units and 2^64 images.
//
//   bazel run -c opt //tools/bench:crash_bench
//
// BM_CrashImagesReadAll: recovery reads the whole region (Image::Bytes), so
// every image is a distinct one; past the budget the checker samples. The
// rate is images (recovery runs) per second.
// BM_CrashImagesLogScan: recovery scans the log up to its first empty
// entry, as a log's recovery does; the lazy exploration then needs 65
// images where exhaustive enumeration would need 2^64.

#include <benchmark/benchmark.h>
#include <librpma.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "crash/crash_check.h"
#include "mock/connected_pair.h"

namespace rpma_harness {
namespace crash {
namespace {

constexpr int kWrites = 64;

// A pair with 64 8-byte writes landed and none flushed, under a recorder.
struct LogOfWrites {
  explicit LogOfWrites(CrashCheckOptions options) {
    ConnectedPairOptions o;
    o.server_usage =
        RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT;
    o.direct_write_to_pmem = true;
    pair = std::make_unique<ConnectedPair>(o);
    recorder = std::make_unique<PersistenceRecorder>(pair->nic(), options);
    recorder->MarkPersistent(pair->server_buffer(), kWrites * 8, "log");
    for (int i = 0; i < kWrites; ++i) {
      const uint64_t entry = 0x100 + i;
      std::memcpy(pair->client_buffer() + 8 * i, &entry, 8);
      // One at a time: the send queue holds fewer than 64.
      if (rpma_write(pair->client(), pair->server_mr_remote(), 8 * i,
                     pair->client_mr(), 8 * i, 8, RPMA_F_COMPLETION_ON_ERROR,
                     nullptr) != 0) {
        std::abort();
      }
      pair->nic().RunUntilIdle();
    }
  }
  std::unique_ptr<ConnectedPair> pair;
  std::unique_ptr<PersistenceRecorder> recorder;
};

void BM_CrashImagesReadAll(benchmark::State& state) {
  CrashCheckOptions options;
  options.budget = 4096;
  LogOfWrites log(options);
  uint64_t images = 0, sum = 0;
  for (auto _ : state) {
    CrashReport report = log.recorder->Check([&](Image& image) {
      const uint8_t* bytes = image.Bytes(0);
      sum += bytes[0] + bytes[kWrites * 8 - 1];
      return std::string();
    });
    images += report.images;
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(static_cast<int64_t>(images));
  state.counters["images_per_check"] =
      static_cast<double>(images) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_CrashImagesReadAll)->Unit(benchmark::kMillisecond);

void BM_CrashImagesLogScan(benchmark::State& state) {
  LogOfWrites log(CrashCheckOptions{});
  uint64_t images = 0;
  double combinations = 0;
  for (auto _ : state) {
    CrashReport report = log.recorder->Check([](Image& image) {
      for (int i = 0; i < kWrites; ++i) {
        if (image.Load<uint64_t>(0, 8 * i) == 0) break;  // the log's end
      }
      return std::string();
    });
    images += report.images;
    combinations = report.points.back().combinations;
  }
  state.SetItemsProcessed(static_cast<int64_t>(images));
  state.counters["images_per_check"] =
      static_cast<double>(images) / static_cast<double>(state.iterations());
  state.counters["images_possible"] = combinations;
}
BENCHMARK(BM_CrashImagesLogScan)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace crash
}  // namespace rpma_harness

BENCHMARK_MAIN();
