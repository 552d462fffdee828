//! Upstream's host deny list: an HTTP host that keeps failing (download errors and
//! timeouts, not misses) is left alone for a while, so one dead symbol server does not
//! cost every request its timeouts. Failures are counted in time buckets over a sliding
//! window; both maps are bounded and forget idle hosts.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::lifetime;
use crate::error::CacheError;
use crate::units::rfc3339_millis;

/// Config keys `deny_list_*`, with upstream's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DenyListConfig {
    pub enabled: bool,
    /// Failures older than this no longer count.
    pub time_window: Duration,
    /// Failures are counted per bucket of this length.
    pub bucket_size: Duration,
    /// Failures within the window that block a host.
    pub threshold: usize,
    pub block_time: Duration,
    pub never_block_hosts: BTreeSet<String>,
}

impl Default for DenyListConfig {
    fn default() -> Self {
        DenyListConfig {
            enabled: true,
            time_window: Duration::from_secs(60),
            bucket_size: Duration::from_secs(5),
            threshold: 60,
            block_time: Duration::from_secs(3600),
            never_block_hosts: BTreeSet::new(),
        }
    }
}

/// Hosts tracked at once; a flood of made-up hosts evicts the idlest first.
const MAX_TRACKED_HOSTS: u64 = 10_000;

/// (bucket start in ms since the epoch, failures in it), oldest first.
type Buckets = Arc<Mutex<VecDeque<(u64, usize)>>>;

pub(super) struct HostDenyList {
    config: DenyListConfig,
    failures: moka::sync::Cache<String, Buckets>,
    /// Blocked hosts, the error that tipped them over and when.
    blocked: moka::sync::Cache<String, (CacheError, SystemTime)>,
}

/// A host left alone, as the console shows it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BlockedHost {
    pub host: String,
    /// The failure that tipped it over.
    pub reason: String,
    pub since: String,
    /// When it is asked again.
    pub until: String,
}

impl HostDenyList {
    /// `None` when the deny list is off.
    pub(super) fn new(config: &DenyListConfig) -> Option<Self> {
        if !config.enabled || config.bucket_size.is_zero() {
            return None;
        }
        Some(HostDenyList {
            config: config.clone(),
            failures: moka::sync::Cache::builder()
                .max_capacity(MAX_TRACKED_HOSTS)
                .time_to_idle(lifetime(config.time_window.max(config.bucket_size)))
                .build(),
            blocked: moka::sync::Cache::builder()
                .max_capacity(MAX_TRACKED_HOSTS)
                .time_to_live(lifetime(config.block_time))
                .build(),
        })
    }

    /// The error to answer instead of asking `host`, while it is blocked.
    pub(super) fn check(&self, host: &str) -> Result<(), CacheError> {
        match self.blocked.get(host) {
            None => Ok(()),
            Some((reason, _)) => Err(CacheError::DownloadError(format!(
                "host {host} is temporarily blocked after too many failed downloads \
                 (for at most {}); the last failure: {reason}",
                humantime::format_duration(self.config.block_time)
            ))),
        }
    }

    /// The hosts blocked now, by name. The release time is the block time after the
    /// block began, which is when the entry expires.
    pub(super) fn blocked(&self) -> Vec<BlockedHost> {
        let mut hosts: Vec<BlockedHost> = self
            .blocked
            .iter()
            .map(|(host, (reason, since))| BlockedHost {
                host: host.as_ref().clone(),
                reason: reason.to_string(),
                since: rfc3339_millis(since),
                until: rfc3339_millis(since + self.config.block_time),
            })
            .collect();
        hosts.sort_by(|a, b| a.host.cmp(&b.host));
        hosts
    }

    /// Counts the outcome of one download from `host`.
    pub(super) fn record<T>(&self, host: &str, result: &Result<T, CacheError>) {
        if let Err(err @ (CacheError::DownloadError(_) | CacheError::Timeout(_))) = result {
            self.record_failure(host, err, SystemTime::now());
        }
    }

