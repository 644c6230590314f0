//! `/proc/PID/cmdline` and `/proc/PID/environ` (`proc_pid_cmdline(5)`,
//! `proc_pid_environ(5)`): NUL-separated strings, turned into a command line for rules and
//! status readers and into `KEY=VALUE` pairs.

/// Most bytes of a command line kept (what the service's `command` rules match).
pub const COMMAND_MAX_BYTES: usize = 8192;

/// The command line from `/proc/PID/cmdline` bytes: NUL-separated arguments joined by
/// spaces (the trailing NUL dropped), invalid UTF-8 replaced, at most [`COMMAND_MAX_BYTES`].
pub fn command_line(bytes: &[u8]) -> String {
    let bytes = &bytes[..bytes.len().min(COMMAND_MAX_BYTES)];
    let bytes = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    let spaced: Vec<u8> = bytes
        .iter()
        .map(|&b| if b == 0 { b' ' } else { b })
        .collect();
    String::from_utf8_lossy(&spaced).into_owned()
}

/// Parses `/proc/PID/environ` (`KEY=VALUE` entries separated by NUL); invalid UTF-8 is replaced,
/// entries without `=` are skipped.
pub fn parse_environ(bytes: &[u8]) -> Vec<(String, String)> {
    bytes
        .split(|&b| b == 0)
        .filter_map(|entry| {
            let eq = entry.iter().position(|&b| b == b'=')?;
            if eq == 0 {
                return None;
            }
            Some((
                String::from_utf8_lossy(&entry[..eq]).into_owned(),
                String::from_utf8_lossy(&entry[eq + 1..]).into_owned(),
            ))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn recorded_cmdline_and_environ() {
        // Recorded from `env -i A=1 HOME=/root PATH=/usr/bin:/bin sleep 1000` on Linux 6.18.
        let cmdline = include_bytes!("../fixtures/sleep/cmdline");
        assert_eq!(command_line(cmdline), "sleep 1000");
        let environ = include_bytes!("../fixtures/sleep/environ");
        assert_eq!(
            parse_environ(environ),
            vec![
                ("A".into(), "1".into()),
                ("HOME".into(), "/root".into()),
                ("PATH".into(), "/usr/bin:/bin".into()),
            ]
        );
    }

    #[test]
    fn command_lines_join_arguments_with_spaces() {
        assert_eq!(
            command_line(b"python3\0-u\0train.py\0"),
            "python3 -u train.py"
        );
        assert_eq!(command_line(b"set by setproctitle"), "set by setproctitle");
        assert_eq!(command_line(b"a\0\xff\0"), "a \u{fffd}");
        assert_eq!(command_line(b""), "");
    }

    #[test]
    fn environ_entries() {
        let env = parse_environ(b"A=1\0SLURM_JOB_END_TIME=1790000000\0=bad\0noeq\0B=x=y\0\xff=z\0");
        assert_eq!(
            env,
            vec![
                ("A".into(), "1".into()),
                ("SLURM_JOB_END_TIME".into(), "1790000000".into()),
                ("B".into(), "x=y".into()),
                ("\u{fffd}".into(), "z".into()),
            ]
        );
    }
}
