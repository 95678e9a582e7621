//! Port of Whisper's `BasicTextNormalizer` (the normalizer Whisper uses for non-English text).
//!
//! Source: `whisper/normalizers/basic.py` of openai/whisper (MIT), as packaged by the PyPI
//! `whisper-normalizer` 0.1.15, which the parity fixtures are generated with.

use regex::Regex;
use unicode_general_category::{get_general_category, GeneralCategory as Gc};
use unicode_normalization::UnicodeNormalization;
use unicode_segmentation::UnicodeSegmentation;

use crate::pyre::{re, PY_SPACE};

/// Non-ASCII letters that NFKD does not split into a base letter and a diacritic.
fn additional_diacritic(c: char) -> Option<&'static str> {
    Some(match c {
        'œ' => "oe",
        'Œ' => "OE",
        'ø' => "o",
        'Ø' => "O",
        'æ' => "ae",
        'Æ' => "AE",
        'ß' => "ss",
        'ẞ' => "SS",
        'đ' => "d",
        'Đ' => "D",
        'ð' => "d",
        'Ð' => "D",
        'þ' => "th",
        'Þ' => "th",
        'ł' => "l",
        'Ł' => "L",
        _ => return None,
    })
}

/// Whether the general category starts with M, S or P (mark, symbol, punctuation).
fn is_mark_symbol_punct(c: char) -> bool {
    matches!(
        get_general_category(c),
        Gc::NonspacingMark
            | Gc::SpacingMark
            | Gc::EnclosingMark
            | Gc::MathSymbol
            | Gc::CurrencySymbol
            | Gc::ModifierSymbol
            | Gc::OtherSymbol
            | Gc::ConnectorPunctuation
            | Gc::DashPunctuation
            | Gc::OpenPunctuation
            | Gc::ClosePunctuation
            | Gc::InitialPunctuation
            | Gc::FinalPunctuation
            | Gc::OtherPunctuation
    )
}

/// NFKD, then drop nonspacing marks (diacritics), spell out letters NFKD keeps whole
/// (œ, ø, ß, ł, ...) and replace other marks, symbols and punctuation with a space;
/// characters in `keep` stay.
pub fn remove_symbols_and_diacritics(s: &str, keep: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.nfkd() {
        if keep.contains(c) {
            out.push(c);
        } else if let Some(rep) = additional_diacritic(c) {
            out.push_str(rep);
        } else if get_general_category(c) == Gc::NonspacingMark {
        } else if is_mark_symbol_punct(c) {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// NFKC, then replace marks, symbols and punctuation with a space (keeps diacritics).
pub fn remove_symbols(s: &str) -> String {
    s.nfkc()
        .map(|c| if is_mark_symbol_punct(c) { ' ' } else { c })
        .collect()
}

/// Regexes shared by the basic and the English normalizer.
pub(crate) struct BracketRegexes {
    /// `[<\[][^>\]]*[>\]]`: words between angle or square brackets.
    pub brackets: Regex,
    /// `\(([^)]+?)\)`: words between parentheses.
    pub parens: Regex,
    /// Python `\s+`.
    pub spaces: Regex,
}

impl BracketRegexes {
    pub(crate) fn new() -> Self {
        Self {
            brackets: re(r"[<\[][^>\]]*[>\]]"),
            parens: re(r"\(([^)]+?)\)"),
            spaces: re(&format!("{PY_SPACE}+")),
        }
    }
}

/// Whisper's language-independent normalizer: lowercases, removes bracketed and parenthesized
/// phrases, replaces symbols and punctuation with spaces and collapses whitespace.
///
/// The result keeps Python's quirks, such as a possible leading or trailing space.
pub struct BasicTextNormalizer {
    remove_diacritics: bool,
    split_letters: bool,
    re: BracketRegexes,
}

impl BasicTextNormalizer {
    /// `remove_diacritics` also strips accents (NFKD) instead of keeping them (NFKC);
    /// `split_letters` separates every grapheme cluster by a space (for scripts without spaces).
    pub fn new(remove_diacritics: bool, split_letters: bool) -> Self {
        Self {
            remove_diacritics,
            split_letters,
            re: BracketRegexes::new(),
        }
    }

    /// Normalizes one string.
    pub fn normalize(&self, s: &str) -> String {
        let s = s.to_lowercase();
        let s = self.re.brackets.replace_all(&s, "");
        let s = self.re.parens.replace_all(&s, "");
        let s = if self.remove_diacritics {
            remove_symbols_and_diacritics(&s, "")
        } else {
            remove_symbols(&s)
        };
        let mut s = s.to_lowercase();
        if self.split_letters {
            s = s.graphemes(true).collect::<Vec<_>>().join(" ");
        }
        self.re.spaces.replace_all(&s, " ").into_owned()
    }
}

impl Default for BasicTextNormalizer {
    /// Whisper's defaults: keep diacritics, do not split letters.
    fn default() -> Self {
        Self::new(false, false)
    }
}
