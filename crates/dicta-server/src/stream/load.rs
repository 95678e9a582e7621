//! How far behind real time the open streams are: for admission (a new stream is refused while
//! open ones are behind), for the `lag` events a client gets when it falls behind, and for
//! shedding (a stream too far behind is ended, newest first, so the others catch up).
//!
//! **Lag** is the age of the oldest audio a stream has received and not yet had transcribed,
//! where audio counts as received no earlier than a real-time client could have sent it: each
//! frame is *due* at `max(arrival, due of the previous frame + its own duration)`. A real-time
//! client's frames are due when they arrive, so its lag is how late its results are. A client
//! that sends faster than real time (a file) is only lagging once the server falls behind the
//! audio's own clock, so reading ahead is never mistaken for overload.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The lag of every open stream, shared by all sockets.
#[derive(Debug, Default)]
pub(crate) struct StreamLoad {
    next: AtomicU64,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The due time of each stream's oldest audio not yet transcribed (`None`: nothing pending).
    oldest_due: HashMap<u64, Option<Instant>>,
    /// When a stream was last shed (one at a time, so that shedding one can take effect).
    last_shed: Option<Instant>,
}

/// Gap between two sheds: one stream less frees a share of the worker, which takes a few steps
/// to show in the others' lag.
const SHED_GAP: Duration = Duration::from_secs(2);

fn lag_of(due: Option<Instant>, now: Instant) -> f64 {
    due.map_or(0.0, |d| now.saturating_duration_since(d).as_secs_f64())
}

impl StreamLoad {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a stream; its entry leaves when the returned tracker is dropped. Later streams
    /// get larger ids (shedding takes the newest first).
    pub fn register(self: &std::sync::Arc<Self>) -> LagTracker {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().oldest_due.insert(id, None);
        LagTracker {
            load: self.clone(),
            id,
            pending: VecDeque::new(),
            last_due: None,
        }
    }

    /// The largest lag of any open stream now (seconds).
    pub fn worst_lag(&self) -> f64 {
        let now = Instant::now();
        let inner = self.lock();
        inner
            .oldest_due
            .values()
            .map(|d| lag_of(*d, now))
            .fold(0.0, f64::max)
    }
}

/// One stream's frames in flight: their due times, oldest first.
#[derive(Debug)]
pub(crate) struct LagTracker {
    load: std::sync::Arc<StreamLoad>,
    id: u64,
    pending: VecDeque<Instant>,
    last_due: Option<Instant>,
}

impl LagTracker {
    fn publish(&self) {
        let oldest = self.pending.front().copied();
        self.load.lock().oldest_due.insert(self.id, oldest);
    }

    /// A frame of `seconds` of audio has arrived (call in arrival order, for every audio frame
    /// read from the socket, and pair each with one [`LagTracker::handled`]).
    pub fn arrived(&mut self, seconds: f64) {
        let now = Instant::now();
        let due = match self.last_due {
            Some(prev) => now.max(prev + Duration::from_secs_f64(seconds.max(0.0))),
            None => now,
        };
        self.last_due = Some(due);
        self.pending.push_back(due);
        if self.pending.len() == 1 {
            self.publish();
        }
    }

    /// The oldest frame has been handled (transcribed, or refused with an error).
    pub fn handled(&mut self) {
        if self.pending.pop_front().is_some() {
            self.publish();
        }
    }

    /// Frames read but not handled are dropped (the utterance ended early or the client left).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.publish();
    }

    /// This stream's lag now (seconds).
    pub fn lag(&self) -> f64 {
        lag_of(self.pending.front().copied(), Instant::now())
    }

    /// Whether this stream should be ended to let the others catch up: it is more than
    /// `max_lag` seconds behind, it is the newest of the streams that are, other streams are
    /// open (ending the only one helps nobody: it keeps its lag, and its `lag` events say so),
    /// and no stream was shed in the last [`SHED_GAP`]. Records the shed when it answers yes.
    pub fn should_shed(&self, max_lag: f64) -> bool {
        let now = Instant::now();
        if lag_of(self.pending.front().copied(), now) <= max_lag {
            return false;
        }
        let mut inner = self.load.lock();
        if inner.oldest_due.len() < 2
            || inner
                .last_shed
                .is_some_and(|t| now.duration_since(t) < SHED_GAP)
        {
            return false;
        }
        let newest_behind = inner
            .oldest_due
            .iter()
            .filter(|(_, d)| lag_of(**d, now) > max_lag)
            .map(|(id, _)| *id)
            .max();
        if newest_behind == Some(self.id) {
            inner.last_shed = Some(now);
            true
        } else {
            false
        }
    }
}

impl Drop for LagTracker {
    fn drop(&mut self) {
        self.load.lock().oldest_due.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn back(d: Duration) -> Instant {
        Instant::now() - d
    }

    #[test]
    fn a_real_time_client_lags_by_the_age_of_its_oldest_pending_frame() {
        let load = Arc::new(StreamLoad::default());
        let mut t = load.register();
        assert_eq!(t.lag(), 0.0);
        t.arrived(0.1);
        t.pending[0] = back(Duration::from_secs(3));
        t.publish();
        assert!((t.lag() - 3.0).abs() < 0.1, "{}", t.lag());
        assert!((load.worst_lag() - 3.0).abs() < 0.1);
        t.handled();
        assert_eq!(t.lag(), 0.0);
        assert_eq!(load.worst_lag(), 0.0);
    }

    #[test]
    fn audio_sent_faster_than_real_time_is_due_on_its_own_clock() {
        let load = Arc::new(StreamLoad::default());
        let mut t = load.register();
        // Ten seconds of audio at once: the last frame is due nine seconds from now.
        for _ in 0..10 {
            t.arrived(1.0);
        }
        let last = *t.pending.back().unwrap();
        let ahead = last
            .duration_since(*t.pending.front().unwrap())
            .as_secs_f64();
        assert!((ahead - 9.0).abs() < 0.01, "{ahead}");
        for _ in 0..9 {
            t.handled();
        }
        assert_eq!(t.lag(), 0.0, "a frame due in the future is not late");
    }

    #[test]
    fn the_newest_stream_behind_is_shed_one_at_a_time_never_the_only_one() {
        let load = Arc::new(StreamLoad::default());
        let idle = load.register();
        let mut old = load.register();
        let mut new = load.register();
        for t in [&mut old, &mut new] {
            t.arrived(0.1);
            t.pending[0] = back(Duration::from_secs(10));
            t.publish();
        }
        assert!(!old.should_shed(5.0), "the older stream stays");
        assert!(!new.should_shed(20.0), "not past the limit");
        assert!(new.should_shed(5.0));
        drop(new);
        assert!(!old.should_shed(5.0), "within the gap after a shed");
        load.lock().last_shed = Some(back(SHED_GAP * 2));
        drop(idle);
        assert!(!old.should_shed(5.0), "the only stream left");
        let idle = load.register();
        assert!(
            old.should_shed(5.0),
            "the newest behind, with another stream open"
        );
        drop(idle);
        old.clear();
        assert_eq!(load.worst_lag(), 0.0);
        drop(old);
        assert!(load.lock().oldest_due.is_empty());
    }
}
