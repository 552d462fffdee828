//! One `/symbolicate-jvm` request, once its files are fetched: which mappings are
//! usable, exceptions, stack traces and classes remapped, source context applied.

use std::collections::{BTreeMap, HashMap};

use proguard::ProguardCache;
use symbolic::common::DebugId;

use super::classes::{remap_class_name, remap_exception};
use super::interface::{
    CompletedJvmSymbolicationResponse, JvmException, JvmStacktrace, ProguardError,
    ProguardErrorKind, SymbolicateJvmRequest,
};
use super::mapping::ProguardMapper;
use super::remap::remap_stacktrace;
use super::source_context::{SourceLookup, apply_source_context};
use crate::error::{CacheError, CacheResult, isolate};
use crate::types::FrameOrder;

/// Symbolicates a JVM event.
///
/// `mappings` holds, per mapping uuid of the request (`request.mapping_ids()`), the
/// outcome of fetching and loading its ProGuard cache; a uuid absent from it counts as
/// not found. `sources` serves the source bundles `request.source_bundle_ids()` lists.
/// The request's `sources` field is not read here: it only says where to fetch from.
///
/// Pure CPU work on memory-mapped caches; no I/O other than what `sources` does.
pub fn symbolicate_jvm<S: SourceLookup + ?Sized>(
    request: SymbolicateJvmRequest,
    mappings: &HashMap<DebugId, CacheResult<ProguardMapper>>,
    sources: &S,
) -> CompletedJvmSymbolicationResponse {
    let (mappers, errors) = usable_mappings(&request, mappings);
    let bundles: Vec<DebugId> = request.source_bundle_ids().collect();
    let SymbolicateJvmRequest {
        exceptions,
        stacktraces,
        release_package,
        classes,
        options,
        ..
    } = request;

    let exceptions = exceptions
        .into_iter()
        .map(|exception| remap_exception_isolated(&mappers, exception))
        .collect();

    // Remapping walks from the frame that threw outwards (outline positions and rewrite
    // rules flow that way); the answer keeps the client's order.
    let caller_first = options.frame_order == FrameOrder::CallerFirst;
    let mut stacktraces: Vec<JvmStacktrace> = stacktraces
        .into_iter()
        .map(|mut stacktrace| {
            let exception = stacktrace
                .exception
                .map(|exception| remap_exception_isolated(&mappers, exception));
            if caller_first {
                stacktrace.frames.reverse();
            }
            let mut frames = remap_stacktrace(
                &mappers,
                &stacktrace.frames,
                exception.as_ref(),
                release_package.as_deref(),
            );
            if caller_first {
                frames.reverse();
            }
            JvmStacktrace { exception, frames }
        })
        .collect();

    if options.apply_source_context && !bundles.is_empty() {
        for frame in stacktraces.iter_mut().flat_map(|st| st.frames.iter_mut()) {
            apply_source_context(frame, &bundles, sources);
        }
    }

    let classes: BTreeMap<_, _> = classes
        .into_iter()
        .filter_map(|class| {
            // As for exceptions: a cache lookup that panics leaves the name as it came.
            let original = isolate("proguard cache", || Ok(remap_class_name(&mappers, &class)))
                .ok()
                .flatten()?;
            Some((class, original.into()))
        })
        .collect();

    CompletedJvmSymbolicationResponse {
        exceptions,
        stacktraces,
        classes,
        errors,
    }
}

