//! Request limits: counting what a request body lists (modules, stack traces, frames,
//! sources) before it is parsed, and the refusal that names the limit passed. The
//! limits' values are the `request_limits` section of the config
//! (`config::RequestLimits`), declared there because `server` reads the config and the
//! config may not read `server`.

use std::fmt;

use serde::Deserializer;
use serde::de::{self, Deserialize};

use crate::config::RequestLimits;

/// A list a request may hold, and the limit that bounds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    Modules,
    Stacktraces,
    Frames,
    Sources,
}

impl Counted {
    /// The config key under `request_limits`.
    pub fn key(self) -> &'static str {
        match self {
            Counted::Modules => "max_modules",
            Counted::Stacktraces => "max_stacktraces",
            Counted::Frames => "max_frames",
            Counted::Sources => "max_sources",
        }
    }

    fn limit(self, limits: &RequestLimits) -> usize {
        match self {
            Counted::Modules => limits.max_modules,
            Counted::Stacktraces => limits.max_stacktraces,
            Counted::Frames => limits.max_frames,
            Counted::Sources => limits.max_sources,
        }
    }
}

/// Why a request body was refused before it was parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestRefused {
    #[error("more than {limit} {what} (limit `request_limits.{key}`)", key = .counted.key())]
    TooMany {
        /// What was counted, as the client would call it (`frames`, `minidump threads`).
        what: String,
        counted: Counted,
        limit: usize,
    },
    /// An object sent as a JSON array (serde reads structs from arrays, field by field,
    /// which would hide its lists from the count).
    #[error("field `{0}`: expected an object")]
    NotAnObject(String),
}

impl RequestLimits {
    /// Refuses `count` entries of `what` when they exceed the limit of `counted`.
    pub fn check(&self, counted: Counted, what: &str, count: usize) -> Result<(), RequestRefused> {
        let limit = counted.limit(self);
        if count > limit {
            return Err(RequestRefused::TooMany {
                what: what.to_owned(),
                counted,
                limit,
            });
        }
        Ok(())
    }

    /// Counts the lists of a JSON request body without building it: `modules`,
    /// `sources`, `stacktraces` and the `frames` of all of them together, plus `extra`
    /// top-level lists (JVM `exceptions` and `classes`). Stops at the first limit
    /// passed. A body that is not valid JSON, or not of the expected types, passes:
    /// the real parse reports it better, naming the field.
    pub fn check_json(
        &self,
        body: &[u8],
        extra: &[(&'static str, Counted)],
    ) -> Result<(), RequestRefused> {
        let mut tally = Tally {
            limits: self,
            extra,
            frames: 0,
            refused: None,
        };
        let mut de = serde_json::Deserializer::from_slice(body);
        // A walk that stopped for another reason (not JSON, not the expected types) is
        // left to the real parse, whose error names the field.
        let _ = de::DeserializeSeed::deserialize(TopLevel(&mut tally), &mut de);
        tally.refused.map_or(Ok(()), Err)
    }
}

/// The running count of one body walk; `refused` is set when the walk stopped at a limit
/// (the serde error that stopped it carries no detail of its own).
struct Tally<'a> {
    limits: &'a RequestLimits,
    extra: &'a [(&'static str, Counted)],
    frames: usize,
    refused: Option<RequestRefused>,
}

impl Tally<'_> {
    fn refuse<E: de::Error>(&mut self, refused: RequestRefused) -> E {
        let err = E::custom(&refused);
        self.refused = Some(refused);
        err
    }
}

/// Each walker takes whatever JSON value comes and is its own visitor.
macro_rules! seed_is_visitor {
    ($($walker:ident),*) => {$(
        impl<'de> de::DeserializeSeed<'de> for $walker<'_, '_> {
            type Value = ();

            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.deserialize_any(self)
            }
        }
    )*};
}

seed_is_visitor!(TopLevel, CountList, Stacktrace);

struct TopLevel<'t, 'a>(&'t mut Tally<'a>);

impl<'de> de::Visitor<'de> for TopLevel<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let tally = self.0;
        while let Some(key) = map.next_key::<KeyName>()? {
            let counted = match key.0 {
                Some("stacktraces") => Some(("stacktraces", Counted::Stacktraces)),
                Some("modules") => Some(("modules", Counted::Modules)),
                Some("sources") => Some(("sources", Counted::Sources)),
                Some(name) => tally
                    .extra
                    .iter()
                    .find(|(extra, _)| *extra == name)
                    .copied(),
                None => None,
            };
            match counted {
                Some((what, counted)) => map.next_value_seed(CountList {
                    tally: &mut *tally,
                    what,
                    counted,
                    elements: if what == "stacktraces" {
                        Elements::Stacktraces
                    } else {
                        Elements::Skipped
                    },
                })?,
                None => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(self.0.refuse(RequestRefused::NotAnObject(".".into())))
    }
}

