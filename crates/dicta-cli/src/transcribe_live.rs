//! What `dicta transcribe` shows while it runs: a progress bar on stderr driven by the engine's
//! progress events (seconds of audio finished over seconds of audio decoded so far, speed as
//! × real time, ETA), and with `--print-segments` each segment on stdout as soon as it is final.
//!
//! The bar's length is the audio of the inputs decoded so far: the engine's decode threads
//! report each input's length (`Started`) as they decode it, ahead of the model by its
//! look-ahead (a few minutes of audio), so the length grows while a long list of inputs is
//! worked through and is right from the start for one file. (Reading every container header
//! first would cost a second open of each input and not every format states its length.)

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dicta_core::Segment;
use dicta_engine::{Progress, ProgressEvent};
use indicatif::{ProgressBar, ProgressStyle};

/// Milliseconds: the unit of the bar (whole seconds would move in visible jumps).
fn ms(seconds: f64) -> u64 {
    (seconds.max(0.0) * 1000.0).round() as u64
}

/// The live view of one `dicta transcribe` run.
pub(crate) struct Live {
    bar: ProgressBar,
    start: Instant,
    /// Input ids to prefix printed segments with (several inputs), or none (one input).
    prefixes: Option<Vec<String>>,
    print: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Seconds finished per input, as last reported.
    done: Vec<f64>,
    /// Audio seconds finished, all inputs.
    done_total: f64,
    /// Audio seconds of the inputs decoded so far.
    total: f64,
}

impl Live {
    /// A live view of a run over inputs `ids`: the bar unless `quiet` (indicatif draws it on
    /// stderr only when that is a terminal), segments on stdout with `print_segments`.
    pub(crate) fn new(ids: &[String], quiet: bool, print_segments: bool) -> Arc<Self> {
        let bar = if quiet {
            ProgressBar::hidden()
        } else {
            let bar = ProgressBar::new(0);
            // Elapsed time and ETA move between events too.
            bar.enable_steady_tick(std::time::Duration::from_millis(500));
            bar
        };
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {msg}, {elapsed} elapsed, eta {eta}")
                .expect("static template"),
        );
        Arc::new(Self {
            bar,
            start: Instant::now(),
            prefixes: (ids.len() > 1).then(|| ids.to_vec()),
            print: print_segments,
            state: Mutex::new(State {
                done: vec![0.0; ids.len()],
                ..State::default()
            }),
        })
    }

    /// The engine callback feeding this view.
    pub(crate) fn progress(self: &Arc<Self>) -> Progress {
        let me = Arc::clone(self);
        Progress::new(move |e| me.on(e))
    }

    fn on(&self, event: ProgressEvent) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match event {
            ProgressEvent::Started { duration, .. } => {
                s.total += duration;
                self.bar.set_length(ms(s.total));
            }
            ProgressEvent::Audio { input, seconds } => {
                let Some(d) = s.done.get_mut(input) else {
                    return;
                };
                let delta = (seconds - *d).max(0.0);
                *d = seconds;
                s.done_total += delta;
                self.bar.set_position(ms(s.done_total));
            }
            ProgressEvent::Segments { input, segments } if self.print => {
                let prefix = self.prefixes.as_ref().and_then(|p| p.get(input));
                let lines: String = segments.iter().map(|seg| line(prefix, seg)).collect();
                // Above the bar, not through it.
                self.bar.suspend(|| {
                    let mut out = std::io::stdout().lock();
                    // A closed stdout (`| head`) is not worth failing the run for.
                    let _ = out.write_all(lines.as_bytes()).and_then(|()| out.flush());
                });
            }
            _ => {}
        }
        let wall = self.start.elapsed().as_secs_f64();
        let speed = if wall > 0.0 { s.done_total / wall } else { 0.0 };
        self.bar.set_message(format!(
            "{:.0}/{:.0} s of audio, {speed:.1}× real time",
            s.done_total, s.total
        ));
    }

    /// Removes the bar.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// One printed segment, faster-whisper style: `[0.00s -> 5.28s] text` (after `prefix ` for
/// several inputs, with `[SPEAKER_00] ` before the text when diarized).
pub(crate) fn line(prefix: Option<&String>, seg: &Segment) -> String {
    let mut s = String::new();
    if let Some(p) = prefix {
        s.push_str(p);
        s.push(' ');
    }
    s.push_str(&format!("[{:.2}s -> {:.2}s] ", seg.start, seg.end));
    if let Some(sp) = &seg.speaker {
        s.push_str(&format!("[{sp}] "));
    }
    s.push_str(seg.text.trim());
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_faster_whisper() {
        let seg = Segment::new(0.0, 5.28, " And so my fellow Americans".to_string());
        assert_eq!(
            line(None, &seg),
            "[0.00s -> 5.28s] And so my fellow Americans\n"
        );
        let id = "jfk.flac".to_string();
        assert_eq!(
            line(Some(&id), &seg),
            "jfk.flac [0.00s -> 5.28s] And so my fellow Americans\n"
        );
    }

    #[test]
    fn the_bar_follows_audio_seconds() {
        let live = Live::new(&["a".into(), "b".into()], true, false);
        let p = live.progress();
        p.emit(ProgressEvent::Started {
            input: 0,
            duration: 10.0,
        });
        p.emit(ProgressEvent::Started {
            input: 1,
            duration: 5.0,
        });
        p.emit(ProgressEvent::Audio {
            input: 0,
            seconds: 4.0,
        });
        p.emit(ProgressEvent::Audio {
            input: 1,
            seconds: 5.0,
        });
        p.emit(ProgressEvent::Audio {
            input: 0,
            seconds: 10.0,
        });
        assert_eq!(live.bar.length(), Some(15_000));
        assert_eq!(live.bar.position(), 15_000);
    }
}
