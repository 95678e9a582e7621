//! Audio decoding ahead of the model.
//!
//! Decode threads turn inputs (files, bytes, samples) into 16 kHz samples while the model runs
//! on earlier inputs, so the model does not wait for CPU preprocessing once the first inputs are
//! in. Two plain structs hold the policy (unit tested below); [`with_prefetch`] is the thin
//! threaded wrapper around them:
//!
//! - [`Budget`] bounds the decoded samples that are not finished yet: a decode thread starts the
//!   next input only while fewer than `limit` samples are held, so memory stays bounded whatever
//!   the number of inputs (the bound is exceeded by at most one recording per decode thread; a
//!   recording longer than the whole budget still runs, alone).
//! - [`Reorder`] hands decoded inputs over in input order although threads finish out of order,
//!   so the model loop sees the same sequence (and forms the same batches) on every run.
//!
//! Decoding runs on dedicated OS threads rather than on the rayon pool: the model loop blocks a
//! pool thread while it waits for audio, and with a one-thread pool decode jobs queued behind it
//! would never run.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use dicta_core::{Error, ErrorKind, Result};

use super::{AudioSource, Input};

/// Decoded 16 kHz mono samples: borrowed from the caller's [`AudioSource::Samples`] (no copy),
/// owned when decoded from a file or bytes.
pub(crate) type Audio<'a> = Cow<'a, [f32]>;

/// A change applied to each decoded input on its decode thread: `(input index, audio)` →
/// the audio the model sees, or an error for that input alone.
pub(crate) trait Transform<'a>: Sync {
    /// Input `index`'s decoded audio → what the consumer gets.
    fn apply(&self, index: usize, audio: Audio<'a>) -> Result<Audio<'a>>;
}

/// A bound on decoded samples held at once (see the module docs).
#[derive(Debug)]
pub(crate) struct Budget {
    limit: usize,
    state: Mutex<BudgetState>,
    room: Condvar,
}

#[derive(Debug, Default)]
struct BudgetState {
    held: usize,
    closed: bool,
}

impl Budget {
    /// A budget of `limit` samples (at least one sample, so that something always runs).
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            state: Mutex::new(BudgetState::default()),
            room: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BudgetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks until another input may start decoding; `false` once the budget is closed.
    pub(crate) fn wait_for_room(&self) -> bool {
        let mut s = self.lock();
        while !s.closed && s.held >= self.limit {
            s = self.room.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        !s.closed
    }

    /// Counts `n` more decoded samples as held.
    pub(crate) fn hold(&self, n: usize) {
        self.lock().held += n;
    }

    /// `n` held samples are finished with; wakes a waiting decode thread.
    pub(crate) fn release(&self, n: usize) {
        let mut s = self.lock();
        s.held = s.held.saturating_sub(n);
        self.room.notify_all();
    }

    /// Stops waiting decode threads (the consumer is gone).
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.room.notify_all();
    }

    /// Samples held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.lock().held
    }
}

/// Restores input order: items arrive tagged with their index in any order and leave in index
/// order, each as soon as all earlier ones have left.
#[derive(Debug)]
pub(crate) struct Reorder<T> {
    next: usize,
    waiting: BTreeMap<usize, T>,
}

impl<T> Reorder<T> {
    pub(crate) fn new() -> Self {
        Self {
            next: 0,
            waiting: BTreeMap::new(),
        }
    }

    /// Adds item `index` (each index once).
    pub(crate) fn push(&mut self, index: usize, item: T) {
        self.waiting.insert(index, item);
    }

    /// The next item in index order, if it has arrived.
    pub(crate) fn pop(&mut self) -> Option<(usize, T)> {
        let item = self.waiting.remove(&self.next)?;
        self.next += 1;
        Some((self.next - 1, item))
    }

    /// The index the next [`Reorder::pop`] returns.
    pub(crate) fn next_index(&self) -> usize {
        self.next
    }
}

/// The consumer's side of the decode threads: decoded inputs in input order.
pub(crate) struct Prefetch<'a> {
    n: usize,
    rx: mpsc::Receiver<(usize, Result<Audio<'a>>, f64, Option<String>)>,
    reorder: Reorder<Result<Audio<'a>>>,
    budget: Arc<Budget>,
    decode_seconds: f64,
    wait_seconds: f64,
    /// The note on each input that could be read only in part, by input index.
    warnings: Vec<Option<String>>,
}

impl<'a> Prefetch<'a> {
    /// Number of inputs of the call.
    pub(crate) fn len(&self) -> usize {
        self.n
    }

