//! What this process's downloads came to, for the console: per source (by id) how many
//! ended how, their bytes, time and last error; and the last downloads one by one, so
//! that a candidate report's location can be matched with its download's time and size.
//! Both are bounded. Recording takes one lock per download, which is rare next to
//! requests (a warm request downloads nothing).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::error::CacheResult;
use crate::units::rfc3339_millis as timestamp;

/// Sources tallied at once; a new one past this replaces the one idle longest (ids
/// come from requests, so they are not bounded by the config).
const MAX_SOURCES: usize = 256;
/// Downloads remembered one by one.
const MAX_RECENT: usize = 500;

/// One source's downloads since the process started (or since it was last evicted).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SourceTally {
    pub id: String,
    #[serde(rename = "type")]
    pub source_type: &'static str,
    pub downloads: u64,
    pub ok: u64,
    pub not_found: u64,
    /// Ended otherwise: no permission, a timeout, an error, too large, malformed.
    pub failed: u64,
    pub bytes: u64,
    pub mean_ms: f64,
    pub last_error: Option<String>,
    pub last_time: String,
}

/// One download: `location` is the string a candidate report names it by.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DownloadRecord {
    pub time: String,
    pub source: String,
    pub location: String,
    /// `ok`, or the error's name (`not_found`, `timeout`, ...).
    pub outcome: &'static str,
    pub bytes: Option<u64>,
    pub duration_ms: f64,
}

#[derive(Default)]
pub struct DownloadLedger {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    sources: HashMap<String, SourceTotals>,
    recent: VecDeque<(SystemTime, Recent)>,
}

struct SourceTotals {
    source_type: &'static str,
    downloads: u64,
    ok: u64,
    not_found: u64,
    failed: u64,
    bytes: u64,
    time: Duration,
    last_error: Option<String>,
    last_time: SystemTime,
}

struct Recent {
    source: String,
    location: String,
    outcome: &'static str,
    bytes: Option<u64>,
    elapsed: Duration,
}

impl DownloadLedger {
    pub fn record(
        &self,
        source: &str,
        source_type: &'static str,
        location: &str,
        elapsed: Duration,
        result: &CacheResult<u64>,
    ) {
        self.record_at(
            SystemTime::now(),
            source,
            source_type,
            location,
            elapsed,
            result,
        );
    }

