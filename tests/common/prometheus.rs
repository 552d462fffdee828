//! A strict reader of the Prometheus text exposition format (version 0.0.4), so tests
//! can check what `GET /metrics` says and that it is well-formed: every sample belongs
//! to a family with a `# TYPE` line, label values are unescaped, and histogram buckets
//! are cumulative up to `+Inf`, which equals `_count`.

use std::collections::{BTreeMap, HashMap};

/// A family name and labels, sorted.
type SeriesKey = (String, Vec<(String, String)>);

#[derive(Debug)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    /// Whether this is a sample `name` whose labels include `labels`.
    fn is(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.name == name
            && labels
                .iter()
                .all(|(k, v)| self.labels.get(*k).map(String::as_str) == Some(*v))
    }
}

#[derive(Debug, Default)]
pub struct Exposition {
    /// Family name to type (`counter`, `gauge`, `histogram`, ...).
    pub types: HashMap<String, String>,
    pub help: HashMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Exposition {
    pub fn parse(text: &str) -> Result<Exposition, String> {
        let mut out = Exposition::default();
        for (n, line) in text.lines().enumerate() {
            let fail = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
            if line.trim().is_empty() {
                continue;
            }
            if let Some(comment) = line.strip_prefix('#') {
                let mut words = comment.trim_start().splitn(3, ' ');
                match (words.next(), words.next(), words.next()) {
                    (Some("TYPE"), Some(name), Some(kind)) => {
                        out.types.insert(name.to_owned(), kind.trim().to_owned());
                    }
                    (Some("HELP"), Some(name), help) => {
                        out.help
                            .insert(name.to_owned(), help.unwrap_or_default().to_owned());
                    }
                    _ => {}
                }
                continue;
            }
            let sample = parse_sample(line).map_err(|why| fail(&why))?;
            if out.family(&sample.name).is_none() {
                return Err(fail("no # TYPE line for this sample"));
            }
            out.samples.push(sample);
        }
        out.check_histograms()?;
        Ok(out)
    }

    /// The family a sample name belongs to (a histogram's `_bucket` belongs to it).
    fn family<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        if self.types.contains_key(name) {
            return Some(name);
        }
        ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|suffix| name.strip_suffix(suffix))
            .find(|base| self.types.get(*base).is_some_and(|t| t == "histogram"))
    }

    fn check_histograms(&self) -> Result<(), String> {
        // Per histogram series (family, labels but `le`): its (le, count) pairs.
        let mut buckets: BTreeMap<SeriesKey, Vec<(f64, f64)>> = BTreeMap::new();
        for s in self.samples.iter().filter(|s| s.name.ends_with("_bucket")) {
            let le = s.labels.get("le").ok_or(format!("{s:?} has no le label"))?;
            let le = parse_value(le)?;
            let mut rest = s.labels.clone();
            rest.remove("le");
            let base = s.name.trim_end_matches("_bucket").to_owned();
            buckets
                .entry((base, rest.into_iter().collect()))
                .or_default()
                .push((le, s.value));
        }
        for ((base, labels), mut series) in buckets {
            series.sort_by(|a, b| a.0.total_cmp(&b.0));
            if !series.windows(2).all(|w| w[0].1 <= w[1].1) {
                return Err(format!("{base} {labels:?}: buckets are not cumulative"));
            }
            let labels: Vec<(&str, &str)> = labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let count = self.get(&format!("{base}_count"), &labels);
            match series.last() {
                Some(&(le, n)) if le == f64::INFINITY && Some(n) == count => {}
                _ => return Err(format!("{base} {labels:?}: +Inf bucket is not _count")),
            }
        }
        Ok(())
    }

    /// The first sample `name` whose labels include `labels`.
    pub fn sample(&self, name: &str, labels: &[(&str, &str)]) -> Option<&Sample> {
        self.samples.iter().find(|s| s.is(name, labels))
    }

    /// The sum over every sample `name` whose labels include `labels` (0 for none).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.is(name, labels))
            .map(|s| s.value)
            .sum()
    }

    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.sample(name, labels).map(|s| s.value)
    }

    /// Like [`Self::get`], 0 for a series that is absent (as Prometheus reads an
    /// absent counter).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or(0.0)
    }
}

fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => text.parse().map_err(|e| format!("bad value {text:?}: {e}")),
    }
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err("bad metric name".into());
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        loop {
            let Some(&(start, c)) = chars.peek() else {
                return Err("unterminated labels".into());
            };
            if c == '}' {
                rest = &after[start + 1..];
                break;
            }
            let eq = after[start..].find('=').ok_or("label without =")? + start;
            let key = &after[start..eq];
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("bad label name {key:?}"));
            }
            while chars.next_if(|&(i, _)| i <= eq).is_some() {}
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err("label value is not quoted".into());
            }
            let mut value = String::new();
            loop {
                match chars.next().map(|(_, c)| c) {
                    Some('"') => break,
                    Some('\\') => match chars.next().map(|(_, c)| c) {
                        Some('n') => value.push('\n'),
                        Some(c @ ('\\' | '"')) => value.push(c),
                        _ => return Err("bad escape in label value".into()),
                    },
                    Some(c) => value.push(c),
                    None => return Err("unterminated label value".into()),
                }
            }
            labels.insert(key.to_owned(), value);
            chars.next_if(|&(_, c)| c == ',');
        }
    }
    let mut fields = rest.split_whitespace();
    let value = parse_value(fields.next().ok_or("no value")?)?;
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|e| format!("bad timestamp: {e}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing text".into());
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}
