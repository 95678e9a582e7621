//! Turns on the model for concurrent engine calls, first come first served.
//!
//! One engine serves several callers at once (the server's request lanes, library users on many
//! threads). Each batch of model work takes a turn; a caller that wants another turn queues
//! behind those already waiting, so a long recording and a short one alternate batch by batch
//! instead of the short one waiting for every window of the long one (a plain mutex lets the
//! holder take it again before a woken waiter runs).

use std::sync::{Condvar, Mutex, MutexGuard};

/// A ticket lock: turns are granted in the order they were asked for.
#[derive(Debug, Default)]
pub struct Turns {
    tickets: Mutex<Tickets>,
    next_served: Condvar,
}

#[derive(Debug, Default)]
struct Tickets {
    /// The ticket the next caller gets.
    next: u64,
    /// The ticket whose turn it is.
    serving: u64,
}

/// A turn on the model; the next ticket is served when it is dropped (also while unwinding).
#[derive(Debug)]
pub struct Turn<'a> {
    turns: &'a Turns,
}

impl Turns {
    /// No turn taken.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Tickets> {
        // The counters stay consistent whatever panicked while they were held.
        self.tickets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a turn behind every caller that asked before.
    pub fn take(&self) -> Turn<'_> {
        let mut t = self.lock();
        let ticket = t.next;
        t.next += 1;
        while t.serving != ticket {
            t = self.next_served.wait(t).unwrap_or_else(|p| p.into_inner());
        }
        Turn { turns: self }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.turns.lock().serving += 1;
        self.turns.next_served.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// A caller that gives its turn back and asks again goes behind the one that was waiting.
    #[test]
    fn a_waiting_caller_is_served_before_the_holder_takes_another_turn() {
        let turns = Arc::new(Turns::new());
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = turns.take();
        let waiter = {
            let (turns, order) = (turns.clone(), order.clone());
            std::thread::spawn(move || {
                let _t = turns.take();
                order.lock().unwrap().push("waiter");
            })
        };
        // Let the waiter queue up.
        while turns.lock().next < 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(first);
        let again = turns.take();
        order.lock().unwrap().push("holder again");
        drop(again);
        waiter.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["waiter", "holder again"]);
    }

    #[test]
    fn a_panicking_holder_passes_the_turn_on() {
        let turns = Arc::new(Turns::new());
        let t2 = turns.clone();
        let r = std::thread::spawn(move || {
            let _t = t2.take();
            panic!("model work failed");
        })
        .join();
        assert!(r.is_err());
        drop(turns.take());
    }
}
