//! Number and line helpers shared by every parser of `/proc` and cgroupfs text. They work
//! on bytes and never allocate, so the sampler's hot path can call them on every tick.

/// Parses a decimal `u64` from ASCII digits, ignoring surrounding ASCII whitespace.
///
/// Returns `None` on anything else (including an empty field or overflow); never allocates.
pub fn parse_u64(bytes: &[u8]) -> Option<u64> {
    let bytes = bytes.trim_ascii();
    if bytes.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

/// [`parse_u64`] into a `u32` (a PID, a UID): `None` when it does not fit.
pub fn parse_u32(bytes: &[u8]) -> Option<u32> {
    parse_u64(bytes).and_then(|v| u32::try_from(v).ok())
}

/// Iterates `key value` lines (`memory.stat`, `memory.events`, `/proc/stat`): yields the key and the
/// bytes of the first value field, skipping lines with no value.
pub fn key_value_lines(text: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    text.split(|&b| b == b'\n').filter_map(|line| {
        let mut fields = line
            .split(|b| b.is_ascii_whitespace())
            .filter(|f| !f.is_empty());
        let key = fields.next()?;
        let value = fields.next()?;
        Some((key, value))
    })
}

/// The whitespace-separated, non-empty fields of `text`.
pub(crate) fn fields(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    text.split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parse_u64_table() {
        let cases: &[(&[u8], Option<u64>)] = &[
            (b"0", Some(0)),
            (b" 42\n", Some(42)),
            (b"18446744073709551615", Some(u64::MAX)),
            (b"18446744073709551616", None),
            (b"", None),
            (b"max\n", None),
            (b"-1", None),
            (b"12 kB", None),
        ];
        for (input, want) in cases {
            assert_eq!(
                parse_u64(input),
                *want,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn parse_u32_refuses_what_does_not_fit() {
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), None);
    }

    #[test]
    fn key_value_lines_skip_blank_and_keyless() {
        let got: Vec<_> = key_value_lines(b"a 1\n\nlonely\nb  2 extra\n").collect();
        assert_eq!(got, vec![(&b"a"[..], &b"1"[..]), (&b"b"[..], &b"2"[..])]);
    }
}
