//! A ProGuard/R8 mapping file through the JVM pipeline: the ProGuard cache written and
//! mapped back as the cache layer does, then a request remapped by `symbolicate_jvm`
//! (exceptions, frames with inlines, outlines, rewrite rules and synthesized methods,
//! classes). The request is made of the names the mapping itself obfuscates to, so the
//! lookups find something: for each class line (`original -> obfuscated:`), frames for
//! its member lines (`1:5:void run() -> a`) at their first line number.
//!
//! The proguard crate reads the mapping inside `isolate` in the server (the isolating
//! policy); remapping is not isolated.

#![no_main]

use std::collections::HashMap;
use std::io::BufWriter;

use libfuzzer_sys::fuzz_target;
use omnisym::error::{CacheError, CacheResult, isolate};
use omnisym::jvm::interface::{
    JvmException, JvmFrame, JvmModule, JvmModuleType, JvmRequestOptions, JvmStacktrace,
};
use omnisym::jvm::mapping::{load, write_cache};
use omnisym::jvm::{NoSources, ProguardMapper, SymbolicateJvmRequest, symbolicate_jvm};
use omnisym::types::FrameOrder;
use omnisym_fuzz::{install_isolating_hook, isolating, scratch_dir};
use symbolic::common::{ByteView, DebugId};

/// Frames per input; mappings list thousands of members.
const MAX_FRAMES: usize = 64;
const MAPPING_ID: &str = "8d3e6ad8-6f2c-5d4a-9a77-3c1a2c7e9b10";

fuzz_target!(init: install_isolating_hook(), |data: &[u8]| {
    isolating("proguard", data, run);
});

fn run(data: &[u8]) {
    let uuid: DebugId = MAPPING_ID.parse().expect("a valid id");
    let mapper = build(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (frames, classes) = frames(text);
    let exception = classes.first().map(|class| match class.rsplit_once('.') {
        Some((module, ty)) => JvmException {
            ty: ty.into(),
            module: module.into(),
        },
        None => JvmException {
            ty: class.clone(),
            module: String::new(),
        },
    });
    let request = SymbolicateJvmRequest {
        platform: Some("java".into()),
        sources: None,
        exceptions: exception.iter().cloned().collect(),
        stacktraces: vec![JvmStacktrace { exception, frames }],
        modules: vec![JvmModule {
            uuid,
            r#type: JvmModuleType::Proguard,
        }],
        release_package: classes
            .first()
            .and_then(|c| c.split('.').next())
            .map(str::to_owned),
        classes,
        options: JvmRequestOptions {
            apply_source_context: true,
            frame_order: if data.len().is_multiple_of(2) {
                FrameOrder::CallerFirst
            } else {
                FrameOrder::CalleeFirst
            },
        },
    };
    let mappings = HashMap::from([(uuid, mapper)]);
    let _ = symbolicate_jvm(request, &mappings, &NoSources);
}

/// Writes the ProGuard cache into a file and maps it back, as the cache layer does.
fn build(mapping: &[u8]) -> CacheResult<ProguardMapper> {
    let temp = tempfile::NamedTempFile::new_in(scratch_dir()).expect("a temp file");
    let file = temp.reopen().expect("reopening the temp file");
    isolate("proguard", move || {
        write_cache(mapping, &mut BufWriter::new(file))
    })?;
    let view = ByteView::open(temp.path()).map_err(CacheError::internal)?;
    isolate("proguard", || load(view))
}

/// Frames for the obfuscated members of each obfuscated class, and those classes.
fn frames(text: &str) -> (Vec<JvmFrame>, Vec<String>) {
    let mut frames = Vec::new();
    let mut classes = Vec::new();
    let mut class: Option<String> = None;
    for line in text.lines() {
        if frames.len() >= MAX_FRAMES {
            break;
        }
        let Some((left, right)) = line.split_once(" -> ") else {
            continue;
        };
        if !line.starts_with(char::is_whitespace) {
            let obfuscated = right.trim().trim_end_matches(':').to_owned();
            classes.push(obfuscated.clone());
            class = Some(obfuscated);
            continue;
        }
        let Some(module) = &class else {
            continue;
        };
        let lineno = left.trim().split(':').next().and_then(|n| n.parse().ok());
        frames.push(JvmFrame {
            function: right.trim().to_owned(),
            module: module.clone(),
            lineno,
            index: frames.len(),
            ..JvmFrame::default()
        });
    }
    (frames, classes)
}
