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

// ---------------------------------------------------------------------------------------
// Usage traces: the one generator of the predictor's episodes test and the engine's
// adaptive-rate test (`crates/watchdog-predictor/tests/episodes.rs`,
// `crates/watchdog-engine/tests/adaptive.rs`).

/// The limit of a generated usage trace, bytes.
pub const GEN_LIMIT: f64 = (1u64 << 30) as f64;
/// The sampling interval of a generated usage trace, seconds.
pub const GEN_DT: f64 = 0.1;
/// The noise on every sample, a fraction of the limit (uniform, this wide).
const GEN_NOISE: f64 = 0.002;

fn xorshift(state: &mut u64) -> f64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state >> 11) as f64 / (1u64 << 53) as f64
}

/// One segment of a generated trace, in fractions of the limit and multiples of the lead.
#[derive(Debug, Clone)]
pub enum Segment {
    /// Linear growth from the base to the limit, taking `runway` leads, then a free to
    /// `next_base`.
    Leak { runway: f64, next_base: f64 },
    /// `steps` equal steps from the base to the limit, one every `period` leads; freed to
    /// `next_base` when the last would land on the limit.
    Staircase {
        steps: u32,
        period: f64,
        next_base: f64,
    },
    /// A saw-tooth rising `amp` above the base every `period` leads, `teeth` times.
    Sawtooth { amp: f64, period: f64, teeth: u32 },
    /// A sudden jump to `level` (no lower than the base), held `len` leads, and back.
    Jump { level: f64, len: f64 },
    /// Flat at the base for `len` leads.
    Plateau { len: f64 },
}

/// A staircase as the predictor's tests draw it: at most a lead between steps and at
/// least three leads in all (a faster one outruns the history the trend needs, and only
/// the floor could catch it).
fn staircase() -> impl Strategy<Value = Segment> {
    (5u32..12, 0.0f64..1.0, 0.02f64..0.4).prop_map(|(steps, p, next_base)| {
        let shortest = (3.0 / steps as f64).max(0.3);
        Segment::Staircase {
            steps,
            period: shortest + p * (1.0 - shortest),
            next_base,
        }
    })
}

/// The segments of the predictor's episodes test: leaks with at least three leads of
/// runway, staircases, saw-tooths well below the limit, plateaus.
pub fn episode_segment() -> impl Strategy<Value = Segment> {
    prop_oneof![
        3 => (3.0f64..15.0, 0.02f64..0.4).prop_map(|(runway, next_base)| Segment::Leak { runway, next_base }),
        1 => staircase(),
        1 => (0.03f64..0.12, 0.25f64..3.0, 1u32..6)
            .prop_map(|(amp, period, teeth)| Segment::Sawtooth { amp, period, teeth }),
        1 => (0.5f64..4.0).prop_map(|len| Segment::Plateau { len }),
    ]
}

/// The segments of the adaptive-rate test: leaks from one lead of runway, staircases,
/// saw-tooths of 2% to 40% of the limit and periods of 0.02 to 3 leads, sudden jumps,
/// plateaus.
pub fn rate_segment() -> impl Strategy<Value = Segment> {
    prop_oneof![
        3 => (1.0f64..15.0, 0.02f64..0.4).prop_map(|(runway, next_base)| Segment::Leak { runway, next_base }),
        1 => staircase(),
        2 => (0.02f64..0.4, 0.02f64..3.0, 1u32..8)
            .prop_map(|(amp, period, teeth)| Segment::Sawtooth { amp, period, teeth }),
        1 => (0.4f64..1.0, 0.2f64..3.0).prop_map(|(level, len)| Segment::Jump { level, len }),
        1 => (0.5f64..4.0).prop_map(|len| Segment::Plateau { len }),
    ]
}

/// A generated usage trace: samples every [`GEN_DT`] (time, bytes of [`GEN_LIMIT`]), and
/// the episodes the generator put in it.
pub struct GenTrace {
    pub samples: Vec<(f64, f64)>,
    pub episodes: Vec<GenEpisode>,
}

