//! Merge and planning cases, each from a failure seen on real or synthetic long recordings.
use super::*;

fn seg(start: f64, end: f64, text: &str) -> WindowSegment {
    WindowSegment {
        start,
        end,
        text: text.to_string(),
        tokens: vec![1, 2, 3],
        words: Vec::new(),
    }
}

fn win(start: f64, end: f64, segments: Vec<WindowSegment>) -> WindowText {
    WindowText {
        start,
        end,
        segments,
        repairs_from: None,
    }
}

fn joined(m: &[MergedSegment]) -> String {
    m.iter()
        .map(|s| s.text.as_str())
        .collect::<String>()
        .trim()
        .to_string()
}

#[test]
fn plan_covers_content_with_overlap() {
    assert_eq!(
        plan_windows(2500, 5.0),
        vec![PlannedWindow {
            start: 0,
            len: 2500
        }]
    );
    assert_eq!(plan_windows(3000, 5.0).len(), 1);
    let p = plan_windows(24000, 5.0);
    assert_eq!(
        p[0],
        PlannedWindow {
            start: 0,
            len: 3000
        }
    );
    assert_eq!(p[1].start, 2500);
    let last = p.last().unwrap();
    assert_eq!(last.start + last.len, 24000);
    for w in p.windows(2) {
        assert!(w[1].start < w[0].start + w[0].len, "windows overlap");
    }
}

#[test]
fn common_run_in_overlap_is_kept_once() {
    // Window 0: 0-30 s (its unfinished tail from 24 s), window 1: 25-55 s. Both hear
    // "the quick brown fox" around 26-28 s; window 1 missed "alpha beta" at its edge.
    let w0 = vec![
        seg(0.0, 10.0, " One two three four."),
        seg(24.0, 30.0, " Alpha beta the quick brown fox jum"),
    ];
    let w1 = vec![
        seg(25.0, 29.5, " the quick brown fox jumps over"),
        seg(29.5, 40.0, " the lazy dog."),
    ];
    let chain = [win(0.0, 30.0, w0), win(25.0, 55.0, w1)];
    let m = merge_windows(&chain);
    assert_eq!(
        joined(&m),
        "One two three four. Alpha beta the quick brown fox jumps over the lazy dog."
    );
    // The whole first segment keeps its tokens; the cut ones are re-tokenised.
    assert!(m[0].tokens.is_some());
    assert!(m[1].tokens.is_none() && m[2].tokens.is_none());
    assert!(m.windows(2).all(|p| p[0].start <= p[1].start));
    assert_eq!(repair_start(&chain[0], &chain[1]), None);
}

#[test]
fn repetitions_are_paired_by_time_not_by_longest_run() {
    // Speech: "montreal forced aligner" at 21-24, 24.5-27.5 and 28-31 s, then "yes".
    // Window 0 (0-30) hears the first two and the unfinished start of the third; window 1
    // (25-55) garbles the second into "aligner" and hears the third. The longest common
    // run pairs window 0's second repetition with window 1's third (5 s apart): cutting
    // in it would drop one repetition.
    let w0 = vec![
        seg(10.0, 20.0, " start here"),
        seg(21.0, 24.0, " montreal forced aligner"),
        seg(24.5, 27.5, " montreal forced aligner"),
        seg(28.0, 30.0, " montreal forced"),
    ];
    let w1 = vec![
        seg(25.0, 27.5, " aligner"),
        seg(28.0, 31.0, " montreal forced aligner"),
        seg(31.5, 32.5, " yes"),
    ];
    let m = merge_windows(&[win(0.0, 30.0, w0), win(25.0, 55.0, w1)]);
    assert_eq!(
        joined(&m),
        "start here montreal forced aligner montreal forced aligner \
         montreal forced aligner yes"
    );
}

#[test]
fn no_common_words_cuts_where_both_are_reliable_and_asks_for_repair() {
    let w0 = vec![seg(20.0, 29.0, " aaa bbb ccc ddd eee fff")];
    let w1 = vec![seg(25.0, 33.0, " xxx yyy zzz www")];
    let chain = [win(0.0, 30.0, w0), win(25.0, 55.0, w1)];
    let m = merge_windows(&chain);
    // Cut at 28.5 s (window 1 reliable from 27 s, aim 1.5 s later): earlier words from
    // window 0, later ones from window 1.
    assert_eq!(joined(&m), "aaa bbb ccc ddd eee fff zzz www");
    // A repair window continues window 0 from its last timestamp.
    assert_eq!(repair_start(&chain[0], &chain[1]), Some(29.0));
}

