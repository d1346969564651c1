//! When the fsync flusher starts its next sync: at once, or after gathering
//! more writes into it. Every sync costs the same kernel work and wake-ups
//! whatever it carries (on this project's test VM ≈ 70 µs of CPU per write +
//! fdatasync into zeros written ahead, logfile.rs), so with writers arriving
//! faster than the disk syncs, syncing the moment the last one ended spends
//! that on a dozen records each time; waiting a little lets each sync carry
//! several times more.
//!
//! Waiting only pays when writers keep arriving while the flusher waits — when
//! the store is busy enough that its CPU, not the disk, bounds how fast they
//! come back. With few writers (16 closed-loop clients here) every writer is
//! soon waiting on the sync, and a wait only adds its length to every answer
//! (measured: −20 % throughput, +30 % p50, no CPU saved). The signal used is
//! how many writes arrive within one `QUIET` gap (the silence that ends a
//! gather) at the rate of the last cycles, smoothed (`arrivals_per_quiet`): 3–4 at 16
//! clients, 7–8 at 100 on that VM. A gather with fewer would mostly wait out
//! its gap. (It was first the writes arriving during one sync — 5 at 16
//! clients, 10–13 at 100 — until zeros written ahead halved the sync: then
//! 100 clients fell under the line, gathered a third as often, and synced
//! twice as often, which spent on syncs what the cheaper sync saved.)
use std::time::{Duration, Instant};

/// A sync that took this long (a slow disk) makes the flusher wait an eighth
/// of it, at most `SLOW_WAIT_MAX`, before the next one, so that closed-loop
/// writers answered by one sync join the next instead of arriving just after
/// it started (with 200 ms per fsync: p50 405 ms, twice the fsync, without it).
pub(super) const SLOW_SYNC: Duration = Duration::from_millis(20);
const SLOW_WAIT_MAX: Duration = Duration::from_millis(25);
/// The longest a healthy disk's sync is held back to gather writes.
pub(super) const WINDOW: Duration = Duration::from_millis(1);
/// Gather only when at least this many writes arrive within one `QUIET` gap.
const MIN_ARRIVALS: f64 = 5.0;
/// A gather ends early once no write came for this long.
pub(super) const QUIET: Duration = Duration::from_micros(200);
/// A gather ends early once the batch is this many times the last one (at most `MAX_RECORDS`).
const GROWTH: u64 = 2;
const MAX_RECORDS: u64 = 256;

#[derive(Debug, PartialEq)]
pub(super) enum Plan {
    /// Sync now.
    Now,
    /// A slow disk: sleep this long first.
    Sleep(Duration),
    /// Wait up to `window` until this sync carries `records` writes (counted from
    /// the last sync's start), ending early when writes stop coming (`QUIET`).
    Gather { records: u64, window: Duration },
}

#[derive(Default)]
pub(super) struct Policy {
    prev_start: Option<Instant>,
    /// The last cycle: from the sync before the last one's start to the last one's.
    cycle: Duration,
    last_sync: Duration,
    last_batch: u64,
    /// Writes per second, smoothed over cycles (`RATE_WEIGHT`): a gathered
    /// cycle and the short one after it carry rates far apart, and deciding on
    /// one cycle's made the flusher gather every other cycle at 100 clients.
    rate: f64,
    window: Option<Duration>,
}

/// The weight of the last cycle in the smoothed rate.
const RATE_WEIGHT: f64 = 0.25;

impl Policy {
    /// `window` overrides `WINDOW` (zero: never gather).
    pub(super) fn new(window: Option<Duration>) -> Self {
        Policy { window, ..Default::default() }
    }

    /// A sync that started at `started` carrying `batch` writes took `took`.
    pub(super) fn synced(&mut self, started: Instant, took: Duration, batch: u64) {
        if let Some(prev) = self.prev_start {
            self.cycle = started.saturating_duration_since(prev);
            if !self.cycle.is_zero() {
                let now = batch as f64 / self.cycle.as_secs_f64();
                self.rate = if self.rate == 0.0 { now } else { self.rate + RATE_WEIGHT * (now - self.rate) };
            }
        }
        self.prev_start = Some(started);
        self.last_sync = took;
        self.last_batch = batch;
    }

    /// Writes expected to arrive within one `QUIET` gap, at the smoothed rate.
    pub(super) fn arrivals_per_quiet(&self) -> f64 {
        self.rate * QUIET.as_secs_f64()
    }