    fn record_failure(&self, host: &str, err: &CacheError, now: SystemTime) {
        if self.blocked.contains_key(host) || self.config.never_block_hosts.contains(host) {
            return;
        }
        let now_ms = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let now_ms = u64::try_from(now_ms).unwrap_or(u64::MAX);
        let bucket_ms = u64::try_from(self.config.bucket_size.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let window_ms = u64::try_from(self.config.time_window.as_millis()).unwrap_or(u64::MAX);
        let bucket = now_ms - now_ms % bucket_ms;
        let cutoff = now_ms.saturating_sub(window_ms);

        let buckets = self.failures.get_with_by_ref(host, Buckets::default);
        let total = {
            // A poisoned lock only means another recorder panicked; the counts are still
            // plain numbers.
            let mut queue = buckets.lock().unwrap_or_else(|e| e.into_inner());
            match queue.back_mut() {
                Some((start, count)) if *start == bucket => *count = count.saturating_add(1),
                _ => queue.push_back((bucket, 1)),
            }
            while queue.front().is_some_and(|(start, _)| *start < cutoff) {
                queue.pop_front();
            }
            queue.iter().map(|(_, count)| count).sum::<usize>()
        };
        if total >= self.config.threshold {
            tracing::warn!(
                %host,
                failures = total,
                block_time = %humantime::format_duration(self.config.block_time),
                error = %err,
                "blocking a host after too many failed downloads"
            );
            self.blocked.insert(host.to_owned(), (err.clone(), now));
            self.failures.invalidate(host);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Long enough that a check right after a block sees it on a loaded machine.
    const BLOCK_TIME: Duration = Duration::from_secs(2);

    fn list(threshold: usize) -> HostDenyList {
        HostDenyList::new(&DenyListConfig {
            threshold,
            time_window: Duration::from_secs(5),
            bucket_size: Duration::from_secs(1),
            block_time: BLOCK_TIME,
            never_block_hosts: ["trusted.example".to_owned()].into(),
            ..DenyListConfig::default()
        })
        .unwrap()
    }

    fn fail() -> Result<(), CacheError> {
        Err(CacheError::DownloadError("503".into()))
    }

    #[test]
    fn blocks_after_threshold_failures_and_unblocks_after_block_time() {
        let list = list(3);
        list.record("a.example", &fail());
        list.record("a.example", &Err::<(), _>(CacheError::NotFound));
        list.record("a.example", &fail());
        assert!(list.check("a.example").is_ok(), "misses do not count");
        list.record(
            "a.example",
            &Err::<(), _>(CacheError::Timeout(Duration::ZERO)),
        );
        let err = list.check("a.example").unwrap_err();
        assert!(err.to_string().contains("temporarily blocked"), "{err}");
        assert!(
            list.check("b.example").is_ok(),
            "other hosts are not affected"
        );
        // Unblocked once the block time is over (polled: a loaded machine is late).
        let deadline = std::time::Instant::now() + BLOCK_TIME + Duration::from_secs(10);
        while list.check("a.example").is_err() {
            assert!(std::time::Instant::now() < deadline, "never unblocked");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    #[test]
    fn blocked_hosts_are_listed_with_their_release_time() {
        let list = list(1);
        assert!(list.blocked().is_empty());
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        list.record_failure("a.example", &CacheError::DownloadError("503".into()), at);
        let blocked = list.blocked();
        assert_eq!(blocked.len(), 1);
        assert_eq!(blocked[0].host, "a.example");
        assert!(blocked[0].reason.contains("503"), "{:?}", blocked[0]);
        assert_eq!(blocked[0].since, "2023-11-14T22:13:20.000Z");
        assert_eq!(
            blocked[0].until, "2023-11-14T22:13:22.000Z",
            "since + block time"
        );
    }

    #[test]
    fn failures_outside_the_window_do_not_count() {
        let list = list(2);
        let err = CacheError::DownloadError("x".into());
        let long_ago = SystemTime::now() - Duration::from_secs(60);
        list.record_failure("a.example", &err, long_ago);
        list.record("a.example", &fail());
        assert!(list.check("a.example").is_ok());
        list.record("a.example", &fail());
        assert!(list.check("a.example").is_err());
    }

    #[test]
    fn never_block_hosts_and_disabled_lists() {
        let list = list(1);
        list.record("trusted.example", &fail());
        assert!(list.check("trusted.example").is_ok());
        let off = DenyListConfig {
            enabled: false,
            ..DenyListConfig::default()
        };
        assert!(HostDenyList::new(&off).is_none());
    }
}
