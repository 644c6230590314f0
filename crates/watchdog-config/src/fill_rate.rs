//! The `[fill_rate]` table: the fastest each kind of resource can fill, a size a second
//! (`host_memory = "6GiB/s"`; a plain size or number of bytes means the same a second).
//! Keys left out keep their defaults ([`FillRates::DEFAULT`]); a rate of zero is refused,
//! since it would let a resource go unread until its limit.

use serde::Deserialize;
use serde::Deserializer;
use watchdog_engine::FillRates;

use watchdog_types::quote::quote_value;

/// What a fill rate is, for a value of the wrong type.
const EXPECTED: &str = "a size a second such as \"6GiB/s\"";

/// The table as written: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Table {
    #[serde(deserialize_with = "de_rate")]
    host_memory: Option<f64>,
    #[serde(deserialize_with = "de_rate")]
    cgroup_memory: Option<f64>,
    #[serde(deserialize_with = "de_rate")]
    disk: Option<f64>,
    #[serde(deserialize_with = "de_rate")]
    gpu_memory: Option<f64>,
}

/// Reads the `[fill_rate]` table over the defaults.
pub(crate) fn de_fill_rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<FillRates>, D::Error> {
    let t = Table::deserialize(d)?;
    let base = FillRates::DEFAULT;
    Ok(Some(FillRates {
        host_memory: t.host_memory.unwrap_or(base.host_memory),
        cgroup_memory: t.cgroup_memory.unwrap_or(base.cgroup_memory),
        disk: t.disk.unwrap_or(base.disk),
        gpu_memory: t.gpu_memory.unwrap_or(base.gpu_memory),
    }))
}

fn de_rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let s = crate::de_text_or_number(d, EXPECTED)?;
    parse_rate(&s).map(Some).map_err(serde::de::Error::custom)
}

/// Parses a fill rate, bytes a second: a size with an optional `/s` (`6GiB/s`, `6GiB`,
/// `500MB/s`, `1000000`), above zero.
pub(crate) fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let size = t.strip_suffix("/s").unwrap_or(t).trim_end();
    match watchdog_types::units::parse_size(size) {
        Ok(bytes) if bytes > 0 => Ok(bytes as f64),
        _ => Err(format!(
            "invalid fill rate {}: expected {EXPECTED} above zero (a size with an optional \
             unit, KiB/MiB/GiB or KB/MB/GB, and an optional /s)",
            quote_value(s)
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::path::Path;

    #[test]
    fn a_rate_is_a_size_a_second() {
        assert_eq!(parse_rate("6GiB/s").unwrap(), (6u64 << 30) as f64);
        assert_eq!(parse_rate("6GiB").unwrap(), (6u64 << 30) as f64);
        assert_eq!(parse_rate(" 500MB/s ").unwrap(), 500e6);
        assert_eq!(parse_rate("1000000").unwrap(), 1e6);
        let e = parse_rate("0/s").unwrap_err();
        assert!(e.starts_with("invalid fill rate '0/s': expected"), "{e}");
        let e = parse_rate("fast").unwrap_err();
        assert!(e.starts_with("invalid fill rate 'fast': expected"), "{e}");
        assert!(parse_rate("6GiB/h").is_err());
    }

    #[test]
    fn the_table_keeps_the_defaults_it_does_not_set_and_refuses_unknown_keys() {
        let file = crate::parse_file(
            "[fill_rate]\nhost_memory = \"2GiB/s\"\ndisk = 1000\n",
            Path::new("w.toml"),
        )
        .unwrap();
        let rates = file.fill_rate.unwrap();
        assert_eq!(rates.host_memory, (2u64 << 30) as f64);
        assert_eq!(rates.disk, 1000.0);
        assert_eq!(rates.cgroup_memory, FillRates::DEFAULT.cgroup_memory);
        assert_eq!(rates.gpu_memory, FillRates::DEFAULT.gpu_memory);
        let e =
            crate::parse_file("[fill_rate]\nswap = \"1GiB/s\"\n", Path::new("w.toml")).unwrap_err();
        assert!(e.contains("unknown field `swap`"), "{e}");
        let e = crate::parse_file("[fill_rate]\ndisk = \"0\"\n", Path::new("w.toml")).unwrap_err();
        assert!(e.contains("invalid fill rate '0'"), "{e}");
    }
}
