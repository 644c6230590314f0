//! Shared strategies for the parser property tests (`prop_*` in every crate; see
//! `docs/testing.md`): fully arbitrary text and bytes, near-valid text made by mutating
//! valid values (signs, huge numbers, unicode, control characters, very long runs), and
//! the check every rejection must pass: a non-empty, one-line message of bounded length.
//!
//! Included with `#[path]` by each test so the crates share one copy. The number of
//! cases is proptest's default, which reads `PROPTEST_CASES` (256 when unset).
#![allow(dead_code)]

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// proptest's defaults: `PROPTEST_CASES` cases (256 when unset), regressions kept beside
/// the test.
pub fn config() -> ProptestConfig {
    ProptestConfig::default()
}

/// Pieces that break naive parsers: signs, exponents, huge and negative numbers, units
/// in the wrong case, unicode look-alikes, bidi and zero-width marks, line and
/// paragraph separators, NUL, escapes, and the punctuation of CSV, TOML and JSON.
pub const HOSTILE_TOKENS: &[&str] = &[
    "-",
    "+",
    "0",
    "9",
    ".",
    "..",
    "e",
    "E",
    "e308",
    "1e-400",
    "99999999999999999999999999999999999999",
    "18446744073709551616",
    "4294967296",
    "2147483648",
    "-9223372036854775809",
    " ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "\0",
    "\u{7f}",
    "\u{1b}[31m",
    "\u{85}",
    "\u{2028}",
    "\u{2029}",
    "\u{202e}",
    "\u{200b}",
    "\u{feff}",
    "é",
    "µ",
    "Ｍ",
    "１",
    "٣",
    "🙂",
    "'",
    "\"",
    "\\",
    "\\n",
    ",",
    ";",
    "#",
    ":",
    "=",
    "[",
    "]",
    "{",
    "}",
    "(",
    ")",
    "%",
    "_",
    "x",
    "i",
    "B",
    "s",
    "ms",
    "h",
    "m",
    "d",
    "K",
    "G",
    "T",
    "Z",
    "inf",
    "NaN",
    "max",
    "SIG",
    "RTMIN+",
    "+25:00",
    "-00:00",
    "9999-12-31T23:59:59Z",
    "0x10",
];

/// One edit of a near-valid value.
#[derive(Debug, Clone)]
pub enum Edit {
    /// Insert a token at a position (a fraction of the length).
    Insert(f64, &'static str),
    /// Insert arbitrary text.
    InsertAny(f64, String),
    /// Delete up to `n` characters.
    Delete(f64, usize),
    /// Repeat the `n` characters at a position `times` times (very long values).
    Repeat(f64, usize, usize),
    /// Change the case of everything.
    Upper,
    /// Change the case of everything.
    Lower,
}

fn at(chars: &[char], frac: f64) -> usize {
    ((chars.len() as f64 * frac) as usize).min(chars.len())
}

/// Applies `edits` to `seed`, on characters (never splitting one).
pub fn apply(seed: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = seed.chars().collect();
    for edit in edits {
        match edit {
            Edit::Insert(f, tok) => {
                let i = at(&chars, *f);
                chars.splice(i..i, tok.chars());
            }
            Edit::InsertAny(f, s) => {
                let i = at(&chars, *f);
                chars.splice(i..i, s.chars());
            }
            Edit::Delete(f, n) => {
                let i = at(&chars, *f);
                let j = (i + n).min(chars.len());
                chars.drain(i..j);
            }
            Edit::Repeat(f, n, times) => {
                let i = at(&chars, *f);
                let j = (i + n).min(chars.len());
                let run: Vec<char> = chars[i..j].to_vec();
                if !run.is_empty() {
                    let more: Vec<char> = run
                        .iter()
                        .copied()
                        .cycle()
                        .take(run.len() * times)
                        .collect();
                    chars.splice(j..j, more);
                }
            }
            Edit::Upper => chars = chars.iter().flat_map(|c| c.to_uppercase()).collect(),
            Edit::Lower => chars = chars.iter().flat_map(|c| c.to_lowercase()).collect(),
        }
    }
    chars.into_iter().collect()
}

/// One edit, mostly hostile tokens.
pub fn edit() -> impl Strategy<Value = Edit> {
    let frac = 0.0f64..=1.0;
    prop_oneof![
        6 => (frac.clone(), proptest::sample::select(HOSTILE_TOKENS)).prop_map(|(f, t)| Edit::Insert(f, t)),
        2 => (frac.clone(), any::<String>()).prop_map(|(f, s)| Edit::InsertAny(f, s)),
        3 => (frac.clone(), 1usize..4).prop_map(|(f, n)| Edit::Delete(f, n)),
        1 => (frac, 1usize..8, 1usize..3000).prop_map(|(f, n, t)| Edit::Repeat(f, n, t)),
        1 => Just(Edit::Upper),
        1 => Just(Edit::Lower),
    ]
}

/// A valid value from `seeds` with 0 to 5 edits: mostly near-valid, sometimes valid.
pub fn near_valid(seeds: &'static [&'static str]) -> impl Strategy<Value = String> {
    (
        proptest::sample::select(seeds),
        proptest::collection::vec(edit(), 0..6),
    )
        .prop_map(|(seed, edits)| apply(seed, &edits))
}

