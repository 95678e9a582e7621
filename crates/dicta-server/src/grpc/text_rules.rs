//! What a Riva `RecognitionConfig` asks of a result's text, applied to every alternative of
//! `Recognize` and `StreamingRecognize` (interim and final) alike:
//!
//! - without `enable_automatic_punctuation` (its default, and the official client's), no
//!   punctuation and no capitals, as Riva's acoustic models write before its punctuation model
//!   runs ("and so my fellow americans ask not"). Whisper writes both itself, so they are taken
//!   out: punctuation marks go, apostrophes inside a word stay ("don't"), a hyphen or slash
//!   between two letters or digits becomes a space ("self-made" → "self made"), and a point,
//!   comma or colon between two digits stays ("3.5", "10:30"); signs read as words ("$", "%",
//!   "&") stay.
//! - with `profanity_filter`, profane words starred (see [`super::profanity`]).

use super::pb::nvidia::riva::asr::{RecognitionConfig, SpeechRecognitionAlternative};

/// The rules of one config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TextRules {
    /// `enable_automatic_punctuation`: Whisper's punctuation and capitals kept.
    pub punctuation: bool,
    /// `profanity_filter`.
    pub profanity: bool,
}

impl TextRules {
    pub(crate) fn of(config: &RecognitionConfig) -> Self {
        Self {
            punctuation: config.enable_automatic_punctuation,
            profanity: config.profanity_filter,
        }
    }

    /// Applies the rules to an alternative's transcript and words; a word left with no
    /// characters (a lone dash) is dropped.
    pub(crate) fn apply(self, a: &mut SpeechRecognitionAlternative) {
        if !self.punctuation {
            a.transcript = unpunctuated(&a.transcript);
            for w in &mut a.words {
                w.word = unpunctuated(&w.word);
            }
            a.words.retain(|w| !w.word.is_empty());
        }
        if self.profanity {
            super::profanity::censor_alternative(a);
        }
    }
}