    /// The next input's decoded audio, in input order; blocks while it is being decoded.
    /// `None` after the last input. A successful entry's samples stay counted against the
    /// budget until [`Prefetch::release`].
    pub(crate) fn next(&mut self) -> Option<(usize, Result<Audio<'a>>)> {
        if self.reorder.next_index() >= self.n {
            return None;
        }
        loop {
            if let Some(item) = self.reorder.pop() {
                return Some(item);
            }
            let t = Instant::now();
            let got = self.rx.recv();
            self.wait_seconds += t.elapsed().as_secs_f64();
            match got {
                Ok((i, audio, seconds, warning)) => {
                    self.decode_seconds += seconds;
                    self.reorder.push(i, audio);
                    if let Some(slot) = self.warnings.get_mut(i) {
                        *slot = warning;
                    }
                }
                // Every decode thread is gone without sending this index (one panicked).
                Err(_) => {
                    let i = self.reorder.next_index();
                    self.reorder.push(
                        i,
                        Err(Error::internal(format!(
                            "input {i}: the decode thread stopped"
                        ))),
                    );
                }
            }
        }
    }

    /// The next group of consecutive decoded inputs holding at least `target` units of
    /// `unit_samples` samples (a recording counts at least one), for families that take whole
    /// recordings. Inputs that failed to decode get their error in `results`; the audio seconds
    /// of the group are added to `stats`. Empty after the last input.
    pub(crate) fn next_group<R>(
        &mut self,
        target: usize,
        unit_samples: usize,
        results: &mut [Option<Result<R>>],
        stats: &mut dicta_core::Stats,
    ) -> Vec<(usize, Audio<'a>)> {
        let mut group = Vec::new();
        let mut units = 0usize;
        while units < target {
            let Some((i, a)) = self.next() else { break };
            match a {
                Err(e) => results[i] = Some(Err(e)),
                Ok(samples) => {
                    units += samples.len().div_ceil(unit_samples).max(1);
                    stats.audio_seconds +=
                        samples.len() as f64 / f64::from(dicta_audio::SAMPLE_RATE);
                    group.push((i, samples));
                }
            }
        }
        group
    }

    /// The consumer is done with `n_samples` decoded samples (their recording finished).
    pub(crate) fn release(&self, n_samples: usize) {
        self.budget.release(n_samples);
    }

    /// Seconds spent decoding the inputs received so far, summed over decode threads (busy
    /// time: it overlaps the model and exceeds wall time with several threads).
    pub(crate) fn decode_seconds(&self) -> f64 {
        self.decode_seconds
    }

    /// Seconds the consumer waited for decoded audio (the model's idle time for input).
    pub(crate) fn wait_seconds(&self) -> f64 {
        self.wait_seconds
    }

    /// The notes on inputs that could be read only in part (damaged files), by input index,
    /// for the inputs received so far.
    pub(crate) fn take_warnings(&mut self) -> Vec<Option<String>> {
        std::mem::take(&mut self.warnings)
    }
}

/// Closes the budget when the consumer returns or unwinds, so decode threads never wait on a
/// consumer that is gone (the scope would otherwise never join).
struct CloseOnDrop(Arc<Budget>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Runs `consume` on this thread while `threads` decode threads decode `inputs` in input order
/// ahead of it, holding at most about `budget_samples` decoded samples that `consume` has not
/// released.
///
/// `transform`, when given, runs on the decode thread after decoding (input index, audio) and
/// replaces the audio the consumer sees (the VAD filter keeps only speech).
pub(crate) fn with_prefetch<'a, R>(
    inputs: &'a [Input],
    threads: usize,
    budget_samples: usize,
    transform: Option<&dyn Transform<'a>>,
    consume: impl FnOnce(&mut Prefetch<'a>) -> R,
) -> R {
    let budget = Arc::new(Budget::new(budget_samples));
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel();
    let threads = threads.clamp(1, inputs.len().max(1));
    std::thread::scope(|s| {
        for k in 0..threads {
            let tx = tx.clone();
            let (budget, next) = (Arc::clone(&budget), &next);
            let spawned = std::thread::Builder::new()
                .name(format!("dicta-audio-{k}"))
                .spawn_scoped(s, move || loop {
                    if !budget.wait_for_room() {
                        break;
                    }
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(input) = inputs.get(i) else { break };
                    let t = Instant::now();
                    let (audio, warning) = match load_audio_report(input) {
                        Ok((a, w)) => (Ok(a), w),
                        Err(e) => (Err(e), None),
                    };
                    let audio = match (audio, transform) {
                        (Ok(a), Some(f)) => f.apply(i, a),
                        (a, _) => a,
                    };
                    let seconds = t.elapsed().as_secs_f64();
                    if let Ok(a) = &audio {
                        budget.hold(a.len());
                    }
                    if tx.send((i, audio, seconds, warning)).is_err() {
                        break;
                    }
                });
            if let Err(e) = spawned {
                // Fewer threads decode; with none at all, `Prefetch::next` reports the error.
                tracing::warn!(error = %e, "cannot start an audio decode thread");
            }
        }
        drop(tx);
        // Dropped (also on unwinding) before the scope joins the decode threads.
        let _close = CloseOnDrop(Arc::clone(&budget));
        let mut prefetch = Prefetch {
            n: inputs.len(),
            rx,
            reorder: Reorder::new(),
            budget,
            decode_seconds: 0.0,
            wait_seconds: 0.0,
            warnings: vec![None; inputs.len()],
        };
        consume(&mut prefetch)
    })
}

/// Decodes one input; `Samples` inputs are validated and borrowed, not copied. A file read
/// only in part gives the audio before the damage (the note is logged).
pub(crate) fn load_audio(input: &Input) -> Result<Audio<'_>> {
    load_audio_report(input).map(|(a, _)| a)
}