/// Fully arbitrary text: any unicode, arbitrary bytes read lossily, or hostile tokens
/// strung together.
pub fn arbitrary_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(any::<u8>(), 0..256)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        proptest::collection::vec(proptest::sample::select(HOSTILE_TOKENS), 0..24)
            .prop_map(|t| t.concat()),
    ]
}

/// Arbitrary bytes, or text made of hostile tokens, as bytes.
pub fn arbitrary_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..512),
        arbitrary_text().prop_map(String::into_bytes),
    ]
}

/// How long `text` is once quoted in a message: control characters may be escaped
/// (`\u{1b}` is 6 characters for 1).
pub fn quoted_len(text: &str) -> usize {
    text.chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                c.escape_default().count()
            } else {
                1
            }
        })
        .sum()
}

/// A rejection's message is non-empty, one line (no line break of any kind), and at
/// most `fixed` characters plus what it quotes from `input`.
pub fn check_message(msg: &str, input: &str, fixed: usize) -> Result<(), TestCaseError> {
    prop_assert!(!msg.trim().is_empty(), "empty message for {:?}", input);
    prop_assert!(
        !msg.contains(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}']),
        "message is not one line: {:?} (input {:?})",
        msg,
        input
    );
    let len = msg.chars().count();
    prop_assert!(
        len <= fixed + quoted_len(input),
        "message of {} chars for a {}-char input (allowed {} + the input): {:?}",
        len,
        input.chars().count(),
        fixed,
        msg
    );
    Ok(())
}

/// Valid traces of every format `watchdog replay` reads (generic CSV, comments and a
/// resource column, RFC 3339 and nvidia-smi timestamps, a watchdog recording): the seeds of
/// the trace parser's and replay's near-valid properties.
pub const TRACES: &[&str] = &[
    "time,used,limit\n0,100,1000\n0.5,200,1000\n1,300,\n",
    "# lead_s: 30\n# resource: swap\ntime,used,limit,resource\n0,1 MiB,max,cgroup_memory\n1.5,2 MiB,inf,disk:/data\n",
    "resource,time,used,limit\ncgroup_memory,2024-01-15T10:23:45.123Z,8589934592,68719476736\ncgroup_memory,2024-01-15T10:23:45.5+02:00,8592619601,68719476736\n",
    "timestamp, index, memory.used [MiB], memory.total [MiB]\n2024/01/15 10:23:45.123, 0, 1234 MiB, 16384 MiB\n2024/01/15 10:23:46.123, 1, 2000 MiB, 16384 MiB\n",
    "timestamp, index, memory.used [MiB], memory.total [MiB]\n2024/01/15 10:23:45.123, 0, 1234, 16384\n",
    "# watchdog recording v1\n#{\"meta\":{\"pid\":1}}\n#{\"resource\":{\"name\":\"cgroup_memory\",\"unit\":\"bytes\"}}\ntime,resource,used,limit\n0.000,cgroup_memory,100,1000\n0.100,cgroup_memory,200,1000\n",
];
