//! The batching queue: a plain struct (no threads) deciding which queued chunks go into the next
//! model call and when. The worker thread in [`super::worker`] only waits on its answers.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One queued request of a session.
#[derive(Debug)]
struct Entry<T> {
    session: u64,
    enqueued: Instant,
    item: T,
}

/// FIFO of session requests with the batching rule: the first request waits at most `max_wait`
/// for requests of *other* sessions, up to `max_batch` rows; two requests of one session never
/// share a call.
#[derive(Debug)]
pub struct BatchQueue<T> {
    entries: VecDeque<Entry<T>>,
    max_batch: usize,
    max_wait: Duration,
}

impl<T> BatchQueue<T> {
    /// An empty queue; `max_batch` is clamped to at least 1.
    pub fn new(max_batch: usize, max_wait: Duration) -> Self {
        Self {
            entries: VecDeque::new(),
            max_batch: max_batch.max(1),
            max_wait,
        }
    }

    /// Queued requests.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Queues a request of `session` that arrived at `now`.
    pub fn push(&mut self, session: u64, item: T, now: Instant) {
        self.entries.push_back(Entry {
            session,
            enqueued: now,
            item,
        });
    }

    /// Drops requests for which `keep` is false (e.g. their session has gone).
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.entries.retain(|e| keep(&e.item));
    }

    /// Number of distinct sessions among the queued requests, counted up to `limit`.
    fn distinct_sessions(&self, limit: usize) -> usize {
        let mut seen: Vec<u64> = Vec::with_capacity(limit);
        for e in &self.entries {
            if !seen.contains(&e.session) {
                seen.push(e.session);
                if seen.len() >= limit {
                    break;
                }
            }
        }
        seen.len()
    }

    /// When the next batch should run: `None` when empty; the first request's arrival when the
    /// batch is already full (or every one of the `open_sessions` has a request queued, so no one
    /// else can join); otherwise the first request's arrival plus `max_wait`.
    pub fn due(&self, open_sessions: usize) -> Option<Instant> {
        let first = self.entries.front()?;
        let full = self.max_batch.min(open_sessions.max(1));
        if self.distinct_sessions(full) >= full {
            Some(first.enqueued)
        } else {
            Some(first.enqueued + self.max_wait)
        }
    }

    /// Takes the next batch: the first request and then, in arrival order, requests of sessions
    /// not yet in the batch, up to `max_batch`. Returns `(session, item)` pairs; the rest stay
    /// queued in order.
    pub fn take_batch(&mut self) -> Vec<(u64, T)> {
        let mut batch: Vec<(u64, T)> = Vec::new();
        let mut rest = VecDeque::with_capacity(self.entries.len());
        while let Some(e) = self.entries.pop_front() {
            if batch.len() < self.max_batch && batch.iter().all(|(s, _)| *s != e.session) {
                batch.push((e.session, e.item));
            } else {
                rest.push_back(e);
            }
        }
        self.entries = rest;
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_first_and_other_sessions_up_to_b() {
        let t = Instant::now();
        let mut q = BatchQueue::new(3, Duration::from_millis(10));
        for (s, x) in [(1, 'a'), (1, 'b'), (2, 'c'), (3, 'd'), (4, 'e')] {
            q.push(s, x, t);
        }
        let b = q.take_batch();
        assert_eq!(b, vec![(1, 'a'), (2, 'c'), (3, 'd')]);
        // The second chunk of session 1 and the extra session wait, in order.
        assert_eq!(q.take_batch(), vec![(1, 'b'), (4, 'e')]);
        assert!(q.is_empty());
    }

    #[test]
    fn never_batches_two_chunks_of_one_session() {
        let t = Instant::now();
        let mut q = BatchQueue::new(8, Duration::ZERO);
        for x in 0..5 {
            q.push(7, x, t);
        }
        for x in 0..5 {
            assert_eq!(q.take_batch(), vec![(7, x)]);
        }
    }

    #[test]
    fn waits_for_other_sessions_until_full_or_deadline() {
        let t = Instant::now();
        let wait = Duration::from_millis(15);
        let mut q = BatchQueue::new(2, wait);
        assert_eq!(q.due(5), None);
        q.push(1, (), t);
        assert_eq!(q.due(5), Some(t + wait), "not full: wait for others");
        q.push(1, (), t + Duration::from_millis(1));
        assert_eq!(q.due(5), Some(t + wait), "same session does not fill");
        q.push(2, (), t + Duration::from_millis(2));
        assert_eq!(q.due(5), Some(t), "full: run now");
    }

    #[test]
    fn no_wait_when_every_open_session_is_queued() {
        let t = Instant::now();
        let mut q = BatchQueue::new(8, Duration::from_secs(1));
        q.push(1, (), t);
        assert_eq!(q.due(1), Some(t));
        assert_eq!(q.due(2), Some(t + Duration::from_secs(1)));
    }

    #[test]
    fn retain_skips_gone_sessions() {
        let t = Instant::now();
        let mut q = BatchQueue::new(4, Duration::ZERO);
        q.push(1, 1, t);
        q.push(2, 2, t);
        q.retain(|x| *x != 1);
        assert_eq!(q.take_batch(), vec![(2, 2)]);
    }
}
