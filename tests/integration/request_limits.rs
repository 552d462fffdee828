//! `request_limits`: every endpoint that takes lists refuses a request past a limit with
//! 400 naming it, and serves one at the limit; minidumps are held to the same limits by
//! the threads and modules they list.

use crate::common;

use std::io::Write;

use axum::http::StatusCode;
use common::{Server, SymbolServer, elf_module, fixtures};
use serde_json::{Value, json};

const LIMITS: &str = "request_limits:\n  max_modules: 2\n  max_stacktraces: 2\n  \
                      max_frames: 3\n  max_sources: 1\n";

fn frames(n: usize) -> Value {
    (0..n)
        .map(|i| json!({"instruction_addr": format!("{:#x}", 0x1000 + i)}))
        .collect()
}

fn sources(n: usize) -> Value {
    (0..n)
        .map(|i| json!({"type": "http", "id": format!("s{i}"), "url": "http://127.0.0.1:1/"}))
        .collect()
}

/// Asserts a 400 whose error names `limit`.
fn assert_refused(answer: (StatusCode, Value), limit: &str, what: &str) {
    let (status, body) = answer;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("`request_limits.{limit}`")),
        "{what}: {error}"
    );
}

#[tokio::test]
async fn json_endpoints_refuse_lists_past_their_limits() {
    let server = Server::start(LIMITS);
    let module = elf_module();

    // At every limit at once: served.
    let at_limits = json!({
        "sources": [],
        "modules": [module, module],
        "stacktraces": [{"frames": frames(2)}, {"frames": frames(1)}],
    });
    let (status, body) = server.post("/symbolicate", &at_limits).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed", "{body}");

    let native = [
        (json!({"modules": [module, module, module]}), "max_modules"),
        (
            json!({"stacktraces": [{"frames": []}, {"frames": []}, {"frames": []}]}),
            "max_stacktraces",
        ),
        (
            json!({"stacktraces": [{"frames": frames(2)}, {"frames": frames(2)}]}),
            "max_frames",
        ),
        (json!({"sources": sources(2)}), "max_sources"),
    ];
    for (body, limit) in native {
        assert_refused(server.post("/symbolicate", &body).await, limit, "native");
    }

    let js_module = json!({"type": "sourcemap", "code_file": "http://x/a.min.js",
                           "debug_id": "2f259f80-58b7-44cb-8b95-2e2a5b6dd8c1"});
    let js = [
        (
            json!({"modules": [js_module, js_module, js_module]}),
            "max_modules",
        ),
        (
            json!({"stacktraces": [{"frames": frames(4)}]}),
            "max_frames",
        ),
        (json!({"sources": sources(2)}), "max_sources"),
    ];
    for (body, limit) in js {
        assert_refused(server.post("/symbolicate-js", &body).await, limit, "js");
    }

    let exception = json!({"type": "a", "module": "b"});
    let jvm = [
        (
            json!({"exceptions": [exception, exception, exception]}),
            "max_stacktraces",
        ),
        (json!({"classes": ["a", "b", "c", "d"]}), "max_frames"),
        (
            json!({"stacktraces": [{"frames": frames(4)}]}),
            "max_frames",
        ),
        (json!({"modules": [{}, {}, {}]}), "max_modules"),
    ];
    for (body, limit) in jvm {
        assert_refused(server.post("/symbolicate-jvm", &body).await, limit, "jvm");
    }

    let any = json!({"sources": sources(2), "symbolicate": {"type": "minidump",
                     "storage_url": "http://127.0.0.1:1/dump"}});
    assert_refused(
        server.post("/symbolicate-any", &any).await,
        "max_sources",
        "any",
    );

    // Objects sent as arrays, which would hide their frames from the count.
    let (status, body) = server
        .post(
            "/symbolicate",
            &json!({"stacktraces": [[null, null, null, {}, frames(9)]]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("stacktraces[0]"),
        "{body}"
    );
}

/// A `multipart/form-data` body of (name, data) fields; the first one is a file.
fn form(fields: &[(&str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "omnisym-limits-7d1e";
    let mut body = Vec::new();
    for (i, (name, data)) in fields.iter().enumerate() {
        let filename = if i == 0 { "; filename=\"f\"" } else { "" };
        write!(
            body,
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"{filename}\r\n\r\n"
        )
        .unwrap();
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    write!(body, "--{boundary}--\r\n").unwrap();
    (format!("multipart/form-data; boundary={boundary}"), body)
}

async fn post_form(server: &Server, path: &str, fields: &[(&str, &[u8])]) -> (StatusCode, Value) {
    let (content_type, body) = form(fields);
    server.post_typed(path, &content_type, body).await
}

#[tokio::test]
async fn crash_uploads_are_held_to_the_limits_by_their_forms_and_their_contents() {
    let dump = std::fs::read(fixtures().join("minidump/fp/crash.dmp")).unwrap();
    let two_sources = serde_json::to_vec(&sources(2)).unwrap();

    // A form with too many sources, for either kind of upload.
    let server = Server::start(LIMITS);
    for (path, file_field) in [
        ("/minidump", "upload_file_minidump"),
        ("/applecrashreport", "apple_crash_report"),
    ] {
        let fields: &[(&str, &[u8])] = &[(file_field, &dump), ("sources", &two_sources)];
        assert_refused(post_form(&server, path, fields).await, "max_sources", path);
    }

    // The fixture's dump lists its executable, libc, ld.so and the vDSO: more than two
    // modules. Uploaded, it is refused; fetched by /symbolicate-any, it fails.
    let fields: &[(&str, &[u8])] = &[("upload_file_minidump", &dump), ("sources", b"[]")];
    let (status, body) = post_form(&server, "/minidump", fields).await;
    assert_refused((status, body.clone()), "max_modules", "minidump modules");
    assert!(
        body["error"].as_str().unwrap().contains("minidump modules"),
        "{body}"
    );

    let storage = SymbolServer::start().await;
    storage.put_bytes("crash.dmp", &dump);
    let any = json!({"sources": [], "symbolicate": {"type": "minidump",
                     "storage_url": format!("{}crash.dmp", storage.url)}});
    let (status, body) = server.post("/symbolicate-any", &any).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "failed", "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("`request_limits.max_modules`"),
        "{message}"
    );

    // Threads: the dump has at least one, so a limit of none refuses it.
    let server = Server::start("request_limits:\n  max_stacktraces: 0\n");
    let (status, body) = post_form(&server, "/minidump", fields).await;
    assert_refused(
        (status, body.clone()),
        "max_stacktraces",
        "minidump threads",
    );
    assert!(
        body["error"].as_str().unwrap().contains("minidump threads"),
        "{body}"
    );

    // Within the default limits the same dump is walked.
    let server = Server::start("");
    let (status, body) = post_form(&server, "/minidump", fields).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed", "{body}");
}
