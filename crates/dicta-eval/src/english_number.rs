//! Port of Whisper's `EnglishNumberNormalizer`: spelled-out numbers to digits.
//!
//! Source: `whisper/normalizers/english.py` (openai/whisper, MIT) as packaged by PyPI
//! `whisper-normalizer` 0.1.15. The state machine in [`EnglishNumberNormalizer::process_words`]
//! mirrors the Python generator branch for branch, including its quirks ("ninth" is not an
//! ordinal there, "o" reads as zero), because WER parity depends on identical output.
//! Python integers are unbounded, so integer values are [`BigUint`].

use std::collections::{HashMap, HashSet};

use num_bigint::BigUint;
use regex::{Captures, Regex};

use crate::pyre::{
    digit_value, is_numeric_word, py_split, py_strip, re, BoundedRegex, BOTH, PY_SPACE, RIGHT,
};

const ONES: [&str; 19] = [
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];

const TENS: [(&str, u32); 8] = [
    ("twenty", 20),
    ("thirty", 30),
    ("forty", 40),
    ("fifty", 50),
    ("sixty", 60),
    ("seventy", 70),
    ("eighty", 80),
    ("ninety", 90),
];

/// Multiplier words and their power of ten.
const MULTIPLIERS: [(&str, u32); 12] = [
    ("hundred", 2),
    ("thousand", 3),
    ("million", 6),
    ("billion", 9),
    ("trillion", 12),
    ("quadrillion", 15),
    ("quintillion", 18),
    ("sextillion", 21),
    ("septillion", 24),
    ("octillion", 27),
    ("nonillion", 30),
    ("decillion", 33),
];

/// A pending number: Python keeps either an `int` or a digit string (e.g. "1.5", "007").
#[derive(Clone)]
enum Value {
    Int(BigUint),
    Str(String),
}

impl Value {
    /// Python's `str(value)`.
    fn py_str(&self) -> String {
        match self {
            Value::Int(n) => n.to_string(),
            Value::Str(s) => s.clone(),
        }
    }
}

/// Python's `str(value or "")`: `None`, `0` and `""` are all falsy.
fn str_or_empty(v: &Option<Value>) -> String {
    match v {
        Some(Value::Int(n)) if n.bits() == 0 => String::new(),
        Some(v) => v.py_str(),
        None => String::new(),
    }
}

fn is_zero(n: &BigUint) -> bool {
    n.bits() == 0
}

fn pow10(exp: u32) -> BigUint {
    BigUint::from(10u32).pow(exp)
}

/// `Fraction(s) * 10**exp` for the digit strings this normalizer builds: `Some(Some(n))` when
/// the product is the integer `n`, `Some(None)` when it is not an integer, `None` when Python's
/// `Fraction` would reject `s`.
fn fraction_times_pow10(s: &str, exp: u32) -> Option<Option<BigUint>> {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, f),
        None => (s, ""),
    };
    // Fraction's grammar: digits, then an optional "." and digits, starting with a digit or ".digit".
    let starts_ok = !int.is_empty() || !frac.is_empty();
    if !starts_ok || frac.contains('.') {
        return None;
    }
    let mut digits = Vec::with_capacity(int.len() + frac.len());
    for c in int.chars().chain(frac.chars()) {
        digits.push(digit_value(c)? as u8);
    }
    let scale = frac.chars().count() as u32;
    let n = if digits.is_empty() {
        BigUint::default()
    } else {
        BigUint::from_radix_be(&digits, 10)?
    };
    let n = n * pow10(exp);
    if scale == 0 {
        return Some(Some(n));
    }
    let d = pow10(scale);
    if is_zero(&(&n % &d)) {
        Some(Some(n / d))
    } else {
        Some(None)
    }
}

