//! The metering clock: what workers charge meters at and what the control
//! side creates meters and reports their durations with.
//!
//! Both sides must read the same clock (a meter's buckets are refilled by
//! the time between two readings), so it lives here, process-wide:
//! nanoseconds of the monotonic clock (`Instant`, `CLOCK_MONOTONIC` through
//! the vDSO) since the first reading in the process. A worker reads it
//! once per batch, and only when the version it runs has meters
//! ([`crate::Worker::process`]); tests pass a synthetic time instead
//! ([`crate::Worker::process_at`]).
//!
//! Thread-safety: any thread; the epoch is set once (`OnceLock`).

use std::sync::OnceLock;
use std::time::Instant;

/// Nanoseconds since the process first asked (monotonic, never
/// decreasing).
#[inline]
pub fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    // u64 nanoseconds last 584 years.
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic() {
        let a = super::now_ns();
        let b = super::now_ns();
        assert!(b >= a);
    }
}
