//! Text helpers shared by the engine and the transports.

/// Bytes of a prompt worth keeping: Whisper conditions on a prompt's last 223 tokens, which a
/// tail of this many bytes always holds (a token is rarely over 16 bytes). The engine tokenizes
/// no more than this and the server keeps no more than this of an uploaded prompt.
pub const PROMPT_TAIL_BYTES: usize = 8 << 10;

/// The end of `text` that fits in `max` bytes, starting at a word (after a whitespace
/// character), or all of `text` when it fits.
///
/// Whisper conditions on the last 223 tokens of a prompt, so a prompt can be cut to a tail
/// that surely holds that many tokens before it is tokenized: byte-level BPE tokenizes each
/// whitespace-led word on its own, so the tokens of the words after the cut are the same as
/// in the whole text. When no whitespace falls in the tail (one enormous "word"), the tail is
/// cut at a character boundary instead.
pub fn prompt_tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let tail = &text[start..];
    match tail.char_indices().find(|(_, c)| c.is_whitespace()) {
        Some((i, _)) => tail[i..].trim_start(),
        None => tail,
    }
}

/// The start of `text` that fits in `max` bytes, ending before a word (at a whitespace
/// character), or all of `text` when it fits: the counterpart of [`prompt_tail`] for
/// faster-whisper's `hotwords`, of which Whisper keeps the first 223 tokens. When no
/// whitespace falls in the head, it is cut at a character boundary instead.
pub fn prompt_head(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = &text[..end];
    // The word the cut falls in is dropped whole (unless the cut is right before a space).
    if text[end..].starts_with(char::is_whitespace) {
        return head;
    }
    match head.rfind(char::is_whitespace) {
        Some(i) => head[..i].trim_end(),
        None => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_end_before_a_word() {
        assert_eq!(prompt_head("hello world", 64), "hello world");
        let text = "alpha beta gamma delta";
        assert_eq!(prompt_head(text, 12), "alpha beta");
        assert_eq!(prompt_head(text, 10), "alpha beta");
        assert_eq!(prompt_head(text, 9), "alpha");
        assert_eq!(prompt_head("ééééé", 3), "é");
        assert!(text.starts_with(prompt_head(text, 16)));
    }

    #[test]
    fn short_text_is_kept_whole() {
        assert_eq!(prompt_tail("hello world", 64), "hello world");
    }

    #[test]
    fn long_text_is_cut_at_a_word_within_the_budget() {
        let text = "alpha beta gamma delta epsilon";
        let t = prompt_tail(text, 12);
        assert_eq!(t, "epsilon");
        assert!(text.ends_with(t) && t.len() <= 12);
        assert_eq!(prompt_tail(text, 14), "delta epsilon");
    }

    #[test]
    fn multibyte_text_and_one_long_word_are_cut_on_char_boundaries() {
        let text = "ééééééééé";
        let t = prompt_tail(text, 5);
        assert!(text.ends_with(t) && t.len() <= 5 && !t.is_empty());
        let cjk = "日本語のテキスト 日本語";
        let t = prompt_tail(cjk, 10);
        assert_eq!(t, "日本語");
    }
}