    /// What to do before the sync about to start at `now`.
    pub(super) fn plan(&self, now: Instant) -> Plan {
        if self.last_sync >= SLOW_SYNC {
            return Plan::Sleep((self.last_sync / 8).min(SLOW_WAIT_MAX));
        }
        let window = self.window.unwrap_or(WINDOW);
        if window.is_zero() || self.arrivals_per_quiet() < MIN_ARRIVALS {
            return Plan::Now;
        }
        // The flusher sat idle since: the rate is a past burst's, not today's.
        let idle = self.prev_start.map_or(Duration::ZERO, |p| now.saturating_duration_since(p));
        if idle > 2 * self.cycle + self.last_sync {
            return Plan::Now;
        }
        Plan::Gather { records: (GROWTH * self.last_batch).clamp(1, MAX_RECORDS), window }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The policy after syncs of (cycle µs since the previous start, sync µs, batch);
    /// the first only sets the start. Returns it and the instant a sync would start next
    /// (right after the last one ended).
    fn after(cycles: &[(u64, u64, u64)]) -> (Policy, Instant) {
        let mut p = Policy::new(None);
        let mut t = Instant::now();
        let mut next = t;
        for &(cycle, sync, batch) in cycles {
            t += Duration::from_micros(cycle);
            p.synced(t, Duration::from_micros(sync), batch);
            next = t + Duration::from_micros(sync);
        }
        (p, next)
    }

    fn plan(cycles: &[(u64, u64, u64)]) -> Plan {
        let (p, next) = after(cycles);
        p.plan(next)
    }

    /// Few writers (7 per 0.41 ms cycle, the 16-client shape): sync at once.
    #[test]
    fn few_writers_sync_at_once() {
        assert_eq!(plan(&[(410, 190, 7), (410, 190, 7)]), Plan::Now);
        // The boundary: 9 per 400 µs (4.5 per 200 µs gap) syncs at once, 10 gathers.
        assert_eq!(plan(&[(400, 190, 9), (400, 190, 9)]), Plan::Now);
        assert_eq!(plan(&[(400, 190, 10), (400, 190, 10)]), Plan::Gather { records: 20, window: WINDOW });
    }

    /// Writers arriving faster (13 per 0.35 ms cycle, the 100-client shape before a
    /// gather): gather, and keep gathering while the rate holds once batches have grown.
    #[test]
    fn many_writers_gather_and_keep_gathering() {
        assert_eq!(plan(&[(350, 190, 13), (350, 190, 13)]), Plan::Gather { records: 26, window: WINDOW });
        // With the gather: 33 per 0.86 ms cycle, still ~7.7 per gap.
        assert_eq!(plan(&[(860, 190, 33), (860, 190, 33)]), Plan::Gather { records: 66, window: WINDOW });
        // The batch asked for is capped.
        assert_eq!(plan(&[(1000, 500, 400), (1000, 500, 400)]), Plan::Gather { records: MAX_RECORDS, window: WINDOW });
    }

    /// One cycle out of line (a burst, or the short cycle after a gather) moves the
    /// smoothed rate a quarter of the way: the decision holds.
    #[test]
    fn one_cycle_does_not_flip_the_decision() {
        // 100-client shape, then one short cycle with a small batch (4.6 per gap on its own).
        assert_eq!(plan(&[(860, 190, 33), (860, 190, 33), (860, 190, 33), (260, 190, 6)]), Plan::Gather { records: 12, window: WINDOW });
        // 16-client shape, then one burst (9 per gap on its own).
        assert_eq!(plan(&[(410, 190, 7), (410, 190, 7), (410, 190, 7), (220, 190, 10)]), Plan::Now);
    }

    /// A gather that starves the arrivals (the batch stays small over a long cycle) stops.
    #[test]
    fn a_gather_that_slows_arrivals_stops() {
        assert_eq!(plan(&[(1350, 350, 10), (1350, 350, 10)]), Plan::Now);
    }

    /// After the flusher sat idle, a past burst's rate does not hold the next write back.
    #[test]
    fn an_old_rate_does_not_delay_the_first_write_after_idle() {
        let (p, next) = after(&[(350, 350, 13), (350, 350, 13)]);
        assert_eq!(p.plan(next + Duration::from_millis(50)), Plan::Now);
    }

    #[test]
    fn slow_disks_sleep_and_zero_window_never_gathers() {
        assert_eq!(plan(&[(40_000, 40_000, 500), (40_000, 40_000, 500)]), Plan::Sleep(Duration::from_millis(5)));
        // The sleep is capped: an eighth of a 400 ms sync would be 50 ms.
        assert_eq!(plan(&[(400_000, 400_000, 500), (400_000, 400_000, 500)]), Plan::Sleep(SLOW_WAIT_MAX));
        let mut p = Policy::new(Some(Duration::ZERO));
        let t = Instant::now();
        p.synced(t, Duration::from_micros(350), 13);
        p.synced(t + Duration::from_micros(350), Duration::from_micros(350), 13);
        assert_eq!(p.plan(t + Duration::from_micros(700)), Plan::Now);
    }
}