/// The remapped exception, or the exception as it came when the mapping does not know
/// it or a lookup in a cache built from an uploaded mapping panics.
fn remap_exception_isolated(
    mappers: &[&ProguardCache<'_>],
    exception: JvmException,
) -> JvmException {
    isolate("proguard cache", || {
        Ok(remap_exception(mappers, &exception))
    })
    .ok()
    .flatten()
    .unwrap_or(exception)
}

/// The loaded mappings in request order, and an error for each one that is not.
fn usable_mappings<'a>(
    request: &SymbolicateJvmRequest,
    mappings: &'a HashMap<DebugId, CacheResult<ProguardMapper>>,
) -> (Vec<&'a ProguardCache<'a>>, Vec<ProguardError>) {
    let mut mappers = Vec::new();
    let mut errors = Vec::new();
    for uuid in request.mapping_ids() {
        let error = match mappings.get(&uuid) {
            Some(Ok(mapper)) => {
                mappers.push(mapper.cache());
                continue;
            }
            Some(Err(error)) => error,
            None => &CacheError::NotFound,
        };
        if *error != CacheError::NotFound {
            tracing::warn!(%uuid, %error, "ProGuard mapping unusable");
        }
        let kind = match error {
            CacheError::Malformed(_) => ProguardErrorKind::Invalid,
            _ => ProguardErrorKind::Missing,
        };
        errors.push(ProguardError { uuid, kind });
    }
    (mappers, errors)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use serde_json::json;
    use symbolic::debuginfo::sourcebundle::{
        SourceBundle, SourceBundleWriter, SourceFileInfo, SourceFileType,
    };

    use super::*;
    use crate::jvm::mapping::tests::{fixture, mapper};
    use crate::jvm::source_context::NoSources;

    fn id(n: u128) -> DebugId {
        DebugId::from_parts(uuid::Uuid::from_u128(n), 0)
    }

    fn request(body: serde_json::Value) -> SymbolicateJvmRequest {
        serde_json::from_value(body).unwrap()
    }

    fn summary(stacktrace: &JvmStacktrace) -> Vec<(String, String, Option<u32>)> {
        stacktrace
            .frames
            .iter()
            .map(|f| (f.module.clone(), f.function.clone(), f.lineno))
            .collect()
    }

    #[test]
    fn errors_list_unusable_mappings_in_request_order() {
        let (good, invalid, absent, failed, bundle) = (id(1), id(2), id(3), id(4), id(5));
        let request = request(json!({
            "modules": [
                {"type": "proguard", "uuid": invalid.to_string()},
                {"type": "source", "uuid": bundle.to_string()},
                {"type": "proguard", "uuid": absent.to_string()},
                {"type": "proguard", "uuid": good.to_string()},
                {"type": "proguard", "uuid": failed.to_string()},
            ],
            "classes": ["a.a"],
        }));
        let mappings = HashMap::from([
            (good, Ok(mapper(&fixture("inline.txt")))),
            (invalid, Err(CacheError::Malformed("not a mapping".into()))),
            (failed, Err(CacheError::DownloadError("503".into()))),
        ]);
        let response = symbolicate_jvm(request, &mappings, &NoSources);
        assert_eq!(
            response.errors,
            [
                ProguardError {
                    uuid: invalid,
                    kind: ProguardErrorKind::Invalid
                },
                ProguardError {
                    uuid: absent,
                    kind: ProguardErrorKind::Missing
                },
                ProguardError {
                    uuid: failed,
                    kind: ProguardErrorKind::Missing
                },
            ]
        );
        // The usable mapping is still used.
        assert_eq!(
            response.classes.get("a.a").map(String::as_str),
            Some("org.birdwatch.app.SightingActivity")
        );
        assert_eq!(
            serde_json::to_value(&response.errors[0]).unwrap(),
            json!({"uuid": invalid.to_string(), "type": "invalid"})
        );
    }

    #[test]
    fn exceptions_and_classes_are_remapped() {
        let uuid = id(1);
        let request = request(json!({
            "modules": [{"type": "proguard", "uuid": uuid.to_string()}],
            "exceptions": [
                {"type": "c", "module": "b"},
                // R8 moved it into the root package: the SDK sends no module.
                {"type": "q", "module": ""},
                // Remapped into the root package.
                {"type": "d", "module": "b"},
                {"type": "IllegalStateException", "module": "java.lang"},
            ],
            "stacktraces": [{"exception": {"type": "c", "module": "b"}, "frames": []}],
            "classes": ["b.a", "b.b", "zz.Unknown", "b.a"],
        }));
        let mappings = HashMap::from([(uuid, Ok(mapper(&fixture("rewrite.txt"))))]);
        let response = symbolicate_jvm(request, &mappings, &NoSources);
        let exceptions = serde_json::to_value(&response.exceptions).unwrap();
        assert_eq!(
            exceptions,
            json!([
                {"type": "SessionExpiredException", "module": "org.birdwatch.app.sync"},
                {"type": "QuotaExceededException", "module": "org.birdwatch.app.sync"},
                {"type": "LegacyCrash", "module": ""},
                {"type": "IllegalStateException", "module": "java.lang"},
            ])
        );
        assert_eq!(
            serde_json::to_value(&response.stacktraces).unwrap(),
            json!([{
                "exception": {"type": "SessionExpiredException", "module": "org.birdwatch.app.sync"},
                "frames": [],
            }])
        );
        assert_eq!(
            serde_json::to_value(&response.classes).unwrap(),
            json!({
                "b.a": "org.birdwatch.app.sync.SyncWorker",
                "b.b": "org.birdwatch.app.sync.SyncScheduler",
            })
        );
    }

    #[test]
    fn frames_are_answered_in_the_order_they_came() {
        let uuid = id(1);
        let mappings = HashMap::from([(uuid, Ok(mapper(&fixture("outline.txt"))))]);
        // The outline frame threw; its caller's rewrite rule applies only if remapping
        // walks from the thrower outwards, whichever order the client sends.
        let thrower = json!({"module": "c.a", "function": "a", "lineno": 2, "index": 0});
        let caller = json!({"module": "c.b", "function": "a", "lineno": 10, "index": 1});
        let unmapped =
            json!({"module": "android.os.Looper", "function": "loop", "lineno": 135, "index": 2});
        let npe = json!({"type": "NullPointerException", "module": "java.lang"});
        let expected = (
            "org.birdwatch.app.SightingFormatter".to_owned(),
            "title".to_owned(),
            Some(15),
        );
        let looper = ("android.os.Looper".to_owned(), "loop".to_owned(), Some(135));

        let callee_first = request(json!({
            "modules": [{"type": "proguard", "uuid": uuid.to_string()}],
            "stacktraces": [{"exception": npe, "frames": [thrower, caller, unmapped]}],
            "options": {"frame_order": "callee_first"},
        }));
        let response = symbolicate_jvm(callee_first, &mappings, &NoSources);
        assert_eq!(
            summary(&response.stacktraces[0]),
            [expected.clone(), looper.clone()]
        );

        // caller_first is the default.
        let caller_first = request(json!({
            "modules": [{"type": "proguard", "uuid": uuid.to_string()}],
            "stacktraces": [{"exception": npe, "frames": [unmapped, caller, thrower]}],
        }));
        let response = symbolicate_jvm(caller_first, &mappings, &NoSources);
        assert_eq!(summary(&response.stacktraces[0]), [looper, expected]);
    }

    #[test]
    fn request_bodies_parse_as_upstream_reads_them() {
        let minimal = request(json!({}));
        assert_eq!(
            minimal.options,
            crate::jvm::interface::JvmRequestOptions {
                apply_source_context: true,
                frame_order: FrameOrder::CallerFirst,
            }
        );
        assert!(minimal.sources.is_none() && minimal.release_package.is_none());

        let full = request(json!({
            "platform": "java",
            "sources": [{"type": "http", "id": "maps", "url": "https://maps.example/", "layout": {"type": "native"}}],
            "release_package": "org.birdwatch.app",
            "stacktraces": [{"frames": [{"function": "a", "module": "a.a", "index": 3, "unknown_field": 1}]}],
            "options": {"apply_source_context": false},
        }));
        assert_eq!(full.sources.as_ref().map(Vec::len), Some(1));
        assert_eq!(full.stacktraces[0].exception, None);
        assert_eq!(full.stacktraces[0].frames[0].index, 3);
        assert!(!full.options.apply_source_context);
        assert_eq!(full.options.frame_order, FrameOrder::CallerFirst);

        // What upstream requires, and what it rejects.
        for (body, field) in [
            (
                json!({"stacktraces": [{"frames": [{"module": "a.a", "index": 0}]}]}),
                "function",
            ),
            (
                json!({"stacktraces": [{"frames": [{"function": "a", "index": 0}]}]}),
                "module",
            ),
            (
                json!({"stacktraces": [{"frames": [{"function": "a", "module": "a.a"}]}]}),
                "index",
            ),
            (json!({"exceptions": [{"type": "E"}]}), "module"),
            (
                json!({"modules": [{"type": "elf", "uuid": id(1).to_string()}]}),
                "elf",
            ),
            (
                json!({"modules": [{"type": "proguard", "uuid": "not-an-id"}]}),
                "DebugId",
            ),
        ] {
            let err = serde_json::from_value::<SymbolicateJvmRequest>(body.clone()).unwrap_err();
            assert!(err.to_string().contains(field), "{body}: {err}");
        }
    }

    #[test]
    fn responses_serialise_field_for_field_as_upstream() {
        let uuid = id(1);
        let request = request(json!({
            "modules": [{"type": "proguard", "uuid": uuid.to_string()}],
            "stacktraces": [{"frames": [
                {"function": "a", "module": "d.a", "index": 0},
                {"function": "onClick", "module": "d.b", "lineno": 1, "index": 1, "in_app": true},
            ]}],
            "options": {"frame_order": "callee_first"},
        }));
        let mappings = HashMap::from([(uuid, Ok(mapper(&fixture("synthesized.txt"))))]);
        let response = symbolicate_jvm(request, &mappings, &NoSources);
        // `exception: null` is written, empty and false fields are not, `classes` is a map.
        assert_eq!(
            serde_json::to_string(&response).unwrap(),
            concat!(
                r#"{"exceptions":[],"stacktraces":[{"exception":null,"frames":[{"#,
                r#""function":"$r8$lambda$Kq3dW8","filename":"SightingList.kt","#,
                r#""module":"org.birdwatch.app.ui.SightingList","abs_path":"SightingList.kt","#,
                r#""lineno":0,"index":0,"method_synthesized":true}]}],"classes":{},"errors":[]}"#
            )
        );
    }

    /// A source bundle as Sentry's JVM tooling writes it, made with symbolic's writer.
    fn source_bundle(files: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        let mut writer = SourceBundleWriter::start(&mut out).unwrap();
        for (url, text) in files {
            let mut info = SourceFileInfo::new();
            info.set_ty(SourceFileType::Source);
            info.set_url((*url).to_owned());
            let path = url.trim_start_matches("~/");
            writer.add_file(path, text.as_bytes(), info).unwrap();
        }
        writer.finish().unwrap();
        out.into_inner()
    }

    #[test]
    fn source_context_comes_from_the_bundles_by_remapped_class_and_file() {
        let activity: String = (1..=45).map(|n| format!("activity line {n}\n")).collect();
        let species: String = (1..=20).map(|n| format!("species line {n}\n")).collect();
        let bytes = source_bundle(&[
            ("~/org/birdwatch/app/SightingActivity.jvm", &activity),
            ("~/org/birdwatch/app/Species.jvm", &species),
        ]);
        let bundle = SourceBundle::parse(&bytes).unwrap();
        let session = bundle.debug_session().unwrap();
        let (mapping, bundle_id, unfetched) = (id(1), id(2), id(3));
        let sources = |debug_id: DebugId, path: &str| -> Option<String> {
            if debug_id != bundle_id {
                return None;
            }
            let file = session.source_by_url(path).ok()??;
            file.contents().map(str::to_owned)
        };

        let body = json!({
            "modules": [
                {"type": "source", "uuid": unfetched.to_string()},
                {"type": "source", "uuid": bundle_id.to_string()},
                {"type": "proguard", "uuid": mapping.to_string()},
            ],
            "stacktraces": [{"frames": [
                {"function": "onCreate", "module": "a.a", "lineno": 4, "index": 0},
                {"function": "loop", "module": "android.os.Looper", "lineno": 135, "index": 1},
            ]}],
            "options": {"frame_order": "callee_first"},
        });
        let mappings = HashMap::from([(mapping, Ok(mapper(&fixture("inline.txt"))))]);
        let response = symbolicate_jvm(request(body.clone()), &mappings, &sources);
        let frames = &response.stacktraces[0].frames;
        let context: Vec<_> = frames
            .iter()
            .map(|f| (f.function.as_str(), f.context_line.as_deref()))
            .collect();
        assert_eq!(
            context,
            [
                ("displayName", Some("species line 12")),
                // The bundle has no file for this class.
                ("label", None),
                ("onCreate", Some("activity line 33")),
                ("loop", None),
            ]
        );
        assert_eq!(
            frames[2].pre_context,
            (28..=32)
                .map(|n| format!("activity line {n}"))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            frames[2].post_context,
            (34..=38)
                .map(|n| format!("activity line {n}"))
                .collect::<Vec<_>>()
        );

        let mut no_context = request(body);
        no_context.options.apply_source_context = false;
        let response = symbolicate_jvm(no_context, &mappings, &sources);
        assert!(
            response.stacktraces[0]
                .frames
                .iter()
                .all(|f| f.context_line.is_none() && f.pre_context.is_empty())
        );
    }
}
