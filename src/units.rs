//! Human units in config values: durations (`1h`, `7d`, seconds, upstream's map form)
//! and sizes (`50GB`, `512MiB`, bytes). Every part of the config that has a time or a
//! size limit parses it here, so `config` and `cache` read them the same way. Also
//! the one way times are shown in what the server reports ([`rfc3339_millis`]).

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Deserializer};

/// RFC 3339 in UTC with milliseconds, as the console's documents show times.
pub fn rfc3339_millis(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// What `null` means for a lifetime or a time limit in the config, as upstream: never.
/// A century rather than `Duration::MAX`, so adding it to an `Instant` or a
/// `SystemTime` cannot overflow.
pub const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Accepts `1h`, `7d`, `1w`, `250ms` (humantime syntax), a number of seconds, or the
/// map form of older upstream configs (`{days: 7}`, `{hours: 1, minutes: 30}`).
/// `null` is [`FOREVER`]: no expiry, no time limit. Longer values are [`FOREVER`] too,
/// so that no lifetime from a config overflows a clock or panics a cache builder.
pub fn deserialize_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    parse_duration(d).map(|duration| duration.min(FOREVER))
}

fn parse_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Secs(u64),
        Text(String),
        Parts(std::collections::BTreeMap<String, u64>),
    }
    let Some(raw) = Option::<Raw>::deserialize(d)? else {
        return Ok(FOREVER);
    };
    match raw {
        Raw::Secs(secs) => Ok(Duration::from_secs(secs)),
        Raw::Text(text) => humantime::parse_duration(text.trim()).map_err(|err| {
            serde::de::Error::custom(format_args!("invalid duration {text:?}: {err}"))
        }),
        Raw::Parts(parts) => {
            let mut secs = 0u64;
            for (unit, n) in parts {
                let factor = match unit.as_str() {
                    "seconds" | "secs" => 1,
                    "minutes" | "mins" => 60,
                    "hours" => 3600,
                    "days" => 86400,
                    "weeks" => 7 * 86400,
                    _ => {
                        return Err(serde::de::Error::custom(format_args!(
                            "unknown duration unit {unit:?}"
                        )));
                    }
                };
                secs = secs.saturating_add(n.saturating_mul(factor));
            }
            Ok(Duration::from_secs(secs))
        }
    }
}

/// Parses `50GB`, `512MiB`, `1.5 TB` or a plain number of bytes. KB/MB/GB/TB are powers
/// of 1000 and KiB/MiB/GiB/TiB powers of 1024, as disk vendors and `df -H` count (and
/// as the `bytesize` crate reads them).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    text.parse::<bytesize::ByteSize>()
        .map(|size| size.as_u64())
        .map_err(|err| {
            format!("invalid size {text:?} (expected a number and a unit like 50GB): {err}")
        })
}

/// A size in bytes: a number, or a string for [`parse_size`]; `null` is no limit.
pub fn deserialize_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    deserialize_opt_size(d).map(|size| size.unwrap_or(u64::MAX))
}

/// Like [`deserialize_size`], with `null` kept as `None`.
pub fn deserialize_opt_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Bytes(u64),
        Text(String),
    }
    match Option::<Raw>::deserialize(d)? {
        None => Ok(None),
        Some(Raw::Bytes(n)) => Ok(Some(n)),
        Some(Raw::Text(text)) => parse_size(&text)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// The interval of a periodic task: `0` and `null` turn it off.
pub fn deserialize_opt_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    deserialize_duration(d).map(|d| (!d.is_zero() && d != FOREVER).then_some(d))
}

/// A count limit: a number, or `null` for no limit (as upstream's `Option<usize>`).
pub fn deserialize_limit<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    Option::<usize>::deserialize(d).map(|n| n.unwrap_or(usize::MAX))
}
