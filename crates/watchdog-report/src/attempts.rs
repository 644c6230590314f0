//! The attempts of one `watchdog run --restart` as one recording: each attempt's rows and
//! events moved onto the first attempt's clock (from the `start_unix` of each), the
//! resources merged by name, so one report draws the whole run on one time axis, with the
//! `restart` events (drawn as markers) between its attempts. Recordings are attempts of one
//! run when their `meta` lines carry the same `run_id`.

use crate::recording::{Event, EventKind, Recording};

/// Whether `recs` are attempts of one run: every one has the same `run_id`.
pub fn one_run(recs: &[Recording]) -> bool {
    let first = recs.first().and_then(|r| r.meta.run_id.as_deref());
    first.is_some() && recs.iter().all(|r| r.meta.run_id.as_deref() == first)
}

/// Merges the attempts of one run (any order) into one recording; an error says why
/// they are not one run's attempts.
pub fn merge(mut recs: Vec<Recording>) -> Result<Recording, String> {
    if !one_run(&recs) {
        return Err("the recordings are not attempts of one run: expected recordings written by one `watchdog run --restart` (the same run_id in their meta line)".into());
    }
    recs.sort_by_key(|r| r.meta.attempt.unwrap_or(0));
    let mut recs = recs.into_iter();
    let Some(mut all) = recs.next() else {
        return Err("no recording given".into());
    };
    let t0 = all.meta.start_unix.unwrap_or(0.0);
    for rec in recs {
        let shift = rec.meta.start_unix.map_or(0.0, |s| s - t0);
        for (info, series) in rec.resources.into_iter().zip(rec.series) {
            let i = match all.resource_index(&info.name) {
                Some(i) => i,
                None => {
                    all.resources.push(info);
                    all.series.push(Vec::new());
                    all.series.len() - 1
                }
            };
            all.series[i].extend(series.into_iter().map(|mut p| {
                p.t_s += shift;
                p
            }));
        }
        all.events.extend(rec.events.into_iter().map(|e| Event {
            t_s: e.t_s + shift,
            ..e
        }));
        if rec.verdict.is_some() {
            all.verdict = rec.verdict;
            all.verdict_summary = rec.verdict_summary;
        }
        all.meta.attempt = rec.meta.attempt;
    }
    for series in &mut all.series {
        series.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    }
    all.events.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    Ok(all)
}

/// The `restart` events of a recording: (time, attempt, verdict, step resumed from).
pub fn restarts(rec: &Recording) -> impl Iterator<Item = (f64, u64, &str, Option<u64>)> {
    rec.events.iter().filter_map(|e| match &e.kind {
        EventKind::Other(name) if name == "restart" => Some((
            e.t_s,
            e.raw["attempt"].as_u64().unwrap_or(0),
            e.raw["verdict"].as_str().unwrap_or("?"),
            e.raw["step"].as_u64(),
        )),
        _ => None,
    })
}
