//! ARPA text reader. Streams the file line by line (no copy of the whole text is kept) and
//! reports malformed input with the 1-based line number.

use std::io::BufRead;

use dicta_core::{Error, ErrorKind, Result};
use rustc_hash::FxHashMap;

use super::{NgramLm, NgramTable, MAX_ORDER};

struct Lines<R> {
    reader: R,
    buf: String,
    line_no: usize,
}

impl<R: BufRead> Lines<R> {
    /// Reads the next line; false at end of file.
    fn advance(&mut self) -> Result<bool> {
        self.buf.clear();
        let n = self.reader.read_line(&mut self.buf).map_err(|e| {
            Error::new(
                ErrorKind::CorruptInput,
                format!("ARPA line {}: cannot read: {e}", self.line_no + 1),
            )
        })?;
        if n == 0 {
            return Ok(false);
        }
        self.line_no += 1;
        Ok(true)
    }

    /// The line last read, without its line ending.
    fn current(&self) -> &str {
        self.buf.trim_end_matches(['\n', '\r'])
    }

    /// Next line (see [`Lines::current`]); `None` at end of file.
    fn next_line(&mut self) -> Result<Option<&str>> {
        Ok(if self.advance()? {
            Some(self.current())
        } else {
            None
        })
    }

    /// Next line that is not entirely whitespace.
    fn next_nonblank(&mut self) -> Result<Option<(usize, String)>> {
        loop {
            let no = self.line_no + 1;
            match self.next_line()? {
                None => return Ok(None),
                Some(l) if l.trim().is_empty() => continue,
                Some(l) => return Ok(Some((no, l.trim().to_string()))),
            }
        }
    }

    fn err(&self, msg: impl std::fmt::Display) -> Error {
        Error::new(
            ErrorKind::CorruptInput,
            format!("ARPA line {}: {msg}", self.line_no),
        )
    }
}

fn parse_f32(field: &str, what: &str, lines: &Lines<impl BufRead>) -> Result<f32> {
    field
        .parse::<f32>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| lines.err(format!("expected a {what} number, found {field:?}")))
}

/// Most entries reserved per table before they are read (see [`parse_arpa`]).
const MAX_RESERVE: usize = 1 << 22;

/// Parses an ARPA back-off language model. Errors (kind `CorruptInput`) name the line: bad or
/// missing `\data\` counts, a section with more or fewer n-grams than announced, a field that is
/// not a number, an unknown word, a context missing from the lower order, a missing `\end\`.
pub fn parse_arpa(reader: impl BufRead) -> Result<NgramLm> {
    let mut lines = Lines {
        reader,
        buf: String::with_capacity(256),
        line_no: 0,
    };
    let counts = read_header(&mut lines)?;
    let order = counts.len();
    tracing::debug!(?counts, "ARPA header");

    // The header's counts are only promises (checked as the sections are read): reserve at
    // most MAX_RESERVE entries up front, so that a damaged count cannot abort the process
    // with an allocation failure; real models past it grow as they are read.
    let reserve = |count: usize| count.saturating_add(1).min(MAX_RESERVE);
    let mut words: Vec<Box<str>> = Vec::with_capacity(reserve(counts[0]));
    let mut index: FxHashMap<Box<str>, u32> = FxHashMap::default();
    index.reserve(reserve(counts[0]));
    let mut uni_prob = Vec::with_capacity(reserve(counts[0]));
    let mut uni_backoff = Vec::with_capacity(reserve(counts[0]));
    let mut tables: Vec<NgramTable> = Vec::with_capacity(order.saturating_sub(1));

    let mut next_header = lines.next_nonblank()?;
    for (k, &count) in counts.iter().enumerate() {
        let n = k + 1;
        let expected = format!("\\{n}-grams:");
        match &next_header {
            Some((_, l)) if *l == expected => {}
            Some((no, l)) => {
                return Err(Error::new(
                    ErrorKind::CorruptInput,
                    format!("ARPA line {no}: expected {expected:?}, found {l:?}"),
                ))
            }
            None => return Err(lines.err(format!("file ends before {expected:?}"))),
        }
        let has_backoff = n < order;
        let cap = if n > 1 { reserve(count) } else { 0 };
        let mut table = NgramTable {
            keys: Vec::with_capacity(cap),
            probs: Vec::with_capacity(cap),
            backoffs: Vec::with_capacity(if has_backoff { cap } else { 0 }),
        };
        let mut seen = 0usize;
        loop {
            if !lines.advance()? {
                return Err(lines.err(format!(
                    "file ends inside the {n}-grams ({seen} of {count} read) without \\end\\"
                )));
            }
            let line = lines.current().trim();
            if line.is_empty() {
                continue;
            }
            if line.starts_with('\\') {
                next_header = Some((lines.line_no, line.to_string()));
                break;
            }
            if seen == count {
                return Err(lines.err(format!(
                    "more {n}-grams than the {count} announced in \\data\\"
                )));
            }
            seen += 1;
            let mut fields = line.split_ascii_whitespace();
            let prob = parse_f32(fields.next().unwrap_or(""), "log10 probability", &lines)?;
            let mut ids = [0u32; MAX_ORDER];
            for (i, id) in ids.iter_mut().enumerate().take(n) {
                let Some(w) = fields.next() else {
                    return Err(lines.err(format!("expected {n} words, found {i}")));
                };
                *id = if n == 1 {
                    if index.contains_key(w) {
                        return Err(lines.err(format!("duplicate 1-gram {w:?}")));
                    }
                    let id = words.len() as u32;
                    words.push(w.into());
                    index.insert(w.into(), id);
                    id
                } else {
                    *index
                        .get(w)
                        .ok_or_else(|| lines.err(format!("word {w:?} is not among the 1-grams")))?
                };
            }
            let backoff = match fields.next() {
                Some(f) => parse_f32(f, "log10 back-off", &lines)?,
                None => 0.0,
            };
            if let Some(extra) = fields.next() {
                return Err(lines.err(format!("unexpected field {extra:?} after the back-off")));
            }
            if n == 1 {
                uni_prob.push(prob);
                uni_backoff.push(backoff);
                continue;
            }
            // Resolve the (n-1)-word prefix to its index in the order below.
            let mut prefix = ids[0];
            for (j, &w) in ids.iter().enumerate().take(n - 1).skip(1) {
                prefix = tables[j - 1].find(prefix, w).ok_or_else(|| {
                    lines.err(format!(
                        "the context of this {n}-gram is not among the {}-grams",
                        j + 1
                    ))
                })?;
            }
            let key = (u64::from(prefix) << 32) | u64::from(ids[n - 1]);
            table.keys.push(key);
            table.probs.push(prob);
            if has_backoff {
                table.backoffs.push(backoff);
            }
        }
        if seen != count {
            return Err(lines.err(format!(
                "the {n}-grams section has {seen} entries but \\data\\ announced {count}"
            )));
        }
        if n > 1 {
            tables.push(finish_table(table, n)?);
        }
    }
    match next_header {
        Some((_, l)) if l == "\\end\\" => {}
        Some((no, l)) => {
            return Err(Error::new(
                ErrorKind::CorruptInput,
                format!("ARPA line {no}: expected \\end\\, found {l:?}"),
            ))
        }
        None => return Err(lines.err("file ends without \\end\\")),
    }

    NgramLm::from_parts(order, words, index, uni_prob, uni_backoff, tables)
}

