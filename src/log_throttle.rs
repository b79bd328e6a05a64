//! Log lines about what clients send, bounded in rate.
//!
//! A line per refused request or per failed recording lets any client (or a
//! full disk) turn its request rate into log volume: a flood of 404s wrote
//! a thousand warnings a second. A [`LogThrottle`] lets the first few lines
//! of each interval through and counts the rest, which the next line that
//! is let through reports; the metrics still count every event.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// At most `lines` log lines every `interval`, shared by every worker.
#[derive(Debug)]
pub struct LogThrottle {
    interval: Duration,
    lines: u32,
    window: Mutex<Window>,
}

#[derive(Debug, Default)]
struct Window {
    /// When the current interval began.
    start: Option<Instant>,
    /// Lines let through in it.
    logged: u32,
    /// Events not logged since the last line that was.
    suppressed: u64,
}

impl LogThrottle {
    /// A throttle of `lines` lines per `interval`.
    pub const fn new(lines: u32, interval: Duration) -> Self {
        LogThrottle {
            interval,
            lines,
            window: Mutex::new(Window {
                start: None,
                logged: 0,
                suppressed: 0,
            }),
        }
    }

    /// Notes an event at `now`: `Some(n)` when it is to be logged, `n`
    /// being the events not logged before it; `None` when it is not.
    pub fn admit(&self, now: Instant) -> Option<u64> {
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        let ended = window.start.is_none_or(|start| {
            now.checked_duration_since(start)
                .is_some_and(|d| d >= self.interval)
        });
        if ended {
            window.start = Some(now);
            window.logged = 0;
        }
        if window.logged >= self.lines {
            window.suppressed += 1;
            return None;
        }
        window.logged += 1;
        Some(std::mem::take(&mut window.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_logged_a_few_lines_an_interval_and_counted() {
        let throttle = LogThrottle::new(3, Duration::from_secs(10));
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert_eq!(throttle.admit(at(0)), Some(0));
        assert_eq!(throttle.admit(at(1)), Some(0));
        assert_eq!(throttle.admit(at(2)), Some(0));
        for ms in 3..1_000 {
            assert_eq!(throttle.admit(at(ms)), None);
        }
        // The next interval's first line says how many were not logged.
        assert_eq!(throttle.admit(at(10_000)), Some(997));
        assert_eq!(throttle.admit(at(10_001)), Some(0));
        // A clock that goes back does not open a new interval.
        assert_eq!(throttle.admit(at(10_002)), Some(0));
        assert_eq!(throttle.admit(at(5)), None);
    }
}
