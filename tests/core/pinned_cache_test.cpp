// detail::PinnedCache (src/core/pinned_cache.h), the CUDA backend's cache of page-locked blocks,
// with fake events the test completes by hand: a released block is reused (or given back) only
// once every copy reported on it has run, whatever stream it ran on.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <set>
#include <vector>

#include "src/core/pinned_cache.h"

namespace {

struct FakeEvent {
  bool done = false;
  int records = 0;
};

class FakeApi final : public wf::detail::PinnedHostApi {
 public:
  void* allocate(std::size_t nbytes) override {
    if (refuse > 0) {
      --refuse;
      return nullptr;
    }
    void* p = std::malloc(nbytes);
    live.insert(p);
    return p;
  }
  void free(void* data) override {
    REQUIRE(live.erase(data) == 1);
    std::free(data);
  }
  void* record_new_event(int, std::uint64_t) override {
    events.push_back(new FakeEvent());
    record(events.back(), 0, 0);
    return events.back();
  }
  void record(void* event, int, std::uint64_t) override {
    auto* e = static_cast<FakeEvent*>(event);
    e->done = false;  // a copy is queued behind the mark
    ++e->records;
  }
  bool completed(void* event) override { return static_cast<FakeEvent*>(event)->done; }
  void synchronize(void* event) override {
    static_cast<FakeEvent*>(event)->done = true;
    ++waits;
  }
  void destroy_event(void* event) override { ++destroyed; (void)event; }

  void complete_all() {
    for (FakeEvent* e : events) e->done = true;
  }
  ~FakeApi() override {
    for (FakeEvent* e : events) delete e;
    for (void* p : live) std::free(p);
  }

  std::set<void*> live;
  std::vector<FakeEvent*> events;
  int refuse = 0, waits = 0, destroyed = 0;
};

using wf::detail::PinnedCache;

}  // namespace

TEST_CASE("PinnedCache size classes cover the request by at most a quarter", "[core][pinned_cache]") {
  CHECK(PinnedCache::size_class(1) == 4096);
  CHECK(PinnedCache::size_class(4096) == 4096);
  CHECK(PinnedCache::size_class(4097) == 5120);
  CHECK(PinnedCache::size_class(8192) == 8192);
  CHECK(PinnedCache::size_class(8193) == 10240);
  for (std::size_t n : {std::size_t{5000}, std::size_t{123457}, std::size_t{1} << 20, (std::size_t{3} << 27) + 1}) {
    const std::size_t c = PinnedCache::size_class(n);
    CHECK(c >= n);
    CHECK(c <= n + n / 4 + 1024);
    CHECK(c % 1024 == 0);
  }
}

TEST_CASE("PinnedCache reuses a released block only once its copies have run", "[core][pinned_cache]") {
  FakeApi api;
  PinnedCache cache(api, std::size_t{1} << 20);
  const wf::MemoryBlock a = cache.allocate(10000);
  REQUIRE(a.data != nullptr);
  CHECK(a.size == PinnedCache::size_class(10000));

  SECTION("a block never copied is reused at once") {
    cache.release(a.data);
    CHECK(cache.cached_bytes() == a.size);
    const wf::MemoryBlock b = cache.allocate(9000);  // the same class
    CHECK(b.data == a.data);
    CHECK(cache.hits() == 1);
    CHECK(cache.cached_bytes() == 0);
    cache.release(b.data);
  }
  SECTION("a copy still queued on any stream keeps it from reuse") {
    // An interior pointer (a view's copy) on one stream, the whole block on another.
    cache.used_by(static_cast<char*>(a.data) + 512, 100, 0, 7);
    cache.used_by(a.data, a.size, 1, 9);
    REQUIRE(api.events.size() == 2);
    cache.release(a.data);
    api.events[0]->done = true;  // stream 9 still copies
    const wf::MemoryBlock b = cache.allocate(10000);
    CHECK(b.data != a.data);
    CHECK(cache.hits() == 0);
    api.events[1]->done = true;
    const wf::MemoryBlock c = cache.allocate(10000);
    CHECK(c.data == a.data);
    CHECK(cache.hits() == 1);
    // Reused, a later copy on a stream it knows re-records that stream's event.
    cache.used_by(c.data, 16, 0, 7);
    CHECK(api.events.size() == 2);
    CHECK(api.events[0]->records == 2);
    cache.release(b.data);
    cache.release(c.data);
  }
  SECTION("memory outside every live block is not tracked") {
    int pageable = 0;
    cache.used_by(&pageable, sizeof pageable, 0, 7);
    cache.used_by(static_cast<char*>(a.data) + a.size, 8, 0, 7);  // one past the end
    CHECK(api.events.empty());
    cache.release(a.data);
    cache.used_by(a.data, 8, 0, 7);  // released: no longer live
    CHECK(api.events.empty());
  }
  cache.empty();
  CHECK(cache.cached_bytes() == 0);
  CHECK(api.live.empty());
}

TEST_CASE("PinnedCache gives back blocks beyond its limit only once their copies have run", "[core][pinned_cache]") {
  FakeApi api;
  PinnedCache cache(api, 8192);  // two 4 KiB blocks
  std::vector<wf::MemoryBlock> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(cache.allocate(100));
  cache.used_by(blocks[0].data, 8, 0, 1);  // the oldest one is still being copied
  for (const wf::MemoryBlock& b : blocks) cache.release(b.data);
  // Over the limit: the oldest idle block went back, the busy one stays (no host wait).
  CHECK(cache.cached_bytes() == 8192);
  CHECK(api.live.size() == 2);
  CHECK(api.live.count(blocks[0].data) == 1);
  CHECK(api.waits == 0);
  // empty() waits for it, then frees everything.
  cache.empty();
  CHECK(api.waits == 1);
  CHECK(api.destroyed == 1);
  CHECK(api.live.empty());
}

TEST_CASE("PinnedCache gives its blocks back when the host refuses an allocation", "[core][pinned_cache]") {
  FakeApi api;
  PinnedCache cache(api, std::size_t{1} << 20);
  const wf::MemoryBlock a = cache.allocate(100);
  cache.used_by(a.data, 8, 0, 1);
  cache.release(a.data);
  api.refuse = 1;  // the first try fails, the one after the cache emptied itself succeeds
  const wf::MemoryBlock b = cache.allocate(100000);
  CHECK(b.data != nullptr);
  CHECK(api.waits == 1);  // a's copy was waited for before a went back
  CHECK(cache.cached_bytes() == 0);
  api.refuse = 2;
  CHECK(cache.allocate(100000).data == nullptr);
  cache.release(b.data);
  cache.empty();
  CHECK(api.live.empty());
}
