//! Python `re` / `str` semantics that Rust's `regex` and `str` do not share.
//!
//! The normalizers are ports of Python code, and a faithful port has to agree with Python on
//! three details that differ between the languages:
//! - `\w` (and so `\b`) in Python means "letter, number or underscore" by general category,
//!   while Rust's `\w` also counts combining marks and connector punctuation. Rust's `regex`
//!   has no look-around and no custom `\b`, so word boundaries are checked by hand here.
//! - Python's whitespace (`\s`, `str.split()`, `str.strip()`) also includes U+001C..U+001F.
//! - Python's `\d` / `int()` accept every decimal digit (category Nd), not only ASCII ones.

use regex::{Captures, Regex};
use unicode_general_category::{get_general_category, GeneralCategory as Gc};

/// Regex class equal to Python's `\s` for `str` patterns.
pub(crate) const PY_SPACE: &str = r"[\s\x1C-\x1F]";

/// Python's `str.isspace()`.
pub(crate) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\x1C'..='\x1F').contains(&c)
}

/// Python's `str.split()` without arguments.
pub(crate) fn py_split(s: &str) -> impl Iterator<Item = &str> {
    s.split(is_py_space).filter(|w| !w.is_empty())
}

/// Python's `str.strip()` without arguments.
pub(crate) fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// Python `re`'s `\w` for `str` patterns: `str.isalnum()` (letters and numbers by category) or `_`.
pub(crate) fn is_py_word(c: char) -> bool {
    c == '_'
        || matches!(
            get_general_category(c),
            Gc::UppercaseLetter
                | Gc::LowercaseLetter
                | Gc::TitlecaseLetter
                | Gc::ModifierLetter
                | Gc::OtherLetter
                | Gc::DecimalNumber
                | Gc::LetterNumber
                | Gc::OtherNumber
        )
}

/// Python's `\b` at byte offset `i` of `s`.
pub(crate) fn is_boundary(s: &str, i: usize) -> bool {
    let before = s[..i].chars().next_back().is_some_and(is_py_word);
    let after = s[i..].chars().next().is_some_and(is_py_word);
    before != after
}

/// Value of a decimal digit of any script (category Nd), as Python's `int()` reads it.
///
/// Unicode guarantees that Nd characters come in contiguous runs of ten, zero first, so the
/// value is the position inside the run of consecutive Nd code points.
pub(crate) fn digit_value(c: char) -> Option<u32> {
    if c.is_ascii_digit() {
        return Some(c as u32 - '0' as u32);
    }
    if get_general_category(c) != Gc::DecimalNumber {
        return None;
    }
    let mut run = 0u32;
    let mut cp = c as u32;
    while let Some(prev) = cp.checked_sub(1).and_then(char::from_u32) {
        if get_general_category(prev) != Gc::DecimalNumber {
            break;
        }
        run += 1;
        cp -= 1;
    }
    Some(run % 10)
}

/// Python's `re.match(r"^\d+(\.\d+)?$", s)` (for strings without a newline).
pub(crate) fn is_numeric_word(s: &str) -> bool {
    let is_digits = |p: &str| !p.is_empty() && p.chars().all(|c| digit_value(c).is_some());
    match s.split_once('.') {
        None => is_digits(s),
        Some((int, frac)) => is_digits(int) && is_digits(frac),
    }
}

/// Which sides of a pattern carry a Python `\b`.
#[derive(Clone, Copy)]
pub(crate) struct Bounds {
    pub left: bool,
    pub right: bool,
}

pub(crate) const BOTH: Bounds = Bounds {
    left: true,
    right: true,
};
pub(crate) const RIGHT: Bounds = Bounds {
    left: false,
    right: true,
};

/// A regex plus the `\b` assertions Rust cannot express next to it.
///
/// Matching reproduces Python's scan: try the leftmost match; when its boundaries fail, retry one
/// character later. This equals backtracking `re` only if, at a given start, no other match
/// of the inner regex could pass the boundary check where the preferred one failed; every
/// pattern built here is written (longest alternative first) so that this holds.
pub(crate) struct BoundedRegex {
    re: Regex,
    bounds: Bounds,
}

