//! `watchdog-procfs` is the one reader of `/proc`, the cgroup filesystem and DMI: this test
//! reads every crate's sources and fails naming `file:line` where another crate reaches
//! them itself. The rules (`docs/design.md`, "One reader of /proc and /sys"):
//!
//! 1. **No path literal under the kernel's roots** outside `watchdog-procfs`: no string
//!    literal that starts with `/proc`, or holds `sys/fs/cgroup` or `sys/class/dmi`. Paths
//!    come from the roots (`watchdog_procfs::KernelRoots`, built once into
//!    `watchdog_config::Host`), so a recorded tree (`WATCHDOG_ROOT`) replaces all of them.
//! 2. **No file reading in the modules that read the kernel's files** ([`KERNEL_READERS`]):
//!    no `File::open`, `read_to_string`, `fs::read(`, `read_link`, `fs::open(` or `openat(`
//!    there. They read through `ProcRoot`'s readers, the `KeptOpenFile`s the roots hand out
//!    (the kept-open `pread` hot path) and `read_small`/`dmi_string`. A line that opens
//!    something else (a watched disk, for `statvfs`) says so in a comment on the line
//!    above starting `// Not a kernel file:`.
//!
//! Test code is left out: `#[cfg(test)]` items, `tests.rs` files and `tests/` directories,
//! and `watchdog-testsupport`. `watchdog-kernel-wake` is left out of rule 2: it arms
//! (writes, registers eventfds and inotify watches on) the cgroup and PSI files at paths
//! the watch builds from the roots, with the open flags each interface needs; on a recorded
//! tree nothing is armed (`watch/kernel.rs`).

use std::path::{Path, PathBuf};

/// Source files (under `crates/`) where rule 2 holds: every file of a crate given as a
/// directory (`NAME/src/`), or the one file given.
const KERNEL_READERS: &[&str] = &[
    "watchdog-sampler/src/",
    "watchdog-slurm/src/",
    "watchdog-status/src/",
    "watchdog-notice/src/dmi.rs",
    "watchdog-alerter/src/signal.rs",
    "watchdog-daemon/src/discovery.rs",
    "watchdog-watch/src/target.rs",
    "watchdog-watch/src/environment.rs",
    "watchdog-watch/src/outputs.rs",
    "watchdog-watch/src/wake.rs",
    "watchdog-watch/src/watch/kernel.rs",
    "watchdog-watch/src/watch/sources.rs",
];

/// Crates whose sources are not checked at all.
const EXEMPT_CRATES: &[&str] = &["watchdog-procfs", "watchdog-testsupport"];

/// Calls that read a file by path or open one (rule 2).
const READ_CALLS: &[&str] = &[
    "File::open",
    "read_to_string",
    "fs::read(",
    "read_link",
    "fs::open(",
    "openat(",
];

/// The comment that allows one open of a file that is not the kernel's.
const NOT_KERNEL: &str = "// Not a kernel file:";

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/")
        .to_path_buf()
}

/// Every `.rs` file under `dir`, but `tests.rs` files and `tests/` directories.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "tests" {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// The text with every `#[cfg(test)]` item blanked (lines kept, so numbers stay right):
/// an item ending in `;` on its line, or one whose braces close later.
fn without_test_items(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "#[cfg(test)]" {
            i += 1;
            continue;
        }
        let mut j = i;
        let mut depth: i64 = 0;
        let mut opened = false;
        while j < lines.len() {
            for c in code_of(lines[j]).chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            let done = if opened {
                depth <= 0
            } else {
                j > i && lines[j].trim_end().ends_with(';')
            };
            out[j].clear();
            j += 1;
            if done {
                break;
            }
        }
        i = j;
    }
    out
}

