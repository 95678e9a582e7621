//! RTTM (NIST Rich Transcription Time Marked) speaker lines:
//! `SPEAKER <file> 1 <start> <duration> <NA> <NA> <speaker> <NA> <NA>`.

use dicta_core::{Error, Result, SpeakerTurn};

/// RTTM text of `turns` for recording `file` (spaces in the name become `_`).
pub fn write(file: &str, turns: &[SpeakerTurn]) -> String {
    let file: String = file
        .chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect();
    turns
        .iter()
        .map(|t| {
            format!(
                "SPEAKER {file} 1 {:.3} {:.3} <NA> <NA> {} <NA> <NA>\n",
                t.start,
                t.end - t.start,
                t.speaker
            )
        })
        .collect()
}

/// The `SPEAKER` lines of RTTM text as `(file, turn)`; other line types are skipped. Errors
/// name the line that cannot be read.
pub fn parse(text: &str) -> Result<Vec<(String, SpeakerTurn)>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() != Some(&"SPEAKER") {
            continue;
        }
        let bad = || Error::invalid_input(format!("RTTM line {}: {line:?}", n + 1));
        if f.len() < 8 {
            return Err(bad());
        }
        let start: f64 = f[3].parse().map_err(|_| bad())?;
        let dur: f64 = f[4].parse().map_err(|_| bad())?;
        out.push((
            f[1].to_string(),
            SpeakerTurn {
                speaker: f[7].to_string(),
                start,
                end: start + dur,
            },
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let turns = vec![
            SpeakerTurn {
                speaker: "SPEAKER_00".into(),
                start: 0.25,
                end: 3.5,
            },
            SpeakerTurn {
                speaker: "SPEAKER_01".into(),
                start: 3.75,
                end: 10.125,
            },
        ];
        let text = write("my talk", &turns);
        assert!(text.starts_with("SPEAKER my_talk 1 0.250 3.250 <NA> <NA> SPEAKER_00 <NA> <NA>\n"));
        let back = parse(&text).unwrap();
        assert_eq!(back.len(), 2);
        for ((file, t), want) in back.iter().zip(&turns) {
            assert_eq!(file, "my_talk");
            assert_eq!(t.speaker, want.speaker);
            assert!((t.start - want.start).abs() < 1e-3 && (t.end - want.end).abs() < 1e-3);
        }
        // pyannote's own sample RTTM parses.
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data/pyannote_audio/sample.rttm"
        );
        if let Ok(text) = std::fs::read_to_string(p) {
            let turns = parse(&text).unwrap();
            assert!(turns.len() > 5);
        }
        assert!(parse("SPEAKER f 1 x 2 <NA> <NA> a <NA> <NA>").is_err());
    }
}
