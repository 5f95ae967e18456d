// The dispatch queues of the L2 domains, served by persistent workers: domain d of X holds the
// workgroup ids d, d + X, d + 2X, ... (what round-robin dispatch sends it, an MI300X XCD). The
// sm90 forward's tile scheduler (kernels/sm90/tile_scheduler.h) walks them on the device; the
// host tests walk them with any interleaving of the workers (tests/test_limits.py), since
// every id must be claimed exactly once whatever the tiles, workers and domains.
#pragma once
#include <cstdint>

#include "platform.h"

namespace chiplet_fa {

// Workers for `tiles` tiles on a device of `sms` multiprocessors (0: unknown, one worker per
// tile): one per multiprocessor, fewer for a small grid; rounded down to a multiple of the domains
// when there are more workers than domains, so each domain has as many as the others.
CFA_HOST_DEVICE int64_t persistent_worker_count(int64_t tiles, int64_t sms, int64_t domains) {
  int64_t workers = sms > 0 && sms < tiles ? sms : tiles;
  if (workers > domains) workers -= workers % domains;
  return workers;
}

// One worker's walk: worker w serves domain w % X; with fewer workers than domains (more domains
// modelled than the device has multiprocessors: a small part, a MIG slice, num_xcds set by hand)
// it serves w, w + W, w + 2W, ... in turn, each until its queue is empty, so no domain is left
// without a worker. With W a multiple of X that is one domain per worker.
struct QueueWalk {
  int64_t tiles;
  int64_t domains;
  int64_t workers;
  int64_t domain;  // the queue being served; >= domains once the walk is over

  CFA_HOST_DEVICE QueueWalk(int64_t tiles_, int64_t domains_, int64_t workers_, int64_t worker)
      : tiles(tiles_), domains(domains_), workers(workers_), domain(worker % domains_) {}

  // The next workgroup id, or -1 once every queue this worker serves is empty. take(d) hands out
  // the next ticket of domain d's queue (an atomic add on the device), counting from 0.
  template <typename Take>
  CFA_HOST_DEVICE int64_t next(Take&& take) {
    for (; domain < domains; domain += workers) {
      const int64_t wid = domain + int64_t(take(int32_t(domain))) * domains;
      if (wid < tiles) return wid;
    }
    return -1;
  }
};

}  // namespace chiplet_fa
