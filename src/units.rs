//! Human units in config values: durations (`1h`, `7d`, seconds, upstream's map form)
//! and sizes (`50GB`, `512MiB`, bytes). Every part of the config that has a time or a
//! size limit parses it here, so `config` and `cache` read them the same way.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Accepts `1h`, `7d`, `1w`, `250ms` (humantime syntax), a number of seconds, or the
/// map form of older upstream configs (`{days: 7}`, `{hours: 1, minutes: 30}`).
pub fn deserialize_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Secs(u64),
        Text(String),
        Parts(std::collections::BTreeMap<String, u64>),
    }
    match Raw::deserialize(d)? {
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
/// of 1000 and KiB/MiB/GiB/TiB powers of 1024, as disk vendors and `df -H` count.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("invalid size {text:?}: expected a number and a unit like 50GB"))?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "m" | "mb" => 1000_u64.pow(2),
        "g" | "gb" => 1000_u64.pow(3),
        "t" | "tb" => 1000_u64.pow(4),
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        other => return Err(format!("invalid size {text:?}: unknown unit {other:?}")),
    };
    Ok((number * factor as f64) as u64)
}

/// A size in bytes: a number, or a string for [`parse_size`].
pub fn deserialize_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Bytes(u64),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Bytes(n) => Ok(n),
        Raw::Text(text) => parse_size(&text).map_err(serde::de::Error::custom),
    }
}

pub fn deserialize_opt_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    deserialize_size(d).map(Some)
}

pub fn deserialize_opt_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    // `0` turns the periodic task off.
    deserialize_duration(d).map(|d| (!d.is_zero()).then_some(d))
}