/// An object key, named only when it is one of the lists counted (so that reading the
/// others allocates nothing).
struct KeyName(Option<&'static str>);

impl<'de> Deserialize<'de> for KeyName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = KeyName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<KeyName, E> {
                const COUNTED: [&str; 6] = [
                    "stacktraces",
                    "frames",
                    "modules",
                    "sources",
                    "exceptions",
                    "classes",
                ];
                Ok(KeyName(COUNTED.into_iter().find(|name| *name == key)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Counts the elements of one list (`null` is an empty one).
struct CountList<'t, 'a> {
    tally: &'t mut Tally<'a>,
    what: &'static str,
    counted: Counted,
    elements: Elements,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Elements {
    /// Counted, not read.
    Skipped,
    /// Frames: added to the request's total, not read.
    Frames,
    /// Stack traces: each one's frames counted.
    Stacktraces,
}

impl<'de> de::Visitor<'de> for CountList<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let tally = self.tally;
        let mut count = 0usize;
        loop {
            let next = match self.elements {
                Elements::Stacktraces => seq.next_element_seed(Stacktrace {
                    tally: &mut *tally,
                    index: count,
                })?,
                Elements::Skipped | Elements::Frames => {
                    seq.next_element::<de::IgnoredAny>()?.map(drop)
                }
            };
            if next.is_none() {
                return Ok(());
            }
            count += 1;
            let total = if self.elements == Elements::Frames {
                tally.frames += 1;
                tally.frames
            } else {
                count
            };
            if let Err(refused) = tally.limits.check(self.counted, self.what, total) {
                return Err(tally.refuse(refused));
            }
        }
    }
}

struct Stacktrace<'t, 'a> {
    tally: &'t mut Tally<'a>,
    index: usize,
}

impl<'de> de::Visitor<'de> for Stacktrace<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a stack trace")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<KeyName>()? {
            if key.0 == Some("frames") {
                map.next_value_seed(CountList {
                    tally: &mut *self.tally,
                    what: "frames",
                    counted: Counted::Frames,
                    elements: Elements::Frames,
                })?;
            } else {
                map.next_value::<de::IgnoredAny>()?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        let field = format!("stacktraces[{}]", self.index);
        Err(self.tally.refuse(RequestRefused::NotAnObject(field)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_limits_count_lists_before_parsing() {
        let limits = RequestLimits {
            max_modules: 2,
            max_stacktraces: 2,
            max_frames: 3,
            max_sources: 1,
        };
        let check = |body: &str| limits.check_json(body.as_bytes(), &[]);
        let refused = |body: &str| check(body).unwrap_err().to_string();
        let at_limits =
            r#"{"modules":[{},{}],"sources":[{}],"stacktraces":[{"frames":[1,2]},{"frames":[3]}]}"#;
        assert_eq!(check(at_limits), Ok(()));
        assert_eq!(
            refused(r#"{"modules":[{},{},{}]}"#),
            "more than 2 modules (limit `request_limits.max_modules`)"
        );
        assert_eq!(
            refused(r#"{"sources":[{},{}]}"#),
            "more than 1 sources (limit `request_limits.max_sources`)"
        );
        assert_eq!(
            refused(r#"{"stacktraces":[{"frames":[]},{},{"frames":[]}]}"#),
            "more than 2 stacktraces (limit `request_limits.max_stacktraces`)"
        );
        // Frames add up over all stack traces of the request.
        assert_eq!(
            refused(r#"{"stacktraces":[{"frames":[1,2]},{"x":[5,5,5,5],"frames":[3,4]}]}"#),
            "more than 3 frames (limit `request_limits.max_frames`)"
        );
        // A key spelled with escapes is the same key to the real parse.
        assert!(check(r#"{"mod\u0075les":[1,2,3]}"#).is_err());

        // Lists of one endpoint only are counted where the caller names them.
        let classes = r#"{"classes":["a","b","c","d"]}"#;
        assert_eq!(check(classes), Ok(()));
        assert_eq!(
            limits
                .check_json(classes.as_bytes(), &[("classes", Counted::Frames)])
                .unwrap_err()
                .to_string(),
            "more than 3 classes (limit `request_limits.max_frames`)"
        );

        // Objects sent as arrays would hide their lists from the count.
        assert_eq!(
            check(r#"[null, null, [], [[], []]]"#),
            Err(RequestRefused::NotAnObject(".".into()))
        );
        assert_eq!(
            check(r#"{"stacktraces":[{"frames":[]},[null,null,null,{},[1,2,3,4]]]}"#),
            Err(RequestRefused::NotAnObject("stacktraces[1]".into()))
        );

        // What is not JSON or not of the expected types is left to the real parse.
        for body in [
            "{",
            "5",
            r#"{"modules":5}"#,
            r#"{"modules":null}"#,
            r#"{"stacktraces":[5]}"#,
        ] {
            assert_eq!(check(body), Ok(()), "{body}");
        }
    }
}
