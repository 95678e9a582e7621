//! Coalescing queued requests into shared backend calls: plain logic, no threads.
//!
//! The batcher thread ([`crate::worker`]) is a thin loop around [`Coalescer::next_group`]: take
//! the first live request (blocking), then keep taking until the group is full or `batch_wait`
//! has passed since the first was taken. A request that would push the group past its input
//! budget is carried over to open the next group, so arrival order is kept. Requests whose
//! client went away are skipped when taken.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A queued unit of work as the coalescer sees it.
pub(crate) trait Pending {
    /// Number of backend inputs (recordings) this request holds.
    fn input_count(&self) -> usize;
    /// Whether nobody waits for the answer any more (client disconnected or timed out).
    fn is_abandoned(&self) -> bool;
}

/// Bounds of one group (one backend call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupLimits {
    /// Most requests per group.
    pub max_requests: usize,
    /// Most inputs per group; a single larger request still forms a group alone.
    pub max_inputs: usize,
}

/// What a queue hands the coalescer.
#[derive(Debug)]
pub(crate) enum Next<T> {
    /// A request.
    Item(T),
    /// The deadline passed with nothing new.
    Waited,
    /// No more requests will ever come.
    Closed,
}

/// A queue the coalescer can take from: blocking, or until a deadline.
pub(crate) trait Source<T> {
    /// The next request; waits forever when `until` is `None`.
    fn next(&mut self, until: Option<Instant>) -> Next<T>;
}

impl<T> Source<T> for mpsc::Receiver<T> {
    fn next(&mut self, until: Option<Instant>) -> Next<T> {
        match until {
            None => self.recv().map_or(Next::Closed, Next::Item),
            Some(deadline) => {
                match self.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(item) => Next::Item(item),
                    Err(mpsc::RecvTimeoutError::Timeout) => Next::Waited,
                    Err(mpsc::RecvTimeoutError::Disconnected) => Next::Closed,
                }
            }
        }
    }
}

/// An in-memory source for tests and for draining: never waits.
impl<T> Source<T> for VecDeque<T> {
    fn next(&mut self, _until: Option<Instant>) -> Next<T> {
        self.pop_front().map_or(Next::Waited, Next::Item)
    }
}

/// One assembled group plus how many abandoned requests were skipped while assembling it.
#[derive(Debug)]
pub(crate) struct Group<T> {
    /// Live requests, in arrival order.
    pub items: Vec<T>,
    /// Abandoned requests dropped without running.
    pub skipped: usize,
}

impl<T: Pending> Group<T> {
    /// Total inputs over the group's requests.
    pub fn input_count(&self) -> usize {
        self.items.iter().map(Pending::input_count).sum()
    }

    /// Drops requests abandoned since they were taken; returns how many.
    pub fn drop_abandoned(&mut self) -> usize {
        let before = self.items.len();
        self.items.retain(|item| !item.is_abandoned());
        let dropped = before - self.items.len();
        self.skipped += dropped;
        dropped
    }
}

/// Assembles groups from a [`Source`].
pub(crate) struct Coalescer<T> {
    limits: GroupLimits,
    wait: Duration,
    /// A request taken but refused by the previous group (over the input budget).
    carry: Option<T>,
    closed: bool,
}

impl<T: Pending> Coalescer<T> {
    /// A coalescer waiting at most `wait` after the first request of each group.
    pub fn new(limits: GroupLimits, wait: Duration) -> Self {
        Self {
            limits: GroupLimits {
                max_requests: limits.max_requests.max(1),
                max_inputs: limits.max_inputs.max(1),
            },
            wait,
            carry: None,
            closed: false,
        }
    }

    /// The next group, or `None` once the source is closed and nothing is carried.
    ///
    /// With a blocking source (`next(None)` waits), a returned group is never empty; a
    /// non-blocking source that has nothing yields `None` too.
    pub fn next_group(&mut self, src: &mut impl Source<T>) -> Option<Group<T>> {
        let mut skipped = 0;
        let first = loop {
            let item = match self.carry.take() {
                Some(item) => item,
                None if self.closed => return None,
                None => match src.next(None) {
                    Next::Item(item) => item,
                    Next::Waited => return None,
                    Next::Closed => {
                        self.closed = true;
                        return None;
                    }
                },
            };
            if item.is_abandoned() {
                skipped += 1;
            } else {
                break item;
            }
        };
        let deadline = Instant::now() + self.wait;
        let mut inputs = first.input_count();
        let mut items = vec![first];
        while !self.closed
            && items.len() < self.limits.max_requests
            && inputs < self.limits.max_inputs
        {
            match src.next(Some(deadline)) {
                Next::Item(item) if item.is_abandoned() => skipped += 1,
                Next::Item(item) => {
                    if inputs + item.input_count() > self.limits.max_inputs {
                        self.carry = Some(item);
                        break;
                    }
                    inputs += item.input_count();
                    items.push(item);
                }
                Next::Waited => break,
                Next::Closed => self.closed = true,
            }
        }
        Some(Group { items, skipped })
    }
}