/// [`load_audio`], with the note on a file that could be read only in part.
pub(crate) fn load_audio_report(input: &Input) -> Result<(Audio<'_>, Option<String>)> {
    let owned = |l: dicta_audio::decode::Loaded| (Cow::Owned(l.samples), l.warning);
    match &input.source {
        AudioSource::Path(p) => dicta_audio::decode::load_path_report(p).map(owned),
        AudioSource::Bytes(b) => {
            dicta_audio::decode::load_owned_report(b.clone(), &input.audio).map(owned)
        }
        AudioSource::Samples(s) => {
            if s.is_empty() {
                return Err(Error::new(
                    ErrorKind::EmptyInput,
                    format!("{}: no samples", input.audio),
                ));
            }
            if let Some(bad) = s.iter().position(|x| !x.is_finite()) {
                return Err(Error::new(
                    ErrorKind::CorruptInput,
                    format!("{}: sample {bad} is not finite", input.audio),
                ));
            }
            Ok((Cow::Borrowed(s), None))
        }
        AudioSource::Channels(_) | AudioSource::Channel { .. } => super::split::load(input),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn reorder_releases_items_in_index_order() {
        let mut r = Reorder::new();
        r.push(2, "c");
        assert_eq!(r.pop(), None);
        r.push(0, "a");
        assert_eq!(r.pop(), Some((0, "a")));
        assert_eq!(r.pop(), None);
        r.push(1, "b");
        assert_eq!(r.pop(), Some((1, "b")));
        assert_eq!(r.pop(), Some((2, "c")));
        assert_eq!(r.next_index(), 3);
    }

    #[test]
    fn budget_blocks_until_released_and_close_unblocks() {
        let b = Arc::new(Budget::new(10));
        assert!(b.wait_for_room());
        b.hold(12);
        assert_eq!(b.held(), 12);
        let waiter = {
            let b = Arc::clone(&b);
            std::thread::spawn(move || b.wait_for_room())
        };
        // The waiter cannot pass while 12 ≥ 10 samples are held; releasing makes room.
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished());
        b.release(5);
        assert!(waiter.join().unwrap());
        b.hold(100);
        let closed = {
            let b = Arc::clone(&b);
            std::thread::spawn(move || b.wait_for_room())
        };
        b.close();
        assert!(!closed.join().unwrap());
    }

    fn inputs(lens: &[usize]) -> Vec<Input> {
        lens.iter()
            .enumerate()
            .map(|(i, &n)| Input::from_samples(format!("in{i}"), vec![i as f32 / 100.0; n]))
            .collect()
    }

    #[test]
    fn prefetch_yields_every_input_in_order_with_errors_in_place() {
        let mut ins = inputs(&[5, 7, 3, 9, 4, 6]);
        ins[2] = Input::from_samples("empty", Vec::new());
        ins[4] = Input::from_path("/nonexistent/dicta-prefetch.wav");
        for (threads, budget) in [(1, 1), (3, 1), (4, usize::MAX), (8, 12)] {
            let got: Vec<(usize, Option<usize>)> =
                with_prefetch(&ins, threads, budget, None, |p| {
                    let mut v = Vec::new();
                    while let Some((i, a)) = p.next() {
                        let len = a.as_ref().ok().map(|a| a.len());
                        p.release(len.unwrap_or(0));
                        v.push((i, len));
                    }
                    assert!(p.next().is_none());
                    v
                });
            assert_eq!(
                got,
                [
                    (0, Some(5)),
                    (1, Some(7)),
                    (2, None),
                    (3, Some(9)),
                    (4, None),
                    (5, Some(6))
                ],
                "threads {threads}, budget {budget}"
            );
        }
    }

    #[test]
    fn prefetch_holds_at_most_the_budget_plus_one_recording_per_thread() {
        let ins = inputs(&[10; 40]);
        let budget = 25;
        let threads = 3;
        with_prefetch(&ins, threads, budget, None, |p| {
            let mut held_by_consumer = Vec::new();
            while let Some((_, a)) = p.next() {
                held_by_consumer.push(a.unwrap().len());
                // Let the decode threads run ahead as far as the budget lets them.
                std::thread::sleep(Duration::from_millis(2));
                let held = p.budget.held();
                assert!(held < budget + threads * 10, "held {held}");
                // Finish inputs two at a time, as a model loop finishing a batch would.
                if held_by_consumer.len() == 2 {
                    p.release(held_by_consumer.drain(..).sum());
                }
            }
        });
    }

    #[test]
    fn samples_inputs_are_borrowed_not_copied() {
        let ins = inputs(&[4]);
        let a = load_audio(&ins[0]).unwrap();
        assert!(matches!(a, Cow::Borrowed(_)));
        let bad = Input::from_samples("nan", vec![0.0, f32::NAN]);
        assert_eq!(load_audio(&bad).unwrap_err().kind, ErrorKind::CorruptInput);
    }
}