impl BoundedRegex {
    /// Compiles a pattern that is known to be valid (all patterns are literals in this crate).
    pub(crate) fn new(pattern: &str, bounds: Bounds) -> Self {
        // Patterns are compile-time constants covered by tests; failure is a programming error.
        let re = Regex::new(pattern).expect("built-in normalizer pattern must compile");
        Self { re, bounds }
    }

    /// Calls `f` for each accepted match, left to right, non-overlapping.
    fn for_each_match<'h>(&self, s: &'h str, mut f: impl FnMut(Captures<'h>)) {
        let mut start = 0;
        while start <= s.len() {
            let Some(caps) = self.re.captures_at(s, start) else {
                break;
            };
            let m = caps.get(0).expect("group 0 always participates");
            let ok = (!self.bounds.left || is_boundary(s, m.start()))
                && (!self.bounds.right || is_boundary(s, m.end()));
            let step = s[m.start()..].chars().next().map_or(1, char::len_utf8);
            if ok {
                start = if m.end() > m.start() {
                    m.end()
                } else {
                    m.end() + step
                };
                f(caps);
            } else {
                start = m.start() + step;
            }
        }
    }

    /// Python's `re.sub` with a replacement function.
    pub(crate) fn replace(&self, s: &str, mut rep: impl FnMut(&Captures, &mut String)) -> String {
        let mut out = String::with_capacity(s.len() + 8);
        let mut last = 0;
        self.for_each_match(s, |caps| {
            let m = caps.get(0).expect("group 0 always participates");
            out.push_str(&s[last..m.start()]);
            rep(&caps, &mut out);
            last = m.end();
        });
        out.push_str(&s[last..]);
        out
    }

    /// Python's `re.sub` with a literal replacement string (no group references).
    pub(crate) fn replace_literal(&self, s: &str, rep: &str) -> String {
        self.replace(s, |_, out| out.push_str(rep))
    }

    /// Python's `re.split` for a pattern without capture groups.
    pub(crate) fn split<'h>(&self, s: &'h str) -> Vec<&'h str> {
        let mut parts = Vec::new();
        let mut last = 0;
        self.for_each_match(s, |caps| {
            let m = caps.get(0).expect("group 0 always participates");
            parts.push(&s[last..m.start()]);
            last = m.end();
        });
        parts.push(&s[last..]);
        parts
    }

    /// Whether the pattern occurs at all (cheap pre-check that skips allocation).
    pub(crate) fn is_match_inner(&self, s: &str) -> bool {
        self.re.is_match(s)
    }
}

/// Compiles a plain regex for patterns without `\b` (valid by construction).
pub(crate) fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("built-in normalizer pattern must compile")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_follow_python_word_chars() {
        // A combining mark is not a word char in Python, so "um" before it is a whole word.
        assert!(is_boundary("um\u{301}", 2));
        // A superscript digit is (category No), so there is no boundary before it.
        assert!(!is_boundary("um\u{b2}", 2));
        assert!(is_boundary("a b", 1));
        assert!(is_boundary("ab", 0));
        assert!(is_boundary("ab", 2));
        assert!(!is_boundary("", 0));
    }

    #[test]
    fn digits_of_other_scripts() {
        assert_eq!(digit_value('7'), Some(7));
        assert_eq!(digit_value('\u{663}'), Some(3)); // ARABIC-INDIC DIGIT THREE
        assert_eq!(digit_value('\u{1D7D9}'), Some(1)); // MATHEMATICAL DOUBLE-STRUCK ONE
        assert_eq!(digit_value('a'), None);
        assert!(is_numeric_word("12.5"));
        assert!(!is_numeric_word("12."));
        assert!(!is_numeric_word(".5"));
    }

    #[test]
    fn bounded_replace_retries_after_failed_boundary() {
        let r = BoundedRegex::new("mm", BOTH);
        assert_eq!(r.replace_literal("mmm mm xmm", "_"), "mmm _ xmm");
        let r = BoundedRegex::new(r"and\s+a\s+half", BOTH);
        assert_eq!(r.split("one and a half two"), vec!["one ", " two"]);
    }
}
