//! Step-function paths, downsampled to the pixel grid.
//!
//! A recording holds the last value between rows, so a series is drawn as a step
//! function (horizontal, then vertical). A 10-minute recording at 100 Hz has 60,000
//! rows per resource but the plot is about 1,000 pixels wide: within one pixel
//! column only the first, lowest, highest and last values can be seen, so the path
//! keeps at most those (min/max per pixel column, the usual envelope
//! downsampling). The path's size is bounded by the plot's width, not the
//! recording's length, and spikes shorter than a pixel are still drawn.

use std::fmt::Write as _;

/// Builds an SVG path `d` attribute for a step function, in pixel coordinates.
#[derive(Debug, Default)]
pub(crate) struct StepPath {
    d: String,
    /// The pen's current position, when down.
    pen: Option<(f64, f64)>,
    /// The pixel column being collected: its x, and the min, max and last y in it.
    column: Option<Column>,
    /// Commands written.
    commands: usize,
    /// Whether the pen was lifted after it first went down (the path has gaps).
    broken: bool,
    first_x: Option<f64>,
    last_x: f64,
}

#[derive(Debug, Clone, Copy)]
struct Column {
    index: i64,
    x: f64,
    min: f64,
    max: f64,
    last: f64,
}

/// Rounds to a tenth of a pixel: finer than any screen, and keeps the file small.
fn r(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

impl StepPath {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Adds the next point (x increasing); `None` lifts the pen (no value, e.g. no limit).
    pub(crate) fn push(&mut self, x: f64, y: Option<f64>) {
        let Some(y) = y else {
            self.flush();
            if self.pen.take().is_some() {
                self.broken = true;
            }
            return;
        };
        let (x, y) = (r(x), r(y));
        self.last_x = x;
        let index = x.floor() as i64;
        match &mut self.column {
            Some(c) if c.index == index => {
                c.min = c.min.min(y);
                c.max = c.max.max(y);
                c.last = y;
            }
            _ => {
                self.flush();
                self.column = Some(Column {
                    index,
                    x,
                    min: y,
                    max: y,
                    last: y,
                });
            }
        }
    }

    fn cmd(&mut self, text: std::fmt::Arguments<'_>) {
        // Writing into a String cannot fail.
        let _ = self.d.write_fmt(text);
        self.commands += 1;
    }

    /// Writes the collected column: across at the old level, then up and down through it.
    fn flush(&mut self) {
        let Some(c) = self.column.take() else {
            return;
        };
        let mut y = match self.pen {
            None => {
                self.cmd(format_args!("M{} {}", c.x, c.min));
                self.first_x.get_or_insert(c.x);
                c.min
            }
            Some((_, py)) => {
                let flat = c.min == py && c.max == py;
                if flat {
                    // Still on the same level: the horizontal goes on.
                    return;
                }
                self.cmd(format_args!("H{}", c.x));
                py
            }
        };
        for v in [c.min, c.max, c.last] {
            if v != y {
                self.cmd(format_args!("V{v}"));
                y = v;
            }
        }
        self.pen = Some((c.x, y));
    }

    /// Extends the last level to `x` (the end of the series' validity).
    pub(crate) fn extend_to(&mut self, x: f64) {
        self.flush();
        if let Some((px, py)) = self.pen
            && r(x) > px
        {
            self.cmd(format_args!("H{}", r(x)));
            self.pen = Some((r(x), py));
            self.last_x = r(x);
        }
    }

    /// Finishes the path: the `d` attribute, or `None` when nothing was drawn.
    pub(crate) fn finish(mut self) -> Option<String> {
        self.extend_to(self.last_x);
        (!self.d.is_empty()).then_some(self.d)
    }

    /// Finishes the path and also returns it closed down to `baseline` (for a filled
    /// area under the curve), when the path has no gaps.
    pub(crate) fn finish_with_area(mut self, baseline: f64) -> Option<(String, Option<String>)> {
        self.extend_to(self.last_x);
        if self.d.is_empty() {
            return None;
        }
        let area = match (self.broken, self.first_x) {
            (false, Some(x0)) => Some(format!("{}V{}H{}Z", self.d, r(baseline), x0)),
            _ => None,
        };
        Some((self.d, area))
    }

    /// Number of path commands so far (for the size tests).
    #[cfg(test)]
    pub(crate) fn commands(&self) -> usize {
        self.commands
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_horizontal_then_vertical() {
        let mut p = StepPath::new();
        p.push(0.0, Some(100.0));
        p.push(10.0, Some(100.0));
        p.push(20.0, Some(50.0));
        p.push(30.0, Some(50.0));
        assert_eq!(p.finish().unwrap(), "M0 100H20V50H30");
    }

    #[test]
    fn a_pixel_column_keeps_its_extremes() {
        let mut p = StepPath::new();
        p.push(0.0, Some(100.0));
        for (i, y) in [90.0, 10.0, 95.0, 60.0].iter().enumerate() {
            p.push(5.0 + i as f64 * 0.2, Some(*y));
        }
        // One column at x=5: down to the min (10), up to the max (95), then the last (60).
        assert_eq!(p.finish().unwrap(), "M0 100H5V10V95V60H5.6");
    }

    #[test]
    fn none_lifts_the_pen_and_no_area() {
        let mut p = StepPath::new();
        p.push(0.0, Some(10.0));
        p.push(5.0, None);
        p.push(8.0, Some(20.0));
        let (d, area) = p.finish_with_area(100.0).unwrap();
        assert_eq!(d, "M0 10M8 20");
        assert!(area.is_none());
    }

    #[test]
    fn area_closes_to_the_baseline() {
        let mut p = StepPath::new();
        p.push(1.0, Some(10.0));
        p.push(4.0, Some(20.0));
        p.extend_to(9.0);
        let (d, area) = p.finish_with_area(100.0).unwrap();
        assert_eq!(d, "M1 10H4V20H9");
        assert_eq!(area.unwrap(), "M1 10H4V20H9V100H1Z");
    }

    #[test]
    fn long_noisy_series_is_bounded_by_width() {
        let mut p = StepPath::new();
        // 60,000 points over 1,000 pixels, every one different.
        for i in 0..60_000u32 {
            let x = i as f64 / 60.0;
            let y = 100.0 + ((i * 7919) % 97) as f64;
            p.push(x, Some(y));
        }
        p.flush();
        assert!(p.commands() <= 4 * 1000 + 1, "{} commands", p.commands());
    }
}
