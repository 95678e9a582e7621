//! Port of Whisper's `EnglishTextNormalizer`, the normalizer behind Whisper's published WER.
//!
//! Source: `whisper/normalizers/english.py` (openai/whisper, MIT) as packaged by PyPI
//! `whisper-normalizer` 0.1.15; `english.json` (British → American spellings) is that
//! package's copy of openai/whisper's `whisper/normalizers/english.json` (MIT).

use std::collections::HashMap;
use std::sync::OnceLock;

use regex::{Captures, Regex};

use crate::basic::{remove_symbols_and_diacritics, BracketRegexes};
use crate::english_number::EnglishNumberNormalizer;
use crate::pyre::{py_split, re, BoundedRegex, BOTH, PY_SPACE, RIGHT};

/// British → American spellings, parsed once per process.
fn spelling_map() -> &'static HashMap<String, String> {
    static MAP: OnceLock<HashMap<String, String>> = OnceLock::new();
    MAP.get_or_init(|| {
        // The JSON is compiled in and checked by tests; it cannot be malformed at run time.
        serde_json::from_str(include_str!("english.json")).expect("embedded english.json is valid")
    })
}

/// Whole-word contractions and abbreviations (`\bPATTERN\b`), applied in this order
/// (Python's dict order), before [`SUFFIX_REPLACERS`].
const WORD_REPLACERS: &[(&str, &str)] = &[
    // common contractions
    ("won't", "will not"),
    ("can't", "can not"),
    ("let's", "let us"),
    ("ain't", "aint"),
    ("y'all", "you all"),
    ("wanna", "want to"),
    ("kinda", "kind of"),
    ("sorta", "sort of"),
    ("dunno", "do not know"),
    ("gotta", "got to"),
    ("gonna", "going to"),
    ("i'ma", "i am going to"),
    ("imma", "i am going to"),
    ("woulda", "would have"),
    ("coulda", "could have"),
    ("shoulda", "should have"),
    ("cause", "because"),
    ("ma'am", "madam"),
    // contractions in titles/prefixes
    ("mr", "mister "),
    ("mrs", "missus "),
    ("st", "saint "),
    ("dr", "doctor "),
    ("prof", "professor "),
    ("capt", "captain "),
    ("gov", "governor "),
    ("ald", "alderman "),
    ("gen", "general "),
    ("sen", "senator "),
    ("rep", "representative "),
    ("pres", "president "),
    ("rev", "reverend "),
    ("hon", "honorable "),
    ("asst", "assistant "),
    ("assoc", "associate "),
    ("lt", "lieutenant "),
    ("col", "colonel "),
    ("jr", "junior "),
    ("sr", "senior "),
    ("esq", "esquire "),
];

/// Contraction suffixes (`PATTERN\b`, no leading boundary), applied in this order.
const SUFFIX_REPLACERS: &[(&str, &str)] = &[
    // perfect tenses
    ("'d been", " had been"),
    ("'s been", " has been"),
    ("'d gone", " had gone"),
    ("'s gone", " has gone"),
    ("'d done", " had done"),
    ("'s got", " has got"),
    // general contractions
    ("n't", " not"),
    ("'re", " are"),
    ("'s", " is"),
    ("'d", " would"),
    ("'ll", " will"),
    ("'t", " not"),
    ("'ve", " have"),
    ("'m", " am"),
];

/// Whisper's English normalizer: lowercases; removes bracketed phrases, fillers (hmm, um, ...)
/// and symbols; expands contractions and titles; converts spelled numbers and currencies to
/// digits; maps British to American spelling; collapses whitespace.
///
/// Output matches PyPI `whisper-normalizer` 0.1.15 byte for byte on the committed fixtures,
/// including Python's quirks such as a possible leading or trailing space.
pub struct EnglishTextNormalizer {
    brackets: BracketRegexes,
    fillers: BoundedRegex,
    space_apostrophe: Regex,
    replacers: Vec<(BoundedRegex, &'static str)>,
    digit_comma: Regex,
    period: Regex,
    numbers: EnglishNumberNormalizer,
    spellings: &'static HashMap<String, String>,
    lone_symbol: Regex,
    lone_percent: Regex,
}

impl EnglishTextNormalizer {
    /// Compiles all patterns; build once and reuse (normalizing is then allocation-light).
    pub fn new() -> Self {
        let word = WORD_REPLACERS.iter().map(|r| (r, BOTH));
        let suffix = SUFFIX_REPLACERS.iter().map(|r| (r, RIGHT));
        let replacers = word
            .chain(suffix)
            .map(|((pat, rep), bounds)| (BoundedRegex::new(&regex::escape(pat), bounds), *rep))
            .collect();
        Self {
            brackets: BracketRegexes::new(),
            // Longest alternatives first, so that a failed `\b` after the preferred match
            // means no alternative can succeed at that position (see `BoundedRegex`).
            fillers: BoundedRegex::new("(hmm|mhm|mmm|mm|uh|um)", BOTH),
            space_apostrophe: re(&format!("{PY_SPACE}+'")),
            replacers,
            digit_comma: re(r"(\d),(\d)"),
            period: re(r"\.([^0-9]|$)"),
            numbers: EnglishNumberNormalizer::new(),
            spellings: spelling_map(),
            lone_symbol: re("[.$¢€£]([^0-9])"),
            lone_percent: re("([^0-9])%"),
        }
    }

    /// Normalizes one string.
    pub fn normalize(&self, s: &str) -> String {
        let s = s.to_lowercase();
        let s = self.brackets.brackets.replace_all(&s, "");
        let s = self.brackets.parens.replace_all(&s, "");
        let mut s = if self.fillers.is_match_inner(&s) {
            self.fillers.replace_literal(&s, "")
        } else {
            s.into_owned()
        };
        s = self.space_apostrophe.replace_all(&s, "'").into_owned();
        for (pattern, replacement) in &self.replacers {
            if pattern.is_match_inner(&s) {
                s = pattern.replace_literal(&s, replacement);
            }
        }
        let s = self.digit_comma.replace_all(&s, "${1}${2}");
        let s = self.period.replace_all(&s, " ${1}");
        let s = remove_symbols_and_diacritics(&s, ".%$¢€£");
        let s = self.numbers.normalize(&s);
        let s = py_split(&s)
            .map(|w| self.spellings.get(w).map_or(w, String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        let s = self
            .lone_symbol
            .replace_all(&s, |c: &Captures| format!(" {}", &c[1]));
        let s = self
            .lone_percent
            .replace_all(&s, |c: &Captures| format!("{} ", &c[1]));
        self.brackets.spaces.replace_all(&s, " ").into_owned()
    }
}

impl Default for EnglishTextNormalizer {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spelling_table_is_complete() {
        assert_eq!(spelling_map().len(), 1739);
        assert_eq!(spelling_map()["colour"], "color");
    }

    #[test]
    fn typical_sentence() {
        let n = EnglishTextNormalizer::new();
        assert_eq!(
            n.normalize("Mr. Smith won't pay $20 million, he's [laughs] 25% sure!"),
            "mister smith will not pay $20000000 he is 25% sure"
        );
    }
}
