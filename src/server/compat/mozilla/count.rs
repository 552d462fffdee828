//! The lists of a Mozilla body, counted before the body is parsed. A frame is 6 bytes
//! of JSON (`[0,1],`) and 24 in its parsed form, inside a vector per stack, so a body
//! within `max_request_body_size` parses into many times its size: the limits must
//! refuse it first. The walk allocates nothing for what it counts.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::config::RequestLimits;
use crate::server::ApiError;
use crate::server::limits::Counted;

/// Which body is walked: v5 takes `jobs` or one job's fields at the top level; v4 is
/// always one job (its `jobs` key, if any, is not read).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Version {
    V5,
    V4,
}

/// Refuses a body whose jobs, modules, stacks or frames (over all jobs together) pass
/// the limits, with the same 400 the parsed body would get. A body that is not JSON of
/// the expected shape passes: the parse that follows names the bad field.
pub(super) fn count_first(
    body: &[u8],
    version: Version,
    limits: &RequestLimits,
    max_jobs: usize,
) -> Result<(), ApiError> {
    let mut tally = JobCounts {
        limits,
        max_jobs,
        jobs: 0,
        modules: 0,
        stacks: 0,
        frames: 0,
        refused: None,
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let _ = de.deserialize_map(JobFields {
        tally: &mut tally,
        top_level: Some(version),
    });
    tally.refused.map_or(Ok(()), Err)
}

/// The running counts of one body walk, over all jobs together; `refused` is set when
/// the walk stopped at a limit.
struct JobCounts<'a> {
    limits: &'a RequestLimits,
    max_jobs: usize,
    jobs: usize,
    modules: usize,
    stacks: usize,
    frames: usize,
    refused: Option<ApiError>,
}

impl JobCounts<'_> {
    fn add<E: de::Error>(&mut self, counted: Counted) -> Result<(), E> {
        let (count, what) = match counted {
            Counted::Modules => (&mut self.modules, "modules"),
            Counted::Stacktraces => (&mut self.stacks, "stacks"),
            _ => (&mut self.frames, "frames"),
        };
        *count += 1;
        let count = *count;
        self.limits
            .check(counted, what, count)
            .map_err(|refused| self.refuse(ApiError::refused(refused)))
    }

    fn add_job<E: de::Error>(&mut self) -> Result<(), E> {
        self.jobs += 1;
        if self.jobs <= self.max_jobs {
            return Ok(());
        }
        Err(self.refuse(ApiError::bad_request(format!(
            "please limit number of jobs in a single request to <= {} (`mozilla.max_jobs`)",
            self.max_jobs
        ))))
    }

    /// Stops the walk; the error it stops with is not shown.
    fn refuse<E: de::Error>(&mut self, error: ApiError) -> E {
        self.refused = Some(error);
        E::custom("refused")
    }
}

#[derive(Clone, Copy)]
enum Key {
    Jobs,
    MemoryMap,
    Stacks,
    Other,
}

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
                Ok(match key {
                    "jobs" => Key::Jobs,
                    "memoryMap" => Key::MemoryMap,
                    "stacks" => Key::Stacks,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

/// The fields of one job: at the top level of the body (`top_level`, where v5 may
/// also hold `jobs`) or as an element of `jobs`.
struct JobFields<'t, 'a> {
    tally: &'t mut JobCounts<'a>,
    top_level: Option<Version>,
}

impl<'de> Visitor<'de> for JobFields<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a job")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Jobs if self.top_level == Some(Version::V5) => {
                    map.next_value_seed(Jobs(self.tally))?
                }
                Key::MemoryMap => map.next_value_seed(Elements {
                    tally: self.tally,
                    counted: Counted::Modules,
                })?,
                Key::Stacks => map.next_value_seed(Stacks(self.tally))?,
                Key::Jobs | Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for JobFields<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

/// `jobs`: each job counted, and its lists.
struct Jobs<'t, 'a>(&'t mut JobCounts<'a>);

impl<'de> Visitor<'de> for Jobs<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of jobs")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        loop {
            let job = JobFields {
                tally: self.0,
                top_level: None,
            };
            if seq.next_element_seed(job)?.is_none() {
                return Ok(());
            }
            self.0.add_job()?;
        }
    }
}

impl<'de> DeserializeSeed<'de> for Jobs<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

/// `stacks`: each stack counted, and its frames.
struct Stacks<'t, 'a>(&'t mut JobCounts<'a>);

impl<'de> Visitor<'de> for Stacks<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of stacks")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        loop {
            let frames = Elements {
                tally: self.0,
                counted: Counted::Frames,
            };
            if seq.next_element_seed(frames)?.is_none() {
                return Ok(());
            }
            self.0.add(Counted::Stacktraces)?;
        }
    }
}

impl<'de> DeserializeSeed<'de> for Stacks<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

/// A list whose elements are counted as `counted`, not read.
struct Elements<'t, 'a> {
    tally: &'t mut JobCounts<'a>,
    counted: Counted,
}

impl<'de> Visitor<'de> for Elements<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {
            self.tally.add(self.counted)?;
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Elements<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> RequestLimits {
        RequestLimits {
            max_modules: 3,
            max_stacktraces: 2,
            max_frames: 4,
            max_sources: 1,
        }
    }

    fn refused(body: &str, version: Version) -> Option<String> {
        count_first(body.as_bytes(), version, &limits(), 2)
            .err()
            .map(|e| e.message)
    }

    #[test]
    fn lists_are_counted_over_all_jobs() {
        let ok = r#"{"jobs": [{"memoryMap": [["a","1"]], "stacks": [[[0,1],[0,2]]]},
                              {"memoryMap": [["b","2"],["c","3"]], "stacks": [[[0,1],[1,2]]]}]}"#;
        assert_eq!(refused(ok, Version::V5), None);
        let modules = r#"{"jobs": [{"memoryMap": [["a","1"],["b","2"]], "stacks": []},
                                   {"memoryMap": [["a","1"],["b","2"]], "stacks": []}]}"#;
        assert!(
            refused(modules, Version::V5)
                .unwrap()
                .contains("max_modules")
        );
        let frames = r#"{"memoryMap": [], "stacks": [[[0,1],[0,2],[0,3]],[[0,1],[0,2]]]}"#;
        assert!(refused(frames, Version::V5).unwrap().contains("max_frames"));
        let stacks = r#"{"memoryMap": [], "stacks": [[],[],[]]}"#;
        assert!(
            refused(stacks, Version::V4)
                .unwrap()
                .contains("max_stacktraces")
        );
        let jobs = r#"{"jobs": [{}, {}, {}]}"#;
        assert!(
            refused(jobs, Version::V5)
                .unwrap()
                .contains("mozilla.max_jobs")
        );
        // v4 bodies are one job: a `jobs` key is not theirs.
        assert_eq!(refused(jobs, Version::V4), None);
    }

    #[test]
    fn bodies_of_other_shapes_are_left_to_the_parse() {
        for body in [
            "",
            "[]",
            "{\"jobs\": 3}",
            "{\"stacks\": [1, 2]}",
            "nonsense",
            "{\"jobs\": [[]]}",
        ] {
            assert_eq!(refused(body, Version::V5), None, "{body}");
        }
    }
}