#[test]
fn repair_window_takes_over_exactly_at_its_hand_over() {
    // Window 0 ends "go forward ten meters" at 276.44 s, then an unfinished tail; the
    // repair window hands over there (its audio starts at the pause before), and window
    // 1 (275-305) missed "we" at its edge.
    let w0 = vec![
        seg(270.0, 276.44, " go forward ten meters"),
        seg(276.44, 280.0, " we must"),
    ];
    let rep = vec![
        seg(275.9, 279.0, " we must find a new home in the stars"),
        seg(279.5, 283.0, " this is all very high pitched"),
    ];
    let w1 = vec![
        seg(275.0, 279.0, " must find a new home in the stars"),
        seg(279.5, 283.0, " this is all very high pitched"),
        seg(284.0, 290.0, " i really don't know"),
    ];
    let chain = [
        win(250.0, 280.0, w0),
        WindowText {
            repairs_from: Some(276.44),
            ..win(275.9, 305.9, rep)
        },
        win(275.0, 305.0, w1),
    ];
    assert_eq!(repair_start(&chain[0], &chain[2]), Some(276.44));
    let m = merge_windows(&chain);
    assert_eq!(
        joined(&m),
        "go forward ten meters we must find a new home in the stars \
         this is all very high pitched i really don't know"
    );
    // Whole segments keep their tokens and times.
    assert_eq!((m[0].start, m[0].end), (270.0, 276.44));
    assert!(m[0].tokens.is_some());
}

#[test]
fn a_phrase_before_the_later_window_starts_is_not_an_anchor() {
    // Window 0 stops after "users." (26 s); window 1 starts at 25 s, so it cannot have
    // heard window 0's "free software" (about 24 s): its own "free software" is a new one.
    let w0 = vec![
        seg(15.0, 22.1, " is intended to guarantee your freedom"),
        seg(
            22.1,
            26.0,
            " to make sure it remains free software for all its users.",
        ),
    ];
    let w1 = vec![
        seg(
            25.0,
            28.0,
            " We, the free software foundation, use the license",
        ),
        seg(28.0, 32.0, " for most of our software."),
    ];
    let m = merge_windows(&[win(0.0, 30.0, w0), win(25.0, 55.0, w1)]);
    assert_eq!(
        joined(&m),
        "is intended to guarantee your freedom to make sure it remains free software for \
         all its users. We, the free software foundation, use the license for most of our \
         software."
    );
}

#[test]
fn a_phrase_said_twice_pairs_with_the_nearer_repetition() {
    let w0 = vec![
        seg(
            319.8,
            324.36,
            " The corresponding source need not include anything",
        ),
        seg(
            324.36,
            327.52,
            " from other parts of the corresponding source.",
        ),
    ];
    let w1 = vec![
        seg(
            325.0,
            331.8,
            " the corresponding source. The corresponding source for a work is that work.",
        ),
        seg(331.8, 336.28, " All rights granted under this license"),
    ];
    let m = merge_windows(&[win(300.0, 330.0, w0), win(325.0, 355.0, w1)]);
    assert_eq!(
        joined(&m),
        "The corresponding source need not include anything from other parts of the \
         corresponding source. The corresponding source for a work is that work. All rights \
         granted under this license"
    );
}

#[test]
fn alignment_pairs_each_word_with_its_nearest_repetition() {
    let item = |w: &str, time: f64| WordItem {
        segment: 0,
        text: format!(" {w}"),
        norm: w.to_string(),
        time,
    };
    let a = [item("from", 9.0), item("the", 10.0), item("source", 10.5)];
    // The phrase twice in `b`, both within the tolerance: the nearer one wins, whichever
    // comes first.
    let near_first = [
        item("the", 10.1),
        item("source", 10.6),
        item("the", 11.5),
        item("source", 12.0),
    ];
    assert_eq!(align(&a, &near_first), vec![(1, 0), (2, 1)]);
    let near_second = [
        item("the", 8.5),
        item("source", 9.0),
        item("the", 10.1),
        item("source", 10.6),
    ];
    assert_eq!(align(&a, &near_second), vec![(1, 2), (2, 3)]);
}

