//! The attempts of one `watchdog run --restart` as one recording: each attempt's rows and
//! events moved onto the first attempt's clock (from the `start_unix` of each), the
//! resources merged by name, so one report draws the whole run on one time axis, with the
//! `restart` events (drawn as markers) between its attempts. Recordings are attempts of one
//! run when their `meta` lines carry the same `run_id`.

use crate::recording::{Event, EventKind, MAX_EVENTS, MAX_ROWS, Recording};
use crate::trace::{MAX_ABS_TIME_S, MAX_RESOURCES};

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
    // One recording's bounds hold for the run merged: a recording given twice (the same
    // attempt) is refused, start times are within the times' own bound, and the merged
    // resources, rows and events within a recording's.
    for pair in recs.windows(2) {
        if let (Some(a), Some(b)) = (pair[0].meta.attempt, pair[1].meta.attempt)
            && a == b
        {
            return Err(format!(
                "attempt {a} is given twice: expected each attempt's recording once"
            ));
        }
    }
    if let Some((attempt, s)) = recs
        .iter()
        .filter_map(|r| Some((r.meta.attempt, r.meta.start_unix?)))
        .find(|(_, s)| !s.is_finite() || s.abs() > MAX_ABS_TIME_S)
    {
        // In exponent form: a bound's worth of digits is not a line.
        let which = attempt.map_or("a recording's".to_string(), |a| format!("attempt {a}'s"));
        return Err(format!(
            "{which} start_unix is {s:.3e}: expected seconds since the epoch, at most 1e12 either side of 0"
        ));
    }
    let mut names: Vec<&str> = recs
        .iter()
        .flat_map(|r| r.resources.iter().map(|i| i.name.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    let rows: usize = recs
        .iter()
        .flat_map(|r| r.series.iter())
        .map(Vec::len)
        .sum();
    let events: usize = recs.iter().map(|r| r.events.len()).sum();
    for (what, n, max) in [
        ("resources", names.len(), MAX_RESOURCES),
        ("rows", rows, MAX_ROWS),
        ("events", events, MAX_EVENTS),
    ] {
        if n > max {
            return Err(format!(
                "the attempts hold {n} {what} together: expected at most {max}, as in one recording"
            ));
        }
    }
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn attempt(n: u32, start: f64, run_id: &str, events: &str) -> Recording {
        let text = format!(
            "# watchdog recording v1\n#{{\"meta\":{{\"pid\":1,\"start_unix\":{start},\"run_id\":\"{run_id}\",\"attempt\":{n}}}}}\n#{{\"resource\":{{\"name\":\"cgroup_memory\",\"kind\":\"cgroup_memory\",\"unit\":\"bytes\"}}}}\n{events}time,resource,used,limit\n0.000,cgroup_memory,10,100\n1.000,cgroup_memory,99,100\n"
        );
        crate::recording::parse(&text).unwrap()
    }

    #[test]
    fn attempts_are_drawn_on_the_first_attempts_clock_with_their_restarts() {
        let a1 = attempt(
            1,
            1000.0,
            "r",
            "#{\"t\":1.0,\"event\":\"exit\",\"verdict\":\"oom_kill\"}\n",
        );
        let a2 = attempt(
            2,
            1010.0,
            "r",
            "#{\"t\":0.0,\"event\":\"restart\",\"attempt\":2,\"verdict\":\"oom_kill\",\"resume_from\":\"/c/ckpt-15\",\"step\":15}\n#{\"t\":1.0,\"event\":\"exit\",\"verdict\":\"exited\"}\n",
        );
        // Any order.
        let all = merge(vec![a2, a1]).unwrap();
        let times: Vec<f64> = all.series[0].iter().map(|p| p.t_s).collect();
        assert_eq!(times, [0.0, 1.0, 10.0, 11.0]);
        assert_eq!(all.verdict.as_deref(), Some("exited"));
        assert_eq!(
            restarts(&all).collect::<Vec<_>>(),
            [(10.0, 2, "oom_kill", Some(15))]
        );
        let svg = crate::render_svg(&all);
        assert!(svg.contains("class=\"restart\""), "no restart marker");
        assert!(svg.contains("restart 2: resumed from step 15"));

        let other = attempt(2, 1010.0, "s", "");
        let e = merge(vec![attempt(1, 1000.0, "r", ""), other]).unwrap_err();
        assert!(e.contains("not attempts of one run"), "{e}");
    }

    /// The bounds of one recording hold for the run merged (issue 29, item 4).
    #[test]
    fn merged_attempts_keep_one_recordings_bounds() {
        let e = merge(vec![
            attempt(1, 1000.0, "r", ""),
            attempt(1, 1000.0, "r", ""),
        ])
        .unwrap_err();
        assert!(e.contains("attempt 1 is given twice"), "{e}");
        let e = merge(vec![
            attempt(1, -1.7e308, "r", ""),
            attempt(2, 1.7e308, "r", ""),
        ])
        .unwrap_err();
        assert!(
            e.contains("attempt 1's start_unix is -1.700e308") && e.contains("at most 1e12"),
            "{e}"
        );
        assert!(e.len() < 160, "a bound's worth of digits: {e}");
        // Attempts each within the resource bound, with resources of their own.
        let many: Vec<Recording> = (1..=3)
            .map(|n| {
                let mut r = attempt(n, 1000.0 + f64::from(n), "r", "");
                for i in 0..100 {
                    let mut info = r.resources[0].clone();
                    info.name = format!("gpu{n}_{i}");
                    r.resources.push(info);
                    r.series.push(Vec::new());
                }
                r
            })
            .collect();
        let e = merge(many).unwrap_err();
        assert!(
            e.contains("resources together: expected at most 256"),
            "{e}"
        );
    }
}