/// A leak or a staircase, from its start to the free after it: one episode.
pub struct GenEpisode {
    /// Index of the segment's first sample.
    pub start: usize,
    /// Index of the free after it.
    pub end: usize,
    /// When it would reach the limit.
    pub exhausted_at: f64,
    /// A leak (false: a staircase).
    pub leak: bool,
    /// Index of the sample where the free before it landed (a fresh start point).
    pub after_free: Option<usize>,
}

/// The usage of `parts` (each a flat gap of so many leads, then a segment) from
/// `first_base`, with noise on every sample (on leaks too when `noisy_leaks`), then
/// `tail` leads flat at the last base.
pub fn generate_usage(
    lead: f64,
    first_base: f64,
    parts: &[(f64, Segment)],
    noisy_leaks: bool,
    tail: f64,
    seed: u64,
) -> GenTrace {
    let mut rng = seed | 1;
    let mut samples: Vec<(f64, f64)> = Vec::new();
    let mut episodes = Vec::new();
    let mut t = 0.0f64;
    let mut base = first_base;
    let mut last_free: Option<usize> = None;
    let push = |t: &mut f64, v: f64, rng: &mut u64, samples: &mut Vec<(f64, f64)>| {
        let jitter = GEN_NOISE * (xorshift(rng) - 0.5);
        samples.push((*t, (v + jitter).clamp(0.0, 1.0) * GEN_LIMIT));
        *t += GEN_DT;
    };
    let hold = |t: &mut f64, v: f64, len: f64, rng: &mut u64, samples: &mut Vec<(f64, f64)>| {
        let end = *t + len * lead;
        while *t < end {
            push(t, v, rng, samples);
        }
    };
    for (gap, seg) in parts {
        hold(&mut t, base, *gap, &mut rng, &mut samples);
        let start = samples.len();
        match *seg {
            Segment::Leak { runway, next_base } => {
                let rate = (1.0 - base) / (runway * lead);
                let t0 = t;
                loop {
                    let v = base + rate * (t - t0);
                    if v >= 1.0 {
                        break;
                    }
                    if noisy_leaks {
                        push(&mut t, v, &mut rng, &mut samples);
                    } else {
                        samples.push((t, v * GEN_LIMIT));
                        t += GEN_DT;
                    }
                }
                episodes.push(GenEpisode {
                    start,
                    end: samples.len(),
                    exhausted_at: t0 + runway * lead,
                    leak: true,
                    after_free: last_free,
                });
                base = next_base;
                last_free = Some(samples.len());
                push(&mut t, base, &mut rng, &mut samples);
            }
            Segment::Staircase {
                steps,
                period,
                next_base,
            } => {
                let step = (1.0 - base) / steps as f64;
                for k in 0..steps {
                    hold(
                        &mut t,
                        base + step * k as f64,
                        period,
                        &mut rng,
                        &mut samples,
                    );
                }
                episodes.push(GenEpisode {
                    start,
                    end: samples.len(),
                    exhausted_at: t,
                    leak: false,
                    after_free: last_free,
                });
                base = next_base;
                last_free = Some(samples.len());
                push(&mut t, base, &mut rng, &mut samples);
            }
            Segment::Sawtooth { amp, period, teeth } => {
                for _ in 0..teeth {
                    let t0 = t;
                    while t < t0 + period * lead {
                        let v = base + amp * (t - t0) / (period * lead);
                        push(&mut t, v, &mut rng, &mut samples);
                    }
                }
                push(&mut t, base, &mut rng, &mut samples);
            }
            Segment::Jump { level, len } => {
                hold(&mut t, level.max(base), len, &mut rng, &mut samples);
            }
            Segment::Plateau { len } => hold(&mut t, base, len, &mut rng, &mut samples),
        }
    }
    hold(&mut t, base, tail, &mut rng, &mut samples);
    GenTrace { samples, episodes }
}