/// `text` in lower case without punctuation (the rules in the module docs), words separated by
/// single spaces.
pub(crate) fn unpunctuated(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let letter = |i: Option<usize>| {
        i.and_then(|i| chars.get(i))
            .is_some_and(|c| c.is_alphabetic())
    };
    let digit = |i: Option<usize>| i.and_then(|i| chars.get(i)).is_some_and(|c| c.is_numeric());
    let alnum = |i: Option<usize>| letter(i) || digit(i);
    for (i, &c) in chars.iter().enumerate() {
        let (before, after) = (i.checked_sub(1), Some(i + 1));
        let kept = if c.is_alphanumeric() || c.is_whitespace() || !is_punctuation(c) {
            Some(c)
        } else if matches!(c, '\'' | '\u{2019}') && letter(before) && letter(after) {
            Some('\'')
        } else if matches!(c, '.' | ',' | ':') && digit(before) && digit(after) {
            Some(c)
        } else if matches!(c, '-' | '\u{2010}' | '\u{2011}' | '/') && alnum(before) && alnum(after)
        {
            Some(' ')
        } else {
            None
        };
        if let Some(k) = kept {
            out.extend(k.to_lowercase());
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Punctuation marks, which `char` has no method for: Unicode's punctuation categories (Pc, Pd,
/// Ps, Pe, Pi, Pf, Po) of the general punctuation and CJK blocks and the other scripts' common
/// marks; of ASCII only the marks of sentences and quotes, since `%`, `&`, `#`, `@` and `*` are
/// read as words ("50%") although Unicode files them as punctuation too.
fn is_punctuation(c: char) -> bool {
    if c.is_ascii() {
        return matches!(
            c,
            '!' | '"'
                | '\''
                | '('
                | ')'
                | ','
                | '-'
                | '.'
                | '/'
                | ':'
                | ';'
                | '?'
                | '['
                | ']'
                | '{'
                | '}'
                | '_'
        );
    }
    matches!(c,
        '\u{00A1}' | '\u{00A7}' | '\u{00AB}' | '\u{00B6}' | '\u{00B7}' | '\u{00BB}' | '\u{00BF}'
        | '\u{037E}' | '\u{0387}' | '\u{055A}'..='\u{055F}' | '\u{0589}' | '\u{058A}'
        | '\u{05BE}' | '\u{05C0}' | '\u{05C3}' | '\u{05C6}' | '\u{05F3}' | '\u{05F4}'
        | '\u{060C}' | '\u{060D}' | '\u{061B}' | '\u{061D}'..='\u{061F}' | '\u{066A}'..='\u{066D}'
        | '\u{06D4}' | '\u{0964}' | '\u{0965}' | '\u{0970}' | '\u{0E4F}' | '\u{0E5A}' | '\u{0E5B}'
        | '\u{104A}'..='\u{104F}' | '\u{10FB}' | '\u{1360}'..='\u{1368}' | '\u{166E}'
        | '\u{17D4}'..='\u{17DA}' | '\u{2010}'..='\u{2027}' | '\u{2030}'..='\u{2043}'
        | '\u{2045}'..='\u{2051}' | '\u{2053}'..='\u{205E}' | '\u{207D}' | '\u{207E}'
        | '\u{208D}' | '\u{208E}' | '\u{2308}'..='\u{230B}' | '\u{2329}' | '\u{232A}'
        | '\u{2768}'..='\u{2775}' | '\u{27C5}' | '\u{27C6}' | '\u{27E6}'..='\u{27EF}'
        | '\u{2983}'..='\u{2998}' | '\u{29D8}'..='\u{29DB}' | '\u{29FC}' | '\u{29FD}'
        | '\u{2CF9}'..='\u{2CFC}' | '\u{2CFE}' | '\u{2CFF}' | '\u{2E00}'..='\u{2E4F}'
        | '\u{3001}'..='\u{3003}' | '\u{3008}'..='\u{3011}' | '\u{3014}'..='\u{301F}'
        | '\u{3030}' | '\u{303D}' | '\u{30A0}' | '\u{30FB}' | '\u{FE10}'..='\u{FE19}'
        | '\u{FE30}'..='\u{FE52}' | '\u{FE54}'..='\u{FE61}' | '\u{FE63}' | '\u{FE68}'
        | '\u{FE6A}' | '\u{FE6B}' | '\u{FF01}'..='\u{FF03}' | '\u{FF05}'..='\u{FF0A}'
        | '\u{FF0C}'..='\u{FF0F}' | '\u{FF1A}' | '\u{FF1B}' | '\u{FF1F}' | '\u{FF20}'
        | '\u{FF3B}'..='\u{FF3D}' | '\u{FF3F}' | '\u{FF5B}' | '\u{FF5D}' | '\u{FF5F}'..='\u{FF65}')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::pb::nvidia::riva::asr::WordInfo;

    #[test]
    fn punctuation_and_capitals_go_and_word_inner_marks_are_judged() {
        let cases = [
            (
                "And so, my fellow Americans: ask not what your country can do for you!",
                "and so my fellow americans ask not what your country can do for you",
            ),
            (
                "I don't know — it's \"self-made\", isn't it?",
                "i don't know it's self made isn't it",
            ),
            (
                "At 10:30 it costs $3.50, or 1,000 yen (50%).",
                "at 10:30 it costs $3.50 or 1,000 yen 50%",
            ),
            (
                "The students' books. 'Quoted' words…",
                "the students books quoted words",
            ),
            (
                "Rock ’n’ roll / jazz and/or blues",
                "rock n roll jazz and or blues",
            ),
            ("Das ist GROSS. Ça va?", "das ist gross ça va"),
            ("你好，世界。「引用」", "你好世界引用"),
            ("  - ", ""),
        ];
        for (text, want) in cases {
            assert_eq!(unpunctuated(text), want, "{text:?}");
        }
    }

    #[test]
    fn rules_apply_to_transcripts_and_words_and_drop_empty_words() {
        let word = |w: &str| WordInfo {
            word: w.into(),
            ..Default::default()
        };
        let alt = || SpeechRecognitionAlternative {
            transcript: "Well - Shit, that's it.".into(),
            words: vec![
                word("Well"),
                word("-"),
                word("Shit,"),
                word("that's"),
                word("it."),
            ],
            ..Default::default()
        };
        let words = |a: &SpeechRecognitionAlternative| {
            a.words.iter().map(|w| w.word.clone()).collect::<Vec<_>>()
        };
        let mut a = alt();
        TextRules {
            punctuation: false,
            profanity: false,
        }
        .apply(&mut a);
        assert_eq!(a.transcript, "well shit that's it");
        assert_eq!(words(&a), ["well", "shit", "that's", "it"]);
        let mut a = alt();
        TextRules {
            punctuation: false,
            profanity: true,
        }
        .apply(&mut a);
        assert_eq!(a.transcript, "well s*** that's it");
        let mut a = alt();
        TextRules {
            punctuation: true,
            profanity: true,
        }
        .apply(&mut a);
        assert_eq!(a.transcript, "Well - S***, that's it.");
        assert_eq!(words(&a), ["Well", "-", "S***,", "that's", "it."]);
        let mut a = alt();
        TextRules {
            punctuation: true,
            profanity: false,
        }
        .apply(&mut a);
        assert_eq!(a, alt());
    }
}