    fn record_at(
        &self,
        now: SystemTime,
        source: &str,
        source_type: &'static str,
        location: &str,
        elapsed: Duration,
        result: &CacheResult<u64>,
    ) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(err) => err.name(),
        };
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !state.sources.contains_key(source) && state.sources.len() >= MAX_SOURCES {
            let idlest = state
                .sources
                .iter()
                .min_by_key(|(_, tally)| tally.last_time)
                .map(|(id, _)| id.clone());
            if let Some(idlest) = idlest {
                state.sources.remove(&idlest);
            }
        }
        let tally = state
            .sources
            .entry(source.to_owned())
            .or_insert_with(|| SourceTotals {
                source_type,
                downloads: 0,
                ok: 0,
                not_found: 0,
                failed: 0,
                bytes: 0,
                time: Duration::ZERO,
                last_error: None,
                last_time: now,
            });
        tally.source_type = source_type;
        tally.downloads += 1;
        tally.time += elapsed;
        tally.last_time = now;
        match result {
            Ok(bytes) => {
                tally.ok += 1;
                tally.bytes += bytes;
            }
            Err(crate::error::CacheError::NotFound) => tally.not_found += 1,
            Err(err) => {
                tally.failed += 1;
                tally.last_error = Some(err.to_string());
            }
        }
        if state.recent.len() == MAX_RECENT {
            state.recent.pop_front();
        }
        state.recent.push_back((
            now,
            Recent {
                source: source.to_owned(),
                location: location.to_owned(),
                outcome,
                bytes: result.as_ref().ok().copied(),
                elapsed,
            },
        ));
    }

    /// Every tallied source, by id.
    pub fn sources(&self) -> Vec<SourceTally> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut tallies: Vec<SourceTally> = state
            .sources
            .iter()
            .map(|(id, t)| SourceTally {
                id: id.clone(),
                source_type: t.source_type,
                downloads: t.downloads,
                ok: t.ok,
                not_found: t.not_found,
                failed: t.failed,
                bytes: t.bytes,
                mean_ms: t.time.as_secs_f64() * 1e3 / t.downloads.max(1) as f64,
                last_error: t.last_error.clone(),
                last_time: timestamp(t.last_time),
            })
            .collect();
        tallies.sort_by(|a, b| a.id.cmp(&b.id));
        tallies
    }

    /// The remembered downloads, newest first.
    pub fn recent(&self) -> Vec<DownloadRecord> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .recent
            .iter()
            .rev()
            .map(|(time, r)| DownloadRecord {
                time: timestamp(*time),
                source: r.source.clone(),
                location: r.location.clone(),
                outcome: r.outcome,
                bytes: r.bytes,
                duration_ms: r.elapsed.as_secs_f64() * 1e3,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CacheError;
    use std::time::UNIX_EPOCH;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + seconds)
    }

    #[test]
    fn tallies_outcomes_per_source_and_keeps_each_download() {
        let ledger = DownloadLedger::default();
        let ms = Duration::from_millis;
        ledger.record_at(at(0), "local", "filesystem", "a/b", ms(2), &Ok(100));
        ledger.record_at(
            at(1),
            "local",
            "filesystem",
            "a/c",
            ms(4),
            &Err(CacheError::NotFound),
        );
        let timeout = CacheError::Timeout(Duration::from_secs(5));
        ledger.record_at(
            at(2),
            "remote",
            "http",
            "http://h/x",
            ms(9),
            &Err(timeout.clone()),
        );

        let sources = ledger.sources();
        assert_eq!(sources.len(), 2);
        let local = &sources[0];
        assert_eq!(
            (local.id.as_str(), local.source_type),
            ("local", "filesystem")
        );
        assert_eq!(
            (local.downloads, local.ok, local.not_found, local.failed),
            (2, 1, 1, 0)
        );
        assert_eq!(local.bytes, 100);
        assert!((local.mean_ms - 3.0).abs() < 1e-9);
        assert_eq!(local.last_error, None, "a miss is not an error");
        let remote = &sources[1];
        assert_eq!(
            (remote.failed, remote.last_error.clone()),
            (1, Some(timeout.to_string()))
        );
        assert_eq!(remote.last_time, "2023-11-14T22:13:22.000Z");

        let recent = ledger.recent();
        let outcomes: Vec<_> = recent
            .iter()
            .map(|r| (r.location.as_str(), r.outcome, r.bytes))
            .collect();
        assert_eq!(
            outcomes,
            vec![
                ("http://h/x", "timeout", None),
                ("a/c", "not_found", None),
                ("a/b", "ok", Some(100))
            ]
        );
    }

    #[test]
    fn stays_bounded_and_forgets_the_idlest_source() {
        let ledger = DownloadLedger::default();
        for i in 0..(MAX_SOURCES as u64 + 10) {
            ledger.record_at(at(i), &format!("s{i}"), "http", "x", Duration::ZERO, &Ok(1));
        }
        let sources = ledger.sources();
        assert_eq!(sources.len(), MAX_SOURCES);
        assert!(
            !sources.iter().any(|s| s.id == "s0"),
            "the idlest went first"
        );
        assert!(
            sources
                .iter()
                .any(|s| s.id == format!("s{}", MAX_SOURCES + 9))
        );
        for i in 0..(MAX_RECENT as u64 * 2) {
            ledger.record_at(at(i), "s", "http", &i.to_string(), Duration::ZERO, &Ok(1));
        }
        let recent = ledger.recent();
        assert_eq!(recent.len(), MAX_RECENT);
        assert_eq!(recent[0].location, (MAX_RECENT * 2 - 1).to_string());
    }
}
