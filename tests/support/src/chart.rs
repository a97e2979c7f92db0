//! SVG charts for the benchmark's and the soak's reports: grouped bars and
//! a line over time with shaded spans. Plain SVG 1.1 with no script or
//! external font, so GitHub and the book show it as an image; deterministic
//! text, so a committed chart is compared with its data by a test.

use std::fmt::Write as _;

const WIDTH: f64 = 760.0;
const LABEL_W: f64 = 250.0;
const RIGHT_W: f64 = 90.0;
const BAR_H: f64 = 16.0;
const BAR_GAP: f64 = 4.0;
const GROUP_GAP: f64 = 14.0;
const TOP: f64 = 48.0;
const FONT: &str = "font-family=\"Helvetica, Arial, sans-serif\"";

/// Colours by role: the relay, its variants, Debezium, a bound or reference.
const PALETTE: [&str; 6] = [
    "#2f6fba", "#7fa7d8", "#d9822b", "#8c8c8c", "#3a9a5b", "#b04a8f",
];

/// How values map to bar lengths.
#[derive(Clone, Copy, PartialEq)]
pub enum Scale {
    Linear,
    /// Base 10, for values an order of magnitude apart (latencies).
    Log,
}

/// One bar: its label (its series, which picks its colour) and value.
pub struct Bar {
    pub series: String,
    pub value: f64,
}

/// A group of bars under a heading (a scenario, an engine).
pub struct Group {
    pub label: String,
    pub bars: Vec<Bar>,
}

