//! Quoting user input in error messages, bounded: a bad value is shown so the user can
//! find it, but a 10 MB line or a runaway argument must not be echoed whole. Every
//! parser's error message quotes through [`quote_value`]; [`clip_quoted`] is the
//! backstop for messages built by others (clap, serde, toml) before they are printed.

/// Most characters of a bad value an error message quotes.
pub const MAX_QUOTED_CHARS: usize = 80;

/// Most characters [`clip_quoted`] lets through in all: the backstop when the quoting of a
/// message defeats the per-run cuts (a path with a `'` in it pairs with the message's own
/// quotes, and words separated by spaces are each a short run).
pub const MAX_MESSAGE_CHARS: usize = 1024;

/// A path as [`quote_value`] quotes a value (its lossy display form).
pub fn quote_path(path: &std::path::Path) -> String {
    quote_value(&path.display().to_string())
}

/// `value` in single quotes, cut to [`MAX_QUOTED_CHARS`] characters with an ellipsis
/// and the full length when longer, control characters escaped so the message stays
/// one line: `'12XB'`, `'aaaa…' (10000000 characters)`.
pub fn quote_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len().min(MAX_QUOTED_CHARS * 4) + 2);
    out.push('\'');
    let mut cut = false;
    for (shown, c) in value.chars().enumerate() {
        if shown == MAX_QUOTED_CHARS {
            cut = true;
            break;
        }
        push_visible(&mut out, c);
    }
    out.push('\'');
    if cut {
        out.insert(out.len() - 1, '…');
        out.push_str(&format!(" ({} characters)", value.chars().count()));
    }
    out
}

/// Whether `c` must be escaped to keep a message on one visible line: control
/// characters and the Unicode line and paragraph separators.
pub fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
}

/// Appends `c`, or its escape when it is a control character (a newline would break
/// the one-line message, an escape sequence could rewrite the terminal).
fn push_visible(out: &mut String, c: char) {
    if needs_escape(c) {
        out.extend(c.escape_default());
    } else {
        out.push(c);
    }
}

/// `message` with every quoted run (between `'...'`, `"..."` or `` `...` ``) longer than
/// [`MAX_QUOTED_CHARS`] cut with an ellipsis, and any single unquoted run of more than
/// 4 x that many characters cut too, control characters escaped, and the whole cut to
/// [`MAX_MESSAGE_CHARS`]: a last defence for messages whose text this crate did not build.
pub fn clip_quoted(message: &str) -> String {
    let out = clip_runs(message);
    match out.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!(
            "{}… ({} characters in all)",
            &out[..cut],
            out.chars().count()
        ),
        None => out,
    }
}

/// [`clip_quoted`] without the cut of the whole.
fn clip_runs(message: &str) -> String {
    let chars: Vec<char> = message.chars().collect();
    let mut out = String::with_capacity(message.len().min(4096));
    let mut i = 0usize;
    let mut plain_run = 0usize;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '\'' | '"' | '`')
            && let Some(len) = chars[i + 1..].iter().position(|&d| d == c)
        {
            let inner = &chars[i + 1..i + 1 + len];
            // One more for the ellipsis of a value `quote_value` already cut; a value it
            // cut is left whole, its escapes (`\u{0}`) being longer than the characters.
            let cut = inner.len() > MAX_QUOTED_CHARS + 1
                && !(inner.last() == Some(&'…') && is_length_note(&chars[i + 2 + len..]));
            out.push(c);
            for &d in inner.iter().take(if cut { MAX_QUOTED_CHARS } else { len }) {
                push_visible(&mut out, d);
            }
            if cut {
                out.push('…');
            }
            out.push(c);
            if cut {
                out.push_str(&format!(" ({} characters)", inner.len()));
            }
            i += len + 2;
            plain_run = 0;
            continue;
        }
        plain_run = if c.is_whitespace() { 0 } else { plain_run + 1 };
        if plain_run <= MAX_QUOTED_CHARS * 4 {
            push_visible(&mut out, c);
        } else if plain_run == MAX_QUOTED_CHARS * 4 + 1 {
            out.push('…');
        }
        i += 1;
    }
    out
}

/// Whether `rest` starts with the ` (N characters)` [`quote_value`] puts after a value it cut.
fn is_length_note(rest: &[char]) -> bool {
    let Some(rest) = rest.strip_prefix(&[' ', '(']) else {
        return false;
    };
    let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    let note: Vec<char> = " characters)".chars().collect();
    digits > 0 && rest[digits..].starts_with(&note)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn short_values_are_quoted_whole() {
        assert_eq!(quote_value("12XB"), "'12XB'");
        assert_eq!(quote_value(""), "''");
        let exactly = "x".repeat(MAX_QUOTED_CHARS);
        assert_eq!(quote_value(&exactly), format!("'{exactly}'"));
    }

    #[test]
    fn long_values_are_cut_to_80_characters_with_their_length() {
        let long = "é".repeat(10_000);
        let q = quote_value(&long);
        assert_eq!(
            q,
            format!("'{}…' (10000 characters)", "é".repeat(MAX_QUOTED_CHARS))
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(quote_value("a\nb\x1b[2J"), "'a\\nb\\u{1b}[2J'");
    }

    #[test]
    fn clip_quoted_cuts_long_quoted_and_unquoted_runs() {
        let long = "9".repeat(1_000_000);
        let msg =
            format!("invalid value '{long}' for '--interval <DUR>': invalid duration '{long}'");
        let clipped = clip_quoted(&msg);
        assert!(clipped.len() < 600, "{}", clipped.len());
        assert!(clipped.contains("for '--interval <DUR>'"), "{clipped}");
        assert!(clipped.contains("(1000000 characters)"), "{clipped}");
        let bare = format!("found {long} here");
        let clipped = clip_quoted(&bare);
        assert!(clipped.len() < 400, "{clipped}");
        assert!(clipped.ends_with("… here"), "{clipped}");
        assert_eq!(clip_quoted("it's fine"), "it's fine");
        let quoted = quote_value(&long);
        assert_eq!(clip_quoted(&quoted), quoted, "not cut twice");
        assert_eq!(clip_quoted("a \"b\" c"), "a \"b\" c");
        // A quote inside a long value: the runs are short, the whole is cut.
        let path = format!("/nonexistent/it's {}", "a ".repeat(20_000));
        let clipped = clip_quoted(&format!("cannot watch disk '{path}': gone"));
        assert!(
            clipped.chars().count() < MAX_MESSAGE_CHARS + 40,
            "{clipped}"
        );
        assert!(clipped.ends_with("characters in all)"), "{clipped}");
    }

    #[test]
    fn unit_errors_quote_at_most_80_characters_of_a_huge_value() {
        let huge = "7".repeat(10_000_000) + "x";
        for e in [
            crate::units::parse_size(&huge).unwrap_err().to_string(),
            crate::units::parse_duration(&huge).unwrap_err().to_string(),
            crate::units::parse_signal(&huge).unwrap_err().to_string(),
        ] {
            assert!(e.len() < 500, "{} bytes: {}", e.len(), &e[..200]);
            assert!(e.contains("(10000001 characters)"), "{e}");
        }
    }
}