fn read_header(lines: &mut Lines<impl BufRead>) -> Result<Vec<usize>> {
    match lines.next_nonblank()? {
        Some((_, l)) if l == "\\data\\" => {}
        Some((no, l)) => {
            return Err(Error::new(
                ErrorKind::CorruptInput,
                format!("ARPA line {no}: expected \\data\\, found {l:?}"),
            ))
        }
        None => return Err(lines.err("empty file: expected \\data\\")),
    }
    let mut counts = Vec::new();
    loop {
        if !lines.advance()? {
            return Err(lines.err("file ends inside \\data\\"));
        }
        let line = lines.current().trim();
        if line.is_empty() {
            if counts.is_empty() {
                continue;
            }
            break;
        }
        let Some(rest) = line.strip_prefix("ngram ") else {
            return Err(lines.err(format!("expected \"ngram N=count\", found {line:?}")));
        };
        let (n, c) = rest
            .split_once('=')
            .ok_or_else(|| lines.err(format!("expected \"ngram N=count\", found {line:?}")))?;
        let n: usize = n
            .trim()
            .parse()
            .map_err(|_| lines.err(format!("bad n-gram order {:?}", n.trim())))?;
        let c: usize = c
            .trim()
            .parse()
            .map_err(|_| lines.err(format!("bad n-gram count {:?}", c.trim())))?;
        if n != counts.len() + 1 {
            return Err(lines.err(format!(
                "expected the count of {}-grams, found {n}-grams",
                counts.len() + 1
            )));
        }
        if n > MAX_ORDER {
            return Err(lines.err(format!(
                "n-gram order {n} is above the supported maximum {MAX_ORDER}"
            )));
        }
        counts.push(c);
    }
    if counts[0] == 0 {
        return Err(lines.err("the model announces no 1-grams"));
    }
    Ok(counts)
}

/// Sorts a table by key (ARPA files written in vocabulary order are already sorted, and then
/// nothing is copied) and refuses duplicate n-grams.
pub(crate) fn finish_table(mut t: NgramTable, n: usize) -> Result<NgramTable> {
    if !t.keys.is_sorted() {
        let mut perm: Vec<u32> = (0..t.keys.len() as u32).collect();
        perm.sort_unstable_by_key(|&i| t.keys[i as usize]);
        t.keys = perm.iter().map(|&i| t.keys[i as usize]).collect();
        t.probs = perm.iter().map(|&i| t.probs[i as usize]).collect();
        if !t.backoffs.is_empty() {
            t.backoffs = perm.iter().map(|&i| t.backoffs[i as usize]).collect();
        }
    }
    if let Some(w) = t.keys.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::new(
            ErrorKind::CorruptInput,
            format!(
                "ARPA: duplicate {n}-gram (prefix index {}, word id {})",
                w[0] >> 32,
                w[0] & 0xffff_ffff
            ),
        ));
    }
    Ok(t)
}