/// Horizontal grouped bars with the value printed at each bar's end.
pub struct Bars {
    pub title: String,
    pub unit: String,
    pub scale: Scale,
    pub groups: Vec<Group>,
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The value as the chart prints it: thousands grouped, at most one decimal
/// under 100.
fn figure(v: f64) -> String {
    if v >= 100.0 {
        let n = v.round() as i64;
        let digits: Vec<char> = n.to_string().chars().collect();
        let groups: Vec<String> = digits
            .rchunks(3)
            .rev()
            .map(|g| g.iter().collect())
            .collect();
        groups.join("\u{202f}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A round step for about five ticks up to `max`.
fn step(max: f64) -> f64 {
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let unit = raw / magnitude;
    let nice = if unit <= 1.0 {
        1.0
    } else if unit <= 2.0 {
        2.0
    } else if unit <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

impl Bars {
    pub fn svg(&self) -> String {
        let mut series: Vec<&str> = Vec::new();
        for bar in self.groups.iter().flat_map(|g| &g.bars) {
            if !series.contains(&bar.series.as_str()) {
                series.push(&bar.series);
            }
        }
        let colour = |s: &str| {
            let i = series.iter().position(|x| *x == s).unwrap_or(0);
            PALETTE[i % PALETTE.len()]
        };
        let values: Vec<f64> = self
            .groups
            .iter()
            .flat_map(|g| g.bars.iter().map(|b| b.value))
            .collect();
        let max = values
            .iter()
            .copied()
            .fold(0.0, f64::max)
            .max(f64::MIN_POSITIVE);
        let plot_w = WIDTH - LABEL_W - RIGHT_W;
        let (ticks, x_of): (Vec<f64>, Box<dyn Fn(f64) -> f64>) = match self.scale {
            Scale::Linear => {
                let step = step(max);
                let top = (max / step).ceil() * step;
                let ticks = (0..=((top / step).round() as usize))
                    .map(|i| i as f64 * step)
                    .collect();
                (ticks, Box::new(move |v: f64| v / top * plot_w))
            }
            Scale::Log => {
                let low = values
                    .iter()
                    .copied()
                    .filter(|v| *v > 0.0)
                    .fold(f64::MAX, f64::min)
                    .log10()
                    .floor()
                    .min(0.0);
                let high = max.log10().ceil().max(low + 1.0);
                let ticks = (low as i32..=high as i32).map(|e| 10f64.powi(e)).collect();
                (
                    ticks,
                    Box::new(move |v: f64| {
                        ((v.max(10f64.powf(low)).log10() - low) / (high - low)) * plot_w
                    }),
                )
            }
        };
        let rows: usize = self.groups.iter().map(|g| g.bars.len()).sum();
        let plot_h =
            rows as f64 * (BAR_H + BAR_GAP) + self.groups.len() as f64 * (GROUP_GAP + BAR_H) + 4.0;
        let height = TOP + plot_h + 30.0 + 22.0;
        let mut svg = String::new();
        let _ = write!(
            svg,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height:.0}\" viewBox=\"0 0 {WIDTH} {height:.0}\" {FONT} font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n<text x=\"12\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
            escape(&self.title)
        );
        // Grid and tick labels.
        let axis_y = TOP + plot_h;
        for t in &ticks {
            let x = LABEL_W + x_of(*t);
            let _ = writeln!(
                svg,
                "<line x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{axis_y:.1}\" stroke=\"#e3e3e3\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{}</text>",
                axis_y + 16.0,
                figure(*t)
            );
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{}{}</text>",
            LABEL_W + plot_w / 2.0,
            axis_y + 34.0,
            escape(&self.unit),
            if self.scale == Scale::Log {
                " (log scale)"
            } else {
                ""
            }
        );
        let mut y = TOP;
        for group in &self.groups {
            y += GROUP_GAP;
            let _ = writeln!(
                svg,
                "<text x=\"12\" y=\"{:.1}\" font-weight=\"bold\">{}</text>",
                y + BAR_H - 4.0,
                escape(&group.label)
            );
            y += BAR_H;
            for bar in &group.bars {
                let w = x_of(bar.value).max(1.0);
                let _ = writeln!(
                    svg,
                    "<text x=\"24\" y=\"{:.1}\">{}</text><rect x=\"{LABEL_W}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{BAR_H}\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                    y + BAR_H - 4.0,
                    escape(&bar.series),
                    colour(&bar.series),
                    LABEL_W + w + 4.0,
                    y + BAR_H - 4.0,
                    figure(bar.value)
                );
                y += BAR_H + BAR_GAP;
            }
        }
        let _ = writeln!(
            svg,
            "<line x1=\"{LABEL_W}\" y1=\"{axis_y:.1}\" x2=\"{:.1}\" y2=\"{axis_y:.1}\" stroke=\"#999\"/>\n</svg>",
            LABEL_W + plot_w
        );
        svg
    }
}

/// A span of time shaded on a [`Timeline`]: a fault from `start` for
/// `length` seconds, in its category's colour.
pub struct Span {
    pub start: f64,
    pub length: f64,
    pub category: String,
}

/// A value over time (seconds on the x axis, shown in minutes) with shaded
/// spans under it and a legend of their categories.
pub struct Timeline {
    pub title: String,
    pub unit: String,
    /// (seconds, value)
    pub points: Vec<(f64, f64)>,
    pub spans: Vec<Span>,
}

impl Timeline {
    pub fn svg(&self) -> String {
        let height = 340.0;
        let (left, right, top, bottom) = (70.0, 20.0, 60.0, 50.0);
        let plot_w = WIDTH - left - right;
        let plot_h = height - top - bottom;
        let end = self
            .points
            .iter()
            .map(|p| p.0)
            .chain(self.spans.iter().map(|s| s.start + s.length))
            .fold(1.0, f64::max);
        let max = self.points.iter().map(|p| p.1).fold(1.0, f64::max);
        let y_step = step(max);
        let y_top = (max / y_step).ceil() * y_step;
        let x = |s: f64| left + s / end * plot_w;
        let y = |v: f64| top + plot_h - v / y_top * plot_h;
        let mut categories: Vec<&str> = Vec::new();
        for s in &self.spans {
            if !categories.contains(&s.category.as_str()) {
                categories.push(&s.category);
            }
        }
        let colour = |c: &str| {
            let i = categories.iter().position(|x| *x == c).unwrap_or(0);
            ["#d9822b", "#2f6fba", "#c0392b", "#3a9a5b", "#8c8c8c"][i % 5]
        };
        let mut svg = String::new();
        let _ = write!(
            svg,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" {FONT} font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n<text x=\"12\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
            escape(&self.title)
        );
        // Legend.
        let mut lx = left;
        for c in &categories {
            let _ = writeln!(
                svg,
                "<rect x=\"{lx:.1}\" y=\"34\" width=\"12\" height=\"12\" fill=\"{}\" fill-opacity=\"0.35\"/><text x=\"{:.1}\" y=\"44\">{}</text>",
                colour(c),
                lx + 16.0,
                escape(c)
            );
            lx += 30.0 + 7.0 * c.chars().count() as f64;
        }
        // A held fault is a shaded span; an instant one (a kill, a restart)
        // a line.
        for s in &self.spans {
            if s.length > 0.0 {
                let _ = writeln!(
                    svg,
                    "<rect class=\"span\" x=\"{:.1}\" y=\"{top}\" width=\"{:.1}\" height=\"{plot_h}\" fill=\"{}\" fill-opacity=\"0.3\"/>",
                    x(s.start),
                    x(s.start + s.length) - x(s.start),
                    colour(&s.category)
                );
            } else {
                let _ = writeln!(
                    svg,
                    "<line class=\"span\" x1=\"{0:.1}\" y1=\"{top}\" x2=\"{0:.1}\" y2=\"{1:.1}\" stroke=\"{2}\" stroke-width=\"2\" stroke-opacity=\"0.8\"/>",
                    x(s.start),
                    top + plot_h,
                    colour(&s.category)
                );
            }
        }
        let mut v = 0.0;
        while v <= y_top + 1e-9 {
            let _ = writeln!(
                svg,
                "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#e3e3e3\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">{}</text>",
                y(v),
                left + plot_w,
                y(v),
                left - 6.0,
                y(v) + 4.0,
                figure(v)
            );
            v += y_step;
        }
        let minutes = (end / 60.0).ceil() as usize;
        let every = (minutes / 10).max(1);
        for m in (0..=minutes).step_by(every) {
            let px = x(m as f64 * 60.0);
            if px > left + plot_w + 0.5 {
                break;
            }
            let _ = writeln!(
                svg,
                "<text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{m}</text>",
                top + plot_h + 16.0
            );
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">minutes</text><text x=\"14\" y=\"{:.1}\" fill=\"#555\" transform=\"rotate(-90 14 {:.1})\" text-anchor=\"middle\">{}</text>",
            left + plot_w / 2.0,
            height - 12.0,
            top + plot_h / 2.0,
            top + plot_h / 2.0,
            escape(&self.unit)
        );
        let path: Vec<String> = self
            .points
            .iter()
            .map(|(s, v)| format!("{:.1},{:.1}", x(*s), y(*v)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"#1f3f6b\" stroke-width=\"1.5\"/>\n<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#999\"/>\n</svg>",
            path.join(" "),
            top + plot_h,
            left + plot_w,
            top + plot_h
        );
        svg
    }
}

/// The results of one scenario.
fn of_scenario<'r>(report: &'r serde_json::Value, scenario: &str) -> Vec<&'r serde_json::Value> {
    report["results"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter(|r| r["scenario"].as_str() == Some(scenario))
                .collect()
        })
        .unwrap_or_default()
}

/// The benchmark's charts from its results file: backlog throughput beside
/// the shared-CPU bound, commit-to-Kafka latency, peak memory. Each is
/// (file name, SVG); a chart without data in the results is left out.
pub fn benchmark(report: &serde_json::Value) -> Vec<(&'static str, String)> {
    let empty = Vec::new();
    let results = report["results"].as_array().unwrap_or(&empty);
    let of = |scenario: &str| of_scenario(report, scenario);
    let engine = |r: &serde_json::Value| r["engine"].as_str().unwrap_or("?").to_string();
    let mut charts = Vec::new();

    let mut sizes: Vec<i64> = results
        .iter()
        .filter_map(|r| {
            r["scenario"]
                .as_str()?
                .strip_prefix("backlog_tx")?
                .parse()
                .ok()
        })
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let groups: Vec<Group> = sizes
        .iter()
        .map(|n| {
            let mut bars: Vec<Bar> = of(&format!("backlog_tx{n}"))
                .into_iter()
                .filter_map(|r| {
                    Some(Bar {
                        series: engine(r),
                        value: r["throughput_msg_s"].as_f64()?,
                    })
                })
                .collect();
            if let Some(bound) = report["ratios"][format!("shared_cpu_bound_msg_s_tx{n}")].as_f64()
            {
                bars.push(Bar {
                    series: "shared-CPU bound".into(),
                    value: bound,
                });
            }
            Group {
                label: format!("backlog of {n}-row transactions"),
                bars,
            }
        })
        .collect();
    if !groups.is_empty() {
        charts.push((
            "benchmark-throughput.svg",
            Bars {
                title: "Backlog drained: messages per second (median of the drains)".into(),
                unit: "messages per second, first record to last".into(),
                scale: Scale::Linear,
                groups,
            }
            .svg(),
        ));
    }

    // One group per percentile and offered rate; results from before the
    // streams had several rates have no `rate_msg_s`.
    let steady = of("steady");
    let mut rates: Vec<Option<u64>> = steady.iter().map(|r| r["rate_msg_s"].as_u64()).collect();
    rates.sort_unstable();
    rates.dedup();
    let mut groups: Vec<Group> = Vec::new();
    for rate in &rates {
        for p in ["p50", "p99", "max"] {
            let bars: Vec<Bar> = steady
                .iter()
                .filter(|r| r["rate_msg_s"].as_u64() == *rate)
                .filter_map(|r| {
                    Some(Bar {
                        series: engine(r),
                        value: r["latency_ms"][p].as_f64()?,
                    })
                })
                .collect();
            if !bars.is_empty() {
                let label = match rate {
                    Some(rate) => format!("{p} at {} msg/s", figure(*rate as f64)),
                    None => p.to_string(),
                };
                groups.push(Group { label, bars });
            }
        }
    }
    if !groups.is_empty() {
        charts.push((
            "benchmark-latency.svg",
            Bars {
                title: "Commit to Kafka in one-row transactions at a fixed offered rate".into(),
                unit: "milliseconds".into(),
                scale: Scale::Log,
                groups,
            }
            .svg(),
        ));
    }

    let mut groups = Vec::new();
    let mut scenarios: Vec<(&str, Option<u64>, String)> = vec![
        ("backlog_tx1", None, "backlog, 1-row transactions".into()),
        (
            "backlog_tx100",
            None,
            "backlog, 100-row transactions".into(),
        ),
    ];
    for rate in &rates {
        let label = match rate {
            Some(rate) => format!("steady stream, {} msg/s", figure(*rate as f64)),
            None => "steady stream".into(),
        };
        scenarios.push(("steady", *rate, label));
    }
    scenarios.push(("one_transaction", None, "one large transaction".into()));
    for (scenario, rate, label) in scenarios {
        let bars: Vec<Bar> = of(scenario)
            .into_iter()
            .filter(|r| scenario != "steady" || r["rate_msg_s"].as_u64() == rate)
            .filter_map(|r| {
                Some(Bar {
                    series: engine(r),
                    value: r["peak_rss_mib"].as_f64()?,
                })
            })
            .collect();
        if !bars.is_empty() {
            groups.push(Group { label, bars });
        }
    }
    charts.extend(curves(report));
    if !groups.is_empty() {
        charts.push((
            "benchmark-memory.svg",
            Bars {
                title: "Peak resident memory of the relay (Debezium: the Connect worker)".into(),
                unit: "MiB".into(),
                scale: Scale::Linear,
                groups,
            }
            .svg(),
        ));
    }
    charts
}

/// The cost curves' charts: throughput by destinations, MB/s by payload
/// size beside librdkafka alone, and the long backlog's memory and retained
/// WAL over its drain.
fn curves(report: &serde_json::Value) -> Vec<(&'static str, String)> {
    let of = |scenario: &str| of_scenario(report, scenario);
    let mut charts = Vec::new();
    let groups: Vec<Group> = of("curve_destinations")
        .into_iter()
        .filter_map(|r| {
            Some(Group {
                label: format!("{} destinations", figure(r["destinations"].as_f64()?)),
                bars: vec![Bar {
                    series: r["engine"].as_str().unwrap_or("?").to_string(),
                    value: r["throughput_msg_s"].as_f64()?,
                }],
            })
        })
        .collect();
    if !groups.is_empty() {
        charts.push((
            "benchmark-destinations.svg",
            Bars {
                title: "A backlog spread over more destinations (one partition each)".into(),
                unit: "messages per second, first record to last".into(),
                scale: Scale::Log,
                groups,
            }
            .svg(),
        ));
    }
    let mut sizes: Vec<u64> = of("curve_payload")
        .iter()
        .filter_map(|r| r["payload_bytes"].as_u64())
        .collect();
    sizes.dedup();
    let groups: Vec<Group> = sizes
        .iter()
        .map(|size| Group {
            label: format!("{} B payloads", figure(*size as f64)),
            bars: of("curve_payload")
                .into_iter()
                .filter(|r| r["payload_bytes"].as_u64() == Some(*size))
                .filter_map(|r| {
                    Some(Bar {
                        series: r["engine"].as_str().unwrap_or("?").to_string(),
                        value: r["payload_mb_s"].as_f64()?,
                    })
                })
                .collect(),
        })
        .filter(|g| !g.bars.is_empty())
        .collect();
    if !groups.is_empty() {
        charts.push((
            "benchmark-payload.svg",
            Bars {
                title: "Payload bytes per second by payload size".into(),
                unit: "MB of payload per second".into(),
                scale: Scale::Log,
                groups,
            }
            .svg(),
        ));
    }
    if let Some(long) = of("curve_long_backlog").first() {
        let rows = long["samples"]["rows"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let series = |i: usize| -> Vec<(f64, f64)> {
            rows.iter()
                .filter_map(|r| Some((r[0].as_f64()?, r[i].as_f64()?)))
                .collect()
        };
        let n = long["rows"].as_f64().unwrap_or(0.0);
        for (name, column, title, unit) in [
            (
                "benchmark-backlog-rss.svg",
                2,
                format!(
                    "Resident memory while a backlog of {} rows drains",
                    figure(n)
                ),
                "MiB",
            ),
            (
                "benchmark-backlog-wal.svg",
                4,
                format!(
                    "WAL past what the relay confirmed while a backlog of {} rows drains",
                    figure(n)
                ),
                "MiB",
            ),
        ] {
            charts.push((
                name,
                Timeline {
                    title,
                    unit: unit.into(),
                    points: series(column),
                    spans: Vec::new(),
                }
                .svg(),
            ));
        }
    }
    charts
}
