//! Writing a flight recording: the one writer of the format [`super::parse`] reads
//! (`docs/recording.md`). Pure: the watchdog's flight recorder keeps the window in
//! memory and hands it here to be turned into text, then writes the text atomically.
//!
//! The text is the magic line, the `meta` line, one `resource` line per resource, the
//! events (each with `t`, seconds since the start, to the millisecond), then the table
//! `time,resource,used,limit` with times in seconds to the millisecond.

use std::fmt::Write as _;

use watchdog_types::Resource;

use super::{MAGIC, Meta, VERSION};

/// The header of the recording's CSV table.
pub const TABLE_HEADER: &str = "time,resource,used,limit";

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// Milliseconds since the start.
    pub t_ms: u64,
    /// Index of its resource in the resources written (a name of `?` when out of range).
    pub resource: usize,
    /// Usage, in the resource's unit.
    pub used: u64,
    /// Limit, in the resource's unit.
    pub limit: u64,
}

/// The recording's text: `meta`, `resources` (in order: rows name them by index),
/// `events` (`t_s` seconds since the start, and the event's JSON object) and `rows`.
pub fn render(
    meta: &Meta,
    resources: &[Resource],
    events: &[(f64, serde_json::Value)],
    rows: impl ExactSizeIterator<Item = Row>,
) -> String {
    let mut out = String::with_capacity(64 + rows.len() * 40);
    let _ = writeln!(out, "{MAGIC}{VERSION}");
    let meta = serde_json::json!({ "meta": meta });
    let _ = writeln!(out, "#{meta}");
    for r in resources {
        let line = serde_json::json!({"resource": {
            "name": r.name, "kind": r.kind, "unit": r.kind.unit(), "source": r.source,
        }});
        let _ = writeln!(out, "#{line}");
    }
    for (t, e) in events {
        let mut e = e.clone();
        if let Some(obj) = e.as_object_mut() {
            obj.insert("t".into(), serde_json::json!((t * 1e3).round() / 1e3));
        }
        let _ = writeln!(out, "#{e}");
    }
    out.push_str(TABLE_HEADER);
    out.push('\n');
    for row in rows {
        let name = resources.get(row.resource).map_or("?", |r| r.name.as_str());
        let _ = writeln!(
            out,
            "{}.{:03},{name},{},{}",
            row.t_ms / 1000,
            row.t_ms % 1000,
            row.used,
            row.limit
        );
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use watchdog_types::{ResourceId, ResourceKind};

    /// What the writer writes, the reader reads back: meta, resources, events, rows.
    #[test]
    fn the_reader_reads_what_the_writer_writes() {
        let meta = Meta {
            pid: Some(42),
            command: Some("python3".into()),
            start: Some("2026-01-01T00:00:00.000Z".into()),
            start_unix: Some(1_767_225_600.0),
            interval_s: Some(0.1),
            lead_s: Some(30.0),
            watchdog_version: Some("0.1.0".into()),
            ..Meta::default()
        };
        let resources = [ResourceKind::CgroupMemory, ResourceKind::DiskInodes]
            .iter()
            .enumerate()
            .map(|(i, &kind)| Resource {
                id: ResourceId(i as u16),
                kind,
                name: ["cgroup_memory", "inodes:/data"][i].into(),
                source: "src".into(),
            })
            .collect::<Vec<_>>();
        let events = [(
            1.2345,
            serde_json::json!({"event": "alert", "resource": "cgroup_memory", "reason": "trend"}),
        )];
        let rows = [(0, 0, 10), (1_500, 1, 7), (61_001, 0, 20)].map(|(t_ms, resource, used)| Row {
            t_ms,
            resource,
            used,
            limit: 100,
        });
        let text = render(&meta, &resources, &events, rows.into_iter());
        assert!(
            text.contains("\n#{\"t\":1.235,") || text.contains("\"t\":1.235"),
            "{text}"
        );
        assert!(text.ends_with("time,resource,used,limit\n0.000,cgroup_memory,10,100\n1.500,inodes:/data,7,100\n61.001,cgroup_memory,20,100\n"), "{text}");
        let rec = super::super::parse(&text).unwrap();
        assert_eq!(
            rec.meta,
            Meta {
                version: Some(VERSION),
                ..meta
            }
        );
        assert_eq!(rec.resources[1].kind, "disk_inodes");
        assert_eq!(rec.resources[1].unit, watchdog_types::Unit::Count);
        assert_eq!(rec.resources[1].source.as_deref(), Some("src"));
        assert_eq!(rec.series[0].len(), 2);
        assert_eq!(rec.series[0][1].t_s, 61.001);
        assert_eq!(rec.events[0].t_s, 1.235);
        assert_eq!(rec.events[0].name(), "alert");
    }
}