/// Converts spelled-out English numbers (and currency/percent words around them) to digits.
pub(crate) struct EnglishNumberNormalizer {
    zeros: HashSet<&'static str>,
    ones: HashMap<String, u32>,
    ones_suffixed: HashMap<String, (u32, &'static str)>,
    tens: HashMap<String, u32>,
    tens_suffixed: HashMap<String, (u32, &'static str)>,
    multipliers: HashMap<String, u32>,
    multipliers_suffixed: HashMap<String, (u32, &'static str)>,
    decimals: HashSet<String>,
    words: HashSet<String>,
    and_a_half: BoundedRegex,
    letter_digit: Regex,
    digit_letter: Regex,
    suffix_space: BoundedRegex,
    cents: BoundedRegex,
    only_cents: BoundedRegex,
    one: BoundedRegex,
}

fn preceding_prefixer(w: &str) -> Option<char> {
    match w {
        "minus" | "negative" => Some('-'),
        "plus" | "positive" => Some('+'),
        _ => None,
    }
}

fn following_prefixer(w: &str) -> Option<char> {
    match w {
        "pound" | "pounds" => Some('£'),
        "euro" | "euros" => Some('€'),
        "dollar" | "dollars" => Some('$'),
        "cent" | "cents" => Some('¢'),
        _ => None,
    }
}

fn is_prefix_symbol(c: char) -> bool {
    matches!(c, '-' | '+' | '£' | '€' | '$' | '¢')
}

impl EnglishNumberNormalizer {
    pub(crate) fn new() -> Self {
        let zeros: HashSet<&'static str> = ["o", "oh", "zero"].into_iter().collect();
        let ones: HashMap<String, u32> = ONES
            .iter()
            .zip(1..)
            .map(|(n, v)| (n.to_string(), v))
            .collect();
        let mut ones_suffixed: HashMap<String, (u32, &'static str)> = HashMap::new();
        for (name, v) in ONES.iter().zip(1u32..) {
            let plural = if *name == "six" {
                "sixes".to_string()
            } else {
                format!("{name}s")
            };
            ones_suffixed.insert(plural, (v, "s"));
        }
        for (name, v, suffix) in [
            ("zeroth", 0, "th"),
            ("first", 1, "st"),
            ("second", 2, "nd"),
            ("third", 3, "rd"),
            ("fifth", 5, "th"),
            ("twelfth", 12, "th"),
        ] {
            ones_suffixed.insert(name.to_string(), (v, suffix));
        }
        for (name, v) in ONES.iter().zip(1u32..) {
            if v > 3 && v != 5 && v != 12 {
                let suffix = if name.ends_with('t') { "h" } else { "th" };
                ones_suffixed.insert(format!("{name}{suffix}"), (v, "th"));
            }
        }
        let tens: HashMap<String, u32> = TENS.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        let mut tens_suffixed = HashMap::new();
        for (name, v) in TENS {
            tens_suffixed.insert(name.replace('y', "ies"), (v, "s"));
        }
        for (name, v) in TENS {
            tens_suffixed.insert(name.replace('y', "ieth"), (v, "th"));
        }
        let multipliers: HashMap<String, u32> = MULTIPLIERS
            .iter()
            .map(|(n, e)| (n.to_string(), *e))
            .collect();
        let mut multipliers_suffixed = HashMap::new();
        for (name, e) in MULTIPLIERS {
            multipliers_suffixed.insert(format!("{name}s"), (e, "s"));
        }
        for (name, e) in MULTIPLIERS {
            multipliers_suffixed.insert(format!("{name}th"), (e, "th"));
        }
        let mut decimals: HashSet<String> = ones.keys().cloned().collect();
        decimals.extend(tens.keys().cloned());
        decimals.extend(zeros.iter().map(|z| z.to_string()));

        let mut words: HashSet<String> = decimals.clone();
        words.extend(ones_suffixed.keys().cloned());
        words.extend(tens_suffixed.keys().cloned());
        words.extend(multipliers.keys().cloned());
        words.extend(multipliers_suffixed.keys().cloned());
        for w in [
            "minus", "negative", "plus", "positive", "pound", "pounds", "euro", "euros", "dollar",
            "dollars", "cent", "cents", "per", "percent", "and", "double", "triple", "point",
        ] {
            words.insert(w.to_string());
        }

        Self {
            zeros,
            ones,
            ones_suffixed,
            tens,
            tens_suffixed,
            multipliers,
            multipliers_suffixed,
            decimals,
            words,
            and_a_half: BoundedRegex::new(&format!("and{PY_SPACE}+a{PY_SPACE}+half"), BOTH),
            letter_digit: re("([a-z])([0-9])"),
            digit_letter: re("([0-9])([a-z])"),
            // "st" before "s" so that a failed boundary after the preferred match rules out all.
            suffix_space: BoundedRegex::new(&format!("([0-9]){PY_SPACE}+(st|nd|rd|th|s)"), RIGHT),
            cents: BoundedRegex::new("([€£$])([0-9]+) (?:and )?¢([0-9]{1,2})", RIGHT),
            only_cents: BoundedRegex::new("[€£$]0.([0-9]{1,2})", RIGHT),
            one: BoundedRegex::new("1(s?)", BOTH),
        }
    }

    fn is_word(&self, w: Option<&str>) -> bool {
        w.is_some_and(|w| self.words.contains(w))
    }

    /// The number state machine over whitespace-split words (Python's `process_words`).
    fn process_words(&self, words: &[&str]) -> Vec<String> {
        let mut out: Vec<String> = Vec::with_capacity(words.len());
        let mut prefix: Option<char> = None;
        let mut value: Option<Value> = None;
        let mut skip = false;

        // Python's `output()`: apply the prefix and reset the pending state.
        fn output(prefix: &mut Option<char>, value: &mut Option<Value>, result: String) -> String {
            *value = None;
            match prefix.take() {
                Some(p) => {
                    let mut s = String::with_capacity(result.len() + 2);
                    s.push(p);
                    s.push_str(&result);
                    s
                }
                None => result,
            }
        }
        macro_rules! emit {
            ($r:expr) => {{
                let r = $r;
                out.push(output(&mut prefix, &mut value, r));
            }};
        }
        macro_rules! flush {
            () => {{
                if let Some(v) = value.take() {
                    out.push(output(&mut prefix, &mut value, v.py_str()));
                }
            }};
        }

        for i in 0..words.len() {
            if skip {
                skip = false;
                continue;
            }
            let prev = if i > 0 { Some(words[i - 1]) } else { None };
            let current = words[i];
            let next = words.get(i + 1).copied();
            let next_is_numeric = next.is_some_and(is_numeric_word);
            let first = current.chars().next().unwrap_or(' ');
            let has_prefix = is_prefix_symbol(first);
            let without_prefix = if has_prefix {
                &current[first.len_utf8()..]
            } else {
                current
            };
            let prev_in_ones = prev.is_some_and(|p| self.ones.contains_key(p));
            let prev_in_tens = prev.is_some_and(|p| self.tens.contains_key(p));

            if is_numeric_word(without_prefix) {
                // Arabic numbers, possibly with a currency sign and decimals.
                let f = fraction_times_pow10(without_prefix, 0);
                if let Some(v) = &value {
                    if let Value::Str(s) = v {
                        if s.ends_with('.') {
                            // Concatenate decimals / IP address components.
                            value = Some(Value::Str(format!("{s}{current}")));
                            continue;
                        }
                    }
                    flush!();
                }
                if has_prefix {
                    prefix = Some(first);
                }
                value = Some(match f {
                    Some(Some(n)) => Value::Int(n),
                    _ => Value::Str(without_prefix.to_string()),
                });
            } else if !self.words.contains(current) {
                flush!();
                emit!(current.to_string());
            } else if self.zeros.contains(current) {
                value = Some(Value::Str(str_or_empty(&value) + "0"));
            } else if let Some(&ones) = self.ones.get(current) {
                value = Some(match value.take() {
                    None => Value::Int(BigUint::from(ones)),
                    Some(v) if matches!(v, Value::Str(_)) || prev_in_ones => {
                        let mut s = v.py_str();
                        if prev_in_tens && ones < 10 {
                            // Replace the tens' trailing zero with the digit.
                            s.pop();
                        }
                        s.push_str(&ones.to_string());
                        Value::Str(s)
                    }
                    Some(Value::Int(n)) => {
                        let m = if ones < 10 { 10u32 } else { 100 };
                        if is_zero(&(&n % m)) {
                            Value::Int(n + ones)
                        } else {
                            Value::Str(format!("{n}{ones}"))
                        }
                    }
                    Some(Value::Str(_)) => unreachable!("string values take the branch above"),
                });
            } else if let Some(&(ones, suffix)) = self.ones_suffixed.get(current) {
                // Ordinal or plural: the number is complete, emit it right away.
                let s = match value.take() {
                    None => format!("{ones}{suffix}"),
                    Some(v) if matches!(v, Value::Str(_)) || prev_in_ones => {
                        let mut s = v.py_str();
                        if prev_in_tens && ones < 10 {
                            s.pop();
                        }
                        format!("{s}{ones}{suffix}")
                    }
                    Some(Value::Int(n)) => {
                        let m = if ones < 10 { 10u32 } else { 100 };
                        if is_zero(&(&n % m)) {
                            format!("{}{suffix}", n + ones)
                        } else {
                            format!("{n}{ones}{suffix}")
                        }
                    }
                    Some(Value::Str(_)) => unreachable!("string values take the branch above"),
                };
                emit!(s);
                value = None;
            } else if let Some(&tens) = self.tens.get(current) {
                value = Some(match value.take() {
                    None => Value::Int(BigUint::from(tens)),
                    Some(Value::Str(s)) => Value::Str(format!("{s}{tens}")),
                    Some(Value::Int(n)) => {
                        if is_zero(&(&n % 100u32)) {
                            Value::Int(n + tens)
                        } else {
                            Value::Str(format!("{n}{tens}"))
                        }
                    }
                });
            } else if let Some(&(tens, suffix)) = self.tens_suffixed.get(current) {
                let s = match value.take() {
                    None => format!("{tens}{suffix}"),
                    Some(Value::Str(s)) => format!("{s}{tens}{suffix}"),
                    Some(Value::Int(n)) => {
                        if is_zero(&(&n % 100u32)) {
                            format!("{}{suffix}", n + tens)
                        } else {
                            format!("{n}{tens}{suffix}")
                        }
                    }
                };
                emit!(s);
            } else if let Some(&exp) = self.multipliers.get(current) {
                match value.take() {
                    None => value = Some(Value::Int(pow10(exp))),
                    Some(Value::Int(n)) if !is_zero(&n) => {
                        let before = &n / 1000u32 * 1000u32;
                        let residual = &n % 1000u32;
                        value = Some(Value::Int(before + residual * pow10(exp)));
                    }
                    // A digit string (or zero): scale it when the result is an integer.
                    Some(v) => {
                        let product = match &v {
                            Value::Str(s) => fraction_times_pow10(s, exp),
                            Value::Int(_) => Some(Some(BigUint::default())),
                        };
                        if let Some(Some(p)) = product {
                            value = Some(Value::Int(p));
                        } else {
                            emit!(v.py_str());
                            value = Some(Value::Int(pow10(exp)));
                        }
                    }
                }
            } else if let Some(&(exp, suffix)) = self.multipliers_suffixed.get(current) {
                match value.take() {
                    None => emit!(format!("{}{suffix}", pow10(exp))),
                    Some(Value::Str(s)) => match fraction_times_pow10(&s, exp) {
                        Some(Some(p)) => emit!(format!("{p}{suffix}")),
                        _ => {
                            emit!(s);
                            emit!(format!("{}{suffix}", pow10(exp)));
                        }
                    },
                    Some(Value::Int(n)) => {
                        let before = &n / 1000u32 * 1000u32;
                        let residual = &n % 1000u32;
                        let v = before + residual * pow10(exp);
                        emit!(format!("{v}{suffix}"));
                    }
                }
                value = None;
            } else if let Some(sym) = preceding_prefixer(current) {
                // Apply a sign only if it precedes a number.
                flush!();
                if self.is_word(next) || next_is_numeric {
                    prefix = Some(sym);
                } else {
                    emit!(current.to_string());
                }
            } else if let Some(sym) = following_prefixer(current) {
                // Currency words apply only after a number.
                if let Some(v) = value.take() {
                    prefix = Some(sym);
                    emit!(v.py_str());
                } else {
                    emit!(current.to_string());
                }
            } else if current == "per" || current == "percent" {
                if let Some(v) = value.take() {
                    if current == "per" {
                        if next == Some("cent") {
                            emit!(v.py_str() + "%");
                            skip = true;
                        } else {
                            emit!(v.py_str());
                            emit!(current.to_string());
                        }
                    } else {
                        emit!(v.py_str() + "%");
                    }
                } else {
                    emit!(current.to_string());
                }
            } else {
                // Specials: and, double, triple, point.
                if !self.is_word(next) && !next_is_numeric {
                    flush!();
                    emit!(current.to_string());
                } else if current == "and" {
                    // "and" after hundreds, thousands, ... is part of the number.
                    if !prev.is_some_and(|p| self.multipliers.contains_key(p)) {
                        flush!();
                        emit!(current.to_string());
                    }
                } else if current == "double" || current == "triple" {
                    let nx = next.unwrap_or("");
                    if self.ones.contains_key(nx) || self.zeros.contains(nx) {
                        let repeats = if current == "double" { 2 } else { 3 };
                        let digit = self.ones.get(nx).copied().unwrap_or(0).to_string();
                        value = Some(Value::Str(str_or_empty(&value) + &digit.repeat(repeats)));
                        skip = true;
                    } else {
                        flush!();
                        emit!(current.to_string());
                    }
                } else if current == "point"
                    && (next.is_some_and(|n| self.decimals.contains(n)) || next_is_numeric)
                {
                    value = Some(Value::Str(str_or_empty(&value) + "."));
                }
            }
        }
        flush!();
        out
    }

    /// "<number> and a half" becomes "<number> point five"; digits and letters are split apart
    /// except for ordinal/plural suffixes.
    fn preprocess(&self, s: &str) -> String {
        let segments = self.and_a_half.split(s);
        let n = segments.len();
        let mut results: Vec<&str> = Vec::with_capacity(2 * n);
        for (i, segment) in segments.into_iter().enumerate() {
            if py_strip(segment).is_empty() {
                continue;
            }
            results.push(segment);
            if i + 1 < n {
                let last_word = py_split(segment).last().unwrap_or("");
                if self.decimals.contains(last_word) || self.multipliers.contains_key(last_word) {
                    results.push("point five");
                } else {
                    results.push("and a half");
                }
            }
        }
        let s = results.join(" ");
        let s = self.letter_digit.replace_all(&s, "$1 $2");
        let s = self.digit_letter.replace_all(&s, "$1 $2");
        self.suffix_space
            .replace(&s, |c: &Captures, out: &mut String| {
                out.push_str(&c[1]);
                out.push_str(&c[2]);
            })
    }

    /// Currency clean-up ("$2 and ¢7" → "$2.07", "$0.5" → "¢5") and "1" → "one".
    fn postprocess(&self, s: &str) -> String {
        let s = self.cents.replace(s, |c: &Captures, out: &mut String| {
            let cents: u32 = c[3].parse().unwrap_or(0);
            out.push_str(&c[1]);
            out.push_str(&c[2]);
            out.push_str(&format!(".{cents:02}"));
        });
        let s = self
            .only_cents
            .replace(&s, |c: &Captures, out: &mut String| {
                let cents: u32 = c[1].parse().unwrap_or(0);
                out.push_str(&format!("¢{cents}"));
            });
        self.one.replace(&s, |c: &Captures, out: &mut String| {
            out.push_str("one");
            out.push_str(&c[1]);
        })
    }

    /// Normalizes numbers in an already lowercased, symbol-stripped string.
    pub(crate) fn normalize(&self, s: &str) -> String {
        let s = self.preprocess(s);
        let words: Vec<&str> = py_split(&s).collect();
        let s = self.process_words(&words).join(" ");
        self.postprocess(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fraction_products() {
        assert_eq!(fraction_times_pow10("1.5", 3), Some(Some(1500u32.into())));
        assert_eq!(fraction_times_pow10("1.2345", 3), Some(None));
        assert_eq!(fraction_times_pow10("5.", 2), Some(Some(500u32.into())));
        assert_eq!(fraction_times_pow10(".", 2), None);
        assert_eq!(fraction_times_pow10("5.$3", 2), None);
        assert_eq!(fraction_times_pow10("1.2.3", 2), None);
    }

    #[test]
    fn spelled_numbers() {
        let n = EnglishNumberNormalizer::new();
        assert_eq!(n.normalize("twenty one"), "21");
        assert_eq!(n.normalize("one hundred and five"), "105");
        assert_eq!(n.normalize("twenty million dollars"), "$20000000");
        assert_eq!(n.normalize("one oh one"), "101");
        assert_eq!(n.normalize("the twenty first"), "the 21st");
    }
}