/// A line without its string and char literals and its `//` comment (for counting braces
/// and finding calls; good enough for this codebase's one-line literals).
fn code_of(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if in_str {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '/' if chars.peek() == Some(&'/') => break,
            '\'' => {
                // A char literal ('x', '\n', '{'), else a lifetime.
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with('\\') {
                    for c in chars.by_ref() {
                        if c == '\'' {
                            break;
                        }
                    }
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.next();
                    chars.next();
                } else {
                    out.push(c);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// The string literals of a line (their contents, escapes left as written).
fn literals_of(line: &str) -> Vec<String> {
    let code_end = {
        // Literals after a `//` comment are not code.
        let code = code_of(line);
        if code.len() == line.len() {
            line.len()
        } else {
            line.find("//").unwrap_or(line.len())
        }
    };
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    let mut chars = line.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match current.as_mut() {
            Some(s) => match c {
                '\\' => {
                    if let Some((_, e)) = chars.next() {
                        s.push('\\');
                        s.push(e);
                    }
                }
                '"' => out.extend(current.take()),
                _ => s.push(c),
            },
            None if c == '"' && at < code_end => {
                // Skip a char literal '"'.
                let quoted =
                    at > 0 && line[..at].ends_with('\'') && line[at + 1..].starts_with('\'');
                if !quoted {
                    current = Some(String::new());
                }
            }
            None => {}
        }
    }
    out
}

/// Whether a literal names a path under the kernel's roots (rule 1).
fn names_a_kernel_path(literal: &str) -> bool {
    let proc = literal == "/proc" || literal.starts_with("/proc/");
    proc || literal.contains("sys/fs/cgroup") || literal.contains("sys/class/dmi")
}

fn is_kernel_reader(relative: &str) -> bool {
    KERNEL_READERS.iter().any(|r| match r.strip_suffix('/') {
        Some(dir) => relative.starts_with(&format!("{dir}/")),
        None => relative == *r,
    })
}

/// Every breach of the two rules, as `file:line: what`.
fn breaches() -> Vec<String> {
    let root = crates_dir();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&root).expect("crates/").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !EXEMPT_CRATES.contains(&name.as_str()) {
            sources(&entry.path().join("src"), &mut files);
        }
    }
    assert!(files.len() > 50, "found only {} sources", files.len());
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let relative = file
            .strip_prefix(&root)
            .expect("under crates/")
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&file).expect("read a source");
        let lines = without_test_items(&text);
        let reader = is_kernel_reader(&relative);
        for (n, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for literal in literals_of(line) {
                if names_a_kernel_path(&literal) {
                    found.push(format!(
                        "crates/{relative}:{}: path literal {literal:?} under a kernel root",
                        n + 1
                    ));
                }
            }
            if !reader {
                continue;
            }
            let code = code_of(line);
            let allowed = n > 0 && lines[n - 1].trim_start().starts_with(NOT_KERNEL);
            for call in READ_CALLS {
                if code.contains(call) && !allowed {
                    found.push(format!(
                        "crates/{relative}:{}: {call} in a module that reads the kernel's files (read through watchdog-procfs)",
                        n + 1
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn no_crate_but_procfs_reads_proc_cgroupfs_or_dmi_itself() {
    let found = breaches();
    assert!(
        found.is_empty(),
        "{} breach(es) of the one-reader rule (docs/design.md):\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The scanner itself: it must see what it is meant to forbid, and nothing in test code.
#[test]
fn the_scanner_finds_literals_and_calls_and_skips_test_items() {
    assert_eq!(
        literals_of(r#"let p = Path::new("/proc/meminfo"); // "/proc/x""#),
        vec!["/proc/meminfo".to_string()]
    );
    assert_eq!(
        literals_of(r#"let c = c"/proc/self/oom_score_adj";"#),
        vec!["/proc/self/oom_score_adj".to_string()]
    );
    assert!(names_a_kernel_path("/proc"));
    assert!(names_a_kernel_path("/sys/fs/cgroup/memory"));
    assert!(names_a_kernel_path("sys/class/dmi/id"));
    assert!(!names_a_kernel_path(
        "MemTotal - MemAvailable of /proc/meminfo"
    ));
    assert!(!names_a_kernel_path("/processes"));
    assert!(code_of(r#"std::fs::read_to_string(p) // File::open"#).contains("read_to_string"));
    assert!(!code_of(r#"let s = "File::open";"#).contains("File::open"));
    assert_eq!(
        code_of("let c = '{'; let l: &'a str;"),
        "let c = ; let l: &'a str;"
    );
    let text = "fn a() {}\n#[cfg(test)]\nuse x;\n#[cfg(test)]\nmod tests {\n    fn f() { let _ = \"/proc\"; }\n}\nfn b() {}\n";
    let kept = without_test_items(text);
    assert_eq!(kept, vec!["fn a() {}", "", "", "", "", "", "", "fn b() {}"]);
    assert!(is_kernel_reader("watchdog-sampler/src/tree.rs"));
    assert!(is_kernel_reader("watchdog-watch/src/target.rs"));
    assert!(!is_kernel_reader("watchdog-watch/src/recorder.rs"));
}