/// Splits the results of a group call (concatenated in request order) back per request.
/// `counts[i]` is the number of inputs request `i` contributed; `results` must hold exactly
/// `counts.iter().sum()` entries.
pub(crate) fn split_results<R>(counts: &[usize], results: Vec<R>) -> Vec<Vec<R>> {
    debug_assert_eq!(counts.iter().sum::<usize>(), results.len());
    let mut rest = results.into_iter();
    counts
        .iter()
        .map(|&n| rest.by_ref().take(n).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request with a name, an input count and an abandoned flag.
    #[derive(Debug, Clone, PartialEq)]
    struct Req(&'static str, usize, bool);

    impl Pending for Req {
        fn input_count(&self) -> usize {
            self.1
        }
        fn is_abandoned(&self) -> bool {
            self.2
        }
    }

    fn names(g: &Group<Req>) -> Vec<&'static str> {
        g.items.iter().map(|r| r.0).collect()
    }

    fn coalescer(max_requests: usize, max_inputs: usize) -> Coalescer<Req> {
        Coalescer::new(
            GroupLimits {
                max_requests,
                max_inputs,
            },
            Duration::from_millis(5),
        )
    }

    #[test]
    fn groups_stop_at_max_requests_and_keep_arrival_order() {
        let mut q: VecDeque<Req> = (0..5).map(|_| Req("r", 1, false)).collect();
        for (i, r) in q.iter_mut().enumerate() {
            r.0 = ["a", "b", "c", "d", "e"][i];
        }
        let mut c = coalescer(2, 100);
        assert_eq!(names(&c.next_group(&mut q).unwrap()), ["a", "b"]);
        assert_eq!(names(&c.next_group(&mut q).unwrap()), ["c", "d"]);
        assert_eq!(names(&c.next_group(&mut q).unwrap()), ["e"]);
        assert!(c.next_group(&mut q).is_none());
    }

    #[test]
    fn a_request_over_the_input_budget_opens_the_next_group() {
        let mut q: VecDeque<Req> = [
            Req("a", 3, false),
            Req("b", 4, false),
            Req("c", 1, false),
            Req("d", 9, false),
        ]
        .into();
        let mut c = coalescer(8, 6);
        let g = c.next_group(&mut q).unwrap();
        assert_eq!(names(&g), ["a"]);
        assert_eq!(g.input_count(), 3);
        // "b" was carried over, not lost or reordered.
        assert_eq!(names(&c.next_group(&mut q).unwrap()), ["b", "c"]);
        // A single request larger than the budget still runs, alone.
        assert_eq!(names(&c.next_group(&mut q).unwrap()), ["d"]);
        assert!(c.next_group(&mut q).is_none());
    }

    #[test]
    fn abandoned_requests_are_skipped_and_counted() {
        let mut q: VecDeque<Req> = [
            Req("gone1", 1, true),
            Req("a", 1, false),
            Req("gone2", 1, true),
            Req("b", 1, false),
        ]
        .into();
        let mut c = coalescer(8, 100);
        let g = c.next_group(&mut q).unwrap();
        assert_eq!(names(&g), ["a", "b"]);
        assert_eq!(g.skipped, 2);
    }

    #[test]
    fn drop_abandoned_removes_late_leavers() {
        let mut g = Group {
            items: vec![Req("a", 2, false), Req("b", 1, true)],
            skipped: 1,
        };
        assert_eq!(g.drop_abandoned(), 1);
        assert_eq!(names(&g), ["a"]);
        assert_eq!((g.skipped, g.input_count()), (2, 2));
    }

    #[test]
    fn a_closed_channel_drains_what_it_holds_then_ends() {
        let (tx, mut rx) = mpsc::channel();
        for name in ["a", "b", "c"] {
            tx.send(Req(name, 1, false)).unwrap();
        }
        drop(tx);
        let mut c = coalescer(2, 100);
        assert_eq!(names(&c.next_group(&mut rx).unwrap()), ["a", "b"]);
        assert_eq!(names(&c.next_group(&mut rx).unwrap()), ["c"]);
        assert!(c.next_group(&mut rx).is_none());
        assert!(c.next_group(&mut rx).is_none());
    }

    #[test]
    fn an_open_channel_ends_a_group_when_the_wait_passes() {
        let (tx, mut rx) = mpsc::channel();
        tx.send(Req("a", 1, false)).unwrap();
        let mut c = coalescer(8, 100);
        // Nothing else arrives: the group closes after the wait with one request.
        assert_eq!(names(&c.next_group(&mut rx).unwrap()), ["a"]);
        drop(tx);
    }

    #[test]
    fn split_results_follows_counts() {
        let parts = split_results(&[2, 0, 3], vec![1, 2, 3, 4, 5]);
        assert_eq!(parts, vec![vec![1, 2], vec![], vec![3, 4, 5]]);
    }
}
