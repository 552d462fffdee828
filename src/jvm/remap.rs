//! Remapping the frames of one stack trace through the request's ProGuard mappings, as
//! upstream Symbolicator (and R8's `retrace`) do it: inlined frames expanded, outline
//! calls folded into their callers, R8 rewrite rules applied for the thrown exception,
//! compiler-synthesized frames dropped, and what cannot be remapped kept as it came.

use std::panic::AssertUnwindSafe;

use proguard::{DeobfuscatedSignature, ProguardCache, StackFrame};

use super::interface::{JvmException, JvmFrame};
use crate::error::panicked;

/// Remaps `frames`, which must be in callee-first order (the thrown-at frame first):
/// outline positions carry from a frame to its caller, and rewrite rules apply to the
/// first frame only. The result is callee-first too; every frame keeps the `index` of
/// the input frame it came from.
///
/// `exception` is the (already remapped) exception the stack trace threw. Mappings are
/// tried in order; the first that can say anything about a frame wins.
pub fn remap_stacktrace(
    mappers: &[&ProguardCache<'_>],
    frames: &[JvmFrame],
    exception: Option<&JvmException>,
    release_package: Option<&str>,
) -> Vec<JvmFrame> {
    let exception_descriptor =
        exception.map(|exc| proguard::class_name_to_descriptor(&exc.full_class_name()));
    let mut state = TraceState {
        // R8 writes rewrite rules for the frame that threw; outline frames in between
        // are not real frames, so they keep that chance for the next one.
        may_rewrite: exception_descriptor.is_some(),
        exception_descriptor,
        outline_positions: vec![None; mappers.len()],
    };

    let mut remapped = Vec::with_capacity(frames.len());
    for frame in frames {
        // The caches were built from uploaded mappings; a lookup that panics in one
        // leaves this frame as the client sent it.
        let before = remapped.len();
        let caught = std::panic::catch_unwind(AssertUnwindSafe(|| {
            remap_frame(mappers, frame, release_package, &mut state, &mut remapped)
        }));
        if let Err(payload) = caught {
            let _ = panicked("proguard cache", payload);
            remapped.truncate(before);
            remapped.push(frame.clone());
        }
    }
    remapped
}

/// What remapping one frame leaves for the next (its caller).
struct TraceState {
    exception_descriptor: Option<String>,
    may_rewrite: bool,
    /// Per mapping: the position inside an outlined method that the previous frame was
    /// at, which the caller's mapping translates into its own line.
    outline_positions: Vec<Option<usize>>,
}

/// What one mapping made of a frame.
enum Remapped {
    /// The frame is a call into an outlined method: not a frame of the original program.
    Outline,
    /// A rewrite rule removed every frame it expanded to.
    Removed,
    Frames(Vec<JvmFrame>),
    /// The mapping knows nothing about the method at this line.
    Unknown,
}

fn remap_frame(
    mappers: &[&ProguardCache<'_>],
    frame: &JvmFrame,
    release_package: Option<&str>,
    state: &mut TraceState,
    out: &mut Vec<JvmFrame>,
) {
    let signature = frame.signature.as_deref().and_then(|signature| {
        mappers
            .iter()
            .find_map(|mapper| mapper.deobfuscate_signature(signature))
    });
    let parameters = signature.as_ref().map(parameter_list);

    // The line picks the mapping entry; without one, the parameter types can; without
    // either, line 0 asks the `proguard` crate for what `retrace` reports then (the
    // outermost entry only).
    let query = match (frame.lineno, &parameters) {
        (Some(line), _) => StackFrame::new(&frame.module, &frame.function, line as usize),
        (None, Some(parameters)) => {
            StackFrame::with_parameters(&frame.module, &frame.function, parameters)
        }
        (None, None) => StackFrame::new(&frame.module, &frame.function, 0),
    };

    let mut mapped = None;
    for (mapper, outline_position) in mappers.iter().zip(&mut state.outline_positions) {
        match remap_full(
            mapper,
            &query,
            frame,
            state.exception_descriptor.as_deref(),
            state.may_rewrite,
            outline_position,
        ) {
            Remapped::Outline => return,
            Remapped::Removed => {
                state.may_rewrite = false;
                return;
            }
            Remapped::Frames(frames) => {
                mapped = Some(frames);
                break;
            }
            Remapped::Unknown => {}
        }
        if let Some(frame) = remap_method(mapper, frame).or_else(|| remap_class(mapper, frame)) {
            mapped = Some(vec![frame]);
            break;
        }
    }
    state.may_rewrite = false;

    let mut frames = match mapped {
        Some(mut frames) => {
            // `retrace` drops compiler-synthesized methods (lambda bridges, ...) only when
            // it selected entries by line; without a line it keeps them, and so do we, so
            // results match what users see from tools built on `retrace`.
            if frame.lineno.is_some() {
                frames.retain(|frame| !frame.method_synthesized);
                if frames.is_empty() {
                    return;
                }
            }
            if let Some(package) = release_package {
                for frame in &mut frames {
                    if frame.in_app.is_none() && frame.module.starts_with(package) {
                        frame.in_app = Some(true);
                    }
                }
            }
            frames
        }
        None => vec![frame.clone()],
    };

    if let Some(signature) = &signature {
        let formatted = signature.format_signature();
        for frame in &mut frames {
            frame.signature = Some(formatted.clone());
        }
    }
    out.append(&mut frames);
}

/// `int,java.lang.String`: the form mapping files list parameter types in.
fn parameter_list(signature: &DeobfuscatedSignature) -> String {
    signature.parameters_types().collect::<Vec<_>>().join(",")
}

/// The full remapping: class, method, line and file, inlined frames expanded (innermost
/// first), outlines and rewrite rules applied.
fn remap_full<'a>(
    mapper: &'a ProguardCache<'a>,
    query: &StackFrame<'a>,
    original: &JvmFrame,
    exception_descriptor: Option<&str>,
    may_rewrite: bool,
    outline_position: &mut Option<usize>,
) -> Remapped {
    let Some(iter) =
        mapper.remap_frame_with_context(query, exception_descriptor, may_rewrite, outline_position)
    else {
        return Remapped::Outline;
    };
    let had_mappings = iter.had_mappings();
    let frames: Vec<JvmFrame> = iter
        .map(|remapped| {
            let file = remapped.file().map(str::to_owned);
            // Field by field rather than `..original.clone()`: that would copy the
            // strings replaced here too, on the path every warm frame takes.
            JvmFrame {
                platform: original.platform.clone(),
                function: remapped.method().to_owned(),
                filename: file.clone().or_else(|| original.filename.clone()),
                module: remapped.class().to_owned(),
                abs_path: file.or_else(|| original.abs_path.clone()),
                lineno: remapped.line().and_then(|line| u32::try_from(line).ok()),
                pre_context: original.pre_context.clone(),
                context_line: original.context_line.clone(),
                post_context: original.post_context.clone(),
                in_app: original.in_app,
                index: original.index,
                signature: original.signature.clone(),
                method_synthesized: remapped.method_synthesized(),
            }
        })
        .collect();
    match (frames.is_empty(), had_mappings) {
        (false, _) => Remapped::Frames(frames),
        (true, true) => Remapped::Removed,
        (true, false) => Remapped::Unknown,
    }
}

/// Class and method only, for frames whose line the mapping does not cover; only when
/// every entry of the obfuscated name is the same original method (no guessing between
/// overloads or inlinees).
fn remap_method(mapper: &ProguardCache<'_>, frame: &JvmFrame) -> Option<JvmFrame> {
    let (class, method) = mapper.remap_method(&frame.module, &frame.function)?;
    Some(JvmFrame {
        module: class.to_owned(),
        function: method.to_owned(),
        ..frame.clone()
    })
}

/// The class alone, when the mapping knows nothing of the method.
fn remap_class(mapper: &ProguardCache<'_>, frame: &JvmFrame) -> Option<JvmFrame> {
    let class = mapper.remap_class(&frame.module)?;
    Some(JvmFrame {
        module: class.to_owned(),
        ..frame.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jvm::mapping::ProguardMapper;
    use crate::jvm::mapping::tests::{fixture, mapper};

    fn frame(module: &str, function: &str, lineno: Option<u32>, index: usize) -> JvmFrame {
        JvmFrame {
            module: module.into(),
            function: function.into(),
            lineno,
            index,
            filename: Some("SourceFile".into()),
            abs_path: Some("SourceFile".into()),
            ..Default::default()
        }
    }

    fn exception(module: &str, ty: &str) -> JvmException {
        JvmException {
            ty: ty.into(),
            module: module.into(),
        }
    }

    /// `(module, function, lineno, index)` of each frame, for compact comparisons.
    fn summary(frames: &[JvmFrame]) -> Vec<(&str, &str, Option<u32>, usize)> {
        frames
            .iter()
            .map(|f| (f.module.as_str(), f.function.as_str(), f.lineno, f.index))
            .collect()
    }

    fn remap(
        mapper: &ProguardMapper,
        frames: &[JvmFrame],
        exception: Option<&JvmException>,
    ) -> Vec<JvmFrame> {
        remap_stacktrace(&[mapper.cache()], frames, exception, None)
    }

    const ACTIVITY: &str = "org.birdwatch.app.SightingActivity";

    #[test]
    fn inlined_frames_expand_innermost_first_keeping_the_index() {
        let mapper = mapper(&fixture("inline.txt"));
        let frames = [
            JvmFrame {
                platform: Some("java".into()),
                ..frame("a.a", "onCreate", Some(4), 3)
            },
            frame("a.a", "onCreate", Some(8), 4),
        ];
        let remapped = remap(&mapper, &frames, None);
        // What remapping does not replace stays as the client sent it.
        let platforms: Vec<_> = remapped.iter().map(|f| f.platform.as_deref()).collect();
        assert_eq!(platforms, [Some("java"), Some("java"), Some("java"), None]);
        assert_eq!(
            summary(&remapped),
            [
                ("org.birdwatch.app.Species", "displayName", Some(12), 3),
                ("org.birdwatch.app.SightingRepository", "label", Some(48), 3),
                (ACTIVITY, "onCreate", Some(33), 3),
                // 5:11 → 35:41: line 8 is the fourth line of the span.
                (ACTIVITY, "onCreate", Some(38), 4),
            ]
        );
        // File names come from the mapping's source-file metadata, or are made from the
        // class name with the extension of the outer class's file.
        let files: Vec<_> = remapped.iter().map(|f| f.filename.as_deref()).collect();
        assert_eq!(
            files,
            [
                Some("Species.kt"),
                Some("SightingRepository.kt"),
                Some("SightingActivity.kt"),
                Some("SightingActivity.kt")
            ]
        );
        assert!(remapped.iter().all(|f| f.abs_path == f.filename));
    }

    #[test]
    fn lines_pick_between_methods_sharing_an_obfuscated_name() {
        let mapper = mapper(&fixture("inline.txt"));
        let frames = [frame("a.a", "a", Some(3), 0), frame("a.a", "a", Some(8), 1)];
        assert_eq!(
            summary(&remap(&mapper, &frames, None)),
            [
                (ACTIVITY, "saveSighting", Some(62), 0),
                ("org.birdwatch.app.Species", "validate", Some(19), 1),
                (ACTIVITY, "shareSighting", Some(82), 1),
            ]
        );
    }

    #[test]
    fn without_a_line_the_signature_picks_the_overload() {
        let mapper = mapper(&fixture("inline.txt"));
        let with_signature = JvmFrame {
            signature: Some("(Lorg/birdwatch/app/Sighting;Ljava/lang/String;)V".into()),
            ..frame("a.a", "a", None, 0)
        };
        let remapped = remap(&mapper, &[with_signature], None);
        // The line is the start of the method's first range.
        assert_eq!(
            summary(&remapped),
            [(ACTIVITY, "shareSighting", Some(80), 0)]
        );
        // The signature comes back in Java notation.
        assert_eq!(
            remapped[0].signature.as_deref(),
            Some("(org.birdwatch.app.Sighting, java.lang.String)")
        );

        // Neither line nor signature: only the outermost entry is reported, as `retrace`
        // does.
        let bare = remap(&mapper, &[frame("a.a", "a", None, 1)], None);
        assert_eq!(summary(&bare), [(ACTIVITY, "saveSighting", Some(0), 1)]);
    }

    #[test]
    fn signatures_are_deobfuscated_even_on_frames_that_stay_as_they_came() {
        let mapper = mapper(&fixture("inline.txt"));
        let unknown = JvmFrame {
            signature: Some("(La/b;I)Ljava/lang/String;".into()),
            ..frame("android.os.Handler", "dispatchMessage", Some(95), 0)
        };
        let remapped = remap(&mapper, std::slice::from_ref(&unknown), None);
        assert_eq!(
            remapped,
            [JvmFrame {
                signature: Some(
                    "(org.birdwatch.app.SightingRepository, int): java.lang.String".into()
                ),
                ..unknown
            }]
        );
    }

    #[test]
    fn frames_no_mapping_knows_come_back_as_they_came() {
        let mapper = mapper(&fixture("inline.txt"));
        let unknown = JvmFrame {
            platform: Some("java".into()),
            in_app: Some(false),
            pre_context: vec!["before".into()],
            context_line: Some("line".into()),
            post_context: vec!["after".into()],
            ..frame("android.os.Looper", "loop", Some(135), 5)
        };
        let without_line = frame("java.lang.reflect.Method", "invoke", None, 6);
        let frames = [unknown, without_line];
        assert_eq!(remap(&mapper, &frames, None), frames);
        // And with no mapping at all.
        assert_eq!(
            remap_stacktrace(&[], &frames, None, Some("android")),
            frames
        );
    }

    #[test]
    fn what_the_mapping_does_not_cover_keeps_method_or_line() {
        let mapper = mapper(&fixture("inline.txt"));
        let frames = [
            // A method the class's mapping does not list: only the class is remapped.
            frame("a.a", "zzz", Some(1), 0),
            // A line outside every range of a known method: class only, line as it came.
            frame("a.a", "onCreate", Some(99), 1),
            // A class without members in the mapping.
            frame("a.e", "format", Some(3), 2),
        ];
        assert_eq!(
            summary(&remap(&mapper, &frames, None)),
            [
                (ACTIVITY, "zzz", Some(1), 0),
                (ACTIVITY, "onCreate", Some(99), 1),
                ("org.birdwatch.app.util.Formatter", "format", Some(3), 2),
            ]
        );
    }

    #[test]
    fn line_less_mappings_still_remap_class_and_method() {
        let mapper = mapper(&fixture("no_lines.txt"));
        let importer = "org.birdwatch.app.legacy.Importer";
        let frames = [
            frame("e.a", "a", Some(42), 0),
            frame("e.a", "c", None, 1),
            // Two methods share `d` and nothing tells them apart: both are reported.
            frame("e.a", "d", Some(7), 2),
            frame("e.b", "x", Some(2), 3),
        ];
        let remapped = remap(&mapper, &frames, None);
        assert_eq!(
            summary(&remapped),
            [
                (importer, "parse", Some(42), 0),
                (importer, "isSupported", Some(0), 1),
                (importer, "readHeader", Some(7), 2),
                (importer, "readBody", Some(7), 2),
                ("org.birdwatch.app.legacy.CsvRow", "x", Some(2), 3),
            ]
        );
        assert_eq!(remapped[0].filename.as_deref(), Some("Importer.java"));
    }

    const WORKER: &str = "org.birdwatch.app.sync.SyncWorker";
    const SCHEDULER: &str = "org.birdwatch.app.sync.SyncScheduler";

    #[test]
    fn rewrite_rules_remove_inner_frames_of_the_throwing_frame() {
        let mapper = mapper(&fixture("rewrite.txt"));
        let frames = [frame("b.a", "a", Some(3), 0), frame("b.b", "b", Some(7), 1)];
        let npe = exception("java.lang", "NullPointerException");
        assert_eq!(
            summary(&remap(&mapper, &frames, Some(&npe))),
            [
                (WORKER, "doWork", Some(18), 0),
                // The caller's rule is for another exception, and only the first frame
                // is ever rewritten.
                (WORKER, "start", Some(12), 1),
                (SCHEDULER, "schedule", Some(30), 1),
            ]
        );

        let all_inlines = [
            (
                "org.birdwatch.app.sync.Uploader",
                "requireToken",
                Some(44),
                0,
            ),
            ("org.birdwatch.app.sync.Uploader", "upload", Some(37), 0),
            (WORKER, "doWork", Some(18), 0),
            (WORKER, "start", Some(12), 1),
            (SCHEDULER, "schedule", Some(30), 1),
        ];
        // Another exception, or none: nothing removed.
        let ise = exception("java.lang", "IllegalStateException");
        assert_eq!(summary(&remap(&mapper, &frames, Some(&ise))), all_inlines);
        assert_eq!(summary(&remap(&mapper, &frames, None)), all_inlines);
        // The caller's rule applies when its frame is the one that threw.
        assert_eq!(
            summary(&remap(&mapper, &frames[1..], Some(&ise))),
            [(SCHEDULER, "schedule", Some(30), 1)]
        );
    }

    #[test]
    fn rewrite_rules_match_the_remapped_exception() {
        let mapper = mapper(&fixture("rewrite.txt"));
        let frames = [frame("b.a", "a", Some(5), 0)];
        let expired = exception("org.birdwatch.app.sync", "SessionExpiredException");
        assert_eq!(
            summary(&remap(&mapper, &frames, Some(&expired))),
            [(WORKER, "doWork", Some(22), 0)]
        );
    }

    #[test]
    fn a_frame_whose_rule_removes_every_frame_is_dropped() {
        let mapper = mapper(&fixture("rewrite.txt"));
        let frames = [frame("b.a", "a", Some(6), 0), frame("b.b", "b", Some(7), 1)];
        let oom = exception("java.lang", "OutOfMemoryError");
        assert_eq!(
            summary(&remap(&mapper, &frames, Some(&oom))),
            [
                (WORKER, "start", Some(12), 1),
                (SCHEDULER, "schedule", Some(30), 1)
            ]
        );
    }

    const FORMATTER: &str = "org.birdwatch.app.SightingFormatter";

    #[test]
    fn outline_frames_fold_into_their_callers_line() {
        let mapper = mapper(&fixture("outline.txt"));
        // The outline ran at its position 2; the caller's callsite maps that to its line 42.
        let frames = [
            frame("c.a", "a", Some(2), 0),
            frame("c.b", "a", Some(10), 1),
        ];
        assert_eq!(
            summary(&remap(&mapper, &frames, None)),
            [
                ("org.birdwatch.app.Sighting", "commonName", Some(8), 1),
                (FORMATTER, "title", Some(15), 1),
            ]
        );
        // The outline frame is no real frame: the rewrite rule still applies to the
        // frame after it.
        let npe = exception("java.lang", "NullPointerException");
        assert_eq!(
            summary(&remap(&mapper, &frames, Some(&npe))),
            [(FORMATTER, "title", Some(15), 1)]
        );
        // Without the outline before it, the callsite line itself is used.
        assert_eq!(
            summary(&remap(&mapper, &frames[1..], None)),
            [(FORMATTER, "title", Some(0), 1)]
        );
    }

    #[test]
    fn synthesized_methods_are_dropped_when_a_line_selected_them() {
        let mapper = mapper(&fixture("synthesized.txt"));
        let list = "org.birdwatch.app.ui.SightingList";
        let frames = [
            frame("d.b", "onClick", Some(1), 0),
            frame("d.a", "a", Some(1), 1),
            frame("d.a", "b", Some(3), 2),
            frame("d.a", "c", Some(3), 3),
        ];
        assert_eq!(
            summary(&remap(&mapper, &frames, None)),
            [
                (list, "onItemClicked$lambda$0", Some(54), 2),
                // The inlined `access$` accessor is gone, its caller stays.
                (list, "bind", Some(88), 3),
            ]
        );

        // Without a line `retrace` keeps them, flagged.
        let remapped = remap(&mapper, &[frame("d.a", "a", None, 4)], None);
        assert_eq!(
            summary(&remapped),
            [(list, "$r8$lambda$Kq3dW8", Some(0), 4)]
        );
        assert!(remapped[0].method_synthesized);
    }

    #[test]
    fn compose_group_keys_remap_to_their_composables() {
        let mapper = mapper(&fixture("compose.txt"));
        let frames = [
            frame("$$compose", "m$2093317765", Some(1), 0),
            frame("$$compose", "m$2093401622", Some(1), 1),
            frame("$$compose", "m$1038871127", Some(1), 2),
        ];
        let remapped = remap(&mapper, &frames, None);
        let card = "org.birdwatch.app.ui.SightingCardKt";
        assert_eq!(
            summary(&remapped),
            [
                (card, "SightingCard", Some(44), 0),
                (card, "SightingCard", Some(51), 1),
                ("org.birdwatch.app.ui.MapScreenKt", "MapScreen", Some(19), 2),
            ]
        );
        assert_eq!(remapped[0].filename.as_deref(), Some("SightingCard.kt"));
    }

    #[test]
    fn release_package_marks_remapped_frames_in_app_unless_decided() {
        let mapper = mapper(&fixture("inline.txt"));
        let frames = [
            frame("a.a", "onCreate", Some(4), 0),
            JvmFrame {
                in_app: Some(false),
                ..frame("a.b", "c", Some(2), 1)
            },
            // Not remapped: left alone even though its name matches.
            frame("org.birdwatch.app.Unmapped", "run", Some(1), 2),
        ];
        let remapped = remap_stacktrace(
            &[mapper.cache()],
            &frames,
            None,
            Some("org.birdwatch.app.Sighting"),
        );
        let in_app: Vec<_> = remapped
            .iter()
            .map(|f| (f.function.as_str(), f.in_app))
            .collect();
        assert_eq!(
            in_app,
            [
                // Species does not start with the package; the other two do.
                ("displayName", None),
                ("label", Some(true)),
                ("onCreate", Some(true)),
                ("loadAll", Some(false)),
                ("run", None),
            ]
        );
    }

    #[test]
    fn the_first_mapping_that_knows_a_frame_wins() {
        let inline = mapper(&fixture("inline.txt"));
        let other = mapper(b"org.other.Thing -> a.a:\n    1:1:void run():5:5 -> onCreate\n");
        let frames = [
            frame("a.a", "onCreate", Some(1), 0),
            frame("a.b", "c", Some(1), 1),
        ];
        let remapped = remap_stacktrace(&[inline.cache(), other.cache()], &frames, None, None);
        assert_eq!(
            summary(&remapped),
            [
                (ACTIVITY, "onCreate", Some(30), 0),
                (
                    "org.birdwatch.app.SightingRepository",
                    "loadAll",
                    Some(25),
                    1
                ),
            ]
        );
        let remapped = remap_stacktrace(&[other.cache(), inline.cache()], &frames, None, None);
        assert_eq!(
            summary(&remapped),
            [
                ("org.other.Thing", "run", Some(5), 0),
                // Only the second mapping knows this class.
                (
                    "org.birdwatch.app.SightingRepository",
                    "loadAll",
                    Some(25),
                    1
                ),
            ]
        );
    }
}
