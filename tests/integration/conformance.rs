//! Runs the upstream-conformance corpus (`../shared/conformance`, present beside the
//! clone in CI) against the real server. The cases this milestone covers must pass; the
//! score of every other case is printed. Without the corpus the test reports a skip.

use crate::common;

use std::path::Path;
use std::process::Command;

/// Cases that must match upstream exactly: the native `/symbolicate` milestone, the
/// crash-report endpoints (minidumps, Apple crash reports, `/symbolicate-any`), JVM, JavaScript, and every
/// other case that already passes, so none regresses.
const REQUIRED: &[&str] = &[
    "minidump_linux",
    "minidump_macos",
    "minidump_macos_broken_cfi",
    "minidump_windows",
    "minidump_attachment_download",
    "endpoint_minidump_basic",
    "endpoint_applecrashreport_basic",
    "native_apple_crash_report",
    "applecrashreport_attachment_download",
    "native_e2e_minidump_symstore_index",
    "native_source_candidates",
    "native_nuget_source_no_checksum",
    "native_srcsrv_pdb_with_srcsrv",
    "native_srcsrv_pdb_without_srcsrv",
    "native_dotnet_integration",
    "native_dotnet_embedded_sources",
    "native_dotnet_windows_pdb",
    "endpoint_symbolicate_no_dif_candidates",
    "endpoint_symbolicate_unknown_source_config",
    "endpoint_requests_timeouts",
    "native_add_bucket",
    "native_add_bucket_2",
    "native_remove_bucket",
    "native_remove_bucket_2",
    "native_e2e_no_sources",
    "native_e2e_sources_filetypes",
    "native_wasm_payload",
    "jvm_basic_source_lookup",
    "jvm_compose_stacktrace_group_keys",
    "jvm_no_line_info_mapping",
    "jvm_remap_exception",
    "jvm_resolving_inline",
    "jvm_rewrite_frames",
    "jvm_source_lookup_with_proguard",
    "js_dart_async_name",
    "js_e2e_multiple_smref_scraped",
    "js_e2e_node_debugid",
    "js_e2e_react_native",
    "js_e2e_scraped_debugid",
    "js_e2e_source_no_header",
    "js_fetch_error",
    "js_indexed_sourcemap_source_expansion",
    "js_inlined_sources",
    "js_invalid_location",
    "js_malformed_abs_path",
    "js_no_source_contents",
    "js_sorted_bundles",
    "js_source_expansion",
    "js_sourcemap_embedded_source_expansion",
    "js_sourcemap_expansion",
    "js_sourcemap_nofiles_source_expansion",
    "js_sourcemap_source_expansion",
    "js_webpack",
];

#[test]
fn conformance_corpus() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance");
    if !corpus.join("run.py").exists() {
        // A missing corpus must not look like a pass: skipping takes a decision.
        assert_eq!(
            std::env::var("OMNISYM_CONFORMANCE").as_deref(),
            Ok("skip"),
            "no conformance corpus at {}: put upstream's corpus there, or set \
             OMNISYM_CONFORMANCE=skip to run without it",
            corpus.display()
        );
        println!("SKIPPED: no conformance corpus at {}", corpus.display());
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(async { common::Server::start("") });
    let output = Command::new("python3")
        .arg(corpus.join("run.py"))
        .args(["--server", &server.url, "--timeout", "60"])
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    let mut failed = Vec::new();
    for case in REQUIRED {
        let passed = stdout
            .lines()
            .any(|l| l.starts_with("PASS") && l.split_whitespace().any(|w| w == *case));
        if !passed {
            failed.push(*case);
        }
    }
    assert!(
        failed.is_empty(),
        "required conformance cases failed: {failed:?}\nserver log:\n{}",
        server.log()
    );
}
