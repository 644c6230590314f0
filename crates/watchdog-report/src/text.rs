//! Reading a trace or recording file into memory with every line capped at
//! [`MAX_LINE_BYTES`] (64 KiB), so a runaway input (`/dev/zero`, a file with no line
//! breaks) is refused after 64 KiB instead of filling memory. `watchdog report` and
//! `watchdog replay` both read their input here.

use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

pub use crate::trace::MAX_LINE_BYTES;

/// Why a text file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// Opening or reading failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A line is longer than [`MAX_LINE_BYTES`].
    #[error("line {line} is longer than {} KiB: expected one sample or comment per line", MAX_LINE_BYTES / 1024)]
    LineTooLong {
        /// 1-based line number.
        line: usize,
    },
    /// The bytes are not UTF-8.
    #[error("not UTF-8 text (line {line})")]
    NotText {
        /// 1-based line of the first invalid byte.
        line: usize,
    },
}

/// Reads `path` as UTF-8 text, refusing any line longer than [`MAX_LINE_BYTES`].
pub fn read_capped(path: &Path) -> Result<String, TextError> {
    read_capped_from(std::fs::File::open(path)?)
}

/// [`read_capped`] from any reader.
pub fn read_capped_from(reader: impl Read) -> Result<String, TextError> {
    let mut reader = BufReader::with_capacity(MAX_LINE_BYTES, reader);
    let mut all = Vec::new();
    let mut line = 0usize;
    loop {
        line += 1;
        let n = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut all)?;
        if n == 0 {
            break;
        }
        let content = if all.last() == Some(&b'\n') { n - 1 } else { n };
        if content > MAX_LINE_BYTES {
            return Err(TextError::LineTooLong { line });
        }
    }
    String::from_utf8(all).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let line = e
            .as_bytes()
            .get(..valid)
            .map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count())
            + 1;
        TextError::NotText { line }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn dev_zero_is_refused_after_one_line() {
        let start = std::time::Instant::now();
        let e = read_capped(Path::new("/dev/zero")).unwrap_err();
        assert!(matches!(e, TextError::LineTooLong { line: 1 }), "{e}");
        assert!(start.elapsed().as_secs() < 5);
    }

    #[test]
    fn lines_up_to_the_cap_are_read_whole() {
        let fits = format!("a\n{}\nb", "x".repeat(MAX_LINE_BYTES));
        assert_eq!(read_capped_from(fits.as_bytes()).unwrap(), fits);
        let crlf = format!("{}\r\n", "x".repeat(MAX_LINE_BYTES - 1));
        assert_eq!(read_capped_from(crlf.as_bytes()).unwrap(), crlf);
        let over = format!("a\nb\n{}\n", "x".repeat(MAX_LINE_BYTES + 1));
        let e = read_capped_from(over.as_bytes()).unwrap_err();
        assert!(matches!(e, TextError::LineTooLong { line: 3 }), "{e}");
        let e = read_capped_from(&b"a\nb\n\xff\n"[..]).unwrap_err();
        assert!(matches!(e, TextError::NotText { line: 3 }), "{e}");
    }
}