#[test]
fn repair_window_does_not_repeat_what_its_lead_heard_again() {
    // Window 0's last timestamp (50.04 s) came before "of about" ended; the repair's audio
    // starts 0.6 s earlier and hears those words again.
    let w0 = vec![
        seg(35.0, 43.2, " as an example of fine typography,"),
        seg(43.2, 50.04, " the 42-line Bible, of about"),
        seg(50.04, 55.0, " 1455 has"),
    ];
    let rep = vec![
        seg(49.44, 54.5, " of about 1455 has never been surpassed."),
        seg(54.5, 60.0, " Printing then"),
    ];
    let chain = [
        win(25.0, 55.0, w0),
        WindowText {
            repairs_from: Some(50.04),
            ..win(49.44, 79.44, rep)
        },
    ];
    assert_eq!(
        joined(&merge_windows(&chain)),
        "as an example of fine typography, the 42-line Bible, of about \
         1455 has never been surpassed. Printing then"
    );
}

#[test]
fn repair_audio_starts_at_the_pause_before_the_hand_over() {
    // Speech (loud frames) until frame 250, a pause 250..270, speech again from 270; the
    // hand-over timestamp (frame 275) falls just after the next word's onset.
    let n_frames = 400;
    let n_mels = 4;
    let loud = |f: usize| if (250..270).contains(&f) { -1.5 } else { 0.5 };
    let data = (0..n_mels)
        .flat_map(|_| (0..n_frames).map(loud))
        .collect::<Vec<f32>>();
    let mel = MelSpectrogram {
        data,
        n_mels,
        n_frames,
    };
    let f = repair_audio_start(&mel, 275);
    assert!((255..265).contains(&f), "{f}");
    // Without a pause: within the lead before the hand-over, never after it.
    let f = repair_audio_start(&mel, 390);
    assert!((330..=390).contains(&f), "{f}");
    assert!(repair_audio_start(&mel, 30) <= 30);
    assert!(repair_audio_start(&mel, 1000) <= 400);
}

#[test]
fn earlier_window_silent_keeps_all_of_the_later_one() {
    let w1 = vec![
        seg(25.2, 27.0, " hello there"),
        seg(27.5, 31.0, " general kenobi"),
    ];
    let chain = [win(0.0, 30.0, vec![]), win(25.0, 55.0, w1)];
    assert_eq!(repair_start(&chain[0], &chain[1]), None);
    assert_eq!(joined(&merge_windows(&chain)), "hello there general kenobi");
}

#[test]
fn later_window_starting_mid_sentence_defers_to_the_earlier_one() {
    // Window 1 starts inside "the cat sat on the mat today", hears only its end and
    // stamps it from its window start.
    let w0 = vec![
        seg(20.0, 23.0, " hello"),
        seg(23.5, 28.5, " the cat sat on the mat today"),
        seg(28.5, 30.0, " and"),
    ];
    let w1 = vec![
        seg(25.0, 28.4, " on the mat today"),
        seg(28.6, 31.0, " and then we left"),
    ];
    let m = merge_windows(&[win(0.0, 30.0, w0), win(25.0, 55.0, w1)]);
    assert_eq!(
        joined(&m),
        "hello the cat sat on the mat today and then we left"
    );
}

#[test]
fn segment_straddling_an_early_stop_is_kept_whole() {
    // Window 0 (250-280 s) stops talking at 276.44 s; window 1 (275-305 s) hears a sentence
    // from 275 s that window 0 missed. Its spread word times put "we must find" before
    // 276.44 s, yet none of it may be dropped (when no repair window was decoded).
    let w0 = vec![seg(270.0, 276.44, " go forward ten meters")];
    let w1 = vec![
        seg(275.0, 279.0, " we must find a new home in the stars"),
        seg(279.0, 283.0, " and then some"),
    ];
    let m = merge_windows(&[win(250.0, 280.0, w0), win(275.0, 305.0, w1)]);
    assert_eq!(
        joined(&m),
        "go forward ten meters we must find a new home in the stars and then some"
    );
}
