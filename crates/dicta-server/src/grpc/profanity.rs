//! Riva's `profanity_filter`: profane words of a result are replaced by their first letter and
//! asterisks (`"f***"`), as Riva (and Google's recognizer, whose field it copies) document it.
//!
//! The word list and matching are `rustrict`'s (English; profane, offensive and sexual words of
//! moderate severity or worse, so "damn" and "hell" stay). Transcripts are clean words, not chat
//! text, so each whitespace-separated word is judged alone and censored only when the match
//! covers the whole word (punctuation around it kept): "Shitake" and "Scunthorpe" stay, and a
//! space is never starred.

use rustrict::{Censor, Type};

use super::pb::nvidia::riva::asr::SpeechRecognitionAlternative;

/// `text` with each profane word as its first letter and asterisks (one per letter).
pub(crate) fn censor(text: &str) -> String {
    text.split(' ')
        .map(censor_word)
        .collect::<Vec<_>>()
        .join(" ")
}

/// One word (no spaces): censored when the profane match spans its letters, else as it is.
fn censor_word(token: &str) -> String {
    let core_start = token.find(|c: char| c.is_alphanumeric());
    let core_end = token
        .rfind(|c: char| c.is_alphanumeric())
        .map(|i| i + token[i..].chars().next().map_or(1, char::len_utf8));
    let (Some(a), Some(b)) = (core_start, core_end) else {
        return token.to_string();
    };
    let core = &token[a..b];
    let censored = Censor::from_str(core)
        .with_censor_threshold(
            (Type::PROFANE | Type::OFFENSIVE | Type::SEXUAL) & Type::MODERATE_OR_HIGHER,
        )
        .with_censor_first_character_threshold(Type::NONE)
        .with_censor_replacement('*')
        .censor();
    let mut chars = core.chars();
    let first = chars.next().map(String::from).unwrap_or_default();
    let whole = format!("{first}{}", "*".repeat(chars.count()));
    if censored == whole && core.chars().count() > 1 {
        format!("{}{whole}{}", &token[..a], &token[b..])
    } else {
        token.to_string()
    }
}

/// Censors an alternative's transcript and each of its words.
pub(crate) fn censor_alternative(a: &mut SpeechRecognitionAlternative) {
    a.transcript = censor(&a.transcript);
    for w in &mut a.words {
        w.word = censor(&w.word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profane_words_keep_their_first_letter_and_length() {
        assert_eq!(
            censor("What the fuck is this shit?"),
            "What the f*** is this s***?"
        );
        assert_eq!(censor(" Shit, you bastard!"), " S***, you b******!");
        assert_eq!(censor("motherfucker"), "m***********");
    }

    #[test]
    fn clean_words_parts_of_words_and_mild_words_stay() {
        for s in [
            "And so my fellow Americans, ask not.",
            "Shitake mushrooms from Scunthorpe.",
            "a class assignment, a cocktail",
            "damn it, bloody hell",
            "",
            "  two  spaces ",
            "I, 2, 3!",
        ] {
            assert_eq!(censor(s), s);
        }
    }
}
